"""synthesize_alltoall on named topologies: LP optimum, rounding, errors, determinism."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest

from synth.alltoall_cg import synthesize_alltoall
from synth.bounds.alltoall import alltoall_rate_GBps
from synth.errors import SolverError, TimeLimitError
from synth.figures import AllToAllFigures
from synth.result import Status
from synth.topologies import load_topology, named_topology
from tests.synth.alltoall_cg._helpers import assert_valid_alltoall

SMALL_SPECS = ["hpn:1x2x8", "hpn:1x2x4", "hpn:2x2x2", "dgx-a100:2", "dgx-h100:2", "nvswitch:4", "ring:5",
               "torus:3x3", "h200-proto"]


@pytest.mark.parametrize("spec", SMALL_SPECS)
@pytest.mark.parametrize("failure", [None, "fail1", "fail2", "fail3"])
def test_lp_optimum_matches_compact_lp(spec: str, failure: str | None) -> None:
    if failure and not spec.startswith(("hpn", "dgx", "h200")):
        pytest.skip("failure scenarios need NVSwitch and NIC neighbours")
    topo = load_topology(spec, [failure] if failure else [])
    res = synthesize_alltoall(topo)
    ref = topo.nranks * alltoall_rate_GBps(topo).rate_GBps
    assert res.figures.lp_algbw_GBps == pytest.approx(ref, rel=1e-6)
    assert res.optimal_algbw_GBps == pytest.approx(ref, rel=1e-6)
    assert_valid_alltoall(res, topo, 10)


@pytest.mark.parametrize("spec", ["hpn:1x2x8", "hpn:1x4x8", "dgx-a100:4", "dgx-h100:2", "hpn:2x2x4"])
@pytest.mark.parametrize("failure", ["fail1", "fail2", "fail3"])
def test_rounding_within_one_percent_on_hpn_and_dgx(spec: str, failure: str) -> None:
    topo = load_topology(spec, [failure])
    res = synthesize_alltoall(topo, nchunks=10)
    assert_valid_alltoall(res, topo, 10)
    assert res.figures.gap <= 0.01
    assert res.gap_pct == pytest.approx(100 * res.figures.gap)
    assert res.schedule is not None and res.schedule.bottleneck  # a saturated link exists


def test_tiny_hpn_rounding_gap_is_small() -> None:
    # 8 GPUs with a 6.25 GB/s NIC: K=10 granularity on a handful of links costs up to ~1.5 %.
    topo = load_topology("hpn:1x2x4", ["fail2"])
    res = synthesize_alltoall(topo)
    assert_valid_alltoall(res, topo, 10)
    assert res.figures.gap <= 0.02


@pytest.mark.parametrize("nchunks", [1, 2, 4])
def test_fewer_chunks_still_validate(nchunks: int) -> None:
    topo = load_topology("hpn:1x2x4", ["fail2"])
    res = synthesize_alltoall(topo, nchunks=nchunks)
    assert_valid_alltoall(res, topo, nchunks)
    per_block: dict[tuple[int, int | None], int] = {}
    assert res.schedule is not None
    for route in res.schedule.routes:
        per_block[(route.root, route.dest)] = per_block.get((route.root, route.dest), 0) + 1
    assert max(per_block.values()) <= nchunks


def test_figures_and_meta_are_reported() -> None:
    res = synthesize_alltoall(named_topology("hpn:1x2x8"))
    assert isinstance(res.figures, AllToAllFigures)
    assert res.figures.cg_iterations >= 1 and res.figures.columns > 0 and res.figures.cg_time_s >= 0
    assert res.figures.lp_bound_algbw_GBps == res.figures.lp_algbw_GBps and res.figures.gap == 0.0
    assert res.figures.max_steps == 2
    assert res.schedule is not None and res.schedule.meta["max_steps"] == 2
    assert res.warm is False and res.warm_state is not None


def test_step_sweep_grows_past_the_hop_diameter_when_it_costs_throughput() -> None:
    # Under fail3 rank 0's links are so slow that 3-hop relays beat 2-hop paths.
    topo = load_topology("hpn:1x2x8", ["fail3"])
    res = synthesize_alltoall(topo)
    assert res.figures.hop_diameter == 2 and res.figures.max_steps == 3
    capped = synthesize_alltoall(topo, max_steps=2)
    assert capped.figures.lp_algbw_GBps < res.figures.lp_algbw_GBps * (1 - 1e-6)
    assert_valid_alltoall(capped, topo, 10)
    assert all(len(r.hops) <= 2 for r in capped.schedule.routes)  # type: ignore[union-attr]


def test_max_steps_below_hop_diameter_raises_naming_it() -> None:
    with pytest.raises(SolverError, match=r"max_steps=1 is below the hop diameter 2"):
        synthesize_alltoall(named_topology("hpn:1x2x4"), max_steps=1)


@pytest.mark.parametrize(
    ("kwargs", "culprit"),
    [
        ({"nchunks": 0}, r"nchunks must be an integer >= 1, got 0"),
        ({"nchunks": 2.5}, r"nchunks .* got 2\.5"),
        ({"solver": "gurobi"}, r"unknown LP solver 'gurobi'; allowed: highs, ortools"),
        ({"time_limit_s": -1.0}, r"time_limit_s .* got -1\.0"),
        ({"max_steps": 0}, r"max_steps .* got 0"),
        ({"warm_start": "old.json"}, r"warm_start must be .* got str"),
    ],
)
def test_bad_arguments_raise_solver_error(kwargs: dict[str, object], culprit: str) -> None:
    with pytest.raises(SolverError, match=culprit):
        synthesize_alltoall(named_topology("nvswitch:4"), **kwargs)  # type: ignore[arg-type]


def test_time_limit_returns_incumbent_with_certified_gap() -> None:
    topo = load_topology("hpn:1x4x8", ["fail3"])
    res = synthesize_alltoall(topo, time_limit_s=1e-6)
    assert res.status in (Status.TIME_LIMIT, Status.OPTIMAL)
    assert res.schedule is not None
    res.schedule.validate(topo)
    ref = topo.nranks * alltoall_rate_GBps(topo).rate_GBps
    assert res.optimal_algbw_GBps >= ref * (1 - 1e-6)  # a proven upper bound on the optimum
    assert res.algbw_GBps <= ref * (1 + 1e-9)
    if res.status is Status.TIME_LIMIT:
        assert res.gap_pct > 0
        assert "time limit" in res.message


def test_a_limit_past_during_setup_fails_at_once_not_after_building(monkeypatch: pytest.MonkeyPatch) -> None:
    """The phases do not stop midway; at 2048 GPUs a 3 s limit ran 29 s (setup, one CG iteration, rounding)
    before building the schedule failed. Past the limit and its grace after setup, the solve stops there."""
    import synth.alltoall_cg._schedule as sched_module

    monkeypatch.setattr(sched_module, "SCHEDULE_GRACE_S", 0.0)  # no grace: any limit has passed after setup
    topo = load_topology("hpn:1x2x8", ["fail2"])
    with pytest.raises(TimeLimitError, match=r"reached setting up the path pool after") as err:
        synthesize_alltoall(topo, time_limit_s=1e-9)
    assert err.value.upper_algbw_GBps is None  # no LP solved yet: no bound to report
    prev = synthesize_alltoall(topo)
    monkeypatch.setattr(sched_module, "ROUTE_COST_S", 1.0)  # building 240 routes would take ~120 s: not within 30 s
    with pytest.raises(TimeLimitError, match=r"after \d+ CG iterations \(and ~120 s more to build the schedule\)"):
        synthesize_alltoall(topo, time_limit_s=30.0)
    # a warm column generation (no repair) reuses the previous routes: no cold build to estimate, so it runs on
    res = synthesize_alltoall(topo, time_limit_s=30.0, warm_start=prev, local_repair=False)
    assert res.figures.warm_mode == "state" and res.schedule is not None


def test_progress_is_logged_not_printed(caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]) -> None:
    with caplog.at_level(logging.INFO, logger="synth.alltoall_cg"):
        synthesize_alltoall(named_topology("hpn:1x2x4"))
    assert any("iteration" in r.getMessage() for r in caplog.records)
    out = capsys.readouterr()
    assert out.out == "" and out.err == ""


def test_same_input_same_bytes_under_two_hash_seeds() -> None:
    code = ("from synth.alltoall_cg import synthesize_alltoall; from synth.topologies import load_topology; "
            "import sys; sys.stdout.write(synthesize_alltoall(load_topology('hpn:1x2x4', ['fail2'])).schedule.to_json())")
    outs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={"PYTHONHASHSEED": seed, "PATH": ""}).stdout for seed in ("1", "2")]
    assert outs[0] == outs[1] and outs[0].startswith("{")


def test_topology_argument_is_not_modified() -> None:
    topo = load_topology("hpn:1x2x4", ["fail2"])
    before = topo.fingerprint, topo.links
    synthesize_alltoall(topo)
    assert (topo.fingerprint, topo.links) == before

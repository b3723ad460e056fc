"""Extreme capacity ratios (issue #30, item 5): every bound and schedule is right or refused.

Rule 0 of docs/exactness.md clamps a dominant link (above N × the other live links' sum) before the
floor and the grid, so a 1e15 or 1e308 Gbit/s link no longer lifts the ordinary links; capacities
outside 1e-100 … 1e100 Gbit/s (denormals) and lifted links that could move a figure are refused
with one TopologyError. The bounds are checked against brute-force cut enumeration on the
*unrounded* capacities (tests/synth/test_measured_capacities.py) and against the AllToAll LP of the
fabric with the scaled link at the others' sum × N.

Examples per test: ``LOOPCOLL_FUZZ_EXAMPLES`` (default 20).
"""

from __future__ import annotations

import json
import math
import os
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synth import optimal_bound, synthesize
from synth.errors import TopologyError
from synth.result import Status
from synth.topologies import Link, Topology, named_topology, topology_to_dict
from synth.topologies.capacity import decimal_gbps
from tests.loopcoll._run import run
from tests.strategies import random_topologies
from tests.synth.test_measured_capacities import _brute_force_allgather_gbps

EXAMPLES = int(os.environ.get("LOOPCOLL_FUZZ_EXAMPLES", "20"))


def _with(topo: Topology, src: str, dst: str, gbps: float) -> Topology:
    return topo.with_link(src, dst, gbps=gbps)


def _true_allgather_GBps(topo: Topology) -> Fraction:  # noqa: N802
    """The exact AllGather algbw on the capacities as written (no clamp, floor or grid)."""
    return topo.nranks * _brute_force_allgather_gbps(topo, lambda lk: decimal_gbps(lk.gbps)) / 8


def _others_times_n(topo: Topology, src: str, dst: str) -> float:
    return topo.nranks * sum(lk.gbps for lk in topo.live_links if lk.key != (src, dst))


@pytest.mark.parametrize("gbps", [1e15, 1e308])
@pytest.mark.parametrize("collective", ["allgather", "reducescatter", "allreduce"])
def test_huge_link_leaves_the_tree_bounds_and_schedules_exact(collective: str, gbps: float) -> None:
    topo = _with(named_topology("ring:4"), "gpu0", "gpu1", gbps)
    bound = optimal_bound(collective, topo)  # type: ignore[arg-type]
    # On main: 333 333 GB/s (1e15: every other link lifted to 1e6 Gbit/s) or a max-flow overflow (1e308).
    assert bound.success and bound.algbw_GBps == pytest.approx(400 / 3 if collective != "allreduce" else 200 / 3)
    if collective == "allgather":
        assert bound.rate_GBps * topo.nranks == _true_allgather_GBps(topo)
    assert ("gpu0", "gpu1") not in bound.bottleneck
    res = synthesize(collective, topo, routing="free")  # type: ignore[call-overload]
    assert res.status is Status.OPTIMAL and res.schedule is not None
    res.schedule.validate(topo)
    assert res.schedule.algbw_GBps(topo) == pytest.approx(bound.algbw_GBps, rel=1e-12)


@pytest.mark.parametrize("gbps", [1e15, 1e308])
def test_huge_link_leaves_the_alltoall_bound_right(gbps: float) -> None:
    base = named_topology("ring:4")
    topo = _with(base, "gpu0", "gpu1", gbps)
    reference = optimal_bound("alltoall", _with(base, "gpu0", "gpu1", _others_times_n(base, "gpu0", "gpu1")))
    bound = optimal_bound("alltoall", topo)
    # On main: 250 000 GB/s (1e15) or an 'Unbounded' LP (1e308); the CG synthesizer said 2.5e307 GB/s.
    assert bound.success and bound.algbw_GBps == pytest.approx(reference.algbw_GBps, rel=1e-7)
    res = synthesize("alltoall", topo, routing="free")
    assert res.schedule is not None and res.optimal_algbw_GBps == pytest.approx(reference.algbw_GBps, rel=1e-6)
    res.schedule.validate(topo)
    assert res.schedule.algbw_GBps(topo) <= reference.algbw_GBps * (1 + 1e-7)


def test_clamp_is_recorded_and_the_simulator_reads_it() -> None:
    topo = _with(named_topology("ring:4"), "gpu0", "gpu1", 1e15)
    grid = topo.capacity_grid
    assert dict(grid.clamped) == {("gpu0", "gpu1"): Fraction(10**15)}
    assert topo.exact_capacity("gpu0", "gpu1") == _others_times_n(topo, "gpu0", "gpu1")
    assert all(topo.exact_capacity(*lk.key) == 400 for lk in topo.links if lk.key != ("gpu0", "gpu1"))
    assert not grid.lifted


@pytest.mark.parametrize("collective", ["allgather", "alltoall"])
def test_all_denormal_capacities_are_refused_naming_a_link(collective: str) -> None:
    base = named_topology("ring:4")
    topo = base.with_links([Link(lk.src, lk.dst, 5e-324, lk.latency_us) for lk in base.links])
    # On main: allgather 0.000 GB/s, synth a ZeroDivisionError traceback, alltoall 'unreachable'.
    with pytest.raises(TopologyError, match=r"link gpu\d->gpu\d at 4\.94066e-324 Gbit/s, is below"):
        optimal_bound(collective, topo)  # type: ignore[arg-type]
    with pytest.raises(TopologyError, match="is below"):
        synthesize(collective, topo)  # type: ignore[call-overload]


def test_uniformly_tiny_fabric_is_exact_not_lifted() -> None:
    # The compact AllToAll LP said 1.33 × the optimum at 1e-9 × a ring's capacities on main.
    base = named_topology("ring:4")
    tiny = base.with_links([Link(lk.src, lk.dst, lk.gbps * 1e-9, lk.latency_us) for lk in base.links])
    for collective in ("allgather", "alltoall"):
        nominal = optimal_bound(collective, base).algbw_GBps  # type: ignore[arg-type]
        assert optimal_bound(collective, tiny).algbw_GBps == pytest.approx(nominal * 1e-9, rel=1e-7)  # type: ignore[arg-type]


def test_a_tiny_link_under_a_dominant_pair_is_kept_exact_by_the_clamp() -> None:
    # gpu2 hangs on gpu0 by links 1e-12 × the 400 Gbit/s pair gpu0<->gpu1: on main the floor lifted
    # them 1000-fold (bound 1000 × too high); rule 0 clamps the pair instead, and the bound is exact.
    base = named_topology("ring:3")
    line = base.with_links([Link(lk.src, lk.dst, lk.gbps * (1e-12 if "gpu2" in lk.key else 1.0), lk.latency_us)
                            for lk in base.links if {lk.src, lk.dst} != {"gpu1", "gpu2"}])
    assert set(line.capacity_grid.clamped) == {("gpu0", "gpu1"), ("gpu1", "gpu0")} and not line.capacity_grid.lifted
    assert optimal_bound("allgather", line).rate_GBps * 3 == _true_allgather_GBps(line)


def _no_gpu_free_of_big_links() -> Topology:
    """Every GPU has a 400 Gbit/s link out, so rule 0 cannot clamp; {gpu0, gpu1} leaves by 4e-10 only."""
    base = named_topology("ring:3")
    caps = {("gpu0", "gpu1"): 400.0, ("gpu1", "gpu0"): 400.0, ("gpu2", "gpu0"): 400.0, ("gpu2", "gpu1"): 400.0,
            ("gpu0", "gpu2"): 4e-10, ("gpu1", "gpu2"): 4e-10}
    return base.with_links([Link(a, b, gbps, 0.5) for (a, b), gbps in caps.items()])


def test_a_lifted_link_that_can_move_the_bound_is_refused() -> None:
    topo = _no_gpu_free_of_big_links()
    assert set(topo.capacity_grid.lifted) == {("gpu0", "gpu2"), ("gpu1", "gpu2")} and not topo.capacity_grid.clamped
    # On main: 1.5e-4 GB/s, 1000 × the true 1.5e-7 GB/s (the floor lifted both links to 4e-7 Gbit/s).
    for collective in ("allgather", "alltoall"):
        with pytest.raises(TopologyError, match=r"gpu0->gpu2, gpu1->gpu2 \(4e-10 Gbit/s, 1e-12 of the largest"):
            optimal_bound(collective, topo)  # type: ignore[arg-type]
        with pytest.raises(TopologyError, match="raised to the solvers' resolution"):
            synthesize(collective, topo)  # type: ignore[arg-type]


@st.composite
def _scaled_fabrics(draw: st.DrawFn) -> tuple[Topology, Topology, tuple[str, str]]:
    base = draw(random_topologies(min_gpus=2, max_gpus=4, max_switches=2, allow_down=False))
    lk = draw(st.sampled_from(base.live_links))
    # The ends of the range first: they are where main's floor and grid went wrong.
    exponent = draw(st.one_of(st.sampled_from([15.0, -12.0, 12.0, -9.0]), st.floats(-12.0, 15.0)))
    return base, _with(base, lk.src, lk.dst, lk.gbps * 10.0**exponent), lk.key


@settings(max_examples=EXAMPLES, deadline=None)
@given(_scaled_fabrics(), st.sampled_from(["allgather", "alltoall"]))
def test_one_scaled_link_never_raises_a_bound(case: tuple[Topology, Topology, tuple[str, str]],
                                              collective: str) -> None:
    base, topo, key = case
    try:
        bound = optimal_bound(collective, topo)  # type: ignore[arg-type]
    except TopologyError:
        assert topo.capacity_grid.lifted, "only a lifted link may make a bound refuse"
        return
    assert bound.success
    if collective == "allgather":
        # Exact on the capacities as written, up to the grid's rounding (tiny on these fabrics).
        assert bound.algbw_GBps == pytest.approx(float(_true_allgather_GBps(topo)), rel=1e-6)
    else:
        ceiling = _with(base, *key, max(topo.link(*key).gbps, _others_times_n(base, *key)))
        assert bound.algbw_GBps <= optimal_bound("alltoall", ceiling).algbw_GBps * (1 + 1e-6)
        if topo.link(*key).gbps >= base.link(*key).gbps:  # never below the nominal fabric either
            assert bound.algbw_GBps >= optimal_bound("alltoall", base).algbw_GBps * (1 - 1e-6)


def _extreme_file(tmp_path: Path, name: str, gbps: float, every: bool = False) -> str:
    doc = topology_to_dict(named_topology("ring:4"))
    for i, link in enumerate(doc["links"]):
        if every or i == 0:
            link["gbps"] = gbps
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(doc))
    return str(path)


@pytest.mark.parametrize("gbps", [1e15, 1e308])
def test_cli_bound_synth_simulate_give_the_physical_limit(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                          gbps: float) -> None:
    path = _extreme_file(tmp_path, "ext", gbps)
    code, out, err = run(capsys, "bound", "allgather", path)
    assert code == 0, err
    assert "algbw 133.333 GB/s" in out
    code, out, err = run(capsys, "synth", "allgather", path, "-o", str(tmp_path / "ag.xml"))
    assert code == 0, err
    assert "algbw 133.333 GB/s, optimal 133.333 GB/s (100.00%)" in out
    code, out, err = run(capsys, "simulate", "allgather", path, "--json")
    assert code == 0, err
    figures = [v for v in _numbers(json.loads(out)) if v > 0]
    # No simulated figure (synthesized or NCCL-like) passes the physical limit; on main NCCL had 40 238.
    assert figures and max(figures) <= 133.34


def _numbers(doc: object) -> list[float]:
    """Every *_GBps number in a JSON document."""
    found: list[float] = []
    if isinstance(doc, dict):
        for key, value in doc.items():
            if isinstance(value, (int, float)) and key.endswith("GBps") and math.isfinite(value):
                found.append(float(value))
            else:
                found += _numbers(value)
    elif isinstance(doc, list):
        for item in doc:
            found += _numbers(item)
    return found


@pytest.mark.parametrize("command", [["bound", "allgather"], ["bound", "alltoall"], ["synth", "allgather"],
                                     ["simulate", "allgather"]])
def test_cli_refuses_denormal_fabric_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 command: list[str]) -> None:
    path = _extreme_file(tmp_path, "denormal", 5e-324, every=True)
    extra = ["-o", str(tmp_path / "x.xml")] if command[0] == "synth" else []
    code, out, err = run(capsys, *command, path, *extra)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("loopcoll: error: ") and "below" in lines[0], err
    assert "Traceback" not in err


def test_routed_trees_refuse_a_clamped_fabric_and_free_routing_stays_exact() -> None:
    from synth.routed.fabrics import random_fabric

    base = random_fabric(1, 4)
    big = max(base.links, key=lambda lk: lk.gbps)
    topo = _with(base, big.src, big.dst, 1e15)
    assert set(topo.capacity_grid.clamped) == {big.key}
    bound = optimal_bound("allgather", topo, routed=True)
    assert bound.success and bound.routed_algbw_GBps is None and "no routed optimum" in bound.message
    assert bound.rate_GBps * topo.nranks == _true_allgather_GBps(topo)
    with pytest.raises(TopologyError, match=rf"{big.src}->{big.dst} \(1e\+15 Gbit/s.*routed allgather"):
        synthesize("allgather", topo, routing="routed")
    free = synthesize("allgather", topo, routing="free")
    assert free.status is Status.OPTIMAL and free.schedule is not None
    assert free.schedule.rate_GBps(topo) == bound.rate_GBps
    # Routed AllToAll is covered by rule 0: its figure stands.
    assert optimal_bound("alltoall", topo, routed=True).routed_algbw_GBps is not None


def test_a_schedule_that_loads_a_lifted_link_is_refused() -> None:
    # No GPU is free of the 1 Gbit/s links, so rule 0 cannot clamp; the floor lifts gpu0<->gpu1
    # 5e5-fold. The bound moves by < 1e-6 (certified), but a tree over the lifted pair would run 5e5 ×
    # slower than its rate on the raised capacity says.
    base = named_topology("ring:3")
    caps = {("gpu0", "gpu1"): 2e-15, ("gpu1", "gpu0"): 2e-15, ("gpu0", "gpu2"): 1.0, ("gpu2", "gpu0"): 1.0,
            ("gpu1", "gpu2"): 1.0, ("gpu2", "gpu1"): 1.0}
    topo = base.with_links([Link(a, b, gbps, 0.5) for (a, b), gbps in caps.items()])
    assert set(topo.capacity_grid.lifted) == {("gpu0", "gpu1"), ("gpu1", "gpu0")}
    bound = optimal_bound("allgather", topo)
    assert bound.algbw_GBps == pytest.approx(float(_true_allgather_GBps(topo)), rel=1e-6)
    with pytest.raises(TopologyError, match=r"the schedule loads link\(s\) gpu0->gpu1"):
        synthesize("allgather", topo, routing="free")

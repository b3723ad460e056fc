"""AllToAll chunk choice (issue 31): within 0.1 % of the optimum it is held to, or ``feasible`` with the
binding limit named.

The property tests draw random irregular fabrics (``synth.routed.fabrics.random_fabric``, small) and
random multi-NIC switch fabrics (``tests.strategies.switch_fabrics``), routed (the default where
pairs have a route choice) and free. CI runs a few examples; ``LOOPCOLL_ROUNDING_EXAMPLES=100`` runs
more.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from msccl_xml import check, lower, parse, program_algbw_GBps, write
from synth import synthesize
from synth.alltoall_cg import synthesize_alltoall
from synth.alltoall_cg.chunks import TARGET_LOSS, BlockPaths, choose_chunks, chunk_cap, exact_nchunks, mip_round
from synth.errors import SolverError
from synth.result import Status
from synth.routed import synthesize_routed_alltoall
from synth.routed.fabrics import mi250_like, random_fabric
from synth.topologies import Topology, load_topology

from tests.strategies import switch_fabrics
from tests.synth._judged import assert_judged

EXAMPLES = int(os.environ.get("LOOPCOLL_ROUNDING_EXAMPLES", "4"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=EXAMPLES <= 10,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _held_to(r: object) -> float:
    return float(r.optimal_algbw_GBps)  # type: ignore[attr-defined]


def _assert_within_target_or_bound(topo: Topology, routing: str) -> None:
    r = synthesize("alltoall", topo, routing=routing)
    assert r.success and r.schedule is not None, r.message
    r.schedule.validate(topo)
    assert r.algbw_GBps == pytest.approx(r.schedule.algbw_GBps(topo), rel=1e-12)
    assert_judged(r.status, r.algbw_GBps, _held_to(r), r.gap_pct, r.message)
    assert r.schedule.nchunks == r.figures.nchunks <= 64
    if r.gap_pct > 100 * TARGET_LOSS:
        assert r.status is Status.FEASIBLE
        assert r.figures.binding_limit, r.figures
        assert r.figures.binding_limit in r.message
    else:
        assert r.figures.binding_limit is None


@SETTINGS
@given(seed=st.integers(0, 10**6), n=st.integers(4, 8), routing=st.sampled_from(["auto", "free"]))
def test_random_irregular_fabrics_round_within_target(seed: int, n: int, routing: str) -> None:
    _assert_within_target_or_bound(random_fabric(seed, n), routing)


@SETTINGS
@given(topo=switch_fabrics(), routing=st.sampled_from(["auto", "free"]))
def test_multi_nic_fabrics_round_within_target(topo: Topology, routing: str) -> None:
    _assert_within_target_or_bound(topo, routing)


def test_mi250_box_reaches_the_optimum_with_12_chunks_and_its_xml_delivers_it() -> None:
    # 10 chunks per block lose 1.25-4.8 % on this box (issue 31); the LP's splits need a multiple of 3.
    topo = mi250_like(1)
    for r in (synthesize_alltoall(topo, nchunks=None), synthesize_routed_alltoall(topo, nchunks=None)):
        assert r.status is Status.OPTIMAL, r.message
        assert r.schedule is not None and r.schedule.nchunks % 3 == 0
        program = parse(write(lower(r.schedule)))
        assert check(program).valid
        assert program_algbw_GBps(program, topo) == pytest.approx(r.optimal_algbw_GBps, rel=1e-9)


@pytest.mark.parametrize("fn", [synthesize_alltoall, synthesize_routed_alltoall])
def test_a_given_nchunks_is_kept_and_named_as_the_binding_limit(fn: object) -> None:
    r = fn(mi250_like(1), nchunks=10)  # type: ignore[operator]
    assert r.schedule.nchunks == 10
    assert r.status is Status.FEASIBLE and r.gap_pct > 100 * TARGET_LOSS
    assert r.figures.binding_limit == "nchunks=10" and "bound by nchunks=10" in r.message


def test_max_nchunks_caps_the_choice() -> None:
    r = synthesize_alltoall(mi250_like(1), nchunks=None, max_nchunks=11)
    assert r.schedule is not None and r.schedule.nchunks <= 11
    assert r.status is Status.FEASIBLE and r.figures.binding_limit == "max_nchunks=11"


def test_bad_rounding_arguments_are_named() -> None:
    with pytest.raises(SolverError, match="max_nchunks"):
        synthesize_alltoall(mi250_like(1), max_nchunks=0)
    with pytest.raises(SolverError, match="rounding_budget_s"):
        synthesize_routed_alltoall(mi250_like(1), rounding_budget_s=-1.0)


def test_chunk_cap_follows_the_executor_offsets() -> None:
    assert chunk_cap(8, None, None) == (10, 64, "max_nchunks=64")
    first, cap, name = chunk_cap(2048, None, None)
    assert (first, cap) == (10, 16) and "32768" in name


def test_exact_k_from_the_denominators() -> None:
    assert exact_nchunks(np.array([0.25, 0.75, 1 / 6, 5 / 6]), 64, 10) == 12
    assert exact_nchunks(np.array([0.5]), 64, 10) == 10
    assert exact_nchunks(np.array([1 / 7, 1 / 11]), 64, 10) is None  # lcm 77 > 64


def _two_paths(share: float) -> BlockPaths:
    return BlockPaths(np.array([0, 0]), np.array([0, 1, 2]), np.array([0, 1]), np.array([1.0, 2.0]),
                      np.array([share, 1.0 - share]))


def test_choice_stops_at_the_cap_and_names_it() -> None:
    pick = choose_chunks(_two_paths(1 / 3), 10, 11, budget_s=1.0)
    assert pick.nchunks in (10, 11) and pick.loss > TARGET_LOSS
    assert pick.binding == "at most 11 chunks per block"
    assert choose_chunks(_two_paths(1 / 3), 10, 64, budget_s=1.0).loss == 0.0


def test_mip_balances_blocks_that_largest_remainder_stacks() -> None:
    # Two blocks that split 0.5/0.5 over the same two links: largest remainder puts both odd chunks
    # on link 0 (ties broken alike); the MIP spreads them.
    bp = BlockPaths(np.array([0, 0, 1, 1]), np.array([0, 1, 2, 3, 4]), np.array([0, 1, 0, 1]),
                    np.array([1.0, 1.0]), np.full(4, 0.5))
    x = mip_round(bp, 3, 1.0)
    assert x is not None and bp.loss(x, 3) == 0.0


def test_warm_repair_names_its_limit_or_gives_way_to_the_chunk_choice() -> None:
    healthy, topo = load_topology("hpn:1x2x8"), load_topology("hpn:1x2x8", ["fail2"])
    fixed = synthesize_alltoall(topo, nchunks=10, warm_start=synthesize_alltoall(healthy, nchunks=10))
    assert fixed.figures.warm_mode == "repair" and fixed.gap_pct > 100 * TARGET_LOSS  # 0.195 % at 10 chunks
    assert fixed.figures.binding_limit == "nchunks=10" and "nchunks=10" in fixed.message
    chosen = synthesize_alltoall(topo, nchunks=None, warm_start=synthesize_alltoall(healthy, nchunks=None))
    assert chosen.warm and chosen.gap_pct <= 100 * TARGET_LOSS, chosen.message

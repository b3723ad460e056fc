"""Fast paths of the ForestColl phases: each is exact, and each fallback is reached and exact.

* phase 2: unchecked (optimistic / hinted) splittings verified once, falling back to checked;
* phase 3: tests decided without a max-flow (first edge, known tight sets), checked against the
  max-flow under ``VERIFY_SHORTCUTS``;
* warm start: old trees repaired, truncated or dropped, each verified by Lovász's condition.
"""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings

from synth.forestcoll_warm import _splitting, synthesize_allgather
from synth.kernels import packing
from synth.forestcoll_warm._optimum import IntGraph, exact_optimum
from synth.kernels.packing import pack
from synth.forestcoll_warm._splitting import SplitHint, split_switches
from synth.forestcoll_warm.warm import _lovasz_ok, accept_old_trees
from synth.maxflow import FlowNetwork
from synth.schedule import Schedule
from synth.topologies import Topology, load_topology
from tests.synth.forestcoll_warm._helpers import assert_exact_optimal
from tests.synth.forestcoll_warm.test_properties import eulerian_topologies


def _edmonds_ok(arcs: dict[tuple[int, int], int], n: int, k: int) -> bool:
    """Independent check of the phase-2 output: λ(s,v) ≥ N·k with s→g of capacity k."""
    net = FlowNetwork(n + 1)
    keys = sorted(arcs)
    if keys:
        net.add_arcs([a for a, _ in keys], [b for _, b in keys], [arcs[e] for e in keys])
    net.add_arcs([n] * n, list(range(n)), [k] * n)
    return all(net.max_flow(n, v) >= n * k for v in range(n))


def _split_inputs(topo: Topology) -> tuple[IntGraph, object]:
    g = IntGraph.from_topology(topo)
    return g, exact_optimum(g, topo)


@pytest.mark.parametrize("spec", ["nvswitch:4", "hpn:1x2x8", "dgx-a100:2", "hpn:2x2x4", "h200-proto"])
@pytest.mark.parametrize("failures", [[], ["fail2"]])
def test_optimistic_and_checked_splittings_are_both_valid(spec: str, failures: list[str]) -> None:
    if failures and spec.startswith("nvswitch"):
        pytest.skip("no NIC/ToR to fail")
    g, opt = _split_inputs(load_topology(spec, failures))
    fast = _splitting._split(g, opt, None, "optimistic")
    slow = _splitting._split(g, opt, None, "checked")
    assert fast is not None and slow is not None
    for res in (fast, slow):
        assert _edmonds_ok(res.arcs, g.n_gpus, opt.k)
        for key, pool in res.pools.items():
            assert sum(units for _, units in pool) == res.arcs[key]
    assert split_switches(g, opt).figures.mode == "optimistic"
    assert fast.figures.maxflows == g.n_gpus  # one verification, no per-split checks


def test_failed_verification_falls_back_to_checked_splitting(monkeypatch: pytest.MonkeyPatch) -> None:
    topo = load_topology("dgx-a100:2")
    g, opt = _split_inputs(topo)
    monkeypatch.setattr(_splitting._State, "verify", lambda self, certify=True: False)
    res = split_switches(g, opt)
    assert res.figures.mode == "checked"
    assert _edmonds_ok(res.arcs, g.n_gpus, opt.k)
    assert_exact_optimal(synthesize_allgather(topo), topo)


def test_harmful_hint_is_rejected_and_checked_splitting_stays_exact() -> None:
    # Splitting gpu0→nvs→gpu0 by all of gpu0's capacity cuts gpu0 off: the unchecked tiers fail
    # their verification, and the checked tier splits only what keeps the invariant.
    topo = load_topology("nvswitch:4")
    g, opt = _split_inputs(topo)
    sw = g.names[g.n_gpus]
    gbps = Fraction(10**6)
    hint = SplitHint(order=[sw], pairs={sw: [("gpu0", "gpu0", gbps), ("gpu1", "gpu1", gbps)]}, incident={})
    assert _splitting._split(g, opt, hint, "optimistic") is None
    assert _splitting._split(g, opt, hint, "hinted") is None
    res = split_switches(g, opt, hint)
    assert res.figures.mode == "checked"
    assert _edmonds_ok(res.arcs, g.n_gpus, opt.k)


def test_good_hint_is_applied_in_bulk() -> None:
    healthy = synthesize_allgather(load_topology("hpn:1x2x8")).schedule
    assert healthy is not None
    topo = load_topology("hpn:1x2x8", ["fail1"])
    res = synthesize_allgather(topo, warm_start=Schedule.from_json(healthy.to_json()))
    assert_exact_optimal(res, topo)
    assert res.figures.split.mode == "optimistic" and res.figures.split.bulk > 0
    assert res.figures.split.maxflows == topo.nranks


@settings(max_examples=60, deadline=None)
@given(eulerian_topologies())
def test_random_topologies_every_split_tier_is_valid(topo: Topology) -> None:
    g, opt = _split_inputs(topo)
    for mode in ("optimistic", "checked"):
        try:
            res = _splitting._split(g, opt, None, mode)
        except _splitting.SplitStuck:
            assert mode == "optimistic"
            continue
        if res is None:
            assert mode == "optimistic"
            continue
        assert _edmonds_ok(res.arcs, g.n_gpus, opt.k)


@pytest.mark.parametrize("spec", ["hpn:1x2x8", "dgx-a100:2", "torus:4x4", "hpn:2x2x4", "h200-proto"])
def test_packing_shortcuts_agree_with_the_max_flow(spec: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(packing, "VERIFY_SHORTCUTS", True)
    topo = load_topology(spec)
    res = synthesize_allgather(topo)
    assert_exact_optimal(res, topo)
    assert res.figures.packing.skipped > 0


@settings(max_examples=60, deadline=None)
@given(eulerian_topologies())
def test_random_topologies_packing_shortcuts_agree(topo: Topology) -> None:
    old = packing.VERIFY_SHORTCUTS
    packing.VERIFY_SHORTCUTS = True
    try:
        assert_exact_optimal(synthesize_allgather(topo), topo)
    finally:
        packing.VERIFY_SHORTCUTS = old


def test_pack_grows_partial_initial_classes() -> None:
    # Complete digraph on 3 GPUs, capacity 2, k = 2. Root 0 starts with one unit on 0→1 and one
    # fresh unit, root 2 with two units on 2→0; residual capacities exclude what they use.
    cap = {(a, b): 2 for a in range(3) for b in range(3) if a != b}
    cap[(0, 1)] -= 1
    cap[(2, 0)] -= 2
    initial = [(0, 1, [(0, 1)]), (0, 1, []), (1, 2, []), (2, 2, [(2, 0)])]
    assert _lovasz_ok(cap, 3, [(0, 1, [0, 1]), (0, 1, [0]), (1, 2, [1]), (2, 2, [2, 0])])[0]
    classes = pack(cap, 3, 2, initial=initial)
    units: dict[tuple[int, int], int] = {}
    for c in classes:
        assert sorted(c.nodes) == [0, 1, 2] and c.nodes[0] == c.root
        for e in c.edges:
            units[e] = units.get(e, 0) + c.mult
    assert {r: sum(c.mult for c in classes if c.root == r) for r in range(3)} == {0: 2, 1: 2, 2: 2}
    initial_units = {(0, 1): 1, (2, 0): 2}
    assert all(units.get(e, 0) - initial_units.get(e, 0) <= cap[e] for e in cap)
    assert any(c.root == 2 and c.edges[0] == (2, 0) and c.mult == 2 for c in classes)


def test_accept_old_trees_repairs_a_tree_around_a_lost_edge() -> None:
    # Complete digraph on 3 GPUs, capacity 2, but 0→1 lost. Old trees (k = 1): 0→1→2, 1→2→0,
    # 2→0→1. Root 0 re-hangs 2 from 0 and then 1 from 2; root 2 hangs 1 from itself.
    arcs = {(a, b): 2 for a in range(3) for b in range(3) if a != b and (a, b) != (0, 1)}
    trees = {0: [([(0, 1), (1, 2)], 1)], 1: [([(1, 2), (2, 0)], 1)], 2: [([(2, 0), (0, 1)], 1)]}
    got, figures = accept_old_trees(arcs, 3, 1, trees, 1)
    assert got is not None
    cap, kept, todo = got
    assert figures.accept == "repair" and todo == []
    assert figures.reused_tree_units == sum(c.mult for c in kept)
    assert all(v >= 0 for v in cap.values())
    assert {c.root: c.edges for c in kept} == {0: [(0, 2), (2, 1)], 1: [(1, 2), (2, 0)], 2: [(2, 0), (2, 1)]}


@pytest.mark.parametrize("failure", ["fail1", "fail2", "fail3"])
def test_warm_start_on_64_gpus_reuses_trees_with_little_packing(failure: str) -> None:
    spec = "hpn:1x8x8"
    healthy = synthesize_allgather(load_topology(spec)).schedule
    assert healthy is not None
    topo = load_topology(spec, [failure])
    warm = synthesize_allgather(topo, warm_start=Schedule.from_json(healthy.to_json()))
    assert_exact_optimal(warm, topo)
    assert warm.figures.warm_accept == "repair"
    assert warm.figures.reused_edges_frac > 0.95
    # Nearly every tree is kept whole or repaired; the rest grows with a few max-flows (a cold
    # packing takes about 100 per GPU here).
    assert (0 if warm.figures.packing is None else warm.figures.packing.maxflows) < 2 * topo.nranks
    assert warm.figures.warm.reused_tree_units >= 0.9 * topo.nranks * warm.schedule.nchunks  # type: ignore[union-attr]


def test_warm_falls_back_when_lovasz_check_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    import synth.forestcoll_warm.warm as warm_mod

    spec = "dgx-a100:2"
    healthy = synthesize_allgather(load_topology(spec)).schedule
    topo = load_topology(spec, ["fail2"])
    calls: list[int] = []
    real_check, real_regrow = warm_mod._lovasz_ok, warm_mod._regrow

    def failing(cap, n, classes):  # type: ignore[no-untyped-def]
        calls.append(1)
        return (False, 1) if len(calls) <= 2 else real_check(cap, n, classes)

    def truncated(r, edges, m, used, cap, ins, outs, mode):  # type: ignore[no-untyped-def]
        part = real_regrow(r, edges, m, used, cap, ins, outs, "partial")
        return part[: len(part) // 2]  # a prefix of a parents-first tree is a tree

    monkeypatch.setattr(warm_mod, "_regrow", truncated)
    monkeypatch.setattr(warm_mod, "_lovasz_ok", failing)
    res = synthesize_allgather(topo, warm_start=healthy)
    assert_exact_optimal(res, topo)
    assert len(calls) >= 2
    assert res.figures.warm_accept in ("all", "none")

"""The exact AllGather rate (synth/bounds_allgather.py) against independent oracles.

1. Brute force: enumerate every node set S holding at least one GPU and missing one, and take
   min B+(S)/|S ∩ GPUs| exactly (Fractions). The implementation must agree *exactly*.
2. networkx max-flow (oracle only): at x* every GPU v receives maxflow >= N·x* from a super source
   feeding each GPU at x*; slightly above x*, some GPU does not.
3. An LP (scipy linprog / HiGHS) that maximises x over N flows from the super source, one per sink.
"""

from __future__ import annotations

import math
from fractions import Fraction

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from scipy.optimize import linprog

from synth.bounds.allgather import CutRate, allgather_rate_gbps, cut_ratio_gbps
from synth.errors import SolverError
from synth.topologies import Link, Node, NodeKind, Topology, named_topology
from tests.strategies import random_topologies


def brute_force_rate_gbps(topo: Topology) -> tuple[Fraction, list[frozenset[str]]]:
    """min over cuts of B+(S)/|S ∩ GPUs| and every cut attaining it, by enumerating all 2^V sets."""
    ids = [n.id for n in topo.nodes]
    bit = {v: 1 << i for i, v in enumerate(ids)}
    gpu_mask = sum(bit[g.id] for g in topo.gpus)
    caps = [(bit[lk.src], bit[lk.dst], Fraction(str(lk.gbps))) for lk in topo.links if lk.gbps > 0]
    scale = math.lcm(*(c.denominator for _, _, c in caps))
    int_caps = [(a, b, int(c * scale)) for a, b, c in caps]
    best: Fraction | None = None
    cuts: list[int] = []
    for mask in range(1, 1 << len(ids)):
        inside = mask & gpu_mask
        if inside == 0 or inside == gpu_mask:
            continue
        out = sum(c for a, b, c in int_caps if mask & a and not mask & b)
        ratio = Fraction(out, bin(inside).count("1") * scale)
        if best is None or ratio < best:
            best, cuts = ratio, [mask]
        elif ratio == best:
            cuts.append(mask)
    assert best is not None
    return best, [frozenset(v for v in ids if mask & bit[v]) for mask in cuts]


def _feasible_nx(topo: Topology, x: Fraction) -> bool:
    """Whether a super source feeding every GPU at x gives every GPU a max-flow >= N·x (networkx)."""
    caps = [Fraction(str(lk.gbps)) for lk in topo.links if lk.gbps > 0]
    scale = math.lcm(x.denominator, *(c.denominator for c in caps))
    g = nx.DiGraph()
    source = ("super-source",)
    for lk in topo.links:
        if lk.gbps > 0:
            g.add_edge(lk.src, lk.dst, capacity=int(Fraction(str(lk.gbps)) * scale))
    for gpu in topo.gpus:
        g.add_edge(source, gpu.id, capacity=int(x * scale))
    need = topo.nranks * x * scale
    return all(nx.maximum_flow_value(g, source, gpu.id) >= need for gpu in topo.gpus)


def lp_rate_gbps(topo: Topology) -> float:
    """max x s.t. for every GPU v, a flow from a super source (arcs of capacity x into every GPU)
    delivers N·x to v within link capacities (one flow per v, links not shared across v)."""
    nodes = [n.id for n in topo.nodes]
    idx = {v: i for i, v in enumerate(nodes)}
    live = [lk for lk in topo.links if lk.gbps > 0]
    gpus = [idx[g.id] for g in topo.gpus]
    n, nv, ne = len(gpus), len(nodes), len(live)
    width = ne + n  # per sink: link flows, then source-arc flows
    ncols = 1 + n * width
    a_eq = np.zeros((n * nv, ncols))
    a_ub = np.zeros((n * n, ncols))
    for k, sink in enumerate(gpus):
        base = 1 + k * width
        for e, lk in enumerate(live):
            a_eq[k * nv + idx[lk.dst], base + e] += 1
            a_eq[k * nv + idx[lk.src], base + e] -= 1
        for j, g in enumerate(gpus):
            a_eq[k * nv + g, base + ne + j] += 1
            a_ub[k * n + j, base + ne + j] = 1
            a_ub[k * n + j, 0] = -1
        a_eq[k * nv + sink, 0] = -n
    bounds = [(0, None)] + [
        b for _ in gpus for b in [(0, lk.gbps) for lk in live] + [(0, None)] * n
    ]
    c = np.zeros(ncols)
    c[0] = -1
    res = linprog(c, A_ub=a_ub, b_ub=np.zeros(n * n), A_eq=a_eq, b_eq=np.zeros(n * nv), bounds=bounds, method="highs")
    assert res.status == 0, res.message
    return float(res.x[0])


def _check_cut(topo: Topology, result: CutRate) -> None:
    s = result.cut_nodes
    gpus_in = sum(1 for v in s if topo.node(v).is_gpu)
    assert 1 <= gpus_in < topo.nranks
    out = sum((Fraction(str(lk.gbps)) for lk in topo.links if lk.src in s and lk.dst not in s), Fraction(0))
    assert out / gpus_in == result.rate_gbps
    assert cut_ratio_gbps(topo, s) == result.rate_gbps


@settings(max_examples=200)
@given(random_topologies(min_gpus=2, max_gpus=6, max_switches=4))
def test_rate_equals_brute_force_cut_enumeration(topo: Topology) -> None:
    result = allgather_rate_gbps(topo)
    best, cuts = brute_force_rate_gbps(topo)
    assert isinstance(result.rate_gbps, Fraction)
    assert result.rate_gbps == best
    assert result.cut_nodes in cuts
    _check_cut(topo, result)


@settings(max_examples=100)
@given(random_topologies(min_gpus=2, max_gpus=5, max_switches=3))
def test_rate_is_the_networkx_maxflow_threshold(topo: Topology) -> None:
    rate = allgather_rate_gbps(topo).rate_gbps
    assert _feasible_nx(topo, rate)
    assert not _feasible_nx(topo, rate * Fraction(1001, 1000))


@settings(max_examples=100)
@given(random_topologies(min_gpus=2, max_gpus=5, max_switches=3))
def test_rate_equals_lp_optimum(topo: Topology) -> None:
    rate = float(allgather_rate_gbps(topo).rate_gbps)
    assert lp_rate_gbps(topo) == pytest.approx(rate, rel=1e-6)


@pytest.mark.parametrize("spec", ["ring:5", "nvswitch:4", "hpn:1x2x2", "torus:3x3", "torus:2x3", "h200-proto",
                                  "hpn:2x1x2"])
def test_named_topologies_match_brute_force(spec: str) -> None:
    topo = named_topology(spec)
    result = allgather_rate_gbps(topo)
    best, cuts = brute_force_rate_gbps(topo)
    assert result.rate_gbps == best and result.cut_nodes in cuts


@pytest.mark.parametrize(("spec", "failures"), [("hpn:1x2x2", ["fail1"]), ("hpn:1x2x2", ["fail2"]),
                                                ("hpn:1x2x2", ["fail3"]), ("hpn:1x2x2", ["fail1", "fail2"])])
def test_failed_topologies_match_brute_force(spec: str, failures: list[str]) -> None:
    from synth.topologies import load_topology

    topo = load_topology(spec, failures)
    result = allgather_rate_gbps(topo)
    assert result.rate_gbps == brute_force_rate_gbps(topo)[0]
    _check_cut(topo, result)


def test_rate_is_exact_with_inexact_binary_capacities() -> None:
    # 0.1 + 0.2 != 0.3 in floating point; the cut {gpu0, gpu1} gives exactly (1/10 + 2/10) / 2.
    nodes = [Node(f"gpu{r}", NodeKind.GPU, r) for r in range(3)]
    links = [Link("gpu0", "gpu2", 0.1, 0.0), Link("gpu1", "gpu2", 0.2, 0.0), Link("gpu2", "gpu0", 0.3, 0.0),
             Link("gpu2", "gpu1", 0.3, 0.0), Link("gpu0", "gpu1", 0.3, 0.0), Link("gpu1", "gpu0", 0.3, 0.0)]
    topo = Topology.create("tiny", nodes, links)
    assert allgather_rate_gbps(topo).rate_gbps == Fraction(3, 20)
    assert brute_force_rate_gbps(topo)[0] == Fraction(3, 20)


def test_down_links_carry_nothing() -> None:
    base = named_topology("ring:4")
    assert allgather_rate_gbps(base.scaled("gpu0", "gpu1", 0.0)).rate_gbps == Fraction(400, 3)
    assert allgather_rate_gbps(base).rate_gbps == Fraction(800, 3)


def test_counts_iterations_and_maxflows() -> None:
    result = allgather_rate_gbps(named_topology("dgx-a100:4"))
    assert result.iterations >= 1 and result.maxflows >= 32 * result.iterations - 31
    assert result.rate_gbps == Fraction(200 * 8, 24) / 8 * 8  # host cut: 8 NICs of 200 into 24 GPUs


def test_rate_is_deterministic_including_the_cut() -> None:
    a = allgather_rate_gbps(named_topology("ring:6"))
    b = allgather_rate_gbps(named_topology("ring:6"))
    assert (a.rate_gbps, a.cut_nodes) == (b.rate_gbps, b.cut_nodes)


def test_single_gpu_is_rejected() -> None:
    with pytest.raises(SolverError, match=r"at least 2 GPUs; topology 'solo' has 1"):
        allgather_rate_gbps(Topology.create("solo", [Node("g", NodeKind.GPU, 0)], []))

"""Optimal bounds (synth/bounds/optimal.py) on named topologies against closed forms.

Closed forms (GB/s; a link of g Gbit/s carries g/8 GB/s):

* AllGather rate per source = min over cuts S of B+(S)/|S ∩ GPUs|; algbw = N · rate.
  - nvswitch:N: the cut "all but one GPU" (S = N−1 GPUs + the switch) gives 360/(N−1):
    algbw = N·360/(N−1).
  - ring:N (N ≥ 3): an arc of k GPUs has 2 links of 50 GB/s leaving it, worst at k = N−1:
    algbw = N·100/(N−1). ring:2 is one cable: algbw = 2·50.
  - torus XxY: every GPU has degree d (2 per dimension of size ≥ 3, 1 for size 2, 0 for size 1)
    and the graph is d-edge-connected, so no cut beats "all but one GPU": algbw = N·50·d/(N−1).
  - hpn:1xHxN (and dgx): min of "all but one GPU", (nvs + nic)/(HN−1), and "all but one host",
    N·nic/(N(H−1)) = nic/(H−1): algbw = HN · min(...).
* AllToAll per pair z; algbw = N·z.
  - nvswitch:N: each GPU's 360 GB/s uplink carries (N−1) blocks: algbw = N·360/(N−1).
  - ring/torus (arc-transitive, uniform capacity c = 50): shortest paths are optimal and load every
    link equally, z = (links · c) / (N · Σ_d dist(s, d)): ring:N algbw = 400N/(N²−1) (N odd), 400/N
    (N even); torus kxk algbw = 200·N / D with D = Σ_d dist(0, d).
  - hpn:1xHxN: a host's NICs (N · nic) carry N·N(H−1) blocks: algbw = H·nic/(H−1).
"""

from __future__ import annotations

from fractions import Fraction

import pytest

from synth import Bound, Status, busbw_GBps, optimal_bound
from synth.bounds.allgather import cut_ratio_gbps
from synth.errors import SolverError
from synth.topologies import Link, Node, NodeKind, Topology, named_topology

REL = 1e-6


def _ag(spec: str) -> float:
    return optimal_bound("allgather", named_topology(spec)).algbw_GBps


def _a2a(spec: str) -> float:
    return optimal_bound("alltoall", named_topology(spec)).algbw_GBps


# -- pinned values from the acceptance criteria --------------------------------------------------

@pytest.mark.parametrize(
    ("collective", "spec", "algbw"),
    [
        ("allgather", "hpn:1x2x8", 437.0 + 1 / 3),
        ("alltoall", "hpn:1x2x8", 100.0),
        ("allgather", "dgx-a100:2", 346.0 + 2 / 3),
        ("allgather", "dgx-a100:4", 266.0 + 2 / 3),
        ("allgather", "hpn:1x8x8", 64 * 410 / 63),  # 416.508
        ("allgather", "ring:8", 8 * 100 / 7),
        ("allgather", "nvswitch:8", 8 * 360 / 7),
        ("alltoall", "nvswitch:8", 8 * 360 / 7),
        ("allgather", "h200-proto", 200.0),
        ("alltoall", "h200-proto", 50.0),
    ],
)
def test_pinned_bounds(collective: str, spec: str, algbw: float) -> None:
    assert optimal_bound(collective, named_topology(spec)).algbw_GBps == pytest.approx(algbw, rel=REL)


def test_hpn_1x8x8_allgather_to_three_decimals() -> None:
    assert round(_ag("hpn:1x8x8"), 3) == 416.508


def test_allgather_bound_is_exact_fraction() -> None:
    b = optimal_bound("allgather", named_topology("hpn:1x2x8"))
    assert b.exact is True
    assert b.rate_GBps == Fraction(410, 15)
    assert b.algbw_GBps == float(16 * Fraction(410, 15))


# -- closed forms over families ------------------------------------------------------------------

@pytest.mark.parametrize("n", [2, 3, 4, 5, 8, 16])
def test_nvswitch_closed_forms(n: int) -> None:
    assert _ag(f"nvswitch:{n}") == pytest.approx(n * (2880 / 8) / (n - 1), rel=REL)
    assert _a2a(f"nvswitch:{n}") == pytest.approx(n * 360 / (n - 1), rel=REL)


@pytest.mark.parametrize("n", [3, 4, 5, 6, 7, 8, 12])
def test_ring_closed_forms(n: int) -> None:
    assert _ag(f"ring:{n}") == pytest.approx(n * 2 * 50 / (n - 1), rel=REL)
    expected_a2a = 400 * n / (n * n - 1) if n % 2 else 400 / n
    assert _a2a(f"ring:{n}") == pytest.approx(expected_a2a, rel=REL)


def test_ring2_is_one_cable() -> None:
    assert _ag("ring:2") == pytest.approx(100.0, rel=REL)
    assert _a2a("ring:2") == pytest.approx(100.0, rel=REL)


def _torus_degree(x: int, y: int) -> int:
    return sum(2 if k >= 3 else (1 if k == 2 else 0) for k in (x, y))


@pytest.mark.parametrize(("x", "y"), [(2, 2), (2, 3), (3, 3), (3, 4), (4, 4), (2, 5), (1, 5)])
def test_torus_allgather_closed_form(x: int, y: int) -> None:
    n = x * y
    assert _ag(f"torus:{x}x{y}") == pytest.approx(n * 50 * _torus_degree(x, y) / (n - 1), rel=REL)


@pytest.mark.parametrize("k", [3, 4, 5])
def test_square_torus_alltoall_closed_form(k: int) -> None:
    per_dim = sum(min(i, k - i) for i in range(k))
    total_distance = 2 * k * per_dim
    assert _a2a(f"torus:{k}x{k}") == pytest.approx(200 * k * k / total_distance, rel=REL)


@pytest.mark.parametrize(("h", "n", "nvs", "nic", "spec"), [
    (2, 8, 2880, 400, "hpn:1x2x8"),
    (4, 2, 2880, 400, "hpn:1x4x2"),
    (2, 4, 2880, 400, "hpn:1x2x4"),
    (3, 2, 2880, 400, "hpn:1x3x2"),
    (4, 4, 2880, 200, "hpn:1x4x4,nic=200"),
    (2, 4, 3600, 200, "hpn:1x2x4,nic=200,nvswitch=3600"),
    (2, 8, 2400, 200, "dgx-a100:2"),
    (4, 8, 2400, 200, "dgx-a100:4"),
    (2, 8, 3600, 400, "dgx-h100:2"),
])
def test_rail_fabric_closed_forms(h: int, n: int, nvs: float, nic: float, spec: str) -> None:
    nvs_B, nic_B = nvs / 8, nic / 8
    rate = min((nvs_B + nic_B) / (h * n - 1), nic_B / (h - 1))
    assert _ag(spec) == pytest.approx(h * n * rate, rel=REL)
    assert _a2a(spec) == pytest.approx(h * nic_B / (h - 1), rel=REL)


def test_single_host_hpn_tors_are_dead_ends() -> None:
    # hpn:1x1x4: each ToR cables to one GPU only, so it adds no path between GPUs: nvswitch:4.
    assert _ag("hpn:1x1x4") == pytest.approx(4 * 360 / 3, rel=REL)
    assert _a2a("hpn:1x1x4") == pytest.approx(4 * 360 / 3, rel=REL)


# -- reductions ----------------------------------------------------------------------------------

@pytest.mark.parametrize("spec", ["ring:5", "hpn:1x2x4", "torus:3x3", "dgx-a100:2"])
def test_reducescatter_equals_allgather_and_allreduce_is_half_on_symmetric_links(spec: str) -> None:
    topo = named_topology(spec)
    ag = optimal_bound("allgather", topo)
    rs = optimal_bound("reducescatter", topo)
    ar = optimal_bound("allreduce", topo)
    assert rs.rate_GBps == ag.rate_GBps
    assert ar.rate_GBps == ag.rate_GBps / 2
    assert ar.algbw_GBps == pytest.approx(ag.algbw_GBps / 2)
    assert ar.busbw_GBps == pytest.approx(ar.algbw_GBps * 2 * (topo.nranks - 1) / topo.nranks)


def _one_way_ring(n: int, gbps: float) -> Topology:
    nodes = [Node(f"gpu{r}", NodeKind.GPU, r) for r in range(n)]
    links = [Link(f"gpu{r}", f"gpu{(r + 1) % n}", gbps, 0.0) for r in range(n)]
    links += [Link(f"gpu{(r + 1) % n}", f"gpu{r}", gbps / 2, 0.0) for r in range(n)]
    return Topology.create(f"skew-{n}", nodes, links)


def test_reducescatter_uses_reversed_links_on_asymmetric_topology() -> None:
    # gpu0 has a fast out-link but a slow in-link: AllGather is limited by in-links into a GPU,
    # ReduceScatter (AllGather reversed) by out-links out of a GPU.
    nodes = [Node(f"gpu{r}", NodeKind.GPU, r) for r in range(3)]
    links = [Link("gpu0", "gpu1", 80.0, 0.0), Link("gpu1", "gpu0", 8.0, 0.0),
             Link("gpu1", "gpu2", 80.0, 0.0), Link("gpu2", "gpu1", 80.0, 0.0),
             Link("gpu2", "gpu0", 80.0, 0.0), Link("gpu0", "gpu2", 80.0, 0.0)]
    topo = Topology.create("skew", nodes, links)
    ag = optimal_bound("allgather", topo)
    rs = optimal_bound("reducescatter", topo)
    assert rs.rate_GBps == optimal_bound("allgather", topo.reversed()).rate_GBps
    assert ag.rate_GBps == optimal_bound("reducescatter", topo.reversed()).rate_GBps
    ar = optimal_bound("allreduce", topo)
    assert ar.rate_GBps == 1 / (1 / ag.rate_GBps + 1 / rs.rate_GBps)
    # RS bottleneck: original links entering the RS cut S.
    for a, b in rs.bottleneck:
        assert a not in rs.cut_nodes and b in rs.cut_nodes
    entering = sum(Fraction(topo.link(a, b).gbps) for a, b in rs.bottleneck)
    gpus_in = sum(1 for v in rs.cut_nodes if topo.node(v).is_gpu)
    assert entering / gpus_in / 8 == rs.rate_GBps
    assert set(ar.bottleneck) >= set(ag.bottleneck) | set(rs.bottleneck)


def test_skewed_ring_bounds() -> None:
    topo = _one_way_ring(4, 80.0)
    # Each GPU receives 10 + 5 GB/s; all-but-one cut: 15/3 per source.
    assert optimal_bound("allgather", topo).rate_GBps == Fraction(5)


# -- the Bound object and its bottleneck ----------------------------------------------------------

@pytest.mark.parametrize("spec", ["hpn:1x2x8", "dgx-a100:4", "ring:6", "torus:3x3", "hpn:2x2x2"])
def test_allgather_bottleneck_attains_the_rate(spec: str) -> None:
    topo = named_topology(spec)
    b = optimal_bound("allgather", topo)
    s = b.cut_nodes
    gpus_in = sum(1 for v in s if topo.node(v).is_gpu)
    assert 1 <= gpus_in < topo.nranks
    assert set(b.bottleneck) == {lk.key for lk in topo.live_links if lk.src in s and lk.dst not in s}
    assert sum(Fraction(topo.link(a, b_).gbps) for a, b_ in b.bottleneck) / gpus_in == 8 * b.rate_GBps
    assert cut_ratio_gbps(topo, s) == 8 * b.rate_GBps
    assert list(b.bottleneck) == sorted(b.bottleneck)


def test_bound_fields_and_json_dict() -> None:
    topo = named_topology("hpn:1x2x8")
    b = optimal_bound("alltoall", topo)
    assert isinstance(b, Bound)
    assert (b.collective, b.topology, b.nranks, b.exact, b.cut_nodes) == ("alltoall", "hpn-1x2x8", 16, False, frozenset())
    assert b.busbw_GBps == pytest.approx(100.0 * 15 / 16)
    assert b.bottleneck and all(topo.link(*k).gbps > 0 for k in b.bottleneck)
    doc = b.to_json_dict()
    assert list(doc) == ["collective", "topology", "nranks", "algbw_GBps", "busbw_GBps", "bottleneck", "status",
                         "message"]
    assert doc["bottleneck"] == [list(k) for k in b.bottleneck]
    assert (doc["status"], b.success, doc["message"]) == ("optimal", True, b.message) and "LP optimum" in b.message


@pytest.mark.parametrize("collective", ["allgather", "reducescatter", "allreduce"])
def test_tree_bounds_are_proven(collective: str) -> None:
    b = optimal_bound(collective, named_topology("ring:4"))  # type: ignore[arg-type]
    assert b.status is Status.OPTIMAL and b.success and "exact cut bound" in b.message


def test_alltoall_bound_time_limit_is_a_status_not_an_error() -> None:
    """Column generation (above 32 GPUs) stopped at once: the best proven upper bound, TIME_LIMIT.
    A torus: on hpn the host cut proves the first master optimal (issue 31)."""
    topo = named_topology("torus:6x6")
    stopped = optimal_bound("alltoall", topo, time_limit_s=1e-6)
    assert stopped.status is Status.TIME_LIMIT and not stopped.success
    assert "time limit" in stopped.message and stopped.topology == topo.name
    proven = optimal_bound("alltoall", topo)
    assert proven.success
    assert stopped.algbw_GBps >= proven.algbw_GBps * (1 - 1e-9)
    assert stopped.to_json_dict()["status"] == "time_limit"


def test_alltoall_bottleneck_on_hpn_is_the_nic_layer() -> None:
    topo = named_topology("hpn:1x2x8")
    links = set(optimal_bound("alltoall", topo).bottleneck)
    # Cross-host traffic limits: only NIC links (GPU<->ToR) can be binding, never NVSwitch links.
    assert links and all("tor" in a or "tor" in b for a, b in links)


@pytest.mark.parametrize(("collective", "algbw", "n", "busbw"), [
    ("allgather", 100.0, 4, 75.0), ("reducescatter", 100.0, 4, 75.0), ("alltoall", 80.0, 8, 70.0),
    ("allreduce", 100.0, 4, 150.0), ("allreduce", 10.0, 2, 10.0),
])
def test_busbw_follows_nccl_tests(collective: str, algbw: float, n: int, busbw: float) -> None:
    assert busbw_GBps(collective, algbw, n) == pytest.approx(busbw)  # type: ignore[arg-type]


def test_bound_does_not_depend_on_failures_elsewhere_only_on_capacity() -> None:
    base = named_topology("hpn:1x2x8")
    fail2 = optimal_bound("allgather", base.with_failure("fail2"))
    # fail2 leaves rank 0 with 360 + 6.25 GB/s of ingress: all-but-rank-0 cut = 366.25/15.
    assert fail2.rate_GBps == Fraction(36625, 100 * 15)
    assert fail2.bottleneck == tuple(sorted([("nvs0.0", "gpu0"), ("tor0.0", "gpu0")]))


def test_zero_capacity_links_never_appear_in_bottleneck() -> None:
    topo = named_topology("ring:4").scaled("gpu0", "gpu1", 0.0)
    for collective in ("allgather", "reducescatter", "allreduce", "alltoall"):
        b = optimal_bound(collective, topo)
        assert ("gpu0", "gpu1") not in b.bottleneck and ("gpu1", "gpu0") not in b.bottleneck


@pytest.mark.parametrize("collective", ["broadcast", "", "AllGather"])
def test_unknown_collective_is_rejected_by_name(collective: str) -> None:
    with pytest.raises(SolverError, match=rf"unknown collective '{collective}'; known: allgather"):
        optimal_bound(collective, named_topology("ring:3"))  # type: ignore[arg-type]


@pytest.mark.parametrize("collective", ["allgather", "reducescatter", "allreduce", "alltoall"])
def test_single_gpu_topology_is_rejected(collective: str) -> None:
    topo = Topology.create("solo", [Node("g", NodeKind.GPU, 0)], [])
    with pytest.raises(SolverError, match=r"needs at least 2 GPUs; topology 'solo' has 1"):
        optimal_bound(collective, topo)  # type: ignore[arg-type]

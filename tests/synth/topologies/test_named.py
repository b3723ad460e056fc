"""Named topology specs (synth/topologies/named.py) against the table of docs/topology.md.

Expected node and link sets are rebuilt here from the spec's words, independently of the builders.
"""

from __future__ import annotations

import pytest

from synth.errors import TopologyError
from synth.topologies import (
    NAMED_SPECS,
    Topology,
    dgx_a100,
    dgx_h100,
    hpn,
    named_topology,
    nvswitch,
    ring,
    torus,
)

LinkSet = set[tuple[str, str, float, float]]


def _links(topo: Topology) -> LinkSet:
    return {(lk.src, lk.dst, lk.gbps, lk.latency_us) for lk in topo.links}


def _cable(a: str, b: str, gbps: float, latency_us: float) -> LinkSet:
    return {(a, b, gbps, latency_us), (b, a, gbps, latency_us)}


def _rail_expected(s_count: int, h_count: int, n: int, nvs: float, nic: float) -> tuple[dict[str, tuple[int, int]], LinkSet, set[str]]:
    """GPU id -> (rank, host), links and switch ids of a rail-optimised fabric, from the spec text."""
    gpus: dict[str, tuple[int, int]] = {}
    links: LinkSet = set()
    switches: set[str] = set()
    rank = 0
    for s in range(s_count):  # ranks numbered host by host, segment by segment
        for h in range(h_count):
            host = s * h_count + h
            switches.add(f"nvs{s}.{h}")
            for i in range(n):
                gpus[f"gpu{rank}"] = (rank, host)
                links |= _cable(f"gpu{rank}", f"nvs{s}.{h}", nvs, 0.025)
                links |= _cable(f"gpu{rank}", f"tor{s}.{i}", nic, 0.5)
                switches.add(f"tor{s}.{i}")
                rank += 1
    if s_count > 1:
        for s in range(s_count):
            for i in range(n):
                links |= _cable(f"tor{s}.{i}", f"agg{i}", h_count * nic, 0.5)
                switches.add(f"agg{i}")
    return gpus, links, switches


def _assert_rail(topo: Topology, s: int, h: int, n: int, nvs: float, nic: float) -> None:
    gpus, links, switches = _rail_expected(s, h, n, nvs, nic)
    assert {g.id: (g.rank, g.host) for g in topo.gpus} == gpus
    assert {sw.id for sw in topo.switches} == switches
    assert _links(topo) == links
    assert len(topo.links) == len(links)  # no duplicates hiding in the set


@pytest.mark.parametrize(("s", "h", "n"), [(1, 2, 8), (1, 1, 2), (2, 2, 2), (2, 3, 4), (3, 1, 2), (1, 4, 1)])
def test_hpn_nodes_links_and_rank_order(s: int, h: int, n: int) -> None:
    topo = named_topology(f"hpn:{s}x{h}x{n}")
    _assert_rail(topo, s, h, n, 2880.0, 400.0)
    assert topo.name == f"hpn-{s}x{h}x{n}"
    assert topo.nranks == s * h * n


def test_hpn_rank_order_is_host_by_host_segment_by_segment() -> None:
    topo = named_topology("hpn:2x2x2")
    # rank 5 = segment 1, host 0 of that segment (global host 2), GPU index 1.
    assert topo.node("gpu5").host == 2
    assert topo.has_link("gpu5", "nvs1.0") and topo.has_link("gpu5", "tor1.1")
    assert topo.link("tor1.1", "agg1").gbps == 800.0


@pytest.mark.parametrize(
    ("spec", "nic", "nvs"),
    [
        ("hpn:1x2x4,nic=200", 200.0, 2880.0),
        ("hpn:1x2x4,nvswitch=3600", 400.0, 3600.0),
        ("hpn:1x2x4,nic=200,nvswitch=3600", 200.0, 3600.0),
        ("hpn:1x2x4,nvswitch=3600,nic=200", 200.0, 3600.0),
        ("hpn:2x2x4,nic=100.5", 100.5, 2880.0),
    ],
)
def test_hpn_options_set_nic_and_nvswitch_capacity(spec: str, nic: float, nvs: float) -> None:
    s = int(spec.split(":")[1].split("x")[0])
    _assert_rail(named_topology(spec), s, 2, 4, nvs, nic)


def test_hpn_builder_keyword_options_match_spec_string() -> None:
    assert hpn(1, 2, 4, nic_gbps=200, nvswitch_gbps=3600) == named_topology("hpn:1x2x4,nic=200,nvswitch=3600")
    assert hpn(1, 2, 8) == named_topology("hpn:1x2x8")


def test_h200_proto_equals_hpn_1x2x4_nic200_nvswitch3600_except_name() -> None:
    proto = named_topology("h200-proto")
    ref = named_topology("hpn:1x2x4,nic=200,nvswitch=3600")
    assert proto.name == "h200-proto"
    assert proto.nodes == ref.nodes
    assert proto.links == ref.links
    assert proto.fingerprint == ref.fingerprint
    assert proto.link("gpu0", "nvs0.0").GBps == 450.0  # H200 NVLink, 450 GB/s per direction


@pytest.mark.parametrize("h", [1, 2, 3])
def test_dgx_a100(h: int) -> None:
    topo = named_topology(f"dgx-a100:{h}")
    _assert_rail(topo, 1, h, 8, 2400.0, 200.0)
    assert topo == dgx_a100(h) and topo.name == f"dgx-a100-{h}"


@pytest.mark.parametrize("h", [1, 2])
def test_dgx_h100(h: int) -> None:
    topo = named_topology(f"dgx-h100:{h}")
    _assert_rail(topo, 1, h, 8, 3600.0, 400.0)
    assert topo == dgx_h100(h) and topo.name == f"dgx-h100-{h}"


@pytest.mark.parametrize("n", [2, 3, 8, 16])
def test_nvswitch(n: int) -> None:
    topo = named_topology(f"nvswitch:{n}")
    expected: LinkSet = set()
    for r in range(n):
        expected |= _cable(f"gpu{r}", "nvs0.0", 2880.0, 0.025)
    assert _links(topo) == expected and len(topo.links) == 2 * n
    assert [s.id for s in topo.switches] == ["nvs0.0"]
    assert {g.id: g.rank for g in topo.gpus} == {f"gpu{r}": r for r in range(n)}
    assert topo == nvswitch(n)


@pytest.mark.parametrize("n", [2, 3, 4, 7])
def test_ring(n: int) -> None:
    topo = named_topology(f"ring:{n}")
    expected: LinkSet = set()
    for r in range(n):
        expected |= _cable(f"gpu{r}", f"gpu{(r + 1) % n}", 400.0, 0.5)
    assert _links(topo) == expected
    assert len(topo.links) == len(expected)  # ring:2 is one cable, not two
    assert topo.switches == () and topo.nranks == n
    assert topo == ring(n)


@pytest.mark.parametrize(("x", "y"), [(3, 3), (2, 3), (3, 2), (2, 2), (4, 5), (1, 4)])
def test_torus(x: int, y: int) -> None:
    topo = named_topology(f"torus:{x}x{y}")
    expected: LinkSet = set()
    for r in range(x):
        for c in range(y):
            me = f"gpu{r * y + c}"
            for other in (((r + 1) % x) * y + c, r * y + (c + 1) % y):
                if f"gpu{other}" != me:
                    expected |= _cable(me, f"gpu{other}", 400.0, 0.5)
    assert _links(topo) == expected and len(topo.links) == len(expected)
    assert topo.nranks == x * y and topo.switches == ()
    assert topo == torus(x, y)


def test_named_specs_lists_every_family() -> None:
    families = {s.split(":")[0].split("[")[0] for s in NAMED_SPECS}
    assert families == {"hpn", "h200-proto", "nvswitch", "ring", "torus", "dgx-a100", "dgx-h100"}


def test_named_topology_strips_surrounding_whitespace() -> None:
    assert named_topology("  ring:3 ") == named_topology("ring:3")


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        # unknown spec, with did-you-mean
        ("rnig:4", r"unknown topology spec 'rnig:4' \(did you mean 'ring'\?\)"),
        ("hnp:1x2x8", r"unknown topology spec 'hnp:1x2x8' \(did you mean 'hpn'\?\)"),
        ("dgx-a10:2", r"did you mean 'dgx-a100'\?"),
        ("h200proto", r"unknown topology spec 'h200proto' \(did you mean 'h200-proto'\?\)"),
        ("mesh:4", r"unknown topology spec 'mesh:4'; known: hpn:SxHxN"),
        ("ring", r"unknown topology spec 'ring'"),
        ("", r"named spec must be a non-empty string, got ''"),
        ("   ", r"named spec must be a non-empty string"),
        # bad arguments
        ("hpn:1x2", r"named spec 'hpn:1x2': expected 3 integer\(s\) .* got '1x2'"),
        ("hpn:1x2x8x1", r"expected 3 integer\(s\)"),
        ("hpn:1xax8", r"named spec 'hpn:1xax8': expected 3 integer\(s\)"),
        ("hpn:1x-2x8", r"expected 3 integer\(s\)"),
        ("ring:", r"named spec 'ring:': expected 1 integer\(s\)"),
        ("ring:4.0", r"named spec 'ring:4\.0'"),
        ("torus:3", r"named spec 'torus:3': expected 2 integer\(s\)"),
        ("hpn:0x2x8", r"hpn segments S must be an integer >= 1, got 0"),
        ("hpn:1x0x8", r"hpn hosts per segment H must be an integer >= 1, got 0"),
        ("hpn:1x2x0", r"hpn GPUs per host N must be an integer >= 1, got 0"),
        ("hpn:1x1x1", r"hpn needs at least 2 GPUs"),
        ("ring:1", r"ring GPU count N must be an integer >= 2, got 1"),
        ("ring:0", r"ring GPU count N must be an integer >= 2, got 0"),
        ("nvswitch:1", r"nvswitch GPU count N must be an integer >= 2, got 1"),
        ("torus:1x1", r"torus needs at least 2 GPUs"),
        ("torus:0x4", r"torus X must be an integer >= 1, got 0"),
        ("dgx-a100:0", r"dgx-a100 hosts H must be an integer >= 1, got 0"),
        ("dgx-h100:x", r"named spec 'dgx-h100:x'"),
        # options
        ("hpn:1x2x8,nicc=200", r"unknown option 'nicc' \(did you mean 'nic'\?\); allowed: nic, nvswitch"),
        ("hpn:1x2x8,nvswich=3600", r"unknown option 'nvswich' \(did you mean 'nvswitch'\?\)"),
        ("hpn:1x2x8,speed=1", r"unknown option 'speed'; allowed: nic, nvswitch"),
        ("hpn:1x2x8,nic", r"option 'nic' must be KEY=VALUE"),
        ("hpn:1x2x8,nic=fast", r"option nic='fast' is not a number"),
        ("hpn:1x2x8,nic=0", r"hpn option nic \(Gbit/s\) must be a finite number > 0, got 0\.0"),
        ("hpn:1x2x8,nic=-200", r"hpn option nic \(Gbit/s\) must be a finite number > 0, got -200\.0"),
        ("hpn:1x2x8,nvswitch=nan", r"hpn option nvswitch \(Gbit/s\) must be a finite number > 0, got nan"),
        ("hpn:1x2x8,nvswitch=inf", r"hpn option nvswitch \(Gbit/s\) must be a finite number > 0, got inf"),
        ("ring:4,nic=200", r"named spec 'ring:4,nic=200': takes no options, got 'nic=200'"),
        ("h200-proto,nic=100", r"named spec 'h200-proto,nic=100': takes no options"),
        ("torus:3x3,x=1", r"takes no options"),
    ],
)
def test_named_topology_rejects_bad_spec_naming_it(spec: str, match: str) -> None:
    with pytest.raises(TopologyError, match=match):
        named_topology(spec)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: ring(4, gbps=-1.0), r"ring gbps must be a finite number > 0, got -1\.0"),
        (lambda: ring(True), r"ring GPU count N must be an integer >= 2, got True"),  # type: ignore[arg-type]
        (lambda: nvswitch(4, gbps=0.0), r"nvswitch gbps must be a finite number > 0"),
        (lambda: torus(3, 3, gbps=float("nan")), r"torus gbps must be a finite number > 0, got nan"),
        (lambda: hpn(1, 2, 2.5), r"hpn GPUs per host N must be an integer >= 1, got 2\.5"),  # type: ignore[arg-type]
        (lambda: hpn(1, 2, 2, nic_gbps="400"), r"hpn option nic \(Gbit/s\) must be a finite number > 0, got '400'"),  # type: ignore[arg-type]
        (lambda: dgx_a100(-1), r"dgx-a100 hosts H must be an integer >= 1, got -1"),
    ],
)
def test_builders_reject_bad_arguments(call, match: str) -> None:
    with pytest.raises(TopologyError, match=match):
        call()


def test_builder_name_override_and_default_names() -> None:
    assert hpn(1, 2, 2, name="mine").name == "mine"
    assert named_topology("hpn:1x2x2,nic=200").name == "hpn-1x2x2,nic=200"
    assert named_topology("hpn:1x2x2,nic=400").name == "hpn-1x2x2"  # the default is not spelled out
    assert named_topology("torus:2x3").name == "torus-2x3"
    assert named_topology("nvswitch:3").name == "nvswitch-3"

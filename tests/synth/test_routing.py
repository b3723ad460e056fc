"""The executor's pair routing (synth.routing) and the topology ``routes`` overrides (issue 16)."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from synth.errors import TopologyError
from synth.paths import switch_path
from synth.routed.fabrics import forestcoll_dgx_a100, mi250_like, random_fabric
from synth import routing
from synth.routing import has_route_choice, pair_route, route_table
from synth.topologies import Link, Node, NodeKind, Topology, named_topology
from synth.topologies.io import topology_from_json, topology_to_dict, topology_to_json

from tests.strategies import random_topologies, switch_fabrics


def _cable(a: str, b: str, gbps: float) -> list[Link]:
    return [Link(a, b, gbps, 0.0), Link(b, a, gbps, 0.0)]


def _fabric(routes: list[list[str]] | None = None, *, nic1_gbps: float = 100.0) -> Topology:
    """gpu0, gpu1 on host switch hs (role nvswitch) and on two NIC switches; gpu0-gpu2 direct; gpu2 only on nic0."""
    nodes = [Node(f"gpu{r}", NodeKind.GPU, r, 0 if r < 2 else 1) for r in range(3)]
    nodes += [Node("hs", NodeKind.SWITCH, role="nvswitch"), Node("nic0", NodeKind.SWITCH, role="tor"),
              Node("nic1", NodeKind.SWITCH, role="tor")]
    links = _cable("gpu0", "hs", 50.0) + _cable("gpu1", "hs", 50.0)
    links += _cable("gpu0", "nic0", 100.0) + _cable("gpu1", "nic0", 100.0) + _cable("gpu2", "nic0", 100.0)
    links += _cable("gpu0", "nic1", nic1_gbps) + _cable("gpu2", "nic1", nic1_gbps)
    links += _cable("gpu0", "gpu2", 10.0)
    return Topology.create("policy", nodes, links, routes=routes or ())


def test_policy_direct_then_host_switch_then_widest_network_path() -> None:
    t = _fabric()
    assert pair_route(t, "gpu0", "gpu2") == ("gpu0", "gpu2")  # direct link, though narrow
    assert pair_route(t, "gpu0", "gpu1") == ("gpu0", "hs", "gpu1")  # host switch, though narrower than nic0
    assert pair_route(t, "gpu1", "gpu2") == ("gpu1", "nic0", "gpu2")  # the only network path
    assert pair_route(t, "gpu0", "gpu0") == ("gpu0",)
    # gpu2 -> gpu0 is direct; take that link down: two NIC paths of equal hops, the wider wins, then ids
    down = t.with_link("gpu2", "gpu0", gbps=0.0)
    assert pair_route(down, "gpu2", "gpu0") == ("gpu2", "nic0", "gpu0")
    wide = _fabric(nic1_gbps=400.0).with_link("gpu2", "gpu0", gbps=0.0)
    assert pair_route(wide, "gpu2", "gpu0") == ("gpu2", "nic1", "gpu0")
    assert has_route_choice(t)


def test_route_override_wins_and_a_dead_override_means_no_route() -> None:
    t = _fabric([["gpu0", "nic1", "gpu2"]])
    assert pair_route(t, "gpu0", "gpu2") == ("gpu0", "nic1", "gpu2")
    assert pair_route(t, "gpu2", "gpu0") == ("gpu2", "gpu0")  # overrides are per ordered pair
    assert pair_route(t.with_link("nic1", "gpu2", gbps=0.0), "gpu0", "gpu2") is None
    assert route_table(t)[(0, 2)] == ("gpu0", "nic1", "gpu2")


def test_routes_round_trip_and_enter_the_fingerprint() -> None:
    t = _fabric([["gpu0", "nic1", "gpu2"]])
    back = topology_from_json(topology_to_json(t))
    assert back == t and back.routes == (("gpu0", "nic1", "gpu2"),)
    assert t.fingerprint != _fabric().fingerprint
    assert "routes" not in topology_to_dict(_fabric())  # files without overrides are unchanged
    assert t.reversed().routes == (("gpu2", "nic1", "gpu0"),)
    assert t.with_link("gpu0", "hs", gbps=1.0).routes == t.routes
    assert t.communicator([0, 2]).routes == t.routes
    assert t.communicator([0, 1]).routes == ()


@pytest.mark.parametrize(
    ("routes", "culprit"),
    [
        ([["gpu0", "nic9", "gpu2"]], r"route gpu0->nic9->gpu2: unknown node id 'nic9'"),
        ([["gpu0", "nic1"]], r"must start and end at a gpu"),
        ([["gpu1", "nic0", "gpu2", "nic1", "gpu0"]], r"passes gpu 'gpu2'"),
        ([["gpu1", "nic1", "gpu2"]], r"uses link gpu1->nic1, absent"),
        ([["gpu0", "nic0", "gpu2"], ["gpu0", "nic1", "gpu2"]], r"two routes for gpu0->gpu2"),
        ([["gpu0", "nic0", "hs", "nic0", "gpu1"]], r"visits a node twice|absent"),
        ([["gpu0"]], r"at least two node ids"),
    ],
)
def test_bad_routes_are_rejected_naming_the_culprit(routes: list[list[str]], culprit: str) -> None:
    doc = topology_to_dict(_fabric())
    doc["routes"] = routes
    with pytest.raises(TopologyError, match=culprit):
        topology_from_json(json.dumps(doc), source="t.json")


def test_routes_must_be_a_list_of_paths() -> None:
    doc = topology_to_dict(_fabric())
    doc["routes"] = {"gpu0": "gpu2"}
    with pytest.raises(TopologyError, match=r"t\.json: 'routes' must be a list of node-id lists"):
        topology_from_json(json.dumps(doc), source="t.json")


@pytest.mark.parametrize("spec", ["ring:5", "nvswitch:8", "hpn:2x2x4", "dgx-a100:2", "dgx-h100:4", "torus:3x4",
                                  "h200-proto"])
def test_named_specs_have_one_path_per_pair_and_routes_are_todays_paths(spec: str) -> None:
    t = named_topology(spec)
    assert not has_route_choice(t)
    for (u, v), path in route_table(t).items():
        assert path == switch_path(t, t.gpu_id(u), t.gpu_id(v))


def test_fabrics_of_the_issue_offer_several_switch_paths() -> None:
    dgx = forestcoll_dgx_a100(2)
    assert has_route_choice(dgx) and has_route_choice(mi250_like(1)) and has_route_choice(random_fabric(0, 8))
    assert pair_route(dgx, "gpu0", "gpu2") == ("gpu0", "nvs0", "gpu2")  # not over ib0
    assert pair_route(dgx, "gpu0", "gpu10") == ("gpu0", "ib0", "gpu10")
    assert pair_route(dgx, "gpu0", "gpu9") is None  # different IB switches: relayed by a GPU


def _pairs_with_choice(t: Topology) -> set[tuple[str, str]]:
    """Reference: every ordered GPU pair with two simple switch-only paths over live links, by exhaustive
    enumeration of those paths (no budget; small fabrics only)."""
    found: set[tuple[str, str]] = set()
    for g in t.gpus:
        ends: dict[str, int] = {}

        def walk(v: str, on_path: frozenset[str], src: str = g.id, ends: dict[str, int] = ends) -> None:
            for lk in t.out_links(v):
                w = lk.dst
                if lk.gbps <= 0 or w in on_path:
                    continue
                if t.node(w).is_gpu:
                    ends[w] = ends.get(w, 0) + 1
                else:
                    walk(w, on_path | {w})

        walk(g.id, frozenset({g.id}))
        found |= {(g.id, dst) for dst, count in ends.items() if count > 1}
    return found


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(switch_fabrics(max_hosts=3, max_gpus_per_host=3, max_leaves=3),
                 random_topologies(min_gpus=2, max_gpus=5, max_switches=4),
                 random_topologies(min_gpus=2, max_gpus=5, max_switches=4, symmetric=False)))
def test_route_choice_equals_exhaustive_enumeration(t: Topology) -> None:
    pairs = _pairs_with_choice(t)
    assert has_route_choice(t) == bool(pairs)
    for g in t.gpus:
        for h in t.gpus:
            if g.id != h.id:
                assert routing._has_two_paths(t, g.id, h.id) == ((g.id, h.id) in pairs), (g.id, h.id)


@pytest.mark.parametrize("spec", ["ring:5", "nvswitch:8", "hpn:2x2x4", "dgx-a100:2", "torus:3x4", "h200-proto"])
def test_route_choice_of_named_specs_equals_exhaustive_enumeration(spec: str) -> None:
    t = named_topology(spec)
    assert has_route_choice(t) == bool(_pairs_with_choice(t)) is False


def test_route_choice_is_exact_at_2048_gpus() -> None:
    """main gave up after 200 000 enumerated paths from 1536 GPUs on and answered "yes" (issue 31)."""
    big = named_topology("hpn:16x16x8")
    assert len(big.gpus) == 2048 and not has_route_choice(big)
    # a second cable from gpu0 to its ToR through an extra switch: gpu0 now has two paths to its ToR's GPUs
    extra = [Node("nicx", NodeKind.SWITCH, role="nic")]
    tor = next(lk.dst for lk in big.out_links("gpu0") if lk.dst.startswith("tor"))
    links = _cable("gpu0", "nicx", 400.0) + _cable("nicx", tor, 400.0)
    assert has_route_choice(Topology.create("hpn+nic", [*big.nodes, *extra], [*big.links, *links]))

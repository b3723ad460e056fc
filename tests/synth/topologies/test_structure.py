"""Switch roles (explicit and inferred) and the rail layout read from a fabric's graph."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synth import TopologyError
from synth.topologies import (
    ROLES,
    Node,
    NodeKind,
    Topology,
    hpn,
    infer_role,
    named_topology,
    rail_layout,
    switch_roles,
    topology_from_json,
    topology_to_dict,
    topology_to_json,
)
from tests.strategies import random_topologies


def _strip_roles(topo: Topology) -> Topology:
    return Topology.create(topo.name, [Node(n.id, n.kind, n.rank, n.host) for n in topo.nodes], topo.links)


@pytest.mark.parametrize("spec", ["hpn:1x2x8", "hpn:2x2x4", "dgx-a100:2", "nvswitch:4", "h200-proto", "hpn:1x3x1"])
def test_inference_agrees_with_named_roles_where_the_graph_tells(spec: str) -> None:
    topo = named_topology(spec)
    assert switch_roles(_strip_roles(topo)) == {s.id: s.role for s in topo.switches}


def test_documented_ambiguous_cases() -> None:
    one_host = _strip_roles(hpn(1, 1, 4))  # a rail switch holding one GPU of the only host
    assert infer_role(one_host, "nvs0.0") == "nvswitch" and infer_role(one_host, "tor0.0") == "nic"
    one_gpu_hosts = _strip_roles(hpn(1, 2, 1))  # an NVSwitch holding the host's only GPU
    assert infer_role(one_gpu_hosts, "nvs0.1") == "nvswitch" and infer_role(one_gpu_hosts, "tor0.0") == "tor"
    spine = _strip_roles(hpn(2, 1, 2))  # one host per segment: ToRs look like NIC-side switches
    assert infer_role(spine, "agg1") == "spine" and infer_role(spine, "tor1.1") == "nic"


def test_explicit_role_wins_and_round_trips() -> None:
    topo = hpn(1, 1, 4)
    assert switch_roles(topo)["tor0.0"] == "tor"
    back = topology_from_json(topology_to_json(topo))
    assert back == topo and [n.role for n in back.nodes] == [n.role for n in topo.nodes]
    assert _strip_roles(topo).fingerprint == topo.fingerprint  # roles do not change the network


@pytest.mark.parametrize(
    ("node", "message"),
    [
        ({"id": "sw", "kind": "switch", "role": "router"}, "'sw': unknown role 'router'"),
        ({"id": "sw", "kind": "switch", "role": 3}, "'sw': unknown role 3"),
        ({"id": "g1", "kind": "gpu", "rank": 1, "role": "nic"}, "'g1': a gpu has no role"),
    ],
)
def test_bad_roles_are_rejected_naming_the_node(node: dict[str, object], message: str) -> None:
    doc = topology_to_dict(named_topology("nvswitch:2"))
    doc["nodes"] = [n for n in doc["nodes"] if n["id"] != node["id"]] + [node]
    if node["kind"] == "gpu":
        doc["nodes"] = [n for n in doc["nodes"] if n.get("rank") != 1 or n["id"] == node["id"]]
        for lk in doc["links"]:
            lk["src"], lk["dst"] = (("g1" if e == "gpu1" else e) for e in (lk["src"], lk["dst"]))
    else:
        doc["links"] += [{"src": "sw", "dst": "gpu0", "gbps": 1.0, "latency_us": 0.0}]
    with pytest.raises(TopologyError, match=message) as err:
        topology_from_json(json.dumps(doc))
    assert all(role in str(err.value) for role in ROLES)


@pytest.mark.parametrize("segments,hosts,gpus", [(1, 2, 8), (2, 3, 4), (1, 1, 8), (1, 4, 1), (2, 1, 1)])
def test_rail_layout_of_hpn_is_hosts_by_rails(segments: int, hosts: int, gpus: int) -> None:
    layout = rail_layout(_strip_roles(hpn(segments, hosts, gpus)))
    assert layout is not None
    assert layout.hosts == tuple(tuple(h * gpus + i for i in range(gpus)) for h in range(segments * hosts))


def test_no_rail_layout_without_a_network_or_with_shared_nics() -> None:
    assert rail_layout(named_topology("nvswitch:4")) is None
    assert rail_layout(named_topology("torus:3x3")) is None
    # two GPUs of a host behind one NIC switch: not one NIC per GPU
    topo = hpn(1, 2, 2)
    doc = topology_to_dict(topo)
    for lk in doc["links"]:
        lk["src"], lk["dst"] = (("tor0.0" if e == "tor0.1" else e) for e in (lk["src"], lk["dst"]))
    doc["links"] = list({(lk["src"], lk["dst"]): lk for lk in doc["links"]}.values())
    doc["nodes"] = [n for n in doc["nodes"] if n["id"] != "tor0.1"]
    assert rail_layout(topology_from_json(json.dumps(doc))) is None


@settings(max_examples=60)
@given(random_topologies(max_gpus=5, max_switches=3))
def test_roles_and_layout_are_total_and_consistent_on_random_fabrics(topo: Topology) -> None:
    roles = switch_roles(topo)
    assert set(roles) == {s.id for s in topo.switches} and set(roles.values()) <= set(ROLES)
    layout = rail_layout(topo)
    if layout is not None:
        ranks = sorted(r for row in layout.hosts for r in row)
        assert ranks == list(range(topo.nranks))
        assert len({len(row) for row in layout.hosts}) == 1


@given(st.sampled_from(["nvswitch", "nic", "tor", "spine"]))
def test_every_role_is_accepted_on_a_switch(role: str) -> None:
    topo = named_topology("nvswitch:2")
    nodes = [Node(n.id, n.kind, n.rank, n.host, role if n.kind is NodeKind.SWITCH else None) for n in topo.nodes]
    assert switch_roles(Topology.create("t", nodes, topo.links))["nvs0.0"] == role

"""The immutable topology model (synth/topologies/model.py)."""

from __future__ import annotations

import dataclasses
from fractions import Fraction

import pytest
from hypothesis import given, settings

from synth.errors import TopologyError
from synth.topologies import (Link, Node, NodeKind, Topology, exact_gbps, named_topology, topology_from_dict,
                              topology_to_dict)
from tests.strategies import random_topologies, topology_doc


def test_lookups_on_named_topology() -> None:
    topo = named_topology("hpn:1x2x4")
    assert topo.nranks == 8
    assert [g.id for g in topo.gpus] == [f"gpu{r}" for r in range(8)]
    assert topo.gpu_id(5) == "gpu5"
    assert topo.rank_of("gpu5") == 5
    assert topo.node("tor0.1").kind is NodeKind.SWITCH
    assert topo.has_node("nvs0.1") and not topo.has_node("nvs0.2")
    assert topo.has_link("gpu0", "tor0.0") and not topo.has_link("gpu0", "tor0.1")
    assert {lk.dst for lk in topo.out_links("gpu0")} == {"nvs0.0", "tor0.0"}
    assert {lk.src for lk in topo.in_links("tor0.0")} == {"gpu0", "gpu4"}
    assert topo.link("gpu0", "tor0.0").GBps == 50.0
    assert topo.link("gpu0", "tor0.0").key == ("gpu0", "tor0.0")


def test_gpus_are_ordered_by_rank_not_file_order() -> None:
    doc = topology_doc()
    doc["nodes"] = [doc["nodes"][2], doc["nodes"][1], doc["nodes"][0]]
    topo = topology_from_dict(doc)
    assert [g.id for g in topo.gpus] == ["gpu0", "gpu1"]
    assert [n.id for n in topo.nodes] == ["sw0", "gpu1", "gpu0"]


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda t: t.node("ghost"), r"has no node 'ghost'"),
        (lambda t: t.link("gpu0", "gpu2"), r"has no link gpu0->gpu2"),
        (lambda t: t.gpu_id(4), r"has no rank 4 \(ranks 0\.\.3\)"),
        (lambda t: t.gpu_id(-1), r"has no rank -1"),
        (lambda t: t.rank_of("nvs0.0"), r"node 'nvs0\.0' is a switch"),
        (lambda t: t.out_links("ghost"), r"has no node 'ghost'"),
        (lambda t: t.scaled("gpu0", "gpu1", 2.0), r"has no link gpu0->gpu1"),
        (lambda t: t.with_link("gpu0", "gpu1", gbps=1.0), r"has no link gpu0->gpu1"),
        (lambda t: t.with_link("gpu0", "nvs0.0", gbps=-1.0), r"gpu0->nvs0\.0: gbps .* got -1\.0"),
    ],
)
def test_lookup_errors_name_the_culprit(call, match: str) -> None:
    with pytest.raises(TopologyError, match=match):
        call(named_topology("nvswitch:4"))


@pytest.mark.parametrize("factor", [-0.5, float("nan"), float("inf")])
def test_scaled_rejects_bad_factor(factor: float) -> None:
    with pytest.raises(TopologyError, match=r"scale factor for gpu0->nvs0\.0 must be finite and >= 0"):
        named_topology("nvswitch:4").scaled("gpu0", "nvs0.0", factor)


def test_scaled_changes_both_directions_only() -> None:
    topo = named_topology("nvswitch:4")
    new = topo.scaled("nvs0.0", "gpu2", 0.25)
    changed = {lk.key for lk in new.links if lk != topo.link(*lk.key)}
    assert changed == {("gpu2", "nvs0.0"), ("nvs0.0", "gpu2")}
    assert new.link("gpu2", "nvs0.0").gbps == 720.0
    assert new.name == topo.name
    assert topo.link("gpu2", "nvs0.0").gbps == 2880.0  # the original is untouched


def test_with_link_changes_one_direction() -> None:
    topo = named_topology("ring:3")
    new = topo.with_link("gpu0", "gpu1", gbps=100.0, latency_us=2.0)
    assert new.link("gpu0", "gpu1") == Link("gpu0", "gpu1", 100.0, 2.0)
    assert new.link("gpu1", "gpu0") == topo.link("gpu1", "gpu0")
    assert not new.is_symmetric and topo.is_symmetric


def test_with_link_validates_reachability() -> None:
    with pytest.raises(TopologyError, match=r"gpu 'gpu1' \(rank 1\).*cannot reach"):
        named_topology("ring:2").with_link("gpu0", "gpu1", gbps=0.0)


def test_reversed_turns_every_link() -> None:
    topo = named_topology("ring:3").with_link("gpu0", "gpu1", gbps=100.0)
    rev = topo.reversed()
    assert rev.link("gpu1", "gpu0").gbps == 100.0
    assert rev.link("gpu0", "gpu1").gbps == 400.0
    assert rev.name == "ring-3-reversed"
    assert rev.reversed().links == topo.links


def test_live_links_exclude_down_links() -> None:
    topo = named_topology("ring:4").scaled("gpu0", "gpu1", 0.0)
    assert ("gpu0", "gpu1") not in {lk.key for lk in topo.live_links}
    assert len(topo.live_links) == len(topo.links) - 2


def test_topology_is_frozen_and_meta_is_read_only() -> None:
    topo = named_topology("ring:3")
    with pytest.raises(dataclasses.FrozenInstanceError):
        topo.name = "x"  # type: ignore[misc]
    with pytest.raises(TypeError):
        topo.meta["family"] = "x"  # type: ignore[index]


def test_create_copies_meta() -> None:
    meta = {"family": "mine"}
    topo = Topology.create("pair", [Node("a", NodeKind.GPU, 0), Node("b", NodeKind.GPU, 1)],
                           [Link("a", "b", 1.0, 0.0), Link("b", "a", 1.0, 0.0)], meta)
    meta["family"] = "changed"
    assert topo.meta["family"] == "mine"


def test_create_rejects_meta_that_is_not_json() -> None:
    with pytest.raises(TopologyError, match=r"meta must be JSON-serialisable"):
        Topology.create("pair", [Node("a", NodeKind.GPU, 0), Node("b", NodeKind.GPU, 1)],
                        [Link("a", "b", 1.0, 0.0), Link("b", "a", 1.0, 0.0)], {"x": object()})


def test_equality_and_hash() -> None:
    a, b = named_topology("torus:3x3"), named_topology("torus:3x3")
    assert a == b and hash(a) == hash(b)
    assert a != named_topology("torus:3x3").scaled("gpu0", "gpu1", 0.5)
    assert a != a.with_links(a.links, name="other")
    assert (a == "torus:3x3") is False


def test_fingerprint_ignores_name_and_meta_but_not_capacities() -> None:
    topo = named_topology("hpn:1x2x4")
    renamed = Topology.create("other", topo.nodes, topo.links, {"x": 1})
    assert renamed.fingerprint == topo.fingerprint
    assert topo.scaled("gpu0", "nvs0.0", 0.5).fingerprint != topo.fingerprint
    assert topo.with_link("gpu0", "nvs0.0", latency_us=9.0).fingerprint != topo.fingerprint
    assert len(topo.fingerprint) == 16 and int(topo.fingerprint, 16) >= 0


def test_fingerprint_is_pinned() -> None:
    # Fingerprints key schedule caches across versions: changing them invalidates every cache.
    assert named_topology("ring:4").fingerprint == "dfe47f1cfb3218dd"


def test_is_symmetric() -> None:
    assert named_topology("hpn:2x2x2").is_symmetric
    assert not named_topology("hpn:1x2x2").with_link("gpu0", "tor0.0", gbps=1.0).is_symmetric
    one_way = Topology.create("cyc", [Node(f"g{i}", NodeKind.GPU, i) for i in range(3)],
                              [Link("g0", "g1", 1.0, 0.0), Link("g1", "g2", 1.0, 0.0), Link("g2", "g0", 1.0, 0.0)])
    assert not one_way.is_symmetric


def test_repr_summarises() -> None:
    assert repr(named_topology("nvswitch:4")) == "Topology('nvswitch-4', 4 GPUs, 1 switches, 8 links)"


@pytest.mark.parametrize(("gbps", "exact"), [(2880.0, Fraction(2880)), (0.1, Fraction(1, 10)),
                                             (12.5, Fraction(25, 2)), (0.0, Fraction(0))])
def test_exact_gbps_uses_shortest_decimal(gbps: float, exact: Fraction) -> None:
    assert exact_gbps(gbps) == exact


@settings(max_examples=50)
@given(random_topologies(symmetric=True))
def test_symmetric_random_topologies_are_symmetric(topo: Topology) -> None:
    assert topo.is_symmetric
    assert {(lk.key, lk.gbps) for lk in topo.reversed().links} == {(lk.key, lk.gbps) for lk in topo.links}


@settings(max_examples=50)
@given(random_topologies())
def test_random_topology_links_and_ranks_are_consistent(topo: Topology) -> None:
    assert [g.rank for g in topo.gpus] == list(range(topo.nranks))
    for lk in topo.links:
        assert lk in topo.out_links(lk.src) and lk in topo.in_links(lk.dst)
    assert sum(len(topo.out_links(n.id)) for n in topo.nodes) == len(topo.links)


@pytest.mark.filterwarnings("ignore:.*without a reverse link")
@settings(max_examples=25, deadline=None)
@given(random_topologies())
def test_equality_is_by_content_name_meta_and_roles(topo: Topology) -> None:
    """Equal but distinct topologies compare equal (a cache keyed by a topology finds them); a change of a
    capacity, a role, the name or meta makes them differ; an integer capacity equals the same float."""
    doc = topology_to_dict(topo)
    twin = topology_from_dict(doc)
    assert twin is not topo and twin == topo and hash(twin) == hash(topo)
    links = [dict(lk) for lk in doc["links"]]
    links[0]["gbps"] = links[0]["gbps"] * 2 + 1
    assert topology_from_dict({**doc, "links": links}) != topo
    assert topology_from_dict({**doc, "name": doc["name"] + "-x"}) != topo
    assert topology_from_dict({**doc, "meta": {**doc.get("meta", {}), "note": "x"}}) != topo
    as_int = [dict(lk, gbps=int(lk["gbps"])) if float(lk["gbps"]).is_integer() else dict(lk) for lk in doc["links"]]
    assert topology_from_dict({**doc, "links": as_int}) == topo
    switches = [n for n in doc["nodes"] if n["kind"] == "switch"]
    if switches:
        nodes = [dict(n, role="nvswitch" if n.get("role") != "nvswitch" else "tor") if n is switches[0] else n
                 for n in doc["nodes"]]
        assert topology_from_dict({**doc, "nodes": nodes}) != topo

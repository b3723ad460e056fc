"""``runtime.loop.routeflows.route_flows`` against the per-hop definition, on every kind of route."""

from __future__ import annotations

from collections import defaultdict

import pytest

from runtime.loop import routeflows
from runtime.loop.bootstrap import fallback_schedule
from runtime.loop.estimator import ScheduleRouting
from runtime.loop.routeflows import route_flows
from synth import load_topology, synthesize


def _reference(routes, g):
    """The definition, one hop at a time (the estimator's former loop)."""
    chunks, paths = defaultdict(int), defaultdict(set)
    upstream, reduced = defaultdict(set), defaultdict(set)
    for route in routes:
        into = defaultdict(set)
        for hop in route.hops:
            pair = (g[hop.src], g[hop.dst])
            chunks[pair] += route.chunks
            paths[pair].add(hop.path)
            into[g[hop.dst]].add(pair)
        for hop in route.hops:
            upstream[(g[hop.src], g[hop.dst])].update(into.get(g[hop.src], ()))
        if route.kind.value == "in_tree":
            reduced[g[route.root]].update(into.get(g[route.root], ()))
    up = {k: v - {k} for k, v in upstream.items() if v - {k}}
    return dict(chunks), dict(paths), up, {k: v for k, v in reduced.items() if v}


CASES = [("allgather", "hpn:1x2x4", "synth"), ("allreduce", "hpn:1x2x4", "synth"),
         ("reducescatter", "hpn:1x2x4", "ring"), ("allreduce", "hpn:2x2x4", "ring"),
         ("alltoall", "hpn:1x2x4", "synth"), ("alltoall", "hpn:2x2x4", "ring")]


@pytest.mark.parametrize(("coll", "spec", "how"), CASES)
@pytest.mark.parametrize("batch", [1, 7, 1 << 21])
def test_route_flows_is_the_per_hop_definition(coll, spec, how, batch, monkeypatch):
    monkeypatch.setattr(routeflows, "_BATCH_HOPS", batch)  # batches of one route up to the whole schedule
    topo = load_topology(spec)
    sched = synthesize(coll, topo).schedule if how == "synth" else fallback_schedule(coll, topo)
    g = [3 * r + 1 for r in range(sched.nranks)]  # global ranks that are not the local ones
    got = route_flows(sched.routes, g)
    chunks, paths, up, red = _reference(sched.routes, g)
    assert got.chunks == chunks
    assert got.paths == paths
    assert got.upstream == up
    assert got.reduced_into == red
    assert (len(red) > 0) == (coll in ("allreduce", "reducescatter"))
    assert any(len(v) > 0 for v in up.values())


def test_routing_of_a_ring_feeds_each_hop_from_its_predecessor():
    topo = load_topology("hpn:2x2x4")
    ring = fallback_schedule("allgather", topo)
    r = ScheduleRouting.build(ring, topo)
    assert set(r.upstream) <= set(r.pair_chunks)
    for (u, _v), feeders in r.upstream.items():
        assert all(w_dst == u for _w, w_dst in feeders)


def test_controller_builds_a_deployed_versions_routing_off_the_poll(tmp_path):
    from runtime import Controller, ControllerConfig, profile_from_dict

    topo = load_topology("hpn:1x2x4")
    prof = profile_from_dict({"format": "loopcoll.profile/1", "topology": "hpn:1x2x4", "communicators": [
        {"name": "world", "ranks": list(range(8)), "collectives": [{"collective": "allgather", "sizes": [1 << 24]}]}]})
    ctl = Controller(topo, prof, tmp_path, config=ControllerConfig(export_xml=False))
    ring = fallback_schedule("allgather", topo)
    ctl.deploy("world", "allgather", ring, reason="test")
    key = ("world", "allgather", 1, None)
    assert key in ctl._building  # started by the deploy, before any telemetry
    got = ctl._routing_for(*key)
    want = ScheduleRouting.build(ring, topo)
    assert got is not None and key not in ctl._building
    assert (dict(got.pair_chunks), dict(got.link_chunks), dict(got.upstream)) == \
        (dict(want.pair_chunks), dict(want.link_chunks), dict(want.upstream))

"""Pattern transforms: every emitted transform passes the MSCCL symbolic checker (random patterns)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.contention.transforms import (
    Transform,
    TransformError,
    TransformKind,
    apply,
    candidates,
    choose_transform,
    chunk_graphs,
    double_tree,
    verify,
)
from synth.baselines import nccl_ring
from synth.paths import switch_path
from synth.schedule import Hop, Route, RouteKind, Schedule
from synth.simulation.contention import leaf_spine, nic_links, sustained
from synth.topologies import named_topology


def _hop(topo, a: int, b: int) -> Hop:
    return Hop(a, b, switch_path(topo, topo.gpu_id(a), topo.gpu_id(b)))


def random_trees(collective: str, topo, rng: random.Random, nchannels: int) -> Schedule:
    """Per root and channel a random tree (each new rank attaches to a random earlier one)."""
    n = topo.nranks
    routes = []
    for _ in range(nchannels):
        for root in range(n):
            order = [root] + rng.sample([r for r in range(n) if r != root], n - 1)
            down = tuple(_hop(topo, order[rng.randrange(i)], order[i]) for i in range(1, n))
            if collective in ("reducescatter", "allreduce"):
                routes.append(Route(RouteKind.IN_TREE, root, 1, tuple(_hop(topo, h.dst, h.src) for h in reversed(down))))
            if collective in ("allgather", "allreduce"):
                routes.append(Route(RouteKind.OUT_TREE, root, 1, down))
    return Schedule(collective, n, nchannels, tuple(routes))


def _pattern(kind: str, collective: str, topo, rng: random.Random, nchannels: int) -> Schedule:
    if kind == "ring":
        return nccl_ring(collective, topo, nchannels=nchannels)
    if kind == "tree":
        return double_tree(collective, topo)
    return random_trees(collective, topo, rng, nchannels)


@settings(max_examples=25)
@given(n=st.integers(3, 6), kind=st.sampled_from(["ring", "tree", "random"]),
       collective=st.sampled_from(["allgather", "reducescatter", "allreduce"]), nchannels=st.integers(1, 3),
       seed=st.integers(0, 10**6), fabric=st.sampled_from(["nvswitch", "leafspine"]))
def test_every_candidate_transform_passes_the_checker(n: int, kind: str, collective: str, nchannels: int, seed: int,
                                                      fabric: str) -> None:
    topo = named_topology(f"nvswitch:{n}") if fabric == "nvswitch" else leaf_spine(n, 1)
    rng = random.Random(seed)
    sched = _pattern(kind, collective, topo, rng, nchannels)
    assert verify(sched)[0]
    congested = rng.sample(range(n), rng.randint(1, 2))
    cands = candidates(sched, congested)
    assert cands, "every congested rank has at least a global swap"
    kinds = [c.kind for c in cands]
    assert kinds == sorted(kinds, key=lambda k: {"position": 0, "chunk": 1, "global": 2}[k.value])
    for t in rng.sample(cands, min(4, len(cands))):
        out = apply(sched, topo, t)  # proof=True: lowered and checked, raises otherwise
        assert verify(out)[0]
        assert out.meta["transform"] == t.describe()
        assert sorted(r.chunks for r in out.routes) == sorted(r.chunks for r in sched.routes)


def test_chunk_graphs_of_known_patterns() -> None:
    topo = named_topology("nvswitch:4")
    assert len(chunk_graphs(nccl_ring("allreduce", topo, nchannels=3))) == 3
    assert len(chunk_graphs(double_tree("allgather", topo))) == 2
    # uneven chunk counts per root: one graph
    s = nccl_ring("allgather", topo, nchannels=2)
    uneven = Schedule(s.collective, s.nranks, 2, (Route(s.routes[0].kind, 0, 2, s.routes[0].hops),) + s.routes[1:4])
    assert chunk_graphs(uneven) == ((0, 1, 2, 3),)


def test_checker_rejects_a_non_permutation_relabel() -> None:
    """The proof is real: moving one tree's root without its data breaks the collective."""
    topo = named_topology("nvswitch:4")
    s = nccl_ring("allgather", topo, nchannels=1)
    r0 = s.routes[0]
    bad = Schedule(s.collective, 4, 1, (Route(r0.kind, 1, 1, r0.hops),) + s.routes[1:])
    ok, err = verify(bad)
    assert not ok and err


def test_malformed_transforms_raise() -> None:
    topo = named_topology("nvswitch:4")
    s = double_tree("allreduce", topo)
    with pytest.raises(TransformError, match="distinct ranks"):
        apply(s, topo, Transform(TransformKind.GLOBAL, (1, 1)))
    with pytest.raises(TransformError, match="chunk graphs"):
        apply(s, topo, Transform(TransformKind.CHUNK, (0, 1), group=5))
    with pytest.raises(TransformError, match="endpoint"):
        apply(s, topo, Transform(TransformKind.POSITION, (s.routes[0].root, 2), route=0))
    with pytest.raises(TransformError, match="cannot reach"):
        apply(nccl_ring("allgather", named_topology("ring:5")), named_topology("ring:5"),
              Transform(TransformKind.GLOBAL, (0, 2)))


def test_choose_transform_takes_congested_rank_off_forwarding_positions() -> None:
    topo = leaf_spine(8, 4)
    sched = double_tree("allgather", topo)
    measured = sustained(nic_links(topo, 3), 0.8).topology_at(topo, 0)
    choice = choose_transform(sched, topo, measured, 64 << 20, [3], steps=4, min_gain=0.05, simulate_top=2)
    assert choice.status == "apply" and choice.gain >= 0.05
    assert verify(choice.schedule)[0]
    sends = sum(r.chunks for r in sched.routes for h in r.hops if h.src == 3)
    sends_after = sum(r.chunks for r in choice.schedule.routes for h in r.hops if h.src == 3)
    assert sends_after < sends
    # nothing congested on a healthy fabric: nothing worth doing
    keep = choose_transform(sched, topo, topo, 64 << 20, [3], min_gain=0.05)
    assert keep.status == "keep" and keep.schedule is None and keep.gain == 0.0


def test_a_chosen_transform_is_deployed_as_a_version(tmp_path: Path) -> None:
    # REACT's decision goes out through the normal path: store (files, then manifest) and the executors' pushes.
    from runtime import Controller, ControllerConfig, ProfileError, profile_from_dict

    topo = leaf_spine(8, 4)
    profile = profile_from_dict({"format": "loopcoll.profile/1", "topology": "leaf-spine", "communicators": [
        {"name": "world", "ranks": list(range(topo.nranks)),
         "collectives": [{"collective": "allgather", "sizes": [64 << 20]}]}]})
    ctl = Controller(topo, profile, tmp_path / "store", config=ControllerConfig(export_xml=False))
    (v1,) = ctl.bootstrap()
    measured = sustained(nic_links(topo, 3), 0.8).topology_at(topo, 0)
    choice = choose_transform(double_tree("allgather", topo), topo, measured, 64 << 20, [3], steps=4,
                              min_gain=0.05, simulate_top=2)
    assert choice.status == "apply" and choice.schedule is not None
    v2 = ctl.deploy("world", "allgather", choice.schedule, reason=f"transform: {choice.message}",
                    extra={"transform": list(choice.schedule.meta.get("transform", []))})
    assert (v2.version, v2.reason.startswith("transform")) == (v1.version + 1, True)
    assert ctl.latest() == [v2] and ctl.store.load_schedule(v2) == choice.schedule
    assert ctl.deployed_schedule("world", "allgather")[1] == choice.schedule
    with pytest.raises(ProfileError, match="reducescatter"):
        ctl.deploy("world", "reducescatter", choice.schedule, reason="x")
    with pytest.raises(ProfileError, match="not valid"):
        ctl.deploy("world", "allgather", nccl_ring("allgather", named_topology("ring:8")), reason="x")
    assert ctl.latest() == [v2]

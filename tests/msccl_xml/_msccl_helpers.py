"""Shared fixtures of the msccl_xml tests: vendored vector location, tiny programs, schedule builders."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

from msccl_xml import BufferKind, Gpu, Program, Protocol, Step, StepType, Threadblock, switch_path
from synth.schedule import Hop, Route, RouteKind, Schedule
from synth.topologies import Topology

VECTORS = Path(__file__).resolve().parents[1] / "vectors" / "msccl"


def vector_files() -> list[Path]:
    """Every vendored MSCCL XML vector (tests/vectors/msccl, see its MANIFEST.md), sorted.

    They are part of the repository, so a missing directory is an error, not a skip.
    """
    assert VECTORS.is_dir(), f"vendored MSCCL vectors missing at {VECTORS}: the checkout is incomplete"
    return sorted(VECTORS.rglob("*.xml"))


def rel(path: Path) -> str:
    return path.resolve().relative_to(VECTORS.resolve()).as_posix()


O, I, S = BufferKind.OUTPUT, BufferKind.INPUT, BufferKind.SCRATCH


def step(s: int, t: StepType, buf: BufferKind, off: int, cnt: int = 1, **kw: int) -> Step:
    return Step(s=s, type=t, srcbuf=buf, srcoff=off, dstbuf=buf, dstoff=off, cnt=cnt, **kw)


def ring_allgather(n: int = 4) -> Program:
    """msccl-tools style in-place ring allgather: one tb per GPU (send r+1, recv r-1)."""
    gpus = []
    for r in range(n):
        steps = [step(0, StepType.SEND, O, r)]
        for k in range(1, n - 1):
            steps.append(step(k, StepType.RECV_COPY_SEND, O, (r - k) % n))
        steps.append(step(n - 1, StepType.RECV, O, (r - n + 1) % n))
        tb = Threadblock(id=0, send=(r + 1) % n, recv=(r - 1) % n, chan=0, steps=tuple(steps))
        gpus.append(Gpu(id=r, i_chunks=0, o_chunks=n, s_chunks=0, threadblocks=(tb,)))
    return Program(name="allgather_ring", proto=Protocol.SIMPLE, nchannels=1, nchunksperloop=n,
                   ngpus=n, coll="allgather", inplace=1, outofplace=0, min_bytes=0, max_bytes=0,
                   gpus=tuple(gpus))


def replace_step(p: Program, rank: int, tb: int, pos: int, **changes: object) -> Program:
    gpus = list(p.gpus)
    g = gpus[rank]
    tbs = list(g.threadblocks)
    steps = list(tbs[tb].steps)
    steps[pos] = replace(steps[pos], **changes)
    tbs[tb] = replace(tbs[tb], steps=tuple(steps))
    gpus[rank] = replace(g, threadblocks=tuple(tbs))
    return replace(p, gpus=tuple(gpus))


def set_steps(p: Program, rank: int, tb: int, steps: list[Step]) -> Program:
    """Replace a tb's steps, renumbering ``s`` to positions."""
    gpus = list(p.gpus)
    g = gpus[rank]
    tbs = list(g.threadblocks)
    tbs[tb] = replace(tbs[tb], steps=tuple(replace(st, s=i) for i, st in enumerate(steps)))
    gpus[rank] = replace(g, threadblocks=tuple(tbs))
    return replace(p, gpus=tuple(gpus))


def replace_tb(p: Program, rank: int, tb: int, **changes: object) -> Program:
    gpus = list(p.gpus)
    g = gpus[rank]
    tbs = list(g.threadblocks)
    tbs[tb] = replace(tbs[tb], **changes)
    gpus[rank] = replace(g, threadblocks=tuple(tbs))
    return replace(p, gpus=tuple(gpus))


def _hop(topo: Topology, a: int, b: int) -> Hop:
    return Hop(a, b, switch_path(topo, topo.gpu_id(a), topo.gpu_id(b)))


def _random_tree(rng: random.Random, n: int, root: int) -> list[tuple[int, int]]:
    order = [root] + rng.sample([r for r in range(n) if r != root], n - 1)
    return [(order[rng.randrange(i)], order[i]) for i in range(1, n)]


def _split(rng: random.Random, total: int) -> list[int]:
    parts = []
    while total:
        c = rng.randint(1, total)
        parts.append(c)
        total -= c
    return parts


def random_schedule(topo: Topology, coll: str, nchunks: int, rng: random.Random) -> Schedule:
    """A valid schedule of random trees (or relayed paths for alltoall) on a switch topology."""
    n = topo.nranks
    routes: list[Route] = []
    for r in range(n):
        if coll in ("allgather", "reducescatter", "allreduce"):
            kinds = {"allgather": ["out"], "reducescatter": ["in"], "allreduce": ["in", "out"]}[coll]
            for kind in kinds:
                for c in _split(rng, nchunks):
                    edges = _random_tree(rng, n, r)
                    if kind == "out":
                        hops = tuple(_hop(topo, a, b) for a, b in edges)
                        routes.append(Route(RouteKind.OUT_TREE, r, c, hops))
                    else:
                        hops = tuple(_hop(topo, b, a) for a, b in reversed(edges))
                        routes.append(Route(RouteKind.IN_TREE, r, c, hops))
        else:
            for d in range(n):
                if d == r:
                    continue
                for c in _split(rng, nchunks):
                    others = [x for x in range(n) if x not in (r, d)]
                    mids = rng.sample(others, rng.randint(0, min(2, len(others))))
                    path = [r, *mids, d]
                    hops = tuple(_hop(topo, a, b) for a, b in zip(path, path[1:]))
                    routes.append(Route(RouteKind.PATH, r, c, hops, dest=d))
    return Schedule(coll, n, nchunks, tuple(routes))


def ring_schedule(topo: Topology, coll: str, nchunks: int = 1) -> Schedule:
    """Ring schedules (rank r -> r+1) for every collective."""
    n = topo.nranks
    routes = []
    for r in range(n):
        chain = [(r + k) % n for k in range(n)]
        if coll in ("allgather", "allreduce"):
            hops = tuple(_hop(topo, a, b) for a, b in zip(chain, chain[1:]))
            routes.append(Route(RouteKind.OUT_TREE, r, nchunks, hops))
        if coll in ("reducescatter", "allreduce"):
            into = [(r + 1 + k) % n for k in range(n)]  # ends at r
            hops = tuple(_hop(topo, a, b) for a, b in zip(into, into[1:]))
            routes.append(Route(RouteKind.IN_TREE, r, nchunks, hops))
        if coll == "alltoall":
            for d in range(n):
                if d != r:
                    path = [(r + k) % n for k in range((d - r) % n + 1)]
                    hops = tuple(_hop(topo, a, b) for a, b in zip(path, path[1:]))
                    routes.append(Route(RouteKind.PATH, r, nchunks, hops, dest=d))
    return Schedule(coll, n, nchunks, tuple(routes))

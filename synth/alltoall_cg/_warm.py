"""Warm-start state of the AllToAll synthesizer and seeding from a previous schedule.

:class:`WarmState` is what :attr:`SynthResult.warm_state` holds after a synthesis: the network it
was made for, the path and tree pools, the master's basis and the step bound. A later synthesis
on a topology with the same nodes and links (capacities may differ, links may be down) rebuilds
the master from the pool with the new capacities, installs the old basis, runs dual simplex once
(the basis stays dual feasible after a capacity change) and continues column
generation with primal simplex. Trees through a dead link are kept but bounded to zero. Nothing
in the state is modified, so one state can seed several syntheses.

On any other topology, and for a :class:`~synth.schedule.Schedule` (``--warm-from``), the pool is
seeded with the routes' physical paths that still exist: for each source, tree j takes the j-th
path of every destination.
"""

from __future__ import annotations

import copy
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from synth.alltoall_cg._cg import ColumnGeneration
from synth.alltoall_cg._expanded import Network
from synth.alltoall_cg._pool import PathPool, TreePool
from synth.alltoall_cg._pricing import path_hashes
from synth.alltoall_cg._repair import RoundedState
from synth.alltoall_cg._schedule import RouteCache
from synth.schedule import Schedule

__all__ = ["WarmState", "paths_from_schedule", "seed_paths"]

IntArray = npt.NDArray[np.int64]

@dataclass(frozen=True, eq=False)
class WarmState:
    """In-memory warm start (see the module docstring); treat as opaque."""

    node_ids: tuple[str, ...]
    link_keys: tuple[tuple[str, str], ...]
    solver: str
    steps: int
    paths: PathPool
    trees: TreePool
    tree_loads: IntArray
    basis: object | None
    routes: RouteCache
    live: npt.NDArray[np.bool_] | None = None  # live links it was made for
    hop_diameter: int | None = None  # of those live links
    rounded: RoundedState | None = None  # the rounded schedule, for a local repair

    @classmethod
    def capture(cls, cg: ColumnGeneration, routes: RouteCache, hop_diameter: int | None = None,
                rounded: RoundedState | None = None) -> WarmState:
        assert cg.steps is not None
        return cls(cg.net.node_ids, cg.net.link_keys, cg.solver, cg.steps, copy.copy(cg.paths),
                   _copy_trees(cg.trees), cg.all_loads().copy(), cg.master.lp.basis(), routes,
                   cg.net.live.copy(), hop_diameter, rounded)

    def diameter_for(self, net: Network) -> int | None:
        """The hop diameter of ``net`` when it has the same live links as this state's network."""
        if self.hop_diameter is None or self.live is None or not self.fits(net):
            return None
        return self.hop_diameter if np.array_equal(self.live, net.live) else None

    def fits(self, net: Network) -> bool:
        return self.node_ids == net.node_ids and self.link_keys == net.link_keys

    def node_paths(self) -> list[tuple[int, int, tuple[str, ...]]]:
        """Every distinct path of the pool as (source rank, destination rank, node ids)."""
        return [(int(self.paths.src[p]), int(self.paths.dst[p]), self.paths.node_path(p))
                for p in range(len(self.paths))]


def _copy_trees(trees: TreePool) -> TreePool:
    out = TreePool(trees.n_gpus)
    out.source = trees.source.copy()
    out.paths = trees.paths.copy()
    out._seen = set(trees._seen)  # noqa: SLF001 - same module family, copied on purpose
    return out


def restore(cg: ColumnGeneration, state: WarmState) -> int:
    """Load ``state``'s pools into a fresh ``cg`` on the same links; returns trees bounded to 0.

    Afterwards ``cg.trees_feasible`` says whether every source keeps a usable tree (then the
    master is feasible without fresh seed trees)."""
    cg.paths = copy.copy(state.paths)
    cg.paths.net = cg.net
    cg.trees = _copy_trees(state.trees)
    loads = state.tree_loads
    dead = ~cg.net.live
    upper = np.where(loads[:, dead].any(axis=1), 0.0, np.inf) if dead.any() else None
    cg.tree_loads = [loads]
    cg.master.add_trees(cg.trees.source, loads, upper=upper)
    cg.master.lp.set_basis(state.basis)
    usable = cg.trees.source if upper is None else cg.trees.source[upper > 0]
    cg.trees_feasible = len(np.unique(usable)) == cg.net.n_gpus
    return 0 if upper is None else int((upper == 0).sum())


def paths_from_schedule(schedule: Schedule) -> list[tuple[int, int, tuple[str, ...]]]:
    """(source, destination, physical node path) of every route of an AllToAll schedule, by chunks."""
    out = []
    for route in sorted(schedule.routes, key=lambda r: (r.root, r.dest or 0, -r.chunks)):
        if route.dest is None or not route.hops:
            continue
        nodes = list(route.hops[0].path)
        for hop in route.hops[1:]:
            nodes.extend(hop.path[1:])
        out.append((route.root, route.dest, tuple(nodes)))
    return out


def seed_paths(cg: ColumnGeneration, paths: Iterable[tuple[int, int, tuple[str, ...]]]) -> int:
    """Add trees built from explicit node paths (skipping dead, missing or too long ones)."""
    net = cg.net
    index = {v: i for i, v in enumerate(net.node_ids)}
    link_of = {key: e for e, key in enumerate(net.link_keys)}
    n = net.n_gpus
    per_pair: dict[tuple[int, int], list[list[int]]] = defaultdict(list)
    for src, dst, nodes in paths:
        if not (0 <= src < n and 0 <= dst < n) or src == dst or any(v not in index for v in nodes):
            continue
        if nodes[0] != net.node_ids[net.gpu_node[src]] or nodes[-1] != net.node_ids[net.gpu_node[dst]]:
            continue
        links = [link_of.get((a, b), -1) for a, b in zip(nodes[:-1], nodes[1:])]
        if any(e < 0 or not net.live[e] for e in links):
            continue
        hops = sum(1 for v in nodes[1:] if net.is_gpu[index[v]])
        gpu_seq = [v for v in nodes if net.is_gpu[index[v]]]
        if len(set(gpu_seq)) != len(gpu_seq) or (cg.steps is not None and hops > cg.steps):
            continue
        if links not in per_pair[(src, dst)]:
            per_pair[(src, dst)].append(links)
    if not per_pair:
        return 0
    pairs = sorted(per_pair.items())
    flat = [(src, dst, links) for (src, dst), seqs in pairs for links in seqs]
    link_arrays = [np.asarray(f[2], dtype=np.int64) for f in flat]
    h1, h2 = path_hashes(link_arrays)
    ids = cg.paths.add_many(
        np.array([f[0] for f in flat], dtype=np.int64),
        np.array([f[1] for f in flat], dtype=np.int64),
        link_arrays,
        h1,
        h2,
        np.array([sum(1 for e in f[2] if net.is_gpu[net.head[e]]) for f in flat], dtype=np.int64),
    ).tolist()
    pair_ids: dict[tuple[int, int], list[int]] = defaultdict(list)
    for (src, dst, _), pid in zip(flat, ids):
        pair_ids[(src, dst)].append(pid)
    added = 0
    by_src: dict[int, dict[int, list[int]]] = defaultdict(dict)
    for (src, dst), ids in pair_ids.items():
        by_src[src][dst] = ids
    sources, rows = [], []
    for src in sorted(by_src):
        dests = by_src[src]
        if len(dests) != n - 1:
            continue  # a tree needs a path to every destination; pricing fills the rest
        depth = max(len(v) for v in dests.values())
        for j in range(depth):
            row = np.full(n, -1, dtype=np.int64)
            for dst, ids in dests.items():
                row[dst] = ids[j % len(ids)]
            sources.append(src)
            rows.append(row)
    if rows:
        added = cg.add_path_trees(np.array(sources, dtype=np.int64), np.stack(rows))
    return added

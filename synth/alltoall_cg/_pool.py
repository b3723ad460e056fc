"""Column pools: distinct paths (per ordered GPU pair) and per-source trees built from them.

Paths are keyed by the 64-bit rolling hash of their link sequence (``TreeSet.hash1``); the second
hash is checked on every hit, so a collision raises instead of mixing two paths up. A tree is a
source plus one path id per destination; its column is the per-link load of those paths.

Examples
--------
>>> from synth.topologies import named_topology
>>> from synth.alltoall_cg._expanded import ExpandedGraph, Network
>>> from synth.alltoall_cg._pricing import price_trees
>>> net = Network.from_topology(named_topology("nvswitch:3"))
>>> paths = PathPool(net)
>>> ids = paths.register(price_trees(ExpandedGraph.build(net, 1), np.ones(net.n_links)))
>>> ids.tolist(), paths.node_path(ids[0, 1])
([[-1, 0, 1], [2, -1, 3], [4, 5, -1]], ('gpu0', 'nvs0.0', 'gpu1'))
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from synth.alltoall_cg._expanded import Network
from synth.alltoall_cg._pricing import TreeSet
from synth.errors import SolverError

__all__ = ["PathPool", "TreePool"]

IntArray = npt.NDArray[np.int64]


class PathPool:
    """Distinct source→destination paths; ``links(p)`` is path p's link ids in order."""

    def __init__(self, net: Network) -> None:
        self.net = net
        self._keys = np.zeros(0, dtype=np.uint64)  # sorted hash1
        self._key_ids = np.zeros(0, dtype=np.int64)
        self.hash2 = np.zeros(0, dtype=np.uint64)
        self.src = np.zeros(0, dtype=np.int64)
        self.dst = np.zeros(0, dtype=np.int64)
        self.steps = np.zeros(0, dtype=np.int64)
        self._starts = np.zeros(1, dtype=np.int64)
        self._links = np.zeros(0, dtype=np.int64)
        self._simple = np.zeros(0, dtype=np.int8)  # per path: 1 GPU-simple, 0 not, -1 not checked yet

    def __len__(self) -> int:
        return len(self.src)

    def _lookup(self, h1: npt.NDArray[np.uint64]) -> IntArray:
        pos = np.searchsorted(self._keys, h1)
        pos_c = np.minimum(pos, max(len(self._keys) - 1, 0))
        found = (pos < len(self._keys)) & (self._keys[pos_c] == h1) if len(self._keys) else np.zeros(len(h1), bool)
        return np.where(found, self._key_ids[pos_c] if len(self._keys) else -1, -1)

    def _insert_keys(self, keys: npt.NDArray[np.uint64], ids: IntArray) -> None:
        """Merge new (distinct, absent) hash keys into the sorted index: O(pool), no re-sort."""
        order = np.argsort(keys, kind="stable")
        at = np.searchsorted(self._keys, keys[order])
        self._keys = np.insert(self._keys, at, keys[order])
        self._key_ids = np.insert(self._key_ids, at, ids[order])

    def register(self, trees: TreeSet, rows: IntArray | None = None) -> IntArray:
        """Path ids of the trees in ``rows`` (all by default): shape (rows, n_gpus), -1 on the diagonal."""
        if rows is None:
            rows = np.arange(len(trees.sources))
        n = self.net.n_gpus
        src = np.repeat(trees.sources[rows], n)
        dst = np.tile(np.arange(n), len(rows))
        h1 = trees.hash1[rows].ravel()
        h2 = trees.hash2[rows].ravel()
        real = src != dst
        out = np.full(len(src), -1, dtype=np.int64)
        idx = np.flatnonzero(real)
        ids = self._lookup(h1[idx])
        new = idx[ids < 0]
        if len(new):
            uniq, first = np.unique(h1[new], return_index=True)
            by_appearance = np.argsort(first, kind="stable")
            uniq, first = uniq[by_appearance], first[by_appearance]
            new_first = new[first]
            base = len(self.src)
            new_ids = base + np.arange(len(uniq))
            # Link sequences, forward order, for the new paths only.
            r_of = rows[new_first // n]
            d_of = new_first % n
            seq = trees.seq[:, r_of, d_of]  # (L, k), backwards, -1 padded
            lengths = (seq >= 0).sum(axis=0)
            fwd = [seq[:ln, j][::-1] for j, ln in enumerate(lengths.tolist())]
            self._starts = np.concatenate([self._starts, self._starts[-1] + np.cumsum(lengths)])
            self._links = np.concatenate([self._links, *fwd]) if fwd else self._links
            self.hash2 = np.concatenate([self.hash2, h2[new_first]])
            self.src = np.concatenate([self.src, src[new_first]])
            self.dst = np.concatenate([self.dst, dst[new_first]])
            self.steps = np.concatenate([self.steps, trees.steps[r_of, d_of]])
            self._insert_keys(uniq, new_ids)
            ids = self._lookup(h1[idx])
        bad = (self.hash2[ids] != h2[idx]) | (self.src[ids] != src[idx]) | (self.dst[ids] != dst[idx])
        if bad.any():
            raise SolverError("path hash collision in the AllToAll column pool; please report this topology")
        out[idx] = ids
        return out.reshape(len(rows), n)

    def add_many(self, src: IntArray, dst: IntArray, links: list[IntArray], h1: npt.NDArray[np.uint64],
                 h2: npt.NDArray[np.uint64], steps: IntArray) -> IntArray:
        """Ids of explicit paths (forward link sequences with their hashes), adding the new ones."""
        ids = self._lookup(h1)
        new = np.flatnonzero(ids < 0)
        if len(new):
            uniq, first = np.unique(h1[new], return_index=True)
            by_appearance = np.argsort(first, kind="stable")
            uniq, first = uniq[by_appearance], new[first[by_appearance]]
            lengths = np.array([len(links[i]) for i in first.tolist()], dtype=np.int64)
            self._starts = np.concatenate([self._starts, self._starts[-1] + np.cumsum(lengths)])
            self._links = np.concatenate([self._links, *[np.asarray(links[i], np.int64) for i in first.tolist()]])
            base = len(self.src)
            self.hash2 = np.concatenate([self.hash2, h2[first]])
            self.src = np.concatenate([self.src, src[first]])
            self.dst = np.concatenate([self.dst, dst[first]])
            self.steps = np.concatenate([self.steps, steps[first]])
            self._insert_keys(uniq, base + np.arange(len(uniq)))
            ids = self._lookup(h1)
        if ((self.hash2[ids] != h2) | (self.src[ids] != src) | (self.dst[ids] != dst)).any():
            raise SolverError("path hash collision in the AllToAll column pool; please report this topology")
        return ids

    def gpu_simple(self, pids: IntArray) -> npt.NDArray[np.bool_]:
        """Whether each path visits every GPU at most once (its source included); cached per path."""
        pids = np.asarray(pids, dtype=np.int64)
        known = self._simple
        if len(known) < len(self.src):
            known = np.r_[known, np.full(len(self.src) - len(known), -1, dtype=np.int8)]
        todo = np.unique(pids[known[pids] < 0])
        if len(todo):
            net = self.net
            starts, links = self.link_csr(todo)
            owner = np.repeat(np.arange(len(todo)), np.diff(starts))
            heads = net.head[links]
            gpu = net.is_gpu[heads]
            visits = np.r_[owner[gpu] * net.n_nodes + heads[gpu],
                           np.arange(len(todo)) * net.n_nodes + net.gpu_node[self.src[todo]]]
            owners = np.r_[owner[gpu], np.arange(len(todo))]
            order = np.argsort(visits, kind="stable")
            dup = visits[order][1:] == visits[order][:-1]
            flag = np.ones(len(todo), dtype=np.int8)
            flag[owners[order][1:][dup]] = 0
            known = known.copy() if known is self._simple else known
            known[todo] = flag
        self._simple = known  # a new array whenever it changes: shallow copies of the pool stay intact
        return known[pids] == 1

    def links(self, pid: int) -> IntArray:
        return self._links[self._starts[pid] : self._starts[pid + 1]]

    def link_csr(self, pids: IntArray) -> tuple[IntArray, IntArray]:
        """(starts, link ids) of the given paths, concatenated."""
        starts = self._starts[pids]
        ends = self._starts[pids + 1]
        lengths = ends - starts
        out_starts = np.zeros(len(pids) + 1, dtype=np.int64)
        np.cumsum(lengths, out=out_starts[1:])
        offs = np.repeat(starts - out_starts[:-1], lengths) + np.arange(out_starts[-1])
        return out_starts, self._links[offs]

    def node_path(self, pid: int) -> tuple[str, ...]:
        lk = self.links(int(pid))
        nodes = [self.net.node_ids[self.net.tail[lk[0]]]]
        nodes += [self.net.node_ids[h] for h in self.net.head[lk]]
        return tuple(nodes)


class TreePool:
    """Per-source trees: ``source[j]`` and ``paths[j]`` (a path id per destination, -1 for itself)."""

    def __init__(self, n_gpus: int) -> None:
        self.n_gpus = n_gpus
        self.source = np.zeros(0, dtype=np.int64)
        self.paths = np.zeros((0, n_gpus), dtype=np.int64)
        self._seen: set[bytes] = set()

    def __len__(self) -> int:
        return len(self.source)

    def add(self, sources: IntArray, path_ids: IntArray) -> IntArray:
        """Append trees not already present; returns the row positions (in the inputs) that were new."""
        keep = []
        for i in range(len(sources)):
            sig = path_ids[i].astype(np.int64).tobytes()
            if sig not in self._seen:
                self._seen.add(sig)
                keep.append(i)
        kept = np.array(keep, dtype=np.int64)
        if len(kept):
            self.source = np.concatenate([self.source, sources[kept]])
            self.paths = np.concatenate([self.paths, path_ids[kept]])
        return kept

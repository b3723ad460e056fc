"""Pricing for the depth-bounded tree LP: depth-bounded spanning out-trees of low cost, and a lower
bound on the cheapest one.

The exact pricing problem (a minimum-cost spanning arborescence of depth at most ``D``; every edge
``u -> v`` costs the switch-path cost ``C[u, v]``) is NP-hard for ``2 <= D < N - 1``. Two greedy
builders run for all roots at once (numpy, ``O(N^2)`` per root):

* ``prim``: add the cheapest edge from a tree node of depth ``< D`` to a node outside the tree;
* ``spt``: add the node with the cheapest hop-limited path (a Dijkstra that never extends a node at
  depth ``D``).

Both always return valid trees of depth ``<= D`` when one exists greedily. The lower bound is exact
for ``D = 1`` (the star is the only tree) and otherwise ``sum_v min_u C[u, v]``: every non-root GPU
needs one incoming edge.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["greedy_trees", "hop_distances", "reparent_leaves", "tree_lower_bounds"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def greedy_trees(cost: FloatArray, roots: IntArray, max_depth: int, mode: str) -> tuple[IntArray, IntArray, npt.NDArray[np.bool_]]:
    """Depth-bounded out-trees for ``roots`` on the pair costs ``cost`` (``inf``: no edge).

    Returns ``(parent, order, ok)``: ``parent[i, v]`` is v's parent in root ``roots[i]``'s tree (-1 at
    the root), ``order[i]`` the nodes in the order they were added (root first), ``ok[i]`` whether the
    tree spans every node.

    >>> c = np.array([[np.inf, 1, 5], [1, np.inf, 1], [5, 1, np.inf]])
    >>> p, o, ok = greedy_trees(c, np.array([0]), 2, "prim")
    >>> p[0].tolist(), o[0].tolist(), bool(ok[0])
    ([-1, 0, 1], [0, 1, 2], True)
    >>> greedy_trees(c, np.array([0]), 1, "prim")[0][0].tolist()
    [-1, 0, 0]
    """
    r = len(roots)
    n = cost.shape[0]
    rows = np.arange(r)
    parent = np.full((r, n), -1, dtype=np.int64)
    order = np.zeros((r, n), dtype=np.int64)
    order[:, 0] = roots
    depth = np.zeros((r, n), dtype=np.int64)
    dist = np.zeros((r, n))
    in_tree = np.zeros((r, n), dtype=bool)
    in_tree[rows, roots] = True
    best = cost[roots].copy()
    arg = np.repeat(roots[:, None], n, axis=1)
    best[in_tree] = np.inf
    ok = np.ones(r, dtype=bool)
    for step in range(1, n):
        v = np.argmin(best, axis=1)
        val = best[rows, v]
        bad = ~np.isfinite(val)
        if bad.any():
            ok &= ~bad
        u = arg[rows, v]
        parent[rows, v] = np.where(bad, -1, u)
        order[:, step] = v
        depth[rows, v] = depth[rows, u] + 1
        dist[rows, v] = dist[rows, u] + cost[u, v]
        in_tree[rows, v] = True
        best[rows, v] = np.inf
        grow = (depth[rows, v] < max_depth) & ~bad
        if grow.any():
            # Every row at once, masked (cheaper than gathering and scattering the growing rows).
            cand = cost[v]
            if mode == "spt":
                cand = cand + dist[rows, v][:, None]
            better = cand < best
            better &= ~in_tree
            better &= grow[:, None]
            np.copyto(best, cand, where=better)
            np.copyto(arg, v[:, None], where=better)
    return parent, order, ok


def reparent_leaves(cost: FloatArray, parent: IntArray, order: IntArray, ok: npt.NDArray[np.bool_], max_depth: int,
                    *, passes: int = 2) -> tuple[IntArray, IntArray]:
    """Local improvement of greedy trees: every leaf (a node without children) moves, in ``order``,
    to its cheapest parent of depth ``< max_depth`` when that edge costs less. Leaves have no
    subtree, so depths stay within the bound and the trees stay spanning; a greedy builder fixes a
    node's parent before later nodes open cheaper ones (found on ``hpn:1x16x8``, D = 2: without it
    column generation stalled at half the throughput). Returns ``(parent, order)``, the order again
    parents first (by depth, ties as before); rows that are not ``ok`` are left alone.

    >>> c = np.array([[np.inf, 1, 9, 3], [1, np.inf, 2, 9], [9, 2, np.inf, 0.5], [3, 9, 0.5, np.inf]])
    >>> p, o, ok = greedy_trees(c, np.array([0]), 2, "prim")  # 2 joins under 1 before 3 is open
    >>> p[0].tolist(), o[0].tolist()
    ([-1, 0, 1, 0], [0, 1, 2, 3])
    >>> p2, o2 = reparent_leaves(c, p, o, ok, 2)
    >>> p2[0].tolist(), o2[0].tolist()
    ([-1, 0, 3, 0], [0, 1, 3, 2])
    """
    parent = parent.copy()
    r, n = parent.shape
    rows = np.arange(r)
    depth = np.zeros((r, n), dtype=np.int64)
    for step in range(1, n):
        v = order[:, step]
        p = parent[rows, v]
        depth[rows, v] = np.where(p < 0, 0, depth[rows, np.maximum(p, 0)] + 1)
    for _ in range(passes):
        has_kids = np.zeros((r, n), dtype=bool)
        linked = parent >= 0
        has_kids[np.repeat(rows, n)[linked.ravel()], parent[linked]] = True
        moved = False
        for step in range(1, n):
            v = order[:, step]
            cand = np.where(depth < max_depth, cost[:, v].T, np.inf)  # cand[i, u] = C[u, v_i]
            cand[rows, v] = np.inf
            u = np.argmin(cand, axis=1)
            current = cost[np.maximum(parent[rows, v], 0), v]
            better = ok & ~has_kids[rows, v] & (cand[rows, u] < current * (1 - 1e-12))
            if better.any():
                moved = True
                i, vb, ub = rows[better], v[better], u[better]
                parent[i, vb] = ub
                depth[i, vb] = depth[i, ub] + 1
                has_kids[i, ub] = True  # a former parent may have no child left: it simply stays put
        if not moved:
            break
    root_first = np.where(np.arange(n)[None, :] == order[:, :1], -1, depth)
    return parent, np.argsort(root_first, axis=1, kind="stable").astype(np.int64)


def hop_distances(cost: FloatArray, roots: IntArray, max_depth: int, *, block: int = 32) -> FloatArray:
    """Cheapest walk cost from each root to each node with at most ``max_depth`` edges.

    >>> c = np.array([[np.inf, 1, 5], [1, np.inf, 1], [5, 1, np.inf]])
    >>> hop_distances(c, np.array([0]), 2).tolist()
    [[0.0, 1.0, 2.0]]
    """
    n = cost.shape[0]
    out = np.empty((len(roots), n))
    for lo in range(0, len(roots), block):
        rs = roots[lo:lo + block]
        dist = cost[rs].copy()
        for _ in range(max_depth - 1):
            dist = np.minimum(dist, (dist[:, :, None] + cost[None, :, :]).min(axis=1))
        dist[np.arange(len(rs)), rs] = 0.0
        out[lo:lo + block] = dist
    return out


def tree_lower_bounds(cost: FloatArray, roots: IntArray, max_depth: int) -> FloatArray:
    """A lower bound on the cheapest spanning out-tree of depth ``<= max_depth`` per root.

    ``D = 1``: the star, exact. Otherwise the larger of (a) ``sum_v in(v)``, ``in(v) = min_u C[u, v]``
    (every non-root node has one incoming edge) and (b) ``max_v dist_D(r, v) + sum_v in(v) - (the D
    largest in(v))``: the tree holds a path of at most ``D`` edges to the farthest node, plus one
    edge into each node off that path.

    >>> c = np.array([[np.inf, 1, 5], [1, np.inf, 1], [5, 1, np.inf]])
    >>> tree_lower_bounds(c, np.array([0]), 1).tolist(), tree_lower_bounds(c, np.array([0]), 2).tolist()
    ([6.0], [2.0])
    """
    n = cost.shape[0]
    if max_depth == 1:
        star = np.where(np.eye(n, dtype=bool)[roots], 0.0, cost[roots])
        return np.asarray(star.sum(axis=1), dtype=np.float64)
    incoming = cost.min(axis=0)  # the diagonal is inf: min over u != v
    out = np.empty(len(roots))
    far = hop_distances(cost, roots, max_depth).max(axis=1) if max_depth < n - 1 else np.zeros(len(roots))
    for i, r in enumerate(roots.tolist()):
        rest = np.delete(incoming, r)
        total = float(rest.sum())
        top = float(np.sort(rest)[-max_depth:].sum()) if max_depth < len(rest) else total
        out[i] = max(total, float(far[i]) + total - top)
    return out

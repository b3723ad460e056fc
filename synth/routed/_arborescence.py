"""Minimum-cost spanning arborescence (Chu-Liu/Edmonds) on a dense cost matrix.

``cost[u, v]`` is the cost of arc u → v (``inf`` = no arc). Each contraction level is a few whole-
array steps, so one call on a 128-GPU logical graph takes milliseconds. The result is exact: it is
the pricing oracle of the routed tree column generation (:mod:`synth.routed.trees`).

Examples
--------
>>> import numpy as np
>>> inf = np.inf
>>> c = np.array([[inf, 1.0, 5.0], [inf, inf, 1.0], [inf, 3.0, inf]])
>>> min_arborescence(c, 0).tolist()  # parent of each node; the root is its own parent
[0, 0, 1]
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["all_root_arborescences", "functional_cycles", "min_arborescence"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def min_arborescence(cost: FloatArray, root: int) -> IntArray:
    """Parents of a minimum-cost spanning arborescence rooted at ``root`` (out-tree).

    Ties go to the smallest parent index (deterministic). Raises ``ValueError`` when some node
    cannot be reached from the root.
    """
    c = np.array(cost, dtype=np.float64)
    np.fill_diagonal(c, np.inf)
    c[:, root] = np.inf
    return _solve(c, root)


def _solve(c: FloatArray, root: int) -> IntArray:
    n = len(c)
    pre = np.argmin(c, axis=0)
    pre[root] = root
    w_in = c[pre, np.arange(n)]
    w_in[root] = 0.0
    if not np.isfinite(w_in).all():
        raise ValueError(f"node {int(np.flatnonzero(~np.isfinite(w_in))[0])} is unreachable from the root")
    # Cycles of the chosen in-arcs: walk each node's parent chain.
    comp = np.full(n, -1, dtype=np.int64)  # cycle id of nodes on a cycle
    state = np.zeros(n, dtype=np.int8)  # 0 new, 1 on the current walk, 2 done
    state[root] = 2
    ncyc = 0
    for s in range(n):
        walk = []
        v = s
        while state[v] == 0:
            state[v] = 1
            walk.append(v)
            v = int(pre[v])
        if state[v] == 1:  # closed a cycle at v
            u = v
            while True:
                comp[u] = ncyc
                u = int(pre[u])
                if u == v:
                    break
            ncyc += 1
        for u in walk:
            state[u] = 2
    if ncyc == 0:
        return pre.astype(np.int64)
    # Contract: nodes off cycles keep their own super-node; each cycle becomes one.
    off = np.flatnonzero(comp < 0)
    sup = np.empty(n, dtype=np.int64)
    sup[off] = np.arange(len(off))
    on = comp >= 0
    sup[on] = len(off) + comp[on]
    m = len(off) + ncyc
    # Arc u -> v costs c[u, v] - w_in[v] when v is on a cycle (entering it replaces v's in-arc).
    adj = c - np.where(on, w_in, 0.0)[None, :]
    k = len(off)
    members = [np.flatnonzero(comp == j) for j in range(ncyc)]
    # Min over the heads of each super-node, per tail (a node off the cycles is its own group).
    big = np.empty((n, m))
    arg_v = np.empty((n, m), dtype=np.int64)
    big[:, :k] = adj[:, off]
    arg_v[:, :k] = off[None, :]
    for j, cols in enumerate(members):
        best = np.argmin(adj[:, cols], axis=1)
        arg_v[:, k + j] = cols[best]
        big[:, k + j] = adj[np.arange(n), cols[best]]
    # Min over the tails of each super-node.
    c2 = np.empty((m, m))
    arg_u = np.empty((m, m), dtype=np.int64)
    c2[:k, :] = big[off, :]
    arg_u[:k, :] = off[:, None]
    for j, rows in enumerate(members):
        best = np.argmin(big[rows, :], axis=0)
        arg_u[k + j, :] = rows[best]
        c2[k + j, :] = big[rows[best], np.arange(m)]
    np.fill_diagonal(c2, np.inf)
    root2 = int(sup[root])
    c2[:, root2] = np.inf
    pre2 = _solve(c2, root2)
    out = pre.astype(np.int64).copy()
    for x in range(m):
        if x == root2:
            continue
        p = int(pre2[x])
        u = int(arg_u[p, x])
        v = int(arg_v[u, x])
        out[v] = u  # the arc entering super-node x; a cycle keeps its other in-arcs
    out[root] = root
    return out


def all_root_arborescences(cost: FloatArray) -> IntArray:
    """``parents[r]``: a minimum-cost spanning arborescence rooted at r, for every root r at once.

    On a strongly connected graph Chu-Liu/Edmonds' contraction needs no root: every node takes its
    cheapest in-arc, cycles contract, until one node remains. Expanding that hierarchy from any
    vertex r (drop the cycle arc entering the part that holds r, keep every other cycle arc, and
    enter each other part where its kept arc lands) gives an optimum r-arborescence: in reduced
    costs every cycle arc is free, and replacing an optimum's arcs into a cycle's non-root parts by
    the cycle's own arcs keeps it an arborescence at no extra cost (the proof of Edmonds' algorithm,
    with the root allowed on a cycle). One contraction, then O(n) per root.

    Raises ``ValueError`` when the graph is not strongly connected.

    >>> inf = np.inf
    >>> c = np.array([[inf, 1.0, 5.0], [4.0, inf, 1.0], [1.0, 3.0, inf]])
    >>> all_root_arborescences(c).tolist()
    [[0, 0, 1], [2, 1, 1], [2, 0, 2]]
    """
    n = len(cost)
    m = np.array(cost, dtype=np.float64)
    np.fill_diagonal(m, np.inf)
    if n == 1:
        return np.zeros((1, 1), dtype=np.int64)
    idx = np.arange(n)
    arc_u = np.broadcast_to(idx[:, None], (n, n)).copy()
    arc_v = np.broadcast_to(idx[None, :], (n, n)).copy()
    # Hierarchy: nodes 0..n-1 are vertices; each cycle adds a node with children and, per child,
    # the arc (u, v) the cycle enters it by.
    children: list[list[int]] = [[] for _ in range(n)]
    cycle_arc: list[tuple[int, int]] = [(-1, -1)] * n
    current = list(range(n))  # hierarchy node of each row/column of m
    while len(current) > 1:
        k = len(current)
        pre = np.argmin(m, axis=0)
        w_in = m[pre, np.arange(k)]
        if not np.isfinite(w_in).all():
            raise ValueError("the graph is not strongly connected")
        members = [np.array(c, dtype=np.int64) for c in functional_cycles(pre.tolist())]
        on = np.zeros(k, dtype=bool)
        for mem in members:
            on[mem] = True
        new_nodes = []
        for mem in members:
            node = len(children)
            children.append([current[x] for x in mem])
            cycle_arc.append((-1, -1))
            for x in mem:
                cycle_arc[current[x]] = (int(arc_u[pre[x], x]), int(arc_v[pre[x], x]))
            new_nodes.append(node)
        off = np.flatnonzero(~on)
        m, arc_u, arc_v = _contract(m, arc_u, arc_v, on, w_in, off, members)
        current = [current[x] for x in off] + new_nodes
    return _expand(current[0], children, cycle_arc, n)


def functional_cycles(pre: list[int]) -> list[list[int]]:
    """The cycles of the map ``x → pre[x]`` (members sorted), in the order that walks from 0, 1, …
    first reach them: the order of their labels in ``scipy.sparse.csgraph.connected_components``
    (strong), whose depth-first search completes a cycle before the nodes leading into it.

    >>> functional_cycles([1, 0, 3, 4, 2, 2])
    [[0, 1], [2, 3, 4]]
    """
    state = [0] * len(pre)  # 0 new, 1 on the current walk, 2 done
    cycles: list[list[int]] = []
    for s in range(len(pre)):
        walk: list[int] = []
        v = s
        while state[v] == 0:
            state[v] = 1
            walk.append(v)
            v = pre[v]
        if state[v] == 1:  # the walk closed a new cycle at v
            cycles.append(sorted(walk[walk.index(v):]))
        for u in walk:
            state[u] = 2
    return cycles


def _contract(m: FloatArray, arc_u: IntArray, arc_v: IntArray, on: npt.NDArray[np.bool_], w_in: FloatArray,
              off: IntArray, members: list[IntArray]) -> tuple[FloatArray, IntArray, IntArray]:
    """One contraction: costs reduced by each cycle node's in-arc, every cycle merged into one node
    (first the nodes on no cycle, ``off``, then one per cycle), with the original arc behind each entry."""
    k = len(m)
    adj = m - np.where(on, w_in, 0.0)[None, :]
    kk = len(off) + len(members)
    big = np.empty((k, kk))
    bu = np.empty((k, kk), dtype=np.int64)
    bv = np.empty((k, kk), dtype=np.int64)
    big[:, : len(off)] = adj[:, off]
    bu[:, : len(off)] = arc_u[:, off]
    bv[:, : len(off)] = arc_v[:, off]
    rows = np.arange(k)
    for j, mem in enumerate(members):
        best = mem[np.argmin(adj[:, mem], axis=1)]
        big[:, len(off) + j] = adj[rows, best]
        bu[:, len(off) + j] = arc_u[rows, best]
        bv[:, len(off) + j] = arc_v[rows, best]
    m2 = np.empty((kk, kk))
    u2 = np.empty((kk, kk), dtype=np.int64)
    v2 = np.empty((kk, kk), dtype=np.int64)
    cols = np.arange(kk)
    m2[: len(off)] = big[off]
    u2[: len(off)] = bu[off]
    v2[: len(off)] = bv[off]
    for j, mem in enumerate(members):
        best = mem[np.argmin(big[mem], axis=0)]
        m2[len(off) + j] = big[best, cols]
        u2[len(off) + j] = bu[best, cols]
        v2[len(off) + j] = bv[best, cols]
    np.fill_diagonal(m2, np.inf)
    return m2, u2, v2


def _expand(top: int, children: list[list[int]], cycle_arc: list[tuple[int, int]], n: int) -> IntArray:
    """Expand the contraction hierarchy from every root: ``parents[r]`` (see :func:`all_root_arborescences`)."""
    # Which child of each hierarchy node holds each vertex.
    holder: list[dict[int, int]] = [{} for _ in range(len(children))]
    for node in range(n, len(children)):
        for ch in children[node]:
            for vtx in _leaves(ch, children, n):
                holder[node][vtx] = ch
    out = np.empty((n, n), dtype=np.int64)
    for r in range(n):
        parent = out[r]
        parent[r] = r
        stack = [(top, r)]
        while stack:
            node, entry = stack.pop()
            if node < n:
                continue
            inside = holder[node][entry]
            for ch in children[node]:
                if ch == inside:
                    stack.append((ch, entry))
                else:
                    u, v = cycle_arc[ch]
                    parent[v] = u
                    stack.append((ch, v))
    return out


def _leaves(node: int, children: list[list[int]], n: int) -> list[int]:
    out, stack = [], [node]
    while stack:
        x = stack.pop()
        if x < n:
            out.append(x)
        else:
            stack.extend(children[x])
    return out

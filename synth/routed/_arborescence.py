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

__all__ = ["min_arborescence"]

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

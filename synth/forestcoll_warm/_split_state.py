"""The working state of phase 2's switch splitting: the capacity graph ``D`` with its super source, the
physical path pools behind each arc, and one maximum s→v flow per GPU kept as a certificate (see
:mod:`synth.forestcoll_warm._splitting` for the method).

Examples
--------
>>> from synth.topologies import named_topology
>>> from synth.forestcoll_warm._optimum import IntGraph, exact_optimum
>>> t = named_topology("nvswitch:4")
>>> g = IntGraph.from_topology(t)
>>> st = _State(g, exact_optimum(g, t))
>>> st.n, st.verify()
(4, True)
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from synth.forestcoll_warm._optimum import IntGraph, Optimum
from synth._resources import require_memory
from synth.maxflow import FlowNetwork

__all__ = ["Pool"]

#: A bundle of capacity on one arc: (physical node path, units).
Pool = list[list]


class _State:
    def __init__(self, graph: IntGraph, opt: Optimum) -> None:
        self.g = graph
        self.n = graph.n_gpus
        self.nn = graph.n_nodes
        self.s = self.nn
        self.k = opt.k
        self.need = self.n * opt.k
        self.U = opt.U
        caps = opt.edge_caps(graph.caps)
        self.net = FlowNetwork(self.nn + 1)
        self.arc: dict[tuple[int, int], int] = {}
        self.cap: list[int] = []
        self.out: list[dict[int, int]] = [dict() for _ in range(self.nn)]  # node -> {head: arc}
        self.inn: list[dict[int, int]] = [dict() for _ in range(self.nn)]
        self.pools: dict[tuple[int, int], Pool] = {}
        for a, b, c in zip(graph.tails.tolist(), graph.heads.tolist(), caps.tolist()):
            if c > 0:
                self._new_arc(a, b, c)
                self.pools[(a, b)] = [[(graph.names[a], graph.names[b]), c]]
        self.net.add_arcs([self.s] * self.n, list(range(self.n)), [self.k] * self.n)
        self.cap.extend([self.k] * self.n)  # the source arcs, never changed
        width = max(64, 2 * len(self.cap) + self.n)
        # The flow matrix (n x width int64) may double once as arcs are added: estimate before allocating.
        require_memory(16.0 * self.n * width, f"ForestColl switch splitting on {self.n} GPUs and {len(self.cap)} arcs",
                       "use fewer ranks (a communicator) or a smaller topology")
        self.F = np.zeros((self.n, width), dtype=np.int64)
        self.stale = np.ones(self.n, dtype=bool)
        self.maxflows = 0
        self.probes = 0
        self.bulk = 0
        self.index = {v: i for i, v in enumerate(graph.names)}

    def _new_arc(self, a: int, b: int, c: int) -> int:
        idx = self.net.add_arc(a, b, c)
        self.arc[(a, b)] = idx
        self.cap.append(c)
        self.out[a][b] = idx
        self.inn[b][a] = idx
        if hasattr(self, "F") and idx >= self.F.shape[1]:
            grown = np.zeros((self.n, 2 * self.F.shape[1]), dtype=np.int64)
            grown[:, : self.F.shape[1]] = self.F
            self.F = grown
        return idx

    def set_cap(self, idx: int, c: int) -> None:
        self.cap[idx] = c
        self.net.set_capacity(idx, c)

    def _flow(self, v: int, store: bool = True) -> int:
        self.maxflows += 1
        val = self.net.max_flow(self.s, v)
        if store:
            m = self.net.n_arcs
            self.F[v, :m] = self.net.flows(np.arange(m))
        return val

    # -- one split ------------------------------------------------------------------------------
    def split(self, u: int | None, w: int, t: int | None, gamma0: int) -> int:
        """Split (u,w),(w,t) by the largest γ ≤ gamma0 keeping the invariant; returns γ.

        ``u is None``: virtual in-arc (lower c(w,t)); ``t is None``: virtual out-arc (lower c(u,w)).
        """
        self.probes += 1
        a_uw = None if u is None else self.out[u][w]
        a_wt = None if t is None else self.out[w][t]
        real = u is not None and t is not None and u != t
        a_ut = None
        if real:
            assert u is not None and t is not None
            a_ut = self.arc.get((u, t))
            if a_ut is None:
                a_ut = self._new_arc(u, t, 0)
        zeros = np.zeros(self.n, dtype=np.int64)
        fu = self.F[:, a_uw] if a_uw is not None else zeros
        ft = self.F[:, a_wt] if a_wt is not None else zeros
        c_uw = self.cap[a_uw] if a_uw is not None else 0
        c_wt = self.cap[a_wt] if a_wt is not None else 0
        both = a_uw is not None and a_wt is not None

        def reroute(g: int) -> np.ndarray:
            return np.minimum(np.minimum(fu, ft), g) if both else zeros

        d = reroute(gamma0)
        ok = ~self.stale
        if a_uw is not None:
            ok &= fu - d <= c_uw - gamma0
        if a_wt is not None:
            ok &= ft - d <= c_wt - gamma0
        bad = np.flatnonzero(~ok)
        gamma = gamma0
        recomputed: list[int] = []
        violated: list[int] = []
        if bad.size:
            self._apply(a_uw, a_wt, a_ut, gamma0, +1)
            worst = None
            for v in bad.tolist():
                val = self._flow(v)
                if val < self.need:
                    violated.append(v)
                    b = val + gamma0 - self.need
                    worst = b if worst is None else min(worst, b)
                else:
                    recomputed.append(v)
            self._apply(a_uw, a_wt, a_ut, gamma0, -1)
            if worst is not None:
                gamma = max(0, min(gamma0, worst))
        # Certificates: reroute the valid ones for the final γ ...
        keep = np.flatnonzero(ok)
        if gamma > 0 and keep.size and both:
            dd = reroute(gamma)[keep]
            self.F[keep, a_uw] -= dd
            self.F[keep, a_wt] -= dd
            if a_ut is not None:
                self.F[keep, a_ut] += dd
        # ... convert the recomputed ones (valid at γ0 ≥ γ) back to γ ...
        if recomputed and gamma < gamma0 and a_ut is not None:
            rv = np.array(recomputed)
            excess = np.maximum(0, self.F[rv, a_ut] - (self.cap[a_ut] + gamma))
            self.F[rv, a_ut] -= excess
            self.F[rv, a_uw] += excess
            self.F[rv, a_wt] += excess
        self.stale[recomputed] = False
        # ... and the violated ones must be recomputed when next needed.
        self.stale[violated] = True
        if gamma > 0:
            self._apply(a_uw, a_wt, a_ut, gamma, +1)
            self._move_pools(u, w, t, gamma)
        return gamma

    def force(self, u: int | None, w: int, t: int | None, g: int) -> None:
        """Split (u,w),(w,t) by g without checking the invariant (a warm start's bulk step)."""
        a_uw = None if u is None else self.out[u][w]
        a_wt = None if t is None else self.out[w][t]
        a_ut = None
        if u is not None and t is not None and u != t:
            a_ut = self.arc.get((u, t))
            if a_ut is None:
                a_ut = self._new_arc(u, t, 0)
        self._apply(a_uw, a_wt, a_ut, g, +1)
        self._move_pools(u, w, t, g)
        self.stale[:] = True

    def verify(self, certify: bool = True) -> bool:
        """Check ``λ(s,v) ≥ N·k`` for every GPU (N max-flows); ``certify`` keeps the flows as
        certificates for checked splits to come."""
        for v in range(self.n):
            if self._flow(v, certify) < self.need:
                self.stale[:] = True
                return False
            self.stale[v] = not certify
        return True

    def _apply(self, a_uw: int | None, a_wt: int | None, a_ut: int | None, g: int, sign: int) -> None:
        if a_uw is not None:
            self.set_cap(a_uw, self.cap[a_uw] - sign * g)
        if a_wt is not None:
            self.set_cap(a_wt, self.cap[a_wt] - sign * g)
        if a_ut is not None:
            self.set_cap(a_ut, self.cap[a_ut] + sign * g)

    def _take(self, key: tuple[int, int], g: int) -> Pool:
        pool = self.pools[key]
        taken: Pool = []
        while g > 0:
            path, amt = pool[0]
            use = min(amt, g)
            taken.append([path, use])
            g -= use
            if use == amt:
                pool.pop(0)
            else:
                pool[0][1] = amt - use
        return taken

    def _move_pools(self, u: int | None, w: int, t: int | None, g: int) -> None:
        left = self._take((u, w), g) if u is not None else None
        right = self._take((w, t), g) if t is not None else None
        if left is None or right is None or u is None or t is None or u == t:
            return
        merged: Pool = []
        i = j = 0
        while i < len(left) and j < len(right):
            use = min(left[i][1], right[j][1])
            merged.append([left[i][0] + right[j][0][1:], use])
            left[i][1] -= use
            right[j][1] -= use
            i += left[i][1] == 0
            j += right[j][1] == 0
        pool = self.pools.setdefault((u, t), [])
        for path, amt in merged:
            if pool and pool[-1][0] == path:
                pool[-1][1] += amt
            else:
                pool.append([path, amt])

    def incident(self, w: int) -> list[tuple[str, str, Fraction]]:
        names = self.g.names
        items = [(names[a], names[w], self.cap[i]) for a, i in self.inn[w].items() if self.cap[i] > 0]
        items += [(names[w], names[b], self.cap[i]) for b, i in self.out[w].items() if self.cap[i] > 0]
        unit = self.g.unit_gbps / self.U
        return sorted((a, b, c * unit) for a, b, c in items)

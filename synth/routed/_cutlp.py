"""The routed tree-packing LP in arc-capacity form, by cutting planes (for large fabrics).

By Edmonds' branching theorem in Lovász's form, arc capacities ``g`` on the logical graph carry one
(fractional) spanning out-tree per root iff every nonempty GPU set X has ``ρ_g(X) ≥ |V ∖ X|``. So
the tree LP of :mod:`synth.routed._treelp` equals: minimise T subject to those cut constraints and
``Σ_e g_e·[a ∈ route(e)] ≤ c_a T``. Violated cuts are separated exactly by max-flows (a hub feeds
every GPU one unit; a GPU v receiving less than N names its minimum cut X); the loop ends when no
cut is violated (relative tolerance 1e-7), and ``g`` is the LP's arc-capacity optimum.

Examples
--------
>>> from synth.topologies import named_topology
>>> from synth.routed._logical import Logical
>>> g, T, rounds, proven = cut_lp(Logical.build(named_topology("nvswitch:4")))
>>> round(4 / T, 6), proven
(480.0, True)
"""

from __future__ import annotations

import time

import highspy
import numpy as np
import numpy.typing as npt

from synth.errors import SolverError
from synth.kernels.highs import quiet_highs
from synth.maxflow import FlowNetwork
from synth.routed._logical import Logical

__all__ = ["cut_lp"]

FloatArray = npt.NDArray[np.float64]
_SCALE = 10**7
_TOL = 1e-7


def cut_lp(lg: Logical, *, max_rounds: int = 500, deadline: float | None = None) -> tuple[FloatArray, float, int, bool]:
    """(arc capacities g, T in s/GB per unit, cutting-plane rounds, proven).

    Every round's T is a lower bound on the optimum (a relaxation), so ``N / T`` is a proven upper
    bound on the routed algbw even when the rounds or the ``deadline`` (``time.perf_counter()``)
    ran out first (``proven`` false; ``g`` may then miss some cuts). The deadline also bounds every
    LP solve (HiGHS's ``time_limit``) and is checked between the separation max-flows; when it
    passes before the first LP is solved, ``g`` is zero and ``T`` is 0 (no bound)."""
    n, m = lg.n, len(lg.pairs)
    live = np.flatnonzero(lg.caps_GBps > 0)
    scale = float(lg.caps_GBps[live].sum()) / (3.0 * n)
    h = quiet_highs(presolve="off")
    inf = highspy.kHighsInf
    # columns: g_0..g_{m-1}, then T
    h.addCols(m, np.zeros(m), np.zeros(m), np.full(m, inf), 0, np.zeros(0, np.int32), np.zeros(0, np.int32),
              np.zeros(0))
    h.addCols(1, np.array([1.0]), np.array([0.0]), np.array([inf]), 0, np.zeros(0, np.int32), np.zeros(0, np.int32),
              np.zeros(0))
    # One row per live link some route crosses: its arcs' g, then -c_a/scale · T, at most 0.
    inc = lg.incidence_csc
    used = live[inc.indptr[live + 1] > inc.indptr[live]]
    counts = inc.indptr[used + 1] - inc.indptr[used]
    ends = np.cumsum(counts)
    arcs = inc.indices[np.repeat(inc.indptr[used] - (ends - counts), counts) + np.arange(int(counts.sum()))]
    idx = np.insert(arcs.astype(np.int32), ends, m)
    val = np.insert(np.ones(len(arcs)), ends, -lg.caps_GBps[used] / scale)
    starts = np.r_[0, ends[:-1] + np.arange(1, len(used))].astype(np.int32)
    if len(used):
        h.addRows(len(used), np.full(len(used), -inf), np.zeros(len(used)), len(idx), starts, idx, val)
    seen: set[bytes] = set()

    def cut_row(inside: np.ndarray) -> tuple[float, float, np.ndarray, np.ndarray] | None:
        key = np.packbits(inside).tobytes()
        if key in seen:
            return None
        seen.add(key)
        arcs = np.flatnonzero(~inside[lg.tails] & inside[lg.heads])
        return float(n - inside.sum()), inf, arcs, np.ones(len(arcs))

    singles = []
    for v in range(n):  # every GPU must be entered, every GPU must send
        one = np.zeros(n, dtype=bool)
        one[v] = True
        singles += [cut_row(one), cut_row(~one)]
    _add_rows(h, [r for r in singles if r is not None])
    rounds = 0
    g, t_scaled = np.zeros(m), 0.0  # before any round: no capacities, no bound
    while True:
        rounds += 1
        if not _run(h, deadline):
            return g, t_scaled / scale, rounds - 1, False
        x = np.asarray(h.getSolution().col_value)
        g, t_scaled = np.maximum(x[:m], 0.0), float(x[m])
        net = _separation_network(lg, np.floor(g * _SCALE).astype(np.int64))
        fresh = []
        for v in range(n):
            if deadline is not None and time.perf_counter() > deadline:
                return g, t_scaled / scale, rounds, False
            if net.max_flow(n, v) < n * _SCALE * (1 - _TOL):
                row = cut_row(~net.source_mask(n, v)[:n])
                if row is not None:
                    fresh.append(row)
        _add_rows(h, fresh)
        if not fresh:
            return g, t_scaled / scale, rounds, True
        if rounds >= max_rounds or (deadline is not None and time.perf_counter() > deadline):
            return g, t_scaled / scale, rounds, False


def _separation_network(lg: Logical, caps: npt.NDArray[np.int64]) -> FlowNetwork:
    """The max-flow network of one separation round: the arcs of positive capacity ``caps`` and a
    hub (node ``n``) feeding every GPU ``_SCALE`` (one unit).

    Arcs of capacity 0 change neither a max-flow value nor the minimal minimum cut (the nodes the
    source reaches in the residual graph), so they are left out: a round's network then has the
    LP optimum's support, a few arcs per GPU, rather than every routed pair.

    >>> from synth.topologies import named_topology
    >>> lg = Logical.build(named_topology("nvswitch:3"))
    >>> net = _separation_network(lg, np.array([_SCALE, 0, 0, 0, 0, 0]))
    >>> net.n_arcs, net.max_flow(3, 1) == 2 * _SCALE
    (4, True)
    """
    n = lg.n
    pos = np.flatnonzero(caps > 0)
    net = FlowNetwork(n + 1)
    net.add_arcs(lg.tails[pos], lg.heads[pos], caps[pos])
    net.add_arcs(np.full(n, n), np.arange(n), np.full(n, _SCALE))
    return net


def _run(h: highspy.Highs, deadline: float | None) -> bool:
    """Solve ``h`` within the time left to ``deadline``: True when optimal, False when the time ran
    out first (:class:`SolverError` on any other outcome)."""
    if deadline is not None:
        left = deadline - time.perf_counter()
        if left <= 0:
            return False
        # HiGHS compares its limit with the object's accumulated run time.
        h.setOptionValue("time_limit", float(h.getRunTime() + left))
    h.run()
    status = h.getModelStatus()
    if status == highspy.HighsModelStatus.kOptimal:
        return True
    if status == highspy.HighsModelStatus.kTimeLimit:
        return False
    raise SolverError(f"routed cut LP: {h.modelStatusToString(status)}")


def _add_rows(h: highspy.Highs, rows: list[tuple[float, float, np.ndarray, np.ndarray]]) -> None:
    """Append rows ``(lower, upper, column indices, values)`` to ``h`` in one call."""
    if not rows:
        return
    starts = np.cumsum([0] + [len(r[2]) for r in rows[:-1]]).astype(np.int32)
    idx = np.concatenate([r[2] for r in rows]).astype(np.int32)
    val = np.concatenate([r[3] for r in rows]).astype(np.float64)
    h.addRows(len(rows), np.array([r[0] for r in rows]), np.array([r[1] for r in rows]), len(idx), starts, idx, val)

"""Degraded-aware weighted rings: NCCL-like rail rings plus detours, with chunk weights from a small LP.

:func:`nccl_ring` gives every ring one chunk, so one slow NIC slows the ring through it and with it the
whole collective (a NIC at 1/8 on ``hpn`` costs 7/8 of the algbw). :func:`weighted_rings` takes the
rings of the NIC layout (one per channel) and, for every network hop of a ring that is slower than the
fastest such hop, the *detours*: the same ring with that hop moved to another rail (it leaves its host
by another NIC and enters the next host by that rail's NIC). An LP (HiGHS through
:func:`synth.solvers.lp_backend`) gives each ring a rate, ``max Σ w_i`` subject to
``Σ_i n_i(a) w_i ≤ c_a`` on every link ``a`` of the *given* topology (``n_i(a)``: the hops of ring
``i`` crossing ``a``), and the rates are rounded to whole chunks per ring (``K`` in all, at most
``max_chunks`` and the MSCCL executor's ``N·K ≤ 32768``), keeping the K that rates best. The plain
one-chunk-per-ring schedule is one of the roundings, so the result never rates below
:func:`nccl_ring` on the same topology.

AllGather uses out-trees, ReduceScatter in-trees (the same hops, so the same LP) and AllReduce both.

Examples
--------
>>> from synth.baselines import nccl_ring
>>> from synth.topologies import load_topology
>>> t = load_topology("hpn:2x2x4", ["fail2"])  # rank 0's NIC at 50 of 400 Gbit/s
>>> plain, lp = nccl_ring("allgather", t), weighted_rings("allgather", t)
>>> lp.validate(t)
>>> round(plain.algbw_GBps(t), 3), round(lp.algbw_GBps(t), 3), lp.nchunks, lp.meta["ring_chunks"]
(26.667, 120.0, 18, [1, 8, 1, 1, 7])
"""

from __future__ import annotations

from collections import defaultdict
from fractions import Fraction

import numpy as np

from synth._types import NodeId, Rank
from synth.baselines.nccl import _direct_ring_routes, _Hops, _host_path, _LazyHops, _nccl_ring, _slots, baseline_choice
from synth.collective import TREE_COLLECTIVES, Collective
from synth.errors import ScheduleError
from synth.routing import PairRoutes
from synth.schedule import Hop, Route, Schedule
from synth.solvers import lp_backend
from synth.topologies.communicator import communicator_meta
from synth.topologies.model import Topology
from synth.topologies.nics import NicLayout

__all__ = ["EXECUTOR_CHUNK_SLOTS", "weighted_rings"]

#: The MSCCL executor's chunk slots per buffer (int16 offsets): a schedule of N ranks and K chunks
#: per source needs N·K of them.
EXECUTOR_CHUNK_SLOTS = 32768

_Slots = list[tuple[int, int, int]]


def _rings(layout: NicLayout, channels: int) -> list[_Slots] | None:
    """The layout's rail rings as (host, entry, exit) positions, or ``None`` where one needs a PXN relay."""
    out: list[_Slots] = []
    for c in range(channels):
        try:
            slots = _slots(layout, c, False, False)
        except ScheduleError:
            return None
        out.append([(h, e, x) for h, e, x in slots if x is not None])
    return out


def _detour(layout: NicLayout, slots: _Slots, h: int, rail: int) -> _Slots | None:
    """``slots`` with the hop from host ``h`` to the next host moved to ``rail`` (``None``: it would
    enter and leave a host through one GPU)."""
    nxt = (h + 1) % len(slots)
    out = list(slots)
    hh, e, _ = out[h]
    new_exit = layout.nics[hh][rail][-1]
    hn, _, xn = out[nxt]
    new_entry = layout.nics[hn][rail][0]
    if new_exit == e or new_entry == xn:
        return None
    out[h] = (hh, e, new_exit)
    out[nxt] = (hn, new_entry, xn)
    return out


def _order(layout: NicLayout, slots: _Slots, hops: list[_Hops],
           paths: dict[tuple[int, int, int], list[Rank]]) -> list[Rank]:
    order: list[Rank] = []
    for h, e, x in slots:
        if (h, e, x) not in paths:
            paths[(h, e, x)] = _host_path(layout.hosts[h], e, x, hops)
        order += paths[(h, e, x)]
    return order


def _candidates(topo: Topology, layout: NicLayout, channels: int, routes: PairRoutes) -> list[list[Rank]]:
    """Rank orders: the rail rings, then their detours around every network hop slower than the fastest."""
    direct = _LazyHops(topo, routes, local=False)
    hops: list[_Hops] = [_LazyHops(topo, routes, local=True), direct]
    base = _rings(layout, channels)
    if base is None:
        return []
    paths: dict[tuple[int, int, int], list[Rank]] = {}
    orders = [_order(layout, s, hops, paths) for s in base]
    if layout.nhosts < 2:
        return orders
    caps = topo.capacity_grid.caps

    def width(slots: _Slots, h: int) -> Fraction:
        (ha, _, xa), (hb, eb, _) = slots[h], slots[(h + 1) % len(slots)]
        path = routes.route(layout.hosts[ha][xa], layout.hosts[hb][eb])
        return min(caps[(a, b)] for a, b in zip(path[:-1], path[1:])) if path else Fraction(0)

    widths = [[width(s, h) for h in range(len(s))] for s in base]
    fastest = max(w for row in widths for w in row)
    for slots, row in zip(base, widths):
        for h, w in enumerate(row):
            if w >= fastest:
                continue
            for rail in range(layout.nrails):
                moved = _detour(layout, slots, h, rail)
                if moved is not None and moved != slots:
                    orders.append(_order(layout, moved, hops, paths))
    return orders


def _lp_rates(loads: list[dict[tuple[NodeId, NodeId], int]], caps: dict[tuple[NodeId, NodeId], float]) \
        -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """LP rates per ring, and the distinct link rows (ring loads, capacity) it was solved on."""
    rows: dict[tuple[tuple[int, int], ...], float] = {}
    by_link: dict[tuple[NodeId, NodeId], list[tuple[int, int]]] = defaultdict(list)
    for i, ring in enumerate(loads):
        for key, count in ring.items():
            by_link[key].append((i, count))
    for key, entries in by_link.items():
        sig = tuple(entries)
        rows[sig] = min(rows.get(sig, caps[key]), caps[key])
    sigs = sorted(rows)
    matrix = np.zeros((len(sigs), len(loads)))
    for r, sig in enumerate(sigs):
        for i, count in sig:
            matrix[r, i] = count
    cap = np.array([rows[s] for s in sigs])
    lp = lp_backend("highs")
    lp.add_rows(np.full(len(sigs), -np.inf), cap)
    csc = matrix.T
    starts: list[int] = []
    index: list[int] = []
    value: list[float] = []
    for i in range(len(loads)):
        starts.append(len(index))
        nz = np.nonzero(csc[i])[0]
        index += nz.tolist()
        value += csc[i][nz].tolist()
    lp.add_cols(np.full(len(loads), -1.0), np.zeros(len(loads)), np.full(len(loads), np.inf),
                np.array(starts, dtype=np.int64), np.array(index, dtype=np.int64), np.array(value))
    sol = lp.solve()
    if not sol.has_solution:
        return None
    return np.maximum(np.asarray(sol.col_values, dtype=float), 0.0), matrix, cap


def _row_links(loads: list[dict[tuple[NodeId, NodeId], int]]) -> list[list[tuple[NodeId, NodeId]]]:
    """The links of each distinct row of :func:`_lp_rates`, in its row order."""
    by_link: dict[tuple[NodeId, NodeId], list[tuple[int, int]]] = defaultdict(list)
    for i, ring in enumerate(loads):
        for key, count in ring.items():
            by_link[key].append((i, count))
    rows: dict[tuple[tuple[int, int], ...], list[tuple[NodeId, NodeId]]] = defaultdict(list)
    for key, entries in by_link.items():
        rows[tuple(entries)].append(key)
    return [rows[sig] for sig in sorted(rows)]


def _round(rates: np.ndarray, matrix: np.ndarray, cap: np.ndarray, max_chunks: int, plain: int) -> list[int]:
    """Whole chunks per ring: the best-rated largest-remainder rounding of ``rates`` to K chunks in all
    (K = 1 .. ``max_chunks``), or one chunk for each of the first ``plain`` rings (the NCCL-like ring)."""
    def rating(m: np.ndarray) -> float:
        worst = float(np.max(matrix @ m / cap))
        return float(m.sum()) / worst if worst > 0 else 0.0

    best = np.array([1] * plain + [0] * (len(rates) - plain))
    best_rate = rating(best)
    total = float(rates.sum())
    if total <= 0:
        return best.tolist()
    for k in range(1, max_chunks + 1):
        share = rates * k / total
        m = np.floor(share).astype(int)
        order = sorted(range(len(rates)), key=lambda i: (-(share[i] - m[i]), i))
        for i in order[: k - int(m.sum())]:
            m[i] += 1
        rate = rating(m)
        if rate > best_rate * (1 + 1e-12):
            best, best_rate = m, rate
    return best.tolist()


def _exact_rate(matrix: np.ndarray, cap: list[Fraction], m: list[int]) -> Fraction:
    """``Σ m / max_rows(Σ_i m_i n_i / c)``: proportional to the schedule's rate (every ring hop
    carries the same number of trees per chunk), in exact arithmetic."""
    worst = max(Fraction(int(sum(int(matrix[r, i]) * m[i] for i in range(len(m)) if m[i]))) / c
                for r, c in enumerate(cap))
    return Fraction(sum(m)) / worst if worst > 0 else Fraction(0)


def weighted_rings(collective: Collective | str, topo: Topology, *, max_chunks: int | None = None) -> Schedule:
    """Rail rings and detours with LP chunk weights (module docstring); :func:`nccl_ring` where the
    fabric has no NIC layout, its rings need PXN relays, or no rounding rates above it.

    ``max_chunks`` caps the chunks per source (default 64; never above ``32768 // N``).
    ``meta["synthesizer"]`` is ``"ring-lp"`` and ``meta["ring_chunks"]`` the chunks of every ring used.
    """
    if collective not in TREE_COLLECTIVES:
        raise ScheduleError(f"weighted rings support allgather, reducescatter, allreduce, not {collective!r}")
    coll = Collective(collective)
    choice = baseline_choice(topo)
    layout = choice.layout
    n = topo.nranks
    cap_k = max(1, min(64 if max_chunks is None else max_chunks, EXECUTOR_CHUNK_SLOTS // n))
    channels = layout.nrails if layout is not None else 2
    routes = PairRoutes(topo)
    if layout is None or cap_k < channels:
        return _nccl_ring(coll, topo, min(channels, cap_k) if cap_k < channels else None, choice, routes)
    orders = _candidates(topo, layout, channels, routes)
    lazy = _LazyHops(topo, routes, local=False)
    orders = [o for o in orders if all(lazy.path(o[i], o[(i + 1) % n]) is not None for i in range(n))]
    if len(orders) <= channels:
        return _nccl_ring(coll, topo, None, choice, routes)
    cache: dict[tuple[Rank, Rank], Hop] = {}

    def hop(a: Rank, b: Rank) -> Hop:
        if (a, b) not in cache:
            path = lazy.path(a, b)
            assert path is not None  # every ring step was checked to be a hop
            cache[(a, b)] = Hop(a, b, path)
        return cache[(a, b)]

    loads: list[dict[tuple[NodeId, NodeId], int]] = []
    for order in orders:
        ring: dict[tuple[NodeId, NodeId], int] = defaultdict(int)
        for i in range(n):
            for key in hop(order[i], order[(i + 1) % n]).links:
                ring[key] += 1
        loads.append(dict(ring))
    grid = topo.capacity_grid.caps
    caps = {key: float(grid[key]) for ring in loads for key in ring}
    solved = _lp_rates(loads, caps)
    if solved is None:
        return _nccl_ring(coll, topo, None, choice, routes)
    matrix = solved[1]
    chunks = _round(*solved, cap_k, channels)
    plain = [1] * channels + [0] * (len(orders) - channels)
    exact_cap = [min(grid[key] for key in keys) for keys in _row_links(loads)]
    if chunks == plain or _exact_rate(matrix, exact_cap, chunks) <= _exact_rate(matrix, exact_cap, plain):
        return _nccl_ring(coll, topo, None, choice, routes)
    used = [(order, m) for order, m in zip(orders, chunks) if m > 0]
    out: list[Route] = []
    for order, m in used:
        out += _direct_ring_routes(coll, order, hop, m)
    meta = {"synthesizer": "ring-lp", "nchannels": len(used), "ring_chunks": [m for _, m in used],
            "baseline": f"{choice.kind}-ring", "baseline_reason":
            f"{len(used)} of {len(orders)} rail rings and detours, LP chunk weights; {choice.reason}",
            **communicator_meta(topo)}
    sched = Schedule(coll, n, sum(m for _, m in used), tuple(out), meta=meta)
    sched.validate(topo)
    return sched

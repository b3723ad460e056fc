"""The event loop: slices start, share links max-min fairly, finish, and arrive after the latency.

State per hop-flow: slices started / delivered, slices available at its source, and the service
target of the slice it has on the wire (``inf`` when idle). State per path class: a service clock
``V`` (bytes each of its flows has been served since t = 0), the per-flow rate and ``head``, the
smallest target of its busy flows: flows of one class always progress at the same rate, so the
class's next finish is at ``head`` and a slice finishes exactly when ``V`` passes its target.

Batches (time windows)
----------------------
The loop advances to the earliest pending slice finish or arrival, at time ``t1``, and processes
every finish and arrival due in the window ``[t1, t1 + rtol · t1]`` as one batch ending at ``te``,
the last of them (``te = t1`` when nothing else falls in the window, so isolated events stay
exact). Rates stay constant on ``[t, te]``, so inside the batch:

* every finish time and every arrival time is the exact one for those rates (a slice finishes
  when its class clock passes its target; it arrives ``latency`` later), and the reported
  completion time is the last true arrival, not a batch end;
* a hop-flow that finishes a slice whose next slice was available at the batch start sends that
  slice from its true finish time on (its target is the previous one plus one slice: the capacity
  it was counted for keeps serving it), possibly several slices in one batch;
* **approximated:** everything else that changes the set of transfers on the wire takes effect at
  ``te``: a hop-flow that falls idle keeps its fair share until ``te`` (the share goes unused), a
  slice made available by an arrival starts at ``te`` (also one a hop-flow that finished in the
  batch waits for), and rates are re-solved at ``te``.

So each start and each rate change happens at most ``rtol · t`` after its exact time, bytes are
conserved, and the rates in force are always a feasible max-min allocation of the transfers
counted on the wire: the simulated algbw can never exceed the bandwidth term. With ``rtol = 0``
only simultaneous events (equal up to float rounding) share a batch: the exact mode. The error
bound this gives is in :mod:`synth.simulation.simulator`.

Per class, the busy flows wait in a ring buffer (the class's row of a CSR array) in target order,
so a batch touches only the classes it finishes on and the flows it moves, in a fixed number of
numpy calls: no Python loop over classes or flows.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from synth.errors import ScheduleError
from synth.simulation._maxmin import maxmin_rates

if TYPE_CHECKING:
    from synth.simulation._build import FlowModel, IntArray

__all__ = ["EngineRun", "run_engine"]

# Events within this relative distance of a batch's end are simultaneous (float rounding of sums
# of equal terms); it is far below any modelled effect.
_TIE = 1e-12


@dataclass(frozen=True, slots=True)
class EngineRun:
    time_s: float
    events: int
    rate_solves: int
    steps: int
    #: Per hop-flow: when its first slice went on the wire and when its last slice arrived (s).
    flow_first_start_s: np.ndarray | None = None
    flow_last_arrival_s: np.ndarray | None = None


_EMPTY = np.zeros(0, dtype=np.int64)


def _segments(ptr: IntArray, keys: IntArray) -> tuple[IntArray, IntArray]:
    """Concatenated CSR rows ``ptr[k]:ptr[k + 1]`` of each key, and each row's start in it."""
    lo = ptr[keys]
    counts = ptr[keys + 1] - lo
    offsets = np.zeros(keys.size, dtype=np.int64)
    counts[:-1].cumsum(out=offsets[1:])
    idx = (lo - offsets).repeat(counts) + np.arange(int(counts.sum()) if counts.size else 0, dtype=np.int64)
    return idx, offsets


def _term_values(m: FlowModel, terms: IntArray, arrived: IntArray) -> IntArray:
    x = arrived[m.term_src[terms]]
    cap = m.flow_nsl[m.term_dst[terms]]
    val = np.minimum(np.maximum(x + m.term_off[terms], 0), cap)
    return np.where(x >= m.term_full[terms], cap, val)


def _avail(m: FlowModel, flows: IntArray, arrived: IntArray) -> IntArray:
    """Slices available at the source of each hop-flow in ``flows`` (distinct, each with terms)."""
    idx, offsets = _segments(m.dst_ptr, flows)
    return np.minimum.reduceat(_term_values(m, idx, arrived), offsets)


def _distinct(items: IntArray, stamp: IntArray) -> IntArray:
    """``items`` with one occurrence of each value kept, in O(len) with a scratch array.

    Whichever position of a repeated value the scatter writes last, exactly that one matches,
    so the result does not depend on numpy's scatter order. (``np.unique`` sorts or hashes the
    whole batch, which dominated large events.)
    """
    pos = np.arange(items.size, dtype=np.int64)
    stamp[items] = pos
    return items[stamp[items] == pos]


class _Engine:
    def __init__(self, m: FlowModel, slice_bytes: float, rtol: float) -> None:
        self.m = m
        self.s = slice_bytes
        self.rtol = rtol
        f, p = m.nflows, m.npaths
        self.started = np.zeros(f, dtype=np.int64)
        self.arrived = np.zeros(f, dtype=np.int64)
        self.target = np.full(f, np.inf)
        self.stamp = np.zeros(f, dtype=np.int64)
        self.first_start = np.full(f, np.inf)
        self.last_arrival = np.zeros(f, dtype=np.float64)
        self.flow_lat = m.path_lat_s[m.flow_path]
        self.cls_size = np.bincount(m.flow_path, minlength=p).astype(np.int64)
        self.cls_ptr = np.zeros(p + 1, dtype=np.int64)
        np.cumsum(self.cls_size, out=self.cls_ptr[1:])
        # Per class, a ring buffer (its CSR row) of its busy flows in target order: qh / qt count
        # the flows popped from / pushed to it so far.
        self.qbuf = np.zeros(f, dtype=np.int64)
        self.qh = np.zeros(p, dtype=np.int64)
        self.qt = np.zeros(p, dtype=np.int64)
        self.has_dependents = m.src_ptr[1:] > m.src_ptr[:-1]
        has_terms = m.dst_ptr[1:] > m.dst_ptr[:-1]
        self.avail = m.flow_nsl.copy()
        dep = np.flatnonzero(has_terms)
        if dep.size:
            self.avail[dep] = _avail(m, dep, self.arrived)
        self.clock = np.zeros(p, dtype=np.float64)
        self.rate = np.zeros(p, dtype=np.float64)
        self.nact = np.zeros(p, dtype=np.int64)
        self.head = np.full(p, np.inf)
        # Pending arrivals: heap of (earliest time, seq, times ascending, hop-flows).
        self.arrivals: list[tuple[float, int, np.ndarray, IntArray]] = []
        self.seq = 0
        self.t = 0.0
        self.t_last = 0.0
        self.events = 0
        self.rate_solves = 0

    # -- pieces of a batch ------------------------------------------------------------------------
    def push(self, flows: IntArray, paths: IntArray) -> None:
        """Append busy hop-flows to their class queues; ``paths`` (their classes) sorted."""
        if paths.size == 1 or paths[0] != paths[-1] and (paths[1:] != paths[:-1]).all():
            self.qbuf[self.cls_ptr[paths] + self.qt[paths] % self.cls_size[paths]] = flows
            self.qt[paths] += 1
            return
        first = np.concatenate(([True], paths[1:] != paths[:-1])).nonzero()[0]
        counts = np.empty_like(first)
        counts[:-1] = first[1:] - first[:-1]
        counts[-1] = paths.size - first[-1]
        rank = np.arange(paths.size, dtype=np.int64) - first.repeat(counts)
        self.qbuf[self.cls_ptr[paths] + (self.qt[paths] + rank) % self.cls_size[paths]] = flows
        self.qt[paths[first]] += counts

    def pop_due(self, due: IntArray, limit: float, v0: np.ndarray) -> IntArray:
        """Pop, from the queues of classes ``due``, every flow whose slice finishes within ``limit``.

        A queue is sorted by target, so its finished flows are a prefix of it.
        """
        qh = self.qh[due]
        n = self.qt[due] - qh
        rows = due.repeat(n)
        offsets = np.zeros(due.size, dtype=np.int64)
        n[:-1].cumsum(out=offsets[1:])
        rank = np.arange(rows.size, dtype=np.int64) - offsets.repeat(n)
        flows = self.qbuf[self.cls_ptr[rows] + (rank + self.qh[rows]) % self.cls_size[rows]]
        ok = (self.target[flows] - v0[rows]) / self.rate[rows] <= limit
        got = np.add.reduceat(ok.astype(np.int64), offsets)
        self.qh[due] = qh + got
        return flows[rank < got.repeat(n)]

    def start(self, cand: IntArray) -> IntArray:
        """Put the next slice of every idle candidate with data on the wire now; return them."""
        ok = np.isinf(self.target[cand]) & (self.started[cand] < self.avail[cand])
        flows = cand[ok]
        if flows.size:
            paths = self.m.flow_path[flows]
            np.minimum.at(self.first_start, flows, self.t)
            self.started[flows] += 1
            tgt = self.clock[paths] + self.s
            self.target[flows] = tgt
            np.minimum.at(self.head, paths, tgt)
            order = paths.argsort(kind="stable")
            self.push(flows[order], paths[order])
        return flows

    def finish(self, due: IntArray, dte: float, v0: np.ndarray) -> IntArray:
        """Finish every slice due by the batch end on classes ``due``; backdated restarts.

        ``v0`` is the class clock at the batch start, ``dte`` the batch length. Returns the
        hop-flows that fell idle.
        """
        s = self.s
        limit = dte * (1.0 + _TIE)
        fl = self.pop_due(due, limit, v0)
        pa = self.m.flow_path[fl]
        tg = self.target[fl]
        rl = (tg - v0[pa]) / self.rate[pa]
        done_f: list[IntArray] = []
        done_t: list[np.ndarray] = []
        idle: list[IntArray] = []
        busy: list[IntArray] = []
        while fl.size:
            done_f.append(fl)
            done_t.append(rl)
            more = self.started[fl] < self.avail[fl]
            idle.append(fl[~more])
            fl, tg, pa = fl[more], tg[more] + s, pa[more]
            self.started[fl] += 1
            self.target[fl] = tg
            rl = (tg - v0[pa]) / self.rate[pa]
            again = rl <= limit
            busy.append(fl[~again])
            fl, rl, tg, pa = fl[again], rl[again], tg[again], pa[again]
        gone = np.concatenate(idle)
        self.target[gone] = np.inf
        back = np.concatenate(busy)
        if back.size:
            pb = self.m.flow_path[back]
            order = np.lexsort((self.target[back], pb))
            self.push(back[order], pb[order])
        nonempty = self.qt[due] > self.qh[due]
        self.head[due] = np.inf
        q = due[nonempty]
        self.head[q] = self.target[self.qbuf[self.cls_ptr[q] + self.qh[q] % self.cls_size[q]]]
        fin = np.concatenate(done_f)
        self.land(fin, self.t + np.concatenate(done_t))
        return gone

    def land(self, flows: IntArray, t_done: np.ndarray) -> None:
        """Queue the arrival of slices whose last byte left at ``t_done``."""
        t_arr = t_done + self.flow_lat[flows]
        np.maximum.at(self.last_arrival, flows, t_arr)
        order = t_arr.argsort(kind="stable")
        heapq.heappush(self.arrivals, (float(t_arr[order[0]]), self.seq, t_arr[order], flows[order]))
        self.seq += 1

    def arrivals_until(self, limit: float) -> float:
        """Latest pending arrival time that is ``<= limit`` (``-inf`` if none)."""
        heap, latest = self.arrivals, -np.inf
        todo = [0] if heap and heap[0][0] <= limit else []
        while todo:  # the heap entries due by `limit` form a subtree at the root
            i = todo.pop()
            times = heap[i][2]
            latest = max(latest, float(times[int(times.searchsorted(limit, side="right")) - 1]))
            todo += [c for c in (2 * i + 1, 2 * i + 2) if c < len(heap) and heap[c][0] <= limit]
        return latest

    def deliver(self, te: float) -> tuple[int, IntArray]:
        """Count every slice arrived by ``te``; return how many and the hop-flows they may unblock."""
        got: list[IntArray] = []
        while self.arrivals and self.arrivals[0][0] <= te:
            _, seq, times, flows = heapq.heappop(self.arrivals)
            k = int(times.searchsorted(te, side="right"))
            got.append(flows[:k])
            self.t_last = max(self.t_last, float(times[k - 1]))
            if k < times.size:
                heapq.heappush(self.arrivals, (float(times[k]), seq, times[k:], flows[k:]))
        if not got:
            return 0, np.zeros(0, dtype=np.int64)
        flows = np.concatenate(got)
        np.add.at(self.arrived, flows, 1)
        src = _distinct(flows, self.stamp)
        src = src[self.has_dependents[src]]
        if not src.size:
            return flows.size, src
        m = self.m
        idx, _ = _segments(m.src_ptr, src)
        dep = _distinct(m.term_dst[m.src_terms[idx]], self.stamp)
        self.avail[dep] = _avail(m, dep, self.arrived)
        return flows.size, dep

    def solve_rates(self) -> None:
        self.rate = maxmin_rates(self.nact, self.m.pair_path, self.m.pair_link, self.m.link_cap_Bps, self.m.path_weight)
        self.rate_solves += 1

    # -- the loop ---------------------------------------------------------------------------------
    def run(self) -> EngineRun:
        m = self.m
        npaths = m.npaths
        flows = self.start(np.arange(m.nflows, dtype=np.int64))
        self.nact += np.bincount(m.flow_path[flows], minlength=npaths)
        self.solve_rates()
        act = np.flatnonzero(self.nact)
        total = int(m.flow_nsl.sum())
        delivered = 0
        while delivered < total:
            rel = (self.head[act] - self.clock[act]) / self.rate[act]
            dt1 = float(rel.min()) if act.size else np.inf
            t_arr = self.arrivals[0][0] if self.arrivals else np.inf
            t1 = min(self.t + dt1, t_arr)
            if t1 == np.inf:
                raise ScheduleError(
                    f"simulation stalled at t={self.t!r} s with {total - delivered} slice transfer(s) left: "
                    "a hop waits for data no route delivers (cyclic or dangling dependencies)"
                )
            # The batch ends at the last finish or arrival due within the window [t1, t1 + rtol t1]
            # (at t1 itself when nothing else is due in it).
            lim = t1 + max(self.rtol, _TIE) * t1
            te = max(t1, self.arrivals_until(lim))
            dte = te - self.t
            if act.size:
                dte = max(dte, float(rel[rel <= lim - self.t].max(initial=-np.inf)))
                te = self.t + dte
            self.events += 1
            gone = started = _EMPTY
            cand: list[IntArray] = []
            if act.size:
                due = act[rel <= dte * (1.0 + _TIE)]
                v0 = self.clock
                self.clock = v0 + self.rate * dte
                if due.size:
                    gone = self.finish(due, dte, v0)
                    if gone.size:
                        cand.append(gone)
            self.t = te
            n, dep = self.deliver(te * (1.0 + _TIE))
            delivered += n
            if dep.size:
                cand.append(dep)
            if cand:
                started = self.start(_distinct(np.concatenate(cand), self.stamp))
            if gone.size or started.size:
                g, a = m.flow_path[gone], m.flow_path[started]
                g.sort()
                a.sort()
                if g.size != a.size or (g != a).any():  # the transfers on the wire changed
                    np.subtract.at(self.nact, g, 1)
                    np.add.at(self.nact, a, 1)
                    self.solve_rates()
                    act = self.nact.nonzero()[0]
        return EngineRun(self.t_last, self.events, self.rate_solves, total, self.first_start, self.last_arrival)


def run_engine(m: FlowModel, slice_bytes: float, rtol: float) -> EngineRun:
    """Simulate the model with slices of ``slice_bytes`` bytes; see the module docstring."""
    return _Engine(m, slice_bytes, rtol).run()

"""The event loop: slices start, share links max-min fairly, finish, and arrive after the latency.

State per hop-flow: slices started / delivered, slices available at its source, whether a slice
is on the wire. State per path class: a service clock ``V`` (bytes each of its flows has been
served since t = 0), the per-flow rate and a FIFO of (target clock, flows) groups: flows of one
class always progress at the same rate and every slice has the same size, so the flows of a
class finish in the order they started and the head group's target is the next finish on it.
An event is the earliest finish or arrival; everything due within ``rtol`` (relative) of it is
processed in the same batch, so symmetric schedules take few events.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from synth.errors import ScheduleError
from synth.simulation._maxmin import maxmin_rates

if TYPE_CHECKING:
    from synth.simulation._build import FlowModel, IntArray

__all__ = ["EngineRun", "run_engine"]


@dataclass(frozen=True, slots=True)
class EngineRun:
    time_s: float
    events: int
    rate_solves: int
    steps: int


def _term_values(m: FlowModel, terms: IntArray, arrived: IntArray) -> IntArray:
    x = arrived[m.term_src[terms]]
    cap = m.flow_nsl[m.term_dst[terms]]
    val = np.clip(x + m.term_off[terms], 0, cap)
    return np.where(x >= m.term_full[terms], cap, val)


def _avail(m: FlowModel, flows: IntArray, arrived: IntArray) -> IntArray:
    """Slices available at the source of each hop-flow in ``flows`` (distinct, each with terms)."""
    lo = m.dst_ptr[flows]
    counts = m.dst_ptr[flows + 1] - lo
    offsets = np.zeros(flows.size, dtype=np.int64)
    np.cumsum(counts[:-1], out=offsets[1:])
    idx = np.repeat(lo - offsets, counts) + np.arange(int(counts.sum()), dtype=np.int64)
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


def _dependents(m: FlowModel, flows: IntArray, stamp: IntArray) -> IntArray:
    lo = m.src_ptr[flows]
    counts = m.src_ptr[flows + 1] - lo
    if not counts.any():
        return np.zeros(0, dtype=np.int64)
    offsets = np.zeros(flows.size, dtype=np.int64)
    np.cumsum(counts[:-1], out=offsets[1:])
    idx = np.repeat(lo - offsets, counts) + np.arange(int(counts.sum()), dtype=np.int64)
    return _distinct(m.term_dst[m.src_terms[idx]], stamp)


class _Engine:
    def __init__(self, m: FlowModel, slice_bytes: float, rtol: float) -> None:
        self.m = m
        self.s = slice_bytes
        self.rtol = rtol
        f, p = m.nflows, m.npaths
        self.started = np.zeros(f, dtype=np.int64)
        self.arrived = np.zeros(f, dtype=np.int64)
        self.busy = np.zeros(f, dtype=bool)
        self.stamp = np.zeros(f, dtype=np.int64)
        has_terms = m.dst_ptr[1:] > m.dst_ptr[:-1]
        self.avail = m.flow_nsl.copy()
        dep = np.flatnonzero(has_terms)
        if dep.size:
            self.avail[dep] = _avail(m, dep, self.arrived)
        self.clock = np.zeros(p, dtype=np.float64)
        self.rate = np.zeros(p, dtype=np.float64)
        self.nact = np.zeros(p, dtype=np.int64)
        self.head = np.full(p, np.inf)
        self.fifo: list[deque[tuple[float, IntArray]]] = [deque() for _ in range(p)]
        self.arrivals: list[tuple[float, int, IntArray]] = []
        self.seq = 0
        self.t = 0.0
        self.events = 0
        self.rate_solves = 0

    def start(self, cand: IntArray) -> IntArray:
        """Put the next slice of every idle candidate with data on the wire; return their classes."""
        ok = ~self.busy[cand] & (self.started[cand] < self.avail[cand])
        flows = cand[ok]
        if not flows.size:
            return flows
        self.started[flows] += 1
        self.busy[flows] = True
        paths = self.m.flow_path[flows]
        order = np.argsort(paths, kind="stable")
        flows, paths = flows[order], paths[order]
        cuts = np.flatnonzero(paths[1:] != paths[:-1]) + 1
        bounds = np.concatenate(([0], cuts, [paths.size]))
        for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
            p = int(paths[lo])
            target = float(self.clock[p]) + self.s
            self.fifo[p].append((target, flows[lo:hi]))
            if self.head[p] == np.inf:
                self.head[p] = target
        return paths

    def finish(self, paths: IntArray, slack_s: float) -> IntArray:
        """Pop every group due on these classes (the head group always: it set the event time)."""
        out: list[IntArray] = []
        for p in paths.tolist():
            q = self.fifo[p]
            limit = float(self.clock[p]) + float(self.rate[p]) * slack_s + 1e-12 * self.s
            out.append(q.popleft()[1])
            while q and q[0][0] <= limit:
                out.append(q.popleft()[1])
            self.head[p] = q[0][0] if q else np.inf
        return np.concatenate(out)

    def land(self, done: IntArray) -> IntArray:
        """Schedule the arrival of slices whose last byte just left; return the zero-latency ones."""
        lat = self.m.path_lat_s[self.m.flow_path[done]]
        zero = lat <= 0.0
        later = done[~zero]
        if later.size:
            lat_later = lat[~zero]
            order = np.argsort(lat_later, kind="stable")
            later, lat_later = later[order], lat_later[order]
            cuts = np.flatnonzero(lat_later[1:] != lat_later[:-1]) + 1
            bounds = np.concatenate(([0], cuts, [later.size]))
            for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
                heapq.heappush(self.arrivals, (self.t + float(lat_later[lo]), self.seq, later[lo:hi]))
                self.seq += 1
        return done[zero]

    def deliver(self, flows: IntArray) -> IntArray:
        """Count arrived slices; return the hop-flows whose availability may have grown."""
        np.add.at(self.arrived, flows, 1)
        dep = _dependents(self.m, _distinct(flows, self.stamp), self.stamp)
        if dep.size:
            self.avail[dep] = _avail(self.m, dep, self.arrived)
        return dep

    def solve_rates(self) -> None:
        self.rate = maxmin_rates(self.nact, self.m.pair_path, self.m.pair_link, self.m.link_cap_Bps, self.m.path_weight)
        self.rate_solves += 1

    def run(self) -> EngineRun:
        m = self.m
        npaths = m.npaths
        paths = self.start(np.arange(m.nflows, dtype=np.int64))
        self.nact += np.bincount(paths, minlength=npaths)
        self.solve_rates()
        act = np.flatnonzero(self.nact)
        finish_t = self.head[act] - self.clock[act]
        finish_t /= self.rate[act]
        total = int(m.flow_nsl.sum())
        delivered = 0
        while delivered < total:
            dt_tx = float(finish_t.min()) if act.size else np.inf
            t_arr = self.arrivals[0][0] if self.arrivals else np.inf
            t_new = min(self.t + dt_tx, t_arr)
            if t_new == np.inf:
                raise ScheduleError(
                    f"simulation stalled at t={self.t!r} s with {total - delivered} slice transfer(s) left: "
                    "a hop waits for data no route delivers (cyclic or dangling dependencies)"
                )
            dt = t_new - self.t
            self.clock[act] += self.rate[act] * dt
            self.t = t_new
            self.events += 1
            slack = self.rtol * t_new
            cand: list[IntArray] = []
            delta = np.zeros(npaths, dtype=np.int64)
            if act.size:
                due = act[finish_t <= dt + slack]
                if due.size:
                    done = self.finish(due, slack)
                    self.busy[done] = False
                    delta -= np.bincount(m.flow_path[done], minlength=npaths)
                    cand.append(done)
                    now = self.land(done)
                    if now.size:
                        delivered += now.size
                        cand.append(self.deliver(now))
            landed: list[IntArray] = []
            while self.arrivals and self.arrivals[0][0] <= t_new + slack:
                landed.append(heapq.heappop(self.arrivals)[2])
            if landed:
                flows = np.concatenate(landed)
                delivered += flows.size
                cand.append(self.deliver(flows))
            if cand:
                delta += np.bincount(self.start(_distinct(np.concatenate(cand), self.stamp)), minlength=npaths)
            if delta.any():
                self.nact += delta
                self.solve_rates()
                act = np.flatnonzero(self.nact)
                finish_t = self.head[act] - self.clock[act]
                finish_t /= self.rate[act]
            elif act.size:
                finish_t = self.head[act] - self.clock[act]
                finish_t /= self.rate[act]
        steps = total
        return EngineRun(self.t, self.events, self.rate_solves, steps)


def run_engine(m: FlowModel, slice_bytes: float, rtol: float) -> EngineRun:
    """Simulate the model with slices of ``slice_bytes`` bytes; see the module docstring."""
    return _Engine(m, slice_bytes, rtol).run()

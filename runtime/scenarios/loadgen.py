"""Telemetry load generator: N ranks' telemetry from a few processes, in the executors' own formats.

A :class:`FlowTable` holds, for one schedule version, every flow one collective makes the executors report
(a ``pair`` per GPU pair the schedule sends over, an ``inject`` per GPU with intra-host sends, as
:func:`runtime.executor.telemetry.collective_samples` does) with its bytes and its busy time on a *true*
topology: the flow runs at its proportional share ``min_a M_a · n_{m,a} / n_a`` of the links it crosses (the
model of ``docs/controller.md`` §2; relays are not slowed by their inputs). :func:`window_records` draws a
window of ``count`` collectives with lognormal timing noise, vectorised over flows, and folds it exactly as
:class:`runtime.formats.aggregate.WindowAggregator` does (same totals, quantiles and fields);
:func:`collective_samples` draws one collective's ``/1`` samples. Every record is written by the format's own
writers: :func:`window_batch` builds the columnar :class:`~runtime.formats.columnar.AggBatch` (kind ``aggcols``,
docs/telemetry.md §6) whose rows are the window's records, :func:`window_records` their
:meth:`~runtime.formats.aggregate.AggRecord.to_dict`; an AllReduce table (``phase``) carries its phase.
:func:`push_windows` sends them to a real daemon through :class:`runtime.service.client.Client`
(acknowledged batches, columnar by default) and reports what it took.
``benchmarks/loop_scale.py`` drives it at 128–2048 ranks.

Examples
--------
>>> import numpy as np
>>> from synth import load_topology
>>> from runtime.loop.bootstrap import fallback_schedule
>>> topo = load_topology("hpn:1x2x4")
>>> table = flow_table(fallback_schedule("allgather", topo), topo, comm="world", version=1, size_bytes=1 << 24)
>>> len(table), table.flows_per_collective == len(collective_samples(table, 1, 0.0))
(28, True)
>>> recs = window_records(table, seq_first=8, count=8, t_s=1.0, period_s=0.1, sigma=0.05,
...                       rng=np.random.default_rng(0))
>>> from runtime.formats.aggregate import validate_records
>>> ok, rep = validate_records(recs)
>>> rep.accepted, ok[0].count, ok[0].seq_last
(28, 8, 15)
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from runtime.formats.columnar import FLOAT_COLUMNS, INT_COLUMNS, AggBatch, batches_from_columns
from runtime.formats.telemetry import Sample
from runtime.loop.estimator import ScheduleRouting
from synth import Schedule, Topology

__all__ = ["FlowTable", "PushReport", "collective_samples", "flow_table", "push_windows", "window_batch",
           "window_records"]


@dataclass(frozen=True)
class FlowTable:
    """The flows of one collective of one schedule version (arrays aligned by flow)."""

    comm: str
    collective: str
    version: int
    src: np.ndarray  # int64: the measuring (sending) rank
    dst: np.ndarray  # int64: the receiver of a pair flow, -1 for inject
    bytes: np.ndarray  # int64: payload bytes per collective
    busy_s: np.ndarray  # float64: noise-free busy time per collective on the true topology
    #: The AllReduce phase these flows measure (``reducescatter``/``allgather``), or None.
    phase: str | None = None

    def __len__(self) -> int:
        return int(self.src.size)

    @property
    def flows_per_collective(self) -> int:
        """Samples one collective makes every rank emit in all (the ``/1`` stream)."""
        return len(self)

    def of_ranks(self, ranks: Sequence[int]) -> FlowTable:
        """The flows measured by ``ranks`` (one emulating process's share)."""
        keep = np.isin(self.src, np.asarray(ranks, dtype=np.int64))
        return FlowTable(self.comm, self.collective, self.version, self.src[keep], self.dst[keep],
                         self.bytes[keep], self.busy_s[keep], self.phase)


def flow_table(schedule: Schedule, nominal: Topology, *, comm: str, version: int, size_bytes: int,
               true: Topology | None = None, routing: ScheduleRouting | None = None,
               phase: str | None = None) -> FlowTable:
    """The flows ``schedule`` makes its executors report at size ``size_bytes``, timed on ``true`` (default:
    the nominal topology; ``nominal.with_failure("fail2")`` for a failure); ``phase``: an AllReduce's
    ``reducescatter`` or ``allgather`` phase (its flows, as :meth:`ScheduleRouting.build` keeps them)."""
    routing = routing or ScheduleRouting.build(schedule, nominal, phase)
    caps = {lk.key: lk.gbps for lk in (true or nominal).links}
    src, dst, nbytes, busy = [], [], [], []

    def add(u: int, v: int, chunks: int, gbps: float) -> None:
        b = max(1, size_bytes * chunks // max(routing.nchunks_total, 1))
        src.append(u)
        dst.append(v)
        nbytes.append(b)
        busy.append(8.0 * b / (max(gbps, 1e-6) * 1e9))

    for (u, v), n in sorted(routing.pair_chunks.items()):
        links = routing.pair_links.get((u, v))
        if links:
            add(u, v, n, min(caps.get(a, 0.0) * n / routing.link_chunks[a] for a in links))
    local: dict[int, int] = {}
    for (u, v), n in routing.pair_chunks.items():
        if routing.host_of.get(u) is not None and routing.host_of.get(u) == routing.host_of.get(v):
            local[u] = local.get(u, 0) + n
    for u, up in sorted(routing.inject_links.items()):
        add(u, -1, local.get(u, 1), min(caps.get(a, 0.0) * k / routing.link_chunks[a] for a, k in up.items()))
    return FlowTable(comm, schedule.collective, version, np.asarray(src, dtype=np.int64),
                     np.asarray(dst, dtype=np.int64), np.asarray(nbytes, dtype=np.int64), np.asarray(busy), phase)


def collective_samples(table: FlowTable, seq: int, t_s: float, *, sigma: float = 0.0,
                       rng: np.random.Generator | None = None) -> list[dict[str, Any]]:
    """One collective's ``loopcoll.telemetry/1`` samples (``window`` 1), busy times with lognormal ``sigma``."""
    busy = table.busy_s * (np.exp(sigma * (rng or np.random.default_rng()).standard_normal(len(table)))
                           if sigma > 0 else 1.0)
    extra = {} if table.phase is None else {"phase": table.phase}
    return [Sample(t_s, table.comm, seq, table.version, "pair" if d >= 0 else "inject", s, None if d < 0 else d, b,
                   t, table.collective, "executor", extra).to_dict()
            for s, d, b, t in zip(table.src.tolist(), table.dst.tolist(), table.bytes.tolist(), busy.tolist())]


def window_batch(table: FlowTable, *, seq_first: int, count: int, t_s: float, period_s: float, sigma: float,
                 rng: np.random.Generator, then: FlowTable | None = None, then_from: int = 0) -> list[AggBatch]:
    """The window of ``count`` collectives ``seq_first …`` ending at ``t_s`` as columnar batches (one per
    :data:`~runtime.formats.columnar.MAX_BATCH_ROWS` flows), folded as
    :class:`~runtime.formats.aggregate.WindowAggregator` folds them; with ``then`` (the same flows timed on
    another topology) collectives ``then_from …`` of the window run on it (a change mid-window)."""
    f = len(table)
    base = np.repeat(table.busy_s[None, :], count, axis=0)
    if then is not None:
        base[then_from:, :] = then.busy_s[None, :]
    busy = base * (np.exp(sigma * rng.standard_normal((count, f))) if sigma > 0 else 1.0)
    rates = table.bytes[None, :] / busy
    p10, p50, p90 = np.quantile(rates, [0.1, 0.5, 0.9], axis=0)
    t_first = t_s - period_s * (count - 1)
    cols = {"src": table.src, "dst": table.dst, "seq_first": np.full(f, seq_first), "seq_last":
            np.full(f, seq_first + count - 1), "count": np.full(f, count), "bytes": table.bytes * count,
            "t_s": np.full(f, float(t_s)), "t_first_s": np.full(f, float(t_first)), "busy_s": busy.sum(axis=0),
            "rate_p10_Bps": p10, "rate_p50_Bps": p50, "rate_p90_Bps": p90}
    assert set(cols) == set(INT_COLUMNS + FLOAT_COLUMNS)
    return batches_from_columns(table.comm, table.collective, table.version, cols, origin="executor",
                                phase=table.phase)


def window_records(table: FlowTable, *, seq_first: int, count: int, t_s: float, period_s: float, sigma: float,
                   rng: np.random.Generator, then: FlowTable | None = None, then_from: int = 0) -> list[dict[str, Any]]:
    """:func:`window_batch`'s rows as ``loopcoll.telemetry/2`` ``agg`` record objects (one per flow)."""
    return [r.to_dict() for b in window_batch(table, seq_first=seq_first, count=count, t_s=t_s, period_s=period_s,
                                              sigma=sigma, rng=rng, then=then, then_from=then_from)
            for r in b.records()]


@dataclass(frozen=True, slots=True)
class PushReport:
    """What one sender pushed: records, acknowledged ones, rejected ones, wall and CPU seconds."""

    records: int
    accepted: int
    rejected: int
    wall_s: float
    cpu_s: float


def push_windows(client: Any, table: FlowTable, *, windows: int, window: int = 8, seq0: int = 0,
                 sigma: float = 0.05, rate_hz: float | None = None, seed: int = 0, columnar: bool = True,
                 per_rank: bool = False) -> PushReport:
    """Send ``windows`` windows of ``table``'s flows through ``client`` (``push_samples``: each batch waits for
    the controller's ingestion); ``rate_hz`` paces them as a job of that many collectives per second (None:
    as fast as the daemon takes them); ``window`` 1 sends ``/1`` samples, ``columnar`` False ``agg`` records
    instead of ``aggcols`` batches; ``per_rank``: one batch per rank and window, each its own message (as the
    executors of a job without relays send them; else one process's flows are batched together). Counts are
    records (rows)."""
    rng = np.random.default_rng(seed)
    t0, c0 = time.perf_counter(), time.process_time()
    sent = accepted = rejected = 0
    period = 1.0 / rate_hz if rate_hz else 0.01
    for k in range(windows):
        seq = seq0 + k * window
        t_s = time.time()
        docs: list[dict[str, Any]]
        if window == 1:
            docs = collective_samples(table, seq, t_s, sigma=sigma, rng=rng)
            sent += len(docs)
        else:
            batches = window_batch(table, seq_first=seq, count=window, t_s=t_s, period_s=period, sigma=sigma,
                                   rng=rng)
            if per_rank:
                batches = [c for b in batches for c in _by_rank(b)]
            sent += sum(len(b) for b in batches)
            docs = [b.to_dict() for b in batches] if columnar else [r.to_dict() for b in batches for r in b.records()]
        reply = client.push_samples(docs, batch_samples=1 if per_rank else None)
        accepted += reply["accepted"]
        rejected += sum(reply["rejected"].values())
        if rate_hz:
            wait = t0 + (k + 1) * window / rate_hz - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
    return PushReport(sent, accepted, rejected, time.perf_counter() - t0, time.process_time() - c0)


def _by_rank(batch: AggBatch) -> list[AggBatch]:
    """``batch``'s rows as one batch per ``src`` rank (rank order)."""
    src = batch.cols["src"]
    out = []
    for r in np.unique(src).tolist():
        keep = src == r
        out += batches_from_columns(batch.comm, batch.collective, batch.version,
                                    {k: v[keep] for k, v in batch.cols.items()}, origin=batch.origin,
                                    incarnation=batch.incarnation, phase=batch.phase)
    return out

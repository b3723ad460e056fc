"""Columnar telemetry grouping: :class:`~runtime.formats.columnar.AggBatch` rows held per collective window.

The rules are those of :mod:`runtime.loop.grouping` (docs/controller.md §1) applied to arrays: rows are
grouped per ``(comm, collective, version, incarnation, seq_last, phase)``; a group is ready when it holds every
flow its schedule version produces, when every rank it lacks has reported a later window of the same
incarnation (at most :data:`~runtime.loop.grouping.SEQ_WINDOW` ahead), after
:data:`~runtime.loop.grouping.GROUP_TIMEOUT_S`, or past :data:`~runtime.loop.grouping.MAX_HELD_GROUPS` (oldest
first) or past :data:`MAX_HELD_ROWS` rows. A duplicate flow in a group is skipped (the first row kept). A ready group becomes the estimator's
measurements exactly as :func:`runtime.formats.aggregate.window_measurements` makes them from the same records
(the windows' median rates; a window that straddles a change at its stepped flows' p10 and half its count),
computed with numpy and handed on as arrays (:class:`~runtime.loop.colestim.ColumnFold` folds them; the
per-row tuples of :meth:`~runtime.loop.estimator.LinkEstimator.observe_group` only on demand). Batches and per-record telemetry of
the same collective form separate groups (a job's executors use one writer).

Examples
--------
>>> from collections import Counter
>>> from runtime.formats.aggregate import AggRecord
>>> from runtime.formats.columnar import batches_from_records
>>> rec = AggRecord(1.0, 0.3, "w", "allgather", 1, "pair", 0, 1, 0, 7, 8, 8000, 0.008, 9e5, 1e6, 1.1e6, "executor")
>>> skipped: Counter[str] = Counter()
>>> groups = ColumnGroups(clock=lambda: 0.0, skipped=skipped)
>>> groups.add(batches_from_records([rec, rec]))
>>> groups.pending_rows, groups.collect(lambda comm, collective, version, phase: None), dict(skipped)
(2, [], {'unknown_version': 2})
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np

from runtime.formats.aggregate import STEP_FRACTION, STEP_SPREAD
from runtime.formats.columnar import AggBatch
from runtime.loop.estimator import ScheduleRouting
from runtime.loop.grouping import GROUP_TIMEOUT_S, MAX_HELD_GROUPS, MAX_TRACKED_RANKS, SEQ_WINDOW, RoutingLookup

__all__ = ["MAX_HELD_ROWS", "ColumnGroups", "ReadyGroup", "window_arrays", "window_columns"]

#: Rows held in incomplete groups at most (about 72 bytes each: ~290 MiB); past it the oldest groups are folded
#: as they are, like past ``MAX_HELD_GROUPS`` (a 2048-rank AllToAll window is ~537 000 rows: 7 windows).
MAX_HELD_ROWS = 4_000_000

_KEY_SHIFT = np.int64(1 << 32)
_GroupKey = tuple[str, str, int, str | None, int, str | None]
_COLS = ("src", "dst", "count", "bytes", "busy_s", "rate_p10_Bps", "rate_p50_Bps", "rate_p90_Bps", "t_s")
Measurement = tuple[str, int, int | None, float, float]


@dataclass(frozen=True, slots=True)
class ReadyGroup:
    """One collective window ready to fold: its routing, its measurements as arrays (``src``, ``dst`` = −1 for
    ``inject``, ``nbytes``, ``busy_s``: :func:`window_arrays`), the collectives it stands for, its latest ``t_s``
    and the collectives its rows carry in all (``samples_since_publish``)."""

    routing: ScheduleRouting
    src: np.ndarray
    dst: np.ndarray
    nbytes: np.ndarray
    busy_s: np.ndarray
    count: int
    t_s: float
    collectives: int

    @property
    def measurements(self) -> list[Measurement]:
        """The measurements as the per-row path's tuples (:func:`window_columns`)."""
        return _tuples(self.src, self.dst, self.nbytes, self.busy_s)


@dataclass(slots=True)
class _Held:
    serial: int
    created_t_s: float
    chunks: list[dict[str, np.ndarray]] = field(default_factory=list)
    rows: int = 0
    missing: frozenset[int] | None = None  # ranks lacking, as of the last check (None: check again)
    have: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # flow codes held, sorted
    fresh: list[np.ndarray] = field(default_factory=list)  # codes held since ``lack`` was last brought up to date
    dups: int = 0  # duplicate rows dropped, not counted yet (they count when the group is checked)
    arrived: list[tuple[np.ndarray, dict[str, np.ndarray]]] = field(default_factory=list)  # (codes, rows) unmerged
    lack: np.ndarray | None = None  # per rank, its expected flows the group lacks
    lack_of: np.ndarray | None = None  # the expected flow codes ``lack`` was made against


def window_columns(cols: dict[str, np.ndarray]) -> tuple[list[Measurement], int]:
    """:func:`window_arrays` as the per-row path's ``(kind, src, dst, bytes, busy_s)`` tuples and the count.

    >>> c = {"src": np.array([0, 0]), "dst": np.array([1, -1]), "count": np.array([8, 8]),
    ...      "bytes": np.array([64, 64]), "busy_s": np.array([8.0, 8.0]), "rate_p10_Bps": np.array([8.0, 1.0]),
    ...      "rate_p50_Bps": np.array([8.0, 8.0]), "rate_p90_Bps": np.array([8.0, 8.0])}
    >>> window_columns(c)
    ([('pair', 0, 1, 8.0, 1.0), ('inject', 0, None, 8.0, 8.0)], 4)
    """
    src, dst, nbytes, busy, least = window_arrays(cols)
    return _tuples(src, dst, nbytes, busy), least


def _tuples(src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray, busy: np.ndarray) -> list[Measurement]:
    return [("pair", s, d, b, t) if d >= 0 else ("inject", s, None, b, t)
            for s, d, b, t in zip(src.tolist(), dst.tolist(), nbytes.tolist(), busy.tolist())]


def window_arrays(cols: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """:func:`~runtime.formats.aggregate.window_measurements` of one group's rows given as columns, as
    arrays ``(src, dst, nbytes, busy_s)`` (``dst`` −1: ``inject``) and the count (the same figures as through
    :meth:`~runtime.formats.aggregate.AggRecord.window_sample`).

    >>> c = {"src": np.array([0, 0]), "dst": np.array([1, -1]), "count": np.array([8, 8]),
    ...      "bytes": np.array([64, 64]), "busy_s": np.array([8.0, 8.0]), "rate_p10_Bps": np.array([8.0, 1.0]),
    ...      "rate_p50_Bps": np.array([8.0, 8.0]), "rate_p90_Bps": np.array([8.0, 8.0])}
    >>> [a.tolist() if hasattr(a, "tolist") else a for a in window_arrays(c)]
    [[0, 0], [1, -1], [8.0, 8.0], [1.0, 8.0], 4]
    """
    count = cols["count"]
    per = cols["bytes"] / count
    p10, p50 = cols["rate_p10_Bps"], cols["rate_p50_Bps"]
    with np.errstate(divide="ignore", invalid="ignore"):
        busy = np.where((per > 0) & (p50 > 0), per / p50, cols["busy_s"] / count)
        busy = np.maximum(busy, 1e-12)
        spread = np.where(p10 > 0, cols["rate_p90_Bps"] / p10, np.inf)
        low = np.where((per > 0) & (p10 > 0), per / p10, busy)
    stepped = spread > STEP_SPREAD
    n = int(count.size)
    least = int(count.min()) if n else 1
    if n and int(stepped.sum()) >= STEP_FRACTION * n:
        busy = np.where(stepped, low, busy)
        least = max(1, least // 2)
    nbytes = np.rint(per)  # half to even, as WindowSample's int(round(per))
    return cols["src"], cols["dst"], nbytes, busy, least


class ColumnGroups:
    """The controller's held columnar groups; not thread-safe (called under the controller's lock).

    ``clock`` and ``skipped`` as for :class:`~runtime.loop.grouping.SampleGroups`.
    """

    def __init__(self, *, clock: Callable[[], float], skipped: Counter[str]) -> None:
        self._now = clock
        self._skipped = skipped
        self._held: dict[_GroupKey, _Held] = {}
        self._want: dict[tuple[str, str, int, str | None], np.ndarray] = {}
        self._latest_seq: dict[tuple[str, str | None, int], int] = {}
        self._serial = 0

    @property
    def pending_rows(self) -> int:
        """Rows held in groups not folded yet."""
        return sum(g.rows for g in self._held.values())

    def add(self, batches: Iterable[AggBatch]) -> None:
        """Hold the rows of ``batches`` in their groups (one per ``seq_last``)."""
        for b in batches:
            if b.collective == "reduce":
                self._skipped["rooted_reduce"] += len(b)
                continue
            cols = {k: b.cols[k] for k in _COLS}
            seq = b.cols["seq_last"]
            values = seq[:1] if not seq.size or seq.min() == seq.max() else np.unique(seq)  # one window: the rule
            for q in values.tolist():
                part = cols if values.size == 1 else {k: v[seq == q] for k, v in cols.items()}
                self._hold((b.comm, b.collective, b.version, b.incarnation, q, b.phase), part)
            self._note_latest(b)

    def _hold(self, gkey: _GroupKey, part: dict[str, np.ndarray]) -> None:
        group = self._held.get(gkey)
        if group is None:
            self._serial += 1
            group = self._held[gkey] = _Held(self._serial, self._now())
        keys = part["src"].astype(np.int64) * _KEY_SHIFT + (part["dst"].astype(np.int64) + 1)
        group.arrived.append((keys, part))  # merged when the group is next checked: once per poll, not per batch
        group.rows += int(keys.size)  # duplicates included until counted, as the held rows bound them
        group.missing = None

    @staticmethod
    def _merge(group: _Held) -> None:
        """Fold the rows arrived since the last check into the group, the first row of each flow kept (arrival
        order): one sort of the new codes and one search of the held ones, however many batches brought them."""
        if not group.arrived:
            return
        if len(group.arrived) == 1:
            ((keys, part),) = group.arrived
        else:
            keys = np.concatenate([k for k, _p in group.arrived])
            part = {k: np.concatenate([p[k] for _k, p in group.arrived]) for k in _COLS}
        group.arrived = []
        if keys.size < 2 or bool((keys[1:] > keys[:-1]).all()):  # a writer's rows in flow order: all distinct
            codes, first = keys, np.arange(keys.size)
        else:
            codes, first = np.unique(keys, return_index=True)  # the first row of each flow (arrival order)
        pos = np.searchsorted(group.have, codes)
        new = group.have[np.minimum(pos, group.have.size - 1)] != codes if group.have.size else \
            np.ones(codes.size, dtype=bool)
        if not new.all() or first.size < keys.size:
            first = np.sort(first[new])
            part = {k: v[first] for k, v in part.items()}
        group.dups += int(keys.size - first.size)
        group.have = np.insert(group.have, pos[new], codes[new])
        group.fresh.append(codes[new])
        group.chunks.append(part)

    def _note_latest(self, b: AggBatch) -> None:
        src, seq = b.cols["src"], b.cols["seq_last"]
        order = np.lexsort((seq, src))
        last = np.r_[src[order][1:] != src[order][:-1], True]  # each rank's highest seq_last
        for r, q in zip(src[order][last].tolist(), seq[order][last].tolist()):
            key = (b.comm, b.incarnation, r)
            q = max(q, self._latest_seq.pop(key, q))
            self._latest_seq[key] = q  # re-inserted last: least recently heard first
        while len(self._latest_seq) > MAX_TRACKED_RANKS:
            del self._latest_seq[next(iter(self._latest_seq))]

    def collect(self, routing_for: RoutingLookup) -> list[ReadyGroup]:
        """Take out every group ready to fold, in fold order (per comm, collective, seq, version,
        incarnation, phase)."""
        now = self._now()
        ready: list[tuple[tuple[str, str, int, int, str, str], ScheduleRouting, dict[str, np.ndarray]]] = []
        waiting: list[_GroupKey] = []
        for gkey in list(self._held):
            comm, coll, version, inc, seq, phase = gkey
            group = self._held[gkey]
            routing = routing_for(comm, coll, version, phase)
            if routing is None:
                self._skipped["unknown_version"] += group.rows
                del self._held[gkey]
                continue
            self._count_dups(group)
            if group.missing is None:
                group.missing = self._missing((comm, coll, version, phase), routing, group)
            if group.missing and not self._moved_on(gkey, group.missing) and now - group.created_t_s <= GROUP_TIMEOUT_S:
                waiting.append(gkey)
                continue
            del self._held[gkey]
            ready.append(((comm, coll, seq, version, inc or "", phase or ""), routing, self._dedup(group)))
        waiting.sort(key=lambda k: self._held[k].serial)
        over, rows = max(0, len(waiting) - MAX_HELD_GROUPS), sum(self._held[k].rows for k in waiting)
        while over < len(waiting) and rows > MAX_HELD_ROWS:  # the row bound: the oldest fold first
            rows -= self._held[waiting[over]].rows
            over += 1
        for gkey in waiting[:over]:
            comm, coll, version, inc, seq, phase = gkey
            routing = routing_for(comm, coll, version, phase)
            assert routing is not None
            ready.append(((comm, coll, seq, version, inc or "", phase or ""), routing, self._dedup(self._held.pop(gkey))))
        out = []
        for _order, routing, cols in sorted(ready, key=lambda r: (r[0][:5], _PHASE_ORDER[r[0][5]])):
            src, dst, nbytes, busy, count = window_arrays(cols)
            out.append(ReadyGroup(routing, src, dst, nbytes, busy, count, float(cols["t_s"].max()),
                                  int(cols["count"].sum())))
        return out

    def _count_dups(self, group: _Held) -> None:
        """Merge the rows arrived and count the duplicates dropped (``duplicate_sample``) once the group's version
        is known."""
        self._merge(group)
        if group.dups:
            self._skipped["duplicate_sample"] += group.dups
            group.rows -= group.dups
            group.dups = 0

    def _dedup(self, group: _Held) -> dict[str, np.ndarray]:
        """The group's rows in arrival order, the first of each flow kept (duplicates are dropped and counted
        here)."""
        self._count_dups(group)
        cols = group.chunks[0] if len(group.chunks) == 1 else {
            k: np.concatenate([c[k] for c in group.chunks]) for k in _COLS}
        group.chunks = [cols]
        return cols

    def _missing(self, key: tuple[str, str, int, str | None], routing: ScheduleRouting,
                 group: _Held) -> frozenset[int]:
        """The ranks with an expected flow (a ``pair`` per GPU pair, an ``inject`` per GPU sending inside its
        host) that the group lacks; per rank its lacking flows are counted down as rows arrive (the check costs
        the rows new since the last one, not the group's)."""
        want = self._want.get(key)
        if want is None:
            pairs = [u * (1 << 32) + v + 1 for u, v in routing.pair_links] + [u * (1 << 32) for u in routing.inject_links]
            want = self._want[key] = np.unique(np.array(pairs, dtype=np.int64))
        ranks = int(want[-1] // _KEY_SHIFT) + 1 if want.size else 0
        if group.lack is None or group.lack_of is not want:
            held = group.have[np.minimum(np.searchsorted(group.have, want), group.have.size - 1)] == want \
                if group.have.size else np.zeros(want.size, dtype=bool)  # both sorted and distinct
            group.lack = np.bincount(want[~held] // _KEY_SHIFT, minlength=ranks)
            group.lack_of = want
        elif want.size:
            for codes in group.fresh:
                hit = codes[want[np.minimum(np.searchsorted(want, codes), want.size - 1)] == codes]
                group.lack -= np.bincount(hit // _KEY_SHIFT, minlength=ranks)
        group.fresh = []
        return frozenset(np.flatnonzero(group.lack).tolist())

    def _moved_on(self, gkey: _GroupKey, missing: Iterable[int]) -> bool:
        comm, _coll, _version, inc, seq, _phase = gkey
        for r in missing:
            latest = self._latest_seq.get((comm, inc, r))
            if latest is None or not seq < latest <= seq + SEQ_WINDOW:
                return False
        return True


_PHASE_ORDER = {"": 0, "reducescatter": 1, "allgather": 2}

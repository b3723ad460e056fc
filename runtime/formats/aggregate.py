"""Source-aggregated telemetry, ``loopcoll.telemetry/2`` kind ``agg`` (docs/telemetry.md §5).

An executor folds its per-collective ``pair``/``inject`` samples of one flow ``(comm, collective, version,
incarnation, kind, src, dst)`` over a *window* of collectives into one :class:`AggRecord`: bytes and busy
totals, the count, the seq range and quantiles (p10, median, p90) of the per-collective throughput.
:class:`WindowAggregator` does the folding; :func:`validate_records` reads both formats (``/1`` samples
stay valid); :meth:`AggRecord.window_sample` is what the controller folds into its estimator: one sample at
the window's median rate standing for ``count`` collectives.

Windows sit on a seq grid: window *k* holds seqs ``k·W … k·W + W − 1`` (``W`` = ``window``), so the ranks
of one job, which number their collectives alike, close the same windows. A rank's window closes early when
``max_window_s`` passed since its first collective, when its stream (comm, collective, incarnation) runs
another version, and on :meth:`WindowAggregator.flush`. A window can straddle a change of the fabric: the
controller recognises it by its flows' p10–p90 spread (:func:`straddles_change`).

Examples
--------
>>> from runtime.formats.telemetry import Sample
>>> agg = WindowAggregator(window=4)
>>> def s(seq, busy):
...     return Sample(seq / 100, "dp0", seq, 3, "pair", 0, 1, 1000, busy, "allgather", "executor")
>>> [agg.add([s(q, b)]) for q, b in [(0, 1e-3), (1, 2e-3), (2, 4e-3)]]
[[], [], []]
>>> (rec,) = agg.add([s(3, 1e-3)])      # seq 3 ends window 0..3
>>> rec.count, rec.bytes, rec.seq_first, rec.seq_last, rec.rate_p50_Bps
(4, 4000, 0, 3, 750000.0)
>>> parse_record(rec.to_json()) == rec
True
>>> rec.window_sample().busy_s == 1000 / 750000.0 and rec.window_sample().count == 4
True
"""

from __future__ import annotations

import bisect
import json
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from runtime.errors import TelemetryError
from runtime.formats.telemetry import (
    _MAX_INT,
    ORIGINS,
    PHASES,
    IngestReport,
    Sample,
    _check_ranks,
    _fail,
    _float,
    _int,
    _name,
    _parsed,
    parse_sample,
)

__all__ = ["AGG_FORMAT", "AggRecord", "WindowAggregator", "WindowSample", "parse_record", "quantile", "sample_count",
           "straddles_change", "validate_records", "window_measurements"]

AGG_FORMAT = "loopcoll.telemetry/2"
#: The sample kinds an aggregate folds (the others pass through as ``/1`` samples).
AGG_FLOWS = ("pair", "inject")
#: A window flow whose p90/p10 rate ratio exceeds this stepped inside the window (timing noise of 10 % with a
#: 3x outlier stays under 1.7) ...
STEP_SPREAD = 2.0
#: ... and a window group in which at least this fraction of flows stepped straddles a change.
STEP_FRACTION = 0.25


_REQUIRED = ("format", "kind", "flow", "t_s", "t_first_s", "comm", "collective", "version", "src", "seq_first",
             "seq_last", "count", "bytes", "busy_s", "rate_p10_Bps", "rate_p50_Bps", "rate_p90_Bps", "origin")


@dataclass(frozen=True, slots=True)
class AggRecord:
    """One flow's samples over a window of collectives (rates in bytes/s, per collective)."""

    t_s: float
    t_first_s: float
    comm: str
    collective: str
    version: int
    flow: str
    src: int
    dst: int | None
    seq_first: int
    seq_last: int
    count: int
    bytes: int
    busy_s: float
    rate_p10_Bps: float  # noqa: N815
    rate_p50_Bps: float  # noqa: N815
    rate_p90_Bps: float  # noqa: N815
    origin: str
    incarnation: str | None = None
    #: The AllReduce phase the window's samples measured (their ``extra.phase``), or None (the whole collective).
    phase: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON object (``incarnation`` only when set)."""
        d: dict[str, Any] = {
            "format": AGG_FORMAT, "kind": "agg", "flow": self.flow, "t_s": self.t_s, "t_first_s": self.t_first_s,
            "comm": self.comm, "collective": self.collective, "version": self.version, "src": self.src,
            "dst": self.dst, "seq_first": self.seq_first, "seq_last": self.seq_last, "count": self.count,
            "bytes": self.bytes, "busy_s": self.busy_s, "rate_p10_Bps": self.rate_p10_Bps,
            "rate_p50_Bps": self.rate_p50_Bps, "rate_p90_Bps": self.rate_p90_Bps, "origin": self.origin,
        }
        if self.incarnation is not None:
            d["incarnation"] = self.incarnation
        if self.phase is not None:
            d["phase"] = self.phase
        return d

    def to_json(self) -> str:
        """One compact JSON line (keys sorted)."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    def window_sample(self) -> WindowSample:
        """The window as one ``/1``-shaped sample for the estimator: the mean bytes of a collective at the
        median rate, ``seq`` = ``seq_last``, ``count`` = the collectives it stands for."""
        per = self.bytes / self.count
        busy = per / self.rate_p50_Bps if per > 0 and self.rate_p50_Bps > 0 else self.busy_s / self.count
        return WindowSample(self.t_s, self.comm, self.seq_last, self.version, self.flow, self.src, self.dst,
                            int(round(per)), max(busy, 1e-12), self.collective, self.origin,
                            MappingProxyType({} if self.phase is None else {"phase": self.phase}),
                            self.incarnation, count=self.count, seq_first=self.seq_first,
                            spread=self.rate_p90_Bps / self.rate_p10_Bps if self.rate_p10_Bps > 0 else math.inf,
                            low_busy_s=per / self.rate_p10_Bps if per > 0 and self.rate_p10_Bps > 0 else busy)


@dataclass(frozen=True, slots=True)
class WindowSample(Sample):
    """A :class:`Sample` made from an :class:`AggRecord` (:meth:`AggRecord.window_sample`): it stands for
    ``count`` collectives ``seq_first … seq``, at their median rate."""

    count: int = 1
    seq_first: int | None = None
    #: ``rate_p90_Bps / rate_p10_Bps`` of the window (1.0 for a steady flow without noise).
    spread: float = 1.0
    #: The busy time of the mean bytes at the window's p10 rate (its slow regime when it straddles a change).
    low_busy_s: float | None = None


def window_measurements(samples: Sequence[Sample]) -> tuple[list[tuple[str, int, int | None, float, float]], int]:
    """One collective group's estimator measurements ``(kind, src, dst, bytes, busy_s)`` and the collectives
    they stand for (docs/telemetry.md §5): per-collective samples as they are (count 1); aggregated windows at
    their median rates, counted as their smallest count; a group that :func:`straddles_change` takes its
    stepped flows at their p10 rate (the slow regime) and counts half, the other flows at the median.

    >>> w = [WindowSample(0.0, "c", 7, 1, "pair", 0, 1, 8, 1.0, "allgather", "executor", count=8, spread=s,
    ...                   low_busy_s=4.0) for s in (1.1, 6.0)]
    >>> window_measurements(w)
    ([('pair', 0, 1, 8.0, 1.0), ('pair', 0, 1, 8.0, 4.0)], 4)
    """
    counts = [sample_count(s) for s in samples]
    if not straddles_change(samples):
        return [(s.kind, s.src, s.dst, float(s.bytes), s.busy_s) for s in samples], min(counts, default=1)
    meas = []
    for s in samples:
        busy = s.busy_s
        if isinstance(s, WindowSample) and s.spread > STEP_SPREAD and s.low_busy_s is not None:
            busy = s.low_busy_s  # a flow that stepped: its slow regime
        meas.append((s.kind, s.src, s.dst, float(s.bytes), busy))
    return meas, max(1, min(counts) // 2)


def straddles_change(samples: Iterable[Sample]) -> bool:
    """Whether one collective group of window samples straddles a change of the fabric: at least
    :data:`STEP_FRACTION` of its flows have a p90/p10 spread over :data:`STEP_SPREAD`. Per-flow medians of
    such a window mix two regimes differently per flow (:func:`window_measurements` takes them at p10).

    >>> from runtime.formats.telemetry import Sample
    >>> w = [WindowSample(0.0, "c", 7, 1, "pair", 0, 1, 8, 1.0, "allgather", "executor", count=8, spread=s)
    ...      for s in (1.1, 1.2, 6.0)]
    >>> straddles_change(w), straddles_change(w[:2])
    (True, False)
    """
    flows = [s for s in samples if isinstance(s, WindowSample)]
    stepped = sum(s.spread > STEP_SPREAD for s in flows)
    return bool(flows) and stepped >= STEP_FRACTION * len(flows)


def sample_count(s: Sample) -> int:
    """The collectives a sample stands for: a window's count, else 1.

    >>> from runtime.formats.telemetry import Sample
    >>> sample_count(Sample(0.0, "c", 1, 1, "pair", 0, 1, 8, 1.0, "allgather", "probe", {"count": 9}))
    1
    """
    return s.count if isinstance(s, WindowSample) else 1


def quantile(xs: list[float], q: float) -> float:
    """The ``q`` quantile of sorted ``xs`` by linear interpolation (numpy's default method).

    >>> quantile([1.0, 2.0, 3.0, 4.0], 0.5), quantile([5.0], 0.9), quantile([0.0, 10.0], 0.1)
    (2.5, 5.0, 1.0)
    """
    h = (len(xs) - 1) * q
    lo = math.floor(h)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (h - lo) * (xs[hi] - xs[lo])


def parse_record(obj: Mapping[str, Any] | str | bytes, *, comms: Mapping[str, Iterable[int]] | None = None,
                 nranks: int | None = None) -> AggRecord | Sample:
    """Validate one telemetry object of either format: a ``/1`` sample (:func:`parse_sample`) or a ``/2``
    aggregate. Raises :class:`TelemetryError` with a reason code (those of ``/1`` plus ``seq_range``,
    ``count`` and ``quantiles``).

    >>> parse_record({"format": AGG_FORMAT, "kind": "agg"})
    Traceback (most recent call last):
    ...
    runtime.errors.TelemetryError: aggregate: missing field 'flow'
    """
    obj = _parsed(obj)
    if not isinstance(obj, Mapping) or obj.get("format") != AGG_FORMAT:
        return parse_sample(obj, comms=comms, nranks=nranks)
    return _parse_agg(obj, comms, nranks)


def _parse_agg(obj: Mapping[str, Any], comms: Mapping[str, Iterable[int]] | None, nranks: int | None) -> AggRecord:
    for key in _REQUIRED:
        if key not in obj:
            raise _fail("missing_field", f"aggregate: missing field {key!r}")
    if obj["kind"] != "agg":
        raise _fail("unknown_kind", f"aggregate: kind must be 'agg', got {str(obj['kind'])[:40]!r}")
    flow = obj["flow"]
    if flow not in AGG_FLOWS:
        raise _fail("unknown_kind", f"aggregate: flow must be pair or inject, got {str(flow)[:40]!r}")
    if obj["origin"] not in ORIGINS:
        raise _fail("unknown_origin", f"aggregate: origin must be one of {', '.join(ORIGINS)}")
    ints = _ints(obj, ("version", "src", "seq_first", "seq_last", "count", "bytes"))
    dst = obj["dst"] if type(obj["dst"]) is int and abs(obj["dst"]) <= _MAX_INT else _int(obj, "dst", nullable=True)
    nums = _floats(obj, ("t_s", "t_first_s", "busy_s", "rate_p10_Bps", "rate_p50_Bps", "rate_p90_Bps"))
    comm, collective = _name(obj, "comm"), _name(obj, "collective")
    incarnation = _name(obj, "incarnation", nullable=True)
    assert comm is not None and collective is not None
    phase = obj.get("phase")
    if phase is not None and (collective != "allreduce" or phase not in PHASES):
        raise _fail("type", f"aggregate: phase must be one of {', '.join(PHASES)} on an allreduce aggregate, got "
                    f"{str(phase)[:40]!r} on {collective!r}")
    count, nbytes = ints["count"], ints["bytes"]
    seq_first, seq_last = ints["seq_first"], ints["seq_last"]
    assert count is not None and nbytes is not None and seq_first is not None and seq_last is not None
    if nbytes < 0:
        raise _fail("negative_bytes", f"aggregate: bytes must be >= 0, got {nbytes}")
    if nums["busy_s"] <= 0:
        raise _fail("nonpositive_busy", f"aggregate: busy_s must be > 0, got {nums['busy_s']!r}")
    if count < 1:
        raise _fail("count", f"aggregate: count must be >= 1, got {count}")
    if seq_last < seq_first or nums["t_s"] < nums["t_first_s"]:
        raise _fail("seq_range", f"aggregate: seq {seq_first}..{seq_last} (or t_first_s..t_s) runs backwards")
    if not 0.0 <= nums["rate_p10_Bps"] <= nums["rate_p50_Bps"] <= nums["rate_p90_Bps"]:
        raise _fail("quantiles", "aggregate: need 0 <= rate_p10_Bps <= rate_p50_Bps <= rate_p90_Bps")
    if flow == "pair" and (dst is None or dst == ints["src"]):
        raise _fail("dst", "aggregate: a pair aggregate needs dst != src")
    src = ints["src"]
    assert src is not None and ints["version"] is not None
    _check_ranks(comm, src, dst if flow == "pair" else None, comms, nranks)
    return AggRecord(nums["t_s"], nums["t_first_s"], comm, collective, ints["version"], flow, src,
                     dst if flow == "pair" else None, seq_first, seq_last, count, nbytes, nums["busy_s"],
                     nums["rate_p10_Bps"], nums["rate_p50_Bps"], nums["rate_p90_Bps"], obj["origin"], incarnation, phase)


def _ints(obj: Mapping[str, Any], keys: tuple[str, ...]) -> dict[str, int]:
    """Integer fields (the common case checked inline; anything else through ``_int`` for its reason)."""
    out = {}
    for k in keys:
        v = obj[k]
        if type(v) is not int or abs(v) > _MAX_INT:
            v = _int(obj, k, nullable=False)
        out[k] = v
    return out


def _floats(obj: Mapping[str, Any], keys: tuple[str, ...]) -> dict[str, float]:
    """Finite number fields (floats checked inline; anything else through ``_float`` for its reason)."""
    out = {}
    for k in keys:
        v = obj[k]
        out[k] = v if type(v) is float and math.isfinite(v) else _float(obj, k)
    return out


def validate_records(objs: Iterable[Mapping[str, Any] | str | bytes | Sample | AggRecord], *,
                     comms: Mapping[str, Iterable[int]] | None = None,
                     nranks: int | None = None) -> tuple[list[Sample | AggRecord], IngestReport]:
    """Validate ``/1`` samples and ``/2`` aggregates alike; bad ones are counted by reason, never raised.

    >>> ok, rep = validate_records([{"format": AGG_FORMAT}, {"format": "loopcoll.telemetry/1"}])
    >>> ok, dict(rep.rejected)
    ([], {'missing_field': 2})
    """
    ok: list[Sample | AggRecord] = []
    rejected: Counter[str] = Counter()
    first: str | None = None
    comm_sets = None if comms is None else {k: frozenset(v) for k, v in comms.items()}
    for i, obj in enumerate(objs):
        try:
            doc = obj.to_dict() if isinstance(obj, (Sample, AggRecord)) else obj
            ok.append(parse_record(doc, comms=comm_sets, nranks=nranks))
        except TelemetryError as exc:
            rejected[exc.reason] += 1
            first = first or f"sample {i}: {exc}"
    return ok, IngestReport(len(ok), MappingProxyType(dict(sorted(rejected.items()))), first)


_Stream = tuple[str, str, str | None, str, int]  # comm, collective, incarnation, origin, src
_Flow = tuple[str, int, int | None, str | None]  # kind, src, dst, AllReduce phase


@dataclass(slots=True)
class _Window:
    """The open window of one stream: its version, grid cell, first time and per-flow folds."""

    version: int
    cell: int
    t_first_s: float
    t_last_s: float = -math.inf
    seqs: set[int] = field(default_factory=set)
    flows: dict[_Flow, list[Any]] = field(default_factory=dict)  # [bytes, busy_s, sorted rates]


class WindowAggregator:
    """Folds samples into :class:`AggRecord` windows (not thread-safe; one per executor).

    ``window`` collectives per window (1: every sample passes through unchanged, today's ``/1`` stream);
    ``max_window_s``: a window closes once its last collective ended this long after its first.
    """

    def __init__(self, window: int = 8, max_window_s: float = 1.0) -> None:
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise TelemetryError(f"aggregation window must be an integer >= 1, got {window!r}", reason="config")
        if not (isinstance(max_window_s, (int, float)) and max_window_s > 0 and math.isfinite(max_window_s)):
            raise TelemetryError(f"max_window_s must be a number > 0, got {max_window_s!r}", reason="config")
        self.window = window
        self.max_window_s = float(max_window_s)
        self._open: dict[_Stream, _Window] = {}
        #: Samples folded, records emitted.
        self.folded = 0
        self.emitted = 0

    def add(self, samples: Iterable[Sample]) -> list[Sample | AggRecord]:
        """Fold one batch (typically one collective's samples); returns what is ready to send: windows closed
        now and the samples that are not aggregated (other kinds, no seq or version, ``window`` 1)."""
        out: list[Sample | AggRecord] = []
        batch: dict[_Stream, list[Sample]] = {}
        for s in samples:
            if (self.window == 1 or s.kind not in AGG_FLOWS or s.seq is None or s.version is None
                    or s.collective is None):
                out.append(s)
                continue
            batch.setdefault((s.comm, s.collective, s.incarnation, s.origin, s.src), []).append(s)
        for key, group in batch.items():
            win = self._open.get(key)
            for s in group:
                assert s.seq is not None and s.version is not None
                cell = s.seq // self.window
                if win is not None and (win.version != s.version or win.cell != cell):
                    out += self._close(key)
                    win = None
                if win is None:
                    win = self._open[key] = _Window(s.version, cell, s.t_s)
                self._fold(win, s)
            assert win is not None
            full = len(win.seqs) >= self.window or max(win.seqs) % self.window == self.window - 1
            if full or win.t_last_s - win.t_first_s >= self.max_window_s:
                out += self._close(key)
        return out

    @property
    def open_windows(self) -> int:
        """Windows holding samples not sent yet."""
        return len(self._open)

    def flush(self) -> list[AggRecord]:
        """Close every open window (an executor's close)."""
        out: list[AggRecord] = []
        for key in sorted(self._open, key=repr):
            out += self._close(key)
        return out

    def _fold(self, win: _Window, s: Sample) -> None:
        assert s.seq is not None
        flow = (s.kind, s.src, s.dst, s.phase)
        acc = win.flows.get(flow)
        if acc is None:
            acc = win.flows[flow] = [0, 0.0, []]
        acc[0] += s.bytes
        acc[1] += s.busy_s
        bisect.insort(acc[2], s.bytes / s.busy_s)  # kept sorted: at most ``window`` entries
        win.seqs.add(s.seq)
        win.t_last_s = max(win.t_last_s, s.t_s)
        win.t_first_s = min(win.t_first_s, s.t_s)
        self.folded += 1

    def _close(self, key: _Stream) -> list[AggRecord]:
        win = self._open.pop(key)
        comm, collective, incarnation, origin, _src = key
        out = []
        lo, hi = min(win.seqs), max(win.seqs)
        for (kind, src, dst, phase), (nbytes, busy, rates) in sorted(win.flows.items(), key=repr):
            out.append(AggRecord(win.t_last_s, win.t_first_s, comm, collective, win.version, kind, src, dst, lo, hi,
                                 len(rates),
                                 nbytes, busy, quantile(rates, 0.1), quantile(rates, 0.5), quantile(rates, 0.9),
                                 origin, incarnation, phase))
        self.emitted += len(out)
        return out


"""Columnar aggregate batches, ``loopcoll.telemetry/2`` kind ``aggcols`` (docs/telemetry.md §6).

One :class:`AggBatch` carries many :class:`~runtime.formats.aggregate.AggRecord` of one stream
``(comm, collective, version, incarnation, origin, phase)`` as aligned numpy columns, so that a window of an
executor (or a host relay's merged window) is one JSON object whose columns are base64 strings of
little-endian int64/float64 arrays: decoding and validation are a few numpy operations per batch, not
Python work per record (a column every row shares is one JSON number). :func:`batches_from_records` writes batches, :meth:`AggBatch.records` reads them
back (the same records), :func:`parse_batch` validates one (strict: the first bad field fails the whole
batch, with a :class:`~runtime.errors.TelemetryError` naming the column and row), :func:`merge_batches`
joins batches of one stream (what a relay does).

Examples
--------
>>> from runtime.formats.aggregate import AggRecord
>>> recs = [AggRecord(1.0, 0.3, "w", "alltoall", 2, "pair", 0, d, 0, 7, 8, 8000, 0.008, 9e5, 1e6, 1.1e6,
...                   "executor") for d in (1, 2)]
>>> (batch,) = batches_from_records(recs)
>>> len(batch), batch.to_dict()["kind"], sorted(batch.to_dict()["columns"])[:3]
(2, 'aggcols', ['busy_s', 'bytes', 'count'])
>>> parse_batch(batch.to_dict(), comms={"w": [0, 1, 2]}).records() == recs
True
>>> parse_batch({**batch.to_dict(), "columns": {**batch.to_dict()["columns"], "busy_s": [0.008, -1.0]}})
Traceback (most recent call last):
...
runtime.errors.TelemetryError: aggcols: column 'busy_s' must be > 0 (row 1: -1.0)
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from collections import Counter
from types import MappingProxyType

from runtime.errors import TelemetryError
from runtime.formats.aggregate import AGG_FORMAT, AggRecord, validate_records
from runtime.formats.telemetry import COLLECTIVE_NAMES, ORIGINS, PHASES, IngestReport, Sample, _fail, _name, _parsed

__all__ = ["BATCH_KIND", "FLOAT_COLUMNS", "INT32_COLUMNS", "INT_COLUMNS", "MAX_BATCH_ROWS", "AggBatch", "batches_from_columns",
           "batches_from_records", "check_batch", "is_batch", "merge_batches", "parse_batch", "validate_telemetry"]

BATCH_KIND = "aggcols"
#: Integer columns (held as int64; on the wire int32 for :data:`INT32_COLUMNS`, else int64, little-endian);
#: ``dst`` is -1 for an ``inject`` row.
INT_COLUMNS = ("src", "dst", "seq_first", "seq_last", "count", "bytes")
#: Number columns (float64, little-endian).
FLOAT_COLUMNS = ("t_s", "t_first_s", "busy_s", "rate_p10_Bps", "rate_p50_Bps", "rate_p90_Bps")
#: The integer columns sent as int32 on the wire (ranks and counts fit); the others as int64.
INT32_COLUMNS = ("src", "dst", "count")
_I32 = 1 << 31
#: Rows per batch at most: 4096 rows of 12 base64 columns are ~0.5 MiB, under the wire's 1 MiB message.
MAX_BATCH_ROWS = 4096
_HEADER = ("format", "kind", "comm", "collective", "version", "origin", "n", "columns")
_MAX_INT = (1 << 63) - 1

_StreamKey = tuple[str, str, int, str | None, str, str | None]


@dataclass(frozen=True, eq=False)
class AggBatch:
    """Aggregates of one stream as read-only columns (aligned by row; see :data:`INT_COLUMNS`,
    :data:`FLOAT_COLUMNS`). Build with :func:`batches_from_records` or :func:`parse_batch`."""

    comm: str
    collective: str
    version: int
    origin: str
    incarnation: str | None
    phase: str | None
    cols: Mapping[str, np.ndarray]

    def __len__(self) -> int:
        return int(self.cols["src"].size)

    @property
    def key(self) -> _StreamKey:
        """``(comm, collective, version, incarnation, origin, phase)``: batches of one key merge."""
        return (self.comm, self.collective, self.version, self.incarnation, self.origin, self.phase)

    def to_dict(self) -> dict[str, Any]:
        """The wire/JSONL object (columns base64 of little-endian arrays; ``incarnation``, ``phase`` when set)."""
        d: dict[str, Any] = {"format": AGG_FORMAT, "kind": BATCH_KIND, "comm": self.comm,
                             "collective": self.collective, "version": self.version, "origin": self.origin,
                             "n": len(self), "columns": {k: _encode(k, self.cols[k]) for k in INT_COLUMNS + FLOAT_COLUMNS}}
        if self.incarnation is not None:
            d["incarnation"] = self.incarnation
        if self.phase is not None:
            d["phase"] = self.phase
        return d

    def to_json(self) -> str:
        """One compact JSON line (keys sorted): a JSONL line of a telemetry file."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    def records(self) -> list[AggRecord]:
        """The batch as :class:`AggRecord` (row order); the inverse of :func:`batches_from_records`."""
        c = {k: v.tolist() for k, v in self.cols.items()}
        return [AggRecord(c["t_s"][i], c["t_first_s"][i], self.comm, self.collective, self.version,
                          "inject" if c["dst"][i] < 0 else "pair", c["src"][i], None if c["dst"][i] < 0 else c["dst"][i],
                          c["seq_first"][i], c["seq_last"][i], c["count"][i], c["bytes"][i], c["busy_s"][i],
                          c["rate_p10_Bps"][i], c["rate_p50_Bps"][i], c["rate_p90_Bps"][i], self.origin,
                          self.incarnation, self.phase) for i in range(len(self))]


def _wire_dtype(name: str) -> np.dtype[Any]:
    return np.dtype("<i4" if name in INT32_COLUMNS else "<i8" if name in INT_COLUMNS else "<f8")


def _encode(name: str, a: np.ndarray) -> Any:
    """A column on the wire: one JSON number when every row holds it (and it is finite), else base64."""
    if a.size and bool((a == a[0]).all()) and (name in INT_COLUMNS or np.isfinite(a[0])):
        return a[0].item()
    return base64.b64encode(np.ascontiguousarray(a, dtype=_wire_dtype(name)).tobytes()).decode("ascii")


def _frozen(cols: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    out = {}
    for k, v in cols.items():
        v = np.array(v, dtype=np.int64 if k in INT_COLUMNS else np.float64)  # a private copy
        v.setflags(write=False)
        out[k] = v
    return out


def _split(key: _StreamKey, cols: Mapping[str, np.ndarray]) -> list[AggBatch]:
    comm, collective, version, incarnation, origin, phase = key
    n = int(cols["src"].size)
    for name in INT32_COLUMNS:
        if n and not -_I32 <= int(cols[name].min()) <= int(cols[name].max()) < _I32:
            raise TelemetryError(f"aggcols: column {name!r} does not fit int32", reason="range")
    return [AggBatch(comm, collective, version, origin, incarnation, phase,
                     _frozen({k: v[i:i + MAX_BATCH_ROWS] for k, v in cols.items()}))
            for i in range(0, max(n, 1), MAX_BATCH_ROWS)] if n else []


def batches_from_records(records: Iterable[AggRecord]) -> list[AggBatch]:
    """The columnar writer: ``records`` as batches, one per stream (in first-seen order, rows in input order),
    split at :data:`MAX_BATCH_ROWS`.

    >>> batches_from_records([])
    []
    """
    groups: dict[_StreamKey, list[AggRecord]] = {}
    for r in records:
        groups.setdefault((r.comm, r.collective, r.version, r.incarnation, r.origin, r.phase), []).append(r)
    out: list[AggBatch] = []
    for key, rs in groups.items():
        cols = {k: np.array([getattr(r, k) for r in rs], dtype=np.float64) for k in FLOAT_COLUMNS}
        cols.update({k: np.array([getattr(r, k) for r in rs], dtype=np.int64) for k in INT_COLUMNS if k != "dst"})
        cols["dst"] = np.array([-1 if r.dst is None else r.dst for r in rs], dtype=np.int64)
        out += _split(key, cols)
    return out


def batches_from_columns(comm: str, collective: str, version: int, cols: Mapping[str, Any], *, origin: str,
                         incarnation: str | None = None, phase: str | None = None) -> list[AggBatch]:
    """The columnar writer for rows already in arrays (every column of :data:`INT_COLUMNS` and
    :data:`FLOAT_COLUMNS`, aligned; ``dst`` -1 for inject rows), split at :data:`MAX_BATCH_ROWS`. The
    columns are copied; validity is checked by the reader (:func:`parse_batch`).

    >>> cols = {k: [0] for k in INT_COLUMNS} | {k: [1.0] for k in FLOAT_COLUMNS} | {"dst": [1], "count": [1]}
    >>> (b,) = batches_from_columns("w", "allgather", 1, cols, origin="executor")
    >>> b.records()[0].flow, len(b)
    ('pair', 1)
    """
    missing = sorted(set(INT_COLUMNS + FLOAT_COLUMNS) - set(cols))
    if missing:
        raise TelemetryError(f"aggcols: missing column {missing[0]!r}", reason="missing_field")
    arrays = {k: np.asarray(cols[k], dtype=np.int64 if k in INT_COLUMNS else np.float64).ravel()
              for k in INT_COLUMNS + FLOAT_COLUMNS}
    n = arrays["src"].size
    if any(a.size != n for a in arrays.values()):
        raise TelemetryError("aggcols: columns of different lengths", reason="length")
    return _split((comm, collective, version, incarnation, origin, phase), arrays)


def merge_batches(batches: Sequence[AggBatch]) -> list[AggBatch]:
    """Batches of equal :attr:`~AggBatch.key` joined (rows concatenated in order), split at
    :data:`MAX_BATCH_ROWS`; what a host relay forwards.

    >>> from runtime.formats.aggregate import AggRecord
    >>> r = AggRecord(1.0, 0.3, "w", "allgather", 1, "inject", 3, None, 0, 7, 8, 80, 0.1, 9.0, 10.0, 11.0, "executor")
    >>> [len(b) for b in merge_batches(batches_from_records([r]) * 3)]
    [3]
    """
    groups: dict[_StreamKey, list[AggBatch]] = {}
    for b in batches:
        groups.setdefault(b.key, []).append(b)
    out: list[AggBatch] = []
    for key, bs in groups.items():
        out += _split(key, {k: np.concatenate([b.cols[k] for b in bs]) for k in INT_COLUMNS + FLOAT_COLUMNS})
    return out


def _column(raw: Any, name: str, n: int) -> np.ndarray:
    """One column decoded: a base64 string of ``n`` little-endian values of its wire type, one JSON number (every
    row's value), or a JSON list of ``n`` numbers."""
    is_int = name in INT_COLUMNS
    dtype = _wire_dtype(name)
    if isinstance(raw, str):
        try:
            data = base64.b64decode(raw, validate=True)
        except (binascii.Error, ValueError):
            raise _fail("type", f"aggcols: column {name!r} is not valid base64") from None
        if len(data) != n * dtype.itemsize:
            raise _fail("length", f"aggcols: column {name!r} holds {len(data) / dtype.itemsize:g} values (of "
                        f"{len(data)} bytes, {dtype.name}), n is {n}")
        return np.frombuffer(data, dtype=dtype).astype(np.int64 if is_int else np.float64)
    if type(raw) is int or (type(raw) is float and not is_int):
        if is_int and not -_MAX_INT <= raw <= _MAX_INT:
            raise _fail("type", f"aggcols: column {name!r} holds an integer out of the int64 range")
        return np.full(n, raw, dtype=np.int64 if is_int else np.float64)
    if not isinstance(raw, list):
        raise _fail("type", f"aggcols: column {name!r} must be a base64 string, a number or a list of "
                    f"{'integers' if is_int else 'numbers'}")
    if len(raw) != n:
        raise _fail("length", f"aggcols: column {name!r} holds {len(raw)} values, n is {n}")
    types = (int,) if is_int else (int, float)
    if not all(type(x) in types for x in raw):  # the list form is the readable one: checked per value
        want = "integers" if is_int else "numbers"
        raise _fail("type", f"aggcols: column {name!r} must hold {want}")
    try:
        arr = np.array(raw, dtype=np.int64 if is_int else np.float64)
    except OverflowError:
        raise _fail("type", f"aggcols: column {name!r} holds an integer out of the int64 range") from None
    return arr.astype(np.int64 if is_int else np.float64)


def _bad(name: str, rule: str, mask: np.ndarray, col: np.ndarray, reason: str) -> None:
    """Raise naming the first row where ``mask`` holds."""
    if mask.any():
        i = int(np.argmax(mask))
        raise _fail(reason, f"aggcols: column {name!r} must be {rule} (row {i}: {col[i].item()!r})")


def _header(obj: Mapping[str, Any]) -> tuple[str, str, int, str, str | None, str | None, int]:
    for key in _HEADER:
        if key not in obj:
            raise _fail("missing_field", f"aggcols: missing field {key!r}")
    if obj["kind"] != BATCH_KIND:
        raise _fail("unknown_kind", f"aggcols: kind must be {BATCH_KIND!r}, got {str(obj['kind'])[:40]!r}")
    comm, collective = _name(obj, "comm"), _name(obj, "collective")
    assert comm is not None and collective is not None
    if collective not in COLLECTIVE_NAMES:
        raise _fail("type", f"aggcols: unknown collective {collective[:40]!r}")
    if obj["origin"] not in ORIGINS:
        raise _fail("unknown_origin", f"aggcols: origin must be one of {', '.join(ORIGINS)}")
    for key in ("version", "n"):
        v = obj[key]
        if type(v) is not int or not 0 <= v <= _MAX_INT:
            raise _fail("type", f"aggcols: {key} must be an integer >= 0, got {str(v)[:40]}")
    if obj["n"] > MAX_BATCH_ROWS:
        raise _fail("length", f"aggcols: n must be at most {MAX_BATCH_ROWS}, got {obj['n']}")
    phase = obj.get("phase")
    if phase is not None and (collective != "allreduce" or phase not in PHASES):
        raise _fail("type", f"aggcols: phase must be one of {', '.join(PHASES)} on an allreduce batch, got "
                    f"{str(phase)[:40]!r} on {collective!r}")
    return comm, collective, obj["version"], obj["origin"], _name(obj, "incarnation", nullable=True), phase, obj["n"]


def parse_batch(obj: Mapping[str, Any], *, comms: Mapping[str, Iterable[int]] | None = None,
                nranks: int | None = None) -> AggBatch:
    """Validate one ``aggcols`` object (vectorised) and return it as an :class:`AggBatch`.

    The rules are those of one ``agg`` record (docs/telemetry.md §5) applied to every row, plus ``length``
    (a column's length is not ``n``, or ``n`` over :data:`MAX_BATCH_ROWS`). The first violation raises
    :class:`TelemetryError` naming the field (and row): the batch is rejected whole.
    """
    comm, collective, version, origin, incarnation, phase, n = _header(obj)
    raw = obj["columns"]
    if not isinstance(raw, Mapping):
        raise _fail("type", "aggcols: columns must be an object of columns")
    unknown = sorted(set(raw) - set(INT_COLUMNS + FLOAT_COLUMNS))
    if unknown:
        raise _fail("type", f"aggcols: unknown column {str(unknown[0])[:40]!r}")
    cols: dict[str, np.ndarray] = {}
    for name in INT_COLUMNS + FLOAT_COLUMNS:
        if name not in raw:
            raise _fail("missing_field", f"aggcols: missing column {name!r}")
        cols[name] = _column(raw[name], name, n)
    return _checked((comm, collective, version, origin, incarnation, phase, n), cols, comms, nranks)


def check_batch(batch: AggBatch, *, comms: Mapping[str, Iterable[int]] | None = None,
                nranks: int | None = None) -> AggBatch:
    """Validate an :class:`AggBatch` built in this process by :func:`parse_batch`'s rules, from its arrays
    (no base64 round trip; a column that would not fit its wire type is rejected as on the wire).

    >>> from runtime.formats.aggregate import AggRecord
    >>> r = AggRecord(1.0, 0.3, "w", "allgather", 1, "inject", 3, None, 0, 7, 8, 80, 0.1, 9.0, 10.0, 11.0, "executor")
    >>> (b,) = batches_from_records([r])
    >>> len(check_batch(b, comms={"w": range(4)}))
    1
    """
    head = {"format": AGG_FORMAT, "kind": BATCH_KIND, "comm": batch.comm, "collective": batch.collective,
            "version": batch.version, "origin": batch.origin, "n": len(batch), "columns": None,
            "incarnation": batch.incarnation, "phase": batch.phase}
    comm, collective, version, origin, incarnation, phase, n = _header(head)
    cols: dict[str, np.ndarray] = {}
    for name in INT_COLUMNS + FLOAT_COLUMNS:
        if name not in batch.cols:
            raise _fail("missing_field", f"aggcols: missing column {name!r}")
        col = np.asarray(batch.cols[name])
        if col.shape != (n,):
            raise _fail("length", f"aggcols: column {name!r} holds {col.size} values, n is {n}")
        if name in INT_COLUMNS and col.dtype != np.int64:
            if col.dtype.kind not in "iu":
                raise _fail("type", f"aggcols: column {name!r} must hold integers")
            col = col.astype(np.int64)
        elif name not in INT_COLUMNS and col.dtype != np.float64:
            col = col.astype(np.float64)
        if name in INT32_COLUMNS and n and not -_I32 <= int(col.min()) <= int(col.max()) < _I32:
            raise _fail("range", f"aggcols: column {name!r} does not fit int32")
        cols[name] = col if not col.flags.writeable and col is batch.cols[name] else np.array(col)  # read-only
    return _checked((comm, collective, version, origin, incarnation, phase, n), cols, comms, nranks)


def _checked(head: tuple[str, str, int, str, str | None, str | None, int], cols: dict[str, np.ndarray],
             comms: Mapping[str, Iterable[int]] | None, nranks: int | None) -> AggBatch:
    """The row rules over decoded columns (fresh or read-only arrays); the batch, its arrays frozen."""
    comm, collective, version, origin, incarnation, phase, n = head
    src, dst = cols["src"], cols["dst"]
    p10, p50, p90 = cols["rate_p10_Bps"], cols["rate_p50_Bps"], cols["rate_p90_Bps"]
    checks = [(name, "finite", ~np.isfinite(cols[name]), cols[name], "range") for name in FLOAT_COLUMNS] + [
        ("bytes", ">= 0", cols["bytes"] < 0, cols["bytes"], "negative_bytes"),
        ("busy_s", "> 0", cols["busy_s"] <= 0, cols["busy_s"], "nonpositive_busy"),
        ("count", ">= 1", cols["count"] < 1, cols["count"], "count"),
        ("seq_last", ">= seq_first", cols["seq_last"] < cols["seq_first"], cols["seq_last"], "seq_range"),
        ("t_s", ">= t_first_s", cols["t_s"] < cols["t_first_s"], cols["t_s"], "seq_range"),
        ("rate_p10_Bps", ">= 0", p10 < 0, p10, "quantiles"),
        ("rate_p50_Bps", ">= rate_p10_Bps", p50 < p10, p50, "quantiles"),
        ("rate_p90_Bps", ">= rate_p50_Bps", p90 < p50, p90, "quantiles"),
        ("dst", ">= -1 (-1: an inject row)", dst < -1, dst, "dst"),
        ("dst", "!= src", dst == src, dst, "dst"),
    ]
    if n and np.logical_or.reduce([c[2] for c in checks]).any():  # one test; on failure the first rule, in order
        for check in checks:
            _bad(*check)
    _check_members(comm, src, dst, comms, nranks)
    for v in cols.values():  # fresh arrays (decoded, filled or converted): frozen without a copy
        v.setflags(write=False)
    return AggBatch(comm, collective, version, origin, incarnation, phase, cols)


def _check_members(comm: str, src: np.ndarray, dst: np.ndarray, comms: Mapping[str, Iterable[int]] | None,
                   nranks: int | None) -> None:
    """``unknown_comm``/``unknown_rank``: every src, and every pair row's dst, is a rank of ``comm`` (and < nranks)."""
    members: np.ndarray | None = None
    if comms is not None:
        if comm not in comms:
            raise _fail("unknown_comm", f"aggcols: unknown communicator {comm[:60]!r}")
        members = _members(comms[comm])
    dense = members is not None and members.size and int(members[-1]) - int(members[0]) == members.size - 1
    for role, ranks in (("src", src), ("dst", dst[dst >= 0])):
        bad = ranks < 0
        if nranks is not None:
            bad |= ranks >= nranks
        if members is not None and dense:  # ranks lo..hi, all of them: a range test
            bad |= (ranks < members[0]) | (ranks > members[-1])
        elif members is not None and members.size:
            at = np.minimum(np.searchsorted(members, ranks), members.size - 1)
            bad |= members[at] != ranks
        elif members is not None:
            bad |= True
        _bad(role, f"a rank of communicator {comm[:60]!r}", bad, ranks, "unknown_rank")


_MEMBERS: dict[frozenset[int], np.ndarray] = {}


def _members(ranks: Iterable[int]) -> np.ndarray:
    """A communicator's ranks as a sorted array (remembered for up to 64 rank sets: the controller's few)."""
    key = ranks if isinstance(ranks, frozenset) else frozenset(ranks)
    arr = _MEMBERS.get(key)
    if arr is None:
        if len(_MEMBERS) >= 64:
            _MEMBERS.clear()
        arr = _MEMBERS[key] = np.array(sorted(key), dtype=np.int64)
    return arr


def is_batch(obj: Any) -> bool:
    """Whether ``obj`` is (the mapping of) a columnar batch (by its ``format`` and ``kind``).

    >>> is_batch({"format": AGG_FORMAT, "kind": "aggcols"}), is_batch({"format": AGG_FORMAT, "kind": "agg"})
    (True, False)
    """
    return isinstance(obj, Mapping) and obj.get("kind") == BATCH_KIND and obj.get("format") == AGG_FORMAT




def validate_telemetry(objs: Iterable[Any], *, comms: Mapping[str, Iterable[int]] | None = None,
                       nranks: int | None = None) -> tuple[list[Sample | AggRecord], list[AggBatch], IngestReport]:
    """Validate a mix of ``/1`` samples, ``/2`` records and ``aggcols`` batches (mappings, JSON text or the
    objects themselves): the records as :func:`~runtime.formats.aggregate.validate_records` does, the batches
    with :func:`parse_batch`. The report counts rows: a batch accepted adds its rows, a batch rejected adds
    its ``n`` (1 when unreadable) under the reason of its first bad field.

    >>> recs, batches, rep = validate_telemetry([{"format": AGG_FORMAT, "kind": "aggcols", "n": 3}])
    >>> recs, batches, dict(rep.rejected), rep.first_error
    ([], [], {'missing_field': 3}, "batch 0: aggcols: missing field 'comm'")
    """
    rest: list[Any] = []
    batches: list[AggBatch] = []
    rejected: Counter[str] = Counter()
    first: str | None = None
    rows = 0
    comm_sets = None if comms is None else {  # frozensets given are kept: their hash is cached (the hot path)
        k: v if isinstance(v, frozenset) else frozenset(v) for k, v in comms.items()}
    for i, obj in enumerate(objs):
        doc = obj
        if isinstance(obj, (str, bytes)):
            try:
                doc = _parsed(obj)
            except TelemetryError:
                rest.append(obj)  # counted (bad_json, too_large) by validate_records
                continue
        if isinstance(doc, AggBatch):  # built in this process: checked from its arrays
            try:
                batches.append(check_batch(doc, comms=comm_sets, nranks=nranks))
            except TelemetryError as exc:
                n = getattr(doc.cols.get("src"), "size", 1)
                rejected[exc.reason] += n if 0 < n <= MAX_BATCH_ROWS else 1
                first = first or f"batch {i}: {exc}"
                continue
            rows += len(doc)
            continue
        if not is_batch(doc):
            rest.append(doc)
            continue
        try:
            batch = parse_batch(doc, comms=comm_sets, nranks=nranks)
        except TelemetryError as exc:
            n = doc.get("n")
            rejected[exc.reason] += n if type(n) is int and 0 < n <= MAX_BATCH_ROWS else 1
            first = first or f"batch {i}: {exc}"
            continue
        batches.append(batch)
        rows += len(batch)
    mine = IngestReport(rows, MappingProxyType(dict(sorted(rejected.items()))), first)
    if not rest:
        return [], batches, mine
    records, report = validate_records(rest, comms=comm_sets, nranks=nranks)
    return records, batches, report.merged(mine)

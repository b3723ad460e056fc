"""Telemetry samples (format ``loopcoll.telemetry/1``): the record, its validation, JSONL I/O and a bounded store.

One sample describes one collective as one rank measured it (``docs/telemetry.md`` gives every field):
``pair`` (bytes ``src`` sent to ``dst``), ``inject`` (bytes ``src`` sent inside its host), ``coll`` (the
whole collective) or ``demand`` (an AllToAllv's split sizes). Bad samples are rejected one by one with a
counted reason; they never stop ingestion.

Examples
--------
>>> s = parse_sample({"format": "loopcoll.telemetry/1", "t_s": 12.5, "comm": "dp0", "seq": 17,
...                   "version": 3, "kind": "pair", "src": 0, "dst": 1, "bytes": 3145728,
...                   "busy_s": 0.001, "collective": "allgather", "origin": "executor"})
>>> round(s.throughput_GBps, 3)
3.146
>>> parse_sample(s.to_json()) == s
True
>>> parse_sample({**s.to_dict(), "incarnation": "9f1c2a7e5d3b4c60"}).incarnation
'9f1c2a7e5d3b4c60'
>>> samples, report = validate_samples([s.to_dict(), {"kind": "pair"}])
>>> report.accepted, dict(report.rejected)
(1, {'missing_field': 1})
"""

from __future__ import annotations

import gzip
import json
import math
import os
from collections import Counter, deque
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from runtime.errors import TelemetryError
from synth.fileio import write_text_atomic

__all__ = [
    "FORMAT",
    "KINDS",
    "MAX_LINE_BYTES",
    "ORIGINS",
    "PHASES",
    "IngestReport",
    "Sample",
    "SampleStore",
    "iter_jsonl",
    "parse_sample",
    "read_jsonl",
    "validate_samples",
    "write_jsonl",
]

FORMAT = "loopcoll.telemetry/1"
KINDS = ("pair", "inject", "coll", "demand")
ORIGINS = ("executor", "inspector", "simulator", "probe")
COLLECTIVE_NAMES = ("allgather", "reducescatter", "allreduce", "alltoall", "alltoallv", "broadcast", "reduce",
                    "send", "recv", "sendrecv")
#: The phases of an AllReduce a sample may name in ``extra.phase`` (its ReduceScatter and AllGather parts).
PHASES = ("reducescatter", "allgather")
#: A sample line (or wire message) longer than this is rejected unread.
MAX_LINE_BYTES = 1 << 20
_MAX_NAME = 256
_MAX_INT = (1 << 63) - 1


@dataclass(frozen=True, slots=True)
class Sample:
    """One validated telemetry sample; ``src``/``dst`` are global ranks of the job."""

    t_s: float
    comm: str
    seq: int | None
    version: int | None
    kind: str
    src: int
    dst: int | None
    bytes: int
    busy_s: float
    collective: str | None
    origin: str
    extra: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}), compare=False)
    #: The measuring executor's incarnation id (one per executor start, shared by the ranks of one job run),
    #: or None (older producers, simulators, probes). The controller groups samples per incarnation.
    incarnation: str | None = None

    @property
    def phase(self) -> str | None:
        """The AllReduce phase this sample measured (``extra.phase``: ``reducescatter`` or ``allgather``), or
        None (the whole collective).

        >>> Sample(0.0, "w", 1, 1, "pair", 0, 1, 8, 1e-3, "allreduce", "executor", {"phase": "allgather"}).phase
        'allgather'
        """
        phase = self.extra.get("phase")
        return phase if isinstance(phase, str) else None

    @property
    def throughput_GBps(self) -> float:  # noqa: N802
        """Achieved throughput ``bytes / busy_s`` in GB/s (10^9 byte/s)."""
        return self.bytes / self.busy_s / 1e9

    @property
    def throughput_gbps(self) -> float:
        """Achieved throughput in Gbit/s, the unit of link capacities."""
        return 8.0 * self.bytes / self.busy_s / 1e9

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of this sample (``incarnation`` only when set, ``extra`` only when non-empty)."""
        d: dict[str, Any] = {
            "format": FORMAT, "t_s": self.t_s, "comm": self.comm, "seq": self.seq, "version": self.version,
            "kind": self.kind, "src": self.src, "dst": self.dst, "bytes": self.bytes, "busy_s": self.busy_s,
            "collective": self.collective, "origin": self.origin,
        }
        if self.incarnation is not None:
            d["incarnation"] = self.incarnation
        if self.extra:
            d["extra"] = dict(self.extra)
        return d

    def to_json(self) -> str:
        """One compact JSON line (keys sorted: byte-deterministic)."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class IngestReport:
    """How many samples were accepted and, per reason code, how many were rejected."""

    accepted: int
    rejected: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    first_error: str | None = None

    @property
    def rejected_total(self) -> int:
        return sum(self.rejected.values())

    def merged(self, other: IngestReport) -> IngestReport:
        """The sum of two reports (the first error kept)."""
        counts = Counter(self.rejected)
        counts.update(other.rejected)
        return IngestReport(self.accepted + other.accepted, MappingProxyType(dict(sorted(counts.items()))),
                            self.first_error or other.first_error)

    def to_dict(self) -> dict[str, Any]:
        return {"accepted": self.accepted, "rejected": dict(self.rejected), "first_error": self.first_error}


def _fail(reason: str, message: str) -> TelemetryError:
    return TelemetryError(message[:400], reason=reason)


def _int(obj: Mapping[str, Any], key: str, *, nullable: bool) -> int | None:
    value = obj.get(key)
    if value is None:
        if nullable:
            return None
        raise _fail("type", f"{key} must be an integer, got null")
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail("type", f"{key} must be an integer, got {type(value).__name__}")
    if not -_MAX_INT <= value <= _MAX_INT:
        raise _fail("range", f"{key} out of range")
    return value


def _float(obj: Mapping[str, Any], key: str) -> float:
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _fail("type", f"{key} must be a number, got {type(value).__name__}")
    if isinstance(value, int) and abs(value) > _MAX_INT:
        raise _fail("range", f"{key} out of range")
    out = float(value)
    if not math.isfinite(out):
        raise _fail("range", f"{key} must be finite, got {value!r}")
    return out


def _name(obj: Mapping[str, Any], key: str, *, nullable: bool = False) -> str | None:
    value = obj.get(key)
    if value is None and nullable:
        return None
    if not isinstance(value, str) or not value or len(value) > _MAX_NAME:
        raise _fail("type", f"{key} must be a non-empty string of at most {_MAX_NAME} characters")
    return value


_REQUIRED = ("format", "t_s", "comm", "kind", "src", "bytes", "busy_s", "origin")


def parse_sample(
    obj: Mapping[str, Any] | str | bytes,
    *,
    comms: Mapping[str, Iterable[int]] | None = None,
    nranks: int | None = None,
) -> Sample:
    """Validate one sample (a JSON object or its text) and return it as a :class:`Sample`.

    ``comms`` (communicator name → its global ranks) and ``nranks`` (the job's GPU count), when given,
    reject unknown communicators and ranks. Raises :class:`TelemetryError` whose ``reason`` is a short
    code (``bad_json``, ``missing_field``, ``type``, ``range``, ``format``, ``unknown_kind``,
    ``unknown_origin``, ``negative_bytes``, ``nonpositive_busy``, ``unknown_comm``, ``unknown_rank``,
    ``dst``, ``too_large``).

    >>> parse_sample('{"format": "loopcoll.telemetry/1"}')
    Traceback (most recent call last):
    ...
    runtime.errors.TelemetryError: sample: missing field 't_s'
    """
    obj = _sample_object(obj)
    kind = obj["kind"]
    if kind not in KINDS:
        raise _fail("unknown_kind", f"sample: kind must be one of {', '.join(KINDS)}, got {str(kind)[:40]!r}")
    origin = obj["origin"]
    if origin not in ORIGINS:
        raise _fail("unknown_origin", f"sample: origin must be one of {', '.join(ORIGINS)}, got {str(origin)[:40]!r}")
    comm = _name(obj, "comm")
    assert comm is not None
    t_s = _float(obj, "t_s")
    busy_s = _float(obj, "busy_s")
    if busy_s <= 0:
        raise _fail("nonpositive_busy", f"sample: busy_s must be > 0, got {busy_s!r}")
    nbytes = _int(obj, "bytes", nullable=False)
    assert nbytes is not None
    if nbytes < 0:
        raise _fail("negative_bytes", f"sample: bytes must be >= 0, got {nbytes}")
    src = _int(obj, "src", nullable=False)
    assert src is not None
    dst = _int(obj, "dst", nullable=True)
    seq = _int(obj, "seq", nullable=True)
    version = _int(obj, "version", nullable=True)
    collective = _name(obj, "collective", nullable=True)
    incarnation = _name(obj, "incarnation", nullable=True)
    if collective is not None and collective not in COLLECTIVE_NAMES:
        raise _fail("type", f"sample: unknown collective {collective[:40]!r}")
    if kind == "pair" and dst is None:
        raise _fail("dst", "sample: a pair sample needs dst")
    if kind == "pair" and dst == src:
        raise _fail("dst", f"sample: a pair sample needs dst != src, got {src}->{dst}")
    extra = obj.get("extra") or {}
    if not isinstance(extra, Mapping):
        raise _fail("type", "sample: extra must be an object")
    if kind == "demand":
        sends = extra.get("send_bytes")
        if not isinstance(sends, list) or not all(isinstance(b, int) and not isinstance(b, bool) and b >= 0
                                                   for b in sends):
            raise _fail("type", "sample: a demand sample needs extra.send_bytes, a list of integers >= 0")
    phase = extra.get("phase")
    if phase is not None and (collective != "allreduce" or phase not in PHASES):
        raise _fail("type", f"sample: extra.phase must be one of {', '.join(PHASES)} on an allreduce sample, got "
                    f"{str(phase)[:40]!r} on {collective!r}")
    _check_ranks(comm, src, dst, comms, nranks)
    return Sample(t_s, comm, seq, version, kind, src, dst, nbytes, busy_s, collective, origin,
                  MappingProxyType(dict(extra)), incarnation)


def _parsed(obj: Any) -> Any:
    """A sample's text parsed (``too_large``, ``bad_json``); anything else as it is."""
    if isinstance(obj, (str, bytes)):
        if len(obj) > MAX_LINE_BYTES:
            raise _fail("too_large", f"sample: longer than {MAX_LINE_BYTES} bytes")
        try:
            return json.loads(obj)
        except (ValueError, RecursionError) as exc:
            raise _fail("bad_json", f"sample: not JSON ({str(exc)[:80]})") from None
    return obj


def _sample_object(obj: Mapping[str, Any] | str | bytes) -> Mapping[str, Any]:
    """The sample as a mapping (parsed from its text) with every required field and the right format."""
    obj = _parsed(obj)
    if not isinstance(obj, Mapping):
        raise _fail("type", f"sample: must be a JSON object, got {type(obj).__name__}")
    for key in _REQUIRED:
        if key not in obj:
            raise _fail("missing_field", f"sample: missing field {key!r}")
    if obj["format"] != FORMAT:
        raise _fail("format", f"sample: format must be {FORMAT!r}, got {str(obj['format'])[:60]!r}")
    return obj


def _check_ranks(comm: str, src: int, dst: int | None, comms: Mapping[str, Iterable[int]] | None,
                 nranks: int | None) -> None:
    """Reject an unknown communicator and ranks outside it or the job (when ``comms``/``nranks`` are given)."""
    ranks_ok: set[int] | frozenset[int] | None = None
    if comms is not None:
        if comm not in comms:
            raise _fail("unknown_comm", f"sample: unknown communicator {comm[:60]!r}")
        members = comms[comm]
        ranks_ok = members if isinstance(members, (set, frozenset)) else set(members)
    for role, rank in (("src", src), ("dst", dst)):
        if rank is None:
            continue
        if rank < 0 or (nranks is not None and rank >= nranks) or (ranks_ok is not None and rank not in ranks_ok):
            raise _fail("unknown_rank", f"sample: {role} rank {rank} is not in communicator {comm[:60]!r}")


def validate_samples(
    objs: Iterable[Mapping[str, Any] | str | bytes | Sample],
    *,
    comms: Mapping[str, Iterable[int]] | None = None,
    nranks: int | None = None,
) -> tuple[list[Sample], IngestReport]:
    """Validate many samples; bad ones are counted by reason and skipped, never raised."""
    ok: list[Sample] = []
    rejected: Counter[str] = Counter()
    first: str | None = None
    comm_sets = None if comms is None else {k: frozenset(v) for k, v in comms.items()}
    for i, obj in enumerate(objs):
        try:
            src = obj.to_dict() if isinstance(obj, Sample) else obj
            ok.append(parse_sample(src, comms=comm_sets, nranks=nranks))
        except TelemetryError as exc:
            rejected[exc.reason] += 1
            first = first or f"sample {i}: {exc}"
    return ok, IngestReport(len(ok), MappingProxyType(dict(sorted(rejected.items()))), first)


def _open_text(path: Path) -> Any:
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8", errors="replace")
    return open(path, encoding="utf-8", errors="replace")


def iter_jsonl(path: str | os.PathLike[str]) -> Iterator[str]:
    """The non-blank lines of a (possibly gzip-compressed) JSONL file; a truncated gzip tail ends it."""
    p = Path(path)
    try:
        with _open_text(p) as fh:
            for line in fh:
                if line.strip():
                    yield line
    except EOFError:  # truncated gzip stream: keep what was complete
        return
    except OSError as exc:
        raise TelemetryError(f"{p}: cannot read: {exc.strerror or exc}", reason="io") from exc


def read_jsonl(
    path: str | os.PathLike[str],
    *,
    comms: Mapping[str, Iterable[int]] | None = None,
    nranks: int | None = None,
) -> tuple[list[Sample], IngestReport]:
    """Read a telemetry JSONL file (``.gz`` too): valid samples plus a report of the skipped lines.

    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "t.jsonl"
    >>> _ = p.write_text('{"broken"\\n')
    >>> read_jsonl(p)[1].rejected["bad_json"]
    1
    """
    return validate_samples(iter_jsonl(path), comms=comms, nranks=nranks)


def write_jsonl(path: str | os.PathLike[str], samples: Iterable[Sample]) -> int:
    """Write samples as JSONL atomically (temporary file, then rename); returns the count."""
    lines = [s.to_json() for s in samples]
    write_text_atomic(path, "".join(line + "\n" for line in lines))
    return len(lines)


class SampleStore:
    """A bounded in-memory store of recent samples, per communicator (oldest dropped first).

    >>> store = SampleStore(max_per_comm=2)
    >>> s = parse_sample({"format": FORMAT, "t_s": 1.0, "comm": "c", "kind": "coll", "src": 0,
    ...                   "bytes": 8, "busy_s": 1.0, "origin": "probe"})
    >>> store.add([s, s, s]); len(store), store.dropped
    (2, 1)
    """

    def __init__(self, *, max_per_comm: int = 100_000, max_comms: int = 1024) -> None:
        if max_per_comm < 1 or max_comms < 1:
            raise TelemetryError("SampleStore: max_per_comm and max_comms must be >= 1", reason="config")
        self.max_per_comm = max_per_comm
        self.max_comms = max_comms
        self._by_comm: dict[str, deque[Sample]] = {}
        self.dropped = 0

    def add(self, samples: Iterable[Sample]) -> None:
        """Append samples; past a communicator's bound the oldest are dropped (and counted)."""
        for s in samples:
            buf = self._by_comm.get(s.comm)
            if buf is None:
                if len(self._by_comm) >= self.max_comms:
                    self.dropped += 1
                    continue
                buf = self._by_comm[s.comm] = deque(maxlen=self.max_per_comm)
            if len(buf) == buf.maxlen:
                self.dropped += 1
            buf.append(s)

    def recent(self, comm: str | None = None, *, kind: str | None = None, since_t_s: float | None = None) -> list[Sample]:
        """Samples held, oldest first, optionally of one communicator, kind, or newer than ``since_t_s``."""
        comms = [comm] if comm is not None else sorted(self._by_comm)
        out = []
        for c in comms:
            for s in self._by_comm.get(c, ()):
                if (kind is None or s.kind == kind) and (since_t_s is None or s.t_s > since_t_s):
                    out.append(s)
        return out

    def __len__(self) -> int:
        return sum(len(b) for b in self._by_comm.values())

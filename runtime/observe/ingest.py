"""Ingest NCCL Inspector JSONL and loopcoll telemetry JSONL into the observability database.

Inputs are files, directories (searched recursively for ``*.log`` and ``*.jsonl`` and their ``.gz``
forms) or glob patterns. Each file is read as a stream (gzip recognised by its magic bytes) in batches of
complete lines; DuckDB parses every batch in one vectorised query (``json_transform`` into typed columns), so
no Python code touches individual Inspector records.

Incremental: the ``files`` table keeps, per path, the size, mtime, how many decompressed bytes were consumed
(complete lines only) and their SHA-256. An unchanged file is skipped; a file that grew (the Inspector appends
a tick at a time) is read from where the last run stopped; a file whose consumed prefix changed is replaced.
Tolerant: a bad line is counted under a reason code (``bad_json``, ``no_header``, ``bad_field``, ``range``,
``unknown_body``) and skipped; an unterminated last line is left for the next run (``truncated_tail``).

>>> import tempfile, pathlib, json
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> rec = {"header": {"id": "0x1", "comm_name": "dp", "rank": 0, "n_ranks": 2, "nnodes": 1},
...        "metadata": {"inspector_output_format_version": "v4.0", "dump_timestamp_us": 1000000, "hostname": "h", "pid": 1},
...        "coll_perf": {"coll": "AllReduce", "coll_sn": 1, "coll_msg_size_bytes": 1000, "coll_exec_time_us": 10,
...                      "coll_timing_source": "kernel_gpu", "coll_algobw_gbs": 0.1, "coll_busbw_gbs": 0.1}}
>>> _ = (d / "h-pid1.log").write_text(json.dumps(rec) + "\\n{broken\\n")
>>> from runtime.observe.db import connect
>>> con = connect()
>>> s = ingest(con, [d]); s.records["coll"], dict(s.rejected)
(1, {'bad_json': 1})
>>> ingest(con, [d]).records["coll"]        # unchanged: nothing added twice
0
"""

from __future__ import annotations

import glob
import hashlib
import os
import time
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from runtime.errors import TelemetryError
from runtime.formats.telemetry import parse_sample
from runtime.observe._ingest_sql import (
    _CLASSIFY_SQL, _CONTEXT_MARKERS, _CONTEXT_PLAIN, _INSERT_COLL, _INSERT_P2P, _MARKER_STAGE_SQL, _STAGE_SQL,
)
from runtime.observe.errors import ObserveError

__all__ = ["IngestSummary", "discover", "ingest"]

#: Decompressed bytes handed to DuckDB per batch.
BATCH_BYTES = 16 << 20
_PATTERNS = ("*.log", "*.log.gz", "*.jsonl", "*.jsonl.gz")
_TELEMETRY_MARK = b"loopcoll.telemetry/1"

_ERROR_REASONS = ("bad_json", "no_header", "bad_field", "range", "unknown_body")
_IGNORED = ("marker", "proxy_trace")


@dataclass(frozen=True, slots=True)
class IngestSummary:
    """What one :func:`ingest` call did: files read/skipped, records added per table, lines rejected per reason."""

    files_read: int
    files_skipped: int
    files_replaced: int
    records: Mapping[str, int]
    rejected: Mapping[str, int]
    ignored: Mapping[str, int]
    seconds: float
    first_error: str | None = None

    @property
    def accepted(self) -> int:
        return sum(self.records.values())

    @property
    def rejected_total(self) -> int:
        return sum(self.rejected.values())

    def to_dict(self) -> dict[str, Any]:
        return {"files_read": self.files_read, "files_skipped": self.files_skipped,
                "files_replaced": self.files_replaced, "records": dict(self.records),
                "rejected": dict(self.rejected), "ignored": dict(self.ignored),
                "seconds": round(self.seconds, 3), "first_error": self.first_error}


def discover(inputs: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """The files named by ``inputs`` (files, directories searched recursively, glob patterns), sorted, unique.

    >>> discover([])
    []
    """
    out: set[Path] = set()
    for item in inputs:
        p = Path(item)
        if p.is_dir():
            for pat in _PATTERNS:
                out.update(q for q in p.rglob(pat) if q.is_file())
        elif p.is_file():
            out.add(p)
        else:
            hits = [Path(h) for h in glob.glob(os.fspath(item), recursive=True)]
            files = [h for h in hits if h.is_file()]
            if not files:
                raise ObserveError(f"{os.fspath(item)}: no such file, directory or matching pattern")
            out.update(files)
    return sorted((q.resolve() for q in out), key=str)


def _is_gzip(path: Path) -> bool:
    with open(path, "rb") as fh:
        return fh.read(2) == b"\x1f\x8b"


class _Stream:
    """Decompressed bytes of a file, read in pieces. gzip (multi-member too) is inflated incrementally, so a
    truncated or corrupt stream keeps everything before the damage and is flagged ``truncated``."""

    _PIECE = 1 << 20

    def __init__(self, path: Path) -> None:
        self.gz = _is_gzip(path)
        self.fh: Any = open(path, "rb")
        self.truncated = False
        self._z: Any = zlib.decompressobj(wbits=31) if self.gz else None
        self._buf = bytearray()
        self._eof = False

    def read(self, n: int) -> bytes:
        if not self.gz:
            return self.fh.read(n)
        while len(self._buf) < n and not self._eof:
            raw = self.fh.read(self._PIECE)
            try:
                if not raw:
                    self._eof = True
                    if not self._z.eof and (self._z.unconsumed_tail or self._started()):
                        self.truncated = True
                    break
                self._buf += self._z.decompress(raw)
                while self._z.eof and self._z.unused_data:
                    rest = self._z.unused_data
                    self._z = zlib.decompressobj(wbits=31)
                    self._buf += self._z.decompress(rest)
            except zlib.error:
                self.truncated = True
                self._eof = True
        out = bytes(self._buf[:n])
        del self._buf[:n]
        return out

    def _started(self) -> bool:
        return self.fh.tell() > 0

    def close(self) -> None:
        self.fh.close()


def _sniff_kind(path: Path) -> str:
    s = _Stream(path)
    try:
        head = s.read(4096)
    finally:
        s.close()
    first = head.split(b"\n", 1)[0]
    return "telemetry" if _TELEMETRY_MARK in first else "inspector"


def _batches(stream: _Stream, skip: int, expect_sha: str | None) -> Iterator[tuple[bytes, Any]]:
    """Yield ``(batch, hasher)``: complete-line batches after the first ``skip`` bytes (whose SHA-256 must be
    ``expect_sha``; a mismatch raises ``_Replaced``). The final unterminated tail is left unconsumed."""
    h = hashlib.sha256()
    left = skip
    while left > 0:
        piece = stream.read(min(left, BATCH_BYTES))
        if not piece:
            raise _Replaced
        h.update(piece)
        left -= len(piece)
    if expect_sha is not None and h.hexdigest() != expect_sha:
        raise _Replaced
    carry = b""
    while True:
        piece = stream.read(BATCH_BYTES)
        data = carry + piece
        if not piece:
            yield b"", h
            if data.strip():
                raise _Tail(len(data))
            return
        cut = data.rfind(b"\n")
        if cut < 0:
            carry = data
            continue
        batch, carry = data[: cut + 1], data[cut + 1:]
        h.update(batch)
        yield batch, h


class _Replaced(Exception):
    pass


class _Tail(Exception):
    def __init__(self, nbytes: int) -> None:
        super().__init__(nbytes)
        self.nbytes = nbytes


class _Flusher:
    """Collects complete-line batches of Inspector files and hands them to DuckDB together (many small
    per-rank files cost one query, not one each); file bookkeeping is written in the same transaction."""

    def __init__(self, con: Any, records: Counter[str], rejected: Counter[str], ignored: Counter[str],
                 first_error: list[str]) -> None:
        self.con, self.records, self.rejected, self.ignored, self.first_error = con, records, rejected, ignored, first_error
        self.fids: list[int] = []
        self.bases: list[int] = []
        self.texts: list[str] = []
        self.nbytes = 0
        self.carry: dict[int, tuple[str, int]] = {}
        self.state: dict[int, list[Any]] = {}
        self.paths: dict[int, Path] = {}
        self.new_files: list[tuple[int, str, str]] = []

    def add(self, fid: int, base: int, text: str) -> None:
        self.fids.append(fid)
        self.bases.append(base)
        self.texts.append(text)
        self.nbytes += len(text)

    def settle(self, fid: int, state: list[Any]) -> None:
        """Record a file's new bookkeeping ``[consumed, sha, lines, size, mtime]`` (written at the next flush)."""
        self.state[fid] = state
        if self.nbytes >= BATCH_BYTES or len(self.state) >= 4096:
            self.flush()

    def flush(self) -> None:
        con = self.con
        counts: dict[int, tuple[int, int]] = {}
        con.execute("BEGIN TRANSACTION")
        try:
            if self.texts:
                con.execute(_STAGE_SQL, [self.fids, self.bases, self.texts])
                markers = any('"dump_stats"' in t for t in self.texts) or any(f in self.carry for f in set(self.fids))
                if markers:
                    for fid in sorted(set(self.fids) & set(self.carry)):
                        line, no = self.carry[fid]
                        con.execute(_MARKER_STAGE_SQL, [fid, no, line, line])
                con.execute(_CLASSIFY_SQL.format(context=_CONTEXT_MARKERS if markers else _CONTEXT_PLAIN))
                self.records["coll"] += con.execute(_INSERT_COLL).fetchone()[0]
                self.records["p2p"] += con.execute(_INSERT_P2P).fetchone()[0]
                rows = con.execute("SELECT file_id, cls, count(*), min(line_no), arg_min(left(line, 200), line_no) "
                                   "FROM _parsed WHERE cls NOT IN ('coll', 'p2p') GROUP BY file_id, cls "
                                   "ORDER BY file_id, min(line_no)").fetchall()
                for fid, cls, n, first_line, example in rows:
                    if cls in _IGNORED:
                        self.ignored[cls] += n
                        continue
                    self.rejected[cls] += n
                    if not self.first_error:
                        self.first_error.append(f"{self.paths.get(fid)}: line {first_line}: {cls}: {example[:120]}")
                    con.execute("INSERT INTO ingest_errors VALUES (?, ?, ?, ?, ?) ON CONFLICT (file_id, reason) "
                                "DO UPDATE SET count = count + excluded.count", [fid, cls, n, first_line, example])
                for fid, good, bad in con.execute(
                        "SELECT file_id, count(*) FILTER (cls IN ('coll', 'p2p')), count(*) FILTER (cls IN "
                        f"({', '.join(repr(r) for r in _ERROR_REASONS)})) FROM _parsed GROUP BY file_id").fetchall():
                    counts[fid] = (good, bad)
                if markers:
                    for fid, line, no in con.execute("SELECT file_id, arg_max(line, line_no), max(line_no) FROM _parsed "
                                                     "WHERE is_marker GROUP BY file_id").fetchall():
                        self.carry[fid] = (line, no)
            if self.new_files:
                ids, paths, kinds = zip(*self.new_files)
                con.execute("INSERT INTO files SELECT unnest(?::INTEGER[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), "
                            "0, 0, 0, NULL, 0, 0, 0, NULL, NULL", [list(ids), list(paths), list(kinds)])
                self.new_files = []
            if self.state:
                upd = sorted(self.state.items())
                cols: list[list[Any]] = [[] for _ in range(10)]
                for fid, (consumed, sha, lines, size, mtime) in upd:
                    good, bad = counts.get(fid, (0, 0))
                    carried: tuple[str | None, int | None] = self.carry.get(fid, (None, None))
                    for col, v in zip(cols, (fid, consumed, sha, lines, size, mtime, good, bad, *carried)):
                        col.append(v)
                con.execute("""
                    UPDATE files SET consumed_bytes = u.consumed, consumed_sha256 = u.sha, lines = u.lines,
                           size_bytes = u.size, mtime_ns = u.mtime, records = files.records + u.good,
                           rejected = files.rejected + u.bad, last_marker = u.line, last_marker_line = u.no
                    FROM (SELECT unnest(?::INTEGER[]) AS fid, unnest(?::BIGINT[]) AS consumed,
                                 unnest(?::VARCHAR[]) AS sha, unnest(?::BIGINT[]) AS lines, unnest(?::BIGINT[]) AS size,
                                 unnest(?::BIGINT[]) AS mtime, unnest(?::BIGINT[]) AS good, unnest(?::BIGINT[]) AS bad,
                                 unnest(?::VARCHAR[]) AS line, unnest(?::BIGINT[]) AS no) u
                    WHERE files.file_id = u.fid""", cols)
            con.execute("COMMIT")
        except Exception:
            con.execute("ROLLBACK")
            raise
        self.fids, self.bases, self.texts, self.nbytes, self.state = [], [], [], 0, {}


def ingest(con: Any, inputs: Iterable[str | os.PathLike[str]], *, kind: str | None = None) -> IngestSummary:
    """Ingest every file named by ``inputs`` into the database ``con`` (see :func:`runtime.observe.connect`).

    ``kind`` forces ``"inspector"`` or ``"telemetry"``; by default a file whose first line is a
    ``loopcoll.telemetry/1`` sample is telemetry and anything else Inspector output.
    """
    if kind not in (None, "inspector", "telemetry"):
        raise ObserveError(f"unknown input kind {kind!r}: expected 'inspector' or 'telemetry'")
    t0 = time.perf_counter()
    records: Counter[str] = Counter({"coll": 0, "p2p": 0, "telemetry": 0})
    rejected: Counter[str] = Counter()
    ignored: Counter[str] = Counter()
    first_error: list[str] = []
    read = skipped = replaced = 0
    known = {r[1]: r for r in con.execute(
        "SELECT file_id, path, size_bytes, mtime_ns, consumed_bytes, consumed_sha256, lines, last_marker, "
        "last_marker_line, kind FROM files").fetchall()}
    next_id = max((r[0] for r in known.values()), default=0) + 1
    flusher = _Flusher(con, records, rejected, ignored, first_error)
    for path in discover(inputs):
        try:
            st = path.stat()
        except OSError as exc:
            raise ObserveError(f"{path}: cannot read: {exc.strerror or exc}") from None
        row = known.get(str(path))
        if row is not None and row[2] == st.st_size and row[3] == st.st_mtime_ns:
            skipped += 1
            continue
        read += 1
        fkind = kind or (row[9] if row is not None else _sniff_kind(path))
        if row is None:
            fid = next_id
            next_id += 1
            flusher.new_files.append((fid, str(path), fkind))
            state: tuple[Any, ...] = (0, None, 0)
        else:
            fid = row[0]
            state = (row[4], row[5], row[6])
            if row[7] is not None:
                flusher.carry[fid] = (row[7], row[8])
        flusher.paths[fid] = path
        if fkind == "telemetry":
            flusher.flush()  # the file's row must exist before telemetry rows and counts are written
        try:
            _ingest_file(flusher, path, fid, fkind, state, st)
        except _Replaced:
            replaced += 1
            flusher.flush()
            for table in ("coll", "p2p", "telemetry", "ingest_errors"):
                con.execute(f"DELETE FROM {table} WHERE file_id = ?", [fid])
            con.execute("UPDATE files SET records = 0, rejected = 0, last_marker = NULL, last_marker_line = NULL "
                        "WHERE file_id = ?", [fid])
            flusher.carry.pop(fid, None)
            _ingest_file(flusher, path, fid, fkind, (0, None, 0), st)
    flusher.flush()
    return IngestSummary(read, skipped, replaced, MappingProxyType(dict(records)),
                         MappingProxyType(dict(sorted(rejected.items()))), MappingProxyType(dict(sorted(ignored.items()))),
                         time.perf_counter() - t0, first_error[0] if first_error else None)


def _ingest_file(flusher: _Flusher, path: Path, fid: int, kind: str, state: tuple[Any, ...], st: os.stat_result) -> None:
    """Queue the new complete lines of one file. A file that ends in a partial line or a truncated gzip stream
    is recorded with size -1, so the next run looks at it again even if its size and mtime do not change."""
    consumed, sha, lines = state
    stream = _Stream(path)
    complete = True
    digest = sha
    try:
        for batch, h in _batches(stream, consumed, sha):
            if batch:
                text = batch.decode("utf-8", errors="replace")
                if kind == "telemetry":
                    _telemetry_batch(flusher.con, fid, text, lines, flusher.records, flusher.rejected,
                                     flusher.first_error, path)
                else:
                    flusher.add(fid, lines, text)
                lines += batch.count(b"\n")
                consumed += len(batch)
            digest = h.hexdigest()
    except _Tail:
        flusher.rejected["truncated_tail"] += 1
        flusher.first_error.append(f"{path}: line {lines + 1}: unterminated last line (left for the next run)")
        complete = False
    finally:
        stream.close()
    if stream.truncated:
        flusher.rejected["truncated_gzip"] += 1
        flusher.first_error.append(f"{path}: truncated gzip stream")
        complete = False
    flusher.settle(fid, [consumed, digest, lines, st.st_size if complete else -1, st.st_mtime_ns])


def _telemetry_batch(con: Any, fid: int, text: str, base: int, records: Counter[str], rejected: Counter[str],
                     first_error: list[str], path: Path) -> None:
    """Telemetry lines are validated by :func:`runtime.formats.telemetry.parse_sample` itself (the controller's own
    rules and reason codes), then inserted in one statement."""
    import json

    rows: list[tuple[Any, ...]] = []
    bad: Counter[str] = Counter()
    first: dict[str, tuple[int, str]] = {}
    for i, line in enumerate(text.split("\n"), start=base + 1):
        if not line.strip():
            continue
        try:
            s = parse_sample(line)
        except TelemetryError as exc:
            bad[exc.reason] += 1
            first.setdefault(exc.reason, (i, line[:200]))
            if not first_error:
                first_error.append(f"{path}: line {i}: {exc}")
            continue
        rows.append((fid, i, s.t_s, s.comm, s.seq, s.version, s.kind, s.src, s.dst, s.bytes, s.busy_s,
                     s.collective, s.origin, json.dumps(dict(s.extra), sort_keys=True) if s.extra else None))
    if rows:
        con.executemany("INSERT INTO telemetry VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
    for reason, n in sorted(bad.items()):
        rejected[reason] += n
        con.execute("INSERT INTO ingest_errors VALUES (?, ?, ?, ?, ?) ON CONFLICT (file_id, reason) DO UPDATE "
                    "SET count = count + excluded.count", [fid, reason, n, *first[reason]])
    con.execute("UPDATE files SET records = records + ?, rejected = rejected + ? WHERE file_id = ?",
                [len(rows), sum(bad.values()), fid])
    records["telemetry"] += len(rows)

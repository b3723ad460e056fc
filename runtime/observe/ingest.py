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
import gzip
import hashlib
import os
import time
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from runtime.observe.errors import ObserveError

__all__ = ["IngestSummary", "discover", "ingest"]

#: Decompressed bytes handed to DuckDB per batch.
BATCH_BYTES = 16 << 20
_PATTERNS = ("*.log", "*.log.gz", "*.jsonl", "*.jsonl.gz")
_TELEMETRY_MARK = b"loopcoll.telemetry/1"

_HEADER_T = '{"id":"VARCHAR","comm_name":"VARCHAR","rank":"BIGINT","n_ranks":"BIGINT","nnodes":"BIGINT"}'
_META_T = ('{"inspector_output_format_version":"VARCHAR","git_rev":"VARCHAR","rec_mechanism":"VARCHAR",'
           '"dump_timestamp_us":"BIGINT","hostname":"VARCHAR","pid":"BIGINT"}')
_COLL_T = ('{"coll":"VARCHAR","coll_sn":"BIGINT","coll_msg_size_bytes":"BIGINT","coll_exec_time_us":"DOUBLE",'
           '"coll_timing_source":"VARCHAR","coll_algobw_gbs":"DOUBLE","coll_busbw_gbs":"DOUBLE",'
           '"coll_algo":"VARCHAR","coll_proto":"VARCHAR"}')
_P2P_T = ('{"p2p":"VARCHAR","p2p_sn":"BIGINT","p2p_peer":"BIGINT","p2p_msg_size_bytes":"BIGINT",'
          '"p2p_exec_time_us":"DOUBLE","p2p_timing_source":"VARCHAR","p2p_algobw_gbs":"DOUBLE","p2p_busbw_gbs":"DOUBLE"}')
_LINE_T = (f'{{"header":{_HEADER_T},"metadata":{_META_T},"coll_perf":{_COLL_T},"p2p_perf":{_P2P_T},'
           '"dump_stats":"JSON","proxy_trace":"JSON"}')
_MARK_T = f'{{"header":{_HEADER_T},"metadata":{_META_T}}}'

# One batch: split into numbered lines and parse each once (`try(json_transform(...))` is NULL for text that is
# not JSON). `$1` text, `$2` number of the line before the batch. v4.3 bare bodies take the header/metadata of the
# last `dump_stats` marker before them (`$3`/`$4`: the marker carried over from the previous batch, text and line
# number, or NULL); batches without markers skip that window (the common v4.0 case).
_STAGE_SQL = f"""
CREATE OR REPLACE TEMP TABLE _stage AS
SELECT $2 + i AS line_no, line, try(json_transform(line, '{_LINE_T}')) AS r
FROM unnest(string_split($1, chr(10))) WITH ORDINALITY AS t(line, i)
WHERE trim(line) <> ''
"""
_MARKER_STAGE_SQL = f"""
INSERT INTO _stage SELECT $2::BIGINT, $1::VARCHAR, try(json_transform($1::VARCHAR, '{_LINE_T}'))
"""
_CONTEXT_PLAIN = "SELECT *, r.header AS h, r.metadata AS md, r.dump_stats IS NOT NULL AS is_marker FROM _stage"
_CONTEXT_MARKERS = f"""
SELECT *, coalesce(r.header, last_value(m_header IGNORE NULLS) OVER w) AS h,
       coalesce(r.metadata, last_value(m_meta IGNORE NULLS) OVER w) AS md
FROM (SELECT *, r.dump_stats IS NOT NULL AS is_marker,
             CASE WHEN r.dump_stats IS NOT NULL
                  THEN coalesce(r.header, json_transform(r.dump_stats, '{_MARK_T}').header) END AS m_header,
             CASE WHEN r.dump_stats IS NOT NULL
                  THEN coalesce(r.metadata, json_transform(r.dump_stats, '{_MARK_T}').metadata) END AS m_meta
      FROM _stage)
WINDOW w AS (ORDER BY line_no ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
"""
_CLASSIFY_SQL = """
CREATE OR REPLACE TEMP TABLE _parsed AS
WITH c AS ({context})
SELECT line_no, is_marker, h, md, r.coll_perf AS cp, r.p2p_perf AS pp, cls,
       CASE WHEN cls NOT IN ('coll', 'p2p') THEN line END AS line
FROM (SELECT *,
    CASE
      WHEN r IS NULL OR NOT starts_with(ltrim(line), '{{') THEN 'bad_json'
      WHEN is_marker THEN 'marker'
      WHEN r.coll_perf IS NULL AND r.p2p_perf IS NULL AND r.proxy_trace IS NOT NULL THEN 'proxy_trace'
      WHEN r.coll_perf IS NULL AND r.p2p_perf IS NULL THEN 'unknown_body'
      WHEN h IS NULL OR h.id IS NULL OR h.rank IS NULL OR md IS NULL OR md.dump_timestamp_us IS NULL
        THEN 'no_header'
      WHEN r.coll_perf IS NOT NULL AND (r.coll_perf.coll IS NULL OR r.coll_perf.coll_sn IS NULL
           OR r.coll_perf.coll_msg_size_bytes IS NULL OR r.coll_perf.coll_exec_time_us IS NULL) THEN 'bad_field'
      WHEN r.coll_perf IS NOT NULL AND (NOT isfinite(r.coll_perf.coll_exec_time_us)
           OR r.coll_perf.coll_exec_time_us <= 0 OR r.coll_perf.coll_msg_size_bytes < 0 OR h.rank < 0
           OR h.rank >= coalesce(h.n_ranks, h.rank + 1)) THEN 'range'
      WHEN r.coll_perf IS NOT NULL THEN 'coll'
      WHEN r.p2p_perf.p2p IS NULL OR r.p2p_perf.p2p_peer IS NULL OR r.p2p_perf.p2p_msg_size_bytes IS NULL
           OR r.p2p_perf.p2p_exec_time_us IS NULL THEN 'bad_field'
      WHEN NOT isfinite(r.p2p_perf.p2p_exec_time_us) OR r.p2p_perf.p2p_exec_time_us <= 0
           OR r.p2p_perf.p2p_msg_size_bytes < 0 OR h.rank < 0 OR r.p2p_perf.p2p_peer < 0 THEN 'range'
      ELSE 'p2p' END AS cls
    FROM c WHERE line_no > {after})
"""

# Bandwidths as the Inspector defines them, used where a record's own value is missing or "nan":
# algbw = traffic / time with traffic = msg x nranks for AllGather(V)/ReduceScatter, msg otherwise;
# busbw = algbw x 2(n-1)/n (AllReduce), (n-1)/n (AllGather(V), ReduceScatter), 1 otherwise.
_ALGBW = ("(cp.coll_msg_size_bytes * (CASE WHEN cp.coll IN ('AllGather','AllGatherV','ReduceScatter') "
          "THEN coalesce(h.n_ranks, 1) ELSE 1 END) / 1e3 / cp.coll_exec_time_us)")
_BUSF = ("(CASE WHEN cp.coll = 'AllReduce' THEN 2.0 * (coalesce(h.n_ranks, 1) - 1) / coalesce(h.n_ranks, 1) "
         "WHEN cp.coll IN ('AllGather','AllGatherV','ReduceScatter') THEN (coalesce(h.n_ranks, 1) - 1.0) / "
         "coalesce(h.n_ranks, 1) ELSE 1.0 END)")

_HDR_SELECT = """$1, line_no, h.id, h.comm_name, h.rank, h.n_ranks, h.nnodes,
    md.inspector_output_format_version, md.git_rev, md.rec_mechanism, md.hostname, md.pid, md.dump_timestamp_us"""

_INSERT_COLL = f"""
INSERT INTO coll SELECT {_HDR_SELECT},
    cp.coll, cp.coll_sn, cp.coll_msg_size_bytes, cp.coll_exec_time_us, cp.coll_timing_source,
    CASE WHEN isfinite(cp.coll_algobw_gbs) THEN cp.coll_algobw_gbs ELSE {_ALGBW} END,
    CASE WHEN isfinite(cp.coll_busbw_gbs) THEN cp.coll_busbw_gbs ELSE {_ALGBW} * {_BUSF} END,
    cp.coll_algo, cp.coll_proto
FROM _parsed WHERE cls = 'coll'
"""

_INSERT_P2P = f"""
INSERT INTO p2p SELECT {_HDR_SELECT},
    pp.p2p, pp.p2p_sn, pp.p2p_peer, pp.p2p_msg_size_bytes, pp.p2p_exec_time_us, pp.p2p_timing_source,
    CASE WHEN isfinite(pp.p2p_algobw_gbs) THEN pp.p2p_algobw_gbs ELSE pp.p2p_msg_size_bytes / 1e3 / pp.p2p_exec_time_us END,
    CASE WHEN isfinite(pp.p2p_busbw_gbs) THEN pp.p2p_busbw_gbs ELSE pp.p2p_msg_size_bytes / 1e3 / pp.p2p_exec_time_us END
FROM _parsed WHERE cls = 'p2p'
"""

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
    """Decompressed bytes of a file, read in pieces; a truncated gzip stream ends it (flagged)."""

    def __init__(self, path: Path) -> None:
        self.gz = _is_gzip(path)
        self.fh: Any = gzip.open(path, "rb") if self.gz else open(path, "rb")
        self.truncated = False

    def read(self, n: int) -> bytes:
        try:
            return self.fh.read(n)
        except (EOFError, zlib.error, gzip.BadGzipFile):
            self.truncated = True
            return b""

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
    for path in discover(inputs):
        try:
            st = path.stat()
        except OSError as exc:
            raise ObserveError(f"{path}: cannot read: {exc.strerror or exc}") from None
        row = con.execute("SELECT file_id, size_bytes, mtime_ns, consumed_bytes, consumed_sha256, lines, "
                          "last_marker, last_marker_line, kind FROM files WHERE path = ?", [str(path)]).fetchone()
        if row is not None and row[1] == st.st_size and row[2] == st.st_mtime_ns:
            skipped += 1
            continue
        read += 1
        fkind = kind or (row[8] if row is not None else _sniff_kind(path))
        if row is None:
            fid = con.execute("SELECT coalesce(max(file_id), 0) + 1 FROM files").fetchone()[0]
            con.execute("INSERT INTO files VALUES (?, ?, ?, 0, 0, 0, NULL, 0, 0, 0, NULL, NULL)", [fid, str(path), fkind])
            state = (0, None, 0, None, None)
        else:
            fid = row[0]
            state = (row[3], row[4], row[5], row[6], row[7])
        try:
            done = _ingest_file(con, path, fid, fkind, state, records, rejected, ignored, first_error)
        except _Replaced:
            replaced += 1
            for table in ("coll", "p2p", "telemetry", "ingest_errors"):
                con.execute(f"DELETE FROM {table} WHERE file_id = ?", [fid])
            con.execute("UPDATE files SET records = 0, rejected = 0 WHERE file_id = ?", [fid])
            done = _ingest_file(con, path, fid, fkind, (0, None, 0, None, None), records, rejected, ignored,
                                first_error)
        con.execute("UPDATE files SET size_bytes = ?, mtime_ns = ? WHERE file_id = ?",
                    [st.st_size if done else -1, st.st_mtime_ns, fid])
    return IngestSummary(read, skipped, replaced, MappingProxyType(dict(records)),
                         MappingProxyType(dict(sorted(rejected.items()))), MappingProxyType(dict(sorted(ignored.items()))),
                         time.perf_counter() - t0, first_error[0] if first_error else None)


def _ingest_file(con: Any, path: Path, fid: int, kind: str, state: tuple[Any, ...], records: Counter[str],
                 rejected: Counter[str], ignored: Counter[str], first_error: list[str]) -> bool:
    """Read the new complete lines of one file. Returns False when the file ended in a partial line or a
    truncated gzip stream (so the next run looks at it again even if size and mtime do not change)."""
    consumed, sha, lines, marker, marker_line = state
    stream = _Stream(path)
    complete = True
    try:
        for batch, h in _batches(stream, consumed, sha):
            if batch:
                text = batch.decode("utf-8", errors="replace")
                if kind == "telemetry":
                    _telemetry_batch(con, fid, text, lines, records, rejected, first_error, path)
                else:
                    marker, marker_line = _inspector_batch(con, fid, text, lines, marker, marker_line, records,
                                                           rejected, ignored, first_error, path)
                lines += batch.count(b"\n")
                consumed += len(batch)
            con.execute("UPDATE files SET consumed_bytes = ?, consumed_sha256 = ?, lines = ?, last_marker = ?, "
                        "last_marker_line = ? WHERE file_id = ?", [consumed, h.hexdigest(), lines, marker,
                                                                   marker_line, fid])
    except _Tail:
        rejected["truncated_tail"] += 1
        first_error.append(f"{path}: line {lines + 1}: unterminated last line (left for the next run)")
        complete = False
    finally:
        stream.close()
    if stream.truncated:
        rejected["truncated_gzip"] += 1
        first_error.append(f"{path}: truncated gzip stream")
        complete = False
    return complete


def _inspector_batch(con: Any, fid: int, text: str, base: int, marker: str | None, marker_line: int | None,
                     records: Counter[str], rejected: Counter[str], ignored: Counter[str],
                     first_error: list[str], path: Path) -> tuple[str | None, int | None]:
    con.execute(_STAGE_SQL, [text, base])
    markers = marker is not None or '"dump_stats"' in text
    if marker is not None:
        con.execute(_MARKER_STAGE_SQL, [marker, marker_line])
    con.execute(_CLASSIFY_SQL.format(context=_CONTEXT_MARKERS if markers else _CONTEXT_PLAIN, after=int(base)))
    con.execute("BEGIN TRANSACTION")
    try:
        n_coll = con.execute(_INSERT_COLL, [fid]).fetchone()[0]
        n_p2p = con.execute(_INSERT_P2P, [fid]).fetchone()[0]
        counts = con.execute("SELECT cls, count(*), min(line_no), arg_min(left(line, 200), line_no) FROM _parsed "
                             "WHERE cls NOT IN ('coll', 'p2p') GROUP BY cls ORDER BY min(line_no)").fetchall()
        bad = 0
        for cls, n, first_line, example in counts:
            if cls in _IGNORED:
                ignored[cls] += n
                continue
            bad += n
            rejected[cls] += n
            if not first_error:
                first_error.append(f"{path}: line {first_line}: {cls}: {example[:120]}")
            con.execute("INSERT INTO ingest_errors VALUES (?, ?, ?, ?, ?) ON CONFLICT (file_id, reason) DO UPDATE "
                        "SET count = count + excluded.count", [fid, cls, n, first_line, example])
        con.execute("UPDATE files SET records = records + ?, rejected = rejected + ? WHERE file_id = ?",
                    [n_coll + n_p2p, bad, fid])
        con.execute("COMMIT")
    except Exception:
        con.execute("ROLLBACK")
        raise
    records["coll"] += n_coll
    records["p2p"] += n_p2p
    last = con.execute("SELECT line, line_no FROM _parsed WHERE is_marker ORDER BY line_no DESC LIMIT 1").fetchone() if markers else None
    return (last[0], last[1]) if last is not None else (marker, marker_line)


def _telemetry_batch(con: Any, fid: int, text: str, base: int, records: Counter[str], rejected: Counter[str],
                     first_error: list[str], path: Path) -> None:
    """Telemetry lines are validated by :func:`runtime.telemetry.parse_sample` itself (the controller's own
    rules and reason codes), then inserted in one statement."""
    import json

    from runtime.errors import TelemetryError
    from runtime.telemetry import parse_sample

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

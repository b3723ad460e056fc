"""The DuckDB database behind ``runtime.observe``: lazy import, connection, schema (tables and views).

DuckDB is an optional extra (``pip install 'loopcoll[observe]'``): it is imported only when a database is
opened, and its absence is one clear :class:`ObserveError`. ``docs/observe.md`` documents every table and view.

>>> con = connect()            # in-memory
>>> sorted(r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall())[:3]
['coll', 'files', 'ingest_errors']
"""

from __future__ import annotations

import os
from typing import Any

from runtime.observe.analyze import select_window
from runtime.observe.errors import ObserveError

__all__ = ["SCHEMA_VERSION", "connect", "duckdb_module"]

#: Bumped whenever a table's columns change; a database of another version is refused by name.
SCHEMA_VERSION = 1

_HEADER_COLS = """
    file_id INTEGER, line_no BIGINT,
    comm_id VARCHAR, comm_name VARCHAR, rank INTEGER, n_ranks INTEGER, nnodes INTEGER,
    format_version VARCHAR, git_rev VARCHAR, rec_mechanism VARCHAR, hostname VARCHAR, pid BIGINT,
    dump_ts_us BIGINT,"""

_TABLES = f"""
CREATE TABLE IF NOT EXISTS meta (key VARCHAR PRIMARY KEY, value VARCHAR);
CREATE TABLE IF NOT EXISTS files (
    file_id INTEGER PRIMARY KEY, path VARCHAR UNIQUE, kind VARCHAR, size_bytes BIGINT, mtime_ns BIGINT,
    consumed_bytes BIGINT, consumed_sha256 VARCHAR, lines BIGINT, records BIGINT, rejected BIGINT,
    last_marker VARCHAR, last_marker_line BIGINT);
CREATE TABLE IF NOT EXISTS ingest_errors (
    file_id INTEGER, reason VARCHAR, count BIGINT, first_line BIGINT, example VARCHAR,
    PRIMARY KEY (file_id, reason));
CREATE TABLE IF NOT EXISTS coll ({_HEADER_COLS}
    coll VARCHAR, coll_sn BIGINT, msg_size_bytes BIGINT, exec_time_us DOUBLE, timing_source VARCHAR,
    algbw_gbs DOUBLE, busbw_gbs DOUBLE, coll_algo VARCHAR, coll_proto VARCHAR);
CREATE TABLE IF NOT EXISTS p2p ({_HEADER_COLS}
    p2p VARCHAR, p2p_sn BIGINT, peer INTEGER, msg_size_bytes BIGINT, exec_time_us DOUBLE,
    timing_source VARCHAR, algbw_gbs DOUBLE, busbw_gbs DOUBLE);
CREATE TABLE IF NOT EXISTS telemetry (
    file_id INTEGER, line_no BIGINT, t_s DOUBLE, comm VARCHAR, seq BIGINT, version BIGINT, kind VARCHAR,
    src INTEGER, dst INTEGER, bytes BIGINT, busy_s DOUBLE, collective VARCHAR, origin VARCHAR, extra VARCHAR);
"""

# Views: the per-record view adds time in seconds and the message-size bucket; `coll_ops` joins one
# collective's records across ranks on (comm_id, coll, coll_sn) -- the cross-rank key of the Inspector.
_VIEWS = """
CREATE OR REPLACE MACRO size_bucket(b) AS
    CASE WHEN b IS NULL OR b <= 0 THEN '0B'
         ELSE CAST(CAST(pow(2, floor(log2(b))) AS BIGINT) AS VARCHAR) END;
CREATE OR REPLACE MACRO size_label(b) AS
    CASE WHEN b >= 1073741824 THEN CAST(CAST(pow(2, floor(log2(b)) - 30) AS BIGINT) AS VARCHAR) || 'G'
         WHEN b >= 1048576 THEN CAST(CAST(pow(2, floor(log2(b)) - 20) AS BIGINT) AS VARCHAR) || 'M'
         WHEN b >= 1024 THEN CAST(CAST(pow(2, floor(log2(b)) - 10) AS BIGINT) AS VARCHAR) || 'K'
         WHEN b > 0 THEN CAST(CAST(pow(2, floor(log2(b))) AS BIGINT) AS VARCHAR) || 'B'
         ELSE '0B' END;
CREATE OR REPLACE MACRO comm_type(n_ranks, nnodes) AS
    CASE WHEN n_ranks = 1 THEN 'single-rank' WHEN nnodes <= 1 THEN 'nvlink-only'
         WHEN n_ranks = nnodes THEN 'nic-only' ELSE 'mixed' END;
CREATE OR REPLACE VIEW telemetry_coll AS
    WITH t AS (SELECT * FROM telemetry
               WHERE kind = 'coll' AND origin <> 'inspector' AND seq IS NOT NULL AND collective IS NOT NULL),
         n AS (SELECT comm, count(DISTINCT src) AS n FROM t GROUP BY comm)
    SELECT t.file_id, t.line_no, t.comm AS comm_id, t.comm AS comm_name, t.src AS rank,
           CAST(n.n AS INTEGER) AS n_ranks, CAST(NULL AS INTEGER) AS nnodes,
           'loopcoll.telemetry/1' AS format_version, CAST(NULL AS VARCHAR) AS git_rev, t.origin AS rec_mechanism,
           CAST(NULL AS VARCHAR) AS hostname, CAST(NULL AS BIGINT) AS pid,
           CAST(round(t.t_s * 1e6) AS BIGINT) AS dump_ts_us,
           CASE t.collective WHEN 'allgather' THEN 'AllGather' WHEN 'reducescatter' THEN 'ReduceScatter'
                WHEN 'allreduce' THEN 'AllReduce' WHEN 'alltoall' THEN 'All2All' WHEN 'alltoallv' THEN 'All2Allv'
                WHEN 'broadcast' THEN 'Broadcast' WHEN 'reduce' THEN 'Reduce' ELSE t.collective END AS coll,
           t.seq AS coll_sn,
           CASE WHEN t.collective IN ('allgather', 'reducescatter') THEN t.bytes // n.n ELSE t.bytes END
               AS msg_size_bytes,
           t.busy_s * 1e6 AS exec_time_us, t.origin AS timing_source,
           t.bytes / t.busy_s / 1e9 AS algbw_gbs,
           t.bytes / t.busy_s / 1e9 * (CASE WHEN t.collective = 'allreduce' THEN 2.0 * (n.n - 1) / n.n
                                           WHEN t.collective IN ('allgather', 'reducescatter', 'alltoall', 'alltoallv')
                                           THEN (n.n - 1.0) / n.n ELSE 1.0 END) AS busbw_gbs,
           CAST(NULL AS VARCHAR) AS coll_algo, CAST(NULL AS VARCHAR) AS coll_proto
    FROM t JOIN n USING (comm);
CREATE OR REPLACE VIEW coll_records AS
    SELECT *, dump_ts_us / 1e6 AS t_s,
           CAST(pow(2, floor(log2(greatest(msg_size_bytes, 1)))) AS BIGINT) AS size_bucket_bytes,
           size_label(msg_size_bytes) AS size_bucket,
           comm_type(n_ranks, nnodes) AS comm_type
    FROM (SELECT *, 'inspector' AS source FROM coll
          UNION ALL BY NAME SELECT *, 'telemetry' AS source FROM telemetry_coll);
CREATE OR REPLACE VIEW coll_ops AS
    SELECT comm_id, coll, coll_sn,
           any_value(comm_name) AS comm_name, max(n_ranks) AS n_ranks, max(nnodes) AS nnodes,
           min(msg_size_bytes) AS msg_size_bytes, any_value(size_bucket) AS size_bucket,
           count(*) AS ranks_seen,
           median(t_s) AS t_s, min(t_s) AS t_first_s, max(t_s) AS t_last_s,
           min(exec_time_us) AS exec_min_us, median(exec_time_us) AS exec_median_us,
           max(exec_time_us) AS exec_max_us,
           max(busbw_gbs) AS busbw_gbs, median(busbw_gbs) AS busbw_median_gbs,
           max(algbw_gbs) AS algbw_gbs,
           arg_min(rank, (exec_time_us, rank)) AS last_rank
    FROM coll_records
    GROUP BY comm_id, coll, coll_sn;
CREATE OR REPLACE VIEW coll_lateness AS
    SELECT r.comm_id, r.coll, r.coll_sn, r.rank, r.hostname, r.t_s, r.exec_time_us, r.busbw_gbs,
           o.ranks_seen, o.exec_median_us,
           (o.exec_median_us - r.exec_time_us) / o.exec_median_us AS lateness,
           (r.exec_time_us = o.exec_min_us) AS is_last
    FROM coll_records r JOIN coll_ops o USING (comm_id, coll, coll_sn)
    WHERE o.ranks_seen >= 2 AND o.exec_median_us > 0;
CREATE OR REPLACE VIEW summary AS
    SELECT comm_type, n_ranks, nnodes, coll, size_bucket, min(size_bucket_bytes) AS size_bucket_bytes,
           count(*) AS records, count(DISTINCT comm_id) AS comms,
           sum(exec_time_us) / 1e6 AS total_time_s, median(exec_time_us) AS exec_median_us,
           quantile_cont(algbw_gbs, 0.5) AS algbw_p50_gbs,
           quantile_cont(busbw_gbs, 0.1) AS busbw_p10_gbs, quantile_cont(busbw_gbs, 0.5) AS busbw_p50_gbs,
           quantile_cont(busbw_gbs, 0.9) AS busbw_p90_gbs, min(t_s) AS t_first_s, max(t_s) AS t_last_s
    FROM coll_records
    GROUP BY ALL;
CREATE OR REPLACE VIEW p2p_records AS
    SELECT *, dump_ts_us / 1e6 AS t_s, size_label(msg_size_bytes) AS size_bucket FROM p2p;
"""


def duckdb_module() -> Any:
    """The ``duckdb`` module, or an :class:`ObserveError` saying how to install it."""
    try:
        import duckdb
    except ImportError as exc:  # pragma: no cover - exercised with duckdb hidden
        raise ObserveError("the observability commands need DuckDB: pip install 'loopcoll[observe]' "
                           f"(import failed: {exc})") from None
    return duckdb


def connect(path: str | os.PathLike[str] | None = None, *, threads: int | None = None, read_only: bool = False) -> Any:
    """Open (creating if needed) an observability database; ``None`` or ``":memory:"`` is in-memory.

    The schema is created on first use; a database written by another schema version is refused.
    """
    duckdb = duckdb_module()
    target = ":memory:" if path is None else os.fspath(path)
    try:
        con = duckdb.connect(target, read_only=read_only)
    except Exception as exc:  # duckdb.IOException and friends
        raise ObserveError(f"{target}: cannot open DuckDB database: {exc}") from None
    if threads is not None:
        con.execute(f"SET threads = {int(threads)}")
    if not read_only:
        con.execute(_TABLES)
        row = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        if row is None:
            con.execute("INSERT INTO meta VALUES ('schema_version', ?)", [str(SCHEMA_VERSION)])
        elif row[0] != str(SCHEMA_VERSION):
            con.close()
            raise ObserveError(f"{target}: database schema version {row[0]}, this loopcoll reads {SCHEMA_VERSION}")
        con.execute(_VIEWS)

        select_window(con)
    return con

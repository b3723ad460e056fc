"""The analysis window and the SQL helpers every analysis shares: :func:`query`, :func:`select_window` (the
``w_*`` views), the window's :func:`summary`, its dump tick and the default bin width.

>>> from runtime.observe.db import connect
>>> query(connect(), "SELECT 1 AS x")
(['x'], [(1,)])
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from runtime.observe.errors import ObserveError

__all__ = ["auto_bin_s", "dump_tick_s", "query", "select_window", "summary"]


def query(con: Any, sql: str, params: Sequence[Any] | None = None) -> tuple[list[str], list[tuple[Any, ...]]]:
    """Run one SQL statement; returns (column names, rows). Errors become :class:`ObserveError`."""
    try:
        cur = con.execute(sql, list(params) if params else [])
        cols = [d[0] for d in cur.description] if cur.description else []
        return cols, cur.fetchall() if cur.description else []
    except Exception as exc:
        if isinstance(exc, ObserveError):
            raise
        raise ObserveError(f"query failed: {str(exc).splitlines()[0][:300]}") from None


def _dicts(con: Any, sql: str, params: Sequence[Any] | None = None) -> list[dict[str, Any]]:
    cols, rows = query(con, sql, params)
    return [dict(zip(cols, r)) for r in rows]


def _last_credit(is_last: str, collective: str) -> str:
    """SQL for a record's share of "arrived last" in its collective: 1/k when it is one of the k ranks
    with the shortest exec time (ties are common: exec times are whole microseconds), else 0. Exact
    decimals, so that the shares' sums do not depend on the order DuckDB's threads add them up in."""
    return (f"CASE WHEN {is_last} THEN (1.0 / sum(({is_last})::INT) OVER (PARTITION BY {collective}))"
            "::DECIMAL(18, 15) ELSE 0::DECIMAL(18, 15) END")


def select_window(con: Any, since_s: float | None = None, until_s: float | None = None) -> None:
    """(Re)define the temporary views every analysis reads: ``w_coll`` and ``w_p2p`` (records with
    ``since_s <= t_s <= until_s``), ``w_ops`` (those records joined per collective) and ``w_lateness`` (per record: how much
    later than the collective's median rank it arrived, as a fraction of the median exec time)."""
    lo = -math.inf if since_s is None else float(since_s)
    hi = math.inf if until_s is None else float(until_s)
    con.execute(f"""
        CREATE OR REPLACE TEMP VIEW w_coll AS
            SELECT * FROM coll_records WHERE t_s >= '{lo!r}'::DOUBLE AND t_s <= '{hi!r}'::DOUBLE;
        CREATE OR REPLACE TEMP VIEW w_p2p AS
            SELECT * FROM p2p_records WHERE t_s >= '{lo!r}'::DOUBLE AND t_s <= '{hi!r}'::DOUBLE;
        CREATE OR REPLACE TEMP VIEW w_ops AS
            SELECT comm_id, coll, coll_sn, any_value(comm_name) AS comm_name, max(n_ranks) AS n_ranks,
                   min(msg_size_bytes) AS msg_size_bytes, any_value(size_bucket) AS size_bucket,
                   count(*) AS ranks_seen, median(t_s) AS t_s,
                   min(exec_time_us) AS exec_min_us, median(exec_time_us) AS exec_median_us,
                   max(busbw_gbs) AS busbw_max_gbs, median(busbw_gbs) AS busbw_median_gbs,
                   min(busbw_gbs) AS busbw_min_gbs, arg_min(rank, (exec_time_us, rank)) AS last_rank
            FROM w_coll GROUP BY comm_id, coll, coll_sn;
        CREATE OR REPLACE TEMP VIEW w_lateness AS
            SELECT r.comm_id, r.coll, r.coll_sn, r.rank, r.hostname, r.pid, r.t_s, r.exec_time_us, r.busbw_gbs,
                   o.ranks_seen, (o.exec_median_us - r.exec_time_us) / o.exec_median_us AS lateness,
                   (r.exec_time_us = o.exec_min_us) AS is_last,
                   {_last_credit('r.exec_time_us = o.exec_min_us', 'r.comm_id, r.coll, r.coll_sn')} AS last_credit
            FROM w_coll r JOIN w_ops o USING (comm_id, coll, coll_sn)
            WHERE o.ranks_seen >= 2 AND o.exec_median_us > 0;
    """)


def summary(con: Any) -> list[dict[str, Any]]:
    """Per communicator shape × collective × message-size bucket (power of two): count, total time,
    median exec time, algbw/busbw percentiles (p10/p50/p90). Reads the window of :func:`select_window`."""
    return _dicts(con, """
        SELECT comm_type(n_ranks, nnodes) AS comm_type, n_ranks, nnodes, coll, size_bucket,
               min(size_bucket_bytes) AS size_bucket_bytes, count(*) AS records,
               count(DISTINCT comm_id) AS comms, round(sum(exec_time_us) / 1e6, 6) AS total_time_s,
               median(exec_time_us) AS exec_median_us,
               quantile_cont(algbw_gbs, 0.5) AS algbw_p50_gbs, quantile_cont(busbw_gbs, 0.1) AS busbw_p10_gbs,
               quantile_cont(busbw_gbs, 0.5) AS busbw_p50_gbs, quantile_cont(busbw_gbs, 0.9) AS busbw_p90_gbs
        FROM w_coll GROUP BY ALL ORDER BY n_ranks DESC, nnodes, coll, size_bucket_bytes""")


def dump_tick_s(con: Any) -> float:
    """The median interval between a process's successive dump ticks (gaps over 1 ms between its distinct
    dump timestamps), in seconds; 0 when unknown."""
    row = con.execute("""
        WITH t AS (SELECT DISTINCT file_id, dump_ts_us FROM w_coll),
             d AS (SELECT dump_ts_us - lag(dump_ts_us) OVER (PARTITION BY file_id ORDER BY dump_ts_us) AS g FROM t)
        SELECT median(g) / 1e6 FROM d WHERE g > 1000""").fetchone()
    return float(row[0]) if row and row[0] is not None else 0.0


def auto_bin_s(con: Any, *, min_ops: int = 5) -> float:
    """Default bin width: the largest of 2.5 dump ticks (every bin holds two ticks of every process),
    ``min_ops`` collectives of the median (communicator, collective, size) series, 1/200 of the window's span
    and 0.1 s; at most 60 s."""
    row = con.execute("""
        WITH s AS (SELECT count(*) AS n, max(t_s) - min(t_s) AS span FROM w_ops GROUP BY comm_id, coll, msg_size_bytes)
        SELECT (SELECT max(t_s) - min(t_s) FROM w_coll), median(span / greatest(n - 1, 1)) FROM s""").fetchone()
    span = float(row[0] or 0.0)
    per_op = float(row[1] or 0.0)
    return min(60.0, max(0.1, span / 200.0, 2.5 * dump_tick_s(con), min_ops * per_op))

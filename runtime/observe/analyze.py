"""Analyses over the observability database: summary, temporal (slow periods), spatial (stragglers), phases.

Everything that touches records is SQL; Python only runs the change-point segmenter over the per-bin series
(a few hundred values per communicator) and the binomial tail over per-rank counts.

Semantics (NCCL Inspector): a record's exec time is the max over channels of the kernel time **including
waiting for peers**, so within one collective (joined across ranks on ``(comm_id, coll, coll_sn)``) the rank
that arrived **last** shows the **shortest** time; the collective's own transfer rate is the busbw of that
record (the maximum over ranks), which is what the temporal analysis follows.

>>> from runtime.observe.db import connect
>>> from runtime.observe.synthetic import SyntheticSpec, write_logs
>>> import tempfile
>>> d = tempfile.mkdtemp()
>>> truth = write_logs(d, SyntheticSpec(nranks=8, ncolls=300, stragglers=(3,), slow_periods=((40.0, 80.0, 0.5),), seed=1))
>>> from runtime.observe.ingest import ingest
>>> con = connect(); _ = ingest(con, [d])
>>> [round(p.start_s - truth.t0_s) for p in slow_periods(con)]
[40]
>>> [s.rank for s in stragglers(con) if s.flagged]
[3]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from runtime.observe._window import _dicts, _last_credit, auto_bin_s, dump_tick_s, query, select_window, summary
from runtime.observe.errors import ObserveError
from runtime.observe.spatial import StragglerRow, nodes, stragglers

__all__ = [
    "PhaseRow",
    "SegmentRow",
    "SlowPeriod",
    "StragglerRow",
    "cusum_segments",
    "nodes",
    "phases",
    "query",
    "segments",
    "select_window",
    "slow_periods",
    "stragglers",
    "summary",
    "timeline",
]


_SIGNALS = {"median": "busbw_median_gbs", "max": "busbw_max_gbs", "min": "busbw_min_gbs"}


def timeline(con: Any, bin_s: float, *, signal: str = "median") -> list[dict[str, Any]]:
    """busbw over time per communicator and (collective, message size): per time bin, the median over the
    bin's collectives of their busbw relative to the series' baseline (its median over the window), plus the
    median absolute busbw and counts. A collective's busbw is ``signal`` over its ranks' records: ``median``
    (default: what the typical rank saw, transfer plus waiting), ``max`` (the last rank to arrive: the transfer
    alone) or ``min`` (the first to arrive: transfer plus the longest wait). Rows are in time order."""
    if not bin_s > 0:
        raise ObserveError(f"bin width must be > 0 s, got {bin_s!r}")
    if signal not in _SIGNALS:
        raise ObserveError(f"unknown signal {signal!r}: choose from {', '.join(_SIGNALS)}")
    col = _SIGNALS[signal]
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE w_series_ops AS
        WITH ops AS (SELECT *, {col} AS busbw_gbs FROM w_ops),
             base AS (SELECT comm_id, coll, msg_size_bytes, median(busbw_gbs) AS base_gbs
                      FROM ops WHERE busbw_gbs > 0 GROUP BY ALL),
             t0 AS (SELECT min(t_s) AS t0 FROM ops)
        SELECT o.comm_id, o.coll, o.msg_size_bytes, o.size_bucket, o.t_s, o.busbw_gbs,
               o.busbw_gbs / b.base_gbs AS rel, b.base_gbs,
               CAST(floor((o.t_s - t0.t0) / {float(bin_s)!r}) AS BIGINT) AS bin
        FROM ops o JOIN base b USING (comm_id, coll, msg_size_bytes), t0""")
    return _dicts(con, """
        SELECT comm_id, coll, msg_size_bytes, any_value(size_bucket) AS size_bucket, bin,
               min(t_s) AS t_first_s, max(t_s) AS t_last_s, median(t_s) AS t_s, count(*) AS ops,
               median(rel) AS rel, median(busbw_gbs) AS busbw_gbs, any_value(base_gbs) AS base_gbs
        FROM w_series_ops GROUP BY comm_id, coll, msg_size_bytes, bin
        ORDER BY comm_id, coll, msg_size_bytes, bin""")


def _refine(con: Any, comm: str, coll: str, size: int, lo: float, hi: float, mid: float, start: bool) -> float | None:
    """A boundary to the collective: within [lo, hi] the op time that maximises the CUSUM of ``mid − rel``
    over the ops after it (a start) or up to it (an end) — the least-squares split between the two levels."""
    order = "DESC" if start else "ASC"
    row = con.execute(f"""
        SELECT arg_max(t_s, s) FROM (
            SELECT t_s, sum({float(mid)!r} - rel) OVER (ORDER BY t_s {order} ROWS UNBOUNDED PRECEDING) AS s
            FROM w_series_ops WHERE comm_id = ? AND coll = ? AND msg_size_bytes = ? AND t_s BETWEEN ? AND ?)""",
                      [comm, coll, size, lo, hi]).fetchone()
    return float(row[0]) if row and row[0] is not None else None


def cusum_segments(x: Sequence[float], *, min_drop: float = 0.1, h: float = 5.0, sigma_floor: float = 0.01,
                   min_bins: int = 2) -> list[tuple[int, int]]:
    """Slow periods of a relative series ``x`` (1 = baseline) as inclusive index ranges, by two Page CUSUMs.

    The noise scale is σ = max(1.4826·MAD(x), ``sigma_floor``) and the reference value k = ``min_drop``/2.
    Normal state: ``S = max(0, S + (1 − x − k)/σ)``; when S ≥ h a period is open, starting just after the
    last bin where S was 0 (Page's change-point estimate). Slow state: ``R = max(0, R + (x − 1 + k)/σ)``;
    when R ≥ h the period closes at the last bin where R was 0. Periods shorter than ``min_bins`` are dropped.

    >>> cusum_segments([1.0] * 20 + [0.6] * 10 + [1.0] * 20)
    [(20, 29)]
    >>> cusum_segments([1.0, 0.98, 1.02] * 10)
    []
    """
    n = len(x)
    if n == 0:
        return []
    xs = sorted(x)
    med = xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])
    dev = sorted(abs(v - med) for v in x)
    mad = dev[n // 2] if n % 2 else 0.5 * (dev[n // 2 - 1] + dev[n // 2])
    sigma = max(1.4826 * mad, sigma_floor)
    k = min_drop / 2.0
    out: list[tuple[int, int]] = []
    s = r = 0.0
    start = 0
    end = 0
    slow = False
    for i, v in enumerate(x):
        if not slow:
            if s == 0.0:
                start = i
            s = max(0.0, s + (1.0 - v - k) / sigma)
            if s >= h:
                slow, r, end = True, 0.0, i
        else:
            r = max(0.0, r + (v - 1.0 + k) / sigma)
            if r == 0.0:
                end = i
            if r >= h:
                out.append((start, end))
                slow, s = False, 0.0
    if slow:
        out.append((start, end))
    return [(a, b) for a, b in out if b - a + 1 >= min_bins]


@dataclass(frozen=True, slots=True)
class SlowPeriod:
    """A detected slow period of one communicator: times (Unix s), the collectives (``coll:size``) whose
    series were slow, the lowest in-period median busbw relative to baseline among them, and the drop."""

    comm_id: str
    comm_name: str | None
    start_s: float
    end_s: float
    ops: int
    rel_busbw: float
    drop: float
    series: tuple[str, ...]

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s

    def to_dict(self) -> dict[str, Any]:
        return {"comm_id": self.comm_id, "comm_name": self.comm_name, "start_s": self.start_s, "end_s": self.end_s,
                "duration_s": round(self.duration_s, 6), "ops": self.ops, "rel_busbw": round(self.rel_busbw, 4),
                "drop": round(self.drop, 4), "series": list(self.series)}


def slow_periods(con: Any, *, bin_s: float | None = None, min_drop: float = 0.1, h: float = 5.0,
                 min_bins: int = 2, signal: str = "median", store: bool = True) -> list[SlowPeriod]:
    """Detect slow periods: :func:`cusum_segments` on every (communicator, collective, size) series of
    :func:`timeline`, then per communicator the union of overlapping series periods. With ``store`` the
    result is also written to the temporary table ``slow_periods`` (for SQL and :func:`segments`)."""
    bw = auto_bin_s(con) if bin_s is None else bin_s
    rows = timeline(con, bw, signal=signal)
    names = dict(con.execute("SELECT comm_id, any_value(comm_name) FROM w_coll GROUP BY comm_id").fetchall())
    series: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    for r in rows:
        series.setdefault((r["comm_id"], r["coll"], int(r["msg_size_bytes"])), []).append(r)
    found: dict[str, list[tuple[float, float, int, float, str]]] = {}
    for (comm, coll, size), ser in sorted(series.items()):
        for a, b in cusum_segments([float(r["rel"]) for r in ser], min_drop=min_drop, h=h, min_bins=min_bins):
            seg = ser[a: b + 1]
            rel = sorted(float(r["rel"]) for r in seg)
            med = rel[len(rel) // 2]
            mid = 0.5 * (1.0 + med)
            # Refine within the boundary bin and its neighbour outside the period, unless an idle gap of more
            # than a bin separates them (a boundary never moves across a pause in the workload).
            lo = float(seg[0]["t_first_s"])
            if a > 0 and lo - float(ser[a - 1]["t_last_s"]) < bw:
                lo = float(ser[a - 1]["t_first_s"])
            t_start = _refine(con, comm, coll, size, lo, float(seg[0]["t_last_s"]), mid, True)
            hi = float(seg[-1]["t_last_s"])
            if b + 1 < len(ser) and float(ser[b + 1]["t_first_s"]) - hi < bw:
                hi = float(ser[b + 1]["t_last_s"])
            t_end = _refine(con, comm, coll, size, float(seg[-1]["t_first_s"]), hi, mid, False)
            found.setdefault(comm, []).append((t_start if t_start is not None else float(seg[0]["t_first_s"]),
                                               t_end if t_end is not None else float(seg[-1]["t_last_s"]),
                                               sum(int(r["ops"]) for r in seg), med, f"{coll}:{seg[0]['size_bucket']}"))
    out: list[SlowPeriod] = []
    for comm in sorted(found):
        cur: list[Any] | None = None
        for p_lo, p_hi, p_ops, p_rel, p_name in sorted(found[comm]) + [(math.inf, math.inf, 0, 1.0, "")]:
            if cur is not None and p_lo <= cur[1]:
                cur[1] = max(cur[1], p_hi)
                cur[2] += p_ops
                cur[3] = min(cur[3], p_rel)
                cur[4].add(p_name)
                continue
            if cur is not None:
                out.append(SlowPeriod(comm, names.get(comm), cur[0], cur[1], cur[2], cur[3], 1.0 - cur[3],
                                      tuple(sorted(cur[4]))))
            cur = [p_lo, p_hi, p_ops, p_rel, {p_name}]
    if store:
        con.execute("CREATE OR REPLACE TEMP TABLE slow_periods (period INTEGER, comm_id VARCHAR, start_s DOUBLE, "
                    "end_s DOUBLE, rel_busbw DOUBLE, drop DOUBLE)")
        if out:
            con.executemany("INSERT INTO slow_periods VALUES (?, ?, ?, ?, ?, ?)",
                            [(i, p.comm_id, p.start_s, p.end_s, p.rel_busbw, p.drop) for i, p in enumerate(out)])
    return out


@dataclass(frozen=True, slots=True)
class SegmentRow:
    """Per communicator, time segment (split at the slow periods' boundaries), rank and (collective, size):
    the rank's median busbw, the joined per-collective median busbw, and how often the rank arrived last."""

    comm_id: str
    segment: int
    slow: bool
    start_s: float
    end_s: float
    coll: str
    size_bucket: str
    rank: int
    records: int
    busbw_median_gbs: float
    joined_busbw_median_gbs: float | None
    last_share: float | None

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__slots__}  # type: ignore[attr-defined]


def segments(con: Any) -> list[SegmentRow]:
    """Split each communicator's window at its stored slow periods (see :func:`slow_periods`) into
    alternating normal/slow segments and give per-rank and joined medians per segment (one SQL query).
    A record belongs to the segment of its collective's time (the median over ranks of the dump times)."""
    con.execute("CREATE TEMP TABLE IF NOT EXISTS slow_periods (period INTEGER, comm_id VARCHAR, start_s DOUBLE, "
                "end_s DOUBLE, rel_busbw DOUBLE, drop DOUBLE)")
    rows = _dicts(con, f"""
        WITH span AS (SELECT comm_id, min(t_s) AS lo, max(t_s) AS hi FROM w_coll GROUP BY comm_id),
        cuts AS (
            SELECT comm_id, lo AS seg_start, 0 AS kind FROM span
            UNION ALL SELECT comm_id, start_s, 1 FROM slow_periods
            UNION ALL SELECT comm_id, end_s, 2 FROM slow_periods),
        segs AS (
            SELECT comm_id, row_number() OVER (PARTITION BY comm_id ORDER BY seg_start, kind) - 1 AS segment,
                   seg_start, kind, kind = 1 AS slow,
                   lead(seg_start) OVER (PARTITION BY comm_id ORDER BY seg_start, kind) AS seg_next
            FROM cuts),
        rec AS (SELECT r.*, coalesce(o.t_s, r.t_s) AS op_t
                FROM w_coll r LEFT JOIN w_ops o USING (comm_id, coll, coll_sn)),
        tagged AS (
            SELECT r.*, g.segment, g.slow
            FROM rec r JOIN segs g ON r.comm_id = g.comm_id AND r.op_t >= g.seg_start
                 AND (g.kind <> 2 OR r.op_t > g.seg_start)
                 AND (g.seg_next IS NULL OR (g.kind = 1 AND r.op_t <= g.seg_next)
                      OR (g.kind <> 1 AND r.op_t < g.seg_next))),
        joined AS (
            SELECT comm_id, segment, coll, size_bucket, median(busbw) AS joined
            FROM (SELECT comm_id, segment, coll, coll_sn, any_value(size_bucket) AS size_bucket,
                         max(busbw_gbs) AS busbw FROM tagged GROUP BY comm_id, segment, coll, coll_sn HAVING count(*) >= 2)
            GROUP BY ALL),
        fastest AS (
            SELECT comm_id, segment, coll, coll_sn, min(exec_time_us) AS exec_min_us
            FROM tagged GROUP BY comm_id, segment, coll, coll_sn HAVING count(*) >= 2),
        credit AS (
            SELECT t.comm_id, t.segment, t.coll, t.rank,
                   {_last_credit('t.exec_time_us = f.exec_min_us', 't.comm_id, t.segment, t.coll, t.coll_sn')} AS c
            FROM tagged t JOIN fastest f USING (comm_id, segment, coll, coll_sn)),
        lastshare AS (SELECT comm_id, segment, coll, rank, avg(c)::DOUBLE AS share FROM credit GROUP BY ALL)
        SELECT t.comm_id, t.segment, t.slow, min(t.t_s) AS start_s, max(t.t_s) AS end_s, t.coll, t.size_bucket,
               t.rank, count(*) AS records, median(t.busbw_gbs) AS busbw_median_gbs,
               any_value(j.joined) AS joined_busbw_median_gbs, any_value(ls.share) AS last_share
        FROM tagged t LEFT JOIN joined j USING (comm_id, segment, coll, size_bucket)
             LEFT JOIN lastshare ls USING (comm_id, segment, coll, rank)
        GROUP BY t.comm_id, t.segment, t.slow, t.coll, t.size_bucket, t.rank
        ORDER BY t.comm_id, t.segment, t.coll, t.size_bucket, t.rank""")
    return [SegmentRow(**r) for r in rows]



@dataclass(frozen=True, slots=True)
class PhaseRow:
    """A communication phase: a stretch of time without idle gaps whose mix of (communicator, collective,
    size bucket) stays the same."""

    phase: int
    start_s: float
    end_s: float
    records: int
    signature: str

    def to_dict(self) -> dict[str, Any]:
        return {"phase": self.phase, "start_s": self.start_s, "end_s": self.end_s, "records": self.records,
                "signature": self.signature}


def phases(con: Any, *, bin_s: float = 1.0, gap_s: float | None = None, min_fraction: float = 0.01) -> list[PhaseRow]:
    """Group the window's collectives into phases, as NIXT fingerprints workload phases: an idle gap longer
    than ``gap_s`` (default: max(0.5 s, 2.5 × the median interval between a process's dump ticks)) starts a
    new phase; within a gap-free stretch, time bins of ``bin_s`` carry a signature (the set of
    communicator:collective:size entries holding at least ``min_fraction`` of the bin's records) and a change
    of signature starts a new phase."""
    if gap_s is None:
        gap_s = max(0.5, 2.5 * dump_tick_s(con))
    rows = _dicts(con, f"""
        WITH r AS (SELECT t_s, comm_id, coll, size_bucket FROM w_coll),
        g AS (SELECT *, CASE WHEN t_s - lag(t_s) OVER (ORDER BY t_s) > {float(gap_s)!r} THEN 1 ELSE 0 END AS brk FROM r),
        s AS (SELECT *, sum(brk) OVER (ORDER BY t_s ROWS UNBOUNDED PRECEDING) AS stretch FROM g),
        b AS (SELECT *, CAST(floor((t_s - min(t_s) OVER (PARTITION BY stretch)) / {float(bin_s)!r}) AS BIGINT) AS bin
              FROM s),
        e AS (SELECT stretch, bin, comm_id, coll, size_bucket, count(*) AS n FROM b GROUP BY ALL),
        sig AS (SELECT stretch, bin, sum(n) AS n,
                       string_agg(CASE WHEN n >= {float(min_fraction)!r} * bin_total THEN comm_id || ':' || coll || ':' || size_bucket END,
                                  ' ' ORDER BY comm_id, coll, size_bucket) AS signature
                FROM (SELECT *, sum(n) OVER (PARTITION BY stretch, bin) AS bin_total FROM e) GROUP BY stretch, bin),
        times AS (SELECT stretch, bin, min(t_s) AS lo, max(t_s) AS hi FROM b GROUP BY stretch, bin),
        -- A partial bin (fewer than half the stretch's median records, e.g. the last seconds of a run) takes the
        -- signature of the bin before it (or after it, at the start of a stretch).
        part AS (SELECT stretch, bin, n, CASE WHEN n >= 0.5 * median(n) OVER (PARTITION BY stretch) THEN signature END AS s0
                 FROM sig),
        filled AS (SELECT stretch, bin, n,
                          coalesce(s0, last_value(s0 IGNORE NULLS) OVER (PARTITION BY stretch ORDER BY bin
                                       ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW),
                                   first_value(s0 IGNORE NULLS) OVER (PARTITION BY stretch ORDER BY bin
                                       ROWS BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING)) AS signature
                   FROM part),
        runs AS (SELECT sig.*, times.lo, times.hi,
                        CASE WHEN signature IS DISTINCT FROM lag(signature) OVER (ORDER BY sig.stretch, sig.bin)
                               OR sig.stretch <> lag(sig.stretch) OVER (ORDER BY sig.stretch, sig.bin) THEN 1 ELSE 0 END AS new
                 FROM filled AS sig JOIN times USING (stretch, bin)),
        numbered AS (SELECT *, sum(new) OVER (ORDER BY stretch, bin ROWS UNBOUNDED PRECEDING) AS phase FROM runs)
        SELECT CAST(phase AS INTEGER) - 1 AS phase, min(lo) AS start_s, max(hi) AS end_s, CAST(sum(n) AS BIGINT) AS records,
               any_value(signature) AS signature
        FROM numbered GROUP BY phase ORDER BY phase""")
    return [PhaseRow(**r) for r in rows]

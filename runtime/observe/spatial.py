"""Spatial analysis: which ranks (processes) and hosts arrive late at their collectives (stragglers).

>>> row = StragglerRow("c", 3, "h1", 7, 100, 90, 0.9, 0.8, 0.2, 10.0, 0.05, 1.0, True)
>>> nodes([row])[0]["suspect"]
True
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from runtime.observe._window import _dicts

__all__ = ["StragglerRow", "nodes", "stragglers"]


@dataclass(frozen=True, slots=True)
class StragglerRow:
    """One process (host, pid) in one communicator: how often it arrived late, with a confidence.

    ``late_share`` = share of its joined collectives in which it arrived later than the median rank by more
    than ``min_lateness`` of the median exec time; ``p0`` = the communicator's median late share (what an
    ordinary rank shows); ``confidence`` = 1 − Bonferroni-corrected one-sided binomial p-value of
    ``late`` successes in ``ops`` trials at rate ``p0``. ``flagged``: late share ≥ ``min_share`` and
    confidence ≥ ``min_confidence``."""

    comm_id: str
    rank: int
    hostname: str | None
    pid: int | None
    ops: int
    late: int
    late_share: float
    last_share: float
    lateness_median: float
    busbw_median_gbs: float
    p0: float
    confidence: float
    flagged: bool

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__slots__}  # type: ignore[attr-defined]


def stragglers(con: Any, *, min_lateness: float = 0.05, min_share: float = 0.5,
               min_confidence: float = 0.99) -> list[StragglerRow]:
    """Straggler localisation per communicator and rank (see :class:`StragglerRow`), most suspicious first."""
    from scipy.stats import binom

    rows = _dicts(con, f"""
        WITH a AS (
            SELECT comm_id, rank, any_value(hostname) AS hostname, any_value(pid) AS pid, count(*) AS ops,
                   sum((lateness > {float(min_lateness)!r})::INT) AS late, avg(last_credit)::DOUBLE AS last_share,
                   median(lateness) AS lateness_median, median(busbw_gbs) AS busbw_median_gbs
            FROM w_lateness GROUP BY comm_id, rank)
        SELECT a.*, a.late / a.ops AS late_share,
               median(a.late / a.ops) OVER (PARTITION BY comm_id) AS p0,
               count(*) OVER (PARTITION BY comm_id) AS nranks
        FROM a ORDER BY comm_id, rank""")
    out = []
    for r in rows:
        p0 = min(max(float(r["p0"]), 1e-3), 0.999)
        pval = float(binom.sf(int(r["late"]) - 1, int(r["ops"]), p0)) if r["late"] > 0 else 1.0
        conf = max(0.0, 1.0 - pval * int(r["nranks"]))
        share = float(r["late_share"])
        out.append(StragglerRow(r["comm_id"], int(r["rank"]), r["hostname"], r["pid"], int(r["ops"]), int(r["late"]),
                                share, float(r["last_share"]), float(r["lateness_median"]),
                                float(r["busbw_median_gbs"]), float(r["p0"]), conf,
                                share >= min_share and conf >= min_confidence))
    out.sort(key=lambda s: (not s.flagged, -s.late_share, s.comm_id, s.rank))
    return out


def nodes(rows: Sequence[StragglerRow]) -> list[dict[str, Any]]:
    """Per host: processes seen, processes flagged, mean late share; a host is suspect when at least half
    of its processes are flagged (a host-level cause, e.g. a slow NIC or CPU contention)."""
    by: dict[str, list[StragglerRow]] = {}
    for r in rows:
        by.setdefault(r.hostname or "?", []).append(r)
    out = []
    for host in sorted(by):
        rs = by[host]
        procs = {(r.pid, r.rank) for r in rs}
        flagged = {(r.pid, r.rank) for r in rs if r.flagged}
        out.append({"hostname": host, "processes": len(procs), "flagged": len(flagged),
                    "late_share_mean": sum(r.late_share for r in rs) / len(rs),
                    "suspect": len(flagged) * 2 >= len(procs) and bool(flagged)})
    return out


"""The ``loopcoll inspect`` report: one JSON-ready dict (``loopcoll.inspect/1``) and its text rendering.

>>> import tempfile
>>> from runtime.observe.db import connect
>>> from runtime.observe.ingest import ingest
>>> from runtime.observe.synthetic import SyntheticSpec, write_logs
>>> d = tempfile.mkdtemp()
>>> _ = write_logs(d, SyntheticSpec(nranks=4, ncolls=200, stragglers=(2,), slow_periods=((30.0, 60.0, 0.5),)))
>>> con = connect(); s = ingest(con, [d])
>>> doc = build_report(con, ingest_summary=s)
>>> len(doc["slow_periods"]), [r["rank"] for r in doc["stragglers"] if r["flagged"]]
(1, [2])
>>> "Slow periods" in render_text(doc)
True
"""

from __future__ import annotations

import datetime as _dt
from typing import Any

from runtime.observe import analyze as A
from runtime.observe.ingest import IngestSummary

__all__ = ["REPORT_FORMAT", "build_report", "render_text"]

REPORT_FORMAT = "loopcoll.inspect/1"
_MAX_RANK_ROWS = 8


def _r(x: Any, nd: int = 3) -> Any:
    return round(float(x), nd) if x is not None else None


def build_report(con: Any, *, ingest_summary: IngestSummary | None = None, bin_s: float | None = None,
                 min_drop: float = 0.1, h: float = 5.0, signal: str = "median", min_lateness: float = 0.05,
                 min_share: float = 0.5, min_confidence: float = 0.99) -> dict[str, Any]:
    """Run every analysis on the current window (:func:`runtime.observe.select_window`) into one dict."""
    win = con.execute("SELECT count(*), min(t_s), max(t_s), count(DISTINCT comm_id), "
                      "count(DISTINCT (hostname, pid)) FROM w_coll").fetchone()
    n_p2p = con.execute("SELECT count(*) FROM w_p2p").fetchone()[0]
    doc: dict[str, Any] = {"format": REPORT_FORMAT,
                           "ingest": ingest_summary.to_dict() if ingest_summary is not None else None,
                           "window": {"records": int(win[0]), "p2p_records": int(n_p2p), "start_s": win[1],
                                      "end_s": win[2], "comms": int(win[3]), "processes": int(win[4])}}
    bw = A.auto_bin_s(con) if bin_s is None else float(bin_s)
    doc["parameters"] = {"bin_s": round(bw, 6), "min_drop": min_drop, "h": h, "signal": signal,
                         "min_lateness": min_lateness, "min_share": min_share, "min_confidence": min_confidence}
    if not win[0]:
        doc.update(summary=[], slow_periods=[], segments=[], stragglers=[], nodes=[], phases=[])
        return doc
    doc["summary"] = [{k: (_r(v, 6) if isinstance(v, float) else v) for k, v in row.items()} for row in A.summary(con)]
    periods = A.slow_periods(con, bin_s=bw, min_drop=min_drop, h=h, signal=signal)
    doc["slow_periods"] = [p.to_dict() for p in periods]
    doc["segments"] = [s.to_dict() for s in A.segments(con)]
    rows = A.stragglers(con, min_lateness=min_lateness, min_share=min_share, min_confidence=min_confidence)
    doc["stragglers"] = [r.to_dict() for r in rows]
    doc["nodes"] = A.nodes(rows)
    doc["phases"] = [p.to_dict() for p in A.phases(con)]
    return doc


def _iso(t: float | None) -> str:
    if t is None:
        return "-"
    return _dt.datetime.fromtimestamp(t, tz=_dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _table(headers: list[str], rows: list[list[Any]]) -> list[str]:
    cells = [[str(c) for c in r] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]
    fmt = "  ".join("{:<%d}" % w if i == 0 else "{:>%d}" % w for i, w in enumerate(widths))
    return ["  " + fmt.format(*headers)] + ["  " + fmt.format(*r) for r in cells]


def render_text(doc: dict[str, Any]) -> str:
    """A readable report: window, summary, slow periods, segments, stragglers, phases."""
    w = doc["window"]
    t0 = w["start_s"]
    out: list[str] = []
    ing = doc.get("ingest")
    if ing:
        rej = ", ".join(f"{k} {v}" for k, v in ing["rejected"].items()) or "none"
        out.append(f"ingest: {ing['files_read']} file(s) read, {ing['files_skipped']} unchanged; added "
                   f"{ing['records']['coll']} collective, {ing['records']['p2p']} p2p, {ing['records']['telemetry']} "
                   f"telemetry records in {ing['seconds']:.2f} s; rejected: {rej}")
    if not w["records"]:
        out.append("no collective records in the window")
        return "\n".join(out) + "\n"
    span = w["end_s"] - t0
    out.append(f"window: {w['records']} collective records, {w['p2p_records']} p2p records, {w['processes']} "
               f"process(es), {w['comms']} communicator(s), {_iso(t0)} .. {_iso(w['end_s'])} ({span:.3f} s); "
               f"times below are seconds from the window start")
    out.append("")
    out.append("Summary (communicator shape x collective x message size, per-rank records)")
    out += _table(["comm type", "ranks", "nodes", "coll", "size", "records", "time s", "exec p50 us",
                   "busbw p10/p50/p90 GB/s"],
                  [[s["comm_type"], s["n_ranks"], s["nnodes"], s["coll"], s["size_bucket"], s["records"],
                    f"{s['total_time_s']:.3f}", f"{s['exec_median_us']:.1f}",
                    f"{s['busbw_p10_gbs']:.1f} / {s['busbw_p50_gbs']:.1f} / {s['busbw_p90_gbs']:.1f}"]
                   for s in doc["summary"]])
    p = doc["parameters"]
    out.append("")
    out.append(f"Slow periods (two-sided Page CUSUM on per-collective busbw / baseline, signal {p['signal']}, "
               f"bins {p['bin_s']:.2f} s, min drop {100 * p['min_drop']:.0f} %, h {p['h']})")
    if not doc["slow_periods"]:
        out.append("  none")
    for sp in doc["slow_periods"]:
        out.append(f"  comm {sp['comm_id']} ({sp['comm_name']}): +{sp['start_s'] - t0:.3f} s .. "
                   f"+{sp['end_s'] - t0:.3f} s ({sp['duration_s']:.3f} s), busbw -{100 * sp['drop']:.1f} % "
                   f"({', '.join(sp['series'])}); {_iso(sp['start_s'])} .. {_iso(sp['end_s'])}")
    out += _segment_lines(doc["segments"], t0)
    out.append("")
    out.append(f"Suspected stragglers (arrive > {100 * p['min_lateness']:.0f} % of the median exec time later than "
               f"the median rank in >= {100 * p['min_share']:.0f} % of collectives, confidence >= {p['min_confidence']})")
    flagged = [s for s in doc["stragglers"] if s["flagged"]]
    if flagged:
        out += _table(["comm", "rank", "host", "pid", "collectives", "late", "last", "lateness p50", "confidence"],
                      [[s["comm_id"], s["rank"], s["hostname"], s["pid"], s["ops"], f"{100 * s['late_share']:.1f} %",
                        f"{100 * s['last_share']:.1f} %", f"{100 * s['lateness_median']:.1f} %",
                        f"{s['confidence']:.4f}"] for s in flagged])
    elif doc["stragglers"]:
        top = max(doc["stragglers"], key=lambda s: s["late_share"])
        out.append(f"  none (highest late share: rank {top['rank']} of {top['comm_id']}, "
                   f"{100 * top['late_share']:.1f} %, last in {100 * top['last_share']:.1f} %)")
    else:
        out.append("  none (no collective was recorded by two or more ranks)")
    suspect = [n for n in doc["nodes"] if n["suspect"]]
    if suspect:
        out.append("  suspect hosts: " + ", ".join(f"{n['hostname']} ({n['flagged']}/{n['processes']} processes)"
                                                   for n in suspect))
    out.append("")
    out.append("Communication phases (idle gaps and changes of the communicator:collective:size mix)")
    out += _table(["phase", "from", "to", "records", "signature"],
                  [[ph["phase"], f"+{ph['start_s'] - t0:.3f}", f"+{ph['end_s'] - t0:.3f}", ph["records"],
                    ph["signature"] if len(ph["signature"] or "") <= 100 else ph["signature"][:97] + "..."]
                   for ph in doc["phases"]])
    return "\n".join(out) + "\n"


def _segment_lines(segs: list[dict[str, Any]], t0: float) -> list[str]:
    """The per-communicator segment tables of :func:`render_text` (per rank, or grouped for many ranks)."""
    out: list[str] = []
    comms = sorted({s["comm_id"] for s in segs})
    for comm in comms:
        rows = [s for s in segs if s["comm_id"] == comm]
        ranks = sorted({s["rank"] for s in rows})
        out.append("")
        out.append(f"Segments of comm {comm}: median busbw GB/s per rank; joined = median over collectives of "
                   f"the max over ranks (the transfer itself); last = share of collectives the rank arrived last")
        if len(ranks) <= _MAX_RANK_ROWS:
            out += _table(["seg", "state", "from", "to", "coll:size", "rank", "records", "busbw", "joined", "last"],
                          [[s["segment"], "slow" if s["slow"] else "normal", f"+{s['start_s'] - t0:.3f}",
                            f"+{s['end_s'] - t0:.3f}", f"{s['coll']}:{s['size_bucket']}", s["rank"], s["records"],
                            f"{s['busbw_median_gbs']:.2f}",
                            "-" if s["joined_busbw_median_gbs"] is None else f"{s['joined_busbw_median_gbs']:.2f}",
                            "-" if s["last_share"] is None else f"{100 * s['last_share']:.0f} %"] for s in rows])
        else:
            groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
            for s in rows:
                groups.setdefault((s["segment"], s["slow"], s["coll"], s["size_bucket"]), []).append(s)
            table = []
            for (seg, slow, coll, size), g in sorted(groups.items()):
                meds = sorted(x["busbw_median_gbs"] for x in g)
                table.append([seg, "slow" if slow else "normal", f"+{min(x['start_s'] for x in g) - t0:.3f}",
                              f"+{max(x['end_s'] - t0 for x in g):.3f}", f"{coll}:{size}", len(g),
                              f"{meds[0]:.1f} / {meds[len(meds) // 2]:.1f} / {meds[-1]:.1f}",
                              "-" if g[0]["joined_busbw_median_gbs"] is None else f"{g[0]['joined_busbw_median_gbs']:.2f}"])
            out += _table(["seg", "state", "from", "to", "coll:size", "ranks", "rank busbw min/med/max", "joined"], table)
    return out

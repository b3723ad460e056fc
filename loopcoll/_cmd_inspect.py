"""``loopcoll inspect``: NCCL Inspector logs and loopcoll telemetry in DuckDB — report, plots, ad-hoc SQL.

Examples
--------
>>> import tempfile, io, contextlib
>>> from runtime.observe import SyntheticSpec, write_logs
>>> d = tempfile.mkdtemp()
>>> _ = write_logs(d, SyntheticSpec(nranks=2, ncolls=20))
>>> buf = io.StringIO()
>>> from loopcoll.cli import main
>>> with contextlib.redirect_stdout(buf):
...     rc = main(["inspect", d, "--sql", "SELECT coll, count(*) AS n FROM coll GROUP BY coll ORDER BY coll"])
>>> rc, buf.getvalue().split()
(0, ['coll', 'n', 'AllGather', '40', 'AllReduce', '40'])
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import sys
from typing import Any

from loopcoll._common import print_json
from synth.errors import LoopcollError

__all__ = ["parse_time", "register"]


def parse_time(text: str, t0_s: float | None) -> float:
    """``+S`` (seconds after the first record), Unix seconds, or an ISO 8601 time (UTC when no zone).

    >>> parse_time("+2.5", 100.0), parse_time("1800000000", None)
    (102.5, 1800000000.0)
    >>> parse_time("2027-01-15T08:00:00Z", None)
    1800000000.0
    """
    s = text.strip()
    try:
        if s.startswith("+"):
            if t0_s is None:
                raise LoopcollError(f"time {text!r}: relative times need records in the database")
            return t0_s + float(s[1:])
        return float(s)
    except ValueError:
        pass
    try:
        t = _dt.datetime.fromisoformat(s.replace("Z", "+00:00"))
    except ValueError:
        raise LoopcollError(f"bad time {text!r}: expected +SECONDS, Unix seconds or ISO 8601") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=_dt.timezone.utc)
    return t.timestamp()


def register(sub: Any) -> None:
    p = sub.add_parser("inspect", help="ingest NCCL Inspector logs / telemetry into DuckDB and report",
                       description="Ingest NCCL Inspector JSONL (v4.0 and v4.3, plain or gzip) and loopcoll "
                       "telemetry JSONL into a DuckDB database (incremental), then print a report: summary, "
                       "slow periods, per-rank segments, suspected stragglers, communication phases. "
                       "See docs/observe.md.")
    p.add_argument("inputs", nargs="*", metavar="DIR|FILE|GLOB", help="Inspector logs or telemetry files")
    p.add_argument("--db", metavar="F", help="DuckDB database file (kept between runs; default in-memory)")
    p.add_argument("--kind", choices=("inspector", "telemetry"), help="force the input kind (default: sniffed)")
    p.add_argument("--since", metavar="T", help="window start: +S after the first record, Unix s, or ISO 8601")
    p.add_argument("--until", metavar="T", help="window end (same forms)")
    p.add_argument("--json", action="store_true", help="print the report (or the query result) as JSON")
    p.add_argument("--plot", metavar="DIR", help="write PNG plots (busbw timeline, per-rank heatmap) to DIR")
    p.add_argument("--sql", metavar="QUERY", help="run an ad-hoc SQL query against the database and print it")
    p.add_argument("--bin-s", type=float, metavar="S", help="time bin width (default: auto)")
    p.add_argument("--min-drop", type=float, default=0.1, metavar="F", help="smallest busbw drop to detect (0.1)")
    p.add_argument("--signal", choices=("median", "max", "min"), default="median",
                   help="per-collective busbw followed over time: median over ranks (default), max (the "
                   "last rank to arrive: the transfer alone), min (the first: transfer plus the longest wait)")
    p.add_argument("--threads", type=int, metavar="N", help="DuckDB threads (default: all cores)")
    p.set_defaults(func=_run)


def _print_rows(cols: list[str], rows: list[tuple[Any, ...]], as_json: bool) -> None:
    if as_json:
        print_json({"columns": cols, "rows": [[_jsonable(v) for v in r] for r in rows]})
        return
    cells = [[("NULL" if v is None else f"{v:.6g}" if isinstance(v, float) else str(v)) for v in r] for r in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(cols)]
    print("  ".join(c.ljust(w) for c, w in zip(cols, widths)).rstrip())
    for r in cells:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip())


def _jsonable(v: Any) -> Any:
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    return str(v)


def _run(args: argparse.Namespace) -> int:
    from runtime.observe import connect, ingest, query, select_window, slow_periods
    from runtime.observe.report import build_report, render_text

    if not args.inputs and not args.db:
        raise LoopcollError("inspect: give input files/directories, or --db with an existing database")
    con = connect(args.db, threads=args.threads)
    try:
        summary = ingest(con, args.inputs, kind=args.kind) if args.inputs else None
        t0 = con.execute("SELECT min(t_s) FROM coll_records").fetchone()[0]
        since = parse_time(args.since, t0) if args.since else None
        until = parse_time(args.until, t0) if args.until else None
        select_window(con, since, until)
        if args.sql:
            # The detected periods (and the per-collective series) are there to be queried too.
            slow_periods(con, bin_s=args.bin_s, min_drop=args.min_drop, signal=args.signal)
            cols, rows = query(con, args.sql)
            _print_rows(cols, rows, args.json)
            return 0
        doc = build_report(con, ingest_summary=summary, bin_s=args.bin_s, min_drop=args.min_drop,
                           signal=args.signal)
        if args.plot:
            from runtime.observe.plots import write_plots

            doc["plots"] = write_plots(con, args.plot, bin_s=doc["parameters"]["bin_s"], signal=args.signal)
        if args.json:
            json.dump(doc, sys.stdout, sort_keys=True, default=_jsonable)
            sys.stdout.write("\n")
        else:
            sys.stdout.write(render_text(doc))
            for path in doc.get("plots", []):
                print(f"plot: {path}")
        return 0
    finally:
        con.close()

"""AllGather benchmark: ForestColl cold vs warm (from the healthy schedule) under fail1/2/3.

Run ``python benchmarks/allgather.py [--quick] [--repeats N] [--only SPEC ...]``; prints a table
and writes ``benchmarks/results/allgather.json`` and ``.md`` (``--only`` replaces just those
topologies' rows). Times are medians of the repeats.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from synth.figures import TreeFigures  # noqa: E402
from synth.forestcoll_warm import synthesize_allgather  # noqa: E402
from synth.result import SynthResult  # noqa: E402
from synth.schedule import Schedule  # noqa: E402
from synth.topologies import load_topology  # noqa: E402

FULL = ["hpn:1x2x8", "hpn:1x4x8", "hpn:1x8x8", "hpn:1x16x8", "hpn:2x16x8", "dgx-a100:2", "dgx-a100:4"]
QUICK = ["hpn:1x2x8", "hpn:1x4x8", "hpn:1x8x8", "dgx-a100:2", "dgx-a100:4"]
SCENARIOS = ["healthy", "fail1", "fail2", "fail3"]
COLUMNS = ["topology", "scenario", "N", "k", "trees", "cold_s", "warm_s", "speedup", "reused_edges_frac",
           "algbw", "optimal", "ratio"]


def _reused_edges_frac(res: SynthResult) -> float:
    assert isinstance(res.figures, TreeFigures), res.message
    return res.figures.reused_edges_frac or 0.0


def _timed(fn, repeats: int):  # type: ignore[no-untyped-def]
    times, res = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        res = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), res


def run(specs: list[str], repeats: int) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for spec in specs:
        reps = 1 if spec == "hpn:2x16x8" else repeats
        topo = load_topology(spec)
        cold_s, healthy = _timed(lambda: synthesize_allgather(topo), reps)
        prev = Schedule.from_json(healthy.schedule.to_json())
        for scen in SCENARIOS:
            t = topo if scen == "healthy" else load_topology(spec, [scen])
            if scen == "healthy":
                c_s, cold = cold_s, healthy
                w_s, warm = None, None
            else:
                c_s, cold = _timed(lambda: synthesize_allgather(t), reps)
                w_s, warm = _timed(lambda: synthesize_allgather(t, warm_start=prev), reps)
                assert warm.schedule.rate_GBps(t) == cold.schedule.rate_GBps(t), "warm must equal cold exactly"
            res = warm or cold
            rows.append({
                "topology": spec, "scenario": scen, "N": t.nranks, "k": res.schedule.nchunks,
                "trees": len(res.schedule.routes), "cold_s": round(c_s, 4),
                "warm_s": None if w_s is None else round(w_s, 4),
                "speedup": None if w_s is None else round(c_s / w_s, 2),
                "reused_edges_frac": None if warm is None else round(_reused_edges_frac(warm), 4),
                "algbw": round(res.algbw_GBps, 3), "optimal": round(res.optimal_algbw_GBps, 3),
                "ratio": round(res.algbw_GBps / res.optimal_algbw_GBps, 6),
            })
            print(_line(rows[-1]), flush=True)
    return rows


def _line(row: dict[str, object]) -> str:
    return " | ".join("-" if row[c] is None else str(row[c]) for c in COLUMNS)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="skip hpn:1x16x8 and hpn:2x16x8")
    ap.add_argument("--repeats", type=int, default=3, help="runs per timing (median); default 3")
    ap.add_argument("--only", nargs="*", help="topology specs to run instead of the default list")
    args = ap.parse_args(argv)
    specs = args.only or (QUICK if args.quick else FULL)
    print(" | ".join(COLUMNS))
    rows = run(specs, max(1, args.repeats))
    out = ROOT / "benchmarks" / "results"
    out.mkdir(parents=True, exist_ok=True)
    if args.only:
        # A partial run replaces its topologies' rows and keeps the others.
        try:
            old = json.loads((out / "allgather.json").read_text())["rows"]
        except (OSError, ValueError, KeyError, TypeError):
            old = []
        rows = [r for r in old if r.get("topology") not in set(specs)] + rows
        order = {spec: i for i, spec in enumerate(FULL)}
        rows.sort(key=lambda r: (order.get(str(r["topology"]), len(order)), SCENARIOS.index(str(r["scenario"]))))
    doc = {"repeats": args.repeats, "rows": rows}
    (out / "allgather.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    md = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    md += ["| " + _line(r) + " |" for r in rows]
    (out / "allgather.md").write_text(
        "# AllGather: ForestColl cold vs warm (median of %d runs; warm from the healthy schedule)\n\n" % args.repeats
        + "\n".join(md) + "\n"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

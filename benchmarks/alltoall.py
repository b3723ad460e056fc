"""Benchmark: AllToAll by column generation, cold vs warm, on hpn topologies under fail1/2/3.

For each size, a cold synthesis on the healthy topology provides the warm state; then, per failure
scenario and backend, three syntheses of the degraded topology are timed (median of ``--repeats``):
cold, warm (the default: the certified local repair when it applies, ``warm_mode`` says which
ran) and the full warm column generation (``local_repair=False``), both warm from the healthy
result. OR-Tools runs with a time limit and is reported as "did not finish within X s" when it
hits it.

Usage::

    python benchmarks/alltoall.py [--quick] [--repeats 3] [--sizes 1x2x8,1x8x8] [--solvers highs,ortools]

Writes ``benchmarks/results/alltoall.json`` and ``alltoall.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from synth.alltoall_cg import synthesize_alltoall  # noqa: E402
from synth.figures import AllToAllFigures  # noqa: E402
from synth.result import Status, SynthResult  # noqa: E402
from synth.topologies import load_topology  # noqa: E402

SIZES = ("1x2x8", "1x8x8", "1x16x8", "2x16x8", "2x32x8")
FAILURES = ("fail1", "fail2", "fail3")
OUT = Path(__file__).resolve().parent / "results"


def _timed(fn: Any, repeats: int) -> tuple[float, SynthResult]:
    times, res = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        res = fn()
        times.append(time.perf_counter() - t0)
    assert res is not None
    return statistics.median(times), res


def _figures(res: SynthResult) -> AllToAllFigures:
    assert isinstance(res.figures, AllToAllFigures), res.message
    return res.figures


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="sizes 1x2x8,1x8x8 and one repeat")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--repeats-large", type=int, default=3, help="repeats for sizes of 512 GPUs and more")
    ap.add_argument("--sizes", default=",".join(SIZES))
    ap.add_argument("--solvers", default="highs,ortools")
    ap.add_argument("--ortools-limit", type=float, default=60.0, help="seconds; OR-Tools runs above 128 GPUs skipped")
    args = ap.parse_args(argv)
    sizes = ["1x2x8", "1x8x8"] if args.quick else args.sizes.split(",")
    repeats = 1 if args.quick else args.repeats
    rows: list[dict[str, Any]] = []
    for size in sizes:
        spec = f"hpn:{size}"
        base = load_topology(spec)
        n = base.nranks
        reps = args.repeats_large if n >= 512 else repeats
        for solver in args.solvers.split(","):
            if solver == "ortools" and n > 128:
                for failure in FAILURES:
                    rows.append({"topology": spec, "gpus": n, "failure": failure, "solver": solver,
                                 "note": "not run: OR-Tools (Python-built MathOpt model) skipped above 128 GPUs"})
                continue
            limit = args.ortools_limit if solver == "ortools" else None
            healthy = synthesize_alltoall(base, solver=solver, time_limit_s=limit)
            for failure in FAILURES:
                topo = load_topology(spec, [failure])
                cold_s, cold = _timed(lambda: synthesize_alltoall(topo, solver=solver, time_limit_s=limit), reps)
                warm_s, warm = _timed(lambda: synthesize_alltoall(topo, solver=solver, time_limit_s=limit,
                                                                  warm_start=healthy), reps)
                full_s, full = _timed(lambda: synthesize_alltoall(topo, solver=solver, time_limit_s=limit,
                                                                  warm_start=healthy, local_repair=False), reps)
                c, w, f = _figures(cold), _figures(warm), _figures(full)
                row = {
                    "topology": spec, "gpus": n, "failure": failure, "solver": solver, "repeats": reps,
                    "cold_s": cold_s, "warm_s": warm_s, "speedup": cold_s / warm_s,
                    "warm_mode": w.warm_mode, "repaired_blocks": w.repaired_blocks or 0,
                    "full_warm_s": full_s, "full_speedup": cold_s / full_s,
                    "full_warm_lp_algbw_GBps": f.lp_algbw_GBps,
                    "lp_rel_diff": max(abs(x.lp_algbw_GBps / c.lp_algbw_GBps - 1) for x in (w, f)),
                    "cold_cg_s": c.cg_time_s, "warm_cg_s": w.cg_time_s + w.setup_time_s,
                    "cold_iterations": c.cg_iterations, "warm_iterations": w.cg_iterations,
                    "cold_pivots": c.lp_pivots, "warm_pivots": w.lp_pivots,
                    "lp_algbw_GBps": c.lp_algbw_GBps, "warm_lp_algbw_GBps": w.lp_algbw_GBps,
                    "rounded_algbw_GBps": cold.algbw_GBps, "warm_rounded_algbw_GBps": warm.algbw_GBps,
                    "gap_pct": 100 * c.gap, "warm_gap_pct": 100 * w.gap,
                    "max_steps": c.max_steps, "status": cold.status.value, "warm_status": warm.status.value,
                }
                if Status.TIME_LIMIT in (cold.status, warm.status):
                    row["note"] = f"did not finish within {limit:g} s"
                rows.append(row)
                print(json.dumps(row), flush=True)
    OUT.mkdir(parents=True, exist_ok=True)
    doc = {"machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()},
           "command": "python benchmarks/alltoall.py " + " ".join(argv if argv is not None else sys.argv[1:]),
           "rows": rows}
    (OUT / "alltoall.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    lines = ["| topology | fail | solver | cold s | warm s | speedup | warm mode | full warm s | full speedup | "
             "iters c/w | pivots c/w | steps | LP algbw | LP rel. diff | rounded cold/warm | gap % cold/warm | note |",
             "|" + "---|" * 17]
    for r in rows:
        if "cold_s" not in r:
            lines.append(f"| {r['topology']} | {r['failure']} | {r['solver']} |" + " |" * 13 + f" {r['note']} |")
            continue
        mode = r["warm_mode"] + (f" ({r['repaired_blocks']} blocks)" if r["warm_mode"] == "repair" else "")
        lines.append(
            f"| {r['topology']} | {r['failure']} | {r['solver']} | {r['cold_s']:.3f} | {r['warm_s']:.4f} | "
            f"**{r['speedup']:.1f}x** | {mode} | {r['full_warm_s']:.3f} | {r['full_speedup']:.1f}x | "
            f"{r['cold_iterations']}/{r['warm_iterations']} | {r['cold_pivots']}/{r['warm_pivots']} | {r['max_steps']} | "
            f"{r['lp_algbw_GBps']:.4f} | {r['lp_rel_diff']:.0e} | {r['rounded_algbw_GBps']:.4f}/"
            f"{r['warm_rounded_algbw_GBps']:.4f} | {r['gap_pct']:.3f}/{r['warm_gap_pct']:.3f} | {r.get('note', '')} |")
    gaps = [r["gap_pct"] for r in rows if "gap_pct" in r] + [r["warm_gap_pct"] for r in rows if "warm_gap_pct" in r]
    big = [r for r in rows if r.get("failure") == "fail2" and r.get("gpus", 0) >= 128 and "speedup" in r
           and r["solver"] == "highs"]
    lines.append("")
    lines.append(f"Worst rounding gap: {max(gaps):.3f} % (nchunks=10). Repeats: {repeats} (512 GPUs: "
                 f"{args.repeats_large}); times are medians. Warm = warm start from the healthy topology's "
                 "result; full warm = the same with local_repair=False.")
    if big:
        worst = min(big, key=lambda r: r["speedup"])
        lines.append(f"Smallest warm speedup after fail2 at >= 128 GPUs (HiGHS): {worst['speedup']:.1f}x "
                     f"({worst['topology']}).")
    (OUT / "alltoall.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Benchmark: the first (cold) synthesis of a large job, and the warm one after fail2 (issue 31, "Scale").

Per hpn size and collective, one fresh process per case (so that its peak RSS is its own) runs
``synth.synthesize`` cold under ``--time-limit`` (default 60 s: the acceptance's budget), then warm
from that result on the fail2 topology. A row gives the status, the schedule's algbw, the certified
upper bound it is judged against (the exact optimum when ``optimal``), the gap, times (medians of
``--repeats``; ``--repeats-large`` from 1024 GPUs on), the cold solve's CPU seconds (close to its
wall time on an idle machine: the solvers run on one core) and the peak RSS. ``--profile`` adds the cold
solve's ten most expensive functions (cProfile, cumulative) to the Markdown.

Usage::

    python benchmarks/scale.py [--quick] [--sizes 1x16x8,4x16x8] [--collectives allgather,alltoall]
                               [--time-limit 60] [--repeats 3] [--repeats-large 1] [--profile]

``--quick`` runs 128 and 256 GPUs only (CI / ``regenerate.py``). Writes
``benchmarks/results/scale.json`` and ``scale.md``. Figures measured while other work loads the
machine are not figures: run it alone.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks._report import timed, write_results  # noqa: E402
from synth import synthesize  # noqa: E402
from synth.topologies import load_topology  # noqa: E402

SIZES = ("1x16x8", "4x16x8", "8x16x8", "16x16x8")  # 128, 512, 1024, 2048 GPUs
QUICK_SIZES = ("1x16x8", "2x16x8")  # 128, 256
COLLECTIVES = ("allgather", "alltoall")
COLUMNS = ["topology", "N", "collective", "status", "cold_s", "cold_cpu_s", "algbw_GBps", "bound_GBps", "gap_pct",
           "warm_fail2_s", "warm_status", "warm_algbw_GBps", "warm_gap_pct", "peak_rss_MiB"]


def _top_functions(prof: cProfile.Profile, count: int = 10) -> list[str]:
    """The ``count`` most expensive functions by cumulative time, one line each."""
    out = io.StringIO()
    stats = pstats.Stats(prof, stream=out)
    rows = sorted(stats.stats.items(), key=lambda kv: -kv[1][3])  # type: ignore[attr-defined]
    lines = []
    for (path, line, name), (_, calls, tottime, cumtime, _) in rows:
        if name.startswith("<") or path == "~":
            continue
        where = os.path.relpath(path, ROOT) if path.startswith(str(ROOT)) else Path(path).name
        lines.append(f"{cumtime:8.2f} s cum, {tottime:7.2f} s own, {calls:>9} calls  {where}:{line}({name})")
        if len(lines) == count:
            break
    return lines


def case(spec: str, collective: str, limit_s: float, repeats: int, profile: bool) -> dict[str, Any]:
    """One (size, collective): cold under the limit, then warm from it after fail2 (same limit)."""
    topo = load_topology(spec)
    top: list[str] = []
    if profile:
        prof = cProfile.Profile()
        prof.enable()
        synthesize(collective, topo, time_limit_s=limit_s)
        prof.disable()
        top = _top_functions(prof)
    cpu0 = time.process_time()
    cold_s, _, cold = timed(lambda: synthesize(collective, topo, time_limit_s=limit_s), repeats)
    cold_cpu_s = (time.process_time() - cpu0) / repeats  # ≈ the wall time alone, where other work loads the cores
    assert cold.schedule is not None, cold.message
    cold.schedule.validate(topo)
    degraded = load_topology(spec, ["fail2"])
    warm_s, _, warm = timed(lambda: synthesize(collective, degraded, warm_from=cold, time_limit_s=limit_s), repeats)
    return {
        "topology": spec, "N": topo.nranks, "collective": collective, "status": cold.status.value,
        "cold_s": round(cold_s, 3), "cold_cpu_s": round(cold_cpu_s, 3), "algbw_GBps": round(cold.algbw_GBps, 4),
        "bound_GBps": round(cold.optimal_algbw_GBps, 4), "gap_pct": round(cold.gap_pct, 4),
        "warm_fail2_s": round(warm_s, 3), "warm_status": warm.status.value,
        "warm_algbw_GBps": round(warm.algbw_GBps, 4), "warm_gap_pct": round(warm.gap_pct, 4),
        "warm_message": warm.message,
        "peak_rss_MiB": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "repeats": repeats, "message": cold.message, "profile": top,
    }


def _in_child(spec: str, collective: str, limit_s: float, repeats: int, profile: bool) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--case", spec, collective, "--time-limit", str(limit_s),
           "--repeats", str(repeats)] + (["--profile"] if profile else [])
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    if proc.returncode != 0:
        raise SystemExit(f"scale.py: case {spec} {collective} failed:\n{proc.stderr[-2000:]}")
    row: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return row


def _notes(rows: list[dict[str, Any]], limit_s: float, quick: bool) -> str:
    """What the columns mean, each row's message, and the profiles."""
    lines = [f"Time limit {limit_s:g} s for every synthesis{' (quick: 128 and 256 GPUs)' if quick else ''}. "
             "bound_GBps: the certified upper bound each result is judged against (the exact optimum when the "
             "status is optimal). Warm: from the cold result, on the fail2 topology. Peak RSS of the case's "
             "own process.", ""]
    lines += [f"* {r['collective']} on {r['topology']}: {r['message']}" for r in rows]
    lines += ["", "Warm after fail2:", ""]
    lines += [f"* {r['collective']} on {r['topology']}+fail2: {r.get('warm_message', '(not recorded)')}" for r in rows]
    for r in rows:
        if r["profile"]:
            lines += ["", f"Profile, {r['collective']} on {r['topology']} (cold, cProfile, cumulative):", "",
                      "```", *r["profile"], "```"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="128 and 256 GPUs only, one repeat")
    ap.add_argument("--sizes", help="comma-separated SxHxN of hpn (default: 128, 512, 1024, 2048 GPUs)")
    ap.add_argument("--collectives", default=",".join(COLLECTIVES))
    ap.add_argument("--time-limit", type=float, default=60.0, help="seconds for every synthesis (default 60)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--repeats-large", type=int, default=1, help="repeats from 1024 GPUs on (default 1)")
    ap.add_argument("--profile", action="store_true", help="add the cold solve's top functions (cProfile)")
    ap.add_argument("--case", nargs=2, metavar=("SPEC", "COLLECTIVE"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.case:
        print(json.dumps(case(args.case[0], args.case[1], args.time_limit, args.repeats, args.profile)))
        return 0
    sizes = QUICK_SIZES if args.quick and not args.sizes else tuple(
        args.sizes.split(",") if args.sizes else SIZES)
    rows = []
    for size in sizes:
        spec = f"hpn:{size}"
        n = load_topology(spec).nranks
        repeats = 1 if args.quick else (args.repeats_large if n >= 1024 else args.repeats)
        for collective in args.collectives.split(","):
            rows.append(_in_child(spec, collective, args.time_limit, repeats, args.profile))
            print(" | ".join(str(rows[-1][c]) for c in COLUMNS), flush=True)
    command = "python benchmarks/scale.py " + " ".join(argv if argv is not None else sys.argv[1:])
    write_results("scale", COLUMNS, rows, command.strip(), _notes(rows, args.time_limit, args.quick))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The closed loop under noisy telemetry: 0 %, 5 % and 10 % lognormal busy-time noise side by side.

Each case (hpn:1x2x8 by default, fail2 on rank 0's NIC from 2 ms; 16 MiB per rank) runs the
closed-loop timeline (:mod:`runtime.scenarios.timeline`, re-synthesis time charged 2 ms) with
telemetry perturbed by :class:`runtime.scenarios.noise.TimingNoise`: lognormal σ on each sample's
``busy_s`` plus 1 % outliers at 3× for the noisy levels. Per level, medians over the seeds of: the
detection delay (collectives), the algbw of the adapted version and its ratio to the noise-free run's,
how many seeds adapted (a new version deployed); and, on healthy runs (0.7 s simulated per seed,
>= 5000 collectives per level), the publications (must be 0). The noise-free level is deterministic (one run).

    PYTHONPATH=. python benchmarks/noise.py              # AllGather and AllToAll, 5 seeds (minutes)
    PYTHONPATH=. python benchmarks/noise.py --quick      # AllGather, 1 seed: a smoke run
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._report import write_results  # noqa: E402
from benchmarks.closed_loop import _scenario  # noqa: E402
from runtime.scenarios.noise import TimingNoise  # noqa: E402
from runtime.scenarios.timeline import TimelineResult, run_timeline  # noqa: E402
from synth import load_topology  # noqa: E402

LEVELS = [(0.0, 0.0), (0.05, 0.01), (0.10, 0.01)]  # (sigma, outlier fraction), outliers at 3x
COLUMNS = ["topology", "collective", "failure", "noise_pct", "outliers_pct", "seeds", "adapted_seeds",
           "detect_colls", "adapted_GBps", "vs_noise_free", "healthy_colls", "healthy_publications"]


def _run(topo: str, coll: str, events: list[dict[str, Any]], duration_s: float,
         noise: TimingNoise | None) -> TimelineResult:
    """One timeline, every collective simulated (no fast-forward: each sees its own noise)."""
    sc = _scenario(topo, load_topology(topo).nranks, coll, 16 << 20, events, duration_s)
    return run_timeline(replace(sc, charge_synth_s=0.002, fast_forward=False), noise=noise)


def _adapted(res: TimelineResult) -> tuple[bool, float | None, int | None]:
    c = res.changes[0]
    if c.version_after is None:
        return False, None, c.detection_collectives
    bw = statistics.median(r["algbw_GBps"] for r in res.rows if r["version"] == c.version_final)
    return True, bw, c.detection_collectives


def run_level(topo: str, coll: str, failure: str, sigma: float, outliers: float, seeds: int,
              noise_free_GBps: float | None, duration_s: float, healthy_s: float) -> dict[str, Any]:
    """One row: ``seeds`` noisy runs of the failure and of a healthy timeline of the same length."""
    events = [{"start_s": 0.002, "end_s": None, "failure": failure}]
    n = 1 if sigma == 0 and outliers == 0 else seeds
    adapted, bws, dets, healthy_n, healthy_pubs = 0, [], [], 0, 0
    for seed in range(n):
        noise = TimingNoise(sigma, outliers, seed=seed) if n > 1 or sigma > 0 else None
        ok, bw, det = _adapted(_run(topo, coll, events, duration_s, noise))
        adapted += ok
        bws += [bw] if bw is not None else []
        dets += [det] if det is not None else []
        healthy = _run(topo, coll, [], healthy_s, None if noise is None else TimingNoise(sigma, outliers, seed=1000 + seed))
        healthy_n += sum(r["n"] for r in healthy.rows)
        healthy_pubs += healthy.publications
    bw_med = statistics.median(bws) if bws else None
    return {"topology": topo, "collective": coll, "failure": failure, "noise_pct": 100 * sigma,
            "outliers_pct": 100 * outliers, "seeds": n, "adapted_seeds": adapted,
            "detect_colls": statistics.median(dets) if dets else None, "adapted_GBps": bw_med,
            "vs_noise_free": None if bw_med is None or not noise_free_GBps else bw_med / noise_free_GBps,
            "healthy_colls": healthy_n, "healthy_publications": healthy_pubs}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="AllGather only, 1 seed (a smoke run)")
    ap.add_argument("--seeds", type=int, default=5, help="seeds per noisy level (default 5)")
    args = ap.parse_args(argv)
    seeds = 1 if args.quick else args.seeds
    colls = ["allgather"] if args.quick else ["allgather", "alltoall"]
    duration_s = 0.08
    healthy_s = 0.08 if args.quick else 0.7  # ~1100 AllGathers per seed: >= 5000 healthy collectives per level
    rows = []
    t0 = time.perf_counter()
    for coll in colls:
        ref: float | None = None
        for sigma, outliers in LEVELS:
            row = run_level("hpn:1x2x8", coll, "fail2", sigma, outliers, seeds, ref, duration_s, healthy_s)
            if sigma == 0:
                ref = row["adapted_GBps"]
                row["vs_noise_free"] = 1.0 if ref else None
            rows.append(row)
            print(f"[{time.perf_counter() - t0:6.1f} s] {coll} noise {row['noise_pct']:g} %: adapted "
                  f"{row['adapted_seeds']}/{row['seeds']}, {row['adapted_GBps']} GB/s", file=sys.stderr, flush=True)
    notes = ("Flow simulator (4 slices per chunk), fail2 from 2 ms on; telemetry busy times x lognormal(sigma) and, "
             "for the noisy levels, 1 % of samples x 3; controller defaults; synthesis charged 2 ms. Medians over "
             f"the seeds; healthy runs: {healthy_s * 1e3:g} ms simulated each. Wall: "
             f"{time.perf_counter() - t0:.0f} s.")
    cmd = "PYTHONPATH=. python benchmarks/noise.py" + (" --quick" if args.quick else "") + \
        (f" --seeds {args.seeds}" if args.seeds != 5 and not args.quick else "")
    print(write_results("noise" + ("_quick" if args.quick else ""), COLUMNS, rows, cmd, notes))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

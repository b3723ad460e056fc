"""Routed vs free synthesis time (issue 31): the routed tree synthesizers within 2× of the free ones.

Per fabric of :data:`benchmarks.rounding.FABRICS` where some GPU pair has a route choice (the only
fabrics where ``routing="auto"`` takes the routed synthesizers; no named spec has one), and per tree
collective: the median wall time of ``--repeats`` interleaved ``synthesize(..., routing="routed")``
and ``routing="free"`` calls after one untimed warm-up of each, their ratio (``routed_free_time_ratio``), and the
routed result (status, algbw, routed optimum, chunks per root). Every call gets a freshly built
topology (built outside the timing), so per-object caches help neither side.

Usage::

    python benchmarks/routed_speed.py                              # every fabric, AllGather, 3 repeats
    python benchmarks/routed_speed.py --fabrics mi250-1,random-6-seed1 --repeats 1 --name routed_speed_smoke
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._report import write_results  # noqa: E402
from benchmarks.rounding import FABRICS  # noqa: E402
from synth import synthesize  # noqa: E402
from synth.routing import has_route_choice  # noqa: E402
from synth.topologies import Topology  # noqa: E402

COLUMNS = ("fabric", "gpus", "collective", "routed_s", "free_s", "routed_free_time_ratio", "status", "algbw_GBps",
           "routed_optimum_GBps", "chunks")


def _once(build: Callable[[], Topology], collective: str, routing: str) -> tuple[float, Any]:
    topo = build()
    start = time.perf_counter()
    result = synthesize(collective, topo, routing=routing)
    return time.perf_counter() - start, result


def measure(name: str, collective: str, repeats: int) -> dict[str, Any]:
    """One row: medians of ``repeats`` interleaved routed and free runs (after a warm-up of each)."""
    build = FABRICS[name]
    times: dict[str, list[float]] = {"routed": [], "free": []}
    routed: Any = None
    for i in range(repeats + 1):
        for routing in ("routed", "free"):
            elapsed, result = _once(build, collective, routing)
            if i:
                times[routing].append(elapsed)
            if routing == "routed":
                routed = result
    routed_s, free_s = statistics.median(times["routed"]), statistics.median(times["free"])
    return {"fabric": name, "gpus": routed.schedule.nranks, "collective": collective, "routed_s": routed_s,
            "free_s": free_s, "routed_free_time_ratio": routed_s / free_s, "status": routed.status.value,
            "algbw_GBps": routed.algbw_GBps, "routed_optimum_GBps": routed.optimal_algbw_GBps,
            "chunks": routed.schedule.nchunks}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--fabrics", default=None, help="comma-separated names (default: those with a route choice)")
    parser.add_argument("--collectives", default="allgather", help="comma-separated tree collectives (default allgather)")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per routing (default 3)")
    parser.add_argument("--name", default="routed_speed", help="results/NAME.json and .md (default routed_speed)")
    args = parser.parse_args()
    names = args.fabrics.split(",") if args.fabrics else [f for f in FABRICS if has_route_choice(FABRICS[f]())]
    unknown = [f for f in names if f not in FABRICS]
    if unknown or args.repeats < 1:
        parser.error(f"unknown fabric(s) {unknown}; known: {', '.join(FABRICS)}" if unknown else "--repeats >= 1")
    rows = []
    for name in names:
        for coll in args.collectives.split(","):
            row = measure(name, coll, args.repeats)
            print(row, flush=True)
            rows.append(row)
    command = "python benchmarks/routed_speed.py " + " ".join(sys.argv[1:])
    notes = ("routed_s / free_s: median wall seconds of the interleaved runs of synthesize(..., routing=...) after "
             "one warm-up each; routed_free_time_ratio = routed_s / free_s (issue 31 asks <= 2). status, algbw_GBps, "
             "routed_optimum_GBps and chunks are the routed result's.")
    print(write_results(args.name, COLUMNS, rows, command.strip(), notes))


if __name__ == "__main__":
    main()

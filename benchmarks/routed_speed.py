"""Routed vs free synthesis time (issue 31): the routed tree synthesizers within 2× of the free ones.

Per fabric of :data:`benchmarks.rounding.FABRICS` where some GPU pair has a route choice (the only
fabrics where ``routing="auto"`` takes the routed synthesizers; no named spec has one), and per tree
collective: the median wall time of ``--repeats`` interleaved ``synthesize(..., routing="routed")``
and ``routing="free"`` calls after one untimed warm-up of each, their ratio (``routed_free_time_ratio``; the same in process CPU time), and the
routed result (status, algbw, routed optimum, chunks per root). Every call gets a freshly built
topology under a name of its own (built outside the timing), so no cache (per object or by value,
such as the route table) helps either side: each call is a first synthesis on its fabric.

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

COLUMNS = ("fabric", "gpus", "collective", "routed_s", "free_s", "routed_free_time_ratio", "routed_cpu_s", "free_cpu_s",
           "cpu_time_ratio", "status", "algbw_GBps", "routed_optimum_GBps", "chunks")


def _once(build: Callable[[], Topology], collective: str, routing: str, run: int) -> tuple[float, float, Any]:
    """(wall s, process CPU s, result) of one synthesis."""
    topo = build()
    topo = topo.with_links(topo.links, name=f"{topo.name}-{routing}-{run}")  # equal to no earlier one
    start, cpu = time.perf_counter(), time.process_time()
    result = synthesize(collective, topo, routing=routing)
    return time.perf_counter() - start, time.process_time() - cpu, result


def measure(name: str, collective: str, repeats: int) -> dict[str, Any]:
    """One row: medians of ``repeats`` interleaved routed and free runs (after a warm-up of each)."""
    build = FABRICS[name]
    times: dict[str, list[float]] = {"routed": [], "free": []}
    cpus: dict[str, list[float]] = {"routed": [], "free": []}
    routed: Any = None
    for i in range(repeats + 1):
        for routing in ("routed", "free"):
            elapsed, cpu, result = _once(build, collective, routing, i)
            if i:
                times[routing].append(elapsed)
                cpus[routing].append(cpu)
            if routing == "routed":
                routed = result
    routed_s, free_s = statistics.median(times["routed"]), statistics.median(times["free"])
    routed_cpu, free_cpu = statistics.median(cpus["routed"]), statistics.median(cpus["free"])
    return {"fabric": name, "gpus": routed.schedule.nranks, "collective": collective, "routed_s": routed_s,
            "free_s": free_s, "routed_free_time_ratio": routed_s / free_s, "routed_cpu_s": routed_cpu,
            "free_cpu_s": free_cpu, "cpu_time_ratio": routed_cpu / free_cpu, "status": routed.status.value,
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
             "one warm-up each, every call on a topology no cache has seen; routed_free_time_ratio = routed_s / free_s "
             "(issue 31 asks <= 2); the *_cpu_s columns and cpu_time_ratio are the same with process CPU time (less "
             "sensitive to other load on the machine). status, algbw_GBps, "
             "routed_optimum_GBps and chunks are the routed result's.")
    print(write_results(args.name, COLUMNS, rows, command.strip(), notes))


if __name__ == "__main__":
    main()

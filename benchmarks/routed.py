"""Routed synthesis (issue 16): both optima, exported XML algbw under routing, solve times.

Part 1, fabrics where GPU pairs have several switch-only paths (:mod:`synth.routed.fabrics`):
ForestColl's DGX-A100 model (8 GPUs per box, NICs by parity on two IB switches), an MI250-like box
(xGMI partial mesh + IB) and random irregular fabrics, 16-128 GPUs. Per case: the free-routing
optimum (:func:`synth.optimal_bound`), the routed optimum, the schedule's algbw, the algbw of its
exported MSCCL XML under the executor's routing (:func:`msccl_xml.program_algbw_GBps`), the
executor's loss (free vs routed) and the rounding gap, cold and warm solve times. Tree collectives
on the largest fabrics run under ``--tree-limit`` seconds: ``status`` then says ``time_limit`` and
the gap is certified against the best proven bound.

Part 2, every named spec: ``routing="free"`` (today's synthesizers) against the default
``routing="auto"`` (which detects that every pair has one switch-only path and takes the same
path), medians of ``--repeats`` interleaved runs in the same process: optimum, schedule and time
ratio.

Usage::

    python benchmarks/routed.py            # full run (about 20 min on 2 shared cores)
    python benchmarks/routed.py --quick    # 16-32 GPUs, 3 repeats
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._report import write_results  # noqa: E402
from msccl_xml import parse, program_algbw_GBps, render_xml  # noqa: E402
from synth import optimal_bound, synthesize  # noqa: E402
from synth.errors import RuntimeLimitError  # noqa: E402
from synth.figures import routing_of  # noqa: E402
from synth.routed.fabrics import forestcoll_dgx_a100, mi250_like, random_fabric  # noqa: E402
from synth.topologies import Topology, named_topology  # noqa: E402

NAMED = ("hpn:1x2x8", "h200-proto", "dgx-a100:2", "dgx-h100:4", "nvswitch:8", "ring:8", "torus:4x4")


def _fabrics(sizes: list[int]) -> list[tuple[str, Topology]]:
    out = []
    for n in sizes:
        out.append(("dgx-a100-model", forestcoll_dgx_a100(n // 8)))
        out.append(("mi250-like", mi250_like(n // 8)))
        out.append(("random-irregular", random_fabric(n, n)))
    # A single-host random fabric on which the executor does lose (direct links narrower than the
    # host switch path they shadow).
    out.append(("random-irregular-1host", random_fabric(3, 16, hosts=1)))
    return out


def _fabric_row(family: str, topo: Topology, coll: str, tree_limit_s: float) -> dict[str, Any]:
    # The defaults (as many chunks as the tree optimum needs, up to 8; 10 per AllToAll block), but at
    # most 4 per root for trees at 128 GPUs, to keep the run's packing time in bounds.
    chunks = 4 if coll != "alltoall" and topo.nranks >= 128 else None
    limit = tree_limit_s if coll != "alltoall" else None
    free = optimal_bound(coll, topo).algbw_GBps
    t0 = time.perf_counter()
    cold = synthesize(coll, topo, chunks=chunks, time_limit_s=limit)
    cold_s = time.perf_counter() - t0
    assert cold.schedule is not None, cold.message
    t0 = time.perf_counter()
    warm = synthesize(coll, topo, chunks=chunks, time_limit_s=limit, warm_from=cold)
    warm_s = time.perf_counter() - t0
    exported, note = cold, ""
    xml: float | None = None
    for cap in (4, 2, 1, None):  # an XML over the runtime's limits: fewer chunks, as `synth -o` does for trees
        try:
            text = render_xml(exported.schedule, topo)
            xml = program_algbw_GBps(parse(text), topo)
            break
        except RuntimeLimitError as exc:
            note = f"runtime limit at {exported.schedule.nchunks} chunk(s): {exc}"
            if cap is None:
                break
            exported = synthesize(coll, topo, chunks=cap, time_limit_s=limit)
    routing = routing_of(cold.figures)
    assert routing is not None and routing.routing_gap_pct is not None, cold.message
    routed = routing.routed_optimal_algbw_GBps
    return {
        "fabric": family, "gpus": topo.nranks, "collective": coll, "status": cold.status.value,
        "free_opt_GBps": free, "routed_opt_GBps": routed,
        "executor_loss_pct": routing.routing_gap_pct,
        "algbw_GBps": cold.algbw_GBps, "xml_algbw_GBps": xml,
        "xml_equals_schedule": xml is not None and math.isclose(xml, exported.schedule.algbw_GBps(topo), rel_tol=1e-12),
        "xml_chunks": exported.schedule.nchunks if xml is not None else None, "xml_note": note,
        "routed_opt_proven": routing.routed_optimum_proven, "rounding_gap_pct": cold.gap_pct, "chunks": cold.schedule.nchunks,
        "cold_s": cold_s, "warm_s": warm_s, "warm_status": warm.status.value,
    }


def _named_row(spec: str, coll: str, repeats: int) -> dict[str, Any]:
    topo = named_topology(spec)
    chunks = 4 if coll == "alltoall" else None
    times: dict[str, list[float]] = {"free": [], "auto": []}
    results: dict[str, Any] = {}
    t0 = time.perf_counter()
    synthesize(coll, topo, chunks=chunks, routing="free")
    # Calls per sample, so that a sample lasts >= 0.1 s: millisecond solves are otherwise all noise.
    calls = max(1, int(0.1 / max(time.perf_counter() - t0, 1e-6)))
    for _ in range(repeats):  # interleaved: both modes see the same machine load
        for mode in ("free", "auto"):
            t0 = time.perf_counter()
            for _ in range(calls):
                results[mode] = synthesize(coll, topo, chunks=chunks, routing=mode)
            times[mode].append((time.perf_counter() - t0) / calls)
    free_s, auto_s = statistics.median(times["free"]), statistics.median(times["auto"])
    same = results["free"].schedule.routes == results["auto"].schedule.routes
    return {
        "spec": spec, "collective": coll, "optimum_free_GBps": results["free"].optimal_algbw_GBps,
        "optimum_auto_GBps": results["auto"].optimal_algbw_GBps, "algbw_free_GBps": results["free"].algbw_GBps,
        "algbw_auto_GBps": results["auto"].algbw_GBps, "same_schedule": same,
        "free_s": free_s, "auto_s": auto_s, "time_ratio": auto_s / free_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="16-32 GPUs, 3 repeats")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--tree-limit", type=float, default=120.0, help="seconds per tree-collective solve")
    parser.add_argument("--resume", metavar="LOG", help="reuse the fabric rows a previous run printed to LOG")
    args = parser.parse_args()
    done: dict[tuple[str, int, str], dict[str, Any]] = {}
    if args.resume:
        import ast

        for line in Path(args.resume).read_text().splitlines():
            if line.startswith("{'fabric'"):
                row = ast.literal_eval(line)
                row.setdefault("xml_chunks", row["chunks"])
                row.setdefault("xml_note", "")
                done[(row["fabric"], row["gpus"], row["collective"])] = row
    sizes = [16, 32] if args.quick else [16, 32, 64, 128]
    repeats = 3 if args.quick else args.repeats
    command = "python " + " ".join(["benchmarks/routed.py", *sys.argv[1:]])
    rows = []
    for family, topo in _fabrics(sizes):
        for coll in ("allgather", "alltoall") if topo.nranks > 16 else ("allgather", "allreduce", "alltoall"):
            row = done.get((family, topo.nranks, coll)) or _fabric_row(family, topo, coll, args.tree_limit)
            rows.append(row)
            print(row, flush=True)
    cols = ["fabric", "gpus", "collective", "status", "free_opt_GBps", "routed_opt_GBps", "routed_opt_proven",
            "executor_loss_pct", "algbw_GBps", "rounding_gap_pct", "chunks", "xml_algbw_GBps", "xml_chunks", "cold_s",
            "warm_s"]
    print(write_results("routed_fabrics", cols, rows, command,
                        "xml_algbw_GBps is the exported XML's algbw under the executor's routing (equal to the "
                        "schedule's in every row: xml_equals_schedule in the JSON). Rows with status time_limit "
                        "stopped the routed LP at --tree-limit seconds: routed_opt_GBps is then the "
                        "best proven upper bound on the routed optimum (routed_opt_proven false), executor_loss_pct "
                        "a lower bound on the loss, rounding_gap_pct certified against that bound. Where the XML "
                        "of the schedule exceeds the MSCCL runtime's limits, it is re-synthesized with fewer chunks "
                        "(xml_chunks; xml_note in the JSON) and xml_algbw_GBps is that schedule's; empty where even "
                        "one chunk exceeds them (the runtime-limit error is in xml_note)."))
    named = []
    for spec in NAMED:
        for coll in ("allgather", "allreduce", "alltoall"):
            row = _named_row(spec, coll, repeats)
            named.append(row)
            print(row, flush=True)
    cols = ["spec", "collective", "optimum_free_GBps", "optimum_auto_GBps", "algbw_free_GBps", "algbw_auto_GBps",
            "same_schedule", "free_s", "auto_s", "time_ratio"]
    print(write_results("routed_named", cols, named, command,
                        f"Medians of {repeats} interleaved samples per mode in one process (a sample repeats a call "
                        "until it lasts >= 0.1 s); time_ratio = auto / free."))


if __name__ == "__main__":
    main()

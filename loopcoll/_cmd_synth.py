"""``loopcoll synth COLLECTIVE SPEC``: synthesize a schedule, optionally warm, and export it."""

from __future__ import annotations

import argparse
from typing import Any

from loopcoll._cmd_alltoallv import add_synth_parser
from loopcoll._common import (
    add_topology_args,
    check_outputs,
    positive_seconds,
    print_json,
    result_json,
    topology_from_args,
)
from loopcoll._log import configure_progress
from loopcoll._schedule_file import read_warm_schedule
from msccl_xml.deploy import fit
from msccl_xml.targets import MscclTarget, Target
from mscclpp_plan.target import MscclppTarget
from synth import COLLECTIVES, synthesize, write_schedule
from synth.errors import ScheduleError
from synth.figures import routing_of
from synth.fileio import write_bytes_atomic
from synth.result import SynthResult
from synth.schedule import Schedule
from synth.topologies.model import Topology

__all__ = ["register"]


def _run(args: argparse.Namespace) -> int:
    check_outputs(output=args.output, schedule_out=args.schedule_out)
    configure_progress(args.quiet or args.json)
    topo = topology_from_args(args)
    warm = None
    if args.warm_from:
        warm = read_warm_schedule(args.warm_from)
        if warm.collective != args.collective:
            raise ScheduleError(
                f"{args.warm_from}: holds a schedule of collective {warm.collective!r}, cannot warm-start {args.collective!r}"
            )
    if getattr(args, "sizes", None):
        from loopcoll._latency import run_sizes

        return run_sizes(args, topo, warm)
    if getattr(args, "max_depth", None) is not None:
        from loopcoll._latency import run_max_depth

        return run_max_depth(args, topo, warm)
    result = synthesize(
        args.collective,
        topo,
        chunks=args.chunks,
        warm_from=warm,
        time_limit_s=args.time_limit,
        routing=args.routing,
        **_cg_options(args),
    )
    if result.schedule is None:
        raise ScheduleError(f"{args.collective} on {topo.name}: no schedule ({result.status.value}: {result.message})")
    capped = None
    if args.output:
        result, capped = _export_fitting(args, topo, warm, result)
    sched = result.schedule
    assert sched is not None
    if args.schedule_out:
        write_schedule(sched, args.schedule_out)
    if args.json:
        doc = result_json(args.collective, topo.name, topo.nranks, result)
        if args.output:
            doc["xml_chunk_cap"] = None if capped is None else capped[0]
        print_json(doc)
        return 0
    print(
        f"{args.collective} on {topo.name} ({topo.nranks} ranks, {sched.nchunks} chunks, "
        f"{len(sched.routes)} routes): algbw {result.algbw_GBps:.3f} GB/s, "
        f"optimal {result.optimal_algbw_GBps:.3f} GB/s ({100 * result.algbw_GBps / result.optimal_algbw_GBps:.2f}%)"
    )
    print(f"  {'warm' if result.warm else 'cold'} solve {result.solve_time_s:.3f} s; status: {result.status_text()}; "
          f"{result.message}")
    routing = routing_of(result.figures)
    if routing is not None and routing.free_optimal_algbw_GBps is not None:
        print(f"  free-routing optimum {routing.free_optimal_algbw_GBps:.3f} GB/s, routed optimum "
              f"{routing.routed_optimal_algbw_GBps:.3f} GB/s: the executor loses "
              f"{routing.routing_gap_pct:.2f}% on this fabric")
    if capped:
        print(f"  {capped[1]}")
    fmt = "MSCCL++ plan" if getattr(args, "format", "xml") == "mscclpp" else "MSCCL XML"
    for path, what in ((args.output, fmt), (args.schedule_out, "schedule")):
        if path:
            print(f"  wrote {what} to {path}")
    return 0


def _cg_options(args: argparse.Namespace) -> dict[str, Any]:
    """``max_steps`` and ``solver``, the options only AllToAll's column generation takes (and has flags for)."""
    if args.collective != "alltoall":
        return {}
    return {"max_steps": args.max_steps, "solver": args.solver}


def _export_fitting(
    args: argparse.Namespace, topo: Topology, warm: Schedule | None, result: SynthResult
) -> tuple[SynthResult, tuple[int, str] | None]:
    """Fit ``result`` to ``-o``'s target (:func:`msccl_xml.deploy.fit`: without ``--chunks`` it may
    re-synthesize with fewer chunks) and write the program atomically.

    Returns the exported result and, when chunks were capped, (the cap, a note).
    """
    def again(cap: int) -> SynthResult:
        return synthesize(args.collective, topo, chunks=cap, warm_from=warm, routing=args.routing)

    version = fit(result, topo, _target(args), protocol=args.protocol,
                  resynthesize=None if args.chunks is not None else again)
    program = version.bands[0].program
    assert program is not None and version.result is not None  # fit is strict: a program or an error
    write_bytes_atomic(args.output, program)
    capped = None if version.capped_chunks is None or version.note is None else (version.capped_chunks, version.note)
    return version.result, capped


def _target(args: argparse.Namespace) -> Target:
    """``-o``'s export target: ``--format mscclpp`` (``--inplace``), else the MSCCL ``--runtime``."""
    if getattr(args, "format", "xml") == "mscclpp":
        return MscclppTarget(inplace=getattr(args, "inplace", False))
    return MscclTarget(args.runtime)


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``synth`` with one sub-command per collective."""
    p = sub.add_parser(
        "synth",
        help="synthesize a schedule",
        description="Synthesize a throughput-optimal schedule; optionally warm-start from a previous one and "
        "write it as a schedule JSON and/or MSCCL XML.",
    )
    csub = p.add_subparsers(dest="collective", metavar="COLLECTIVE", parser_class=type(p))
    csub.required = True
    for collective in COLLECTIVES:
        c = csub.add_parser(collective, help=f"synthesize {collective}", description=f"Synthesize {collective}.")
        add_topology_args(c)
        if collective == "alltoall":
            c.add_argument("--chunks", type=int, default=None, metavar="C",
                           help="chunks per (source, destination) block, used as given (default: 10, or another "
                           "K up to 64 that rounds within 0.1%% of the optimum; docs/exactness.md)")
            c.add_argument("--max-steps", type=int, default=None, metavar="S", help="time-expanded DAG depth (default: smallest that keeps the optimum)")
            c.add_argument("--solver", choices=("highs", "ortools"), default="highs", help="LP backend (default highs)")
        else:
            c.add_argument("--chunks", type=int, default=None, metavar="C", help="at most C chunks per source (default: as many as the optimum needs)")
            c.add_argument("--max-depth", type=int, default=None, metavar="D",
                           help="trees of at most D GPU hops: the best throughput at that depth, with its certified gap "
                           "(docs/latency.md; default 8 chunks per source)")
            c.add_argument("--sizes", default=None, metavar="LIST",
                           help="size-aware: the depth/throughput Pareto set, one schedule per size band chosen by "
                           "--profile at these representative sizes (e.g. 1M,16M,256M; nccl-tests S); -o/--schedule-out "
                           "write one file per band (NAME.bI.xml), --store publishes one version with the bands")
            c.add_argument("--depths", default="1,2,3,4,inf", metavar="LIST",
                           help="depth bounds of the Pareto set for --sizes (default 1,2,3,4,inf)")
            c.add_argument("--profile", default="h200", metavar="PROFILE",
                           help="cost profile that chooses per band for --sizes (default h200)")
            c.add_argument("--store", default=None, metavar="DIR", help="with --sizes: publish the bands as one version here")
            c.add_argument("--comm", default="world", metavar="NAME", help="communicator name for --store (default world)")
        c.add_argument("--time-limit", type=positive_seconds, default=None, metavar="SEC",
                       help="stop after SEC seconds: AllToAll with its best schedule and certified gap, a tree "
                       "collective with status time_limit (an error when no schedule was built)")
        c.add_argument("--routing", choices=("auto", "free", "routed"), default="auto",
                       help="hops on each GPU pair's route (routed), on any switch path (free), or routed only "
                       "where some pair has several switch-only paths (auto, default); see docs/topology.md")
        c.add_argument("--warm-from", metavar="SCHED.json", help="warm-start from a previous schedule of this collective")
        c.add_argument("--schedule-out", metavar="SCHED.json", help="write the schedule JSON here (atomically)")
        c.add_argument("-o", "--output", metavar="OUT.xml", help="write the schedule as MSCCL XML, or with --format mscclpp as an MSCCL++ execution plan (checked before writing)")
        c.add_argument("--format", choices=("xml", "mscclpp"), default="xml", help="format of -o: MSCCL XML (default) or an MSCCL++ JSON execution plan (docs/mscclpp.md)")
        c.add_argument("--inplace", action="store_true", help="with --format mscclpp: write the in-place plan (default out of place)")
        c.add_argument("--runtime", default="msccl-executor-nccl", help="MSCCL runtime whose limits the XML must meet")
        c.add_argument("--protocol", default="Simple", choices=("Simple", "LL", "LL128"), help="MSCCL protocol (default Simple; --format mscclpp supports Simple only)")
        c.add_argument("--json", action="store_true", help="print one JSON object (implies --quiet)")
        c.add_argument("--quiet", action="store_true", help="nothing on stderr but errors (no progress, no warnings)")
        c.set_defaults(func=_run)

    add_synth_parser(csub)

"""``loopcoll synth alltoallv SPEC --demand M`` and ``loopcoll bound alltoallv SPEC --demand M``.

Registered into the ``synth`` and ``bound`` commands by :mod:`loopcoll._cmd_synth` and
:mod:`loopcoll._cmd_bound` (see :func:`add_synth_parser`, :func:`run_bound`).
"""

from __future__ import annotations

import argparse

from loopcoll._common import add_topology_args, check_outputs, positive_seconds, print_json, topology_from_args
from loopcoll._log import configure_progress
from synth import synthesize
from synth.alltoallv_schedule import read_demand
from synth.baselines.alltoallv import direct_alltoallv, two_phase_alltoallv
from synth.errors import ScheduleError
from synth.fileio import write_text_atomic

# The solvers and baselines are imported inside the handlers: `loopcoll --help` and the other
# subcommands do not pay for them.

__all__ = ["add_demand_arg", "add_synth_parser", "run_bound"]


def add_demand_arg(p: argparse.ArgumentParser, *, required: bool) -> None:
    """``--demand M.json|M.npy``."""
    p.add_argument("--demand", metavar="M.json|M.npy", required=required,
                   help="AllToAllv demand matrix: bytes per ordered rank pair (N x N; JSON rows or .npy)")


def run_bound(args: argparse.Namespace) -> int:
    """``bound alltoallv``: the exact LP optimum of the completion time."""
    if not args.demand:
        raise ScheduleError("bound alltoallv needs --demand M.json|M.npy")
    from synth.alltoall_cg import alltoallv_lp_bound

    topo = topology_from_args(args)
    demand = read_demand(args.demand, topo.nranks)
    b = alltoallv_lp_bound(topo, demand, time_limit_s=args.time_limit)
    total = sum(map(sum, demand))
    if args.json:
        print_json({"collective": "alltoallv", "topology": topo.name, "nranks": topo.nranks, "status": b.status.value,
                    "time_s": b.time_s, "total_bytes": total, "solve_time_s": b.solve_time_s})
        return 0
    print(f"alltoallv on {topo.name} ({topo.nranks} ranks, {total / 1e9:.6g} GB in all): "
          f"optimal completion time {1e6 * b.time_s:.3f} us ({b.status.value})")
    if not b.success:
        print(f"  {b.message}")
    return 0


def _run_synth(args: argparse.Namespace) -> int:
    check_outputs(schedule_out=args.schedule_out)
    if args.output:
        raise ScheduleError("alltoallv: MSCCL XML export is not supported (MSCCL chunks are of one size and "
                            "AllToAllv blocks are not); write the schedule JSON with --schedule-out")

    configure_progress(args.quiet or args.json)
    topo = topology_from_args(args)
    demand = read_demand(args.demand, topo.nranks)
    result = synthesize("alltoallv", topo, chunks=args.chunks, max_steps=args.max_steps, solver=args.solver,
                        time_limit_s=args.time_limit, demand=demand)
    sched = result.schedule
    if sched is None:
        raise ScheduleError(f"alltoallv on {topo.name}: no schedule ({result.status.value}: {result.message})")
    direct = direct_alltoallv(topo, demand).completion_time_s(topo)
    two = two_phase_alltoallv(topo, demand).completion_time_s(topo)
    if args.schedule_out:
        write_text_atomic(args.schedule_out, sched.to_json())
    if args.json:
        doc = {"collective": "alltoallv", "topology": topo.name, "nranks": topo.nranks, "nchunks": sched.nchunks,
               "status": result.status.value, "completion_time_s": result.completion_time_s,
               "optimal_time_s": result.optimal_time_s, "gap": result.gap_pct / 100.0, "gap_pct": result.gap_pct,
               "direct_time_s": direct, "two_phase_time_s": two, "solve_time_s": result.solve_time_s,
               "total_bytes": sched.total_bytes}
        if "global_ranks" in sched.meta:
            doc["global_ranks"] = list(sched.meta["global_ranks"])
        print_json(doc)
        return 0
    print(f"alltoallv on {topo.name} ({topo.nranks} ranks, {sched.nchunks} chunks per block, {len(sched.routes)} "
          f"routes, {sched.total_bytes / 1e9:.6g} GB): completion {1e6 * result.completion_time_s:.3f} us, "
          f"optimal {1e6 * result.optimal_time_s:.3f} us (gap {result.gap_pct:.3f}%)")
    print(f"  baselines: NCCL-like direct {1e6 * direct:.3f} us ({direct / result.completion_time_s:.2f}x), "
          f"FAST-like two-phase {1e6 * two:.3f} us ({two / result.completion_time_s:.2f}x)")
    print(f"  solve {result.solve_time_s:.3f} s; status: {result.status_text()}; {result.message}")
    if args.schedule_out:
        print(f"  wrote schedule to {args.schedule_out}")
    return 0


def add_synth_parser(csub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``synth alltoallv``."""
    c = csub.add_parser("alltoallv", help="synthesize alltoallv for a demand matrix",
                        description="Synthesize an AllToAllv schedule minimising the completion time of a demand "
                        "matrix (bytes per ordered rank pair); compares it with NCCL-like direct and FAST-like "
                        "two-phase baselines.")
    add_topology_args(c)
    add_demand_arg(c, required=True)
    c.add_argument("--chunks", type=int, default=16, metavar="C", help="equal chunks per block (default 16)")
    c.add_argument("--max-steps", type=int, default=None, metavar="S",
                   help="GPU hops per path (default: smallest that keeps the LP optimum)")
    c.add_argument("--solver", choices=("highs", "ortools"), default="highs", help="LP backend (default highs)")
    c.add_argument("--time-limit", type=positive_seconds, default=None, metavar="SEC",
                   help="stop after SEC seconds with the best schedule and its certified gap")
    c.add_argument("--schedule-out", metavar="SCHED.json", help="write the AllToAllv schedule JSON here (atomically)")
    c.add_argument("-o", "--output", metavar="OUT.xml", help="not supported for alltoallv (an error)")
    c.add_argument("--json", action="store_true", help="print one JSON object")
    c.add_argument("--quiet", action="store_true", help="nothing on stderr but errors (no progress, no warnings)")
    c.set_defaults(func=_run_synth)

"""``loopcoll bound COLLECTIVE SPEC``: the optimal algbw and its bottleneck (``alltoallv --demand M``:
the optimal completion time)."""

from __future__ import annotations

import argparse

from loopcoll._cmd_alltoallv import add_demand_arg, run_bound
from loopcoll._common import add_topology_args, positive_seconds, print_json, topology_from_args
from synth import COLLECTIVES, LoopcollError, optimal_bound

__all__ = ["register"]


def _run(args: argparse.Namespace) -> int:
    if args.collective == "alltoallv":
        return run_bound(args)
    if args.demand:
        raise LoopcollError(f"--demand is for alltoallv only, not {args.collective}")
    topo = topology_from_args(args)
    bound = optimal_bound(args.collective, topo, time_limit_s=args.time_limit, routed=True)
    if args.json:
        print_json(bound.to_json_dict())
        return 0
    print(
        f"{bound.collective} on {bound.topology} ({bound.nranks} ranks): "
        f"algbw {bound.algbw_GBps:.3f} GB/s, busbw {bound.busbw_GBps:.3f} GB/s"
    )
    if not bound.success:
        print(f"  {bound.status.value}: {bound.message}")
    shown = ", ".join(f"{a}->{b}" for a, b in bound.bottleneck[:12])
    more = f" (+{len(bound.bottleneck) - 12} more)" if len(bound.bottleneck) > 12 else ""
    print(f"  bottleneck: {shown}{more}")
    if bound.routed_algbw_GBps is not None:
        print(f"  free-routing optimum {bound.algbw_GBps:.3f} GB/s, routed optimum {bound.routed_algbw_GBps:.3f} GB/s "
              f"(every hop on its pair's route): the executor loses {bound.routing_gap_pct or 0.0:.2f}%")
    return 0


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``bound``."""
    p = sub.add_parser(
        "bound",
        help="optimal algbw of a collective on a topology",
        description="Print the optimal (physical-limit) algbw and busbw of a collective, with its bottleneck links, "
        "and the routed optimum (every hop on its GPU pair's route, as a peer-addressed executor runs it).",
    )
    p.add_argument("collective", choices=(*COLLECTIVES, "alltoallv"), help="the collective")
    add_topology_args(p)
    add_demand_arg(p, required=False)
    p.add_argument("--time-limit", type=positive_seconds, default=None, metavar="SEC",
                   help="stop after SEC seconds with the best proven upper bound (status time_limit)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_run)

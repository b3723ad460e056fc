"""``loopcoll whatif WORKLOAD SPEC --fail F``: a training iteration's time per schedule family."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from loopcoll._common import print_json
from synth import LoopcollError, load_topology
from synth.fileio import write_text_atomic
from synth.topologies import FAILURES
from synth.workloads import FAMILIES, GENERATORS, generate, read_workload, whatif, write_workload

__all__ = ["register"]

_NAMES = {"nccl": "NCCL-like", "static": "static", "resynth": "re-synthesized"}


def _run(args: argparse.Namespace) -> int:
    topo = load_topology(args.spec)
    if args.workload in GENERATORS:
        kwargs = {"tokens": args.tokens} if args.tokens is not None else {}
        if args.mfu is not None:
            kwargs["mfu"] = args.mfu  # type: ignore[assignment]
        work = generate(args.workload, topo.nranks, **kwargs)
    else:
        if args.tokens is not None or args.mfu is not None:
            raise LoopcollError("--tokens and --mfu apply to the built-in workloads only; edit the workload file")
        if not Path(args.workload).exists():
            raise LoopcollError(f"workload {args.workload!r} is neither a built-in ({', '.join(sorted(GENERATORS))}) "
                                f"nor an existing file")
        work = read_workload(args.workload)
    if args.export_workload:
        write_workload(work, args.export_workload)
    scenario = "+".join(args.fail) if args.fail else "healthy"
    res = whatif(work, topo, scenario, chunks=args.chunks)
    doc = res.to_dict()
    if args.output:
        write_text_atomic(Path(args.output), json.dumps(doc, indent=2, sort_keys=True) + "\n")
    if args.json:
        print_json(doc)
        return 0
    print(f"{work.name} on {topo.name} ({topo.nranks} GPUs), {scenario}: iteration time per schedule family")
    print(f"{'schedules':<16} {'iteration s':>11} {'compute s':>10} {'comm s':>9} {'comm share':>10} "
          f"{'exposed':>8} {'vs NCCL':>8}")
    base = res.iteration["nccl"].iteration_s
    for fam in FAMILIES:
        it = res.iteration[fam]
        print(f"{_NAMES[fam]:<16} {it.iteration_s:>11.4f} {it.compute_s:>10.4f} {it.comm_s:>9.4f} "
              f"{100 * it.comm_share:>9.1f}% {100 * it.exposed_comm_share:>7.1f}% {base / it.iteration_s:>7.2f}x")
    print("comm share = collective time / (collective + compute time); exposed = share of the iteration not "
          "covered by compute")
    return 0


def _positive_int(text: str) -> int:
    try:
        val = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if val < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return val


def _fraction(text: str) -> float:
    try:
        val = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {text!r}") from None
    if not 0 < val <= 1:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {text!r}")
    return val


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``whatif``."""
    p = sub.add_parser(
        "whatif",
        help="training-iteration time of a workload after a failure, per schedule family",
        description="Simulate one training iteration of WORKLOAD (a built-in: llama405b, deepseek671b, sized to "
                    "SPEC's GPUs; or a loopcoll.workload/1 JSON file) on SPEC after --fail, with NCCL-like, static "
                    "and re-synthesized schedules (docs/workloads.md).",
    )
    p.add_argument("workload", metavar="WORKLOAD", help="llama405b, deepseek671b, or a workload JSON file")
    p.add_argument("spec", metavar="SPEC", help="named topology spec or topology JSON file (healthy fabric)")
    p.add_argument("--fail", metavar="F", action="append", default=[],
                   help="failure scenario applied after the healthy synthesis (" + ", ".join(FAILURES) + "); repeatable")
    p.add_argument("--chunks", type=_positive_int, default=None, metavar="C", help="chunks for the synthesizers")
    p.add_argument("--tokens", type=_positive_int, default=None, metavar="T",
                   help="built-in workloads: tokens per data-parallel replica (default 16384)")
    p.add_argument("--mfu", type=_fraction, default=None, metavar="U",
                   help="built-in workloads: model FLOPs utilisation (default 0.4)")
    p.add_argument("--export-workload", metavar="FILE", default=None, help="also write the workload as JSON")
    p.add_argument("-o", "--output", metavar="FILE", default=None, help="write the full result as JSON")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_run)

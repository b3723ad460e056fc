"""``loopcoll run-check FILE.xml|SCHEDULE.json [--nprocs N] [--size S ...] [--dtype T] [--iters K] [--json]``.

Launches N local processes on torch.distributed gloo (CPU), runs the program through the executor and the
native torch.distributed collective at each size, and prints per size whether the outputs agree (bit for bit
for integers, to reduction-order tolerance for floats) and both algbw figures. Exit status 0 when every size
agrees, 1 otherwise. Needs torch (``pip install loopcoll[runtime]``).
"""

from __future__ import annotations

import argparse
from typing import Any

from loopcoll._common import parse_size, print_json
from synth.errors import LoopcollError

__all__ = ["register", "run"]

def register(sub: Any) -> None:
    """Add the ``run-check`` subcommand to the argparse subparsers ``sub``."""
    p = sub.add_parser("run-check", help="run an MSCCL XML or schedule JSON on N local gloo processes vs native",
                       description=__doc__.split("\n\n")[1] if __doc__ else None)
    p.add_argument("path", metavar="FILE", help="MSCCL .xml or loopcoll schedule .json")
    p.add_argument("--nprocs", type=int, default=None, help="processes (default: the program's rank count)")
    p.add_argument("--size", action="append", default=None, metavar="S",
                   help="collective size S (nccl-tests convention), e.g. 1M; repeatable (default 1M)")
    p.add_argument("--dtype", default="float32", help="torch dtype name (default float32)")
    p.add_argument("--iters", type=int, default=5, help="timed repeats per size (median; default 5)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds before the processes are ended")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Launch the processes, compare, print; return the exit status."""
    try:
        import torch  # noqa: F401
    except ImportError as exc:
        raise LoopcollError("run-check needs torch: pip install 'loopcoll[runtime]' (or torch==2.13.0)") from exc
    from runtime.executor import load_programs
    from runtime.executor.launch import launch
    from runtime.executor.measure import compare

    programs = load_programs(args.path)
    if len(programs) != 1:
        raise LoopcollError(f"{args.path}: expected one program, got {len(programs)}")
    prog = programs[0]
    n = args.nprocs or prog.ngpus
    if n != prog.ngpus:
        raise LoopcollError(f"{args.path}: the program is for {prog.ngpus} ranks, --nprocs is {n}")
    if not hasattr(torch, args.dtype):
        raise LoopcollError(f"unknown torch dtype {args.dtype!r}")
    sizes = [parse_size(s) for s in (args.size or ["1M"])]
    rows = launch(compare, n, prog, sizes, args.dtype, max(1, args.iters), timeout_s=args.timeout)[0]
    if args.json:
        print_json({"file": str(args.path), "nprocs": n, "dtype": args.dtype, "rows": rows})
    else:
        print(f"{args.path}: {prog.coll} on {n} gloo processes, {args.dtype}")
        print(f"{'size':>12} {'correct':>8} {'max_err':>10} {'rounds':>6} {'algbw GB/s':>11} {'native GB/s':>12}")
        for r in rows:
            print(f"{r['size_bytes']:>12} {'yes' if r['correct'] else 'NO':>8} {r['max_err']:>10.3g} {r['rounds']:>6} "
                  f"{r['algbw_GBps']:>11.3f} {r['native_algbw_GBps']:>12.3f}")
    return 0 if all(r["correct"] for r in rows) else 1

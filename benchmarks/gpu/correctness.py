"""Correctness of every executor collective against native torch.distributed (NCCL on GPUs), random cases.

Each case draws a collective (AllGather, ReduceScatter, AllReduce, AllToAll in turn), a schedule variant
(loopcoll's ForestColl / AllToAll schedules for ``nvswitch:N`` and for ``ring:N``, lowered to MSCCL
programs), a dtype (float32, float16, bfloat16, int32, int64, uint8), a size (1 .. ``--max-elems`` elements
per rank), in or out of place, and a reduction (SUM, MAX, MIN, AVG on floats); the executor's output must
equal the native collective's (bit for bit without reduction or for MIN/MAX, within 8·N·eps(dtype)·(1+|x|)
for floating sums) and the call must have run the program (not a native fallback).

    python benchmarks/gpu/correctness.py                           # every visible GPU, NCCL
    python benchmarks/gpu/correctness.py --backend gloo --cases 24  # CPU dry run
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.gpu import _workers as W  # noqa: E402
from benchmarks.gpu._common import (add_common, command_line, environment, launch_workers, resolve,  # noqa: E402
                                    write_outputs)

TARGET = "every case equal to native (0 failures)"


def programs(n: int) -> dict[str, list]:
    """Per schedule variant: the MSCCL programs of the four collectives for n ranks."""
    from msccl_xml import lower
    from synth import COLLECTIVES, named_topology, synthesize

    return {name: [lower(synthesize(c, named_topology(f"{name}:{n}")).schedule)
                   for c in COLLECTIVES] for name in ("nvswitch", "ring")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_common(ap)
    ap.add_argument("--cases", type=int, default=None, help="random cases (default 200 on GPUs, 24 on gloo)")
    ap.add_argument("--max-elems", type=int, default=None, help="largest per-rank element count "
                    "(default 1M on GPUs, 4096 on gloo)")
    ap.add_argument("--seed", type=int, default=24)
    args = resolve(ap.parse_args(argv))
    gpu = args.backend == "nccl"
    cases = args.cases or (200 if gpu else 24)
    max_elems = args.max_elems or ((1 << 20) if gpu else 4096)
    res = launch_workers(W.correctness, args, programs(args.nprocs), cases, args.seed, max_elems)
    rows = res[0]["rows"]
    failures = [f for r in res for f in r["failures"]]
    by: dict[tuple, list[int]] = collections.defaultdict(lambda: [0, 0])
    for per_rank in res:
        for row in per_rank["rows"]:
            key = (row["collective"], row["schedule"])
            by[key][0] += 1
            by[key][1] += 0 if row["ok"] else 1
    summary = [{"collective": c, "schedule": s, "checks": v[0], "failures": v[1]} for (c, s), v in sorted(by.items())]
    env = environment(res[0]["env"], args)
    write_outputs("correctness", args, env, command_line("correctness.py", argv),
                  [("per collective and schedule (checks = cases x ranks)", ["collective", "schedule", "checks",
                                                                             "failures"], summary),
                   ("failures", ["case", "collective", "schedule", "dtype", "elements", "inplace", "op", "max_err",
                                 "program_ran"], failures[:50])],
                  [TARGET], extra={"cases": rows, "seed": args.seed, "max_elems": max_elems})
    return 0 if not failures else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""Telemetry error: executor-reported pair throughput vs ground truth, healthy and under contention; overhead.

The executor runs loopcoll's AllGather for ``nvswitch:N`` (an in-place MSCCL program, called in place: no
local copies) with a telemetry sink. For every pair whose sends span the rank's first and last round, its
``pair`` sample's throughput (bytes / busy_s, from the executor's passive CUDA events, or host clock on CPU)
is compared with the ground truth: the same bytes over the call's time measured outside the executor (CUDA
events on the current stream right around the call; on CPU, the wall clock around the blocking call).
Then the same with a contender process: device-to-device copies GPU0 -> GPU1 (the GPU0<->GPU1 link) on GPUs,
a busy loop on CPU. ``raw_p2p_GBps``: the same bytes per pair moved by one plain batched isend/irecv right
after each call (what the data path gives at that moment; not the error's basis). Overhead: interleaved runs of the same program with and without a sink.

    python benchmarks/gpu/telemetry.py                                 # 64M 256M 1G, every visible GPU
    python benchmarks/gpu/telemetry.py --backend gloo --sizes 256K     # CPU dry run
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.gpu import _workers as W  # noqa: E402
from benchmarks.gpu._common import (add_common, command_line, environment, fmt_size, launch_workers,  # noqa: E402
                                    parse_size, resolve, write_outputs)

TARGETS = ["telemetry error <= 2 % (MCCL: < 1.2 % error)", "telemetry overhead < 2 % (MCCL)"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_common(ap, sizes=("64M", "256M", "1G"), cpu_sizes=("256K",))
    ap.add_argument("--contend-bytes", default=None, help="bytes per contender copy (default 256M on GPUs, 4M on "
                    "CPU; 0: no contended phase)")
    args = resolve(ap.parse_args(argv))
    from msccl_xml import lower
    from synth import named_topology, synthesize

    prog = lower(synthesize("allgather", named_topology(f"nvswitch:{args.nprocs}")).schedule, inplace=True)
    contend = parse_size(args.contend_bytes or ("256M" if args.backend == "nccl" else "4M"))
    res = launch_workers(W.telemetry, args, prog, args.size_bytes, args.runs, contend)
    rows = []
    for rank, per_rank in enumerate(res):
        for r in per_rank["rows"]:
            row = {"rank": rank, **r, "size": fmt_size(r["size_bytes"])}
            err = r["median_abs_err_pct"]
            row["target_met"] = None if err is None else err <= 2.0 and r["overhead_pct"] < 2.0
            rows.append(row)
    env = environment(res[0]["env"], args)
    cols = ["phase", "size", "rank", "pairs", "samples", "reported_GBps", "truth_GBps", "raw_p2p_GBps", "median_err_pct",
            "median_abs_err_pct", "max_abs_err_pct", "off_s", "on_s", "overhead_pct", "target_met"]
    cont = res[0]["contender"]
    notes = (f"AllGather program: {res[0]['rounds']} rounds per call. "
             + (f"Contender: {cont['kind']} at {cont['GBps']:.3g} GB/s while the contended phase ran." if cont else
                "No contended phase."))
    write_outputs("telemetry", args, env, command_line("telemetry.py", argv),
                  [("pair throughput: executor-reported vs bytes over the externally timed call", cols, rows)],
                  TARGETS, extra={"contender": cont}, notes=notes)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""algbw of the executor vs native torch.distributed collectives, and vs one batched-P2P AllGather (the ceiling).

Per size S (nccl-tests' S: AllGather output, ReduceScatter input, AllReduce buffer, AllToAll send buffer;
float32) and collective, the median over ``--runs`` interleaved runs of: the executor running loopcoll's
schedule for ``nvswitch:N`` (lowered to MSCCL; AllGather in place, as the two others), the native collective,
and for AllGather a single ``batch_isend_irecv`` sending each rank's block to every peer (the data path's
ceiling). On GPUs a run is up to 20 back-to-back calls timed with CUDA events (max over ranks).

    python benchmarks/gpu/algbw.py                                    # 1M .. 1G on every visible GPU
    python benchmarks/gpu/algbw.py --backend gloo --sizes 64K 256K    # CPU dry run
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.gpu import _workers as W  # noqa: E402
from benchmarks.gpu._common import (add_common, command_line, environment, fmt_size, launch_workers,  # noqa: E402
                                    resolve, write_outputs)
from synth import COLLECTIVES  # noqa: E402

TARGETS = ["executor >= 0.95x the batched-P2P ceiling at >= 64 MB",
           "executor >= 0.9x native NCCL at 1 GB",
           "probe on 2xH200 NV18: native AllGather 14/131/361/451/518 GB/s at 1/8/64/256/1024 MB; one batched "
           "isend/irecv AllGather 51/255/393/550 GB/s at 8/64/256/1024 MB"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_common(ap, sizes=("1M", "8M", "64M", "256M", "1G"), cpu_sizes=("64K", "1M"))
    ap.add_argument("--collectives", nargs="+", default=list(COLLECTIVES), choices=COLLECTIVES)
    args = resolve(ap.parse_args(argv))
    from msccl_xml import lower

    from runtime.executor import compile_program
    from synth import named_topology, synthesize

    topo = named_topology(f"nvswitch:{args.nprocs}")
    progs = {c: lower(synthesize(c, topo).schedule, inplace=c == "allgather") for c in args.collectives}
    res = launch_workers(W.algbw, args, progs, args.size_bytes, args.runs)
    rows = []
    for r in res[0]["rows"]:
        row = {"collective": r["collective"], "size": fmt_size(r["size_bytes"]), "correct": r["correct"],
               "rounds": compile_program(progs[r["collective"]]).nrounds, "executor_GBps": r["executor_GBps"], "native_GBps": r["native_GBps"],
               "vs_native": r["executor_GBps"] / r["native_GBps"]}
        if "p2p_ceiling_GBps" in r:
            row["ceiling_GBps"] = r["p2p_ceiling_GBps"]
            row["vs_ceiling"] = r["executor_GBps"] / r["p2p_ceiling_GBps"]
            big = r["size_bytes"] >= 64 << 20
            row["target_met"] = (row["vs_ceiling"] >= 0.95 if big else None)
            if r["size_bytes"] >= 1 << 30:
                row["target_met"] = row["vs_ceiling"] >= 0.95 and row["vs_native"] >= 0.9
        rows.append(row)
    env = environment(res[0]["env"], args)
    cols = ["collective", "size", "correct", "rounds", "executor_GBps", "native_GBps", "vs_native", "ceiling_GBps",
            "vs_ceiling", "target_met"]
    write_outputs("algbw", args, env, command_line("algbw.py", argv), [(f"algbw ({args.backend}, {args.nprocs} "
                  "ranks, float32)", cols, rows)], TARGETS, extra={"raw": res[0]["rows"]},
                  notes="target_met: AllGather only (>= 64 MB: vs ceiling; 1 GB: also vs native).")
    return 0 if all(r["correct"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())

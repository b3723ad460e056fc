"""Lower the synthesizers' schedules to MSCCL++ plans over a wide matrix and report fit and cost.

    python benchmarks/mscclpp_plans.py [--chunks 2] [--repeats 3] [--quick]

For every (topology, failure, collective) the schedule (ForestColl with at most C chunks per
source, AllToAll with C chunks per block) is lowered (``mscclpp_plan.lower_schedule``) and checked
(``mscclpp_plan.check``, two launches included); the table gives the verdict or the MSCCL++ limit
that refused it, the plan's shape (threadblocks, ops, semaphores per GPU at most, scratch chunks),
whether its algbw equals the schedule's, and median lowering and checking times. Not a test: no
assertion on time.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _report import timed, write_results  # noqa: E402

from mscclpp_plan import PlanLimitError, check, lower_schedule, plan_algbw_GBps  # noqa: E402
from synth import COLLECTIVES, load_topology, synthesize  # noqa: E402
from synth.errors import TopologyError  # noqa: E402

SPECS = ("hpn:1x2x8", "h200-proto", "dgx-a100:2", "nvswitch:8", "ring:6", "torus:3x3")
FAILURES = (None, "fail1", "fail2", "fail3")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--chunks", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="two topologies only")
    args = ap.parse_args()
    specs = SPECS[:2] if args.quick else SPECS
    rows = []
    for spec in specs:
        for failure in FAILURES:
            try:
                topo = load_topology(spec, [failure] if failure else [])
            except TopologyError:
                continue
            for coll in COLLECTIVES:
                sched = synthesize(coll, topo, chunks=args.chunks).schedule
                assert sched is not None
                row: dict[str, object] = {"topology": spec, "failure": failure or "-", "collective": coll,
                                          "nranks": topo.nranks, "nchunks": sched.nchunks}  # fmt: skip
                try:
                    lower_s, _, plan = timed(lambda s=sched, t=topo: lower_schedule(s, t, verify=False), args.repeats)
                except PlanLimitError as exc:
                    row["verdict"] = "limit: " + str(exc).split(": ", 1)[-1].split(" (mscclpp@")[0]
                    rows.append(row)
                    continue
                check_s, _, verdict = timed(lambda p=plan: check(p), args.repeats)
                row.update(
                    verdict="valid" if verdict.valid else f"INVALID: {verdict.errors[0]}",
                    algbw_matches=math.isclose(plan_algbw_GBps(plan, topo), sched.algbw_GBps(topo), rel_tol=1e-9),
                    max_tbs=max(len(g.threadblocks) for g in plan.gpus),
                    max_ops=max(len(tb.ops) for g in plan.gpus for tb in g.threadblocks),
                    max_sems=max(len(g.semaphores) for g in plan.gpus),
                    scratch_chunks=max(g.scratch_chunks for g in plan.gpus),
                    lower_s=lower_s,
                    check_s=check_s,
                )
                rows.append(row)
                print(row, flush=True)
    columns = ["topology", "failure", "collective", "nranks", "nchunks", "verdict", "algbw_matches", "max_tbs",
               "max_ops", "max_sems", "scratch_chunks", "lower_s", "check_s"]  # fmt: skip
    valid = sum(r.get("verdict") == "valid" for r in rows)
    notes = f"{valid} of {len(rows)} cases lower to valid plans"
    notes += "." if valid == len(rows) else "; the others name the MSCCL++ limit that refused them."
    notes += " Times are medians of the repeats on this shared 2-core machine."
    cmd = "python benchmarks/mscclpp_plans.py" + (f" --chunks {args.chunks}" if args.chunks != 2 else "")
    cmd += " --quick" if args.quick else ""
    print(write_results("mscclpp_plans" + ("_quick" if args.quick else ""), columns, rows, cmd, notes))
    print(notes)


if __name__ == "__main__":
    main()

"""Closed loop on the flow simulator: detection delay, reaction time, algbw before/during/after.

For hpn:1x2x8 and hpn:1x4x8, fail1/fail2/fail3 injected at 1 s and cleared at 5 s (7 s simulated),
AllGather and AllToAll at 16 MiB and 128 MiB of input per rank, the in-process controller runs with
its defaults (α = 0.012, Γ = 0.1, cool-down 1 s; re-synthesis wall time charged to the simulated
clock, swap cost 0). A transient-only scenario per topology (microbursts on a cut link) must cause
zero re-syntheses.

    PYTHONPATH=. python benchmarks/closed_loop.py            # everything (minutes)
    PYTHONPATH=. python benchmarks/closed_loop.py --quick    # hpn:1x2x8, 16 MiB only
    PYTHONPATH=. python benchmarks/closed_loop.py --collectives allreduce,reducescatter   # the reductions
                                                             # (results/closed_loop_reductions[_quick].*)
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._report import RESULTS, write_results  # noqa: E402
from runtime.scenarios.timeline import plot_timeline, run_timeline, scenario_from_dict  # noqa: E402
from synth import load_topology  # noqa: E402

ANCHOR = ("MCCL anchor (2x4 H200 prototype, 16 MB AllGather, inter-node link 0<->4 halved): detects in 53.1 ms "
          "(alpha = 0.012), adapts in 24.7 ms (13.1 ms synthesis + 11.6 ms swap), reacts in 78.2 ms; AllGather algbw "
          "74.02 -> 44.76 -> 59.72 GB/s.")
COLUMNS = ["topology", "failure", "collective", "MiB_per_rank", "detect_ms", "detect_colls", "synth_ms",
           "reaction_ms", "before_GBps", "stale_GBps", "adapted_GBps", "speedup", "versions", "recovery_ms",
           "resyntheses", "false_positives", "warm_mode"]


def _scenario(topo: str, nranks: int, coll: str, per_rank: int, events: list[dict[str, Any]],
              duration_s: float) -> Any:
    size = per_rank * nranks if coll in ("allgather", "reducescatter") else per_rank  # S: output / input / buffer
    return scenario_from_dict({"format": "loopcoll.scenario/1", "topology": topo, "duration_s": duration_s,
                               "workload": [{"comm": "world", "collective": coll, "size_bytes": size}],
                               "events": events})


def run_case(topo: str, failure: str, coll: str, per_rank_mib: int) -> tuple[dict[str, Any], Any]:
    n = load_topology(topo).nranks
    sc = _scenario(topo, n, coll, per_rank_mib << 20, [{"start_s": 1.0, "end_s": 5.0, "failure": failure}], 7.0)
    res = run_timeline(sc)
    c = res.changes[0]
    warm = next((d.get("warm_mode") for d in res.decisions if d.get("event") == "synthesized"), None)
    row = {
        "topology": topo, "failure": failure, "collective": coll, "MiB_per_rank": per_rank_mib,
        "detect_ms": None if c.detection_delay_s is None else c.detection_delay_s * 1e3,
        "detect_colls": c.detection_collectives, "detect_samples": c.detection_samples,
        "synth_ms": None if c.synth_time_s is None else c.synth_time_s * 1e3,
        "reaction_ms": None if c.reaction_s is None else c.reaction_s * 1e3,
        "before_GBps": c.algbw_before_GBps, "stale_GBps": c.algbw_stale_GBps, "adapted_GBps": c.algbw_adapted_GBps,
        "speedup": c.speedup,
        "recovery_ms": None if c.recovery_reaction_s is None else c.recovery_reaction_s * 1e3,
        "recovered_GBps": c.algbw_recovered_GBps,
        "resyntheses": res.syntheses - 1, "publications": res.publications, "aborts": res.aborts,
        "false_positives": res.false_positives, "refinements": res.refinements, "warm_mode": warm,
        "versions": "" if c.version_after is None else f"v{c.version_before}->v{c.version_after}"
        + ("" if c.version_final == c.version_after else f"->v{c.version_final}"), "wall_s": res.wall_s,
    }
    return row, res


def run_transient(topo: str) -> dict[str, Any]:
    n = load_topology(topo).nranks
    bursts = [{"start_s": 0.2 + 0.4 * k, "end_s": 0.2 + 0.4 * k + 0.002, "link": link, "factor": 0.5,
               "transient": True}
              for k, link in enumerate(["gpu0->tor0.0", "gpu0->nvs0.0", "gpu1->tor0.1", "gpu0->tor0.0"])]
    sc = _scenario(topo, n, "allgather", 16 << 20, bursts, 2.0)
    res = run_timeline(sc)
    return {"topology": topo, "failure": "transient (4 bursts, 50 %, 2 ms)", "collective": "allgather",
            "MiB_per_rank": 16, "resyntheses": res.syntheses - 1, "publications": res.publications,
            "false_positives": res.false_positives, "aborts": res.aborts, "wall_s": res.wall_s,
            "before_GBps": statistics.median(r["algbw_GBps"] for r in res.rows)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="hpn:1x2x8 and 16 MiB only")
    ap.add_argument("--plot", action="store_true", help="also write timeline PNGs of the hpn:1x2x8 16 MiB cases")
    ap.add_argument("--collectives", default="allgather,alltoall",
                    help="comma-separated collectives (default allgather,alltoall; allreduce and reducescatter "
                         "write closed_loop_reductions)")
    args = ap.parse_args(argv)
    colls = tuple(c.strip() for c in args.collectives.split(",") if c.strip())
    known = ("allgather", "alltoall", "allreduce", "reducescatter")
    if not colls or any(c not in known for c in colls):
        ap.error(f"--collectives: each must be one of {', '.join(known)}, got {args.collectives!r}")
    default = colls == ("allgather", "alltoall")
    topos = ["hpn:1x2x8"] if args.quick else ["hpn:1x2x8", "hpn:1x4x8"]
    sizes = [16] if args.quick else [16, 128]
    rows = []
    t0 = time.perf_counter()
    for topo in topos:
        for failure in ("fail1", "fail2", "fail3"):
            for coll in colls:
                for mib in sizes:
                    row, res = run_case(topo, failure, coll, mib)
                    rows.append(row)
                    print(f"[{time.perf_counter() - t0:7.1f} s] {topo} {failure} {coll} {mib} MiB: detect "
                          f"{row['detect_ms']} ms, reaction {row['reaction_ms']} ms, {row['stale_GBps']} -> "
                          f"{row['adapted_GBps']} GB/s", file=sys.stderr, flush=True)
                    if args.plot and topo == "hpn:1x2x8" and mib == 16:
                        RESULTS.mkdir(parents=True, exist_ok=True)
                        plot_timeline(res, RESULTS / f"closed_loop_{failure}_{coll}.png")
        if default:
            rows.append(run_transient(topo))
    notes = (ANCHOR + "\n\nThis run: the flow simulator (ideal costs, 4 slices per chunk, rtol 1e-3) on each "
             "topology; failure on [1 s, 5 s) of 7 s; controller defaults (alpha 0.012, gamma 0.1, cool-down 1 s, "
             "recovery check 5 s); re-synthesis wall time (this machine, shared, noisy) charged to the simulated "
             "clock, swap cost 0 (MCCL's 11.6 ms is executor-side). detect = failure start -> flag (one EWMA "
             "observation per collective); reaction = failure start -> first collective on the new version; "
             "stale = old version under the failure; adapted = the last version in effect under the failure "
             "(a refinement follows a pessimistic first estimate, docs/controller.md section 2); speedup = "
             "adapted/stale; recovery = clear -> first collective on a version published after it (empty when "
             "the adapted version stays within the min-gain of the re-synthesized one). One run per case (the "
             "loop is deterministic except for the synthesis time). Wall: "
             f"{time.perf_counter() - t0:.0f} s.")
    cmd = "PYTHONPATH=. python benchmarks/closed_loop.py" + (" --quick" if args.quick else "") + \
        ("" if default else f" --collectives {','.join(colls)}")
    name = "closed_loop" + ("" if default else "_reductions") + ("_quick" if args.quick else "")
    table = write_results(name, COLUMNS, rows, cmd, notes)
    print(table)
    print()
    print(ANCHOR)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

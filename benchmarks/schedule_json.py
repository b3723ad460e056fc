"""The schedule JSON at 128–2048 GPUs: size and time of the compact ``loopcoll-schedule/2`` form, and deploy.

Run ``python benchmarks/schedule_json.py [--quick] [--specs hpn:1x16x8 ...]``; prints a table and writes
``benchmarks/results/schedule_json.json`` and ``.md``. Per hpn fabric, on the NCCL-like ring AllGather
baseline that bootstraps the loop (:func:`runtime.loop.bootstrap.fallback_schedule`), each in a fresh process:

* ``routes``, ``route_hops`` (routes × hops: what the old ``/1`` form spelt out), ``table_hops`` (distinct
  hops in the ``/2`` hop table), ``windows`` (routes written as cycle windows);
* ``v2_bytes``; ``v1_bytes`` (the old form, only up to ``--v1-max-gpus``, default 512: at 2048 GPUs it
  needs ~10 GB);
* ``to_json_s``, ``from_json_s``: write and read back the ``/2`` text;
* ``deploy_s``: ``Controller.deploy`` of version 1 (torch target, no XML: fit, render, store publish), as
  ``benchmarks/loop_scale.py`` deploys it; ``peak_rss_MiB``: the process's peak RSS after all of it (baseline
  built, written, read back, deployed), measured before ``v1_bytes`` builds the old form.

Times are single runs and CPU-bound: run it alone, or label the figures as taken under load.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks._report import write_results  # noqa: E402

COLUMNS = ("spec", "ranks", "routes", "route_hops", "table_hops", "windows", "v2_bytes", "v1_bytes", "to_json_s",
           "from_json_s", "deploy_s", "peak_rss_MiB")
FULL = ("hpn:1x16x8", "hpn:4x16x8", "hpn:8x16x8", "hpn:16x16x8")
QUICK = ("hpn:1x2x8", "hpn:1x16x8")


def _row(spec: str, v1_max_gpus: int) -> dict[str, Any]:
    """One fabric's row, measured in this (fresh) process."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import loop_scale  # the controller exactly as the loop benchmark builds it

    from runtime.loop.bootstrap import fallback_schedule
    from synth import load_topology
    from synth.schedule import Schedule

    topo = load_topology(spec)
    sched = fallback_schedule("allgather", topo)
    t0 = time.perf_counter()
    text = sched.to_json()
    t1 = time.perf_counter()
    back = Schedule.from_json(text)
    t2 = time.perf_counter()
    assert back == sched, "round trip"
    doc = json.loads(text)
    del back, doc["meta"]
    with tempfile.TemporaryDirectory() as store:
        t3 = time.perf_counter()
        loop_scale._controller(topo, spec, "allgather", store, sched, export=False)
        t4 = time.perf_counter()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # before the old form is built
    v1 = len(json.dumps(sched.to_dict(legacy=True), sort_keys=True, separators=(",", ":"))) + 1 \
        if topo.nranks <= v1_max_gpus else None
    return {"spec": spec, "ranks": topo.nranks, "routes": len(sched.routes),
            "route_hops": sum(len(r.hops) for r in sched.routes), "table_hops": len(doc["hops"]),
            "windows": sum("window" in r for r in doc["routes"]), "v2_bytes": len(text), "v1_bytes": v1,
            "to_json_s": round(t1 - t0, 3), "from_json_s": round(t2 - t1, 3), "deploy_s": round(t4 - t3, 3),
            "peak_rss_MiB": round(rss)}


def main(argv: list[str] | None = None) -> int:
    """Measure every spec in a fresh process and write the results."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK)}")
    ap.add_argument("--specs", nargs="+", default=None, help="hpn fabrics (default: 128 to 2048 GPUs)")
    ap.add_argument("--v1-max-gpus", type=int, default=512, help="write the old /1 form only up to this many GPUs")
    args = ap.parse_args(argv)
    specs = args.specs or (QUICK if args.quick else FULL)
    ctx = multiprocessing.get_context("spawn")
    rows = []
    for spec in specs:
        with ctx.Pool(1) as pool:  # a fresh process per fabric: its peak RSS is this fabric's
            rows.append(pool.apply(_row, (spec, args.v1_max_gpus)))
        print({k: rows[-1][k] for k in COLUMNS}, flush=True)
    command = "python benchmarks/schedule_json.py" + (" --quick" if args.quick else "") + \
        (" --specs " + " ".join(args.specs) if args.specs else "")
    print(write_results("schedule_json", COLUMNS, rows, command,
                        notes="Single runs, CPU-bound; the sizes and counts are exact, the times depend on the load."))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""``loopcoll demo``: the main job on an embedded default, end to end.

On ``hpn:1x2x8`` (two 8-GPU hosts, rail-optimised): synthesize AllGather and AllToAll on the
healthy fabric, apply ``fail2`` (rank 0's NIC drops to 50 Gbit/s), re-synthesize warm from the
healthy results (and cold, to compare solve times), lower to MSCCL XML, check the XML, and print
optimal / NCCL / static / re-synthesized algbw with speedups.

Files are written only where ``--out-dir DIR`` says: without it the XML is still lowered and
checked (in a temporary directory, removed afterwards) and nothing is left in the current
directory.

The warm start passes the healthy :class:`~synth.SynthResult` itself, so AllToAll keeps its
in-memory warm state and takes the certified local repair where it applies; the ``warm mode``
column says what the warm start did (AllToAll's ``warm_mode``: ``repair``, ``state``, ...; for
AllGather, how its previous trees were accepted: ``repair``, ``partial``, ``all``, ``none``).

The table shows bandwidth-term algbw unless ``--profile`` is given; then it adds the flow
simulation of the three schedules at ``--size`` per source under that cost profile (``ideal``,
``h200`` or a ``loopcoll.calibration/1`` file), and the output names the profile.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from loopcoll._common import parse_size, print_json
from loopcoll._demo_live import add_live_arguments, run_live_demo
from loopcoll._log import configure_progress
from msccl_xml import export
from synth import load_topology, optimal_bound, synthesize, write_schedule
from synth.baselines import nccl_direct_alltoall, nccl_ring
from synth.figures import Figures, TreeFigures, warm_mode_of

__all__ = ["register", "run_demo"]


def run_demo(
    spec: str,
    failures: list[str],
    out_dir: Path | None,
    chunks: int | None,
    profile: str | None = None,
    size_bytes: int = 128 * 2**20,
) -> list[dict[str, object]]:
    """Run the demo and return one row per collective (also used by tests).

    With ``profile``, rows also hold ``*_sim_GBps``: the simulated algbw at ``size_bytes`` per
    source under that cost profile, and ``profile`` its name. The checked XML and the schedules go
    into ``out_dir``; with ``None`` into a temporary directory that is removed (rows' ``xml`` is None).
    """
    if out_dir is None:
        with tempfile.TemporaryDirectory(prefix="loopcoll-demo-") as tmp:
            kept = run_demo(spec, failures, Path(tmp), chunks, profile, size_bytes)
        return [{**r, "xml": None} for r in kept]
    healthy = load_topology(spec)
    degraded = load_topology(spec, failures)
    out_dir.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, object]] = []
    for collective in ("allgather", "alltoall"):
        c = chunks  # None: each synthesizer's own choice (AllToAll: K within 0.1 % of its LP, docs/exactness.md)
        static = synthesize(collective, healthy, chunks=c)
        start = time.perf_counter()
        cold = synthesize(collective, degraded, chunks=c)
        cold_s = time.perf_counter() - start
        start = time.perf_counter()
        warm = synthesize(collective, degraded, chunks=c, warm_from=static)
        warm_s = time.perf_counter() - start
        assert static.schedule is not None and warm.schedule is not None and cold.schedule is not None
        baseline = nccl_direct_alltoall(degraded) if collective == "alltoall" else nccl_ring(collective, degraded)
        optimal = optimal_bound(collective, degraded).algbw_GBps
        xml_path = out_dir / f"{collective}_{degraded.name}.xml"
        export(warm.schedule, degraded, str(xml_path), runtime="msccl-executor-nccl", protocol="Simple")
        write_schedule(warm.schedule, str(out_dir / f"{collective}_{degraded.name}.json"))
        nccl = baseline.algbw_GBps(degraded)
        static_bw = static.schedule.algbw_GBps(degraded)
        resynth = warm.schedule.algbw_GBps(degraded)
        rows.append({
            "collective": collective,
            "optimal_GBps": optimal,
            "nccl_GBps": nccl,
            "static_GBps": static_bw,
            "resynth_GBps": resynth,
            "speedup_vs_nccl": resynth / nccl,
            "speedup_vs_static": resynth / static_bw,
            "nccl_baseline": baseline.meta["baseline"],
            "nccl_baseline_reason": baseline.meta["baseline_reason"],
            "warm_mode": _warm_mode(warm.figures),
            "cold_s": cold_s,
            "warm_s": warm_s,
            "xml": str(xml_path),
        })
        if profile is not None:
            rows[-1].update(_simulated(collective, degraded, baseline, static.schedule, warm.schedule, profile, size_bytes))
    return rows


def _warm_mode(figures: Figures | None) -> str | None:
    """How the warm re-synthesis started: AllToAll's ``warm_mode``, ForestColl's kept-trees attempt."""
    if isinstance(figures, TreeFigures):
        return figures.warm_accept
    return warm_mode_of(figures)


def _simulated(collective: str, topo, baseline, static, resynth, profile: str, size_bytes: int) -> dict[str, object]:  # type: ignore[no-untyped-def]
    from synth.simulation import auto_slices, load_profile, simulate
    from synth.simulation.costmodel import inherited_costs

    prof = load_profile(profile)
    nbytes = size_bytes * topo.nranks if collective == "allgather" else size_bytes
    out: dict[str, object] = {"profile": prof.name, "sim_nbytes": nbytes}
    used = []
    for key, sched in (("nccl", baseline), ("static", static), ("resynth", resynth)):
        res = simulate(sched, topo, nbytes, slices_per_chunk=auto_slices(sched, nbytes), profile=prof)
        out[f"{key}_sim_GBps"] = res.algbw_GBps
        used.append(res.executor)
    out["profile_from_base"] = inherited_costs(prof, used)
    out["sim_speedup_vs_nccl"] = float(out["resynth_sim_GBps"]) / float(out["nccl_sim_GBps"])  # type: ignore[arg-type]
    return out


def _run(args: argparse.Namespace) -> int:
    configure_progress(args.quiet or args.json or args.live)
    if args.live:
        return run_live_demo(args)
    failures = args.fail or ["fail2"]

    size = parse_size(args.size)
    out_dir = None if args.out_dir is None else Path(args.out_dir)
    rows = run_demo(args.topology, failures, out_dir, args.chunks, args.profile, size)
    if args.json:
        print_json({"topology": args.topology, "failures": failures, "profile": args.profile, "rows": rows})
        return 0
    print(f"loopcoll demo: {args.topology} with {'+'.join(failures)} (bandwidth-term algbw, GB/s)")
    head = (f"{'collective':<10} {'optimal':>8} {'NCCL':>8} {'static':>8} {'re-synth':>9} "
            f"{'vs NCCL':>8} {'vs static':>9} {'cold s':>7} {'warm s':>7} {'warm mode':>9}")
    print(head)
    print("-" * len(head))
    for r in rows:
        print(
            f"{r['collective']:<10} {r['optimal_GBps']:>8.2f} {r['nccl_GBps']:>8.2f} {r['static_GBps']:>8.2f} "
            f"{r['resynth_GBps']:>9.2f} {r['speedup_vs_nccl']:>7.2f}x {r['speedup_vs_static']:>8.2f}x "
            f"{r['cold_s']:>7.3f} {r['warm_s']:>7.3f} {r['warm_mode']!s:>9}"
        )
    for r in rows:
        print(f"NCCL = NCCL-like baseline for {r['collective']}: {r['nccl_baseline']}: {r['nccl_baseline_reason']}")
    if args.profile is not None:
        print(f"\nsimulated algbw at {args.size} per source, profile {rows[0]['profile']} (GB/s)")
        from synth.simulation.costmodel import inherited_note, load_profile

        note = inherited_note(load_profile(args.profile), {k for r in rows for k in r["profile_from_base"]})  # type: ignore[attr-defined]
        if note:
            print(note)
        head = f"{'collective':<10} {'NCCL':>8} {'static':>8} {'re-synth':>9} {'vs NCCL':>8}"
        print(head)
        print("-" * len(head))
        for r in rows:
            print(f"{r['collective']:<10} {r['nccl_sim_GBps']:>8.2f} {r['static_sim_GBps']:>8.2f} "
                  f"{r['resynth_sim_GBps']:>9.2f} {r['sim_speedup_vs_nccl']:>7.2f}x")
    if out_dir is None:
        print("MSCCL XML lowered and checked; nothing written (--out-dir DIR keeps the XML and schedules)")
    else:
        print(f"checked MSCCL XML and schedules written to {out_dir}/")
    return 0


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``demo``."""
    p = sub.add_parser(
        "demo",
        help="end-to-end demo on hpn:1x2x8 with fail2",
        description="Synthesize AllGather and AllToAll, degrade the fabric, re-synthesize warm, write and check "
        "MSCCL XML, and compare with NCCL-like and static schedules.",
    )
    p.add_argument("--topology", default="hpn:1x2x8", metavar="SPEC",
                   help="named spec or JSON file (default hpn:1x2x8; with --live hpn:1x2x2)")
    p.add_argument("--fail", action="append", metavar="F", help="failure scenario(s) to apply (default fail2)")
    p.add_argument("--out-dir", default=None, metavar="DIR",
                   help="write the checked MSCCL XML and schedule JSONs (with --live: live.png, live.json) into "
                   "DIR; without it nothing is written")
    p.add_argument("--chunks", type=int, default=None, metavar="C", help="chunks per source (AllGather) or per block (AllToAll); default: the synthesizer's own choice")
    p.add_argument("--profile", metavar="PROFILE", default=None,
                   help="also simulate at --size under this cost profile (ideal, h200, or a loopcoll.calibration/1 file)")
    p.add_argument("--size", default="128M", metavar="SIZE", help="bytes per source for --profile (default 128M)")
    p.add_argument("--quiet", action="store_true", help="nothing on stderr but errors (no progress, no warnings)")
    p.add_argument("--json", action="store_true", help="print the rows as one JSON object")

    add_live_arguments(p)
    p.set_defaults(func=_run)

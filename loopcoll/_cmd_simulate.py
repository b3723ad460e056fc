"""``loopcoll simulate``: compare schedules with the flow-level simulator over message sizes."""

from __future__ import annotations

import argparse

from loopcoll._common import add_topology_args, parse_sizes, print_json, topology_from_args
from loopcoll._log import configure_progress
from msccl_xml import program_to_schedule, read
from msccl_xml.deploy import unbounded_chunk_cap
from synth import COLLECTIVES, Schedule, optimal_bound, read_schedule, synthesize
from synth.baselines import describe_baseline, nccl_direct_alltoall, nccl_ring
from synth.bounds import busbw_GBps
from synth.errors import LoopcollError, ScheduleError
from synth.fileio import write_bytes_atomic
from synth.topologies.model import Topology

__all__ = ["nccl_tests_table", "register"]

DEFAULT_SIZES = "1M,4M,16M,64M,256M,1G"
KINDS = ("loopcoll", "nccl", "static", "pareto")
#: The element type of the nccl-tests-like table (nccl-tests' default ``-d float``) and its size.
TABLE_TYPE, TABLE_TYPE_BYTES = "float", 4


def _label(nbytes: int) -> str:
    for unit, scale in (("G", 2**30), ("M", 2**20), ("K", 2**10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale}{unit}"
    return str(nbytes)


def nccl_tests_table(rows: list[dict[str, object]]) -> list[str]:
    """nccl-tests-style lines for one schedule's rows (``nbytes``, ``count``, ``type``, ``time_us``,
    ``algbw_GBps``, ``busbw_GBps``): two header lines, then one line per size.

    >>> for line in nccl_tests_table([{"nbytes": 1048576, "count": 262144, "type": "float", "time_us": 10.5,
    ...                                "algbw_GBps": 99.864, "busbw_GBps": 93.6225}]):
    ...     print(line)
    #       size         count      type      time   algbw   busbw
    #        (B)    (elements)                (us)  (GB/s)  (GB/s)
         1048576        262144     float     10.50   99.86   93.62
    """
    out = [f"#{'size':>11}  {'count':>12}  {'type':>8}  {'time':>8}  {'algbw':>6}  {'busbw':>6}",
           f"#{'(B)':>11}  {'(elements)':>12}  {'':>8}  {'(us)':>8}  {'(GB/s)':>6}  {'(GB/s)':>6}"]
    for r in rows:
        out.append(f"{r['nbytes']:>12}  {r['count']:>12}  {r['type']:>8}  {r['time_us']:>8.2f}  "
                   f"{r['algbw_GBps']:>6.2f}  {r['busbw_GBps']:>6.2f}")
    return out


def _schedules(args: argparse.Namespace, topo: Topology, sizes: list[int]) -> list[tuple[str, Schedule]]:
    out: list[tuple[str, Schedule]] = []
    kinds = [k.strip() for k in args.schedules.split(",") if k.strip()]
    for k in kinds:
        if k not in KINDS:
            raise LoopcollError(f"unknown schedule kind {k!r}; choose from {', '.join(KINDS)}")
    chunks = (10 if args.chunks is None else args.chunks) if args.collective == "alltoall" else args.chunks
    healthy = topology_from_args(args, failures=False) if args.fail else topo
    static = None
    if "static" in kinds or ("loopcoll" in kinds and args.fail):
        res = synthesize(args.collective, healthy, chunks=chunks)
        static = res.schedule
    for k in kinds:
        if k == "pareto":
            from synth.latency.pareto import pareto_set

            cap = args.chunks
            if cap is None and args.collective != "alltoall":  # D = inf: what the simulator takes at these sizes
                cap = unbounded_chunk_cap(args.collective, topo.nranks, sizes)
            for p in pareto_set(args.collective, topo, chunks=args.chunks, unbounded_chunks=cap):
                out.append((f"{p.label} (depth {p.depth})", p.schedule))
            continue
        if k == "nccl":
            sched = nccl_direct_alltoall(topo) if args.collective == "alltoall" else nccl_ring(args.collective, topo)
        elif k == "static":
            assert static is not None
            sched = static
        else:
            res = synthesize(args.collective, topo, chunks=chunks, warm_from=static if args.fail else None)
            assert res.schedule is not None
            sched = res.schedule
        out.append((k, sched))
    for path in args.schedule or []:
        sched = read_schedule(path)
        if sched.collective != args.collective:
            raise ScheduleError(f"{path}: holds a schedule of collective {sched.collective!r}, not {args.collective!r}")
        sched.validate(topo)
        out.append((path, sched))
    for path in args.xml or []:
        sched = program_to_schedule(read(path), topo)
        if sched.collective != args.collective:
            raise ScheduleError(f"{path}: holds a program of collective {sched.collective!r}, not {args.collective!r}")
        out.append((path, sched))
    if not out:
        raise LoopcollError("nothing to simulate: give --schedules, --schedule or --xml")
    return out


def _plot(path: str, title: str, sizes: list[int], series: dict[str, list[float]], bound: float) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise LoopcollError("--plot needs matplotlib: pip install 'loopcoll[plot]'") from exc
    from io import BytesIO

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for name, values in series.items():
        ax.plot(sizes, values, marker="o", label=name)
    ax.axhline(bound, color="k", linestyle="--", linewidth=1, label="optimal bound")
    ax.set_xscale("log", base=2)
    ax.set_xticks(sizes)
    ax.set_xticklabels([_label(s) for s in sizes])
    ax.set_xlabel("message size (bytes, nccl-tests convention)")
    ax.set_ylabel("algbw (GB/s)")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    buf = BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    write_bytes_atomic(path, buf.getvalue())


def _run(args: argparse.Namespace) -> int:
    from synth.simulation import auto_slices, load_profile, simulate
    from synth.simulation.costmodel import inherited_costs, inherited_note

    configure_progress(args.quiet or args.json)
    profile = load_profile(args.profile)
    topo = topology_from_args(args)
    sizes = parse_sizes(args.sizes)
    scheds = _schedules(args, topo, sizes)
    bound = optimal_bound(args.collective, topo).algbw_GBps
    series: dict[str, list[float]] = {}
    rows = []
    for name, sched in scheds:
        series[name] = []
        for size in sizes:
            slices = args.slices if args.slices is not None else auto_slices(sched, size)
            sim = simulate(sched, topo, size, slices_per_chunk=slices, rtol=args.rtol, profile=profile)
            series[name].append(sim.algbw_GBps)
            rows.append({
                "schedule": name,
                "nbytes": size,
                "count": size // TABLE_TYPE_BYTES,
                "type": TABLE_TYPE,
                "time_us": sim.time_s * 1e6,
                "algbw_GBps": sim.algbw_GBps,
                "busbw_GBps": busbw_GBps(args.collective, sim.algbw_GBps, topo.nranks),
                "bandwidth_term_algbw_GBps": sched.algbw_GBps(topo),
                "executor": sim.executor,
            })
    if args.plot:
        _plot(args.plot, f"{args.collective} on {topo.name} (profile {profile.name})", sizes, series, bound)
    nccl = next((sched for name, sched in scheds if name == "nccl"), None)
    used = {str(r["executor"]) for r in rows}
    if args.json:
        doc = {"collective": args.collective, "topology": topo.name, "nranks": topo.nranks, "profile": profile.name,
               "profile_from_base": inherited_costs(profile, used),
               "optimal_algbw_GBps": bound, "results": rows}
        if nccl is not None:
            doc["nccl_baseline"] = str(nccl.meta["baseline"])
            doc["nccl_baseline_reason"] = str(nccl.meta["baseline_reason"])
        print_json(doc)
        return 0
    print(f"{args.collective} on {topo.name} ({topo.nranks} ranks); optimal algbw {bound:.2f} GB/s; simulated algbw GB/s"
          f" (profile {profile.name})")
    if nccl is not None:
        print(f"nccl = NCCL-like baseline {describe_baseline(nccl)} (layout read from the topology graph)")
    note = inherited_note(profile, used)
    if note:
        print(note)
    names = [n for n, _ in scheds]
    for name in names:  # per schedule, as nccl-tests prints it; the summary below keeps the last lines
        print(f"# {name}: {args.collective}, {topo.nranks} ranks, profile {profile.name}")
        for line in nccl_tests_table([r for r in rows if r["schedule"] == name]):
            print(line)
        print()
    width = max(10, *(len(n) for n in names))
    print(f"{'size':>6} " + " ".join(f"{n:>{width}}" for n in names))
    for i, size in enumerate(sizes):
        print(f"{_label(size):>6} " + " ".join(f"{series[n][i]:>{width}.2f}" for n in names))
    pareto = [(n, sched) for n, sched in scheds if n.startswith("D")]
    if pareto:
        print("Pareto set (depth, bandwidth-term algbw GB/s): " + "; ".join(
            f"{n}: {sched.algbw_GBps(topo):.2f}" for n, sched in pareto))
        best = [min(names, key=lambda n: -series[n][i]) for i in range(len(sizes))]
        print("fastest per size: " + ", ".join(f"{_label(s)} {b}" for s, b in zip(sizes, best)))
    if args.plot:
        print(f"wrote {args.plot}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``simulate``."""
    p = sub.add_parser(
        "simulate",
        help="simulate schedules over message sizes",
        description="Simulate schedules (loopcoll re-synthesized, NCCL-like baseline, static = synthesized for the "
        "healthy topology, schedule JSON or MSCCL XML files) on a topology with failures, over message sizes.",
    )
    p.add_argument("collective", choices=COLLECTIVES)
    add_topology_args(p)
    p.add_argument("--schedules", default="loopcoll,nccl,static",
                   help="comma list of loopcoll, nccl, static, pareto (the depth/throughput Pareto set: one column per "
                   "depth bound, AllToAll per max_steps bound; docs/latency.md) (default loopcoll,nccl,static)")
    p.add_argument("--schedule", action="append", metavar="SCHED.json", help="also simulate this schedule file")
    p.add_argument("--xml", action="append", metavar="FILE.xml", help="also simulate this MSCCL XML program")
    p.add_argument("--sizes", default=DEFAULT_SIZES, help=f"message sizes (default {DEFAULT_SIZES})")
    p.add_argument("--chunks", type=int, default=None, metavar="C", help="chunks for synthesized schedules")
    p.add_argument("--slices", type=int, default=None, metavar="K",
                   help="pipelining slices per chunk (default: about 4 MiB slices, 4..64 per chunk)")
    p.add_argument("--rtol", type=float, default=3e-4, metavar="R",
                   help="event batching window, relative to the current time (default 3e-4; 0 = exact, slow on "
                        "large asymmetric schedules; at most 0.1)")
    p.add_argument("--profile", default="ideal", metavar="PROFILE",
                   help="cost profile: ideal (pure bandwidth model, default), h200, or a loopcoll.calibration/1 file")
    p.add_argument("--plot", metavar="FILE.png", help="draw algbw vs message size")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--quiet", action="store_true", help="nothing on stderr but errors (no progress, no warnings)")
    p.set_defaults(func=_run)

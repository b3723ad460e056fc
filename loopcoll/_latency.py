"""``loopcoll synth … --max-depth D`` and ``--sizes LIST``: depth-bounded and size-aware tree schedules."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from loopcoll._common import parse_sizes, print_json, result_json
from msccl_xml.deploy import fit_bands, unbounded_chunk_cap
from msccl_xml.targets import MscclTarget
from synth import Schedule, write_schedule
from synth.errors import LoopcollError, ScheduleError
from synth.figures import DepthFigures
from synth.fileio import write_bytes_atomic
from synth.latency import synthesize_depth_bounded
from synth.latency.pareto import pareto_set
from synth.latency.select import choose_bands
from synth.result import Status
from synth.topologies.model import Topology

#: Share of ``--time-limit`` the Pareto set of ``synth --sizes`` gets; the band choice has the rest.
SIZES_PARETO_SHARE = 0.75

__all__ = ["band_path", "parse_depths", "run_max_depth", "run_sizes"]


def parse_depths(text: str) -> list[int | None]:
    """``"1,2,inf"`` → ``[1, 2, None]``.

    >>> parse_depths("1, 3,inf")
    [1, 3, None]
    """
    out: list[int | None] = []
    for tok in (t.strip().lower() for t in text.split(",")):
        if not tok:
            continue
        if tok in ("inf", "none", "unbounded"):
            out.append(None)
            continue
        try:
            d = int(tok)
        except ValueError:
            raise LoopcollError(f"bad depth bound {tok!r} in --depths: expected integers >= 1 or inf") from None
        if d < 1:
            raise LoopcollError(f"bad depth bound {d} in --depths: must be >= 1")
        out.append(d)
    if not out:
        raise LoopcollError("--depths is empty")
    return out


def band_path(path: str, index: int) -> str:
    """``out.xml`` → ``out.b0.xml`` (one file per band).

    >>> band_path("dir/ag.xml", 2)
    'dir/ag.b2.xml'
    """
    p = Path(path)
    return str(p.with_name(f"{p.stem}.b{index}{p.suffix}"))


def _write_programs(per_band: list[tuple[int, int | None, Schedule]], topo: Topology, paths: list[str],
                    args: argparse.Namespace) -> None:
    """Write each band's MSCCL XML (``--runtime``, ``--protocol``, the band's own bounds) to its path,
    after every band's program is made and checked (:func:`msccl_xml.deploy.fit_bands`)."""
    version = fit_bands(per_band, topo, MscclTarget(args.runtime), protocol=args.protocol, share=False)
    for band, path in zip(version.bands, paths):
        assert band.program is not None  # strict: a program or an error
        write_bytes_atomic(path, band.program)


def run_max_depth(args: argparse.Namespace, topo: Topology, warm: Schedule | None) -> int:
    """One depth-bounded schedule (``--max-depth``)."""
    res = synthesize_depth_bounded(args.collective, topo, args.max_depth, chunks=args.chunks, warm_from=warm,
                                   time_limit_s=args.time_limit)
    if res.schedule is None:
        raise ScheduleError(f"{args.collective} on {topo.name}: no schedule ({res.status.value}: {res.message})")
    if args.output:
        _write_programs([(0, None, res.schedule)], topo, [args.output], args)
    if args.schedule_out:
        write_schedule(res.schedule, args.schedule_out)
    st = res.figures
    assert isinstance(st, DepthFigures)  # every depth-bounded result with a schedule has them
    if args.json:
        doc = result_json(args.collective, topo.name, topo.nranks, res)
        doc.update(max_depth=st.max_depth, depth=st.depth, lp_algbw_GBps=st.lp_algbw_GBps,
                   depth_bound_algbw_GBps=st.depth_bound_algbw_GBps,
                   unbounded_optimal_algbw_GBps=st.unbounded_optimal_algbw_GBps, lp_gap_pct=st.lp_gap_pct)
        print_json(doc)
        return 0
    print(f"{args.collective} on {topo.name} ({topo.nranks} ranks, depth {st.depth} <= {args.max_depth}, "
          f"{res.schedule.nchunks} chunks): algbw {res.algbw_GBps:.3f} GB/s; depth-{args.max_depth} bound "
          f"{st.depth_bound_algbw_GBps:.3f}, unbounded optimum {st.unbounded_optimal_algbw_GBps:.3f} GB/s")
    print(f"  solve {res.solve_time_s:.3f} s; status: {res.status_text(_bound_name(args.max_depth))}; {res.message}")
    for path, what in ((args.output, "MSCCL XML"), (args.schedule_out, "schedule")):
        if path:
            print(f"  wrote {what} to {path}")
    return 0


def run_sizes(args: argparse.Namespace, topo: Topology, warm: Schedule | None) -> int:
    """The Pareto set and one schedule per size band (``--sizes``)."""
    sizes = parse_sizes(args.sizes)
    unbounded = args.chunks
    if unbounded is None:
        unbounded = unbounded_chunk_cap(args.collective, topo.nranks, sizes, MscclTarget(args.runtime))
    started = time.perf_counter()
    # --time-limit bounds the whole call: the Pareto set gets 3/4 of it, the band choice the rest
    # (at least a quarter; a size whose simulations have begun is finished).
    share = None if args.time_limit is None else SIZES_PARETO_SHARE * args.time_limit
    points = pareto_set(args.collective, topo, depths=parse_depths(args.depths), chunks=args.chunks,
                        unbounded_chunks=unbounded, time_limit_s=share)
    from synth.simulation.costmodel import executor_for, inherited_costs, inherited_note, load_profile

    profile = load_profile(args.profile)
    left = None if args.time_limit is None else \
        max(args.time_limit - (time.perf_counter() - started), (1 - SIZES_PARETO_SHARE) * args.time_limit)
    bands = choose_bands(points, topo, sizes, profile, time_limit_s=left)
    used = {executor_for(p.schedule) for p in points}
    written: list[str] = []
    if args.output:
        _write_programs([(b.min_bytes, b.max_bytes, points[b.point].schedule) for b in bands], topo,
                        [band_path(args.output, i) for i in range(len(bands))], args)
    for i, b in enumerate(bands):
        sched = points[b.point].schedule
        if args.output:
            written.append(band_path(args.output, i))
        if args.schedule_out:
            written.append(band_path(args.schedule_out, i))
            write_schedule(sched.with_meta(band={"min_bytes": b.min_bytes, "max_bytes": b.max_bytes}), written[-1])
    entry = None
    if args.store:
        from runtime.formats.store import VersionStore

        store = VersionStore(args.store)
        entry = store.publish(args.comm, args.collective,
                              [(b.min_bytes, b.max_bytes, points[b.point].result) for b in bands],
                              reason=f"synth --sizes {args.sizes} (profile {args.profile})", topology=topo,
                              extra={"pareto": [_point_doc(p) for p in points]})
    if args.json:
        doc: dict[str, Any] = {
            "collective": args.collective, "topology": topo.name, "nranks": topo.nranks, "profile": args.profile,
            "profile_from_base": inherited_costs(profile, used), "pareto": [_point_doc(p) for p in points], "unbounded_chunk_cap": unbounded,
            "bands": [{"min_bytes": b.min_bytes, "max_bytes": b.max_bytes, "choice": points[b.point].label,
                       "size_bytes": b.size_bytes, "predicted_us": [t * 1e6 for t in b.predicted_s],
                       "method": b.method} for b in bands],
            "written": written, "store_version": None if entry is None else entry.version,
        }
        print_json(doc)
        return 0
    print(f"{args.collective} on {topo.name} ({topo.nranks} ranks): Pareto set")
    for p in points:
        capped = f", at most {unbounded} chunks per source" if p.max_depth is None and unbounded is not None \
            and p.result.status is not Status.OPTIMAL else ""
        print(f"  {p.label:>6}: depth {p.depth:>3}, algbw {p.algbw_GBps:9.3f} GB/s, {p.schedule.nchunks} chunks; "
              f"{p.result.status_text(_bound_name(p.max_depth))}{capped}")
    print(f"bands (profile {args.profile}):")
    note = inherited_note(profile, used)
    if note:
        print(f"  {note}")
    for b in bands:
        hi = "inf" if b.max_bytes is None else str(b.max_bytes)
        how = "" if b.method == "simulated" else f", {b.method}: the time limit left no time to simulate"
        print(f"  [{b.min_bytes}, {hi}] -> {points[b.point].label} (predicted {b.predicted_s[b.point] * 1e6:.1f} us "
              f"at {b.size_bytes} B{how})")
    for path in written:
        print(f"  wrote {path}")
    if entry is not None:
        print(f"  published {args.comm}/{args.collective} v{entry.version} to {args.store}")
    return 0


def _point_doc(p: Any) -> dict[str, Any]:
    return {"label": p.label, "max_depth": p.max_depth, "depth": p.depth, "algbw_GBps": p.algbw_GBps,
            "nchunks": p.schedule.nchunks, "status": p.result.status.value, "gap_pct": p.result.gap_pct}


def _bound_name(max_depth: int | None) -> str:
    """What a depth-bounded result's ``optimal_algbw_GBps`` is, for its status text."""
    return "optimum" if max_depth is None else f"depth-{max_depth} bound"

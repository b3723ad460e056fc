"""Latency-aware AllGather on hpn: the depth/throughput Pareto set, size-aware choice vs the
throughput-optimal schedule vs NCCL-like rings, scored by the calibrated simulator.

For each topology and failure scenario: ``pareto_set`` (depth bounds 1, 2, 3, 4 and ForestColl's
unbounded optimum), bands chosen by ``choose_bands`` at the representative per-rank sizes (default
1, 4, 16, 64, 256 MB) under the calibrated profile, then every schedule re-simulated under that
profile at the representative sizes *and* at the sizes between them (2, 8, 32, 128 MB), where the
choice was not evaluated. Writes ``results/latency.{json,md,png}``.

    python benchmarks/latency.py                      # hpn 128 and 256 GPUs, healthy + fail1/2/3
    python benchmarks/latency.py --specs hpn:1x2x8    # a quick look
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _report import RESULTS, markdown_table, write_results  # noqa: E402

from synth import SynthResult, load_topology  # noqa: E402
from synth.figures import DepthFigures  # noqa: E402
from synth.result import judge  # noqa: E402
from synth.fileio import write_text_atomic  # noqa: E402
from synth.baselines import nccl_ring  # noqa: E402
from synth.latency.bounded import synthesize_depth_bounded  # noqa: E402
from synth.latency.pareto import ParetoPoint, pareto_set  # noqa: E402
from synth.latency.select import choose_bands  # noqa: E402
from synth.simulation import auto_slices, simulate  # noqa: E402

MB = 1 << 20


def _depth_figures(res: SynthResult) -> DepthFigures:
    assert isinstance(res.figures, DepthFigures), res.message
    return res.figures


def _sim(sched, topo, nbytes: float, profile: str) -> float:
    return simulate(sched, topo, nbytes, slices_per_chunk=auto_slices(sched, nbytes), check=False,
                    profile=profile).time_s


def run_case(spec: str, scenario: str, per_rank_mb: list[int], profile: str, chunks: int | None,
             between: bool = True, optimal_chunks: int | None = None) -> tuple[list[dict], dict]:
    topo = load_topology(spec, [] if scenario == "healthy" else [scenario])
    n = topo.nranks
    t0 = time.perf_counter()
    points = pareto_set("allgather", topo, chunks=chunks, unbounded_chunks=optimal_chunks)
    synth_s = time.perf_counter() - t0
    reps = [n * m * MB for m in per_rank_mb]
    fc = next((p for p in points if p.max_depth is None), None)
    if fc is None:  # dominated by a bounded point, so not in the set: today's schedule all the same
        res = synthesize_depth_bounded("allgather", topo, None, chunks=optimal_chunks)
        assert isinstance(res.figures, DepthFigures), res.message
        fc = ParetoPoint(None, res.figures.depth, res.algbw_GBps, res)
    optimal = fc
    ring = nccl_ring("allgather", topo)
    ring_bw = ring.algbw_GBps(topo)
    ring_status, ring_gap = judge(ring_bw, fc.result.optimal_algbw_GBps)  # held to the same optimum as fc
    ring_result = SynthResult(status=ring_status, message="NCCL-like ring", schedule=ring, algbw_GBps=ring_bw,
                              optimal_algbw_GBps=fc.result.optimal_algbw_GBps, gap_pct=ring_gap, solve_time_s=0.0)
    ring_point = ParetoPoint(None, n - 1, ring_bw, ring_result, name="ring")
    # candidates of the size-aware choice: the Pareto set, today's optimum, and the NCCL-like ring
    # (NCCL itself switches kernels by size)
    candidates = list(points) + ([] if any(p is fc for p in points) else [fc]) + [ring_point]
    t0 = time.perf_counter()
    bands = choose_bands(candidates, topo, reps, profile)
    choose_s = time.perf_counter() - t0
    mids = [int(round((a * b) ** 0.5)) for a, b in zip(per_rank_mb[:-1], per_rank_mb[1:])] if between else []
    # the selection's simulations are the same calls (deterministic): reuse them
    known = {(i, size): t for b in bands for size, times in b.evaluated for i, t in enumerate(times)}
    rows = []
    pareto = "; ".join(f"{p.label}: depth {p.depth}, {p.algbw_GBps:.1f} GB/s" for p in points)
    for m in sorted(set(per_rank_mb) | set(mids)):
        s = n * m * MB
        band = next(b for b in bands if b.min_bytes <= s and (b.max_bytes is None or s <= b.max_bytes))
        chosen = candidates[band.point]
        t_choice = known.get((band.point, s)) or _sim(chosen.schedule, topo, s, profile)
        opt_i = next((i for i, p in enumerate(candidates) if p is optimal), None)
        ring_i = len(candidates) - 1
        t_opt = t_choice if chosen is optimal else (known.get((opt_i, s)) if opt_i is not None else None) or _sim(
            optimal.schedule, topo, s, profile)
        t_ring = t_choice if chosen is ring_point else known.get((ring_i, s)) or _sim(ring, topo, s, profile)
        rows.append({
            "topology": spec, "scenario": scenario, "N": n, "MB_per_rank": m,
            "representative": m in per_rank_mb, "choice": chosen.label, "choice_depth": chosen.depth,
            "choice_us": t_choice * 1e6, "optimal_us": t_opt * 1e6, "optimal_depth": optimal.depth,
            "nccl_ring_us": t_ring * 1e6,
            "speedup_vs_optimal": t_opt / t_choice, "speedup_vs_nccl": t_ring / t_choice,
            "never_slower": t_choice <= min(t_opt, t_ring) * (1 + 1e-9),
        })
    info = {"topology": spec, "scenario": scenario, "N": n, "pareto": pareto, "optimal_chunks": optimal_chunks,
            "optimal": {"depth": optimal.depth, "algbw_GBps": optimal.algbw_GBps, "nchunks": optimal.schedule.nchunks,
                        "gap_pct": optimal.result.gap_pct},
            "points": [{"label": p.label, "depth": p.depth, "algbw_GBps": p.algbw_GBps, "nchunks": p.schedule.nchunks,
                        "gap_pct": p.result.gap_pct,
                        "lp_gap_pct": _depth_figures(p.result).lp_gap_pct,
                        "depth_bound_algbw_GBps": _depth_figures(p.result).depth_bound_algbw_GBps} for p in points],
            "bands": [{"min_bytes": b.min_bytes, "max_bytes": b.max_bytes, "choice": candidates[b.point].label}
                      for b in bands],
            "synth_s": synth_s, "choose_s": choose_s}
    return rows, info


def _case_key(d: dict) -> tuple:
    """Report order: by GPU count, then healthy, fail1, fail2, fail3."""
    order = {"healthy": 0, "fail1": 1, "fail2": 2, "fail3": 3}
    return d["N"], d["topology"], order.get(d["scenario"], 9), d["scenario"]


def _plot(rows: list[dict], path: Path) -> None:
    try:
        import matplotlib
    except ImportError:
        print("matplotlib missing: no PNG")
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ranks = {r["topology"]: r["N"] for r in rows}
    cases = sorted({(r["topology"], r["scenario"]) for r in rows},
                   key=lambda c: _case_key({"N": ranks[c[0]], "topology": c[0], "scenario": c[1]}))
    ncol = 4
    nrow = (len(cases) + ncol - 1) // ncol
    fig, axes = plt.subplots(nrow, ncol, figsize=(4 * ncol, 3.2 * nrow), squeeze=False)
    for ax, (spec, scen) in zip(axes.flat, cases):
        rs = sorted((r for r in rows if r["topology"] == spec and r["scenario"] == scen), key=lambda r: r["MB_per_rank"])
        x = [r["MB_per_rank"] for r in rs]
        ax.loglog(x, [r["nccl_ring_us"] for r in rs], "s-", label="NCCL-like ring")
        ax.loglog(x, [r["optimal_us"] for r in rs], "^-", label="throughput-optimal")
        ax.loglog(x, [r["choice_us"] for r in rs], "o-", label="size-aware")
        ax.set_title(f"{spec} {scen}", fontsize=9)
        ax.set_xlabel("MB per rank")
        ax.set_ylabel("time (us)")
    for ax in list(axes.flat)[len(cases):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    fig.tight_layout()
    tmp = path.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=90)
    tmp.replace(path)


def _report(name: str, rows: list[dict], infos: list[dict], command: str) -> None:
    cols = ["topology", "scenario", "N", "MB_per_rank", "choice", "choice_depth", "choice_us", "optimal_us",
            "optimal_depth", "nccl_ring_us", "speedup_vs_optimal", "speedup_vs_nccl", "never_slower"]
    rows = sorted(rows, key=lambda r: (_case_key(r), r["MB_per_rank"]))
    infos = sorted(infos, key=_case_key)
    rep = [r for r in rows if r["representative"]]
    mid = [r for r in rows if not r["representative"]]
    notes = ["## Pareto sets (depth bound: actual depth, bandwidth-term algbw)", ""]
    for info in infos:
        cap = info.get("optimal_chunks")
        capped = "" if cap is None else (f"; throughput-optimal = ForestColl with max_chunks {cap} "
                                         f"({info['optimal']['algbw_GBps']:.1f} GB/s, {info['optimal']['gap_pct']:.2f} % "
                                         f"below the uncapped optimum, depth {info['optimal']['depth']})")
        notes.append(f"- {info['topology']} {info['scenario']} (N={info['N']}): {info['pareto']}{capped}; synthesis "
                     f"{info['synth_s']:.1f} s; bands: " + ", ".join(
                         f"[{b['min_bytes']}, {b['max_bytes']}] {b['choice']}" for b in info["bands"]))
    small = [r for r in rep if r["MB_per_rank"] <= 16]
    between = (f"{all(r['never_slower'] for r in mid)} (worst ratio there vs the better of the two: "
               f"{min(min(r['optimal_us'], r['nccl_ring_us']) / r['choice_us'] for r in mid):.4g})"
               if mid else "not simulated (--no-between)")
    notes += ["", f"Size-aware never slower than either at the representative sizes: "
              f"{all(r['never_slower'] for r in rep)}; at the sizes in between: {between}.",
              f"At 1-16 MB per rank: speedup vs throughput-optimal min {min(r['speedup_vs_optimal'] for r in small):.3g}, "
              f"median {sorted(r['speedup_vs_optimal'] for r in small)[len(small) // 2]:.3g}, "
              f"max {max(r['speedup_vs_optimal'] for r in small):.3g}; vs NCCL-like min "
              f"{min(r['speedup_vs_nccl'] for r in small):.3g}, max {max(r['speedup_vs_nccl'] for r in small):.3g}.",
              "", "## Sizes between the representative ones (the band choice was not simulated there)", "",
              markdown_table(cols, mid)]
    table = write_results(name, cols, rep, command, "\n".join(notes))
    write_text_atomic(RESULTS / f"{name}_pareto.json", json.dumps(infos, indent=1, sort_keys=True) + "\n")
    _plot(rows, RESULTS / f"{name}.png")
    print(table)
    print("\n".join(notes))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--specs", nargs="+", default=["hpn:1x16x8", "hpn:2x16x8"])
    ap.add_argument("--scenarios", nargs="+", default=["healthy", "fail1", "fail2", "fail3"])
    ap.add_argument("--mb", nargs="+", type=int, default=[1, 4, 16, 64, 256], help="representative MB per rank")
    ap.add_argument("--profile", default="h200")
    ap.add_argument("--chunks", type=int, default=None, help="chunks per source of depth-bounded schedules (default 8)")
    ap.add_argument("--optimal-chunks", type=int, default=None,
                    help="ForestColl's max_chunks for the unbounded (throughput-optimal) schedule (default: uncapped; "
                         "cap it where the uncapped optimum needs more slice transfers than the simulator takes)")
    ap.add_argument("--name", default="latency")
    ap.add_argument("--no-between", action="store_true", help="skip the sizes between the representative ones")
    ap.add_argument("--raw", metavar="FILE.json", help="only write the raw rows here (one process per case)")
    ap.add_argument("--merge", nargs="+", metavar="FILE.json", help="report from raw files instead of running")
    args = ap.parse_args()
    rows: list[dict] = []
    infos: list[dict] = []
    if args.merge:
        for path in args.merge:
            doc = json.loads(Path(path).read_text())
            rows += doc["rows"]
            infos += doc["infos"]
        _report(args.name, rows, infos, "python benchmarks/latency.py (one process per case with --raw, then --merge)")
        return
    for spec in args.specs:
        for scen in args.scenarios:
            r, info = run_case(spec, scen, args.mb, args.profile, args.chunks, not args.no_between, args.optimal_chunks)
            rows += r
            infos.append(info)
            print(f"{spec} {scen}: {info['pareto']}; bands {info['bands']}; synth {info['synth_s']:.1f} s", flush=True)
    if args.raw:
        write_text_atomic(Path(args.raw), json.dumps({"rows": rows, "infos": infos}, sort_keys=True) + "\n")
        return
    _report(args.name, rows, infos, ("python benchmarks/latency.py " + " ".join(sys.argv[1:])).strip())


if __name__ == "__main__":
    main()

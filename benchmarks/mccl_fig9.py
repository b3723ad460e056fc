"""Reproduce the MCCL paper's gray-failure results (Fig. 2 / Fig. 9) with loopcoll's own synthesizers.

    python benchmarks/mccl_fig9.py [--specs hpn:1x2x8 hpn:1x4x8] [--mbytes 128] [--quick]

For each hpn topology × {healthy, fail1, fail2, fail3} × {AllGather, AllToAll}, at 128 MB per
source (AllGather: 128 MB input per rank; AllToAll: 128 MB buffer per rank), it measures with the
flow-level simulator the algbw of

* the NCCL-like baseline (multi-ring AllGather; direct AllToAll with PXN),
* the static schedule (synthesized for the healthy fabric, run unchanged on the degraded one),
* the re-synthesized loopcoll schedule (warm from the healthy one),

plus the optimal bound, and the speedups over NCCL. Each simulation runs under every cost profile of
``--profiles`` (default ``ideal h200``: the pure bandwidth model, whose columns carry no suffix, beside the
calibrated H100/H200-class profile, columns suffixed ``_h200``; docs/calibration.md). Writes ``benchmarks/results/mccl_fig9.{json,md}``
and bar charts ``benchmarks/results/mccl_fig9_{allgather,alltoall}.png``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _report import RESULTS, write_results  # noqa: E402

from synth import synthesize  # noqa: E402
from synth import load_topology, optimal_bound  # noqa: E402
from synth.baselines import nccl_direct_alltoall, nccl_ring  # noqa: E402
from synth.simulation import auto_slices, simulate  # noqa: E402

SCENARIOS = ("healthy", "fail1", "fail2", "fail3")
PAPER = {"allgather": "up to 7.33x over NCCL", "alltoall": "up to 7.12x over NCCL", "static": "≈1.0x"}


def _row(spec: str, scenario: str, collective: str, mbytes: float, chunks: int | None, static_cache: dict,
         profiles: tuple[str, ...] = ("ideal",)) -> dict:
    healthy = load_topology(spec)
    topo = healthy if scenario == "healthy" else load_topology(spec, [scenario])
    n = topo.nranks
    per_source = mbytes * 1e6
    nbytes = per_source * n if collective == "allgather" else per_source
    c = (10 if chunks is None else chunks) if collective == "alltoall" else chunks
    key = (spec, collective)
    if key not in static_cache:
        static_cache[key] = synthesize(collective, healthy, chunks=c).schedule
    static = static_cache[key]
    start = time.perf_counter()
    resynth = synthesize(collective, topo, chunks=c, warm_from=static if scenario != "healthy" else None)
    solve_s = time.perf_counter() - start
    baseline = nccl_direct_alltoall(topo) if collective == "alltoall" else nccl_ring(collective, topo)
    bound = optimal_bound(collective, topo).algbw_GBps
    scheds = (("nccl", baseline), ("static", static), ("loopcoll", resynth.schedule))
    sims = {name: simulate(s, topo, nbytes, slices_per_chunk=auto_slices(s, nbytes), profile=profiles[0])
            for name, s in scheds}
    extra = {}
    for prof in profiles[1:]:
        got = {name: simulate(s, topo, nbytes, slices_per_chunk=auto_slices(s, nbytes), profile=prof).algbw_GBps
               for name, s in scheds}
        extra.update({f"{name}_GBps_{prof}": round(v, 3) for name, v in got.items()})
        extra[f"speedup_vs_nccl_{prof}"] = round(got["loopcoll"] / got["nccl"], 3)
    return {
        "topology": spec,
        "scenario": scenario,
        "collective": collective,
        "N": n,
        "optimal_GBps": round(bound, 3),
        "nccl_GBps": round(sims["nccl"].algbw_GBps, 3),
        "static_GBps": round(sims["static"].algbw_GBps, 3),
        "loopcoll_GBps": round(sims["loopcoll"].algbw_GBps, 3),
        "loopcoll_bw_term_GBps": round(resynth.schedule.algbw_GBps(topo), 3),
        "speedup_vs_nccl": round(sims["loopcoll"].algbw_GBps / sims["nccl"].algbw_GBps, 3),
        "static_vs_nccl": round(sims["static"].algbw_GBps / sims["nccl"].algbw_GBps, 3),
        "loopcoll_of_optimal": round(sims["loopcoll"].algbw_GBps / bound, 3),
        "nchunks": resynth.schedule.nchunks,
        "solve_s": round(solve_s, 3),
        "profile": profiles[0],
        **extra,
    }


def _charts(rows: list[dict]) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    for collective in ("allgather", "alltoall"):
        sel = [r for r in rows if r["collective"] == collective]
        if not sel:
            continue
        labels = [f"{r['topology'].removeprefix('hpn:')}\n{r['scenario']}" for r in sel]
        series = [("NCCL-like", "nccl_GBps"), ("static", "static_GBps"), ("loopcoll re-synth", "loopcoll_GBps"),
                  ("optimal bound", "optimal_GBps")]
        fig, ax = plt.subplots(figsize=(max(8, 1.1 * len(sel)), 4.5))
        width = 0.2
        for i, (name, key) in enumerate(series):
            xs = [j + (i - 1.5) * width for j in range(len(sel))]
            ax.bar(xs, [r[key] for r in sel], width, label=name)
        for j, r in enumerate(sel):
            ax.annotate(f"{r['speedup_vs_nccl']:.2f}x", (j + 0.5 * width, r["loopcoll_GBps"]), ha="center",
                        va="bottom", fontsize=7)
        ax.set_xticks(range(len(sel)))
        ax.set_xticklabels(labels, fontsize=8)
        ax.set_ylabel("algbw (GB/s), simulated at 128 MB per source")
        ax.set_xlabel("topology (hpn SxHxN) and failure scenario")
        ax.set_title(f"{collective}: loopcoll vs NCCL-like and static schedules "
                     f"(paper: {PAPER[collective]}; static {PAPER['static']})", fontsize=9)
        ax.legend(fontsize=8)
        ax.grid(axis="y", alpha=0.3)
        fig.tight_layout()
        path = RESULTS / f"mccl_fig9_{collective}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


README = Path(__file__).resolve().parent / "README.md"  # benchmarks/README.md: the results tables
BEGIN, END = "<!-- mccl_fig9:begin -->", "<!-- mccl_fig9:end -->"


def _update_readme(table: str, notes: str, cmd: str) -> bool:
    """Replace benchmarks/README.md's Fig. 9 block (between the markers) with this run's table and charts."""
    if not README.exists():
        return False
    text = README.read_text()
    if BEGIN not in text or END not in text:
        return False
    block = "\n".join([
        BEGIN,
        f"Regenerated by `{cmd}` (simulated algbw in GB/s at 128 MB per source; speedups are ratios within this run; "
        "unsuffixed columns: profile `ideal`, the pure bandwidth model; `_h200` columns: the calibrated profile "
        "`h200`, see docs/calibration.md).",
        "",
        table,
        "",
        notes,
        "",
        "![AllGather](results/mccl_fig9_allgather.png)",
        "![AllToAll](results/mccl_fig9_alltoall.png)",
        END,
    ])
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    README.write_text(head + block + tail)
    return True


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--specs", nargs="+", default=["hpn:1x2x8", "hpn:1x4x8"])
    ap.add_argument("--mbytes", type=float, default=128.0, help="MB per source (default 128)")
    ap.add_argument("--chunks", type=int, default=None, help="chunks per source (AllToAll default 10)")
    ap.add_argument("--quick", action="store_true", help="only the first spec")
    ap.add_argument("--profiles", "--profile", nargs="+", default=["ideal", "h200"],
                    help="cost profiles (first: the main columns; others: suffixed columns); default ideal h200")
    args = ap.parse_args(argv)
    profiles = tuple(args.profiles)
    specs = args.specs[:1] if args.quick else args.specs
    rows, cache = [], {}
    for spec in specs:
        for collective in ("allgather", "alltoall"):
            for scenario in SCENARIOS:
                row = _row(spec, scenario, collective, args.mbytes, args.chunks, cache, profiles)
                rows.append(row)
                print(f"{spec:<10} {scenario:<8} {collective:<9} optimal {row['optimal_GBps']:8.2f}  "
                      f"NCCL {row['nccl_GBps']:8.2f}  static {row['static_GBps']:8.2f}  "
                      f"loopcoll {row['loopcoll_GBps']:8.2f}  x{row['speedup_vs_nccl']:.2f} vs NCCL", flush=True)
    cmd = "python benchmarks/mccl_fig9.py " + " ".join(sys.argv[1:] if argv is None else argv)
    columns = ["topology", "scenario", "collective", "optimal_GBps", "nccl_GBps", "static_GBps", "loopcoll_GBps",
               "speedup_vs_nccl", "static_vs_nccl", "loopcoll_of_optimal"]
    for prof in profiles[1:]:
        columns += [f"nccl_GBps_{prof}", f"loopcoll_GBps_{prof}", f"speedup_vs_nccl_{prof}"]
    best = {c: max((r["speedup_vs_nccl"] for r in rows if r["collective"] == c), default=0.0)
            for c in ("allgather", "alltoall")}
    notes = (f"Largest speedup over NCCL (profile {profiles[0]}): AllGather {best['allgather']:.2f}x "
             f"(paper {PAPER['allgather']}), AllToAll {best['alltoall']:.2f}x (paper {PAPER['alltoall']}).")
    for prof in profiles[1:]:
        b = {c: max((r[f"speedup_vs_nccl_{prof}"] for r in rows if r["collective"] == c), default=0.0)
             for c in ("allgather", "alltoall")}
        notes += f" Profile {prof}: AllGather {b['allgather']:.2f}x, AllToAll {b['alltoall']:.2f}x."
    table = write_results("mccl_fig9", columns, rows, cmd.strip(), notes)
    charts = _charts(rows)
    if _update_readme(table, notes, cmd.strip()):
        print(f"updated the results section of {README}")
    print()
    print(table)
    print(notes)
    for p in charts:
        print(f"wrote {p}")


if __name__ == "__main__":
    main()

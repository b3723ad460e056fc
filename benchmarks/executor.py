"""Executor benchmark: interpreter vs native torch.distributed algbw, swap latency, telemetry overhead.

For each process count it launches N local processes (gloo on CPU by default; ``--backend nccl`` runs one
process per GPU, unchanged), loads loopcoll's synthesized schedules for ``--topology`` (default
``nvswitch:N``) and measures, per collective and size, the median time of the executor and of the native
collective (algbw = S / time), the executor with a telemetry sink attached, and ``--swaps`` hot-swaps
between two schedules split into staging (validate + compile on the staging thread), agreement (the
out-of-band all-gather) and first-collective delay (first collective on the new version minus its steady
time). MCCL's anchor: 11.6 ms per swap, mainly 5.74 ms out-of-band sync and 4.48 ms loading.

Writes ``benchmarks/results/executor.json`` and ``executor.md`` (``--out NAME`` to change).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._report import RESULTS, markdown_table  # noqa: E402
from msccl_xml import lower  # noqa: E402
from runtime.executor.launch import launch  # noqa: E402
from runtime.executor.measure import bench  # noqa: E402
from synth import COLLECTIVES, named_topology, synthesize  # noqa: E402


def parse_size(text: str) -> int:
    """``"16M"`` -> 16777216 (binary units, like the CLI)."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.strip().upper().rstrip("B")
    return int(float(t[:-1]) * units[t[-1]]) if t and t[-1] in units else int(t)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nprocs", type=int, nargs="+", default=[4, 8])
    ap.add_argument("--sizes", nargs="+", default=["1M", "16M"], help="sizes S (default 1M 16M; --full: 1M..256M)")
    ap.add_argument("--full", action="store_true", help="sizes 1M 4M 16M 64M 256M")
    ap.add_argument("--collectives", nargs="+", default=["allgather", "allreduce"],
                    choices=COLLECTIVES)
    ap.add_argument("--topology", default=None, help="named topology, {n} = process count (default nvswitch:{n})")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--swaps", type=int, default=5)
    ap.add_argument("--backend", default="gloo", choices=["gloo", "nccl"])
    ap.add_argument("--timeout", type=float, default=1800.0)
    ap.add_argument("--out", default="executor")
    args = ap.parse_args(argv)
    sizes = [parse_size(s) for s in (["1M", "4M", "16M", "64M", "256M"] if args.full else args.sizes)]
    command = "python benchmarks/executor.py " + " ".join(argv if argv is not None else sys.argv[1:])
    rows, swap_rows, tel_rows = [], [], []
    for n in args.nprocs:
        topo = named_topology((args.topology or "nvswitch:{n}").format(n=n))
        progs = [lower(synthesize(c, topo).schedule) for c in args.collectives]
        swap_progs = [lower(synthesize("allreduce", named_topology(f"ring:{n}")).schedule),
                      lower(synthesize("allreduce", topo).schedule)]
        res = launch(bench, n, progs, sizes, args.dtype, args.iters, swap_progs, 1 << 20, args.swaps,
                     backend=args.backend, timeout_s=args.timeout)[0]
        for r in res["rows"]:
            rows.append({"nprocs": n, "collective": r["collective"], "size_MiB": r["size_bytes"] / 2**20,
                         "correct": r["correct"], "rounds": r["rounds"],
                         "executor_GBps": r["algbw_GBps"], "native_GBps": r["native_algbw_GBps"],
                         "ratio": r["algbw_GBps"] / r["native_algbw_GBps"]})
            tel_rows.append({"nprocs": n, "collective": r["collective"], "size_MiB": r["size_bytes"] / 2**20,
                             "off_ms": r["telemetry_off_s"] * 1e3, "on_ms": r["telemetry_time_s"] * 1e3,
                             "overhead_pct": (r["telemetry_time_s"] / r["telemetry_off_s"] - 1) * 100,
                             "emit_cpu_us": r["telemetry_cpu_us"]})
        if res["swaps"]:
            def med(key: str, res=res) -> float:
                return statistics.median(s[key] for s in res["swaps"]) * 1e3
            swap_rows.append({"nprocs": n, "swaps": len(res["swaps"]), "staging_ms": med("staging_s"),
                              "check_ms": med("check_s"), "compile_ms": med("compile_s"),
                              "agreement_ms": med("agreement_s"), "first_delay_ms": med("first_delay_s"),
                              "total_ms": med("staging_s") + med("agreement_s") + med("first_delay_s"),
                              "mccl_total_ms": 11.6})
    algbw_cols = ["nprocs", "collective", "size_MiB", "correct", "rounds", "executor_GBps", "native_GBps", "ratio"]
    swap_cols = ["nprocs", "swaps", "staging_ms", "check_ms", "compile_ms", "agreement_ms", "first_delay_ms", "total_ms", "mccl_total_ms"]
    tel_cols = ["nprocs", "collective", "size_MiB", "off_ms", "on_ms", "overhead_pct", "emit_cpu_us"]
    tables = [("algbw (" + args.backend + ")", markdown_table(algbw_cols, rows)),
              ("swap latency (medians; MCCL: 11.6 ms = 5.74 ms sync + 4.48 ms loading + rest)",
               markdown_table(swap_cols, swap_rows)),
              ("telemetry overhead (medians of interleaved runs with and without a sink; emit_cpu_us: host time "
               "spent building and handing over one collective's samples)",
               markdown_table(tel_cols, tel_rows))]
    RESULTS.mkdir(parents=True, exist_ok=True)
    doc = {"benchmark": args.out, "command": command, "backend": args.backend, "dtype": args.dtype,
           "iters": args.iters, "algbw": rows, "swaps": swap_rows, "telemetry": tel_rows}
    (RESULTS / f"{args.out}.json").write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    md = f"# {args.out}\n\nProduced by `{command}`.\n"
    for title, table in tables:
        md += f"\n## {title}\n\n{table}\n"
        print(f"\n{title}\n{table}")
    (RESULTS / f"{args.out}.md").write_text(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

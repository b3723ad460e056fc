"""Observability: detection accuracy on synthetic 512-rank Inspector logs and ingest throughput (not asserted).

    python benchmarks/observe.py [--seeds 10] [--ranks 512] [--ncolls 240] [--threads 2] [--repeats 3]

Per seed, ``runtime.observe.synthetic.random_spec`` injects 1-3 slow periods (8-20 s, busbw -20..-50 %) and
1-8 straggler ranks (late by 20-50 % of the transfer time in 90 % of their collectives) into a 512-rank run
of 240 iterations (AllGather 8 MiB + AllReduce 32 MiB per rank, a 0.5 s dump tick, 2 % one-off late
arrivals as distractors); odd seeds write v4.3 (``dump_stats`` markers), every third seed gzip. A detected
period matches an injected one when they overlap by at least half of the shorter. Ingest runs DuckDB with
``--threads`` threads; throughput = records / ingest wall time (files already written, page cache warm).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _report import write_results  # noqa: E402

from runtime.observe import connect, ingest, slow_periods, stragglers, write_logs  # noqa: E402
from runtime.observe.evaluate import periods_match, score_periods, score_sets  # noqa: E402
from runtime.observe.synthetic import random_spec  # noqa: E402

REAL = Path(__file__).resolve().parent.parent / "tests" / "vectors" / "inspector" / "h200x2_contention"


def one_seed(seed: int, ranks: int, ncolls: int, threads: int) -> dict[str, object]:
    spec = random_spec(seed, nranks=ranks, ncolls=ncolls, fmt="v4.3" if seed % 2 else "v4.0")
    spec = replace(spec, gzip_files=seed % 3 == 0)
    with tempfile.TemporaryDirectory() as d:
        truth = write_logs(d, spec)
        con = connect(threads=threads)
        t = time.perf_counter()
        s = ingest(con, [d])
        t_ingest = time.perf_counter() - t
        assert s.accepted == truth.records and not s.rejected
        t = time.perf_counter()
        det = [(p.start_s, p.end_s) for p in slow_periods(con)]
        flagged = {r.rank for r in stragglers(con) if r.flagged}
        t_analyse = time.perf_counter() - t
        con.close()
    inj = [(a, b) for a, b, _ in truth.slow_periods]
    pp, pr = score_periods(det, inj)
    sp, sr = score_sets(flagged, truth.stragglers)
    errs = [max(abs(d[0] - i[0]), abs(d[1] - i[1])) for i in inj for d in det if periods_match(d, i)]
    return {"seed": seed, "format": spec.fmt + (" gz" if spec.gzip_files else ""), "records": truth.records,
            "periods": len(inj), "detected": len(det), "tp_det": round(pp * len(det)), "tp_inj": round(pr * len(inj)),
            "period_P": pp, "period_R": pr, "max_boundary_err_s": max(errs) if errs else None,
            "stragglers": len(truth.stragglers), "flagged": len(flagged), "tp_strag": len(flagged & set(truth.stragglers)),
            "straggler_P": sp, "straggler_R": sr, "ingest_s": t_ingest,
            "Mrec_per_min": truth.records / t_ingest * 60 / 1e6, "analyse_s": t_analyse}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--ranks", type=int, default=512)
    ap.add_argument("--ncolls", type=int, default=240)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3, help="ingest repeats of the real 2xH200 logs")
    args = ap.parse_args(argv)
    rows = []
    for seed in range(args.seeds):
        row = one_seed(seed, args.ranks, args.ncolls, args.threads)
        rows.append(row)
        print({k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items()}, flush=True)
    tot = {k: sum(int(r[k]) for r in rows) for k in ("detected", "periods", "tp_det", "tp_inj", "flagged",
                                                      "stragglers", "tp_strag", "records")}
    errs = [r["max_boundary_err_s"] for r in rows if r["max_boundary_err_s"] is not None]
    rows.append({"seed": "all", "format": "", "records": tot["records"], "periods": tot["periods"],
                 "detected": tot["detected"],
                 "period_P": tot["tp_det"] / tot["detected"] if tot["detected"] else 1.0,
                 "period_R": tot["tp_inj"] / tot["periods"] if tot["periods"] else 1.0,
                 "max_boundary_err_s": max(errs) if errs else None,
                 "stragglers": tot["stragglers"], "flagged": tot["flagged"],
                 "straggler_P": tot["tp_strag"] / tot["flagged"] if tot["flagged"] else 1.0,
                 "straggler_R": tot["tp_strag"] / tot["stragglers"] if tot["stragglers"] else 1.0,
                 "ingest_s": statistics.median(float(r["ingest_s"]) for r in rows),
                 "Mrec_per_min": statistics.median(float(r["Mrec_per_min"]) for r in rows),
                 "analyse_s": statistics.median(float(r["analyse_s"]) for r in rows)})
    real_times = []
    for _ in range(args.repeats):
        con = connect(threads=args.threads)
        t = time.perf_counter()
        s = ingest(con, [REAL])
        real_times.append(time.perf_counter() - t)
        con.close()
    t_real = statistics.median(real_times)
    rows.append({"seed": "real 2xH200", "format": "v4.0 gz", "records": s.accepted, "ingest_s": t_real,
                 "Mrec_per_min": s.accepted / t_real * 60 / 1e6})
    cols = ["seed", "format", "records", "periods", "detected", "period_P", "period_R", "max_boundary_err_s",
            "stragglers", "flagged", "straggler_P", "straggler_R", "ingest_s", "Mrec_per_min", "analyse_s"]
    notes = ("Row `all`: precision/recall pooled over seeds, medians of times. `max_boundary_err_s`: the largest "
             "distance between a matched detected boundary and the injected one (injected times are when the "
             "slowdown hits the collectives; records carry the dump time, up to one 0.5 s tick later). Row "
             f"`real 2xH200`: ingest of tests/vectors/inspector (two gzip files), median of {args.repeats}. "
             f"DuckDB threads: {args.threads}; the machine was shared with other jobs, so times are noisy.")
    table = write_results("observe", cols, rows, "python benchmarks/observe.py " + " ".join(argv or sys.argv[1:]), notes)
    print(table)


if __name__ == "__main__":
    main()

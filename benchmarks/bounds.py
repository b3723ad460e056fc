"""Time the exact optimal bounds at scale (not asserted in tests).

    python benchmarks/bounds.py [--repeats 3] [--quick]

AllGather: exact cut bound by Dinkelbach + OR-Tools max-flow. AllToAll: the compact aggregated
max-concurrent-flow LP on HiGHS up to 32 GPUs, column generation above (same LP optimum).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _report import timed, write_results  # noqa: E402

from synth import load_topology, optimal_bound  # noqa: E402

CASES = [
    ("allgather", "hpn:1x8x8"),
    ("allgather", "hpn:1x16x8"),
    ("allgather", "hpn:2x16x8"),
    ("allgather", "hpn:2x32x8"),
    ("alltoall", "hpn:1x2x8"),
    ("alltoall", "hpn:1x8x8"),
    ("alltoall", "hpn:1x16x8"),
    ("alltoall", "hpn:2x16x8"),
    ("alltoall", "hpn:2x32x8"),
]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="skip the largest cases")
    args = ap.parse_args(argv)
    rows = []
    for collective, spec in CASES:
        if args.quick and spec in ("hpn:2x32x8", "hpn:2x16x8"):
            continue
        for fail in ([], ["fail2"]):
            topo = load_topology(spec, fail)
            median, times, bound = timed(lambda: optimal_bound(collective, topo), args.repeats)
            row = {
                "collective": collective,
                "topology": topo.name,
                "N": topo.nranks,
                "algbw_GBps": round(bound.algbw_GBps, 6),
                "exact": bound.exact,
                "median_s": round(median, 4),
                "runs_s": [round(t, 4) for t in times],
            }
            rows.append(row)
            print(f"{collective:<10} {topo.name:<22} N={topo.nranks:<4} algbw {bound.algbw_GBps:9.3f} GB/s  "
                  f"median {median:8.3f} s", flush=True)
    cmd = "python benchmarks/bounds.py" + (" --quick" if args.quick else "") + f" --repeats {args.repeats}"
    table = write_results("bounds", ["collective", "topology", "N", "algbw_GBps", "exact", "median_s"], rows, cmd)
    print()
    print(table)


if __name__ == "__main__":
    main()

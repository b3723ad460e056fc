"""Optimal AllGather and AllToAll on a rail-optimised HPN fabric, before and after a gray failure.

Run:  python examples/hpn_fail2_bounds.py [SPEC]      (default hpn:1x2x8)

``fail2`` degrades rank 0's NIC to 50 Gbit/s (MCCL paper, Sec. 6.1). The printed algbw are the
physical limits any schedule can reach; loopcoll's synthesizers reach them.
"""

from __future__ import annotations

import sys

from synth import load_topology, optimal_bound


def main(spec: str = "hpn:1x2x8") -> None:
    healthy = load_topology(spec)
    degraded = healthy.with_failure("fail2")
    print(f"{'collective':<10} {'healthy GB/s':>13} {'fail2 GB/s':>11} {'ratio':>6}  bottleneck after fail2")
    for collective in ("allgather", "alltoall"):
        before = optimal_bound(collective, healthy)
        after = optimal_bound(collective, degraded)
        cut = ", ".join(f"{a}->{b}" for a, b in after.bottleneck[:4])
        print(
            f"{collective:<10} {before.algbw_GBps:>13.3f} {after.algbw_GBps:>11.3f} "
            f"{after.algbw_GBps / before.algbw_GBps:>6.3f}  {cut}"
        )


if __name__ == "__main__":
    main(*sys.argv[1:2])

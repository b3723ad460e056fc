"""Executor-like telemetry for drills: the pair and inject samples one AllGather schedule's executors emit while
some links run slow. Used by the daemon's process tests and ``benchmarks/daemon.py``.

>>> from synth import load_topology, synthesize
>>> topo = load_topology("hpn:1x2x4")
>>> by_host = degraded_samples(synthesize("allgather", topo).schedule, topo, version=1, n_collectives=2)
>>> sorted(by_host), len(by_host[0]) + len(by_host[1])   # 16 pairs + 8 injects per collective
([0, 1], 48)
"""

from __future__ import annotations

import time
from collections.abc import Collection
from typing import Any

from runtime import ScheduleRouting
from synth import Schedule, Topology

RANK0_NIC = frozenset({("gpu0", "tor0.0"), ("tor0.0", "gpu0")})


def degraded_samples(schedule: Schedule, topology: Topology, *, version: int, n_collectives: int,
                     slow_links: Collection[tuple[str, str]] = RANK0_NIC, factor: float = 0.25,
                     comm: str = "world", size_bytes: int = 16 << 20) -> dict[int, list[dict[str, Any]]]:
    """Per host, the samples of ``n_collectives`` runs of ``schedule``: a pair crossing a link of ``slow_links``
    runs at ``factor`` of its expected (proportional-share, nominal) throughput, everything else at full speed."""
    routing = ScheduleRouting.build(schedule, topology)
    nominal = {lk.key: lk.gbps for lk in topology.links}
    slow = set(slow_links)
    by_host: dict[int, list[dict[str, Any]]] = {}
    t0 = time.time()

    def emit(u: int, seq: int, kind: str, dst: int | None, chunks: int, gbps: float) -> None:
        nbytes = size_bytes * chunks // routing.nchunks_total
        by_host.setdefault(int(routing.host_of[u] or 0), []).append({
            "format": "loopcoll.telemetry/1", "t_s": t0 + 0.01 * seq, "comm": comm, "seq": seq,
            "version": version, "kind": kind, "src": u, "dst": dst, "bytes": nbytes,
            "busy_s": 8.0 * nbytes / (gbps * 1e9), "collective": "allgather", "origin": "executor"})

    for seq in range(1, n_collectives + 1):
        for (u, v), n in sorted(routing.pair_chunks.items()):
            links = routing.pair_links[(u, v)]
            expected = min(nominal[a] * n / routing.link_chunks[a] for a in links)
            emit(u, seq, "pair", v, n, expected * (factor if slow & set(links) else 1.0))
        for u, links in sorted(routing.inject_links.items()):  # intra-host traffic runs at full speed
            n = sum(k for (a, b), k in routing.pair_chunks.items()
                    if a == u and routing.host_of[b] == routing.host_of[u])
            emit(u, seq, "inject", None, n, min(nominal[a] * k / routing.link_chunks[a] for a, k in links.items()))
    return by_host

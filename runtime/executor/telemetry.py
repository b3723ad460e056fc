"""The samples one executed collective yields: one ``pair`` sample per peer and one ``inject`` sample of
the bytes sent within the host (docs/telemetry.md)."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

from runtime.formats.telemetry import Sample

from .engine import Timing

__all__ = ["collective_samples", "default_hosts", "demand_sample"]


def collective_samples(timing: Timing, meta: Mapping[str, Any], *, comm: str, me: int, peers: Sequence[int],
                       hosts: Sequence[int], incarnation: str | None = None) -> list[Sample]:
    """The samples of one collective of global rank ``me``: ``timing`` per group peer, ``meta`` its
    ``t_wall``, ``seq``, ``version`` and ``coll``; ``peers`` maps group ranks to global ranks, ``hosts``
    global ranks to host ids; ``incarnation`` the executor start's id (:mod:`runtime.executor.incarnation`)."""
    t_s = meta["t_wall"]
    samples = []
    inject_bytes = 0
    first: Any = None
    last: Any = None
    for peer in sorted(timing.bytes_to):
        g = peers[peer]
        busy = timing.busy_s(peer)
        samples.append(Sample(t_s, comm, meta["seq"], meta["version"], "pair", me, g, timing.bytes_to[peer],
                              busy, meta["coll"], "executor", incarnation=incarnation))
        if hosts[g] == hosts[me]:
            inject_bytes += timing.bytes_to[peer]
            a, b = timing.first_post[peer], timing.last_done[peer]
            if timing.cuda:
                first = a if first is None or a.elapsed_time(first) > 0 else first
                last = b if last is None or last.elapsed_time(b) > 0 else last
            else:
                first = a if first is None else min(first, a)
                last = b if last is None else max(last, b)
    if inject_bytes:
        busy = max(first.elapsed_time(last) / 1e3, 1e-9) if timing.cuda else max(last - first, 1e-9)
        if timing.paced_rounds is not None:  # fault injection: summed per-round busy time (engine.Timing)
            local = [p for p in timing.bytes_to if hosts[peers[p]] == hosts[me]]
            busy = max(sum(max(ends[p] for p in local if p in ends) - t0
                           for t0, ends in timing.paced_rounds if any(p in ends for p in local)), 1e-9)
        samples.append(Sample(t_s, comm, meta["seq"], meta["version"], "inject", me, None, inject_bytes,
                              busy, meta["coll"], "executor", incarnation=incarnation))
    return samples


def demand_sample(comm: str, seq: int, me: int, in_splits: Sequence[int], element_size: int, peers: Sequence[int],
                  world: int, incarnation: str | None = None) -> Sample:
    """The ``demand`` sample of one split-size all-to-all: bytes this rank sends to each global rank.

    >>> demand_sample("w", 3, 0, [2, 5], 4, [0, 1], 2).extra
    {'send_bytes': [8, 20]}
    """
    sends = [0] * world
    for r, k in enumerate(in_splits):
        sends[peers[r]] = k * element_size
    return Sample(time.time(), comm, seq, None, "demand", me, None, sum(sends), 1e-9, "alltoallv", "executor",
                  {"send_bytes": sends}, incarnation)


def default_hosts(world: int, local_world_size: int | None = None) -> list[int]:
    """Host id per global rank: ranks ``local_world_size`` (default ``$LOCAL_WORLD_SIZE``) apart share a
    host, or all share one when it is unset.

    >>> default_hosts(4, 2), default_hosts(3, 0)
    ([0, 0, 1, 1], [0, 0, 0])
    """
    lws = int(os.environ.get("LOCAL_WORLD_SIZE", "0") or 0) if local_world_size is None else local_world_size
    return [g // lws for g in range(world)] if lws > 0 else [0] * world

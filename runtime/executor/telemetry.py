"""The samples one executed collective yields: one ``pair`` sample per peer and one ``inject`` sample of
the bytes sent within the host (docs/telemetry.md)."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

from runtime.formats.telemetry import Sample

from .engine import Timing

__all__ = ["collective_samples", "default_hosts", "demand_sample"]


def collective_samples(timing: Timing, meta: Mapping[str, Any], *, comm: str, me: int, peers: Sequence[int],
                       hosts: Sequence[int], incarnation: str | None = None) -> list[Sample]:
    """The samples of one collective of global rank ``me``: ``timing`` per group peer (and AllReduce phase),
    ``meta`` its ``t_wall``, ``seq``, ``version`` and ``coll``; ``peers`` maps group ranks to global ranks,
    ``hosts`` global ranks to host ids; ``incarnation`` the executor start's id
    (:mod:`runtime.executor.incarnation`). Busy times count transfers only (:meth:`Timing.span_s`)."""
    t_s = meta["t_wall"]
    samples = []
    local: dict[str | None, list[tuple[int, str | None]]] = {}
    for flow in sorted(timing.bytes_to, key=lambda f: (f[0], f[1] or "")):
        peer, phase = flow
        g = peers[peer]
        extra = {} if phase is None else {"phase": phase}
        samples.append(Sample(t_s, comm, meta["seq"], meta["version"], "pair", me, g, timing.bytes_to[flow],
                              timing.busy_s(flow), meta["coll"], "executor", MappingProxyType(extra),
                              incarnation=incarnation))
        if hosts[g] == hosts[me]:
            local.setdefault(phase, []).append(flow)
    for phase, flows in sorted(local.items(), key=lambda kv: kv[0] or ""):
        busy = timing.span_s(flows)
        if timing.paced_rounds is not None:  # fault injection: summed per-round busy time (engine.Timing)
            busy = max(sum(max(ends[f] for f in flows if f in ends) - t0
                           for t0, ends in timing.paced_rounds if any(f in ends for f in flows)), 1e-9)
        samples.append(Sample(t_s, comm, meta["seq"], meta["version"], "inject", me, None,
                              sum(timing.bytes_to[f] for f in flows), busy, meta["coll"], "executor",
                              MappingProxyType({} if phase is None else {"phase": phase}), incarnation=incarnation))
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

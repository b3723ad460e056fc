"""Run an AllToAllv schedule for ``all_to_all_single`` with split sizes on torch.distributed.

:func:`all_to_all_single_v` takes the call's split sizes (elements), learns every rank's input
splits with one small all-gather, cuts each block (s, d) of b elements into the schedule's K
chunks (sizes ``b // K`` or one more, nothing padded) and moves each route's consecutive chunks
along its GPU hops: round t posts hop t of every route as batched isend/irecv (relays keep the data
in a buffer between rounds; the last hop lands in the output). A block with elements but no route
in the schedule (its demand was 0 when the schedule was made), a schedule of another size, or no
schedule at all runs the native ``all_to_all_single`` instead. With a ``bound``
(:class:`~runtime.executor.engine.Bound`), the split-size all-gather and every round's wait are bounded
and raise :class:`~runtime.executor.errors.CollectiveTimeoutError` naming the peers that did not
complete. torch is imported lazily.

Examples
--------
>>> chunk_bounds(10, 4)
[0, 3, 6, 8, 10]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from synth.alltoallv_schedule import AllToAllvSchedule

from .engine import Bound, wait_all

__all__ = ["all_to_all_single_v", "chunk_bounds"]


def chunk_bounds(elements: int, nchunks: int) -> list[int]:
    """Offsets of ``nchunks`` near-equal chunks of ``elements`` (the first ``elements % nchunks`` one larger)."""
    q, rem = divmod(elements, nchunks)
    out = [0]
    for k in range(nchunks):
        out.append(out[-1] + q + (1 if k < rem else 0))
    return out


def _prefix(sizes: Sequence[int]) -> list[int]:
    out = [0]
    for s in sizes:
        out.append(out[-1] + int(s))
    return out


def all_to_all_single_v(out: Any, inp: Any, output_split_sizes: Sequence[int], input_split_sizes: Sequence[int],
                        schedule: AllToAllvSchedule | None, *, group: Any = None, bound: Bound | None = None) -> str:
    """``all_to_all_single(out, inp, output_split_sizes, input_split_sizes)`` by ``schedule`` (see the
    module docstring); returns ``"schedule"`` or ``"native"`` (what ran). Collective: every rank
    calls it with the same schedule. ``out`` and ``inp`` are contiguous and distinct. ``bound``: see the
    module docstring (the native fallback is bounded by the process group's timeout).
    """
    import torch
    import torch.distributed as dist

    n = dist.get_world_size(group)
    if inp.device.type == "cuda":
        bound = None  # a bounded NCCL wait would block the host: NCCL's own timeout applies
    me = dist.get_rank(group)
    if schedule is None or schedule.nranks != n:
        dist.all_to_all_single(out, inp, list(output_split_sizes), list(input_split_sizes), group=group)
        return "native"
    mine = torch.tensor([int(x) for x in input_split_sizes], dtype=torch.int64)
    gathered = [torch.zeros(n, dtype=torch.int64) for _ in range(n)]

    def peer(rank: int) -> int:
        return rank if group is None else dist.get_global_rank(group, rank)

    others = [peer(r) for r in range(n) if r != me]
    wait_all([dist.all_gather(gathered, mine, group=group, async_op=True)], others, bound)
    sizes = [g.tolist() for g in gathered]  # sizes[s][d]: elements of block (s, d)
    routed = {(r.root, r.dest) for r in schedule.routes}
    if any(sizes[s][d] > 0 and (s, d) not in routed for s in range(n) for d in range(n) if s != d):
        dist.all_to_all_single(out, inp, list(output_split_sizes), list(input_split_sizes), group=group)
        return "native"
    k = schedule.nchunks
    src = inp.reshape(-1)
    dst = out.reshape(-1)
    in_off = _prefix(input_split_sizes)
    out_off = _prefix(output_split_sizes)
    dst[out_off[me]:out_off[me] + sizes[me][me]].copy_(src[in_off[me]:in_off[me] + sizes[me][me]])
    # Element range of each route inside its block: consecutive chunks in route order.
    ranges: list[tuple[int, int]] = []
    used: dict[tuple[int, int], int] = {}
    for r in schedule.routes:
        assert r.dest is not None
        first = used.get((r.root, r.dest), 0)
        used[(r.root, r.dest)] = first + r.chunks
        bounds = chunk_bounds(sizes[r.root][r.dest], k)
        ranges.append((bounds[first], bounds[first + r.chunks]))
    relay: dict[int, Any] = {}
    rounds = max((len(r.hops) for r in schedule.routes), default=0)

    for t in range(rounds):
        ops = []
        for i, r in enumerate(schedule.routes):
            lo, hi = ranges[i]
            if t >= len(r.hops) or hi <= lo:
                continue
            hop = r.hops[t]
            last = t == len(r.hops) - 1
            if hop.src == me:
                if t == 0:
                    assert r.dest is not None
                    start = in_off[r.dest] + lo
                    data = src[start:start + hi - lo]
                else:
                    data = relay.pop(i)
                ops.append(dist.P2POp(dist.isend, data, peer(hop.dst), group=group, tag=i))
            if hop.dst == me:
                if last:
                    start = out_off[r.root] + lo
                    buf = dst[start:start + hi - lo]
                else:
                    buf = relay[i] = torch.empty(hi - lo, dtype=src.dtype, device=src.device)
                ops.append(dist.P2POp(dist.irecv, buf, peer(hop.src), group=group, tag=i))
        if ops:
            wait_all(dist.batch_isend_irecv(ops), [op.peer for op in ops], bound)
    return "schedule"

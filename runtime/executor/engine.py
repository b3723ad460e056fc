"""Run one rank's :class:`~runtime.executor.plan.RankPlan` on torch tensors (torch imported by the caller).

Each round posts one ``batch_isend_irecv`` of the round's messages (sends first, then receives, each list in
the plan's order, which both ends share), waits for it, then runs the round's local ops. Timing is passive:
on CPU the host clock is read around calls the executor makes anyway; on CUDA, events are recorded on the
current stream and read later, once they have completed (never synchronising).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from .plan import Op, RankPlan, Region

__all__ = ["Timing", "reducer", "run_rank_plan"]


@dataclass
class Timing:
    """Raw per-peer send timings of one collective: host seconds (CPU) or CUDA events (resolved later)."""

    first_post: dict[int, Any] = field(default_factory=dict)
    last_done: dict[int, Any] = field(default_factory=dict)
    bytes_to: dict[int, int] = field(default_factory=dict)
    cuda: bool = False

    def ready(self) -> bool:
        """True when every recorded event has completed (always on CPU)."""
        return not self.cuda or all(e.query() for e in self.last_done.values())

    def busy_s(self, peer: int) -> float:
        """Seconds from the first send to ``peer`` posted to the last one completed."""
        a, b = self.first_post[peer], self.last_done[peer]
        if self.cuda:
            return max(a.elapsed_time(b) / 1e3, 1e-9)
        return max(b - a, 1e-9)


def reducer(torch: Any, op: Any, dtype: Any) -> Any:
    """``f(out, a, b)`` computing ``out = a (+) b`` for a ``torch.distributed.ReduceOp`` (AVG: SUM here)."""
    dist = torch.distributed
    R = dist.ReduceOp
    if op in (R.SUM, getattr(R, "AVG", None)):
        fn = torch.logical_or if dtype == torch.bool else torch.add
    elif op == R.PRODUCT:
        fn = torch.logical_and if dtype == torch.bool else torch.mul
    elif op == R.MAX:
        fn = torch.maximum
    elif op == R.MIN:
        fn = torch.minimum
    elif op == R.BAND:
        fn = torch.bitwise_and
    elif op == R.BOR:
        fn = torch.bitwise_or
    elif op == R.BXOR:
        fn = torch.bitwise_xor
    else:
        raise ValueError(f"reduction {op} is not supported by the executor")

    def apply(out: Any, a: Any, b: Any) -> None:
        fn(a, b, out=out)

    return apply


def run_rank_plan(
    torch: Any,
    rp: RankPlan,
    bufs: dict[str, Any],
    chunk: int,
    group: Any,
    peers: list[int],
    reduce: Any,
    timing: Timing | None,
    elem_bytes: int,
) -> None:
    """Run ``rp`` on the 1-D buffers ``bufs`` (``i``, ``o``, ``s``, ``t``) with ``chunk`` elements per chunk.

    ``peers`` maps the program's (group-local) ranks to global ranks for ``P2POp``.
    """
    dist = torch.distributed
    isend, irecv, P2POp = dist.isend, dist.irecv, dist.P2POp

    def view(reg: Region) -> Any:
        return bufs[reg[0]][reg[1] * chunk:(reg[1] + reg[2]) * chunk]

    def local(ops: tuple[Op, ...]) -> None:
        for op in ops:
            dst, a = view(op.dst), view(op.a)
            if op.kind == "copy":
                if dst.data_ptr() != a.data_ptr():
                    dst.copy_(a)
            elif op.b is not None:
                reduce(dst, a, view(op.b))

    local(rp.pre_ops)
    cuda = timing is not None and timing.cuda
    for rnd in rp.rounds:
        if rnd.sends or rnd.recvs:
            p2p = [P2POp(isend, view(m.regions[0]), peers[m.peer], group) for m in rnd.sends]
            p2p += [P2POp(irecv, view(m.regions[0]), peers[m.peer], group) for m in rnd.recvs]
            if timing is None:
                for w in dist.batch_isend_irecv(p2p):
                    w.wait()
            else:
                if cuda:
                    t0 = torch.cuda.Event(enable_timing=True)
                    t0.record()
                else:
                    t0 = time.perf_counter()
                works = dist.batch_isend_irecv(p2p)
                per_op = len(works) == len(p2p) and not cuda
                done: list[Any] = []
                for w in works:
                    w.wait()
                    if per_op:
                        done.append(time.perf_counter())
                if cuda:
                    t1 = torch.cuda.Event(enable_timing=True)
                    t1.record()
                elif not per_op:
                    t1 = time.perf_counter()
                for j, m in enumerate(rnd.sends):
                    timing.first_post.setdefault(m.peer, t0)
                    timing.last_done[m.peer] = done[j] if per_op else t1
                    timing.bytes_to[m.peer] = timing.bytes_to.get(m.peer, 0) + m.chunks * chunk * elem_bytes
        local(rnd.ops)

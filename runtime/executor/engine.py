"""Run one rank's :class:`~runtime.executor.plan.RankPlan` on torch tensors (torch imported by the caller).

Each round posts one ``batch_isend_irecv`` of the round's messages (sends first, then receives, each list in
the plan's order, which both ends share), waits for it, then runs the round's local ops. Timing is passive:
on CPU the host clock is read around calls the executor makes anyway; on CUDA, events are recorded on the
current stream and read later, once they have completed (never synchronising). With a :class:`Bound`, every
wait is bounded by its ``timeout_s``; a wait that times out or fails (a peer's connection broke) raises
:class:`~runtime.executor.errors.CollectiveTimeoutError` naming the peers whose transfers did not complete.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from .errors import CollectiveTimeoutError, ExecutorError
from .plan import Op, RankPlan, Region

__all__ = ["Bound", "Timing", "wait_all", "reducer", "reduction_fallback", "run_rank_plan", "same_kind"]


#: One measured flow of a collective: (group peer, AllReduce phase or None).
Flow = tuple[int, "str | None"]


@dataclass
class Timing:
    """Raw per-flow send timings of one collective: host seconds (CPU) or CUDA events (resolved later).

    A flow is ``(peer, phase)``: ``phase`` is None, or with ``phases`` (an AllReduce) ``reducescatter`` for
    sends the peer folds into a reduction and ``allgather`` for the others. ``local`` records the local steps
    (copies, reductions) run after each timed round, so that :meth:`busy_s` counts transfer time only.
    """

    first_post: dict[Flow, Any] = field(default_factory=dict)
    last_done: dict[Flow, Any] = field(default_factory=dict)
    bytes_to: dict[Flow, int] = field(default_factory=dict)
    cuda: bool = False
    phases: bool = False
    #: per flow, the ordinal of its first and last round among the rank's rounds
    rounds: dict[Flow, tuple[int, int]] = field(default_factory=dict)
    #: per round ordinal with local steps: (start, end) of those steps (host seconds or CUDA events)
    local: dict[int, tuple[Any, Any]] = field(default_factory=dict)
    #: Under a throttle: per flow, the summed per-round busy time (round start to the send's emulated completion);
    #: a pair's idle time between rounds (waiting for data to relay) is then not counted as link time.
    paced_s: dict[Flow, float] | None = None
    #: Under a throttle: per round, (round start, {flow: completion}) for the ``inject`` sample.
    paced_rounds: list[tuple[float, dict[Flow, float]]] | None = None

    def ready(self) -> bool:
        """True when every recorded event has completed (always on CPU)."""
        return not self.cuda or all(e.query() for e in self.last_done.values())

    def flow(self, peer: int, reducing: bool) -> Flow:
        """The flow a send to ``peer`` belongs to (``reducing``: the peer folds it into a reduction)."""
        return (peer, ("reducescatter" if reducing else "allgather") if self.phases else None)

    def _elapsed(self, a: Any, b: Any) -> float:
        return a.elapsed_time(b) / 1e3 if self.cuda else b - a

    def span_s(self, flows: Any) -> float:
        """Seconds from the first send of ``flows`` posted to the last completed, less the local steps run in
        between (transfer time only)."""
        flows = list(flows)
        lo = min(self.rounds[f][0] for f in flows)
        hi = max(self.rounds[f][1] for f in flows)
        if self.cuda:  # events of one stream: the first round's start, the last round's end
            a = next(self.first_post[f] for f in flows if self.rounds[f][0] == lo)
            b = next(self.last_done[f] for f in flows if self.rounds[f][1] == hi)
        else:
            a, b = min(self.first_post[f] for f in flows), max(self.last_done[f] for f in flows)
        local = sum(self._elapsed(*self.local[j]) for j in range(lo, hi) if j in self.local)
        return max(self._elapsed(a, b) - local, 1e-9)

    def busy_s(self, flow: Flow) -> float:
        """Transfer seconds of ``flow``: its paced time under a throttle, else :meth:`span_s`."""
        if self.paced_s is not None and flow in self.paced_s:
            return max(self.paced_s[flow], 1e-9)
        return self.span_s([flow])


#: Seconds each remaining wait of a round still gets once its collective's timeout has passed.
GRACE_S = 0.5


@dataclass(frozen=True)
class Bound:
    """The bound of each wait of one collective and what its error names.

    >>> Bound(3.0, "dp0", "allgather", 7, 2).timeout_s
    3.0
    """

    timeout_s: float
    comm: str
    collective: str
    seq: int
    version: int | None


def wait_all(works: Sequence[Any], peers: Sequence[int], bound: Bound | None) -> None:
    """Wait for every work of ``works`` (``peers[j]``: the global peer of ``works[j]``; when the lengths
    differ, every peer of ``peers`` is named), together bounded by ``bound`` (None: unbounded).

    Every work is waited, until ``bound.timeout_s`` from the call, then at most ``GRACE_S`` more each (the
    transfers of a closed pair fail at once); when any failed or timed out, raises
    :class:`CollectiveTimeoutError` naming the peers of those works only.

    >>> wait_all([], [], Bound(1.0, "w", "allgather", 1, None))
    """
    if bound is None:
        for w in works:
            w.wait()
        return
    deadline = time.monotonic() + bound.timeout_s
    failed: set[int] = set()
    cause = ""
    for j, w in enumerate(works):
        left_s = max(deadline - time.monotonic(), min(GRACE_S, bound.timeout_s))
        try:
            w.wait(timeout=timedelta(seconds=left_s))
        except RuntimeError as exc:
            failed |= {peers[j]} if len(works) == len(peers) else set(peers)
            cause = cause or (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    if failed:
        raise CollectiveTimeoutError(bound.comm, bound.collective, seq=bound.seq, version=bound.version,
                                     ranks=sorted(failed), timeout_s=bound.timeout_s, cause=cause)


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
    throttle: Any = None,
    bound: Bound | None = None,
) -> None:
    """Run ``rp`` on the 1-D buffers ``bufs`` (``i``, ``o``, ``s``, ``t``) with ``chunk`` elements per chunk.

    ``peers`` maps the program's (group-local) ranks to global ranks for ``P2POp``. With a ``throttle``
    (:class:`~runtime.executor.throttle.Throttle`, fault injection), each round posts its receives first and
    every send once its emulated links have carried it (individual ``isend``/``irecv``: gloo only). With a
    ``bound``, each wait on CPU tensors is bounded (:func:`wait_all`).
    """
    dist = torch.distributed
    isend, irecv, P2POp = dist.isend, dist.irecv, dist.P2POp
    if bufs["o"].device.type == "cuda":
        bound = None  # a bounded NCCL wait would block the host: NCCL's own timeout applies

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
    for j, rnd in enumerate(rp.rounds):
        if rnd.sends or rnd.recvs:
            p2p = [P2POp(isend, view(m.regions[0]), peers[m.peer], group) for m in rnd.sends]
            p2p += [P2POp(irecv, view(m.regions[0]), peers[m.peer], group) for m in rnd.recvs]
            if timing is None:
                batch = _post(dist, p2p, rnd, throttle, chunk * elem_bytes)[0] if throttle is not None \
                    else dist.batch_isend_irecv(p2p)
                wait_all(batch, [op.peer for op in p2p], bound)
            else:
                _timed_round(torch, dist, p2p, rnd, throttle, chunk * elem_bytes, timing, bound, j)
        if timing is not None and rnd.ops:  # timed apart: samples count transfer time only
            start = _mark(torch, timing.cuda)
            local(rnd.ops)
            timing.local[j] = (start, _mark(torch, timing.cuda))
        else:
            local(rnd.ops)


def _mark(torch: Any, cuda: bool) -> Any:
    """Now: a CUDA event recorded on the current stream, or the host clock."""
    if cuda:
        e = torch.cuda.Event(enable_timing=True)
        e.record()
        return e
    return time.perf_counter()


def _timed_round(torch: Any, dist: Any, p2p: list[Any], rnd: Any, throttle: Any, chunk_bytes: int,
                 timing: Timing, bound: Bound | None, ordinal: int) -> None:
    """Post and wait one round's transfers (the ``ordinal``-th of the rank), recording into ``timing`` when each
    flow's sends were posted and done, the bytes sent in it and, under a throttle, its paced time."""
    cuda = timing.cuda
    t0 = _mark(torch, cuda)
    sent: list[float] = []
    if throttle is not None:
        works, sent = _post(dist, p2p, rnd, throttle, chunk_bytes)
    else:
        works = dist.batch_isend_irecv(p2p)
    per_op = len(works) == len(p2p) and not cuda
    done: list[Any] = []
    if per_op:
        for j, w in enumerate(works):
            wait_all([w], [p2p[j].peer], bound)
            done.append(time.perf_counter())
    else:
        wait_all(works, [op.peer for op in p2p], bound)
    done[:len(sent)] = sent  # paced sends: each one's own completion, not the batch's
    if cuda or not per_op:
        t1 = _mark(torch, cuda)
    flows = [timing.flow(m.peer, m.reducing) for m in rnd.sends]
    if throttle is not None and sent:
        if timing.paced_s is None:
            timing.paced_s, timing.paced_rounds = {}, []
        ends: dict[Flow, float] = {}
        for j, f in enumerate(flows):
            ends[f] = max(ends.get(f, t0), sent[j])
        for f, end in ends.items():
            timing.paced_s[f] = timing.paced_s.get(f, 0.0) + (end - t0)
        assert timing.paced_rounds is not None
        timing.paced_rounds.append((t0, ends))
    for j, (f, m) in enumerate(zip(flows, rnd.sends)):
        timing.first_post.setdefault(f, t0)
        timing.last_done[f] = done[j] if per_op else t1
        timing.bytes_to[f] = timing.bytes_to.get(f, 0) + m.chunks * chunk_bytes
        timing.rounds[f] = (timing.rounds.get(f, (ordinal, ordinal))[0], ordinal)


def _post(dist: Any, p2p: list[Any], rnd: Any, throttle: Any, chunk_bytes: int) -> tuple[list[Any], list[float]]:
    """Post a round under a throttle: receives now, each send at its release time (sleeping until then).

    Returns the works in ``p2p`` order and each send's emulated completion time (``perf_counter``): the moment
    its emulated links have carried it, when it is handed to gloo (the real loopback transfer, much faster by
    construction, is not counted). Sends are not waited here: a gloo send waited before the peer waits for
    it can deadlock.
    """
    ns = len(rnd.sends)
    works: list[Any] = [None] * len(p2p)
    sent = [0.0] * ns
    for j in range(ns, len(p2p)):
        works[j] = dist.irecv(p2p[j].tensor, p2p[j].peer, p2p[j].group)
    releases = throttle.release_times([(m.peer, m.chunks * chunk_bytes) for m in rnd.sends])
    for j in sorted(range(ns), key=lambda k: releases[k]):  # stable: sends to one peer keep their order
        wait_s = releases[j] - time.perf_counter()
        if wait_s > 0:
            time.sleep(wait_s)
        works[j] = dist.isend(p2p[j].tensor, p2p[j].peer, p2p[j].group)
        sent[j] = time.perf_counter()
    return works, sent


def reduction_fallback(ops: Any, op: Any, floating: bool) -> str | None:
    """Why a reduction ``op`` (of ``torch.distributed.ReduceOp`` ``ops``) on a tensor (``floating``
    point or not) goes to native torch.distributed; ``None`` when a program runs it.

    >>> import torch.distributed as dist
    >>> reduction_fallback(dist.ReduceOp, dist.ReduceOp.SUM, False) is None
    True
    >>> reduction_fallback(dist.ReduceOp, dist.ReduceOp.AVG, False)
    'AVG on an integer tensor: native torch.distributed'
    """
    avg = getattr(ops, "AVG", None)
    if op == avg and not floating:
        return "AVG on an integer tensor: native torch.distributed"
    if op not in (ops.SUM, ops.PRODUCT, ops.MAX, ops.MIN, ops.BAND, ops.BOR, ops.BXOR, avg):
        return f"reduction {op}: native torch.distributed"
    return None


def same_kind(comm: str, *tensors: Any) -> None:
    """Raise :class:`ExecutorError` unless ``tensors`` share one dtype and device.

    >>> import torch
    >>> same_kind("w", torch.zeros(2), torch.ones(3))
    """
    kinds = {(t.dtype, t.device) for t in tensors}
    if len(kinds) != 1:
        raise ExecutorError(f"comm {comm!r}: tensors differ in dtype/device: {sorted(map(str, kinds))}")

"""The :class:`Executor`: torch.distributed-shaped collectives that run MSCCL programs, with telemetry and hot-swap.

torch is imported when an Executor is made, never at module import."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from datetime import timedelta
from typing import Any

from runtime.executor.alltoallv import all_to_all_single_v
from runtime.formats.store import VersionEntry
from runtime.formats.telemetry import Sample

from .agreement import (StagedVersion, SwapReport, add_staged, agreement_key, choose, default_store, gather_arrivals,
                        take)
from .engine import Bound, Timing, reducer, reduction_fallback, run_rank_plan, same_kind
from .errors import ExecutorError, StagingError
from .incarnation import incarnation_id
from .plan import Plan
from .sinks import AggregatingSink
from .sources import entry_programs, load_programs, local_digest
from .staging import compile_programs
from .telemetry import collective_samples, default_hosts, demand_sample
from .workspaces import Workspaces
from .throttle import Throttle, emulation_from_env

__all__ = ["Executor", "SwapReport", "StagedVersion"]

log = logging.getLogger("loopcoll.executor")
Sink = Callable[[list[Sample]], None]


class Executor:
    """Runs collectives on ``group`` with loaded MSCCL programs, falling back to native torch.distributed.

    Parameters
    ----------
    group
        The process group (default: WORLD). P2P and native fallbacks use it.
    comm
        The communicator's name, as in the job profile; tags every telemetry sample.
    sink
        Callable receiving each collective's samples (a list of :class:`runtime.formats.telemetry.Sample`); None: no telemetry.
    sync_every
        Run the version agreement automatically every this many collectives (all ranks issue the same
        sequence); None: only on :meth:`sync_versions`.
    control_timeout_s, collective_timeout_s
        Agreement timeout (:class:`SwapTimeoutError`); bound of each transfer wait (None: the first; docs/executor.md).
    hosts
        Host id per global rank (``inject`` samples count sends within a host); default: ranks
        ``LOCAL_WORLD_SIZE`` apart share a host, or all ranks share one when it is unset.
    store
        A ``torch.distributed.Store`` used to name ranks that miss an agreement (default: the default group's).
    control_group
        The gloo group of the members for the agreement. By default the executor makes one with
        ``dist.new_group``, which every process of the default group must call at the same point: for an
        executor on a subgroup, make ``dist.new_group(members, backend="gloo", timeout=...)`` on every process
        and pass it to the members' executors.
    emulation
        Fault injection (docs/live.md): a :class:`~runtime.executor.throttle.Emulation` whose link speeds and
        faults pace this rank's sends (gloo); ``None``: the one in ``$LOOPCOLL_EMULATION`` if set, else off;
        ``False``: off.
    """

    def __init__(self, group: Any = None, *, comm: str = "world", sink: Sink | None = None,
                 sync_every: int | None = None, control_timeout_s: float = 30.0,
                 hosts: Sequence[int] | None = None, store: Any = None, history: int = 100_000,
                 control_group: Any = None, emulation: Any = None, collective_timeout_s: float | None = None) -> None:
        import torch
        import torch.distributed as dist
        if collective_timeout_s is not None and not collective_timeout_s > 0:  # 0 would silently mean "the first"
            raise ExecutorError(f"collective_timeout_s must be a number > 0 or None, got {collective_timeout_s!r}")
        self._torch = torch
        self._dist = dist
        pg: Any = dist.group.WORLD if group is None else group
        self.group = pg
        self.comm = comm
        self.sink = sink
        self.rank = dist.get_rank(self.group)
        self.size = dist.get_world_size(self.group)
        self.global_rank = dist.get_rank()
        self._peers = [dist.get_global_rank(pg, r) if pg is not dist.group.WORLD else r for r in range(self.size)]
        self._hosts = list(default_hosts(dist.get_world_size()) if hosts is None else hosts)
        self.sync_every = sync_every
        self.control_timeout_s, self.collective_timeout_s = control_timeout_s, collective_timeout_s or control_timeout_s
        # dist.new_group is collective over the default group (every process at the same point) unless passed in.
        self._ctrl = control_group if control_group is not None else dist.new_group(
            ranks=self._peers, backend="gloo", timeout=timedelta(seconds=control_timeout_s))
        self._store = default_store(dist) if store is None else store
        self._key = agreement_key(self._store, comm, self._peers, self.global_rank)
        #: This executor start's id, shared by its ranks; carried by every sample (runtime.executor.incarnation).
        self.incarnation = incarnation_id(self._store, self._key, self.size)
        self.seq = 0
        self.sync_index = 0
        self.active: dict[str, int | None] = {}
        self._active_plans: dict[str, tuple[Plan, ...]] = {}
        self._staged: dict[str, dict[tuple[int, str, str], tuple[Plan, ...]]] = {}
        self.active_identity: dict[str, tuple[int, str, str]] = {}  # per collective: (version, epoch, digest) running
        self._lock = threading.Lock()
        self.refused: dict[int, str] = {}
        self.history: deque[tuple[int, str, int | None]] = deque(maxlen=history)
        self.swaps: list[SwapReport] = []
        self.staging_s: dict[int, float] = {}
        #: Per version: seconds loading (file/lowering), checking (msccl_xml.check) and compiling the plans.
        self.staging_split: dict[int, dict[str, float]] = {}
        self._workspaces = Workspaces(torch)
        self._said: set[str] = set()
        self._pending: deque[tuple[Timing, dict]] = deque()
        self._retired: list[tuple[Plan, ...]] = []
        #: Host seconds spent building and handing over samples (the telemetry's CPU cost on this thread).
        self.telemetry_s = 0.0
        self._followed: Any = None  # follow()'s client: close() waits until it has sent the samples

        emu = emulation_from_env() if emulation is None else (emulation or None)
        #: The fault-injection pacer of this rank's sends (None: off).
        self.throttle = None if emu is None else Throttle(emu, self.rank, world=self.size)

    # ------------------------------------------------------------------ staging and agreement
    def stage(self, source: Any, *, version: int, background: bool = True) -> Future:
        """Validate, compile and make ready ``source`` as ``version`` (a thread by default).

        The returned future holds the :class:`StagedVersion`, or raises :class:`StagingError` (the
        version is then refused and listed in :attr:`refused`; what runs now keeps running).
        """
        fut: Future = Future()

        def work() -> None:
            try:
                fut.set_result(self._stage_now(source, version))
            except BaseException as exc:  # noqa: BLE001 - reported through the future
                msg = str(exc)
                with self._lock:
                    self.refused[version] = msg
                log.error("comm %r: version %d refused: %s", self.comm, version, msg)
                fut.set_exception(exc if isinstance(exc, StagingError) else StagingError(msg))

        if background:
            threading.Thread(target=work, name=f"loopcoll-stage-v{version}", daemon=True).start()
        else:
            work()
        return fut

    def _stage_now(self, source: Any, version: int, identity: tuple[str, str] | None = None) -> StagedVersion:
        t0 = time.perf_counter()
        programs = load_programs(source)
        epoch, digest = identity or ("", local_digest(programs))
        t1 = time.perf_counter()
        staged, split = compile_programs(programs, size=self.size, comm=self.comm, version=version)
        dt = time.perf_counter() - t0
        with self._lock:
            for coll, bands in staged.items():
                add_staged(self._staged.setdefault(coll, {}), (version, epoch, digest), bands)
            self.staging_s[version] = dt
            self.staging_split[version] = {"load_s": t1 - t0, **split}
        return StagedVersion(version, staged, dt)

    def follow(self, client: Any, *, telemetry: bool = True, window: int = 1, columnar: bool = False) -> None:
        """Take versions pushed by the loopcoll daemon through ``client`` (a ``runtime.Client``) and send it samples
        (``window`` > 1: aggregated over that many collectives or 1 s, ``columnar``: a batch per window; see ``sinks``).
        Each pushed manifest entry of this communicator is fetched (its bands' XML, or the schedule JSON) and staged on
        a background thread; the next agreement (:meth:`sync_versions`) switches to it once every rank has it."""
        if telemetry and self.sink is None:
            send = client.send_samples
            self.sink = AggregatingSink(send, window=window, columnar=columnar) if window > 1 else send
            self._followed = client

        def on_version(entry: VersionEntry) -> None:
            if entry.comm == self.comm:
                threading.Thread(target=self._stage_entry, args=(client, entry), daemon=True,
                                 name=f"loopcoll-fetch-v{entry.version}").start()

        client.on_version(on_version)

    def _stage_entry(self, client: Any, entry: VersionEntry) -> None:
        version = entry.version
        try:
            self._stage_now(entry_programs(entry, client.get), version, (entry.epoch, entry.digest or ""))
        except Exception as exc:  # noqa: BLE001 - a bad push must not stop training
            with self._lock:
                self.refused[version] = str(exc)
            log.error("comm %r: pushed version %s of %s refused: %s", self.comm, version, entry.collective, exc)

    def load(self, source: Any, *, version: int = 1) -> SwapReport:
        """Stage ``source`` now and agree to run it (a collective call: every rank must make it)."""
        fut = self.stage(source, version=version, background=False)
        fut.result()
        return self.sync_versions()

    def sync_versions(self) -> SwapReport:
        """Agree the switch point with every rank (out-of-band all-gather on a gloo group); collective.

        Each rank contributes (the versions it has staged per collective, its last issued seq). The
        newest (version, epoch, digest) staged on *all* ranks that supersedes the active one runs from the
        next collective on (``agreement.choose``). Raises :class:`SwapTimeoutError` naming late ranks.
        """
        dist = self._dist
        t0 = time.perf_counter()
        self.sync_index += 1
        with self._lock:
            staged = {c: sorted(v) for c, v in self._staged.items()}
        payload = (self.rank, self.seq, staged)
        gathered = gather_arrivals(dist, self._ctrl, payload, store=self._store, key=self._key, rank=self.rank,
                                   size=self.size, sync_index=self.sync_index,
                                   what=f"comm {self.comm!r}: version agreement {self.sync_index}",
                                   timeout_s=self.control_timeout_s)
        seqs = {p[1] for p in gathered}
        if len(seqs) != 1:
            raise ExecutorError(f"comm {self.comm!r}: ranks reached agreement {self.sync_index} at different "
                                f"collectives {sorted((p[0], p[1]) for p in gathered)}; every rank must issue the same calls")
        chosen, disagreed = choose([p[2] for p in gathered], self.active_identity, warn=self._say_once)
        switched = {coll: (self.active.get(coll), ident[0]) for coll, ident in chosen.items()}
        for coll, plans in take(self._staged, chosen, self._lock).items():
            if coll in self._active_plans:
                self._retired = [self._active_plans[coll]]  # kept alive until the next agreement
            self._active_plans[coll] = plans
            self.active[coll], self.active_identity[coll] = chosen[coll][0], chosen[coll]
        rep = SwapReport(self.sync_index, self.seq + 1, switched, time.perf_counter() - t0, disagreed)
        self.swaps.append(rep)
        if switched:
            log.info("comm %r: from seq %d run %s", self.comm, rep.switch_seq, switched)
        return rep

    # ------------------------------------------------------------------ helpers
    def _say_once(self, msg: str, key: str | None = None) -> None:
        key = msg if key is None else key
        if key not in self._said:
            self._said.add(key)
            log.warning("comm %r: %s", self.comm, msg)

    def _begin(self) -> int:
        if self.sync_every and self.seq > 0 and self.seq % self.sync_every == 0:
            self.sync_versions()
        self.seq += 1
        self._flush_pending(block=False)
        return self.seq

    def _pick(self, coll: str, nbytes: int) -> Plan | None:
        for plan in self._active_plans.get(coll, ()):
            if plan.accepts(nbytes):
                return plan
        if coll in self._active_plans:
            v = self.active.get(coll)
            self._say_once(f"{coll} of {nbytes} bytes (and maybe other sizes): no program of version {v} covers it;"
                           " native torch.distributed", key=f"band {coll} {v}")
        else:
            self._say_once(f"{coll}: no schedule loaded; native torch.distributed")
        return None

    def _ws(self, tag: str, numel: int, dtype: Any, device: Any) -> Any:
        return self._workspaces.get(tag, numel, dtype, device)

    def _run(self, plan: Plan, coll: str, i: Any, o: Any, chunk: int, op: Any, seq: int) -> None:
        torch, rp, version = self._torch, plan.ranks[self.rank], self.active.get(coll)
        dtype, device = o.dtype, o.device
        bufs = {"i": i, "o": o}
        if rp.scratch_chunks:
            bufs["s"] = self._ws("s", rp.scratch_chunks * chunk, dtype, device)
        if rp.temp_chunks:
            bufs["t"] = self._ws("t", rp.temp_chunks * chunk, dtype, device)
        timing = Timing(cuda=device.type == "cuda", phases=coll == "allreduce") if self.sink is not None else None
        if self.throttle is not None:
            self.throttle.begin(seq)
        run_rank_plan(torch, rp, bufs, chunk, self.group, self._peers, reducer(torch, op, dtype) if op is not None else None, timing,
                      o.element_size(), self.throttle, Bound(self.collective_timeout_s, self.comm, coll, seq, version))
        self.history.append((seq, coll, self.active.get(coll)))
        if timing is not None:
            self._pending.append((timing, {"seq": seq, "coll": coll, "version": self.active.get(coll),
                                           "t_wall": time.time(), "t_perf": time.perf_counter()}))
            self._flush_pending(block=False)

    def _flush_pending(self, block: bool) -> None:
        while self._pending:
            timing, meta = self._pending[0]
            if not timing.ready():
                if not block:
                    return
                for e in timing.last_done.values():
                    e.synchronize()
            self._pending.popleft()
            self._emit(timing, meta)

    def flush(self) -> None:
        """Emit the samples of every finished collective (waits for CUDA events), an aggregating sink's windows too."""
        self._flush_pending(block=True)
        getattr(self.sink, "flush", lambda: None)()

    def _emit(self, timing: Timing, meta: dict) -> None:
        sink = self.sink
        if sink is None or not timing.bytes_to:
            return
        t_cpu = time.perf_counter()
        try:
            samples = collective_samples(timing, meta, comm=self.comm, me=self.global_rank, peers=self._peers,
                                         hosts=self._hosts, incarnation=self.incarnation)
            try:
                sink(samples)
            except Exception as exc:  # noqa: BLE001 - telemetry must never stop training
                self._say_once(f"telemetry sink failed: {exc!r}")
        finally:
            self.telemetry_s += time.perf_counter() - t_cpu

    def _native(self, coll: str, seq: int) -> None:
        self.history.append((seq, coll, None))

    # ------------------------------------------------------------------ collectives
    def all_gather_into_tensor(self, out: Any, inp: Any) -> None:
        """``out`` (N·n elements) = concatenation of every rank's ``inp`` (n elements), like torch's."""
        seq = self._begin()
        same_kind(self.comm, out, inp)
        n, N = inp.numel(), self.size
        if out.numel() != N * n:
            raise ExecutorError(f"all_gather_into_tensor: output has {out.numel()} elements, expected {N}x{n}")
        plan = self._pick("allgather", out.numel() * out.element_size()) if n else None
        if plan is None:
            self._native("allgather", seq)
            if n:
                self._dist.all_gather_into_tensor(out, inp, group=self.group)
            return
        c = plan.nchunks // N
        inplace = inp.data_ptr() == out.data_ptr() + self.rank * n * out.element_size() and out.is_contiguous()
        if n % c == 0 and out.is_contiguous() and inp.is_contiguous():
            o = out.view(-1)
            i = inp.reshape(-1)
            if inplace and not plan.inplace:
                i = self._ws("pad_i", n, inp.dtype, inp.device).copy_(i)
            elif not inplace and not plan.outofplace:
                o[self.rank * n:(self.rank + 1) * n].copy_(i)
                i = o[self.rank * n:(self.rank + 1) * n]
            self._run(plan, "allgather", i, o, n // c, None, seq)
            return
        m = -(-n // c) * c
        o = self._ws("pad_o", N * m, out.dtype, out.device)
        i = o[self.rank * m:(self.rank + 1) * m] if plan.inplace else self._ws("pad_i", m, out.dtype, out.device)
        i[:n].copy_(inp.reshape(-1))
        i[n:].zero_()
        if not plan.outofplace and not plan.inplace:
            raise ExecutorError("program supports neither in-place nor out-of-place calls")
        self._run(plan, "allgather", i, o, m // c, None, seq)
        out.view(N, n).copy_(o.view(N, m)[:, :n])

    def reduce_scatter_tensor(self, out: Any, inp: Any, op: Any = None) -> None:
        """``out`` (n elements) = this rank's block of the reduction of every rank's ``inp`` (N·n)."""
        op = self._dist.ReduceOp.SUM if op is None else op
        seq = self._begin()
        same_kind(self.comm, out, inp)
        n, N = out.numel(), self.size
        if inp.numel() != N * n:
            raise ExecutorError(f"reduce_scatter_tensor: input has {inp.numel()} elements, expected {N}x{n}")
        plan = self._pick("reducescatter", inp.numel() * inp.element_size()) if n and self._op_ok(op, out) else None
        if plan is None:
            self._native("reducescatter", seq)
            if n:
                self._dist.reduce_scatter_tensor(out, inp, op=op, group=self.group)
            return
        c = plan.nchunks // N
        es = inp.element_size()
        inplace = out.data_ptr() == inp.data_ptr() + self.rank * n * es
        if n % c == 0 and out.is_contiguous() and inp.is_contiguous() and not inplace:
            i = inp.view(-1)
            if plan.outofplace:
                o = out.view(-1)
                self._run(plan, "reducescatter", i, o, n // c, op, seq)
            else:  # in-place only program: work on a copy of the input
                i2 = self._ws("pad_i", N * n, inp.dtype, inp.device).copy_(i)
                self._run(plan, "reducescatter", i2, i2[self.rank * n:(self.rank + 1) * n], n // c, op, seq)
                out.view(-1).copy_(i2[self.rank * n:(self.rank + 1) * n])
        else:
            m = -(-n // c) * c
            i = self._ws("pad_i", N * m, inp.dtype, inp.device)
            i.view(N, m)[:, :n].copy_(inp.reshape(N, n))
            i.view(N, m)[:, n:].zero_()
            o = i[self.rank * m:(self.rank + 1) * m] if not plan.outofplace else self._ws("pad_o", m, inp.dtype,
                                                                                       inp.device)
            self._run(plan, "reducescatter", i, o, m // c, op, seq)
            out.view(-1).copy_(o[:n])
        self._finish_avg(op, out)

    def all_reduce(self, t: Any, op: Any = None) -> None:
        """In place: ``t`` = the reduction of every rank's ``t``."""
        op = self._dist.ReduceOp.SUM if op is None else op
        seq = self._begin()
        n = t.numel()
        plan = self._pick("allreduce", n * t.element_size()) if n and self._op_ok(op, t) else None
        if plan is None:
            self._native("allreduce", seq)
            if n:
                self._dist.all_reduce(t, op=op, group=self.group)
            return
        C = plan.nchunks
        if n % C == 0 and t.is_contiguous():
            o = t.view(-1)
            if plan.inplace:
                self._run(plan, "allreduce", o, o, n // C, op, seq)
            else:
                i = self._ws("pad_i", n, t.dtype, t.device).copy_(o)
                self._run(plan, "allreduce", i, o, n // C, op, seq)
        else:
            m = -(-n // C) * C
            o = self._ws("pad_o", m, t.dtype, t.device)
            o[:n].copy_(t.reshape(-1))
            o[n:].zero_()
            i = o if plan.inplace else self._ws("pad_i", m, t.dtype, t.device).copy_(o)
            self._run(plan, "allreduce", i, o, m // C, op, seq)
            t.copy_(o[:n].view_as(t))
        self._finish_avg(op, t)

    def all_to_all_single(self, out: Any, inp: Any, output_split_sizes: Any = None,
                          input_split_sizes: Any = None) -> None:
        """Equal-split all-to-all: block j of ``inp`` goes to rank j, block i of ``out`` comes from rank i.

        Split sizes are not run by programs yet: such calls go to the native collective.
        """
        seq = self._begin()
        same_kind(self.comm, out, inp)
        N = self.size
        if output_split_sizes is not None or input_split_sizes is not None:
            self._alltoallv(out, inp, output_split_sizes, input_split_sizes, seq)
            return
        total = inp.numel()
        if out.numel() != total or total % N:
            raise ExecutorError(f"all_to_all_single: {total} input / {out.numel()} output elements, need equal "
                                f"sizes divisible by {N} ranks")
        plan = self._pick("alltoall", total * inp.element_size()) if total else None
        if plan is None:
            self._native("alltoall", seq)
            if total:
                self._dist.all_to_all_single(out, inp, group=self.group)
            return
        b = total // N
        c = plan.nchunks // N
        same = out.data_ptr() == inp.data_ptr()
        if b % c == 0 and out.is_contiguous() and inp.is_contiguous():
            i = inp.view(-1)
            if same or not plan.outofplace:
                i = self._ws("pad_i", total, inp.dtype, inp.device).copy_(i)
            o = out.view(-1)
            if not plan.outofplace:
                o.copy_(i)
                i = o
            self._run(plan, "alltoall", i, o, b // c, None, seq)
            return
        m = -(-b // c) * c
        i = self._ws("pad_i", N * m, inp.dtype, inp.device)
        i.view(N, m)[:, :b].copy_(inp.reshape(N, b))
        i.view(N, m)[:, b:].zero_()
        o = self._ws("pad_o", N * m, inp.dtype, inp.device)
        if not plan.outofplace:
            o.copy_(i)
            i = o
        self._run(plan, "alltoall", i, o, m // c, None, seq)
        out.view(N, b).copy_(o.view(N, m)[:, :b])

    def set_alltoallv_schedule(self, schedule: Any) -> None:
        """Run later ``all_to_all_single`` calls with split sizes by this AllToAllv schedule
        (:class:`synth.alltoallv_schedule.AllToAllvSchedule`, see docs/alltoallv.md); None: native."""
        self.alltoallv_schedule = schedule

    def _alltoallv(self, out: Any, inp: Any, out_splits: Any, in_splits: Any, seq: int) -> None:
        """Split-size all-to-all: a ``demand`` sample (bytes per global rank), then the AllToAllv schedule
        (runtime.executor.alltoallv) or native torch.distributed."""
        n = self.size
        ins = [int(x) for x in in_splits] if in_splits is not None else [inp.numel() // n] * n
        outs = [int(x) for x in out_splits] if out_splits is not None else [out.numel() // n] * n
        if self.sink is not None:
            try:
                self.sink([demand_sample(self.comm, seq, self.global_rank, ins, inp.element_size(), self._peers,
                                         self._dist.get_world_size(), self.incarnation)])
            except Exception as exc:  # noqa: BLE001 - telemetry must never stop training
                self._say_once(f"telemetry sink failed: {exc!r}")
        sched = getattr(self, "alltoallv_schedule", None)
        if sched is not None and not (out.is_contiguous() and inp.is_contiguous() and out.data_ptr() != inp.data_ptr()):
            sched = None
        if sched is None:
            self._say_once("all_to_all_single with split sizes: native torch.distributed (no AllToAllv schedule)")
        how = all_to_all_single_v(out, inp, outs, ins, sched, group=self.group,
                                  bound=Bound(self.collective_timeout_s, self.comm, "alltoallv", seq, None))
        self.history.append((seq, "alltoallv" if how == "schedule" else "alltoall", None))

    def _op_ok(self, op: Any, t: Any) -> bool:
        why = reduction_fallback(self._dist.ReduceOp, op, t.is_floating_point())
        if why is not None:
            self._say_once(why)
        return why is None

    def _finish_avg(self, op: Any, t: Any) -> None:
        if op == getattr(self._dist.ReduceOp, "AVG", None) and self.history and self.history[-1][2] is not None:
            t.div_(self.size)

    def close(self) -> None:
        """Emit pending telemetry (a followed client's queue sent within ``control_timeout_s``), free workspaces."""
        self.flush()
        if self._followed is not None and not self._followed.flush(timeout_s=self.control_timeout_s):
            log.warning("comm %r: telemetry not all sent to the daemon at close", self.comm)
        self._workspaces.clear()

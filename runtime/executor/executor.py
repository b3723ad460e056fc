"""The :class:`Executor`: torch.distributed-shaped collectives that run MSCCL programs, with telemetry and hot-swap.

torch is imported when an Executor is made, never at module import.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from msccl_xml import Program, check, parse
from runtime.executor.alltoallv import all_to_all_single_v
from runtime.formats.store import VersionEntry
from runtime.formats.telemetry import Sample

from .engine import Timing, reducer, run_rank_plan
from .errors import ExecutorError, StagingError, SwapTimeoutError
from .incarnation import incarnation_id
from .plan import Plan, compile_program
from .sources import load_programs
from .throttle import Throttle, emulation_from_env
from .versions import Ident, choose, local_digest

__all__ = ["Executor", "SwapReport", "StagedVersion"]

log = logging.getLogger("loopcoll.executor")
Sink = Callable[[list[Sample]], None]


@dataclass(frozen=True)
class StagedVersion:
    """A version ready to switch to: per collective, its plans (size bands) and the staging time."""

    version: int
    plans: dict[str, tuple[Plan, ...]]
    staging_s: float


@dataclass(frozen=True)
class SwapReport:
    """Outcome of one agreement: the switch point and what switched (collective -> (old, new) version)."""

    sync_index: int
    switch_seq: int
    switched: dict[str, tuple[int | None, int]]
    agreement_s: float
    #: Per collective: ranks that staged a version under another digest than the lowest rank (not switched).
    disagreed: dict[str, tuple[int, ...]] = dataclasses.field(default_factory=dict)



def default_store(dist: Any) -> Any:
    """The default process group's ``torch.distributed.Store``, or None: the agreement uses it only to
    name the ranks that miss an agreement (best-effort).

    torch (2.13) has no public accessor for it; ``distributed_c10d._get_default_store`` is the one call
    that returns the store ``init_process_group`` made (a new ``TCPStore`` would need the rendezvous
    address, and ``env://`` is only one of the init methods). Pass ``store=`` to :class:`Executor` to
    avoid it; any failure here means "no store", as before.
    """
    try:
        return dist.distributed_c10d._get_default_store()
    except Exception:  # noqa: BLE001 - naming ranks is best-effort without a store
        return None


def agreement_key(store: Any, comm: str, peers: Sequence[int], global_rank: int) -> str:
    """The store-key prefix of one executor's agreement arrivals: ``loopcoll/executor/COMM/PEERS#N/arrived/``.

    ``N`` numbers this rank's executors of the communicator in order (the members make them in the same
    order, so they agree on it); it is counted in ``store``, the object the keys live in (not in
    process-wide state). Without a store nothing is written, so ``N`` is 1.

    >>> import torch.distributed as dist
    >>> s = dist.HashStore()
    >>> agreement_key(s, "dp0", [0, 1], 0), agreement_key(s, "dp0", [0, 1], 0), agreement_key(None, "dp0", [0, 1], 0)
    ('loopcoll/executor/dp0/0-1#1/arrived/', 'loopcoll/executor/dp0/0-1#2/arrived/', 'loopcoll/executor/dp0/0-1#1/arrived/')
    """
    base = f"loopcoll/executor/{comm}/{'-'.join(map(str, peers))}"
    number = 1
    if store is not None:
        try:
            number = int(store.add(f"{base}/made/{global_rank}", 1))
        except Exception:  # noqa: BLE001 - best-effort like every use of the store here
            number = 1
    return f"{base}#{number}/arrived/"

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
    control_timeout_s
        Timeout of the out-of-band agreement; a rank that does not answer raises :class:`SwapTimeoutError`.
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
                 control_group: Any = None, emulation: Any = None) -> None:
        import torch
        import torch.distributed as dist

        self._torch = torch
        self._dist = dist
        pg: Any = dist.group.WORLD if group is None else group
        self.group = pg
        self.comm = comm
        self.sink = sink
        self.rank = dist.get_rank(self.group)
        self.size = dist.get_world_size(self.group)
        self.global_rank = dist.get_rank()
        self._peers = [dist.get_global_rank(pg, r) if pg is not dist.group.WORLD else r
                       for r in range(self.size)]
        if hosts is None:
            lws = int(os.environ.get("LOCAL_WORLD_SIZE", "0") or 0)
            world = dist.get_world_size()
            hosts = [g // lws for g in range(world)] if lws > 0 else [0] * world
        self._hosts = list(hosts)
        self.sync_every = sync_every
        self.control_timeout_s = control_timeout_s
        # dist.new_group is collective over the default group: every process (members or not) makes it at the
        # same point, unless the caller passes a gloo group of the members made that way (control_group).
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
        self._staged: dict[str, dict[Ident, tuple[Plan, ...]]] = {}
        #: Per collective: the (version, epoch, digest) running now (runtime.executor.versions).
        self.active_identity: dict[str, Ident] = {}
        self._lock = threading.Lock()
        self.refused: dict[int, str] = {}
        self.history: deque[tuple[int, str, int | None]] = deque(maxlen=history)
        self.swaps: list[SwapReport] = []
        self.staging_s: dict[int, float] = {}
        #: Per version: seconds loading (file/lowering), checking (msccl_xml.check) and compiling the plans.
        self.staging_split: dict[int, dict[str, float]] = {}
        self._workspaces: OrderedDict[tuple, Any] = OrderedDict()
        self._said: set[str] = set()
        self._pending: deque[tuple[Timing, dict]] = deque()
        self._retired: list[tuple[Plan, ...]] = []
        #: Host seconds spent building and handing over samples (the telemetry's CPU cost on this thread).
        self.telemetry_s = 0.0

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
        if not programs:
            raise StagingError(f"version {version}: nothing to stage")
        epoch, digest = identity or ("", local_digest(programs))
        plans: dict[str, list[Plan]] = {}
        t1 = time.perf_counter()
        checking = 0.0
        for prog in programs:
            plan, check_s = self._validate(prog, version)
            checking += check_s
            plans.setdefault(plan.collective, []).append(plan)
        staged = {c: tuple(sorted(p, key=lambda x: x.min_bytes)) for c, p in plans.items()}
        dt = time.perf_counter() - t0
        split = {"load_s": t1 - t0, "check_s": checking, "compile_s": time.perf_counter() - t1 - checking}
        with self._lock:
            for coll, bands in staged.items():
                mine = self._staged.setdefault(coll, {})
                for other in [i for i in mine if i[1] != epoch]:  # a push of a new epoch supersedes the old
                    del mine[other]
                mine[(version, epoch, digest)] = bands
            self.staging_s[version] = dt
            self.staging_split[version] = split
        return StagedVersion(version, staged, dt)

    def _validate(self, prog: Program, version: int) -> tuple[Plan, float]:
        where = f"version {version} program {prog.name!r}"
        if prog.ngpus != self.size:
            raise StagingError(f"{where}: ngpus={prog.ngpus} but comm {self.comm!r} has {self.size} ranks")
        t0 = time.perf_counter()
        result = check(prog)
        check_s = time.perf_counter() - t0
        if not result.valid:
            raise StagingError(f"{where} fails validation: {result.errors[0]}")
        try:
            plan = compile_program(prog)
        except ExecutorError as exc:
            raise StagingError(f"{where}: {exc}") from exc
        return plan, check_s

    def follow(self, client: Any, *, telemetry: bool = True) -> None:
        """Take versions pushed by the loopcoll daemon through ``client`` (a ``runtime.Client``) and send it samples.

        Each pushed manifest entry of this communicator is fetched (its bands' MSCCL XML, or the schedule
        JSON when a band has no XML) and staged on a background thread; the next agreement
        (:meth:`sync_versions` or every ``sync_every`` collectives) switches to it once every rank has it.
        """
        if telemetry and self.sink is None:
            self.sink = client.send_samples

        def on_version(entry: VersionEntry) -> None:
            if entry.comm == self.comm:
                threading.Thread(target=self._stage_entry, args=(client, entry), daemon=True,
                                 name=f"loopcoll-fetch-v{entry.version}").start()

        client.on_version(on_version)

    def _stage_entry(self, client: Any, entry: VersionEntry) -> None:
        import tempfile

        version = entry.version
        try:
            programs = []
            for band in entry.bands:
                lo, hi = band.min_bytes, band.max_bytes
                if band.xml:
                    prog = parse(_fetched(client, band.xml, band.xml_sha256).decode(), source=band.xml)
                else:
                    with tempfile.TemporaryDirectory() as tmp:
                        path = os.path.join(tmp, "schedule.json")
                        with open(path, "wb") as fh:
                            fh.write(_fetched(client, band.schedule, band.schedule_sha256))
                        prog = load_programs(path)[0]
                programs.append(dataclasses.replace(prog, min_bytes=lo, max_bytes=0 if hi is None else hi))
            self._stage_now(programs, version, (entry.epoch, entry.digest or ""))
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
        highest version staged on *all* ranks and newer than the active one runs from the next
        collective on. Raises :class:`SwapTimeoutError` naming ranks that do not answer in time.
        """
        dist = self._dist
        t0 = time.perf_counter()
        self.sync_index += 1
        with self._lock:
            staged = {c: sorted(v) for c, v in self._staged.items()}
        payload = (self.rank, self.seq, staged)
        key = self._key
        if self._store is not None:
            try:
                self._store.set(key + str(self.rank), str(self.sync_index))
            except Exception:  # noqa: BLE001
                pass
        gathered: list[Any] = [None] * self.size
        try:
            dist.all_gather_object(gathered, payload, group=self._ctrl)
        except Exception as exc:  # noqa: BLE001 - gloo raises RuntimeError/DistBackendError
            missing = self._missing_ranks(key)
            if missing is None:
                who = "the store that names missing ranks is unreachable (rank 0 hosts the default store)"
            elif missing:
                who = f"rank(s) {missing} did not reach it"
            else:
                who = "all ranks had arrived; one failed during it"
            raise SwapTimeoutError(
                f"comm {self.comm!r}: version agreement {self.sync_index} failed within "
                f"{self.control_timeout_s:g} s: {who} ({str(exc).splitlines()[0][:200]})", ranks=missing or ()) from exc
        seqs = {p[1] for p in gathered}
        if len(seqs) != 1:
            raise ExecutorError(f"comm {self.comm!r}: ranks reached agreement {self.sync_index} at different "
                                f"collectives {sorted((p[0], p[1]) for p in gathered)}; every rank must issue the same calls")
        switched: dict[str, tuple[int | None, int]] = {}
        chosen, disagreed = choose([p[2] for p in gathered], self.active_identity)
        for coll, ident in chosen.items():
            cur = self.active.get(coll)
            with self._lock:
                plans = self._staged[coll][ident]
                for old in [x for x in self._staged[coll] if x[1] != ident[1] or x[0] < ident[0]]:
                    del self._staged[coll][old]
            if coll in self._active_plans:
                self._retired = [self._active_plans[coll]]  # kept alive until the next agreement
            self._active_plans[coll] = plans
            self.active[coll], self.active_identity[coll] = ident[0], ident
            switched[coll] = (cur, ident[0])
        for coll, ranks in disagreed.items():
            self._say_once(f"{coll}: rank(s) {list(ranks)} staged a version under another digest than rank "
                           f"{gathered[0][0]}; not switching to it", key=f"disagree/{coll}/{ranks}")
        rep = SwapReport(self.sync_index, self.seq + 1, switched, time.perf_counter() - t0, disagreed)
        self.swaps.append(rep)
        if switched:
            log.info("comm %r: from seq %d run %s", self.comm, rep.switch_seq, switched)
        return rep

    def _missing_ranks(self, key: str) -> list[int] | None:
        """Ranks whose arrival at this agreement is not in the store; None when the store cannot be read."""
        if self._store is None:
            return None
        missing = []
        try:
            for r in range(self.size):
                if not self._store.check([key + str(r)]) or int(self._store.get(key + str(r))) < self.sync_index:
                    missing.append(r)
        except Exception:  # noqa: BLE001 - e.g. the store's host rank died
            return None
        return missing

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
        key = (tag, numel, dtype, str(device))
        t = self._workspaces.get(key)
        if t is None:
            t = self._torch.empty(numel, dtype=dtype, device=device)
            self._workspaces[key] = t
            while len(self._workspaces) > 32:
                self._workspaces.popitem(last=False)
        else:
            self._workspaces.move_to_end(key)
        return t

    def _run(self, plan: Plan, coll: str, i: Any, o: Any, chunk: int, op: Any, seq: int) -> None:
        torch = self._torch
        rp = plan.ranks[self.rank]
        dtype, device = o.dtype, o.device
        bufs = {"i": i, "o": o}
        if rp.scratch_chunks:
            bufs["s"] = self._ws("s", rp.scratch_chunks * chunk, dtype, device)
        if rp.temp_chunks:
            bufs["t"] = self._ws("t", rp.temp_chunks * chunk, dtype, device)
        timing = Timing(cuda=device.type == "cuda") if self.sink is not None else None
        if self.throttle is not None:
            self.throttle.begin(seq)
        run_rank_plan(torch, rp, bufs, chunk, self.group, self._peers, reducer(torch, op, dtype) if op is not None else None, timing,
                      o.element_size(), self.throttle)
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
        """Emit the samples of every finished collective (waits for CUDA events)."""
        self._flush_pending(block=True)

    def _emit(self, timing: Timing, meta: dict) -> None:
        if self.sink is None or not timing.bytes_to:
            return
        t_cpu = time.perf_counter()
        try:
            self._emit_samples(timing, meta)
        finally:
            self.telemetry_s += time.perf_counter() - t_cpu

    def _emit_samples(self, timing: Timing, meta: dict) -> None:
        me = self.global_rank
        t_s = meta["t_wall"]
        samples = []
        inject_bytes = 0
        first: Any = None
        last: Any = None
        for peer in sorted(timing.bytes_to):
            g = self._peers[peer]
            busy = timing.busy_s(peer)
            samples.append(Sample(t_s, self.comm, meta["seq"], meta["version"], "pair", me, g, timing.bytes_to[peer],
                                  busy, meta["coll"], "executor", incarnation=self.incarnation))
            if self._hosts[g] == self._hosts[me]:
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
                local = [p for p in timing.bytes_to if self._hosts[self._peers[p]] == self._hosts[me]]
                busy = max(sum(max(ends[p] for p in local if p in ends) - t0
                               for t0, ends in timing.paced_rounds if any(p in ends for p in local)), 1e-9)
            samples.append(Sample(t_s, self.comm, meta["seq"], meta["version"], "inject", me, None, inject_bytes,
                                  busy, meta["coll"], "executor", incarnation=self.incarnation))
        sink = self.sink
        if sink is None:
            return
        try:
            sink(samples)
        except Exception as exc:  # noqa: BLE001 - telemetry must never stop training
            self._say_once(f"telemetry sink failed: {exc!r}")

    def _native(self, coll: str, seq: int) -> None:
        self.history.append((seq, coll, None))

    def _check_same(self, *ts: Any) -> None:
        d = {(t.dtype, t.device) for t in ts}
        if len(d) != 1:
            raise ExecutorError(f"comm {self.comm!r}: tensors differ in dtype/device: {sorted(map(str, d))}")

    # ------------------------------------------------------------------ collectives
    def all_gather_into_tensor(self, out: Any, inp: Any) -> None:
        """``out`` (N·n elements) = concatenation of every rank's ``inp`` (n elements), like torch's."""
        seq = self._begin()
        self._check_same(out, inp)
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
        self._check_same(out, inp)
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
        self._check_same(out, inp)
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
            sends = [0] * self._dist.get_world_size()
            for r, k in enumerate(ins):
                sends[self._peers[r]] = k * inp.element_size()
            try:
                self.sink([Sample(time.time(), self.comm, seq, None, "demand", self.global_rank, None, sum(sends),
                                  1e-9, "alltoallv", "executor", {"send_bytes": sends}, self.incarnation)])
            except Exception as exc:  # noqa: BLE001 - telemetry must never stop training
                self._say_once(f"telemetry sink failed: {exc!r}")
        sched = getattr(self, "alltoallv_schedule", None)
        if sched is not None and not (out.is_contiguous() and inp.is_contiguous() and out.data_ptr() != inp.data_ptr()):
            sched = None
        if sched is None:
            self._say_once("all_to_all_single with split sizes: native torch.distributed (no AllToAllv schedule)")
        how = all_to_all_single_v(out, inp, outs, ins, sched,
                                  group=None if self.group is self._dist.group.WORLD else self.group)
        self.history.append((seq, "alltoallv" if how == "schedule" else "alltoall", None))

    def _op_ok(self, op: Any, t: Any) -> bool:
        R = self._dist.ReduceOp
        if op == getattr(R, "AVG", None) and not t.is_floating_point():
            self._say_once("AVG on an integer tensor: native torch.distributed")
            return False
        if op not in (R.SUM, R.PRODUCT, R.MAX, R.MIN, R.BAND, R.BOR, R.BXOR, getattr(R, "AVG", None)):
            self._say_once(f"reduction {op}: native torch.distributed")
            return False
        return True

    def _finish_avg(self, op: Any, t: Any) -> None:
        if op == getattr(self._dist.ReduceOp, "AVG", None) and self.history and self.history[-1][2] is not None:
            t.div_(self.size)

    def close(self) -> None:
        """Emit pending telemetry and release workspaces (the control group stays with torch)."""
        self.flush()
        self._workspaces.clear()


def _fetched(client: Any, path: str, sha256: str | None) -> bytes:
    """Store file ``path`` from the daemon, refused unless it has its manifest ``sha256`` (when there is one)."""
    data: bytes = client.get(path)
    if sha256 and hashlib.sha256(data).hexdigest() != sha256:
        raise StagingError(f"{path}: fetched bytes do not match the manifest's sha256")
    return data

"""Per-process bodies of the ``benchmarks/gpu/`` scripts (each runs in one launched process per GPU or CPU rank).

The same code runs on NCCL (one GPU per process, devices from ``torch.cuda.current_device()``) and on gloo
(CPU tensors). Times: CUDA events on the current stream around the measured calls (the executor's and
torch.distributed's NCCL work makes the current stream wait on it), host ``perf_counter`` on CPU; every run
starts after a device synchronisation and a barrier, and a run's time is the maximum over ranks.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import time
from pathlib import Path
from typing import Any

__all__ = ["algbw", "closed_loop", "contender", "correctness", "swap", "telemetry"]

# ----------------------------------------------------------------------------- helpers


def _device(torch: Any) -> Any:
    if torch.distributed.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _sync(torch: Any, dev: Any) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def worker_env(torch: Any) -> dict[str, Any]:
    """GPU name, CUDA and NCCL versions seen by this process (empty figures on CPU)."""
    env: dict[str, Any] = {"torch": torch.__version__}
    if torch.distributed.get_backend() == "nccl":
        v = torch.cuda.nccl.version()  # a tuple (major, minor, patch[, suffix]); an int in old torch
        env.update(gpu_name=torch.cuda.get_device_name(), cuda=torch.version.cuda, gpus_visible=torch.cuda.device_count(),
                   nccl=".".join(map(str, v)) if isinstance(v, tuple) else str(v),
                   capability=".".join(map(str, torch.cuda.get_device_capability())))
    return env


def _max_over_ranks(torch: Any, dev: Any, values: list[float]) -> list[float]:
    t = torch.tensor(values, dtype=torch.float64, device=dev)
    torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX)
    return [float(x) for x in t.tolist()]


def _time_calls(torch: Any, dev: Any, fn: Any, runs: int, inner: int = 1, warmup: int = 2) -> list[float]:
    """Seconds per call of ``fn`` for each of ``runs`` runs of ``inner`` back-to-back calls (max over ranks)."""
    dist = torch.distributed
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(runs):
        _sync(torch, dev)
        dist.barrier()
        if dev.type == "cuda":
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            for _ in range(inner):
                fn()
            e1.record()
            e1.synchronize()
            out.append(e0.elapsed_time(e1) / 1e3 / inner)
        else:
            t0 = time.perf_counter()
            for _ in range(inner):
                fn()
            out.append((time.perf_counter() - t0) / inner)
    return _max_over_ranks(torch, dev, out)


def _inner(dev: Any, size_bytes: int) -> int:
    """Back-to-back calls per timed run: enough to hide launch latency at small sizes on GPU."""
    return 1 if dev.type != "cuda" else max(1, min(20, (256 << 20) // max(size_bytes, 1)))


def _fill(torch: Any, t: Any, seed: int) -> Any:
    g = torch.Generator(device=t.device).manual_seed(seed)  # generated on the device: no host-side copies
    if t.dtype.is_floating_point:
        src = torch.randn(t.numel(), generator=g, device=t.device)
    else:
        src = torch.randint(0, 9, (t.numel(),), generator=g, device=t.device)
    return t.view(-1).copy_(src)


def _close(torch: Any, got: Any, ref: Any, world: int, exact: bool) -> tuple[bool, float]:
    """(equal within tolerance, max abs error); exact for integers and non-reducing collectives."""
    if got.numel() == 0:
        return True, 0.0
    if exact or not got.dtype.is_floating_point:
        return bool(torch.equal(got, ref)), float((got != ref).sum().item())
    diff = (got.float() - ref.float()).abs()
    tol = torch.finfo(got.dtype).eps * 8 * world * (1 + ref.float().abs())
    return bool((diff <= tol).all().item()), float(diff.max().item())


# ----------------------------------------------------------------------------- contention


def contender(kind: str, go: Any, stop: Any, started: Any, moved: Any, nbytes: int) -> None:
    """A separate process contending with the collectives once ``go`` is set, until ``stop`` is set.

    ``kind="copy"``: device-to-device copies GPU0 -> GPU1 (the GPU0<->GPU1 link) of ``nbytes`` each;
    ``kind="busy"``: a busy loop copying ``nbytes`` host buffers (the CPU dry run's stand-in). ``started``
    receives the wall time of the first copy, ``moved`` the bytes moved.
    """
    import torch

    parent = os.getppid()
    if kind == "copy":
        src = torch.empty(nbytes, dtype=torch.uint8, device="cuda:0")
        dst = torch.empty(nbytes, dtype=torch.uint8, device="cuda:1")
        dst.copy_(src)
        torch.cuda.synchronize(0)
        torch.cuda.synchronize(1)
    else:
        src = torch.empty(nbytes, dtype=torch.uint8)
        dst = torch.empty(nbytes, dtype=torch.uint8)
    while not go.wait(0.5):
        if os.getppid() != parent:  # the rank that started it is gone
            return
    started.value = time.time()
    n = 0
    while not stop.is_set() and os.getppid() == parent:
        for _ in range(8):
            dst.copy_(src, non_blocking=True)
        if kind == "copy":
            torch.cuda.synchronize(0)
        else:
            x = 0
            for i in range(20000):  # the busy part
                x += i
        n += 8
        moved.value = float(n * nbytes)


class Contention:
    """A contender process, started idle (so its start-up is outside the measurement), released by :meth:`go`."""

    def __init__(self, dev: Any, nbytes: int) -> None:
        import multiprocessing as mp

        ctx = mp.get_context("spawn")
        self.kind = "copy" if dev.type == "cuda" else "busy"
        self._go, self._stop = ctx.Event(), ctx.Event()
        self.started, self.moved = ctx.Value("d", 0.0), ctx.Value("d", 0.0)
        self.proc = ctx.Process(target=contender, args=(self.kind, self._go, self._stop, self.started, self.moved,
                                                         nbytes), daemon=True)
        self.proc.start()
        self.t_go = 0.0

    def go(self) -> float:
        """Release the contender; returns when it has started (its wall-clock start time)."""
        self.t_go = time.time()
        self._go.set()
        deadline = time.monotonic() + 120
        while self.started.value == 0.0 and time.monotonic() < deadline and self.proc.is_alive():
            time.sleep(0.001)
        return float(self.started.value)

    def stop(self) -> dict[str, Any]:
        """Stop it; returns its start/stop times and achieved copy rate."""
        t_stop = time.time()
        self._stop.set()
        self._go.set()
        self.proc.join(30)
        if self.proc.is_alive():
            self.proc.kill()
        t0 = float(self.started.value)
        dur = max(t_stop - t0, 1e-9) if t0 else 0.0
        return {"kind": self.kind, "t_start": t0, "t_stop": t_stop,
                "GBps": float(self.moved.value) / dur / 1e9 if dur else 0.0}


# ----------------------------------------------------------------------------- correctness

_DTYPES = ("float32", "float16", "bfloat16", "int32", "int64", "uint8")


def correctness(rank: int, world: int, variants: dict[str, list[Any]], cases: int, seed: int,
                max_elems: int) -> dict[str, Any]:
    """``cases`` random calls (collective, schedule variant, dtype, size, in/out of place, reduction) vs native."""
    import torch
    import torch.distributed as dist

    from runtime.executor import Executor

    dev = _device(torch)
    R = dist.ReduceOp
    exs = {}
    for name, progs in variants.items():
        exs[name] = Executor(comm=f"check-{name}", control_timeout_s=120)
        exs[name].load(progs, version=1)
    rng = random.Random(seed)  # the same sequence of cases on every rank
    colls = ("allgather", "reducescatter", "allreduce", "alltoall")
    failures, rows = [], []
    for k in range(cases):
        coll = colls[k % 4]
        name = rng.choice(sorted(exs))
        dtype = getattr(torch, rng.choice(_DTYPES))
        n = rng.randint(1, max_elems)
        inplace = rng.random() < 0.5 and coll != "alltoall"
        op_name = rng.choice(["SUM", "MAX", "MIN"] + (["AVG"] if dtype.is_floating_point and hasattr(R, "AVG") else []))
        if dtype == torch.uint8 and op_name == "SUM" and coll != "allgather":
            op_name = "MAX"  # native NCCL sums uint8 with wrap-around like us; keep the check exact and simple
        op = getattr(R, op_name)
        ex = exs[name]
        s = 1000 * k + rank
        if coll == "allgather":
            out, ref = torch.empty(world * n, dtype=dtype, device=dev), torch.empty(world * n, dtype=dtype, device=dev)
            if inplace:
                inp = _fill(torch, out[rank * n:(rank + 1) * n], s)
            else:
                inp = _fill(torch, torch.empty(n, dtype=dtype, device=dev), s)
            dist.all_gather_into_tensor(ref, inp.clone())
            ex.all_gather_into_tensor(out, inp)
            got, exact = out, True
        elif coll == "reducescatter":
            inp = _fill(torch, torch.empty(world * n, dtype=dtype, device=dev), s)
            ref = torch.empty(n, dtype=dtype, device=dev)
            dist.reduce_scatter_tensor(ref, inp.clone(), op=op)
            out = inp[rank * n:(rank + 1) * n] if inplace else torch.empty(n, dtype=dtype, device=dev)
            ex.reduce_scatter_tensor(out, inp, op=op)
            got, exact = out, op_name in ("MAX", "MIN")
        elif coll == "allreduce":
            got = _fill(torch, torch.empty(n, dtype=dtype, device=dev), s)
            ref = got.clone()
            dist.all_reduce(ref, op=op)
            ex.all_reduce(got, op=op)
            exact = op_name in ("MAX", "MIN")
        else:
            n = n * world
            inp = _fill(torch, torch.empty(n, dtype=dtype, device=dev), s)
            ref = torch.empty(n, dtype=dtype, device=dev)
            dist.all_to_all_single(ref, inp)
            got = torch.empty(n, dtype=dtype, device=dev)
            ex.all_to_all_single(got, inp)
            exact = True
        _sync(torch, dev)
        ok, err = _close(torch, got, ref, world, exact)
        ran = ex.history[-1][2] is not None
        row = {"case": k, "collective": coll, "schedule": name, "dtype": str(dtype).replace("torch.", ""),
               "elements": n, "inplace": inplace, "op": op_name if coll in ("reducescatter", "allreduce") else "",
               "ok": ok and ran, "max_err": err, "program_ran": ran}
        rows.append(row)
        if not row["ok"]:
            failures.append(row)
    return {"rows": rows, "failures": failures, "env": worker_env(torch) if rank == 0 else {}}


# ----------------------------------------------------------------------------- algbw


def _batched_allgather(torch: Any, out: Any, inp: Any, rank: int, world: int) -> None:
    """The data-path ceiling: one ``batch_isend_irecv`` sending this rank's block to every peer."""
    dist = torch.distributed
    n = inp.numel()
    ops = [dist.P2POp(dist.isend, inp, p) for p in range(world) if p != rank]
    ops += [dist.P2POp(dist.irecv, out[p * n:(p + 1) * n], p) for p in range(world) if p != rank]
    for w in dist.batch_isend_irecv(ops):
        w.wait()


def algbw(rank: int, world: int, programs: dict[str, Any], sizes: list[int], runs: int) -> dict[str, Any]:
    """Per size and collective: executor vs native algbw (and the batched-P2P AllGather ceiling)."""
    import torch
    import torch.distributed as dist

    from runtime.executor import Executor

    dev = _device(torch)
    ex = Executor(comm="algbw", control_timeout_s=120)
    ex.load(list(programs.values()), version=1)
    rows = []
    dtype = torch.float32
    for S in sizes:
        n = max(world, S // 4 // world * world)  # elements of the collective's buffer (S)
        b = n // world
        for coll in programs:
            if coll == "allgather":
                out = torch.empty(n, dtype=dtype, device=dev)
                inp = out[rank * b:(rank + 1) * b]  # in place, all three
                ref = torch.empty(n, dtype=dtype, device=dev)
                _fill(torch, inp, rank)
                dist.all_gather_into_tensor(ref, inp)
                _fill(torch, inp, rank)
                ex.all_gather_into_tensor(out, inp)
                _sync(torch, dev)
                ok = bool(torch.equal(out, ref))
                calls = {"executor": lambda out=out, inp=inp: ex.all_gather_into_tensor(out, inp),
                         "native": lambda out=out, inp=inp: dist.all_gather_into_tensor(out, inp),
                         "p2p_ceiling": lambda out=out, inp=inp: _batched_allgather(torch, out, inp, rank, world)}
            elif coll == "reducescatter":
                inp = _fill(torch, torch.empty(n, dtype=dtype, device=dev), rank)
                out, ref = torch.empty(b, dtype=dtype, device=dev), torch.empty(b, dtype=dtype, device=dev)
                dist.reduce_scatter_tensor(ref, inp)
                ex.reduce_scatter_tensor(out, inp)
                _sync(torch, dev)
                ok = _close(torch, out, ref, world, False)[0]
                calls = {"executor": lambda out=out, inp=inp: ex.reduce_scatter_tensor(out, inp),
                         "native": lambda out=out, inp=inp: dist.reduce_scatter_tensor(out, inp)}
            elif coll == "allreduce":
                out = _fill(torch, torch.empty(n, dtype=dtype, device=dev), rank)
                ref = out.clone()
                dist.all_reduce(ref)
                ex.all_reduce(out)
                _sync(torch, dev)
                ok = _close(torch, out, ref, world, False)[0]
                out.zero_()  # timed runs keep summing into it: zeros stay finite
                calls = {"executor": lambda out=out: ex.all_reduce(out),
                         "native": lambda out=out: dist.all_reduce(out)}
            else:
                inp = _fill(torch, torch.empty(n, dtype=dtype, device=dev), rank)
                out, ref = torch.empty(n, dtype=dtype, device=dev), torch.empty(n, dtype=dtype, device=dev)
                dist.all_to_all_single(ref, inp)
                ex.all_to_all_single(out, inp)
                _sync(torch, dev)
                ok = bool(torch.equal(out, ref))
                calls = {"executor": lambda out=out, inp=inp: ex.all_to_all_single(out, inp),
                         "native": lambda out=out, inp=inp: dist.all_to_all_single(out, inp)}
            del ref
            inner = _inner(dev, S)
            # interleave the contenders run by run, so drifting load hits all of them alike
            times: dict[str, list[float]] = {k: [] for k in calls}
            for fn in calls.values():
                _time_calls(torch, dev, fn, 1, inner, warmup=2)
            for _ in range(runs):
                for k, fn in calls.items():
                    times[k] += _time_calls(torch, dev, fn, 1, inner, warmup=0)
            row: dict[str, Any] = {"collective": coll, "size_bytes": n * 4, "correct": ok, "inner": inner}
            for k, ts in times.items():
                row[f"{k}_s"] = statistics.median(ts)
                row[f"{k}_GBps"] = n * 4 / statistics.median(ts) / 1e9
                row[f"{k}_runs_s"] = ts
            rows.append(row)
            del calls
        ex.close()  # release the executor's per-size workspaces before the next size
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    return {"rows": rows, "env": worker_env(torch) if rank == 0 else {}}


# ----------------------------------------------------------------------------- swap latency


def swap(rank: int, world: int, programs: list[Any], size_bytes: int, swaps: int) -> dict[str, Any]:
    """``swaps`` hot-swaps alternating between ``programs``: staging, agreement and first-collective delay."""
    import torch

    from runtime.executor.measure import swap_latency

    rows = swap_latency(rank, world, programs, size_bytes, "float32", swaps)
    return {"rows": rows, "env": worker_env(torch) if rank == 0 else {}}


# ----------------------------------------------------------------------------- telemetry error


def _pairs_spanning(plan: Any, rank: int) -> set[int]:
    """Peers this rank sends to in its first and its last active round: their busy interval is the whole call."""
    rounds = [r for r in plan.ranks[rank].rounds if r.sends or r.recvs]
    if not rounds:
        return set()
    first = {m.peer for m in rounds[0].sends}
    last = {m.peer for m in rounds[-1].sends}
    return first & last


def _raw_transfer(torch: Any, dev: Any, plan: Any, rank: int, chunk_bytes: int) -> Any:
    """A timer of one batch moving, per peer, the bytes the plan sends it (one message each way per pair)."""
    dist = torch.distributed
    to = dict(plan.ranks[rank].sent_chunks_by_peer)
    frm = {q: dict(plan.ranks[q].sent_chunks_by_peer).get(rank, 0) for q in range(len(plan.ranks)) if q != rank}
    sbuf = {p: torch.zeros(c * chunk_bytes, dtype=torch.uint8, device=dev) for p, c in to.items() if c}
    rbuf = {q: torch.empty(c * chunk_bytes, dtype=torch.uint8, device=dev) for q, c in frm.items() if c}

    def run() -> float:
        ops = [dist.P2POp(dist.isend, t, p) for p, t in sorted(sbuf.items())]
        ops += [dist.P2POp(dist.irecv, t, q) for q, t in sorted(rbuf.items())]
        _sync(torch, dev)
        dist.barrier()
        if dev.type == "cuda":
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            for w in dist.batch_isend_irecv(ops):
                w.wait()
            e1.record()
            e1.synchronize()
            return float(e0.elapsed_time(e1) / 1e3)
        t0 = time.perf_counter()
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        return time.perf_counter() - t0

    return run


def telemetry(rank: int, world: int, program: Any, sizes: list[int], runs: int, contend_bytes: int) -> dict[str, Any]:
    """Executor-reported pair throughput vs bytes over the externally timed call, healthy and contended.

    The program is an in-place AllGather run in place (no local copies): for a pair whose sends span the
    rank's first and last round, its ``busy_s`` should equal the call's time measured outside the executor
    (CUDA events on the current stream right around the call; host clock around the blocking call on CPU).
    Also the telemetry's overhead: interleaved calls with and without a sink.
    """
    import torch
    import torch.distributed as dist

    from runtime.executor import Executor, MemorySink, compile_program

    dev = _device(torch)
    sink = MemorySink()
    ex = Executor(comm="tel", sink=sink, control_timeout_s=120)
    ex.load(program, version=1)
    ex_off = Executor(comm="tel-off", control_timeout_s=120)
    ex_off.load(program, version=1)
    plan = compile_program(program)
    spanning = _pairs_spanning(plan, rank)
    cont = Contention(dev, contend_bytes) if rank == 0 and contend_bytes else None
    rows, contender_stats = [], None
    for phase in ("healthy", "contended") if contend_bytes else ("healthy",):
        if phase == "contended":
            if cont is not None:
                cont.go()
            dist.barrier()
            time.sleep(0.2)
        for S in sizes:
            n = max(world, S // 4 // world * world)
            b = n // world
            out = torch.zeros(n, dtype=torch.float32, device=dev)
            inp = out[rank * b:(rank + 1) * b]
            for _ in range(2):
                ex.all_gather_into_tensor(out, inp)
            ex.flush()
            sink.samples.clear()
            errs, rep_all, truth_all, raw_all = [], [], [], []
            raw = _raw_transfer(torch, dev, plan, rank, b * 4 // (plan.nchunks // world))
            for _ in range(runs):
                _sync(torch, dev)
                dist.barrier()
                if dev.type == "cuda":
                    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    e0.record()
                    ex.all_gather_into_tensor(out, inp)
                    e1.record()
                    e1.synchronize()
                    call_s = e0.elapsed_time(e1) / 1e3
                else:
                    t0 = time.perf_counter()
                    ex.all_gather_into_tensor(out, inp)
                    call_s = time.perf_counter() - t0
                ex.flush()
                for smp in sink.samples:
                    if smp.kind == "pair" and smp.seq == ex.seq and smp.dst in spanning:
                        truth = smp.bytes / call_s / 1e9
                        rep_all.append(smp.throughput_GBps)
                        truth_all.append(truth)
                        errs.append(smp.throughput_GBps / truth - 1)
                sink.samples.clear()
                raw_s = raw()
                raw_all += [dict(plan.ranks[rank].sent_chunks_by_peer)[p] * b * 4 // (plan.nchunks // world) / raw_s / 1e9
                            for p in spanning]
            # overhead: interleaved runs of the same program with and without a sink
            inner = _inner(dev, S)
            off, on = [], []
            for _ in range(runs):
                off += _time_calls(torch, dev, lambda: ex_off.all_gather_into_tensor(out, inp), 1, inner, warmup=0)
                on += _time_calls(torch, dev, lambda: ex.all_gather_into_tensor(out, inp), 1, inner, warmup=0)
            ex.flush()
            sink.samples.clear()
            rows.append({"phase": phase, "size_bytes": n * 4, "pairs": len(spanning), "samples": len(errs),
                         "reported_GBps": statistics.median(rep_all) if rep_all else None,
                         "truth_GBps": statistics.median(truth_all) if truth_all else None,
                         "raw_p2p_GBps": statistics.median(raw_all) if raw_all else None,
                         "median_abs_err_pct": 100 * statistics.median(abs(e) for e in errs) if errs else None,
                         "max_abs_err_pct": 100 * max(abs(e) for e in errs) if errs else None,
                         "median_err_pct": 100 * statistics.median(errs) if errs else None,
                         "off_s": statistics.median(off), "on_s": statistics.median(on),
                         "overhead_pct": 100 * (statistics.median(on) / statistics.median(off) - 1)})

        if phase == "contended" and cont is not None:
            contender_stats = cont.stop()
    ex.close()
    ex_off.close()
    return {"rows": rows, "contender": contender_stats, "env": worker_env(torch) if rank == 0 else {},
            "rounds": plan.nrounds}


# ----------------------------------------------------------------------------- closed loop


def _wait_file(path: Path, timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear within {timeout_s:g} s")
        time.sleep(0.02)
    return path.read_text().strip()


def closed_loop(rank: int, world: int, program: Any, work_dir: str, size_bytes: int, calib_calls: int,
                duration_s: float, inject_at_s: float, clear_at_s: float, sync_every: int,
                contend_bytes: int) -> dict[str, Any]:
    """Calibrate, then follow the daemon: AllGathers for ``duration_s`` with contention in a window.

    1. Healthy AllGathers of ``program`` with a memory sink: rank 0 writes the median ``inject`` throughput
       to ``calibration.json`` (the parent makes the daemon's topology from it and starts the daemon).
    2. Every rank connects to the daemon (``address`` file), follows it and runs in-place AllGathers of
       ``size_bytes``; rank 0 releases the contender ``inject_at_s`` after the loop starts and stops it at
       ``clear_at_s``. Each call's end time, duration and version are returned.
    """
    import torch
    import torch.distributed as dist

    from runtime import Client
    from runtime.executor import Executor, MemorySink

    dev = _device(torch)
    wd = Path(work_dir)
    n = max(world, size_bytes // 4 // world * world)
    b = n // world
    out = torch.zeros(n, dtype=torch.float32, device=dev)
    inp = out[rank * b:(rank + 1) * b]
    sink = MemorySink()
    cal = Executor(comm="calibrate", sink=sink, control_timeout_s=120)
    cal.load(program, version=1)
    for _ in range(calib_calls):
        cal.all_gather_into_tensor(out, inp)
    cal.flush()
    rates = [s.throughput_GBps for s in sink.samples[len(sink.samples) // 4:] if s.kind == "inject"]
    gathered: list[Any] = [None] * world
    dist.all_gather_object(gathered, statistics.median(rates))
    if rank == 0:
        tmp = wd / "calibration.json.tmp"
        tmp.write_text(json.dumps({"inject_GBps": statistics.median(gathered), "per_rank": gathered}))
        os.replace(tmp, wd / "calibration.json")
    cal.close()
    address = _wait_file(wd / "address", 180)
    token = (wd / "token").read_text().strip()
    client = Client(address, token=token, role="executor", rank=dist.get_rank(), comms=["world"])
    ex = Executor(comm="world", sync_every=sync_every, control_timeout_s=120)
    ex.follow(client)
    for _ in range(2400):  # every rank sees the same agreement outcome, so all leave this loop together
        ex.sync_versions()
        if ex.active.get("allgather") is not None:
            break
        time.sleep(0.05)
    else:
        raise TimeoutError("no AllGather version from the daemon within 120 s")
    ctl = dist.new_group(backend="gloo")
    cont = Contention(dev, contend_bytes) if rank == 0 else None
    calls: list[tuple[float, float, int | None]] = []
    t_loop = time.time()
    flag = torch.zeros(1, dtype=torch.int32)
    phase = 0
    t_inject = t_clear = None
    while True:
        if cont is not None:
            now = time.time() - t_loop
            if phase == 0 and now >= inject_at_s:
                t_inject = cont.go()
                phase = 1
            elif phase == 1 and now >= clear_at_s:
                stats = cont.stop()
                t_clear = stats["t_stop"]
                phase = 2
        if len(calls) % 10 == 0:
            flag[0] = int(time.time() - t_loop >= duration_s)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=ctl)
            if flag.item():
                break
        t0 = time.perf_counter()
        ex.all_gather_into_tensor(out, inp)
        _sync(torch, dev)
        calls.append((time.time(), time.perf_counter() - t0, ex.history[-1][2]))
    if cont is not None and phase != 2:  # the run ended before the window closed (or opened)
        stats = cont.stop()
        t_clear = stats["t_stop"] if phase == 1 else None
    ex.close()
    client.flush(10)
    res = {"calls": calls, "t_loop": t_loop, "t_inject": t_inject, "t_clear": t_clear, "swaps":
           [{"switch_seq": s.switch_seq, "switched": s.switched, "agreement_s": s.agreement_s} for s in ex.swaps if s.switched],
           "sent_samples": client.sent_samples, "dropped_samples": client.dropped_samples, "size_bytes": n * 4,
           "env": worker_env(torch) if rank == 0 else {}}
    client.close()
    return res

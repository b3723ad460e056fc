"""Module-level worker functions for the executor's multi-process tests (spawned processes import them)."""

from __future__ import annotations

import os
import random
import time
from typing import Any

DTYPES = ("float32", "float64", "bfloat16", "int32", "int64", "int8", "uint8")
FLOATS = ("float32", "float64", "bfloat16")


def _tensor(torch: Any, n: int, dtype: str, seed: int) -> Any:
    g = torch.Generator().manual_seed(seed)
    dt = getattr(torch, dtype)
    if dtype in FLOATS:
        return torch.randn(n, generator=g, dtype=torch.float64).to(dt)
    return torch.randint(0, 7, (n,), generator=g, dtype=torch.int64).to(dt)


def _close(torch: Any, a: Any, b: Any, dtype: str, world: int) -> bool:
    if dtype not in FLOATS:
        return torch.equal(a, b)
    tol = {"float32": 1e-5, "float64": 1e-12, "bfloat16": 2e-2}[dtype] * world
    return torch.allclose(a.double(), b.double(), rtol=tol, atol=tol * 4)


def run_case(torch: Any, dist: Any, ex: Any, coll: str, n: int, dtype: str, inplace: bool, seed: int,
             op: Any = None) -> str | None:
    """Run one collective with ``ex`` and natively; return a description of a mismatch or None."""
    rank, world = dist.get_rank(), dist.get_world_size()
    x = _tensor(torch, n * (world if coll in ("reducescatter", "alltoall") else 1), dtype, seed * 131 + rank)
    if coll == "allgather":
        ref = torch.empty(world * n, dtype=x.dtype)
        dist.all_gather_into_tensor(ref, x)
        if inplace:
            out = torch.zeros(world * n, dtype=x.dtype)
            out[rank * n:(rank + 1) * n].copy_(x)
            ex.all_gather_into_tensor(out, out[rank * n:(rank + 1) * n])
        else:
            out = torch.zeros(world * n, dtype=x.dtype)
            ex.all_gather_into_tensor(out, x)
    elif coll == "reducescatter":
        ref = torch.empty(n, dtype=x.dtype)
        dist.reduce_scatter_tensor(ref, x.clone())
        if inplace:
            buf = x.clone()
            ex.reduce_scatter_tensor(buf[rank * n:(rank + 1) * n], buf)
            out = buf[rank * n:(rank + 1) * n]
        else:
            out = torch.zeros(n, dtype=x.dtype)
            ex.reduce_scatter_tensor(out, x)
    elif coll == "allreduce":
        ref = x.clone()
        dist.all_reduce(ref)
        out = x.clone()
        ex.all_reduce(out)
    else:
        ref = torch.empty_like(x)
        dist.all_to_all_single(ref, x)
        out = torch.zeros_like(x)
        if inplace:
            out = x.clone()
            ex.all_to_all_single(out, out)
        else:
            ex.all_to_all_single(out, x)
    if not _close(torch, out, ref, dtype, world):
        bad = (out.double() - ref.double()).abs().argmax().item() if out.numel() else -1
        return f"rank {rank} {coll} n={n} {dtype} inplace={inplace}: mismatch at {bad}"
    return None


def correctness(rank: int, world: int, sources: list, cases: list) -> list[str]:
    """Load each source (one version each) and run every matching case; return failures."""
    import torch
    import torch.distributed as dist

    from runtime.executor import Executor, MemorySink

    failures: list[str] = []
    for k, (label, src) in enumerate(sources):
        sink = MemorySink()
        ex = Executor(comm="world", sink=sink, control_timeout_s=20)
        ex.load(src, version=k + 1)
        for coll, n, dtype, inplace, seed in cases:
            if ex.active.get(coll) is None:
                continue
            before = len(ex.history)
            msg = run_case(torch, dist, ex, coll, n, dtype, inplace, seed)
            if msg:
                failures.append(f"{label}: {msg}")
            if ex.history[before][2] is None and n:
                failures.append(f"{label}: {coll} n={n} ran natively")
        if any(s.kind == "pair" and (s.bytes <= 0 or s.busy_s <= 0) for s in sink.samples):
            failures.append(f"{label}: bad samples")
    return failures


def _programs(specs: list) -> dict:
    """Programs by name from (name, kind, arg) specs: ("synth", (coll, topo)) or ("xml", path)."""
    from msccl_xml import lower, read
    from synth import named_topology, synthesize

    out = {}
    for name, kind, arg in specs:
        if kind == "synth":
            out[name] = lower(synthesize(arg[0], named_topology(arg[1])).schedule)
        else:
            out[name] = read(arg)
    return out


def swaps(rank: int, world: int, seed: int, scenarios: int, version_specs: list, skip_prob: float) -> list:
    """Randomised hot-swap interleavings; returns per scenario the (seq, coll, version) history and failures."""
    import threading

    import torch
    import torch.distributed as dist

    from runtime.executor import Executor

    progs = _programs(version_specs)
    names = sorted(progs)
    out = []
    for sc in range(scenarios):
        shared = random.Random(seed * 1000 + sc)  # same on every rank
        mine = random.Random(seed * 1000 + sc + 7919 * (rank + 1))  # differs per rank
        ex = Executor(comm=f"swap{sc}", sync_every=shared.randint(1, 4), control_timeout_s=20)
        ex.load([progs["ag_ring"], progs["ar_ring"]], version=1)
        nversions = shared.randint(2, 5)
        skipped = set()
        threads = []
        for v in range(2, nversions + 1):
            pick = shared.sample(names, k=min(2, len(names)))
            if mine.random() < skip_prob:
                skipped.add(v)
                continue
            delay = mine.uniform(0, 0.05)

            def later(v=v, pick=pick, delay=delay):
                time.sleep(delay)
                ex.stage([progs[n] for n in pick], version=v)

            th = threading.Thread(target=later)
            th.start()
            threads.append(th)
        failures = []
        for k in range(shared.randint(10, 30)):
            coll = shared.choice(["allgather", "allreduce", "reducescatter", "alltoall"])
            n = shared.randint(1, 300)
            dtype = shared.choice(["float32", "int64"])
            msg = run_case(torch, dist, ex, coll, n, dtype, False, seed * 100000 + sc * 100 + k)
            if msg:
                failures.append(msg)
        for th in threads:
            th.join()
        time.sleep(0.1)  # let background staging finish so the final agreement can see it
        ex.sync_versions()
        out.append({"history": list(ex.history), "active": dict(ex.active), "skipped": sorted(skipped),
                    "failures": failures, "nversions": nversions})
    return out


def killed(rank: int, world: int, victim: int, mode: str, timeout_s: float) -> Any:
    """The victim dies (or hangs) before an agreement; the others report the error they get."""
    from msccl_xml import lower
    from synth import named_topology, synthesize

    from runtime.executor import Executor, SwapTimeoutError

    ex = Executor(comm="dp0", control_timeout_s=timeout_s)
    ex.load(lower(synthesize("allreduce", named_topology(f"ring:{world}")).schedule), version=1)
    if rank == victim:
        if mode == "kill":
            os._exit(3)
        time.sleep(timeout_s * 1.5)
        os._exit(3)
    t0 = time.perf_counter()
    try:
        ex.sync_versions()
    except SwapTimeoutError as exc:
        return {"error": str(exc), "ranks": list(exc.ranks), "elapsed_s": time.perf_counter() - t0}
    return {"error": None}


def misc(rank: int, world: int, jsonl_dir: str) -> dict:
    """Fallbacks, seq numbering, refused versions and telemetry samples."""
    import dataclasses

    import torch
    import torch.distributed as dist
    from msccl_xml import lower
    from synth import named_topology, synthesize

    from runtime.executor import Executor, JsonlSink, MemorySink, StagingError

    res: dict = {"failures": []}
    mem = MemorySink()
    jsonl = JsonlSink(os.path.join(jsonl_dir, f"r{rank}.jsonl"))

    def both(samples):
        mem(samples)
        jsonl(samples)

    ex = Executor(comm="dp0", sink=both, control_timeout_s=20)
    # nothing loaded: native, seq counts
    res["failures"] += [m for m in [run_case(torch, dist, ex, "allreduce", 10, "int64", False, 1)] if m]
    ag = lower(synthesize("allgather", named_topology(f"ring:{world}")).schedule)
    ar = lower(synthesize("allreduce", named_topology(f"ring:{world}")).schedule)
    ex.load([ag, ar], version=1)
    for k in range(3):
        res["failures"] += [m for m in [run_case(torch, dist, ex, "allgather", 37 + k, "float32", False, k)] if m]
    # refused: a program whose rank 0 lost a threadblock fails validation
    g0 = ar.gpus[0]
    broken = dataclasses.replace(ar, gpus=(dataclasses.replace(g0, threadblocks=g0.threadblocks[:-1]),)
                                 + ar.gpus[1:])
    fut = ex.stage(broken, version=2)
    try:
        fut.result(timeout=30)
        res["failures"].append("broken version was accepted")
    except StagingError as exc:
        res["refused"] = str(exc)
    rep = ex.sync_versions()
    res["switched_after_refusal"] = rep.switched
    res["failures"] += [m for m in [run_case(torch, dist, ex, "allreduce", 64, "int32", False, 9)] if m]
    # a sub-communicator of ranks 1 and 3: global ranks in samples, native reference on the subgroup
    from datetime import timedelta

    sub = dist.new_group([1, 3])
    ctrl = dist.new_group([1, 3], backend="gloo", timeout=timedelta(seconds=20))  # every process makes both
    if rank in (1, 3):
        sub_sink = MemorySink()
        sx = Executor(sub, comm="rail", sink=sub_sink, control_timeout_s=20, control_group=ctrl)
        sx.load(lower(synthesize("allgather", named_topology("ring:2")).schedule), version=1)
        x = torch.arange(5, dtype=torch.int64) + 100 * rank
        got, want = torch.zeros(10, dtype=torch.int64), torch.zeros(10, dtype=torch.int64)
        sx.all_gather_into_tensor(got, x)
        dist.all_gather_into_tensor(want, x, group=sub)
        if not torch.equal(got, want):
            res["failures"].append(f"rank {rank}: subgroup allgather differs")
        res["sub_samples"] = [s.to_dict() for s in sub_sink.samples]
    # split sizes fall back
    x = torch.arange(world * 2, dtype=torch.float32)
    y = torch.empty_like(x)
    ex.all_to_all_single(y, x, [2] * world, [2] * world)
    ex.flush()
    jsonl.close()
    res["history"] = list(ex.history)
    res["samples"] = [s.to_dict() for s in mem.samples]
    res["sent_chunks"] = {"allgather": dict(ex._active_plans["allgather"][0].ranks[rank].sent_chunks_by_peer)}
    res["global_rank"] = dist.get_rank()
    return res


def _noop(rank: int, world: int) -> int:
    return rank


def suite(rank: int, world: int, tasks: list) -> dict:
    """Run several workers in one set of processes (process start-up dominates CI time): name -> result."""
    return {name: globals()[fn](rank, world, *args) for name, fn, args in tasks}


def daemon(rank: int, world: int, address: str, token: str) -> dict:
    """Versions from a real loopcoll daemon (its controller bootstrapped them), samples back to it."""
    import torch
    import torch.distributed as dist

    from runtime import Client
    from runtime.executor import Executor
    from runtime.executor.sinks import AggregatingSink

    client = Client(address, token=token, role="executor", rank=dist.get_rank(), comms=["world"])
    ex = Executor(comm="world", control_timeout_s=60)
    ex.follow(client)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not all(ex._staged.get(c) for c in ("allgather", "allreduce")):
        time.sleep(0.02)
    rep = ex.sync_versions()
    failures = []
    for k in range(6):
        coll = ("allgather", "allreduce")[k % 2]
        msg = run_case(torch, dist, ex, coll, 100 + 37 * k, ("float32", "int64")[k % 2], k % 3 == 0, k)
        if msg:
            failures.append(msg)
    ex.flush()
    agg = AggregatingSink(client.send_samples, window=4)  # then source-aggregated (docs/telemetry.md §5)
    ex.sink = agg
    for k in range(6):  # a window closes at seq 12 (seqs 9..11 are not a full cell of 4), the rest at flush
        msg = run_case(torch, dist, ex, "allgather", 256, "float32", False, 100 + k)
        if msg:
            failures.append(msg)
    ex.flush()
    client.flush(10)
    out = {"switched": rep.switched, "active": dict(ex.active), "failures": failures, "refused": dict(ex.refused),
           "sent_samples": client.sent_samples, "versions": sorted({v for _s, _c, v in ex.history}, key=str),
           "agg_records": agg.aggregator.emitted, "agg_folded": agg.aggregator.folded}
    client.close()
    return out


def frozen(rank: int, world: int, victim: int, mode: str, timeout_s: float, before: int) -> Any:
    """Every rank runs ``before`` allgathers of a loaded ForestColl schedule, then the victim stops (sleeps
    three timeouts, then exits, or dies) instead of joining the next one; the others report the error they get.
    The collectives' bound is the executor's default, ``control_timeout_s``."""
    import torch
    from msccl_xml import lower
    from synth import named_topology, synthesize

    from runtime.executor import CollectiveTimeoutError, Executor

    ex = Executor(comm="dp0", control_timeout_s=timeout_s)
    ex.load(lower(synthesize("allgather", named_topology(f"ring:{world}")).schedule), version=1)
    out = torch.zeros(world * 64)
    for _ in range(before):
        ex.all_gather_into_tensor(out, torch.full((64,), float(rank)))
    if rank == victim:
        if mode == "hang":
            time.sleep(timeout_s * 3)
        os._exit(3)
    t0 = time.perf_counter()
    try:
        ex.all_gather_into_tensor(out, torch.full((64,), float(rank)))
    except CollectiveTimeoutError as exc:
        return {"error": str(exc), "ranks": list(exc.ranks), "elapsed_s": time.perf_counter() - t0,
                "where": (exc.comm, exc.collective, exc.seq, exc.version)}
    return {"error": None}

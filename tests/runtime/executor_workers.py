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

"""Per-process measurement bodies shared by ``loopcoll run-check`` and ``benchmarks/executor.py``.

Each function runs inside one launched process (see :mod:`runtime.executor.launch`) and returns plain data.
Times are medians over ``iters`` runs, each bracketed by barriers; algbw = S / time with S the collective's
size as nccl-tests defines it (AllGather output, ReduceScatter input, AllReduce buffer, AllToAll send buffer).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from msccl_xml import Program
from synth import Collective

from .executor import Executor
from .plan import canonical_collective
from .sinks import MemorySink

__all__ = ["compare", "swap_latency"]


def _device(torch: Any) -> Any:
    dist = torch.distributed
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _sync(torch: Any, device: Any) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    torch.distributed.barrier()


def _buffers(torch: Any, coll: str, size_bytes: int, dtype: Any, world: int, rank: int, device: Any) -> tuple:
    es = torch.empty((), dtype=dtype).element_size()
    total = max(world, size_bytes // es // world * world)
    g = torch.Generator().manual_seed(1234 + rank)
    if dtype.is_floating_point:
        def make(n: int) -> Any:
            return torch.randn(n, generator=g, dtype=torch.float32).to(dtype).to(device)
    else:
        def make(n: int) -> Any:
            return torch.randint(0, 9, (n,), generator=g).to(dtype).to(device)
    kind = Collective(coll)  # the element counts scale as the bytes: a message of ``total`` elements
    return make(kind.in_bytes(total, world)), torch.empty(kind.out_bytes(total, world), dtype=dtype, device=device)


def _call(ex: Any, dist: Any, coll: str, inp: Any, out: Any, native: bool) -> None:
    if coll == "allgather":
        (dist.all_gather_into_tensor if native else ex.all_gather_into_tensor)(out, inp)
    elif coll == "reducescatter":
        (dist.reduce_scatter_tensor if native else ex.reduce_scatter_tensor)(out, inp)
    elif coll == "allreduce":
        out.copy_(inp)
        (dist.all_reduce if native else ex.all_reduce)(out)
    else:
        (dist.all_to_all_single if native else ex.all_to_all_single)(out, inp)


def _time(torch: Any, device: Any, fn: Any, iters: int, warmup: int = 1) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        _sync(torch, device)
        t0 = time.perf_counter()
        fn()
        _sync(torch, device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def compare(rank: int, world: int, program: Program, sizes_bytes: list[int], dtype_name: str, iters: int,
            telemetry: bool = False) -> list[dict]:
    """Run ``program`` and the native collective at each size: correctness and median times (+ telemetry cost)."""
    import torch
    import torch.distributed as dist

    device = _device(torch)
    dtype = getattr(torch, dtype_name)
    coll = canonical_collective(program.coll)
    ex = Executor(comm="check", control_timeout_s=60)
    ex.load(program, version=1)
    ex_tel = Executor(comm="check-telemetry", sink=MemorySink(), control_timeout_s=60) if telemetry else None
    if ex_tel is not None:
        ex_tel.load(program, version=1)
    rows = []
    for size in sizes_bytes:
        inp, out = _buffers(torch, coll, size, dtype, world, rank, device)
        ref = torch.empty_like(out)
        _call(ex, dist, coll, inp, ref, native=True)
        _call(ex, dist, coll, inp, out, native=False)
        if dtype.is_floating_point:  # in the tensors' own dtype: no float64 copies of 256 MB buffers
            diff = ref.sub_(out).abs_()
            err = diff.max().item() if out.numel() else 0.0
            ok = bool((diff <= 1e-3 * world * (1 + out.abs())).all().item())
        else:
            err = float((out != ref).sum().item())
            ok = bool(torch.equal(out, ref))
        del ref
        S = out.numel() * out.element_size() if coll == "allgather" else inp.numel() * inp.element_size()
        t_ex = _time(torch, device, lambda: _call(ex, dist, coll, inp, out, False), iters)
        t_nat = _time(torch, device, lambda: _call(ex, dist, coll, inp, out, True), iters)
        row = {"collective": coll, "size_bytes": S, "correct": ok, "max_err": err, "time_s": t_ex,
               "native_time_s": t_nat, "algbw_GBps": S / t_ex / 1e9, "native_algbw_GBps": S / t_nat / 1e9,
               "rounds": ex._active_plans[coll][0].nrounds}
        if ex_tel is not None:  # paired, interleaved runs: the ratio of medians is robust to drifting load
            off, on = [], []
            for _ in range(max(iters, 5)):
                off.append(_time(torch, device, lambda: _call(ex, dist, coll, inp, out, False), 1, warmup=0))
                on.append(_time(torch, device, lambda: _call(ex_tel, dist, coll, inp, out, False), 1, warmup=0))
            calls0, cpu0 = ex_tel.seq, ex_tel.telemetry_s
            _time(torch, device, lambda: _call(ex_tel, dist, coll, inp, out, False), 3, warmup=0)
            row["telemetry_off_s"] = statistics.median(off)
            row["telemetry_time_s"] = statistics.median(on)
            row["telemetry_cpu_us"] = (ex_tel.telemetry_s - cpu0) / max(ex_tel.seq - calls0, 1) * 1e6
        rows.append(row)
    return rows


def swap_latency(rank: int, world: int, programs: list[Program], size_bytes: int, dtype_name: str,
                 swaps: int) -> list[dict]:
    """Stage and switch ``swaps`` times between ``programs``: staging, agreement and first-collective delay."""
    import torch
    import torch.distributed as dist

    device = _device(torch)
    dtype = getattr(torch, dtype_name)
    coll = canonical_collective(programs[0].coll)
    ex = Executor(comm="swap", control_timeout_s=60)
    ex.load(programs[0], version=1)
    inp, out = _buffers(torch, coll, size_bytes, dtype, world, rank, device)
    steady = _time(torch, device, lambda: _call(ex, dist, coll, inp, out, False), 3)
    rows = []
    for k in range(swaps):
        v = k + 2
        prog = programs[(k + 1) % len(programs)]
        t0 = time.perf_counter()
        ex.stage(prog, version=v).result()
        staging = time.perf_counter() - t0
        _sync(torch, device)
        rep = ex.sync_versions()
        _sync(torch, device)
        t1 = time.perf_counter()
        _call(ex, dist, coll, inp, out, False)
        _sync(torch, device)
        first = time.perf_counter() - t1
        again = _time(torch, device, lambda: _call(ex, dist, coll, inp, out, False), 3, warmup=0)
        split = ex.staging_split.get(v, {})
        rows.append({"staging_s": staging, "check_s": split.get("check_s", 0.0),
                     "compile_s": split.get("compile_s", 0.0), "agreement_s": rep.agreement_s, "first_collective_s": first,
                     "steady_s": again, "first_delay_s": max(first - again, 0.0), "switched": bool(rep.switched),
                     "steady_before_s": steady})
    return rows


def bench(rank: int, world: int, programs: list[Program], sizes_bytes: list[int], dtype_name: str, iters: int,
          swap_programs: list[Program], swap_size_bytes: int, swaps: int) -> dict:
    """Everything ``benchmarks/executor.py`` measures in one set of processes."""
    rows = []
    for prog in programs:
        rows += compare(rank, world, prog, sizes_bytes, dtype_name, iters, telemetry=True)
    swap_rows = swap_latency(rank, world, swap_programs, swap_size_bytes, dtype_name, swaps) if swaps else []
    return {"rows": rows, "swaps": swap_rows}

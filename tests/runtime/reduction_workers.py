"""Per-process bodies of tests/runtime/test_reduction_executor.py (run by runtime.executor.launch)."""

from __future__ import annotations

import time
from typing import Any

SLOW_REDUCE_S = 0.15  # each local reduction of the deliberately slow path sleeps this long first
ELEMENTS = 1152  # float32 elements of each collective's input (divisible by every chunk count used)
HIDDEN = 4096  # the live DDP model: 32 x HIDDEN x 4 (~150 K parameters, one ~600 KB gradient bucket)


def slow_reductions(rank: int, world: int, programs: dict[str, Any], slow: bool) -> dict[str, Any]:
    """Run each collective of ``programs`` once (after a barrier) with a sink; with ``slow``, every local
    reduction first sleeps ``SLOW_REDUCE_S`` (the executor's real reducer, wrapped). Returns each
    collective's wall time, its samples and whether it matched the native collective."""
    import torch
    import torch.distributed as dist

    import runtime.executor.executor as exmod
    from runtime.executor import Executor, MemorySink

    real = exmod.reducer
    if slow:
        def slow_reducer(torch_: Any, op: Any, dtype: Any) -> Any:
            fold = real(torch_, op, dtype)

            def apply(out: Any, a: Any, b: Any) -> None:
                time.sleep(SLOW_REDUCE_S)
                fold(out, a, b)
            return apply
        exmod.reducer = slow_reducer
    try:
        out: dict[str, Any] = {}
        for coll in ("allreduce", "reducescatter"):
            prog = programs[coll]
            sink = MemorySink()
            ex = Executor(comm="world", sink=sink, control_timeout_s=30)
            ex.load(prog, version=1)
            g = torch.Generator().manual_seed(rank)
            n = ELEMENTS
            x = torch.randn(n, generator=g)
            ref = x.clone()
            dist.barrier()
            t0 = time.perf_counter()
            if coll == "allreduce":
                y = x.clone()
                ex.all_reduce(y)
                dist.all_reduce(ref)
            else:
                y = torch.empty(n // world)
                ex.reduce_scatter_tensor(y, x)
                ref_out = torch.empty(n // world)
                dist.reduce_scatter_tensor(ref_out, ref)
                ref = ref_out
            wall = time.perf_counter() - t0
            ex.flush()
            out[coll] = {"wall_s": wall, "correct": bool(torch.allclose(y, ref, atol=1e-5)),
                         "samples": [s.to_dict() for s in sink.samples]}
            ex.close()
        return out
    finally:
        exmod.reducer = real


def _train(torch: Any, model: Any, rank: int, steps: int, outputs: int) -> tuple[list[float], list[list[Any]]]:
    """``steps`` SGD steps of ``model`` (16 inputs, ``outputs`` outputs) on this rank's seeded data: each step's
    loss and gradients."""
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(100 + rank)
    losses, grads = [], []
    for _ in range(steps):
        x = torch.randn(8, 16, generator=g)
        loss = ((model(x) - x[:, :outputs]) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        grads.append([p.grad.detach().clone() for p in model.parameters()])
        opt.step()
        losses.append(loss.item())
    return losses, grads


def ddp_training(rank: int, world: int, program: Any, steps: int) -> dict[str, Any]:
    """Train one small model twice from the same seed, once with DDP's default AllReduce and once with
    ``ddp_comm_hook`` through an executor; returns every step's gradients of both and the executor's samples."""
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    from runtime.executor import Executor, MemorySink, ddp_comm_hook

    def run(hooked: bool) -> tuple[list[list[Any]], list[dict[str, Any]], list[Any]]:
        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 3))
        model = DDP(net, bucket_cap_mb=0.001)  # several buckets per step (~1 KB each)
        sink = MemorySink()
        ex = None
        if hooked:
            ex = Executor(comm="world", sink=sink, control_timeout_s=30)
            ex.load(program, version=1)
            model.register_comm_hook(None, ddp_comm_hook(ex))
        grads = _train(torch, model, rank, steps, 3)[1]
        history = [] if ex is None else list(ex.history)
        if ex is not None:
            ex.close()
        return grads, [s.to_dict() for s in sink.samples], history

    ref, _, _ = run(False)
    got, samples, history = run(True)
    close = all(torch.allclose(a, b, atol=1e-6, rtol=1e-5) for ga, gb in zip(ref, got) for a, b in zip(ga, gb))
    return {"close": close, "steps": len(got), "samples": samples, "history": history}


def fsdp_training(rank: int, world: int, programs: dict[str, Any], steps: int) -> dict[str, Any]:
    """Train one small FSDP2 model twice from the same seed, natively and with ``fsdp_comms`` through an
    executor; returns whether the losses and the final (unsharded) parameters agree, and the executor's samples."""
    import torch
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from runtime.executor import Executor, MemorySink, fsdp_comms

    mesh = init_device_mesh("cpu", (world,))

    def run(hooked: bool) -> tuple[list[float], list[Any], list[dict[str, Any]], list[Any]]:
        torch.manual_seed(0)
        model = fully_shard(torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4)),
                            mesh=mesh)
        sink = MemorySink()
        ex = None
        if hooked:
            ex = Executor(comm="world", sink=sink, control_timeout_s=30)
            ex.load([programs["allgather"], programs["reducescatter"]], version=1)
            ag, rs = fsdp_comms(ex)
            model.set_custom_all_gather(ag)
            model.set_custom_reduce_scatter(rs)
        losses = _train(torch, model, rank, steps, 4)[0]
        full = [p.full_tensor().detach().clone() for p in model.parameters()]
        history = [] if ex is None else list(ex.history)
        if ex is not None:
            ex.close()
        return losses, full, [s.to_dict() for s in sink.samples], history

    l0, p0, _, _ = run(False)
    l1, p1, samples, history = run(True)
    close = all(torch.allclose(a, b, atol=1e-6, rtol=1e-5) for a, b in zip(p0, p1))
    return {"close": close and all(abs(a - b) <= 1e-6 * max(1.0, abs(a)) for a, b in zip(l0, l1)),
            "samples": samples, "history": history}


def both(rank: int, world: int, programs: dict[str, Any], steps: int) -> dict[str, Any]:
    """:func:`slow_reductions`, :func:`ddp_training` (on the AllReduce program) and :func:`fsdp_training` in one
    set of processes."""
    return {"slow": slow_reductions(rank, world, programs, True),
            "ddp": ddp_training(rank, world, programs["allreduce"], steps),
            "fsdp": fsdp_training(rank, world, programs, steps)}


def ddp_live(rank: int, world: int, address: str, token: str, emulation: dict[str, Any], hosts: list[int],
             steps: int) -> dict[str, Any]:
    """A DDP-only job on the live loop: an executor following the daemon under the fault emulation, a small
    model whose gradient buckets go through ``ddp_comm_hook``. Returns the versions each AllReduce ran, the
    swaps, the per-step wall times and a digest of the final parameters (equal on every rank)."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from runtime.executor import Executor, ddp_comm_hook
    from runtime.executor.throttle import emulation_from_dict
    from runtime.service.client import Client

    torch.set_num_threads(1)
    client = Client(address, token=token, role="executor", rank=rank, comms=["world"])
    ex = Executor(comm="world", sync_every=10, control_timeout_s=60, hosts=hosts,
                  emulation=emulation_from_dict(emulation))
    ex.follow(client)
    deadline = time.monotonic() + 120
    while not ex._staged.get("allreduce"):  # version 1, fetched and compiled
        if time.monotonic() > deadline:
            raise RuntimeError(f"rank {rank}: allreduce version 1 not received within 120 s")
        time.sleep(0.01)
    ex.sync_versions()
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(32, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, 4)))
    model.register_comm_hook(None, ddp_comm_hook(ex))  # the one line a DDP job adds
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(rank)
    step_s = []
    for _ in range(steps):
        x = torch.randn(16, 32, generator=g)
        t0 = time.perf_counter()
        loss = ((model(x) - x[:, :4]) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        step_s.append(time.perf_counter() - t0)
    ex.flush()
    client.flush(10)
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    every = [torch.empty_like(flat) for _ in range(world)]
    dist.all_gather(every, flat)
    same = all(torch.allclose(every[0], f) for f in every)
    res = {"history": list(ex.history), "swaps": [{c: list(v) for c, v in r.switched.items()} for r in ex.swaps
                                                  if r.switched], "step_s": step_s, "same_params": same,
           "sent_samples": client.sent_samples}
    ex.close()
    client.close()
    return res

"""Launch N local processes with a fresh gloo (or NCCL) process group each; collect what they return.

Used by the tests, ``loopcoll run-check`` and ``benchmarks/executor.py``. ``fn(rank, world, *args)`` must be
a module-level function; its return value is pickled back. Every process is ended when the call returns.
"""

from __future__ import annotations

import os
import pickle
import socket
import tempfile
import time
import traceback
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from .errors import ExecutorError

__all__ = ["free_port", "launch"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _worker(rank: int, world: int, init: str, backend: str, timeout_s: float, out_dir: str,
            fn: Callable[..., Any], args: tuple) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    kw: dict[str, Any] = {}
    if backend == "nccl":
        torch.cuda.set_device(rank % torch.cuda.device_count())
        kw["device_id"] = torch.device("cuda", rank % torch.cuda.device_count())
    dist.init_process_group(backend, init_method=init, rank=rank, world_size=world,
                            timeout=timedelta(seconds=timeout_s), **kw)
    result: Any
    try:
        result = ("ok", fn(rank, world, *args))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        result = ("err", f"rank {rank}: {type(exc).__name__}: {exc}\n{traceback.format_exc()}", exc)
    path = Path(out_dir) / f"{rank}.pkl"
    try:
        data = pickle.dumps(result)
    except Exception:  # noqa: BLE001
        data = pickle.dumps(result[:2])
    path.with_suffix(".tmp").write_bytes(data)
    os.replace(path.with_suffix(".tmp"), path)
    try:
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001
        pass
    os._exit(0)  # skip slow interpreter teardown of gloo threads


def launch(fn: Callable[..., Any], world: int, *args: Any, backend: str = "gloo", timeout_s: float = 120.0,
           pg_timeout_s: float = 120.0, allow_missing: bool = False) -> list[Any]:
    """Run ``fn(rank, world, *args)`` in ``world`` fresh processes; return the per-rank results.

    ``pg_timeout_s`` bounds the rendezvous and every collective of the default process group: 8 spawned
    processes each import torch before they meet, which takes tens of seconds on a busy 2-core machine.

    Raises
    ------
    ExecutorError
        If a process raises (its traceback in the message), dies without a result (unless
        ``allow_missing``: its result is then None), or all do not finish in ``timeout_s``.
    """
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory(prefix="loopcoll-launch-") as tmp:
        init = f"tcp://127.0.0.1:{free_port()}"
        ctx = mp.start_processes(_worker, args=(world, init, backend, pg_timeout_s, tmp, fn, args), nprocs=world,
                                 join=False, start_method="spawn")
        deadline = time.monotonic() + timeout_s
        try:
            while time.monotonic() < deadline:
                if all(not p.is_alive() or (Path(tmp) / f"{r}.pkl").exists() for r, p in enumerate(ctx.processes)):
                    break
                time.sleep(0.02)
            else:
                raise ExecutorError(f"launch: {world} processes did not finish within {timeout_s:g} s")
        finally:
            for p in ctx.processes:  # a moment to leave cleanly, then ended
                p.join(max(0.0, min(2.0, deadline - time.monotonic())))
            for p in ctx.processes:
                if p.is_alive():
                    p.kill()
            for p in ctx.processes:
                p.join(5)
        results: list[Any] = []
        for r in range(world):
            f = Path(tmp) / f"{r}.pkl"
            if not f.exists():
                if allow_missing:
                    results.append(None)
                    continue
                raise ExecutorError(f"launch: rank {r} exited without a result")
            res = pickle.loads(f.read_bytes())
            if res[0] == "err" and not allow_missing:
                raise ExecutorError(res[1])
            results.append(res[1] if res[0] == "ok" else res)
        return results

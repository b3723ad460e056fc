"""A DDP communication hook that runs each gradient bucket's AllReduce through an :class:`Executor`.

One line in a DDP job: ``model.register_comm_hook(None, ddp_comm_hook(executor))``. Every bucket's
flat gradient buffer (``GradBucket.buffer()``) is divided by the world size and summed in place by
``executor.all_reduce`` (so it runs the AllReduce version the executor has, and follows the daemon's
versions when the executor follows a client); the hook returns a completed ``torch.futures.Future`` of
that buffer, as DDP expects. The semantics are those of DDP's default hook (``allreduce_hook``: an
average over the ranks). Sizes no loaded program covers fall back to native ``torch.distributed``
inside the executor, as for every call. ``docs/executor.md`` ("DDP and FSDP2") gives the details.

Examples
--------
>>> from types import SimpleNamespace
>>> hook = ddp_comm_hook(SimpleNamespace(size=2, all_reduce=lambda t, op=None: None))
>>> callable(hook)
True
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["ddp_comm_hook"]


def ddp_comm_hook(executor: Any) -> Callable[[Any, Any], Any]:
    """A DDP comm hook (``hook(state, bucket) -> Future[Tensor]``) averaging each bucket through ``executor``.

    ``executor`` is an :class:`~runtime.executor.Executor` over the DDP model's process group (its
    ``size`` is the world size the gradients are averaged over). ``state`` is ignored: register the hook
    with ``model.register_comm_hook(None, ddp_comm_hook(executor))``.
    """

    import torch
    import torch.distributed as dist

    def hook(state: Any, bucket: Any) -> Any:
        del state
        grads = bucket.buffer()
        grads.div_(executor.size)  # like DDP's allreduce_hook: divide first, then sum
        executor.all_reduce(grads, op=dist.ReduceOp.SUM)
        fut: Any = torch.futures.Future()
        fut.set_result(grads)
        return fut

    # DDP checks the annotations it sees: these are the ones it asks for
    hook.__annotations__ = {"state": object, "bucket": dist.GradBucket, "return": torch.futures.Future[torch.Tensor]}
    return hook

"""FSDP2 communication hooks: FSDP's AllGather and ReduceScatter through an :class:`Executor`.

torch's FSDP2 (``torch.distributed.fsdp.fully_shard``) takes a custom AllGather and ReduceScatter per
module (``FSDPModule.set_custom_all_gather`` / ``set_custom_reduce_scatter``): objects with
``allocate(size, dtype=, device=)`` and a call on ``(output, input, group[, op], async_op)``. The two
classes here run those calls through ``executor.all_gather_into_tensor`` / ``reduce_scatter_tensor``
(so they follow the daemon's versions and emit telemetry); the call is synchronous and returns None (FSDP
waits only on a returned ``Work``). ``docs/executor.md`` ("DDP and FSDP2") gives the details.

Examples
--------
>>> from types import SimpleNamespace
>>> ag, rs = fsdp_comms(SimpleNamespace(size=2, comm="world"))
>>> type(ag).__name__, type(rs).__name__
('ExecutorAllGather', 'ExecutorReduceScatter')
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .errors import ExecutorError

__all__ = ["ExecutorAllGather", "ExecutorReduceScatter", "fsdp_comms"]


class _Comm:
    """What both hooks share: the executor, plain allocation, and the check that FSDP's group is its group."""

    def __init__(self, executor: Any) -> None:
        self.executor = executor

    def allocate(self, size: Sequence[int], *, dtype: Any, device: Any) -> Any:
        """A plain buffer for FSDP's communication (torch's caching allocator)."""
        import torch

        return torch.empty(size, dtype=dtype, device=device)

    def _check_group(self, group: Any) -> None:
        import torch.distributed as dist

        n = dist.get_world_size(group)
        if n != self.executor.size:
            raise ExecutorError(f"comm {self.executor.comm!r}: FSDP's process group has {n} ranks, the executor "
                                f"{self.executor.size}: give the executor FSDP's group")


class ExecutorAllGather(_Comm):
    """FSDP2's all-gather through ``executor.all_gather_into_tensor``."""

    def __call__(self, output_tensor: Any, input_tensor: Any, group: Any, async_op: bool = False) -> None:
        self._check_group(group)
        self.executor.all_gather_into_tensor(output_tensor, input_tensor)


class ExecutorReduceScatter(_Comm):
    """FSDP2's reduce-scatter through ``executor.reduce_scatter_tensor`` (ops the executor cannot run,
    such as a pre-multiplied sum, go to native ``torch.distributed`` inside it)."""

    def __call__(self, output_tensor: Any, input_tensor: Any, group: Any, op: Any, async_op: bool = False) -> None:
        self._check_group(group)
        self.executor.reduce_scatter_tensor(output_tensor, input_tensor, op=op)


def fsdp_comms(executor: Any) -> tuple[ExecutorAllGather, ExecutorReduceScatter]:
    """The AllGather and ReduceScatter hooks of one FSDP2 module, both through ``executor``:
    ``ag, rs = fsdp_comms(ex); model.set_custom_all_gather(ag); model.set_custom_reduce_scatter(rs)``."""
    return ExecutorAllGather(executor), ExecutorReduceScatter(executor)

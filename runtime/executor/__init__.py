"""Executor: runs MSCCL programs on torch.distributed point-to-point ops, with passive telemetry and hot-swap.

torch is imported lazily (when an :class:`Executor` is made); the plan compiler is pure Python. Owns the plan
compiler and interpreter, staging (``sources``: what becomes a program, ``staging``: checked and compiled),
the hot-swap agreement (``agreement``), telemetry samples and sinks (``telemetry``, ``sinks``), fault injection
(``throttle``), launch helpers, the AllToAllv runner (``alltoallv``) and the DDP and FSDP2 comm hooks (``ddp``, ``fsdp``); ``executor`` is
the public class.
Of the runtime it may import :mod:`runtime.formats` (telemetry samples, the store's version entries) and
:mod:`runtime.errors`; it talks to the daemon only through the client object it is given.

>>> from runtime.executor import compile_program, COLLECTIVES
>>> COLLECTIVES
('allgather', 'reducescatter', 'allreduce', 'alltoall')
"""

from __future__ import annotations

from .errors import CollectiveTimeoutError, ExecutorError, StagingError, SwapTimeoutError
from .agreement import StagedVersion, SwapReport
from .ddp import ddp_comm_hook
from .fsdp import ExecutorAllGather, ExecutorReduceScatter, fsdp_comms
from .executor import Executor
from .plan import COLLECTIVES, Plan, compile_program
from .sinks import JsonlSink, MemorySink, client_sink
from .sources import load_programs
from .throttle import Emulation, Fault, Throttle, emulation_from_dict, emulation_from_env

__all__ = [
    "COLLECTIVES",
    "CollectiveTimeoutError",
    "Emulation",
    "Fault",
    "Throttle",
    "emulation_from_dict",
    "emulation_from_env",
    "Executor",
    "ExecutorAllGather",
    "ExecutorError",
    "ExecutorReduceScatter",
    "JsonlSink",
    "MemorySink",
    "Plan",
    "StagedVersion",
    "StagingError",
    "SwapReport",
    "SwapTimeoutError",
    "client_sink",
    "compile_program",
    "ddp_comm_hook",
    "fsdp_comms",
    "load_programs",
]


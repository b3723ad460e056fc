"""The MSCCL++ executor's limits and vocabulary, at the commit this package targets.

Values are those of ``src/core/include/execution_common.hpp`` and the op-name table of
``src/core/executor/execution_plan.cc`` in microsoft/mscclpp at :data:`MSCCLPP_COMMIT`.

>>> MAX_OPERATION, MAX_CHANNEL, MAX_CHANNEL_PER_OPERATION
(64, 16, 8)
>>> "pws" in OP_NAMES and "glres" in SWITCH_OPS
True
"""

from __future__ import annotations

__all__ = [
    "BUFFER_TYPES",
    "CHANNEL_TYPES",
    "CONTROL_OPS",
    "MAX_CHANNEL",
    "MAX_CHANNEL_PER_OPERATION",
    "MAX_DEVICE_SEMAPHORES",
    "MAX_DEVICE_SYNCERS",
    "MAX_LOCAL_BUFFER_PER_OPERATION",
    "MAX_OPERATION",
    "MSCCLPP_COMMIT",
    "OP_NAMES",
    "PACKET_OPS",
    "SWITCH_OPS",
]

MSCCLPP_COMMIT = "1f5f065d7b13ab02df32c22568f38785d1eeec01"

MAX_LOCAL_BUFFER_PER_OPERATION = 2
MAX_CHANNEL = 16  # memory (or port) channels, and remote buffers per channel type, per threadblock
MAX_CHANNEL_PER_OPERATION = 8
MAX_OPERATION = 64  # operations per threadblock, a pipeline's inner operations included
MAX_DEVICE_SYNCERS = 16  # barrier ids
MAX_DEVICE_SEMAPHORES = 16  # semaphore ids per operation (a GPU may declare more semaphores)
MAX_BUFFERS_PER_OPERATION = MAX_LOCAL_BUFFER_PER_OPERATION + MAX_CHANNEL_PER_OPERATION

BUFFER_TYPES = ("i", "o", "s")
CHANNEL_TYPES = ("memory", "port", "switch", "none")

OP_NAMES = frozenset(
    {
        "nop", "barrier", "put", "pws", "pwsf", "get", "copy", "signal", "wait", "flush",
        "re", "res", "rre", "rres", "ppkt", "rppkt", "respkt", "cpkt", "upkt", "repkt",
        "recpkt", "recspkt", "glres", "gstore", "gstorepkt", "rlxsignal", "rlxwait",
        "pipeline", "sem_acquire", "sem_release",
    }
)  # fmt: skip
# Executed by the first threads of a block only (one per channel / semaphore): two such ops in a
# row are ordered without a ``nop``; anything else needs a ``nop`` (``__syncthreads``) between.
CONTROL_OPS = frozenset(
    {"signal", "wait", "rlxsignal", "rlxwait", "flush", "sem_acquire", "sem_release"}
)
PACKET_OPS = frozenset({"ppkt", "rppkt", "respkt", "cpkt", "upkt", "repkt", "recpkt", "recspkt"})
SWITCH_OPS = frozenset({"glres", "gstore", "gstorepkt"})

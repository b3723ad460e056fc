"""Per-runtime limits and vocabularies of the MSCCL runtimes.

Examples
--------
>>> runtime_limits("msccl-executor-nccl").max_channels
32
>>> runtime_limits("rccl").max_tbs_per_gpu
64
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from synth.errors import XmlError, expect_type

from .program import Program, StepType
from .writer import ALGO_ATTRS

__all__ = ["RUNTIMES", "RuntimeLimits", "runtime_limits", "size_problems"]

_EXECUTOR_COLLS = frozenset(
    {
        "reduce",
        "broadcast",
        "allreduce",
        "reducescatter",
        "allgather",
        "send",
        "recv",
        "gather",
        "scatter",
        "alltoall",
        "alltoallv",
    }
)
_LEGACY_COLLS = frozenset(
    {"allreduce", "allgather", "reduce", "broadcast", "alltoall", "reduce_scatter", "custom"}
)
_NEW_STEP_TYPES = frozenset(StepType) - {StepType.RES_ADD}
# Every <algo> attribute except "name".
_NEW_REQUIRED = tuple(a for a in ALGO_ATTRS if a != "name")
_LEGACY_REQUIRED = ("name", "proto", "nchannels", "nchunksperloop", "ngpus", "coll", "inplace")


@dataclass(frozen=True, slots=True)
class RuntimeLimits:
    """Limits of one MSCCL runtime; every ``max_*`` is an inclusive maximum.

    Attributes
    ----------
    name
        Runtime name (a key of :data:`RUNTIMES`).
    max_steps_per_tb
        Steps per threadblock including nops (``MSCCL_MAX_NUM_STEPS``).
    max_tbs_per_gpu
        Threadblocks per rank (``MSCCL_MAX_NUM_THREAD_BLOCKS``).
    max_tbs_per_channel
        Threadblocks with a send peer (and, separately, with a recv peer) per channel.
    max_channels
        Channels; ``chan`` must be below this (``MAXCHANNELS``).
    max_cnt
        Largest ``cnt`` (``MSCCL_MAX_COUNT - 1``).
    max_dep_tb
        Largest threadblock id a dependency may name (``dependentBid`` is an int8).
    max_offset
        Largest chunk offset (offsets are int16).
    max_nodes
        XML nodes one rank parses: 1 + ngpus + its tbs + its steps must stay below this.
    max_attrs
        Attributes per element (``MAX_ATTR_COUNT``).
    max_str_len
        Attribute value length must stay below this (``MAX_STR_LEN``).
    max_name_len
        Longest ``<algo name>``, ``None`` if unlimited.
    sm_count
        Threadblocks per rank above this cannot be co-resident on an A100 (warning only).
    collectives
        Accepted ``coll`` values.
    step_types
        Accepted step types.
    required_algo_attrs
        ``<algo>`` attributes the runtime requires.
    """

    name: str
    max_steps_per_tb: int
    max_tbs_per_gpu: int
    max_tbs_per_channel: int
    max_channels: int
    max_cnt: int
    max_dep_tb: int
    max_offset: int
    max_nodes: int
    max_attrs: int
    max_str_len: int
    max_name_len: int | None
    sm_count: int
    collectives: frozenset[str]
    step_types: frozenset[StepType]
    required_algo_attrs: tuple[str, ...]


_EXECUTOR = RuntimeLimits(
    name="msccl-executor-nccl",
    max_steps_per_tb=64,
    max_tbs_per_gpu=1024,
    max_tbs_per_channel=32,
    max_channels=32,
    max_cnt=71,
    max_dep_tb=127,
    max_offset=32767,
    max_nodes=4095,
    max_attrs=16,
    max_str_len=254,
    max_name_len=None,
    sm_count=108,
    collectives=_EXECUTOR_COLLS,
    step_types=_NEW_STEP_TYPES,
    required_algo_attrs=_NEW_REQUIRED,
)

RUNTIMES: dict[str, RuntimeLimits] = {
    "msccl-executor-nccl": _EXECUTOR,
    # RCCL shares the executor's parser; it differs in thread blocks, channels and CUs.
    "rccl": replace(_EXECUTOR, name="rccl", max_tbs_per_gpu=64, max_channels=128, sm_count=304),
    # microsoft/msccl: same parser limits, longer threadblocks, fewer of them, the old vocabulary.
    "msccl-legacy": replace(
        _EXECUTOR,
        name="msccl-legacy",
        max_steps_per_tb=256,
        max_tbs_per_gpu=216,
        max_name_len=63,
        collectives=_LEGACY_COLLS,
        step_types=frozenset(StepType),
        required_algo_attrs=_LEGACY_REQUIRED,
    ),
}
"""The runtimes: current NVIDIA executor, RCCL, and old microsoft/msccl."""


def runtime_limits(runtime: str) -> RuntimeLimits:
    """The limits of ``runtime``.

    Parameters
    ----------
    runtime
        ``"msccl-executor-nccl"``, ``"rccl"`` or ``"msccl-legacy"``.

    Raises
    ------
    XmlError
        If the runtime is unknown; the message lists the known ones.

    Examples
    --------
    >>> runtime_limits("msccl-legacy").max_steps_per_tb
    256
    """
    expect_type(runtime, str, "runtime", XmlError)
    try:
        return RUNTIMES[runtime]
    except KeyError:
        raise XmlError(
            f"unknown runtime {runtime!r}; expected one of {sorted(RUNTIMES)}"
        ) from None


def size_problems(program: Program, limits: RuntimeLimits) -> list[str]:
    """Declared sizes beyond what ``limits`` lets the runtime address; empty when all fit.

    Checked before anything is allocated in proportion to them: ``ngpus`` against the ``<gpu>``
    elements present, chunk counts against the int16 offsets (``max_offset + 1`` chunks per
    buffer), ``cnt`` and offsets against ``max_cnt`` / ``max_offset``.

    >>> from msccl_xml.program import Program, Protocol
    >>> p = Program(name="x", proto=Protocol.LL, nchannels=1, nchunksperloop=10**9, ngpus=1,
    ...             coll="allgather", inplace=1, outofplace=0, min_bytes=0, max_bytes=0, gpus=())
    >>> size_problems(p, runtime_limits("msccl-executor-nccl"))[:1]
    ['algo: ngpus=1 but only 0 <gpu> element(s)']
    """
    chunks = limits.max_offset + 1
    out: list[str] = []
    if program.ngpus > len(program.gpus):
        out.append(f"algo: ngpus={program.ngpus} but only {len(program.gpus)} <gpu> element(s)")
    if program.nchunksperloop > chunks:
        out.append(f"algo: nchunksperloop {program.nchunksperloop} exceeds the {chunks} chunks "
                   f"{limits.name}'s 16-bit offsets can address")
    for gpu in program.gpus:
        for attr in ("i_chunks", "o_chunks", "s_chunks"):
            if getattr(gpu, attr) > chunks:
                out.append(f"gpu {gpu.id}: {attr} {getattr(gpu, attr)} exceeds the {chunks} chunks "
                           f"{limits.name}'s 16-bit offsets can address")
        for tb in gpu.threadblocks:
            for step in tb.steps:
                if step.cnt > limits.max_cnt or max(step.srcoff, step.dstoff) > limits.max_offset:
                    out.append(f"gpu {gpu.id} tb {tb.id} step {step.s}: cnt {step.cnt} or offsets "
                               f"{step.srcoff},{step.dstoff} beyond {limits.name}'s limits: not executed symbolically")
                    return out[:20]
    return out[:20]

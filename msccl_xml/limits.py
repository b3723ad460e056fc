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

__all__ = ["RUNTIMES", "RuntimeLimits", "band_attrs", "band_problems", "runtime_limits", "size_problems"]

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
    band_upper_inclusive
        How the runtime reads the size band: ``minBytes <= nBytes <= maxBytes`` (True) or
        ``minBytes <= nBytes < maxBytes`` (False).
    band_zero_unbounded
        Whether ``maxBytes="0"`` means "no upper end" (otherwise it is a plain bound).
    max_band_bytes
        Largest ``maxBytes`` the runtime parses, which is also the value loopcoll writes for "no
        upper end" where ``0`` does not mean that. The executor reads an int64; for msccl-legacy
        the width is not known, so ``2**59`` is a conservative value.
    missing_max_bytes
        What a missing ``maxBytes`` means; ``None`` where the attribute is required.
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
    band_upper_inclusive: bool = True
    band_zero_unbounded: bool = True
    max_band_bytes: int = 2**63 - 1
    missing_max_bytes: int | None = None


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
    # microsoft/msccl: same parser limits, longer threadblocks, fewer of them, the old vocabulary,
    # and its own size band: minBytes <= nBytes < maxBytes, a missing maxBytes is 2^27, and 0 is a
    # plain (empty) bound. The width it parses maxBytes with is not known here: 2^59 (512 PiB) is
    # conservative, inside a signed 64-bit integer and within the 18 digits msccl_xml.parser reads
    # (a 32-bit parse could not express a band above 2 GiB at all).
    "msccl-legacy": replace(
        _EXECUTOR,
        name="msccl-legacy",
        max_steps_per_tb=256,
        max_tbs_per_gpu=216,
        max_name_len=63,
        collectives=_LEGACY_COLLS,
        step_types=frozenset(StepType),
        required_algo_attrs=_LEGACY_REQUIRED,
        band_upper_inclusive=False,
        band_zero_unbounded=False,
        max_band_bytes=2**59,
        missing_max_bytes=2**27,
    ),
}
"""The runtimes: current NVIDIA executor, RCCL, and old microsoft/msccl."""


def band_attrs(limits: RuntimeLimits, min_bytes: int, max_bytes: int) -> tuple[int, int]:
    """``(minBytes, maxBytes)`` that make ``limits``' runtime select exactly loopcoll's band.

    loopcoll's band is ``min_bytes <= S <= max_bytes`` with ``max_bytes=0`` for no upper end (the
    current executor's reading, written unchanged); a runtime with an exclusive upper end gets
    ``max_bytes + 1``, and one where ``0`` is a plain bound gets ``max_band_bytes`` for no upper end.

    Raises
    ------
    XmlError
        If ``max_bytes`` is beyond what the runtime parses.

    Examples
    --------
    >>> band_attrs(runtime_limits("msccl-executor-nccl"), 0, 0)
    (0, 0)
    >>> band_attrs(runtime_limits("msccl-legacy"), 0, 0) == (0, 2**59)
    True
    >>> band_attrs(runtime_limits("msccl-legacy"), 1024, 4095)
    (1024, 4096)
    """
    hi = max_bytes
    if hi == 0 and not limits.band_zero_unbounded:
        hi = limits.max_band_bytes
    elif hi and not limits.band_upper_inclusive:
        hi += 1
    if hi > limits.max_band_bytes:
        raise XmlError(f"max_bytes {max_bytes} is beyond the largest maxBytes {limits.max_band_bytes} "
                       f"{limits.name} parses")
    return min_bytes, hi


def band_problems(min_bytes: int | None, max_bytes: int | None, limits: RuntimeLimits) -> list[str]:
    """Errors of ``<algo minBytes maxBytes>`` as ``limits``' runtime reads them; empty when fine.

    >>> band_problems(0, 0, runtime_limits("msccl-executor-nccl"))
    []
    >>> band_problems(0, 0, runtime_limits("msccl-legacy"))[0][:57]
    'algo: maxBytes="0" selects no size on msccl-legacy, which'
    """
    out: list[str] = []
    if min_bytes is not None and min_bytes < 0:
        out.append(f"algo: minBytes must be >= 0, got {min_bytes}")
    if max_bytes is not None and max_bytes < 0:
        out.append(f"algo: maxBytes must be >= 0, got {max_bytes}")
    if out:
        return out
    lo = min_bytes or 0
    hi = limits.missing_max_bytes if max_bytes is None else max_bytes
    if hi is None or (hi == 0 and limits.band_zero_unbounded):
        return out
    if hi > limits.max_band_bytes:
        out.append(f"algo: maxBytes {hi} is beyond the largest value {limits.max_band_bytes} {limits.name} parses")
    if limits.band_upper_inclusive and hi < lo:
        out.append(f"algo: maxBytes {hi} < minBytes {lo}: never selected")
    elif not limits.band_upper_inclusive and hi <= lo:
        if hi == 0:
            out.append(f'algo: maxBytes="0" selects no size on {limits.name}, which tests minBytes <= nBytes '
                       f"< maxBytes (0 is not \"no upper end\" there; write maxBytes=\"{limits.max_band_bytes}\")")
        else:
            out.append(f"algo: maxBytes {hi} <= minBytes {lo}: never selected ({limits.name} tests "
                       "minBytes <= nBytes < maxBytes)")
    return out


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

"""Structural rules of a plan: ids, cross references, operand shapes and the executor's limits.

Also resolves, per threadblock, the GPU-level channel and remote-buffer indices an op's local
``channel_ids`` / ``buffer_id`` name (the executor's ``threadblock*Channels`` tables), which the
symbolic execution uses.
"""

from __future__ import annotations

from dataclasses import dataclass

from .limits import (
    MAX_BUFFERS_PER_OPERATION,
    MAX_CHANNEL,
    MAX_CHANNEL_PER_OPERATION,
    MAX_DEVICE_SEMAPHORES,
    MAX_DEVICE_SYNCERS,
    MAX_OPERATION,
    MSCCLPP_COMMIT,
    SWITCH_OPS,
)
from .model import Op, Plan, PlanGpu, Threadblock

__all__ = ["Resolved", "canonical_collective", "resolve", "structural_problems"]

_LIM = f"(mscclpp@{MSCCLPP_COMMIT[:7]} execution_common.hpp)"
_NVLS = ("NVLS/switch channels (multicast) are refused: their multimem semantics are not modelled and "
         "multicast is off on the machines here")

# Operand shapes: (src pattern, dst pattern); "L" local, "R" remote, "L*"/"R*" zero or more.
_SHAPES: dict[str, tuple[str, str]] = {
    "copy": ("L", "L"), "get": ("R", "L"), "cpkt": ("L", "L"), "upkt": ("L", "L"),
    "re": ("L L*", "L"), "res": ("L L*", "L R*"), "rre": ("L R*", "L"), "rres": ("L R*", "L R*"),
    "repkt": ("L L*", "L"), "respkt": ("L L*", "L R*"), "recpkt": ("L L*", "L L"),
    "recspkt": ("L L*", "L L R*"), "rppkt": ("L", "R R*"),
}  # fmt: skip
_PAIRED = frozenset({"put", "pws", "pwsf", "ppkt"})  # n local sources, n remote destinations
_SMS = 132  # H100 / H200 SXM; the kernel runs 1 block of num_threads_per_block threads per SM
_MEMORY_ONLY = frozenset({"get", "res", "rres", "rre", "respkt", "recspkt"})
_CHANNEL_OPS = frozenset({"signal", "wait", "rlxsignal", "rlxwait", "flush"})
_REMOTE_OPS = frozenset({"put", "pws", "pwsf", "ppkt", "rppkt", "get", "res", "rres", "rre", "respkt", "recspkt"})


def canonical_collective(name: str) -> str:
    """The collective's name without separators, lower case.

    >>> canonical_collective("reduce_scatter")
    'reducescatter'
    """
    return name.replace("_", "").replace("-", "").lower()


@dataclass(frozen=True, slots=True)
class Resolved:
    """Per (rank, tb): GPU channel indices by channel type, GPU remote-buffer ids by type."""

    channels: dict[tuple[int, int, str], tuple[int, ...]]
    remote_refs: dict[tuple[int, int, str], tuple[int, ...]]


def resolve(plan: Plan) -> Resolved:
    """Tables the executor builds in ``setupChannels`` / ``setupRemoteBuffers``."""
    chans: dict[tuple[int, int, str], list[int]] = {}
    refs: dict[tuple[int, int, str], list[int]] = {}
    for r, gpu in enumerate(plan.gpus):
        for t, tb in enumerate(gpu.threadblocks):
            for c in tb.channels:
                chans.setdefault((r, t, c.channel_type), []).extend(c.channel_ids)
            for rr in tb.remote_buffer_refs:
                refs.setdefault((r, t, rr.access_channel_type), []).extend(rr.remote_buffer_ids)
    return Resolved(
        channels={k: tuple(v) for k, v in chans.items()}, remote_refs={k: tuple(v) for k, v in refs.items()}
    )


def expected_chunks(collective: str, nranks: int, input_chunks: int, output_chunks: int) -> str | None:
    """Why the chunk counts do not fit ``collective``, or None."""
    c = canonical_collective(collective)
    if c == "allgather" and output_chunks != nranks * input_chunks:
        return f"allgather needs output_chunks = {nranks} * input_chunks, got {input_chunks} and {output_chunks}"
    if c == "reducescatter" and input_chunks != nranks * output_chunks:
        return (f"reducescatter needs input_chunks = {nranks} * output_chunks, got {input_chunks} and "
                f"{output_chunks}")
    if c in ("allreduce", "alltoall") and output_chunks not in (0, input_chunks):
        return f"{c} needs output_chunks = input_chunks (or 0 in place), got {input_chunks} and {output_chunks}"
    if c == "alltoall" and input_chunks % nranks:
        return f"alltoall needs input_chunks divisible by {nranks} ranks, got {input_chunks}"
    return None


def structural_problems(plan: Plan) -> tuple[list[str], list[str]]:
    """Errors and warnings that need no execution; the symbolic execution runs only without errors."""
    errors: list[str] = []
    warnings: list[str] = []
    n = plan.nranks
    if n == 0:
        errors.append("plan: no gpus")
        return errors, warnings
    res = resolve(plan)
    first = plan.gpus[0]
    for r, gpu in enumerate(plan.gpus):
        where = f"gpu {r}"
        if gpu.id != r:
            errors.append(f"{where}: id is {gpu.id}; the executor reads gpus[rank] and requires id == rank")
        if gpu.input_chunks == 0 and gpu.output_chunks == 0:
            errors.append(f"{where}: input_chunks and output_chunks are both 0")
        if (gpu.input_chunks, gpu.output_chunks) != (first.input_chunks, first.output_chunks):
            errors.append(f"{where}: chunk counts differ from gpu 0's")
        if r == 0:
            why = expected_chunks(plan.collective, n, gpu.input_chunks, gpu.output_chunks)
            if why:
                errors.append(f"plan: {why}")
        for k, c in enumerate(gpu.channels):
            if c.channel_type == "switch":
                errors.append(f"{where} channels[{k}]: {_NVLS}")
                if c.buffer_key != "buffer_type":
                    warnings.append(f"{where} channels[{k}]: switch channel names its buffer with "
                                    f"{c.buffer_key!r}, but the executor reads 'buffer_type'")
            elif c.channel_type == "none":
                errors.append(f"{where} channels[{k}]: channel type 'none' cannot connect peers")
            for p in c.connected_to:
                if not 0 <= p < n or p == r:
                    errors.append(f"{where} channels[{k}]: connected_to {p} is not another rank of {n}")
        for k, b in enumerate(gpu.remote_buffers):
            if not 0 <= b.rank < n or b.rank == r:
                errors.append(f"{where} remote_buffers[{k}]: rank {b.rank} is not another rank of {n}")
            bad = [t for t in b.access_channel_types if t not in ("memory", "port")]
            if bad or not b.access_channel_types:
                errors.append(f"{where} remote_buffers[{k}]: access_channel_types must be memory and/or port")
        if len(gpu.threadblocks) > _SMS:
            warnings.append(f"{where}: {len(gpu.threadblocks)} threadblocks, more than the {_SMS} SMs of an H100/H200: "
                            "blocks are launched one per SM and wait on each other, so they must all be resident")
        for ctype in ("memory", "port"):
            _pairing(plan, r, ctype, warnings)
        for t, tb in enumerate(gpu.threadblocks):
            _tb_problems(plan, gpu, r, t, tb, res, errors)
    return errors, warnings


def _pairing(plan: Plan, r: int, ctype: str, warnings: list[str]) -> None:
    mine = plan.gpus[r].flat_channels(ctype)
    for p in sorted(set(mine)):
        if not 0 <= p < plan.nranks or p == r:
            continue
        theirs = plan.gpus[p].flat_channels(ctype).count(r)
        if mine.count(p) != theirs:
            warnings.append(f"gpu {r}: {mine.count(p)} {ctype} channels to gpu {p} but gpu {p} has {theirs} back "
                            "(the executor adds unpaired ones)")


def _tb_problems(plan: Plan, gpu: PlanGpu, r: int, t: int, tb: Threadblock, res: Resolved, errors: list[str]) -> None:
    where = f"gpu {r} tb {t}"
    if tb.id != t:
        errors.append(f"{where}: id is {tb.id}; the executor indexes threadblocks by position")
    nops = sum(1 + len(o.ops) for o in tb.ops)
    if nops > MAX_OPERATION:
        errors.append(f"{where}: {nops} operations, more than MAX_OPERATION = {MAX_OPERATION} {_LIM}")
    for ctype in ("memory", "port"):
        ids = res.channels.get((r, t, ctype), ())
        flat = gpu.flat_channels(ctype)
        if len(ids) > MAX_CHANNEL:
            errors.append(f"{where}: {len(ids)} {ctype} channels, more than MAX_CHANNEL = {MAX_CHANNEL} {_LIM}")
        for i in ids:
            if not 0 <= i < len(flat):
                errors.append(f"{where}: {ctype} channel id {i} outside the gpu's {len(flat)} {ctype} channels")
        refs = res.remote_refs.get((r, t, ctype), ())
        if len(refs) > MAX_CHANNEL:
            errors.append(f"{where}: {len(refs)} {ctype} remote buffers, more than MAX_CHANNEL = {MAX_CHANNEL} "
                          f"{_LIM}")
        for i in refs:
            if not 0 <= i < len(gpu.remote_buffers):
                errors.append(f"{where}: remote buffer id {i} outside the gpu's {len(gpu.remote_buffers)}")
            elif ctype not in gpu.remote_buffers[i].access_channel_types:
                errors.append(f"{where}: remote buffer {i} is not accessible over {ctype} channels")
    for k, op in enumerate(tb.ops):
        _op_problems(plan, gpu, r, t, op, f"{where} op {k} ({op.name})", res, errors)
        for j, inner in enumerate(op.ops):
            _op_problems(plan, gpu, r, t, inner, f"{where} op {k}.{j} ({inner.name})", res, errors)


def _op_problems(
    plan: Plan, gpu: PlanGpu, r: int, t: int, op: Op, where: str, res: Resolved, errors: list[str]
) -> None:
    name = op.name
    if name in SWITCH_OPS:
        errors.append(f"{where}: {_NVLS}")
        return
    if name == "pipeline":
        if op.iter_context is None:
            errors.append(f"{where}: pipeline without iter_context")
        return
    needs_channel = name in _CHANNEL_OPS or name in _REMOTE_OPS
    if needs_channel and op.channel_type not in ("memory", "port"):
        errors.append(f"{where}: needs channel_type memory or port, got {op.channel_type!r}")
        return
    if name in _CHANNEL_OPS or (name in _PAIRED and op.channel_type == "port"):
        ids = op.channel_ids or ()
        if not ids:
            errors.append(f"{where}: no channel_ids")
        if len(ids) > MAX_CHANNEL_PER_OPERATION:
            errors.append(f"{where}: {len(ids)} channels, more than MAX_CHANNEL_PER_OPERATION = "
                          f"{MAX_CHANNEL_PER_OPERATION} {_LIM}")
        have = len(res.channels.get((r, t, op.channel_type or ""), ()))
        for i in ids:
            if not 0 <= i < have:
                errors.append(f"{where}: channel_ids entry {i} outside the threadblock's {have} "
                              f"{op.channel_type} channels")
        if name == "flush" and op.channel_type != "port":
            errors.append(f"{where}: flush works on port channels only")
    if name in ("sem_acquire", "sem_release"):
        sids = op.semaphore_ids or ()
        if not sids or len(sids) > MAX_DEVICE_SEMAPHORES:
            errors.append(f"{where}: needs 1 to MAX_DEVICE_SEMAPHORES = {MAX_DEVICE_SEMAPHORES} semaphore_ids "
                          f"{_LIM}")
        for s in sids:
            if not 0 <= s < len(gpu.semaphores):
                errors.append(f"{where}: semaphore id {s} outside the gpu's {len(gpu.semaphores)} semaphores")
    if name == "barrier":
        if op.barrier_id is None or not 0 <= op.barrier_id < MAX_DEVICE_SYNCERS:
            errors.append(f"{where}: barrier_id must be in [0, {MAX_DEVICE_SYNCERS}) {_LIM}")
        if op.num_threadblocks is None or op.num_threadblocks > len(gpu.threadblocks):
            errors.append(f"{where}: num_threadblocks must be at most the gpu's {len(gpu.threadblocks)}")
    if name in _SHAPES or name in _PAIRED:
        _operand_problems(plan, gpu, r, t, op, where, res, errors)


def _operand_problems(
    plan: Plan, gpu: PlanGpu, r: int, t: int, op: Op, where: str, res: Resolved, errors: list[str]
) -> None:
    for label, refs in (("src_buff", op.src_buff), ("dst_buff", op.dst_buff)):
        if len(refs) > MAX_BUFFERS_PER_OPERATION:
            errors.append(f"{where}: {len(refs)} {label} entries, more than {MAX_BUFFERS_PER_OPERATION} {_LIM}")
    if op.name in _PAIRED:
        ok = len(op.src_buff) == len(op.dst_buff) >= 1
        kinds: tuple[list[str] | None, list[str] | None] = ["L"] * len(op.src_buff), ["R"] * len(op.dst_buff)
        if not ok:
            errors.append(f"{where}: needs as many src_buff as dst_buff entries (one per destination), got "
                          f"{len(op.src_buff)} and {len(op.dst_buff)}")
            return
        if op.channel_type == "port" and len(op.channel_ids or ()) != len(op.dst_buff):
            errors.append(f"{where}: a port put needs one channel per destination")
            return
    else:
        kinds = _expand(_SHAPES[op.name][0], len(op.src_buff)), _expand(_SHAPES[op.name][1], len(op.dst_buff))
        if kinds[0] is None or kinds[1] is None:
            errors.append(f"{where}: operands do not fit {op.name}: src {_SHAPES[op.name][0]!r}, dst "
                          f"{_SHAPES[op.name][1]!r} (L local, R remote)")
            return
    if op.name in _MEMORY_ONLY and op.channel_type != "memory":
        errors.append(f"{where}: {op.name} reaches peer memory directly and works over memory channels only "
                      "(execution_kernel.hpp indexes the memory-channel buffer table)")
        return
    if op.name in ("put", "pws", "pwsf") and len({b.type for b in op.src_buff}) > 1:
        errors.append(f"{where}: sources of different buffer types; the executor reads every source from the "
                      "first one's buffer (handlePut)")
    if op.name == "get" and op.src_buff[0].index != op.dst_buff[0].index:
        errors.append(f"{where}: source index {op.src_buff[0].index} differs from destination index "
                      f"{op.dst_buff[0].index}; handleGet at this commit uses each offset for the other buffer")
    refs_avail = len(res.remote_refs.get((r, t, op.channel_type or ""), ()))
    sizes = set()
    for label, refs, kind in (("src_buff", op.src_buff, kinds[0]), ("dst_buff", op.dst_buff, kinds[1])):
        assert kind is not None
        for k, (b, want) in enumerate(zip(refs, kind)):
            sizes.add(b.size)
            if want == "L" and b.type is None:
                errors.append(f"{where}: {label}[{k}] must be a local buffer (type)")
            if want == "R":
                if b.buffer_id is None:
                    errors.append(f"{where}: {label}[{k}] must be a remote buffer (buffer_id)")
                elif not 0 <= b.buffer_id < refs_avail:
                    errors.append(f"{where}: {label}[{k}] buffer_id {b.buffer_id} outside the threadblock's "
                                  f"{refs_avail} {op.channel_type} remote buffers")
            if b.size == 0:
                errors.append(f"{where}: {label}[{k}] has size 0")
    if len(sizes) > 1:
        errors.append(f"{where}: operands of different sizes {sorted(sizes)} (the executor uses one size)")


def _expand(pattern: str, count: int) -> list[str] | None:
    fixed = [p for p in pattern.split() if not p.endswith("*")]
    star = [p[0] for p in pattern.split() if p.endswith("*")]
    if count < len(fixed) or (not star and count != len(fixed)):
        return None
    return fixed + star * (count - len(fixed))

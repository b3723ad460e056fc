"""Structural and runtime-limit rules of an MSCCL program.

Every rule is checked on the model, not the text; lexical rules live in :mod:`msccl_xml.lint`.
Messages start with the place: ``algo``, ``gpu G``, ``gpu G tb T`` or ``gpu G tb T step S``.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence

from .limits import RuntimeLimits, band_problems
from .program import BufferKind, Gpu, Program, Step, StepType, Threadblock

__all__ = ["rank_xml_nodes", "structural_problems"]

# Fields the executor bounds-checks per step type (msccl_parser.cc).
_CHECK_SRC = frozenset(
    {StepType.SEND, StepType.RECV_REDUCE_SEND, StepType.RECV_REDUCE_COPY_SEND,
     StepType.LOCAL_COPY, StepType.REDUCE}
)  # fmt: skip
_CHECK_DST = frozenset(
    {StepType.RECV, StepType.RECV_COPY_SEND, StepType.RECV_REDUCE_COPY_SEND,
     StepType.LOCAL_COPY, StepType.REDUCE}
)  # fmt: skip


def rank_xml_nodes(ngpus: int, threadblocks: Sequence[Threadblock]) -> int:
    """XML nodes the runtime's reader parses for one rank: algo, gpus, its tbs and steps."""
    return 1 + ngpus + len(threadblocks) + sum(len(tb.steps) for tb in threadblocks)


def structural_problems(program: Program, limits: RuntimeLimits) -> tuple[list[str], list[str]]:
    """Errors and warnings from the per-element rules and ``limits``.

    Returns
    -------
    (errors, warnings)
        Messages naming the place, in program order.
    """
    errors: list[str] = []
    warnings: list[str] = []
    _check_algo(program, limits, errors, warnings)
    ids = [g.id for g in program.gpus]
    for rank, n in sorted(Counter(ids).items()):
        if n > 1:
            errors.append(f"gpu {rank}: appears {n} times")
    if program.ngpus > len(ids):  # checked first: range(ngpus) of a huge declared ngpus would not fit
        errors.append(f"algo: ngpus={program.ngpus} but only {len(ids)} <gpu> element(s)")
    else:
        missing = sorted(set(range(program.ngpus)) - set(ids))
        if missing:
            errors.append(f"algo: ngpus={program.ngpus} but no <gpu> for rank(s) {missing}")
    for gpu in program.gpus:
        if not 0 <= gpu.id < program.ngpus:
            errors.append(f"gpu {gpu.id}: id out of range 0..{program.ngpus - 1}")
        _check_gpu(program, gpu, limits, errors, warnings)
    return errors, warnings


def _check_algo(p: Program, lim: RuntimeLimits, errors: list[str], warnings: list[str]) -> None:
    present = {
        "name": p.name is not None,
        "outofplace": p.outofplace is not None,
        "minBytes": p.min_bytes is not None,
        "maxBytes": p.max_bytes is not None,
    }
    for attr in lim.required_algo_attrs:
        if not present.get(attr, True):
            errors.append(f"algo: required attribute {attr} is missing for {lim.name}")
    if p.coll not in lim.collectives:
        errors.append(
            f"algo: coll {p.coll!r} is not accepted by {lim.name} "
            f"(expected one of {sorted(lim.collectives)})"
        )
    if p.ngpus < 1:
        errors.append(f"algo: ngpus must be >= 1, got {p.ngpus}")
    if p.nchunksperloop < 1:
        errors.append(f"algo: nchunksperloop must be >= 1, got {p.nchunksperloop}")
    if not 1 <= p.nchannels <= lim.max_channels:
        errors.append(
            f"algo: nchannels must be in 1..{lim.max_channels} for {lim.name}, got {p.nchannels}"
        )
    for attr, value in (("inplace", p.inplace), ("outofplace", p.outofplace)):
        if value is not None and value not in (0, 1):
            errors.append(f"algo: {attr} must be 0 or 1, got {value}")
    if p.inplace == 0 and p.outofplace in (0, None) and "outofplace" in lim.required_algo_attrs:
        errors.append("algo: inplace=0 and outofplace=0: the algorithm can never be selected")
    errors.extend(band_problems(p.min_bytes, p.max_bytes, lim))
    if p.max_bytes is None and lim.missing_max_bytes is not None:
        warnings.append(f"algo: no maxBytes: {lim.name} then selects the algorithm only below "
                        f"{lim.missing_max_bytes} bytes")
    if p.name is not None and lim.max_name_len is not None and len(p.name) > lim.max_name_len:
        errors.append(f"algo: name longer than {lim.max_name_len} characters for {lim.name}")
    n_attrs = 10 - sum(not v for v in present.values()) + len(p.extra)
    if n_attrs > lim.max_attrs:
        errors.append(f"algo: {n_attrs} attributes, the runtime keeps only {lim.max_attrs}")


def _check_gpu(
    p: Program, gpu: Gpu, lim: RuntimeLimits, errors: list[str], warnings: list[str]
) -> None:
    where = f"gpu {gpu.id}"
    for attr in ("i_chunks", "o_chunks", "s_chunks"):
        if getattr(gpu, attr) < 0:
            errors.append(f"{where}: {attr} must be >= 0, got {getattr(gpu, attr)}")
    tbs = gpu.threadblocks
    if len(tbs) > lim.max_tbs_per_gpu:
        errors.append(
            f"{where}: {len(tbs)} threadblocks, {lim.name} allows {lim.max_tbs_per_gpu}"
        )
    elif len(tbs) > lim.sm_count:
        warnings.append(
            f"{where}: {len(tbs)} threadblocks exceed {lim.sm_count} SMs; "
            "they spin-wait on each other and may not be co-resident"
        )
    tb_ids = [tb.id for tb in tbs]
    counts = Counter(tb_ids)
    for tid, n in sorted(counts.items()):
        if n > 1:
            errors.append(f"{where} tb {tid}: duplicate threadblock id")
    gaps = sorted(set(range(len(counts))) - set(counts))
    if gaps:
        errors.append(f"{where}: threadblock ids must be dense 0..n-1; missing {gaps}")
    nodes = rank_xml_nodes(p.ngpus, tbs)
    if nodes > lim.max_nodes:
        errors.append(f"{where}: {nodes} XML nodes for this rank, the reader allows {lim.max_nodes}")
    send_owner: dict[tuple[int, int], int] = {}
    recv_owner: dict[tuple[int, int], int] = {}
    per_chan: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    hasdep_targets = _dependency_targets(gpu)
    by_id = {tb.id: tb for tb in tbs}
    for tb in tbs:
        _check_tb(p, gpu, tb, lim, errors, warnings)
        tw = f"{where} tb {tb.id}"
        for peer, owner, kind, idx in (
            (tb.send, send_owner, "send", 0),
            (tb.recv, recv_owner, "recv", 1),
        ):
            if peer < 0:
                continue
            per_chan[tb.chan][idx] += 1
            key = (tb.chan, peer)
            if key in owner:
                errors.append(
                    f"{tw}: {kind} peer {peer} on channel {tb.chan} is already used by tb "
                    f"{owner[key]} (one tb per (channel, {kind} peer))"
                )
            else:
                owner[key] = tb.id
        for step in tb.steps:
            _check_dependency(gpu, tb, step, by_id, lim, errors, warnings)
            if step.hasdep == 1 and (tb.id, step.s) not in hasdep_targets:
                warnings.append(f"{tw} step {step.s}: hasdep=1 but no threadblock waits on it")
    for chan, (n_send, n_recv) in sorted(per_chan.items()):
        for n, kind in ((n_send, "send"), (n_recv, "recv")):
            if n > lim.max_tbs_per_channel:
                errors.append(
                    f"{where}: {n} threadblocks with a {kind} peer on channel {chan}, "
                    f"the runtime allows {lim.max_tbs_per_channel}"
                )


def _dependency_targets(gpu: Gpu) -> set[tuple[int, int]]:
    return {(st.depid, st.deps) for tb in gpu.threadblocks for st in tb.steps if st.depid >= 0}


def _check_tb(
    p: Program,
    gpu: Gpu,
    tb: Threadblock,
    lim: RuntimeLimits,
    errors: list[str],
    warnings: list[str],
) -> None:
    where = f"gpu {gpu.id} tb {tb.id}"
    if tb.id < 0:
        errors.append(f"{where}: negative threadblock id")
    for kind, peer in (("send", tb.send), ("recv", tb.recv)):
        if peer == gpu.id:
            errors.append(f"{where}: {kind} peer is the gpu itself")
        elif not -1 <= peer < p.ngpus:
            errors.append(f"{where}: {kind} peer {peer} out of range -1..{p.ngpus - 1}")
    if not 0 <= tb.chan < lim.max_channels:
        errors.append(
            f"{where}: chan {tb.chan} out of range 0..{lim.max_channels - 1} for {lim.name}"
        )
    elif tb.chan >= p.nchannels:
        errors.append(f"{where}: chan {tb.chan} >= nchannels {p.nchannels}")
    if len(tb.steps) > lim.max_steps_per_tb:
        errors.append(
            f"{where}: {len(tb.steps)} steps (nops included), {lim.name} allows "
            f"{lim.max_steps_per_tb}"
        )
    declared = {
        BufferKind.INPUT: gpu.i_chunks,
        BufferKind.OUTPUT: gpu.o_chunks,
        BufferKind.SCRATCH: gpu.s_chunks,
    }
    pending_nops = 0
    for position, step in enumerate(tb.steps):
        sw = f"{where} step {position}"
        if step.s != position:
            errors.append(f"{sw}: s={step.s}, but steps must be numbered 0..n-1 in document order")
        if step.type not in lim.step_types:
            errors.append(f"{sw}: type {step.type.value!r} is not supported by {lim.name}")
        if step.hasdep not in (0, 1):
            errors.append(f"{sw}: hasdep must be 0 or 1, got {step.hasdep}")
        if step.type is StepType.NOP:
            if step.depid < 0 or step.deps < 0:
                errors.append(f"{sw}: a nop must carry exactly one dependency")
            pending_nops += 1
            continue
        if pending_nops and step.depid < 0:
            errors.append(
                f"{sw}: follows {pending_nops} nop(s) but has no dependency of its own; the "
                "executor rejects the file"
            )
        pending_nops = 0
        if not 0 <= step.cnt <= lim.max_cnt:
            errors.append(f"{sw}: cnt {step.cnt} out of range 0..{lim.max_cnt}")
        elif step.cnt == 0:
            warnings.append(f"{sw}: cnt 0 on a {step.type.value!r} step moves nothing")
        if step.type.sends and tb.send < 0:
            errors.append(f"{sw}: {step.type.value!r} sends but the threadblock has send=-1")
        if step.type.receives and tb.recv < 0:
            errors.append(f"{sw}: {step.type.value!r} receives but the threadblock has recv=-1")
        for used, buf, off, field in (
            (step.type.reads_src, step.srcbuf, step.srcoff, "srcoff"),
            (step.type.writes_dst, step.dstbuf, step.dstoff, "dstoff"),
        ):
            checked = step.type in (_CHECK_SRC if field == "srcoff" else _CHECK_DST)
            if not (used or checked):
                continue
            if off < 0 or off > lim.max_offset:
                errors.append(f"{sw}: {field} {off} out of range 0..{lim.max_offset}")
            elif checked and off >= declared[buf]:
                errors.append(
                    f"{sw}: {field} {off} out of range for {buf.value}_chunks={declared[buf]}"
                )
    if pending_nops:
        errors.append(f"{where}: ends with {pending_nops} nop(s) not followed by a real step")


def _check_dependency(
    gpu: Gpu,
    tb: Threadblock,
    step: Step,
    by_id: dict[int, Threadblock],
    lim: RuntimeLimits,
    errors: list[str],
    warnings: list[str],
) -> None:
    sw = f"gpu {gpu.id} tb {tb.id} step {step.s}"
    if step.depid < 0:
        if step.depid != -1 or step.deps != -1:
            errors.append(f"{sw}: depid={step.depid} deps={step.deps}; no dependency is -1/-1")
        return
    if step.depid > lim.max_dep_tb:
        errors.append(f"{sw}: depid {step.depid} > {lim.max_dep_tb} (stored as an int8)")
    target = by_id.get(step.depid)
    if target is None:
        errors.append(f"{sw}: depends on tb {step.depid}, which does not exist on gpu {gpu.id}")
        return
    if not 0 <= step.deps < len(target.steps):
        errors.append(
            f"{sw}: depends on tb {step.depid} step {step.deps}, which does not exist"
        )
        return
    dep_step = target.steps[step.deps]
    if dep_step.type is StepType.NOP:
        errors.append(f"{sw}: depends on tb {step.depid} step {step.deps}, which is a nop")
    elif dep_step.hasdep != 1:
        errors.append(
            f"{sw}: depends on tb {step.depid} step {step.deps}, which has hasdep=0 and "
            "never publishes its flag"
        )
    if target.id == tb.id:
        if step.deps >= step.s:
            errors.append(f"{sw}: depends on its own threadblock's step {step.deps}, not earlier")
        else:
            warnings.append(f"{sw}: redundant dependency on its own threadblock")

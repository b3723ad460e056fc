"""Write a :class:`~mscclpp_plan.model.Plan` as JSON the MSCCL++ executor reads.

Keys come in a fixed order (the DSL's), so the output is deterministic and
``parse(write(plan)) == plan``.

Examples
--------
>>> from mscclpp_plan.model import Plan, PlanGpu
>>> from mscclpp_plan.reader import parse
>>> p = Plan("x", "allreduce", "Simple", True, (PlanGpu(0, 1, 1, 0, ()),))
>>> parse(write(p)) == p
True
>>> write(p).splitlines()[1]
'  "name": "x",'
"""

from __future__ import annotations

import json
import os
from typing import Any

from synth.fileio import write_text_atomic

from ._args import need, need_path
from .errors import PlanError
from .model import BufferRef, ChannelDecl, Op, Plan, PlanGpu, Threadblock

__all__ = ["to_obj", "write", "write_file"]


def write(plan: Plan) -> str:
    """The plan as JSON text (2-space indent, trailing newline)."""
    return json.dumps(to_obj(plan), indent=2) + "\n"


def write_file(plan: Plan, path: str | os.PathLike[str]) -> None:
    """Write ``plan`` to ``path`` atomically."""
    need_path(path, "path")
    write_text_atomic(path, write(plan))


def to_obj(plan: Plan) -> dict[str, Any]:
    """The plan as a JSON-ready dict."""
    need(plan, Plan, "plan")
    try:
        return _plan_obj(plan)
    except (AttributeError, TypeError, ValueError) as exc:  # a hand-built plan with wrong-typed fields
        raise PlanError(f"plan {getattr(plan, 'name', '?')!r} has a malformed field: {exc}") from None


def _plan_obj(plan: Plan) -> dict[str, Any]:
    d: dict[str, Any] = {
        "name": plan.name,
        "collective": plan.collective,
        "protocol": plan.protocol,
        "inplace": plan.inplace,
        "reuse_resources": plan.reuse_resources,
        "gpus": [_gpu(g) for g in plan.gpus],
        "num_threads_per_block": plan.num_threads_per_block,
        "use_double_scratch_buffer": plan.use_double_scratch_buffer,
        "buffer_alignment": plan.buffer_alignment,
        "min_message_size": plan.min_message_size,
        "max_message_size": plan.max_message_size,
    }
    for key, text in plan.extra:
        d[key] = json.loads(text)
    return d


def _gpu(g: PlanGpu) -> dict[str, Any]:
    return {
        "id": g.id,
        "input_chunks": g.input_chunks,
        "output_chunks": g.output_chunks,
        "scratch_chunks": g.scratch_chunks,
        "threadblocks": [_tb(t) for t in g.threadblocks],
        "channels": [_chan(c) for c in g.channels],
        "remote_buffers": [
            {"rank": b.rank, "type": b.type, "access_channel_types": list(b.access_channel_types)}
            for b in g.remote_buffers
        ],
        "semaphores": [{"init_value": v} for v in g.semaphores],
    }


def _chan(c: ChannelDecl) -> dict[str, Any]:
    if c.channel_type == "switch":
        return {
            "channel_type": c.channel_type,
            c.buffer_key: c.buffer_type,
            "rank_groups": [{"size": size, "ranks": list(ranks)} for size, ranks in c.rank_groups],
        }
    return {"channel_type": c.channel_type, "connected_to": list(c.connected_to)}


def _tb(t: Threadblock) -> dict[str, Any]:
    chans = []
    for c in t.channels:
        cd: dict[str, Any] = {"channel_type": c.channel_type, "channel_ids": list(c.channel_ids)}
        if c.buff is not None:
            cd["buff"] = c.buff
        chans.append(cd)
    return {
        "id": t.id,
        "ops": [_op(o) for o in t.ops],
        "channels": chans,
        "remote_buffer_refs": [
            {"access_channel_type": r.access_channel_type, "remote_buffer_ids": list(r.remote_buffer_ids)}
            for r in t.remote_buffer_refs
        ],
    }


def _buf(b: BufferRef) -> dict[str, Any]:
    d: dict[str, Any] = {}
    if b.type is not None:
        d["type"] = b.type
    if b.buffer_id is not None:
        d["buffer_id"] = b.buffer_id
    if b.switch_channel_id is not None:
        d["switch_channel_id"] = b.switch_channel_id
    d["index"] = b.index
    d["size"] = b.size
    return d


def _op(o: Op) -> dict[str, Any]:
    d: dict[str, Any] = {"name": o.name}
    if o.name == "pipeline":
        if o.iter_context is not None:
            d["iter_context"] = {"unit_size": o.iter_context[0], "num_chunks": o.iter_context[1]}
        d["ops"] = [_op(i) for i in o.ops]
    elif o.iter_context is not None:
        d["iter_context"] = {"unit_size": o.iter_context[0], "num_chunks": o.iter_context[1]}
    if o.src_buff:
        d["src_buff"] = [_buf(b) for b in o.src_buff]
    if o.dst_buff:
        d["dst_buff"] = [_buf(b) for b in o.dst_buff]
    if o.channel_ids is not None:
        d["channel_ids"] = list(o.channel_ids)
    if o.channel_type is not None:
        d["channel_type"] = o.channel_type
    if o.reduce_op is not None:
        d["reduce_op"] = o.reduce_op
    if o.semaphore_ids is not None:
        d["semaphore_ids"] = list(o.semaphore_ids)
    if o.barrier_id is not None:
        d["barrier_id"] = o.barrier_id
    if o.num_threadblocks is not None:
        d["num_threadblocks"] = o.num_threadblocks
    if o.tbg is not None:
        d["tbg_info"] = {"tb_id": o.tbg[0], "tbg_size": o.tbg[1]}
    for key, text in o.extra:
        d[key] = json.loads(text)
    return d

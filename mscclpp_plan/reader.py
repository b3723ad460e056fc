"""Read MSCCL++ execution plans (JSON) into :class:`~mscclpp_plan.model.Plan`, validating shapes.

The reader checks what the executor's JSON reader would trip on (missing keys, wrong types,
unknown op, buffer and channel tokens) and names the culprit by its JSON path; cross references
and the executor's limits are the checker's job (:func:`mscclpp_plan.check`). Sizes are capped
before anything is allocated.

Examples
--------
>>> plan = parse('{"name": "x", "collective": "allreduce", "protocol": "Simple", "inplace": true,'
...              ' "gpus": [{"id": 0, "input_chunks": 1, "output_chunks": 1, "scratch_chunks": 0,'
...              ' "threadblocks": [], "channels": [], "remote_buffers": []}]}')
>>> plan.nranks, plan.max_message_size == 2**64 - 1
(1, True)
>>> parse('{"name": 1}', source="p.json")
Traceback (most recent call last):
...
mscclpp_plan.errors.PlanError: p.json: name: expected a string, got 1
"""

from __future__ import annotations

import json
import os
from typing import Any

from ._args import need_path, need_str
from .errors import PlanError
from .limits import BUFFER_TYPES, CHANNEL_TYPES, OP_NAMES
from .model import (
    BufferRef,
    ChannelDecl,
    Op,
    Plan,
    PlanGpu,
    RemoteBuffer,
    TbChannels,
    TbRemoteRefs,
    Threadblock,
)

__all__ = ["MAX_PLAN_BYTES", "parse", "parse_obj", "read"]

MAX_PLAN_BYTES = 64 * 2**20
_MAX_GPUS = 4096
_MAX_TBS = 4096
_MAX_OPS = 65536  # per threadblock, before the executor's own limit is checked
_MAX_LIST = 4096  # buffers per op, channels, remote buffers, ...
_MAX_INT = 2**63 - 1

_PLAN_KEYS = (
    "name", "collective", "protocol", "inplace", "reuse_resources", "gpus", "num_threads_per_block",
    "use_double_scratch_buffer", "buffer_alignment", "min_message_size", "max_message_size",
)  # fmt: skip
_OP_KEYS = frozenset(
    {"name", "src_buff", "dst_buff", "channel_ids", "channel_type", "reduce_op", "semaphore_ids",
     "barrier_id", "num_threadblocks", "tbg_info", "iter_context", "ops"}
)  # fmt: skip


def read(path: str | os.PathLike[str]) -> Plan:
    """Read the plan file at ``path``.

    Raises
    ------
    PlanError
        If the file cannot be read, is larger than 64 MiB, or is not a well-formed plan.

    Examples
    --------
    >>> read("/nonexistent.json")
    Traceback (most recent call last):
    ...
    mscclpp_plan.errors.PlanError: /nonexistent.json: cannot read: No such file or directory
    """
    need_path(path, "path")
    name = os.fspath(path)
    try:
        size = os.path.getsize(name)
        if size > MAX_PLAN_BYTES:
            raise PlanError(f"{name}: {size} bytes, more than the {MAX_PLAN_BYTES}-byte cap for a plan")
        with open(name, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise PlanError(f"{name}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise PlanError(f"{name}: not UTF-8 text: {exc.reason}") from None
    return parse(text, source=name)


def parse(text: str, *, source: str = "<string>") -> Plan:
    """Parse plan JSON ``text``; ``source`` prefixes error messages."""
    need_str(text, "text")
    need_str(source, "source")
    if len(text) > MAX_PLAN_BYTES:
        raise PlanError(f"{source}: {len(text)} characters, more than the {MAX_PLAN_BYTES} cap for a plan")
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PlanError(f"{source}: not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise PlanError(f"{source}: not JSON: nested too deeply") from None
    return parse_obj(obj, source=source)


def parse_obj(obj: Any, *, source: str = "<object>") -> Plan:
    """Build a :class:`Plan` from already-decoded JSON ``obj``."""
    need_str(source, "source")
    r = _Reader(source)
    d = r.obj(obj, "plan")
    name = r.text(r.req(d, "name", "name"), "name")
    collective = r.text(r.req(d, "collective", "collective"), "collective")
    protocol = r.token(r.req(d, "protocol", "protocol"), "protocol", ("Simple", "LL"))
    inplace = r.flag(r.req(d, "inplace", "inplace"), "inplace")
    gpus_raw = r.seq(r.req(d, "gpus", "gpus"), "gpus", _MAX_GPUS)
    gpus = tuple(r.gpu(g, f"gpus[{k}]") for k, g in enumerate(gpus_raw))
    extra = tuple((k, json.dumps(v, sort_keys=True)) for k, v in d.items() if k not in _PLAN_KEYS)
    return Plan(
        name=name,
        collective=collective,
        protocol=protocol,
        inplace=inplace,
        gpus=gpus,
        reuse_resources=r.flag(d.get("reuse_resources", False), "reuse_resources"),
        num_threads_per_block=r.integer(d.get("num_threads_per_block", 1024), "num_threads_per_block", lo=1),
        use_double_scratch_buffer=r.flag(d.get("use_double_scratch_buffer", False), "use_double_scratch_buffer"),
        buffer_alignment=r.integer(d.get("buffer_alignment", 16), "buffer_alignment", lo=1),
        min_message_size=r.integer(d.get("min_message_size", 0), "min_message_size", hi=2**64 - 1),
        max_message_size=r.integer(d.get("max_message_size", 2**64 - 1), "max_message_size", hi=2**64 - 1),
        extra=extra,
    )


class _Reader:
    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, where: str, what: str) -> PlanError:
        return PlanError(f"{self.source}: {where}: {what}")

    def obj(self, v: Any, where: str) -> dict[str, Any]:
        if not isinstance(v, dict):
            raise self.fail(where, f"expected an object, got {_show(v)}")
        return v

    def req(self, d: dict[str, Any], key: str, where: str) -> Any:
        if key not in d:
            raise self.fail(where, "missing")
        return d[key]

    def seq(self, v: Any, where: str, cap: int = _MAX_LIST) -> list[Any]:
        if not isinstance(v, list):
            raise self.fail(where, f"expected a list, got {_show(v)}")
        if len(v) > cap:
            raise self.fail(where, f"{len(v)} entries, more than the cap of {cap}")
        return v

    def text(self, v: Any, where: str) -> str:
        if not isinstance(v, str):
            raise self.fail(where, f"expected a string, got {_show(v)}")
        return v

    def flag(self, v: Any, where: str) -> bool:
        if not isinstance(v, bool):
            raise self.fail(where, f"expected true or false, got {_show(v)}")
        return v

    def integer(self, v: Any, where: str, lo: int = 0, hi: int = _MAX_INT) -> int:
        if isinstance(v, bool) or not isinstance(v, int):
            raise self.fail(where, f"expected an integer, got {_show(v)}")
        if not lo <= v <= hi:
            raise self.fail(where, f"{v} is outside [{lo}, {hi}]")
        return v

    def ints(self, v: Any, where: str) -> tuple[int, ...]:
        return tuple(self.integer(x, f"{where}[{k}]") for k, x in enumerate(self.seq(v, where)))

    def token(self, v: Any, where: str, allowed: tuple[str, ...] | frozenset[str]) -> str:
        s = self.text(v, where)
        if s not in allowed:
            raise self.fail(where, f"unknown value {s!r} (expected one of {', '.join(sorted(allowed))})")
        return s

    def gpu(self, v: Any, where: str) -> PlanGpu:
        d = self.obj(v, where)
        tbs_raw = self.seq(self.req(d, "threadblocks", f"{where}.threadblocks"), f"{where}.threadblocks", _MAX_TBS)
        chans = self.seq(d.get("channels", []), f"{where}.channels")
        rbufs = self.seq(d.get("remote_buffers", []), f"{where}.remote_buffers")
        sems = self.seq(d.get("semaphores", []), f"{where}.semaphores")
        return PlanGpu(
            id=self.integer(self.req(d, "id", f"{where}.id"), f"{where}.id"),
            input_chunks=self.integer(self.req(d, "input_chunks", f"{where}.input_chunks"), f"{where}.input_chunks",
                                  hi=2**31 - 1),
            output_chunks=self.integer(self.req(d, "output_chunks", f"{where}.output_chunks"), f"{where}.output_chunks",
                                   hi=2**31 - 1),
            scratch_chunks=self.integer(self.req(d, "scratch_chunks", f"{where}.scratch_chunks"),
                                    f"{where}.scratch_chunks", hi=2**31 - 1),
            threadblocks=tuple(self.tb(t, f"{where}.threadblocks[{k}]") for k, t in enumerate(tbs_raw)),
            channels=tuple(self.chan(c, f"{where}.channels[{k}]") for k, c in enumerate(chans)),
            remote_buffers=tuple(self.rbuf(b, f"{where}.remote_buffers[{k}]") for k, b in enumerate(rbufs)),
            semaphores=tuple(
                self.integer(self.req(self.obj(s, f"{where}.semaphores[{k}]"), "init_value",
                                  f"{where}.semaphores[{k}].init_value"), f"{where}.semaphores[{k}].init_value")
                for k, s in enumerate(sems)
            ),
        )

    def chan(self, v: Any, where: str) -> ChannelDecl:
        d = self.obj(v, where)
        ctype = self.token(self.req(d, "channel_type", f"{where}.channel_type"), f"{where}.channel_type",
                           CHANNEL_TYPES)
        if ctype == "switch":
            groups = []
            for k, g in enumerate(self.seq(self.req(d, "rank_groups", f"{where}.rank_groups"), f"{where}.rank_groups")):
                gd = self.obj(g, f"{where}.rank_groups[{k}]")
                groups.append((self.integer(self.req(gd, "size", f"{where}.rank_groups[{k}].size"),
                                        f"{where}.rank_groups[{k}].size"),
                               self.ints(self.req(gd, "ranks", f"{where}.rank_groups[{k}].ranks"),
                                         f"{where}.rank_groups[{k}].ranks")))
            key = "buffer_type" if "buffer_type" in d or "buff" not in d else "buff"
            btype = self.token(self.req(d, key, f"{where}.{key}"), f"{where}.{key}", BUFFER_TYPES)
            return ChannelDecl(ctype, buffer_type=btype, rank_groups=tuple(groups), buffer_key=key)
        peers = self.ints(self.req(d, "connected_to", f"{where}.connected_to"), f"{where}.connected_to")
        return ChannelDecl(ctype, connected_to=peers)

    def rbuf(self, v: Any, where: str) -> RemoteBuffer:
        d = self.obj(v, where)
        types = self.seq(self.req(d, "access_channel_types", f"{where}.access_channel_types"),
                          f"{where}.access_channel_types")
        return RemoteBuffer(
            rank=self.integer(self.req(d, "rank", f"{where}.rank"), f"{where}.rank"),
            type=self.token(self.req(d, "type", f"{where}.type"), f"{where}.type", BUFFER_TYPES),
            access_channel_types=tuple(
                self.token(t, f"{where}.access_channel_types[{k}]", CHANNEL_TYPES) for k, t in enumerate(types)
            ),
        )

    def tb(self, v: Any, where: str) -> Threadblock:
        d = self.obj(v, where)
        ops_raw = self.seq(self.req(d, "ops", f"{where}.ops"), f"{where}.ops", _MAX_OPS)
        chans = []
        for k, c in enumerate(self.seq(d.get("channels", []), f"{where}.channels")):
            cw = f"{where}.channels[{k}]"
            cd = self.obj(c, cw)
            chans.append(TbChannels(
                channel_type=self.token(self.req(cd, "channel_type", f"{cw}.channel_type"), f"{cw}.channel_type",
                                        CHANNEL_TYPES),
                channel_ids=self.ints(self.req(cd, "channel_ids", f"{cw}.channel_ids"), f"{cw}.channel_ids"),
                buff=self.token(cd["buff"], f"{cw}.buff", BUFFER_TYPES) if "buff" in cd else None,
            ))
        refs = []
        for k, c in enumerate(self.seq(d.get("remote_buffer_refs", []), f"{where}.remote_buffer_refs")):
            cw = f"{where}.remote_buffer_refs[{k}]"
            cd = self.obj(c, cw)
            refs.append(TbRemoteRefs(
                access_channel_type=self.token(self.req(cd, "access_channel_type", f"{cw}.access_channel_type"),
                                               f"{cw}.access_channel_type", CHANNEL_TYPES),
                remote_buffer_ids=self.ints(self.req(cd, "remote_buffer_ids", f"{cw}.remote_buffer_ids"),
                                            f"{cw}.remote_buffer_ids"),
            ))
        return Threadblock(
            id=self.integer(self.req(d, "id", f"{where}.id"), f"{where}.id"),
            ops=tuple(self.op(o, f"{where}.ops[{k}]", nested=False) for k, o in enumerate(ops_raw)),
            channels=tuple(chans),
            remote_buffer_refs=tuple(refs),
        )

    def op(self, v: Any, where: str, *, nested: bool) -> Op:
        d = self.obj(v, where)
        name = self.token(self.req(d, "name", f"{where}.name"), f"{where}.name", OP_NAMES)
        inner: tuple[Op, ...] = ()
        if name == "pipeline":
            if nested:
                raise self.fail(where, "a pipeline inside a pipeline")
            inner_raw = self.seq(self.req(d, "ops", f"{where}.ops"), f"{where}.ops", _MAX_OPS)
            inner = tuple(self.op(o, f"{where}.ops[{k}]", nested=True) for k, o in enumerate(inner_raw))
        tbg = None
        if "tbg_info" in d:
            t = self.obj(d["tbg_info"], f"{where}.tbg_info")
            size = self.integer(self.req(t, "tbg_size", f"{where}.tbg_info.tbg_size"), f"{where}.tbg_info.tbg_size",
                            lo=1, hi=1024)
            tbg = (self.integer(self.req(t, "tb_id", f"{where}.tbg_info.tb_id"), f"{where}.tbg_info.tb_id",
                            hi=size - 1), size)
        it = None
        if "iter_context" in d:
            c = self.obj(d["iter_context"], f"{where}.iter_context")
            it = (self.integer(self.req(c, "unit_size", f"{where}.iter_context.unit_size"),
                           f"{where}.iter_context.unit_size", lo=1),
                  self.integer(self.req(c, "num_chunks", f"{where}.iter_context.num_chunks"),
                           f"{where}.iter_context.num_chunks"))
        return Op(
            name=name,
            src_buff=self.bufs(d, "src_buff", where),
            dst_buff=self.bufs(d, "dst_buff", where),
            channel_ids=self.ints(d["channel_ids"], f"{where}.channel_ids") if "channel_ids" in d else None,
            channel_type=(self.token(d["channel_type"], f"{where}.channel_type", CHANNEL_TYPES)
                          if "channel_type" in d else None),
            reduce_op=self.text(d["reduce_op"], f"{where}.reduce_op") if "reduce_op" in d else None,
            semaphore_ids=self.ints(d["semaphore_ids"], f"{where}.semaphore_ids") if "semaphore_ids" in d else None,
            barrier_id=self.integer(d["barrier_id"], f"{where}.barrier_id") if "barrier_id" in d else None,
            num_threadblocks=(self.integer(d["num_threadblocks"], f"{where}.num_threadblocks", lo=1)
                              if "num_threadblocks" in d else None),
            tbg=tbg,
            iter_context=it,
            ops=inner,
            extra=tuple((k, json.dumps(x, sort_keys=True)) for k, x in d.items() if k not in _OP_KEYS),
        )

    def bufs(self, d: dict[str, Any], key: str, where: str) -> tuple[BufferRef, ...]:
        if key not in d:
            return ()
        out = []
        for k, b in enumerate(self.seq(d[key], f"{where}.{key}", 64)):
            bw = f"{where}.{key}[{k}]"
            bd = self.obj(b, bw)
            names = [n for n in ("type", "buffer_id", "switch_channel_id") if n in bd]
            if len(names) != 1:
                raise self.fail(bw, "needs exactly one of type, buffer_id, switch_channel_id")
            out.append(BufferRef(
                index=self.integer(self.req(bd, "index", f"{bw}.index"), f"{bw}.index", hi=2**31 - 1),
                size=self.integer(self.req(bd, "size", f"{bw}.size"), f"{bw}.size", hi=2**31 - 1),
                type=self.token(bd["type"], f"{bw}.type", BUFFER_TYPES) if "type" in bd else None,
                buffer_id=self.integer(bd["buffer_id"], f"{bw}.buffer_id") if "buffer_id" in bd else None,
                switch_channel_id=(self.integer(bd["switch_channel_id"], f"{bw}.switch_channel_id")
                                   if "switch_channel_id" in bd else None),
            ))
        return tuple(out)


def _show(v: Any) -> str:
    if isinstance(v, (dict, list)):
        text = type(v).__name__
    else:
        try:
            text = json.dumps(v)
        except (TypeError, ValueError):
            text = type(v).__name__
    return text if len(text) <= 40 else text[:37] + "..."

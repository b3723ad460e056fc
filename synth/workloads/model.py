"""A training iteration of one pipeline stage as a DAG of compute phases and collectives.

The JSON format (``loopcoll.workload/1``) is documented in ``docs/workloads.md``.

* **Communicators** name rank sets: ``{"ranks": [...]}`` or ``{"start": s, "stride": d, "size": n}``
  (ranks ``s, s+d, …``). ``relay_share`` (optional, in (0, 1]) says that the collective is one of
  ``1/relay_share`` identical sibling collectives running at once (e.g. the 8 rail groups of a
  data-parallel step): synthesized schedules may then relay through the other GPUs of the job,
  but only with that share of every link.
* **Ops** run in list order on their ``stream``: an op starts when its stream is free and every
  op it lists in ``after`` (earlier ops only) has finished. A ``compute`` op takes ``flops`` /
  (peak × utilisation) or its ``time_s``; a collective (``allgather``, ``reducescatter``,
  ``allreduce``, ``alltoall``) moves ``bytes`` = the nccl-tests numerator ``S`` (AllGather total
  output, ReduceScatter per-rank input, AllReduce buffer, AllToAll per-rank buffer) on ``comm``.

>>> w = Workload.from_dict({"format": "loopcoll.workload/1", "name": "tiny", "gpus": 16,
...     "compute": {"peak_tflops": 1000.0, "mfu": 0.5},
...     "communicators": {"dp": {"start": 0, "stride": 8, "size": 2}},
...     "ops": [{"name": "f", "kind": "compute", "flops": 1e12},
...             {"name": "g", "kind": "allreduce", "comm": "dp", "bytes": 1e9, "after": ["f"]}]})
>>> w.communicator_ranks("dp"), w.compute_time_s(w.ops[0])
((0, 8), 0.002)
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from synth._atomic import write_text_atomic
from synth.collective import COLLECTIVES
from synth.errors import LoopcollError

__all__ = ["COLLECTIVE_KINDS", "WORKLOAD_FORMAT", "Communicator", "Op", "Workload", "WorkloadError", "read_workload",
           "write_workload"]

WORKLOAD_FORMAT = "loopcoll.workload/1"
#: The collective kinds an op may have (every :class:`~synth.collective.Collective`).
COLLECTIVE_KINDS = COLLECTIVES


class WorkloadError(LoopcollError):
    """A workload (file, dict or generator argument) is invalid."""


def _num(value: Any, what: str, *, positive: bool = False, allow_zero: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise WorkloadError(f"{what} must be a finite number, got {value!r}")
    if value < 0 or (value == 0 and (positive or not allow_zero)):
        raise WorkloadError(f"{what} must be {'> 0' if positive else '>= 0'}, got {value!r}")
    return float(value)


def _int(value: Any, what: str, lo: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < lo:
        raise WorkloadError(f"{what} must be an integer >= {lo}, got {value!r}")
    return value


def _keys(doc: Any, what: str, required: set[str], optional: set[str]) -> Mapping[str, Any]:
    if not isinstance(doc, Mapping):
        raise WorkloadError(f"{what} must be a JSON object, got {type(doc).__name__}")
    missing = sorted(required - set(doc))
    if missing:
        raise WorkloadError(f"{what}: missing key {missing[0]!r}")
    extra = sorted(set(doc) - required - optional)
    if extra:
        raise WorkloadError(f"{what}: unknown key {extra[0]!r}")
    return doc


@dataclass(frozen=True)
class Communicator:
    """A named rank set; ``relay_share`` as in the module docstring (None: no relaying)."""

    name: str
    ranks: tuple[int, ...]
    relay_share: float | None = None

    def to_dict(self) -> dict[str, Any]:
        n = len(self.ranks)
        d = self.ranks[1] - self.ranks[0]
        doc: dict[str, Any]
        if all(self.ranks[i] == self.ranks[0] + i * d for i in range(n)) and d > 0:
            doc = {"start": self.ranks[0], "stride": d, "size": n}
        else:
            doc = {"ranks": list(self.ranks)}
        if self.relay_share is not None:
            doc["relay_share"] = self.relay_share
        return doc


@dataclass(frozen=True)
class Op:
    """One compute phase or collective of the iteration."""

    name: str
    kind: str
    stream: str
    after: tuple[str, ...] = ()
    flops: float | None = None
    time_s: float | None = None
    comm: str | None = None
    nbytes: float | None = None
    label: str = ""

    @property
    def is_collective(self) -> bool:
        return self.kind != "compute"

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"name": self.name, "kind": self.kind, "stream": self.stream}
        if self.after:
            doc["after"] = list(self.after)
        for key, val in (("flops", self.flops), ("time_s", self.time_s), ("comm", self.comm), ("bytes", self.nbytes)):
            if val is not None:
                doc[key] = val
        if self.label:
            doc["label"] = self.label
        return doc


@dataclass(frozen=True)
class Workload:
    """A validated workload: GPUs of the stage, compute model, communicators, ops (a DAG)."""

    name: str
    gpus: int
    peak_tflops: float
    mfu: float
    communicators: Mapping[str, Communicator]
    ops: tuple[Op, ...]
    description: str = ""
    meta: Mapping[str, Any] = field(default_factory=dict)

    def communicator_ranks(self, name: str) -> tuple[int, ...]:
        return self.communicators[name].ranks

    def compute_time_s(self, op: Op) -> float:
        """Seconds of a compute op: its ``time_s``, else flops / (peak × mfu)."""
        if op.time_s is not None:
            return op.time_s
        assert op.flops is not None
        return op.flops / (self.peak_tflops * 1e12 * self.mfu)

    def collective_keys(self) -> list[tuple[str, str]]:
        """Distinct (collective, communicator) pairs, in first-use order."""
        seen: dict[tuple[str, str], None] = {}
        for op in self.ops:
            if op.is_collective:
                assert op.comm is not None
                seen[(op.kind, op.comm)] = None
        return list(seen)

    @classmethod
    def from_dict(cls, doc: Any, where: str = "workload") -> Workload:
        doc = _keys(doc, where, {"format", "name", "gpus", "compute", "communicators", "ops"}, {"description", "meta"})
        if doc["format"] != WORKLOAD_FORMAT:
            raise WorkloadError(f"{where}: format must be {WORKLOAD_FORMAT!r}, got {doc['format']!r}")
        name = doc["name"]
        if not isinstance(name, str) or not name:
            raise WorkloadError(f"{where}: name must be a non-empty string, got {name!r}")
        gpus = _int(doc["gpus"], f"{where}: gpus", 2)
        comp = _keys(doc["compute"], f"{where}: compute", {"peak_tflops", "mfu"}, set())
        peak = _num(comp["peak_tflops"], f"{where}: compute.peak_tflops", positive=True)
        mfu = _num(comp["mfu"], f"{where}: compute.mfu", positive=True)
        if mfu > 1:
            raise WorkloadError(f"{where}: compute.mfu must be in (0, 1], got {mfu!r}")
        comms_doc = doc["communicators"]
        if not isinstance(comms_doc, Mapping) or not comms_doc:
            raise WorkloadError(f"{where}: communicators must be a non-empty object")
        comms: dict[str, Communicator] = {}
        for cname, cdoc in comms_doc.items():
            comms[str(cname)] = _communicator(cname, cdoc, where, gpus)
        if not isinstance(doc["ops"], list) or not doc["ops"]:
            raise WorkloadError(f"{where}: ops must be a non-empty list")
        ops: list[Op] = []
        names: set[str] = set()
        for i, odoc in enumerate(doc["ops"]):
            ow = f"{where}: ops[{i}]"
            odoc = _keys(odoc, ow, {"name", "kind"}, {"stream", "after", "flops", "time_s", "comm", "bytes", "label"})
            oname, kind = odoc["name"], odoc["kind"]
            if not isinstance(oname, str) or not oname or oname in names:
                raise WorkloadError(f"{ow}: name must be a unique non-empty string, got {oname!r}")
            ow = f"{where}: op {oname!r}"
            after = odoc.get("after", [])
            if not isinstance(after, list) or any(a not in names for a in after):
                bad = next((a for a in after if a not in names), after) if isinstance(after, list) else after
                raise WorkloadError(f"{ow}: after must list names of earlier ops, got {bad!r}")
            if kind == "compute":
                if ("flops" in odoc) == ("time_s" in odoc):
                    raise WorkloadError(f"{ow}: a compute op needs exactly one of flops, time_s")
                if "comm" in odoc or "bytes" in odoc:
                    raise WorkloadError(f"{ow}: a compute op has no comm or bytes")
                flops = _num(odoc["flops"], f"{ow}: flops") if "flops" in odoc else None
                tsec = _num(odoc["time_s"], f"{ow}: time_s") if "time_s" in odoc else None
                op = Op(oname, kind, str(odoc.get("stream", "compute")), tuple(after), flops=flops, time_s=tsec,
                        label=str(odoc.get("label", "")))
            elif kind in COLLECTIVE_KINDS:
                if "comm" not in odoc or odoc["comm"] not in comms:
                    raise WorkloadError(f"{ow}: comm must name a communicator ({', '.join(sorted(comms))}), "
                                        f"got {odoc.get('comm')!r}")
                if "bytes" not in odoc or "flops" in odoc or "time_s" in odoc:
                    raise WorkloadError(f"{ow}: a collective needs bytes (and no flops/time_s)")
                op = Op(oname, kind, str(odoc.get("stream", "comm")), tuple(after), comm=odoc["comm"],
                        nbytes=_num(odoc["bytes"], f"{ow}: bytes", positive=True), label=str(odoc.get("label", "")))
            else:
                raise WorkloadError(f"{ow}: kind must be compute or one of {', '.join(COLLECTIVE_KINDS)}, got {kind!r}")
            names.add(oname)
            ops.append(op)
        meta = doc.get("meta", {})
        if not isinstance(meta, Mapping):
            raise WorkloadError(f"{where}: meta must be an object")
        return cls(name, gpus, peak, mfu, comms, tuple(ops), str(doc.get("description", "")), dict(meta))

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": WORKLOAD_FORMAT, "name": self.name, "gpus": self.gpus, "description": self.description,
            "compute": {"peak_tflops": self.peak_tflops, "mfu": self.mfu},
            "communicators": {k: c.to_dict() for k, c in self.communicators.items()},
            "ops": [op.to_dict() for op in self.ops], "meta": dict(self.meta),
        }


def read_workload(path: str | Path) -> Workload:
    """Read a ``loopcoll.workload/1`` JSON file (errors name the file)."""
    p = Path(path)
    try:
        doc = json.loads(p.read_text())
    except OSError as exc:
        raise WorkloadError(f"cannot read workload {str(p)!r}: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise WorkloadError(f"workload {str(p)!r}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    return Workload.from_dict(doc, where=f"workload {str(p)!r}")


def write_workload(workload: Workload, path: str | Path) -> None:
    """Write ``workload`` as deterministic JSON, atomically."""
    write_text_atomic(Path(path), json.dumps(workload.to_dict(), indent=2, sort_keys=True) + "\n")


def _communicator(cname: Any, cdoc: Any, where: str, gpus: int) -> Communicator:
    """One entry of a workload's ``communicators``: explicit ranks or start/stride/size."""
    cw = f"{where}: communicator {cname!r}"
    cdoc = _keys(cdoc, cw, set(), {"ranks", "start", "stride", "size", "relay_share"})
    if "ranks" in cdoc:
        if {"start", "stride", "size"} & set(cdoc):
            raise WorkloadError(f"{cw}: give either ranks or start/stride/size")
        if not isinstance(cdoc["ranks"], list):
            raise WorkloadError(f"{cw}: ranks must be a list of integers")
        ranks = tuple(_int(r, f"{cw}: rank", 0) for r in cdoc["ranks"])
    else:
        start = _int(cdoc.get("start", 0), f"{cw}: start", 0)
        stride = _int(cdoc.get("stride", 1), f"{cw}: stride", 1)
        if "size" not in cdoc:
            raise WorkloadError(f"{cw}: needs ranks or size")
        size = _int(cdoc["size"], f"{cw}: size", 2)
        ranks = tuple(start + i * stride for i in range(size))
    if len(ranks) < 2 or len(set(ranks)) != len(ranks):
        raise WorkloadError(f"{cw}: needs at least 2 distinct ranks, got {list(ranks)[:8]}")
    if max(ranks) >= gpus:
        raise WorkloadError(f"{cw}: rank {max(ranks)} out of range for {gpus} GPUs")
    share = cdoc.get("relay_share")
    if share is not None:
        share = _num(share, f"{cw}: relay_share", positive=True)
        if share > 1:
            raise WorkloadError(f"{cw}: relay_share must be in (0, 1], got {share!r}")
    return Communicator(str(cname), ranks, share)

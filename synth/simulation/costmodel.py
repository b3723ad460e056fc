"""Cost model and calibration profiles: launch, per-hop and link-efficiency terms on top of the flow model.

The flow simulator alone is a pure bandwidth model (the ``ideal`` profile): links deliver their
nominal capacity and the only fixed costs are wire latencies of 0.025–0.5 µs. A
:class:`CostProfile` adds, per *executor kind* (what runs the schedule):

``launch_us``
    Once per collective: host API call, kernel launch, first synchronisation and the kernel's
    setup/teardown (the part of a small collective's time that does not shrink with its size).
``hop_us``
    Once per chunk hop on a dependency chain: the flag/fifo handshake a GPU pays before it can
    forward data it has just received (NCCL's per-step latency, an interpreter's per-instruction
    cost). It is added to every hop's latency, so a slice reaches the next GPU ``hop_us`` later;
    pipelined slices overlap it, so a schedule pays it about ``depth`` times (ring: N − 1, a
    binary tree: log2 N, direct: 1).
``efficiency[link class]``
    Achievable fraction of a link's nominal capacity for this executor (protocol headers, flag
    words, copy-engine vs SM copies, credit stalls). Link classes: ``nvlink`` (GPU ↔ NVSwitch),
    ``net`` (GPU ↔ NIC/ToR and switch ↔ switch) and ``direct`` (GPU ↔ GPU cables).

Executor kinds: ``nccl_ring`` (NCCL ring kernels: the ``nccl_ring`` baseline), ``nccl_tree``
(NCCL tree kernels), ``nccl_p2p`` (NCCL grouped send/recv: the direct AllToAll baseline),
``msccl`` (an MSCCL-style interpreter running a synthesized schedule) and ``torch_p2p``
(``torch.distributed.batch_isend_irecv``). :func:`executor_for` picks one from a schedule's
``meta["synthesizer"]``.

The completion time under a profile is ``launch_us + T_flow`` where ``T_flow`` is the flow
simulation with every link's capacity multiplied by its efficiency and ``hop_us`` added to every
hop's latency. The format of profile files (``loopcoll.calibration/1``) is in
``docs/calibration.md``.

A profile *file* need not cover every executor kind: :func:`load_profile` takes the kinds it
lacks from its ``base`` profile (the file's ``base`` field, default ``h200``) and records them in
:attr:`CostProfile.inherited`, which reports name (:func:`inherited_costs`).

>>> p = load_profile("h200")
>>> p.name, sorted(p.executors)[:2]
('h200', ['msccl', 'nccl_p2p'])
>>> IDEAL.is_ideal, load_profile("ideal") is IDEAL
(True, True)
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import lru_cache
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from synth.errors import LoopcollError
from synth.topologies import switch_roles

if TYPE_CHECKING:
    from synth.schedule import Schedule
    from synth.topologies.model import Link, Topology

__all__ = [
    "EXECUTORS",
    "FORMAT",
    "IDEAL",
    "LINK_CLASSES",
    "SHIPPED_PROFILES",
    "DEFAULT_BASE",
    "CostProfile",
    "ExecutorCost",
    "executor_for",
    "inherited_costs",
    "inherited_note",
    "link_class",
    "link_classes",
    "load_profile",
    "profile_from_dict",
    "profile_to_dict",
]

FORMAT = "loopcoll.calibration/1"
EXECUTORS = ("nccl_ring", "nccl_tree", "nccl_p2p", "msccl", "torch_p2p")
LINK_CLASSES = ("nvlink", "net", "direct")
SHIPPED_PROFILES = ("ideal", "h200")
DEFAULT_BASE = "h200"

_SYNTHESIZER_EXECUTOR = {"nccl-ring": "nccl_ring", "nccl-tree": "nccl_tree", "nccl-direct": "nccl_p2p"}


class ProfileError(LoopcollError):
    """A calibration profile is malformed or lacks what a simulation needs."""


@dataclass(frozen=True, slots=True)
class ExecutorCost:
    """The cost terms of one executor kind (microseconds; efficiencies are fractions of capacity).

    >>> ExecutorCost(20.0, 1.5, {"nvlink": 0.8}).efficiency["nvlink"]
    0.8
    """

    launch_us: float
    hop_us: float
    efficiency: Mapping[str, float]

    def __post_init__(self) -> None:
        for name, v in (("launch_us", self.launch_us), ("hop_us", self.hop_us)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ProfileError(f"executor cost `{name}` must be a finite number >= 0, got {v!r}")
        eff = dict(self.efficiency)
        for cls, v in eff.items():
            if cls not in LINK_CLASSES:
                raise ProfileError(f"unknown link class {cls!r} in efficiency; expected one of {', '.join(LINK_CLASSES)}")
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not 0 < v <= 4:
                raise ProfileError(f"efficiency of link class {cls!r} must be in (0, 4], got {v!r}")
        object.__setattr__(self, "launch_us", float(self.launch_us))
        object.__setattr__(self, "hop_us", float(self.hop_us))
        object.__setattr__(self, "efficiency", MappingProxyType({k: float(eff[k]) for k in sorted(eff)}))


@dataclass(frozen=True, slots=True)
class CostProfile:
    """A named set of executor costs; no executors at all is the pure bandwidth model ``ideal``.

    ``fit`` keeps the provenance block of a fitted profile (data, parameters' status, errors)
    verbatim for reports; the simulator reads only ``executors``. ``base`` names the profile that
    executor kinds this one lacks come from (files only, see :func:`load_profile`); ``inherited``
    maps each executor kind whose costs were copied from another profile (not measured for this
    one) to that profile's name.

    >>> p = CostProfile("mine", {"msccl": ExecutorCost(1.0, 0.0, {})}, inherited={"msccl": "h200"})
    >>> dict(p.inherited)
    {'msccl': 'h200'}
    """

    name: str
    executors: Mapping[str, ExecutorCost]
    description: str = ""
    fit: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    base: str = ""
    inherited: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        for kind in self.executors:
            if kind not in EXECUTORS:
                raise ProfileError(f"profile {self.name!r}: unknown executor kind {kind!r}; expected one of {', '.join(EXECUTORS)}")
        object.__setattr__(self, "executors", MappingProxyType(dict(sorted(self.executors.items()))))
        stray = sorted(set(self.inherited) - set(self.executors))
        if stray:
            raise ProfileError(f"profile {self.name!r}: `inherited` names executor(s) it has no costs for: {', '.join(stray)}")
        object.__setattr__(self, "inherited", MappingProxyType({k: str(v) for k, v in sorted(self.inherited.items())}))

    @property
    def is_ideal(self) -> bool:
        """True for the pure bandwidth model (no costs at all)."""
        return not self.executors

    def cost(self, executor: str) -> ExecutorCost:
        """The costs of ``executor``; raises :class:`ProfileError` naming the profile if it has none."""
        try:
            return self.executors[executor]
        except KeyError:
            via = f"; nor has its base profile {self.base!r}" if self.base else ""
            raise ProfileError(
                f"profile {self.name!r} has no costs for executor {executor!r} (it has {', '.join(self.executors) or 'none'}"
                f"{via}): measure {executor} too, or give it a base profile that has them (calibrate --base h200)"
            ) from None


IDEAL = CostProfile("ideal", {}, "pure bandwidth model: nominal link capacities, wire latencies only")


def link_classes(topology: Topology) -> list[str]:
    """The class of every link of ``topology``, in link order (see :func:`link_class`)."""
    roles = switch_roles(topology)
    gpus = {n.id for n in topology.nodes if n.is_gpu}
    out = []
    for link in topology.links:
        a, b = link.src in gpus, link.dst in gpus
        if a and b:
            out.append("direct")
            continue
        ends = [x for x in (link.src, link.dst) if x not in gpus]
        out.append("nvlink" if a != b and roles.get(ends[0]) == "nvswitch" else "net")
    return out


def link_class(topology: Topology, link: Link) -> str:
    """``nvlink`` (GPU ↔ a switch of role ``nvswitch``), ``direct`` (GPU ↔ GPU) or ``net`` (the rest).

    >>> from synth.topologies import named_topology
    >>> t = named_topology("h200-proto")
    >>> link_class(t, t.link("gpu0", "nvs0.0")), link_class(t, t.link("gpu0", "tor0.0"))
    ('nvlink', 'net')
    """
    return link_classes(topology)[topology.links.index(link)]


def executor_for(schedule: Schedule) -> str:
    """Executor kind that runs ``schedule``: NCCL baselines by their synthesizer tag, else ``msccl``.

    >>> from synth.baselines import nccl_ring
    >>> from synth.topologies import named_topology
    >>> executor_for(nccl_ring("allgather", named_topology("nvswitch:2")))
    'nccl_ring'
    """
    return _SYNTHESIZER_EXECUTOR.get(str(schedule.meta.get("synthesizer", "")), "msccl")


def inherited_costs(profile: CostProfile, executors: Iterable[str]) -> dict[str, str]:
    """Which of ``executors`` (the kinds a run used) took their costs from another profile: kind → its name.

    >>> inherited_costs(CostProfile("m", {"msccl": ExecutorCost(1, 0, {})}, inherited={"msccl": "h200"}), ["msccl"])
    {'msccl': 'h200'}
    >>> inherited_costs(load_profile("h200"), ["msccl"])
    {}
    """
    return {k: profile.inherited[k] for k in sorted(set(executors)) if k in profile.inherited}


def inherited_note(profile: CostProfile, executors: Iterable[str]) -> str | None:
    """One report line naming the executor costs of a run that came from a base profile, or ``None``.

    >>> inherited_note(CostProfile("m", {"msccl": ExecutorCost(1, 0, {})}, inherited={"msccl": "h200"}), ["msccl"])
    "profile 'm': msccl costs from base profile 'h200' (not calibrated here)"
    """
    got = inherited_costs(profile, executors)
    if not got:
        return None
    by_base: dict[str, list[str]] = {}
    for kind, src in got.items():
        by_base.setdefault(src, []).append(kind)
    parts = [f"{', '.join(kinds)} costs from base profile {src!r}" for src, kinds in sorted(by_base.items())]
    return f"profile {profile.name!r}: {'; '.join(parts)} (not calibrated here)"


def profile_to_dict(profile: CostProfile) -> dict[str, Any]:
    """The JSON document of ``profile`` (format ``loopcoll.calibration/1``)."""
    doc: dict[str, Any] = {
        "format": FORMAT,
        "name": profile.name,
        "description": profile.description,
        "executors": {
            k: {"launch_us": c.launch_us, "hop_us": c.hop_us, "efficiency": dict(c.efficiency)}
            for k, c in profile.executors.items()
        },
        "fit": _plain(profile.fit),
    }
    if profile.base:
        doc["base"] = profile.base
    if profile.inherited:
        doc["inherited"] = dict(profile.inherited)
    return doc


def _plain(obj: Any) -> Any:
    if isinstance(obj, Mapping):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    return obj


def profile_from_dict(doc: Any, where: str = "profile") -> CostProfile:
    """Parse and validate a ``loopcoll.calibration/1`` document."""
    if not isinstance(doc, dict):
        raise ProfileError(f"{where}: expected a JSON object")
    if doc.get("format") != FORMAT:
        raise ProfileError(f"{where}: `format` must be {FORMAT!r}, got {doc.get('format')!r}")
    name = doc.get("name")
    if not isinstance(name, str) or not name:
        raise ProfileError(f"{where}: `name` must be a non-empty string")
    execs = doc.get("executors")
    if not isinstance(execs, dict):
        raise ProfileError(f"{where}: `executors` must be an object")
    out = {}
    for kind, body in execs.items():
        if not isinstance(body, dict) or not isinstance(body.get("efficiency"), dict):
            raise ProfileError(f"{where}: executor {kind!r} needs launch_us, hop_us and an efficiency object")
        try:
            out[kind] = ExecutorCost(body.get("launch_us"), body.get("hop_us"), body["efficiency"])  # type: ignore[arg-type]
        except ProfileError as exc:
            raise ProfileError(f"{where}: executor {kind!r}: {exc}") from None
    fit = doc.get("fit", {})
    if not isinstance(fit, dict):
        raise ProfileError(f"{where}: `fit` must be an object")
    base = doc.get("base", "")
    if not isinstance(base, str):
        raise ProfileError(f"{where}: `base` must be a profile name or file path")
    inherited = doc.get("inherited", {})
    if not isinstance(inherited, dict) or not all(isinstance(v, str) for v in inherited.values()):
        raise ProfileError(f"{where}: `inherited` must map executor kinds to profile names")
    try:
        return CostProfile(name, out, str(doc.get("description", "")), fit, base, inherited)
    except ProfileError as exc:
        raise ProfileError(f"{where}: {exc}") from None


def _with_base(profile: CostProfile, where: Path, seen: frozenset[Path]) -> CostProfile:
    """``profile`` with the executor kinds it lacks copied from its base (``DEFAULT_BASE`` if it names none)."""
    missing = [k for k in EXECUTORS if k not in profile.executors]
    ref = profile.base or DEFAULT_BASE
    if not missing or ref == "ideal":
        return profile
    if ref in SHIPPED_PROFILES:
        base = _shipped(ref)
    else:
        path = where.parent / ref if (where.parent / ref).is_file() else Path(ref)
        if path.resolve() in seen:
            raise ProfileError(f"{where}: base profile {ref!r} leads back to itself")
        base = _load_file(path, seen)
    executors = dict(profile.executors)
    inherited = dict(profile.inherited)
    for kind in missing:
        if kind in base.executors:
            executors[kind] = base.executors[kind]
            inherited[kind] = base.inherited.get(kind, base.name)
    return replace(profile, executors=executors, base=ref, inherited=inherited)


def _load_file(path: Path, seen: frozenset[Path] = frozenset()) -> CostProfile:
    if not path.is_file():
        raise ProfileError(f"profile {str(path)!r}: neither a shipped profile ({', '.join(SHIPPED_PROFILES)}) nor a readable file")
    where = str(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ProfileError(f"{where}: not JSON ({exc.msg} at line {exc.lineno})") from None
    return _with_base(profile_from_dict(doc, where), path, seen | {path.resolve()})


@lru_cache(maxsize=None)
def _shipped(name: str) -> CostProfile:
    raw = resources.files("synth.simulation").joinpath(f"profiles/{name}.json").read_text(encoding="utf-8")
    return profile_from_dict(json.loads(raw), f"shipped profile {name!r}")


def load_profile(name_or_path: str | Path | CostProfile | None) -> CostProfile:
    """A shipped profile by name (``ideal``, ``h200``), a ``loopcoll.calibration/1`` file, or pass-through.

    ``None`` is ``ideal``. A file's missing executor kinds come from its ``base`` (a shipped name
    or a file path, relative to the file's folder; default ``h200``; ``ideal`` adds none) and are
    listed in :attr:`CostProfile.inherited`.
    """
    if name_or_path is None:
        return IDEAL
    if isinstance(name_or_path, CostProfile):
        return name_or_path
    text = str(name_or_path)
    if text == "ideal":
        return IDEAL
    if text in SHIPPED_PROFILES:
        return _shipped(text)
    return _load_file(Path(text))

"""Export targets: the runtimes a schedule is deployed to, their chunk limits and their program bytes.

A target answers two questions for :mod:`msccl_xml.deploy`: how many chunks per source it can
address on ``nranks`` GPUs (:meth:`Target.chunk_cap`; ``None``: no fixed cap, the fitting policy
halves the chunks while the program is over a limit) and what program text runs a schedule in one
size band (:meth:`Target.render`, checked; raises :class:`~synth.errors.RuntimeLimitError` when a
limit is not met). The MSCCL runtimes and loopcoll's own torch executor are defined here; the
MSCCL++ target is :class:`mscclpp_plan.target.MscclppTarget` (that package stands above this one).

Examples
--------
>>> target("msccl-executor-nccl").chunk_cap("allgather", 256)
128
>>> target("torch").chunk_cap("allgather", 256) is None
True
>>> sorted(TARGETS)
['msccl-executor-nccl', 'msccl-legacy', 'rccl', 'torch']
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from synth.errors import XmlError
from synth.schedule import Schedule
from synth.topologies.model import Topology

from ._export import render_xml
from .limits import RUNTIMES, runtime_limits

__all__ = ["TARGETS", "MscclTarget", "SizeBand", "Target", "TorchTarget", "target"]

SizeBand = tuple[int, "int | None"]
"""``(min_bytes, max_bytes)``, both inclusive; ``max_bytes=None``: no upper end."""


@runtime_checkable
class Target(Protocol):
    """Where a schedule is deployed: its name, its chunk limit and its checked program bytes."""

    @property
    def name(self) -> str:
        """The target's name, as messages say it (``"msccl-executor-nccl"``, ``"MSCCL++"``, ``"torch"``)."""
        ...

    def chunk_cap(self, collective: str, nranks: int) -> int | None:
        """Most chunks per source (per block for AllToAll) the target addresses; ``None``: no fixed cap."""
        ...

    def render(self, schedule: Schedule, topology: Topology, band: SizeBand, protocol: str) -> bytes:
        """The checked program that runs ``schedule`` on ``topology`` for sizes in ``band``."""
        ...


@dataclass(frozen=True, slots=True)
class MscclTarget:
    """An MSCCL runtime (a key of :data:`msccl_xml.limits.RUNTIMES`): MSCCL XML, int16 chunk offsets.

    >>> MscclTarget("rccl").chunk_cap("alltoall", 16)
    2048
    """

    runtime: str = "msccl-executor-nccl"

    def __post_init__(self) -> None:
        runtime_limits(self.runtime)  # an unknown runtime is an XmlError naming the known ones

    @property
    def name(self) -> str:
        """The runtime's name."""
        return self.runtime

    def chunk_cap(self, collective: str, nranks: int) -> int:
        """``(max_offset + 1) // nranks``: a buffer of ``nranks · chunks`` chunks needs int16 offsets."""
        return (runtime_limits(self.runtime).max_offset + 1) // nranks

    def render(self, schedule: Schedule, topology: Topology, band: SizeBand, protocol: str) -> bytes:
        """The checked MSCCL XML (UTF-8) with ``band`` as its ``<algo minBytes maxBytes>``."""
        lo, hi = band
        text = render_xml(schedule, topology, runtime=self.runtime, protocol=protocol, min_bytes=lo,
                          max_bytes=0 if hi is None else hi)
        return text.encode("utf-8")


@dataclass(frozen=True, slots=True)
class TorchTarget:
    """loopcoll's own executor (:mod:`runtime.executor`): it takes the schedule JSON and lowers it
    itself, so there is no XML limit here (the protocol and the band do not change the bytes).

    >>> from synth import load_topology, synthesize
    >>> topo = load_topology("ring:4")
    >>> TorchTarget().render(synthesize("allgather", topo).schedule, topo, (0, None), "Simple")[:1]
    b'{'
    """

    @property
    def name(self) -> str:
        """``"torch"``."""
        return "torch"

    def chunk_cap(self, collective: str, nranks: int) -> None:
        """No fixed cap."""
        return None

    def render(self, schedule: Schedule, topology: Topology, band: SizeBand, protocol: str) -> bytes:
        """The schedule JSON (UTF-8)."""
        return schedule.to_json().encode("utf-8")


TARGETS: dict[str, Target] = {**{name: MscclTarget(name) for name in RUNTIMES}, "torch": TorchTarget()}
"""The targets this package defines, by name."""


def target(name: str) -> Target:
    """The target called ``name`` (an MSCCL runtime or ``"torch"``).

    Raises
    ------
    XmlError
        If the name is unknown; the message lists the known ones.

    >>> target("msccl-legacy").name
    'msccl-legacy'
    """
    try:
        return TARGETS[name]
    except (KeyError, TypeError):
        raise XmlError(f"unknown export target {name!r}; expected one of {sorted(TARGETS)} "
                       "(or an MscclppTarget from mscclpp_plan.target)") from None

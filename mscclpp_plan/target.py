"""The MSCCL++ export target (:class:`msccl_xml.targets.Target`): MSCCL++ execution plan JSON.

Its binding limit is operations per threadblock (:data:`mscclpp_plan.limits.MAX_OPERATION`), not
chunk offsets, so it has no fixed chunk cap: :func:`msccl_xml.deploy.fit` halves the chunks while
the plan is over a limit.

>>> from msccl_xml.targets import Target
>>> isinstance(MscclppTarget(), Target), MscclppTarget().chunk_cap("allgather", 16)
(True, None)
"""

from __future__ import annotations

from dataclasses import dataclass

from synth.schedule import Schedule
from synth.topologies import Topology

from ._export import render_plan
from .errors import PlanError

__all__ = ["MscclppTarget"]


@dataclass(frozen=True, slots=True)
class MscclppTarget:
    """MSCCL++ plans, in place or out of place (protocol Simple only)."""

    inplace: bool = False

    @property
    def name(self) -> str:
        """``"MSCCL++"``."""
        return "MSCCL++"

    def chunk_cap(self, collective: str, nranks: int) -> None:
        """No fixed cap (the limit is operations per threadblock)."""
        return None

    def render(self, schedule: Schedule, topology: Topology, band: tuple[int, int | None], protocol: str) -> bytes:
        """The checked plan JSON (UTF-8); a plan carries no size band.

        Raises
        ------
        PlanError
            If ``protocol`` is not ``"Simple"``, or as :func:`mscclpp_plan.render_plan`.
        """
        if protocol != "Simple":
            raise PlanError(f"--protocol {protocol}: MSCCL++ plans are lowered with protocol Simple only "
                            "(LL packets are read and checked, not generated)")
        return render_plan(schedule, topology, inplace=self.inplace).encode("utf-8")

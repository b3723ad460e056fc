"""Schedule → checked MSCCL++ plan text (:func:`render_plan`), and on disk atomically (:func:`export`)."""

from __future__ import annotations

import math
import os

from synth.fileio import write_text_atomic
from synth.schedule import Schedule
from synth.topologies import Topology

from .checker import check, plan_algbw_GBps
from ._args import need, need_path
from .errors import PlanError
from .lowering import lower_schedule
from .reader import parse
from .writer import write

__all__ = ["export", "render_plan"]


def export(
    sched: Schedule, topo: Topology, path: str | os.PathLike[str], *, inplace: bool = False, name: str | None = None
) -> str:
    """Lower and check (:func:`render_plan`), then write the plan to ``path`` atomically; returns the JSON text.

    Raises
    ------
    PlanError
        As :func:`render_plan`, or if ``path`` is not a path.
    """
    need(topo, Topology, "topo")
    need_path(path, "path")
    text = render_plan(sched, topo, inplace=inplace, name=name)
    write_text_atomic(path, text)
    return text


def render_plan(sched: Schedule, topo: Topology, *, inplace: bool = False, name: str | None = None) -> str:
    """The checked MSCCL++ plan JSON of ``sched``: lower, write, re-parse and check; valid and at the
    schedule's algbw on ``topo``, or an error. Nothing is written.

    Raises
    ------
    PlanError
        If lowering fails (:class:`~mscclpp_plan.errors.PlanLimitError` for a limit), the
        re-parsed plan is invalid, or its algbw differs from the schedule's (a transfer that
        leaves the runtime's switch path, as for MSCCL XML).

    Examples
    --------
    >>> from synth import load_topology, synthesize
    >>> topo = load_topology("ring:4")
    >>> render_plan(synthesize("allgather", topo).schedule, topo).startswith("{")
    True
    """
    need(topo, Topology, "topo")
    plan = lower_schedule(sched, topo, inplace=inplace, name=name, verify=False)
    text = write(plan)
    parsed = parse(text)
    verdict = check(parsed)
    if not verdict.valid:
        raise PlanError(f"lowered plan for {sched.collective} on {topo.name} fails its check: {verdict.errors[0]}")
    plan_GBps, sched_GBps = plan_algbw_GBps(parsed, topo), sched.algbw_GBps(topo)
    if not math.isclose(plan_GBps, sched_GBps, rel_tol=1e-9):
        raise PlanError(
            f"lowered plan for {sched.collective} on {topo.name} runs at {plan_GBps:.6g} GB/s, not the schedule's "
            f"{sched_GBps:.6g} GB/s: a plan names peers, not physical paths, and some hop leaves the switch path"
        )
    return text

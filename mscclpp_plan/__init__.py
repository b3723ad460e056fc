"""MSCCL++ execution plans: model, reader, writer, checker, and lowering from loopcoll schedules.

Targets the plan format of microsoft/mscclpp at commit :data:`MSCCLPP_COMMIT` (``docs/mscclpp.md``).

Examples
--------
>>> from mscclpp_plan import check, lower_schedule, parse, write
>>> from synth.schedule import Hop, Route, RouteKind, Schedule
>>> ring = Schedule("allgather", 3, 1, tuple(
...     Route(RouteKind.OUT_TREE, r, 1, (Hop(r, (r + 1) % 3, (f"gpu{r}", f"gpu{(r + 1) % 3}")),
...                                      Hop((r + 1) % 3, (r + 2) % 3, (f"gpu{(r + 1) % 3}", f"gpu{(r + 2) % 3}"))))
...     for r in range(3)))
>>> plan = lower_schedule(ring)
>>> parse(write(plan)) == plan, check(plan).valid
(True, True)
"""

from __future__ import annotations

from .checker import (
    PlanCheckResult,
    PlanCheckStatus,
    check,
    check_file,
    check_text,
    plan_algbw_GBps,
    plan_link_loads,
)
from ._export import export, render_plan
from .errors import PlanError, PlanLimitError
from .limits import MSCCLPP_COMMIT
from .lowering import lower, lower_schedule
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
from .reader import parse, parse_obj, read
from .writer import to_obj, write, write_file

__all__ = [
    "MSCCLPP_COMMIT",
    "BufferRef",
    "ChannelDecl",
    "Op",
    "Plan",
    "PlanCheckResult",
    "PlanCheckStatus",
    "PlanError",
    "PlanGpu",
    "PlanLimitError",
    "RemoteBuffer",
    "TbChannels",
    "TbRemoteRefs",
    "Threadblock",
    "check",
    "check_file",
    "check_text",
    "export",
    "lower",
    "lower_schedule",
    "parse",
    "parse_obj",
    "plan_algbw_GBps",
    "plan_link_loads",
    "read",
    "render_plan",
    "to_obj",
    "write",
    "write_file",
]

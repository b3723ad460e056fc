"""Staging: programs checked against the communicator and compiled into plans, with the time each step took.

>>> from msccl_xml import lower
>>> from synth.schedule import Hop, Route, RouteKind, Schedule
>>> ag = Schedule("allgather", 2, 1, (
...     Route(RouteKind.OUT_TREE, 0, 1, (Hop(0, 1, ("gpu0", "gpu1")),)),
...     Route(RouteKind.OUT_TREE, 1, 1, (Hop(1, 0, ("gpu1", "gpu0")),))))
>>> plans, split = compile_programs([lower(ag)], size=2, comm="w", version=1)
>>> sorted(plans), sorted(split)
(['allgather'], ['check_s', 'compile_s'])
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from msccl_xml import Program, check

from .errors import ExecutorError, StagingError
from .plan import Plan, compile_program

__all__ = ["compile_programs"]


def compile_programs(programs: Sequence[Program], *, size: int, comm: str,
                     version: int) -> tuple[dict[str, tuple[Plan, ...]], dict[str, float]]:
    """Per collective, the plans of ``programs`` sorted by ``min_bytes``; and the seconds spent checking
    (``msccl_xml.check``) and compiling them.

    Raises
    ------
    StagingError
        If there is no program, one is for another number of ranks than ``size``, fails its check, or
        does not compile.
    """
    if not programs:
        raise StagingError(f"version {version}: nothing to stage")
    t0 = time.perf_counter()
    plans: dict[str, list[Plan]] = {}
    checking = 0.0
    for prog in programs:
        plan, check_s = _validate(prog, size, comm, version)
        checking += check_s
        plans.setdefault(plan.collective, []).append(plan)
    staged = {c: tuple(sorted(p, key=lambda x: x.min_bytes)) for c, p in plans.items()}
    return staged, {"check_s": checking, "compile_s": time.perf_counter() - t0 - checking}


def _validate(prog: Program, size: int, comm: str, version: int) -> tuple[Plan, float]:
    where = f"version {version} program {prog.name!r}"
    if prog.ngpus != size:
        raise StagingError(f"{where}: ngpus={prog.ngpus} but comm {comm!r} has {size} ranks")
    t0 = time.perf_counter()
    result = check(prog)
    check_s = time.perf_counter() - t0
    if not result.valid:
        raise StagingError(f"{where} fails validation: {result.errors[0]}")
    try:
        plan = compile_program(prog)
    except ExecutorError as exc:
        raise StagingError(f"{where}: {exc}") from exc
    return plan, check_s

"""Check an MSCCL++ execution plan: structure and limits, deadlocks, races, postcondition; algbw.

:func:`check` runs the structural rules (:mod:`mscclpp_plan._structure`: ids, cross references,
operand shapes, the executor's limits) and, when they pass, a symbolic execution
(:mod:`mscclpp_plan._simulate`) that finds deadlocks, data races, out-of-bounds accesses and
postcondition failures of allgather, reducescatter, allreduce and alltoall in the plan's mode
(``inplace``). :func:`plan_algbw_GBps` gives the bandwidth-term algbw of the plan on a topology
by the same rule as :func:`msccl_xml.program_algbw_GBps`.

Examples
--------
>>> from mscclpp_plan.model import BufferRef, Op, Plan, PlanGpu, Threadblock
>>> copy = Op("copy", (BufferRef(0, 1, type="i"),), (BufferRef(0, 1, type="o"),))
>>> plan = Plan("one", "allreduce", "Simple", False, (PlanGpu(0, 1, 1, 0, (Threadblock(0, (copy,)),)),))
>>> check(plan).valid
True
>>> check(Plan("x", "allgather", "Simple", False, (PlanGpu(0, 1, 1, 0, ()), PlanGpu(1, 1, 1, 0, ())))).errors[0]
'plan: allgather needs output_chunks = 2 * input_chunks, got 1 and 1'
"""

from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass
from enum import Enum

from msccl_xml import switch_path, verdict_message
from synth.topologies import Topology

from ._simulate import Transfer, simulate, units_per_chunk
from ._structure import canonical_collective, structural_problems
from ._args import need, need_path, need_str
from .errors import PlanError
from .model import Plan
from .reader import parse, parse_obj, read
from .writer import to_obj

__all__ = [
    "PlanCheckResult",
    "PlanCheckStatus",
    "check",
    "check_file",
    "check_text",
    "plan_algbw_GBps",
    "plan_link_loads",
]

_MAX_ERRORS = 100


class PlanCheckStatus(Enum):
    """Closed set of verdicts."""

    VALID = "valid"
    INVALID = "invalid"


@dataclass(frozen=True, slots=True)
class PlanCheckResult:
    """The verdict on one plan; ``status``, ``message``, ``success``, ``valid`` derive from ``errors``."""

    errors: tuple[str, ...]
    warnings: tuple[str, ...]
    collective: str
    nranks: int

    @property
    def status(self) -> PlanCheckStatus:
        """``VALID`` when ``errors`` is empty, else ``INVALID``."""
        return PlanCheckStatus.INVALID if self.errors else PlanCheckStatus.VALID

    @property
    def success(self) -> bool:
        """True when the plan is valid."""
        return not self.errors

    @property
    def valid(self) -> bool:
        """Same as :attr:`success`."""
        return not self.errors

    @property
    def message(self) -> str:
        """One line: the verdict, and the first error when there is one."""
        return verdict_message(f"MSCCL++ plan, {self.collective} on {self.nranks} ranks", self.errors, self.warnings)


def check(plan: Plan) -> PlanCheckResult:
    """Check ``plan`` (see the module docstring)."""
    need(plan, Plan, "plan")
    plan = parse_obj(to_obj(plan), source=f"plan {plan.name!r}")  # hand-built plans get the reader's checks
    errors, warnings = structural_problems(plan)
    if not errors:
        sim_errors, sim_warnings, _ = simulate(plan)
        errors.extend(sim_errors)
        warnings.extend(sim_warnings)
        if not any("deadlock" in e for e in sim_errors):  # back-to-back launches: hazards one cannot show
            again, _, _ = simulate(plan, runs=2)
            errors.extend(e for e in again if "race" in e or "deadlock" in e)
    unique = list(dict.fromkeys(errors))
    if len(unique) > _MAX_ERRORS:
        unique = unique[:_MAX_ERRORS] + [f"... and {len(unique) - _MAX_ERRORS} more errors"]
    return PlanCheckResult(tuple(unique), tuple(dict.fromkeys(warnings)), plan.collective, plan.nranks)


def check_text(text: str, *, source: str = "<string>") -> PlanCheckResult:
    """Parse and check plan JSON ``text`` (raises :class:`PlanError` if it cannot be parsed)."""
    need_str(text, "text")
    return check(parse(text, source=source))


def check_file(path: str | os.PathLike[str]) -> PlanCheckResult:
    """Read and check the plan file at ``path`` (raises :class:`PlanError` if unreadable)."""
    need_path(path, "path")
    return check(read(path))


def _transfers(plan: Plan) -> list[Transfer]:
    errors, _ = structural_problems(plan)
    if errors:
        raise PlanError(f"plan {plan.name!r} is not valid: {errors[0]}")
    sim_errors, _, transfers = simulate(plan)
    if sim_errors:
        raise PlanError(f"plan {plan.name!r} is not valid: {sim_errors[0]}")
    return transfers


def plan_link_loads(plan: Plan, topology: Topology) -> dict[str, dict[tuple[str, str], float]]:
    """Chunks per physical link, split into the ``"reduce"`` phase (partial sums) and the
    ``"copy"`` phase (complete sums, allreduce only; every other transfer is ``"reduce"`` for
    allreduce and ``"all"`` otherwise). Transfers follow :func:`msccl_xml.switch_path`.

    Raises
    ------
    PlanError
        If the plan is invalid or its rank count differs from the topology's.
    """
    need(plan, Plan, "plan")
    need(topology, Topology, "topology")
    if topology.nranks != plan.nranks:
        raise PlanError(f"topology {topology.name!r} has {topology.nranks} ranks but the plan has {plan.nranks}")
    L = units_per_chunk(plan)
    allreduce = canonical_collective(plan.collective) == "allreduce"
    out: dict[str, dict[tuple[str, str], float]] = defaultdict(lambda: defaultdict(float))
    for tr in _transfers(plan):
        phase = ("copy" if tr.full else "reduce") if allreduce else "all"
        path = switch_path(topology, topology.gpu_id(tr.src), topology.gpu_id(tr.dst))
        for a, b in zip(path[:-1], path[1:]):
            out[phase][(a, b)] += tr.units / L
    return {k: dict(sorted(v.items())) for k, v in sorted(out.items())}


def plan_algbw_GBps(plan: Plan, topology: Topology) -> float:  # noqa: N802
    """Bandwidth-term algbw in GB/s: ``S / sum over phases of max_a(n_a / c_a)`` with ``S`` the
    collective's algbw numerator in chunks (allgather: output chunks; others: input chunks).

    Raises
    ------
    PlanError
        As :func:`plan_link_loads`.
    """
    loads = plan_link_loads(plan, topology)
    gpu = plan.gpus[0]
    coll = canonical_collective(plan.collective)
    s_chunks = gpu.output_chunks if coll == "allgather" else gpu.input_chunks
    worst = 0.0
    for phase in loads.values():
        worst += max((chunks / topology.link(a, b).GBps for (a, b), chunks in phase.items()), default=0.0)
    return float("inf") if worst == 0 else s_chunks / worst

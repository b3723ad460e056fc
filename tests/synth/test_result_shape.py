"""One result shape: SynthResult, Bound, SimResult and CheckResult are frozen, with a status from a
closed enum, a message and a derived success."""

from __future__ import annotations

import dataclasses
from enum import Enum

import pytest

from msccl_xml import CheckResult, CheckStatus, check, lower
from synth import Bound, Status, SynthResult, optimal_bound, synthesize
from synth.alltoall_cg import AllToAllBound, alltoall_lp_bound
from synth.result import Outcome
from synth.simulation import SimResult, SimStatus, simulate
from synth.topologies import named_topology


def _results() -> list[object]:
    topo = named_topology("ring:4")
    syn = synthesize("allreduce", topo)
    assert syn.schedule is not None
    return [syn, optimal_bound("alltoall", topo), simulate(syn.schedule, topo, 1 << 20),
            check(lower(syn.schedule)), alltoall_lp_bound(topo)]


def test_every_result_has_the_shared_shape_and_is_frozen() -> None:
    results = _results()
    assert [type(r) for r in results] == [SynthResult, Bound, SimResult, CheckResult, AllToAllBound]
    for r in results:
        assert isinstance(r, Outcome)
        assert isinstance(r.status, Enum) and isinstance(r.message, str) and r.message
        assert r.success is True
        field = dataclasses.fields(r)[0].name  # type: ignore[arg-type]
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(r, field, None)
    syn, bound, sim, verdict, cg = results
    assert (syn.status, bound.status, sim.status, verdict.status, cg.status) == (
        Status.OPTIMAL, Status.OPTIMAL, SimStatus.COMPLETED, CheckStatus.VALID, Status.OPTIMAL)


def test_column_generation_bound_time_limit_is_a_status() -> None:
    # A torus: no switch cut proves the first master optimal (it would on hpn, issue 31).
    stopped = alltoall_lp_bound(named_topology("torus:4x4"), time_limit_s=1e-6)
    assert stopped.status is Status.TIME_LIMIT and not stopped.success and not stopped.optimal
    assert "best proven upper bound" in stopped.message


def test_check_verdict_is_derived_from_errors() -> None:
    good = CheckResult((), ("w",), "allgather", 2, "rccl")
    bad = CheckResult(("gpu 0 tb 0 step 0: broken",), (), "allgather", 2, "rccl")
    assert (good.valid, good.success, good.status) == (True, True, CheckStatus.VALID)
    assert (bad.valid, bad.success, bad.status) == (False, False, CheckStatus.INVALID)
    assert "broken" in bad.message and bad.message.startswith("invalid")
    assert "valid" in good.message and "1 warnings" in good.message

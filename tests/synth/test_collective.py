"""synth.Collective: the names and facts of the four collectives, the parse boundary, and that a member reads
exactly like its name wherever a plain string used to go (JSON, f-strings, repr, dict keys)."""

from __future__ import annotations

import json

import pytest

from synth import COLLECTIVES, Collective, ScheduleError, SolverError, busbw_GBps, load_topology, optimal_bound, \
    synthesize
from synth.collective import TREE_COLLECTIVES
from synth.schedule import Schedule


def test_members_and_names() -> None:
    assert COLLECTIVES == ("allgather", "reducescatter", "allreduce", "alltoall")
    assert [c.value for c in Collective] == list(COLLECTIVES)
    assert TREE_COLLECTIVES == ("allgather", "reducescatter", "allreduce")
    assert all(type(name) is str for name in COLLECTIVES)  # argparse choices and messages show them bare


@pytest.mark.parametrize("c", list(Collective))
def test_a_member_reads_like_its_name(c: Collective) -> None:
    name = c.value
    assert c == name and hash(c) == hash(name) and {name: 1}[c] == 1 and {c: 1}[name] == 1
    assert str(c) == f"{c}" == "%s" % c == name and f"{c:>14}" == f"{name:>14}"
    assert repr(c) == repr(name) and f"{c!r}" == f"{name!r}"
    assert json.dumps({c: [c]}) == json.dumps({name: [name]})
    assert Collective.parse(name) is c and Collective.parse(c) is c


@pytest.mark.parametrize("bad", ["bcast", "AllGather", "alltoallv", "", 3, None])
def test_parse_names_the_bad_value_and_the_known_ones(bad: object) -> None:
    with pytest.raises(SolverError) as err:
        Collective.parse(bad)
    assert str(err.value) == (f"unknown collective {bad!r}; known: allgather, reducescatter, allreduce, alltoall")
    with pytest.raises(ScheduleError, match="unknown collective"):
        Collective.parse(bad, error=ScheduleError)


def test_tree_facts_and_reversal() -> None:
    facts = {c.value: (c.is_tree, c.in_trees, c.out_trees, c.reversed.value) for c in Collective}
    assert facts == {"allgather": (True, False, True, "reducescatter"),
                     "reducescatter": (True, True, False, "allgather"),
                     "allreduce": (True, True, True, "allreduce"),
                     "alltoall": (False, False, False, "alltoall")}
    assert all(c.reversed.reversed is c for c in Collective)


@pytest.mark.parametrize("n", [2, 3, 8, 1024])
def test_busbw_factor_is_nccl_tests(n: int) -> None:
    assert Collective.ALLREDUCE.busbw_factor(n) == 2 * (n - 1) / n
    for c in (Collective.ALLGATHER, Collective.REDUCESCATTER, Collective.ALLTOALL):
        assert c.busbw_factor(n) == (n - 1) / n
    for c in Collective:  # the public busbw formula and the factor agree, as do names and members
        assert busbw_GBps(c.value, 123.0, n) == busbw_GBps(c, 123.0, n) == pytest.approx(123.0 * c.busbw_factor(n))


@pytest.mark.parametrize("n", [2, 4, 7])
def test_buffer_sizes_follow_nccl_tests(n: int) -> None:
    message = 3 * 5 * 7 * 64  # divisible by every n here
    shard = message // n
    assert [(c.in_bytes(message, n), c.out_bytes(message, n)) for c in Collective] == [
        (shard, message), (message, shard), (message, message), (message, message)]
    # NCCL's per-rank count × size is the shard of AllGather (input) and ReduceScatter (output).
    for c in Collective:
        rank_bytes = min(c.in_bytes(message, n), c.out_bytes(message, n))
        assert c.message_bytes(rank_bytes, n) == message


def test_boundaries_take_names_and_hold_members() -> None:
    topo = load_topology("ring:4")
    bound = optimal_bound("allreduce", topo)
    assert bound.collective is Collective.ALLREDUCE
    assert bound.busbw_GBps == bound.algbw_GBps * 2 * 3 / 4
    sched = synthesize("reducescatter", topo).schedule
    assert sched is not None and sched.collective is Collective.REDUCESCATTER
    assert json.loads(json.dumps(sched.to_dict()))["collective"] == "reducescatter"
    with pytest.raises(ScheduleError, match=r"^unknown collective 'gather'; known: allgather, "):
        Schedule("gather", 4, 1, ())  # type: ignore[arg-type]
    with pytest.raises(SolverError, match=r"^unknown collective 'gather'; known: allgather, "):
        synthesize("gather", topo)

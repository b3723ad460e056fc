"""Acceptance (issue 23): every example plan MSCCL++ ships parses, round-trips, and checks valid
or is rejected for a stated reason; deliberate mutations of valid plans are rejected."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from mscclpp_plan import check, parse, read, write
from mscclpp_plan.model import BufferRef

from ._plan_helpers import VECTORS, drop_op, first_op, vector_files, with_ops

_NVLS = "NVLS/switch channels (multicast) are refused"
#: Every vendored plan and the verdict the checker must reach (None: valid; else a reason).
EXPECTED: dict[str, str | None] = {
    "allreduce.json": None,
    "allreduce_packet.json": None,
    "allreduce_pipeline.json": _NVLS,
    "reduce.json": None,
    "reduce_nvls.json": _NVLS,
    "reduce_nvls_pipeline.json": _NVLS,
    "reduce_pack.json": None,
    "reduce_pack_tbg.json": None,
    # The thread block group splits copy [0:2] per chunk (tb 0: chunk 0, tb 1: chunk 1) but
    # get [1:2] per half chunk, so tb 0 reads half of what tb 1 wrote, after only tb 0's signal.
    "reduce_tbg.json": "race: read of gpu 1 scratch chunk 1 part 0/2 is not ordered after gpu 1 tb 1 op 0 (copy)",
    "transfer_pack.json": None,
    "transfer_pack_tbg.json": None,
}


def test_every_vendored_plan_has_an_expected_verdict() -> None:
    assert sorted(p.name for p in vector_files()) == sorted(EXPECTED)


@pytest.mark.parametrize("path", vector_files(), ids=lambda p: p.name)
def test_vector_round_trips_and_gets_its_verdict(path: Path) -> None:
    plan = read(path)
    text = write(plan)
    assert parse(text) == plan
    assert json.loads(text) == json.loads(path.read_text()) or plan.gpus[0].channels[0].channel_type == "switch"
    verdict = check(plan)
    reason = EXPECTED[path.name]
    if reason is None:
        assert verdict.valid, verdict.errors[:3]
    else:
        assert not verdict.valid
        assert reason in verdict.errors[0], verdict.errors[:2]


def test_writer_reproduces_the_files_json_exactly() -> None:
    # Same objects, same key order: the writer follows the DSL's layout.
    same = [p.name for p in vector_files() if write(read(p)) == p.read_text().rstrip("\n") + "\n"]
    assert "allreduce.json" in same and "transfer_pack.json" in same


@pytest.fixture(scope="module")
def allreduce():  # type: ignore[no-untyped-def]
    return read(VECTORS / "allreduce.json")


@pytest.fixture(scope="module")
def reduce_plan():  # type: ignore[no-untyped-def]
    return read(VECTORS / "reduce.json")


@pytest.fixture(scope="module")
def packet_plan():  # type: ignore[no-untyped-def]
    return read(VECTORS / "allreduce_packet.json")


def test_mutation_dropped_reduction_breaks_the_postcondition(allreduce) -> None:  # type: ignore[no-untyped-def]
    r, t, k = first_op(allreduce, "rres")
    errors = check(drop_op(allreduce, r, t, k)).errors
    assert any("postcondition" in e for e in errors), errors[:3]


def test_mutation_dropped_signal_deadlocks(allreduce) -> None:  # type: ignore[no-untyped-def]
    r, t, k = first_op(allreduce, "signal")
    errors = check(drop_op(allreduce, r, t, k)).errors
    assert any("deadlock: waits for a signal that is never sent" in e for e in errors), errors[:3]


def test_mutation_dropped_wait_leaves_a_signal_for_the_next_launch(allreduce) -> None:  # type: ignore[no-untyped-def]
    ops = allreduce.gpus[0].threadblocks[0].ops
    errors = check(drop_op(allreduce, 0, 0, len(ops) - 1)).errors
    assert any("more time(s) than gpu 0 waits" in e for e in errors), errors[:3]


def test_mutation_missing_wait_is_a_race(reduce_plan) -> None:  # type: ignore[no-untyped-def]
    # reduce.json: rank 0 waits, then reads rank 1's scratch; without the wait the read races.
    r, t, k = first_op(reduce_plan, "wait")
    errors = check(drop_op(reduce_plan, r, t, k)).errors
    assert any("race" in e for e in errors), errors[:3]


def test_mutation_missing_nop_after_wait_is_a_race(reduce_plan) -> None:  # type: ignore[no-untyped-def]
    r, t, k = first_op(reduce_plan, "wait")
    assert reduce_plan.gpus[r].threadblocks[t].ops[k + 1].name == "nop"
    errors = check(drop_op(reduce_plan, r, t, k + 1)).errors
    assert any("race" in e for e in errors), errors[:3]


def test_mutation_wrong_buffer_index_is_rejected(packet_plan) -> None:  # type: ignore[no-untyped-def]
    r, t, k = first_op(packet_plan, "upkt")
    ops = list(packet_plan.gpus[r].threadblocks[t].ops)
    dst = ops[k].dst_buff[0]
    ops[k] = replace(ops[k], dst_buff=(BufferRef(dst.index ^ 1, dst.size, type=dst.type),))
    assert not check(with_ops(packet_plan, r, t, ops)).valid


def test_mutation_every_single_op_drop_of_a_valid_plan_is_checked(reduce_plan) -> None:  # type: ignore[no-untyped-def]
    # Dropping any data op or any signal/wait of reduce.json is caught (nops may be redundant),
    # except rank 0's first copy i[2:4] -> s[2:4]: nothing reads that scratch (rank 1 reads rank 0's
    # input directly), so the copy is dead in the test plan and dropping it changes nothing.
    missed = []
    for r, g in enumerate(reduce_plan.gpus):
        for t, tb in enumerate(g.threadblocks):
            for k, op in enumerate(tb.ops):
                if op.name != "nop" and check(drop_op(reduce_plan, r, t, k)).valid:
                    missed.append((r, t, k, op.name))
    assert missed == [(0, 0, 0, "copy")]


def test_packet_reads_wait_for_their_packets(packet_plan) -> None:  # type: ignore[no-untyped-def]
    r, t, k = first_op(packet_plan, "ppkt")
    errors = check(drop_op(packet_plan, r, t, k)).errors
    assert any("deadlock: reads packets that are never written" in e for e in errors), errors[:3]

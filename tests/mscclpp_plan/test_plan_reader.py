"""Reader, writer and structural checks: culprits named, caps enforced, round trips on random plans."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mscclpp_plan import (
    BufferRef,
    Op,
    Plan,
    PlanError,
    PlanGpu,
    Threadblock,
    check,
    check_text,
    parse,
    read,
    write,
    write_file,
)
from mscclpp_plan.model import ChannelDecl, TbChannels
from mscclpp_plan.reader import MAX_PLAN_BYTES

from ._plan_helpers import VECTORS

BASE = json.loads((VECTORS / "transfer_pack.json").read_text())


def _mutated(path: list[object], value: object) -> str:
    doc = json.loads(json.dumps(BASE))
    node = doc
    for key in path[:-1]:
        node = node[key]  # type: ignore[index]
    if value is _DELETE:
        del node[path[-1]]  # type: ignore[arg-type]
    else:
        node[path[-1]] = value  # type: ignore[index]
    return json.dumps(doc)


_DELETE = object()


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (["name"], _DELETE, "p.json: name: missing"),
        (["inplace"], "yes", "p.json: inplace: expected true or false, got \"yes\""),
        (["protocol"], "LL128", "p.json: protocol: unknown value 'LL128' (expected one of LL, Simple)"),
        (["gpus", 0, "threadblocks", 0, "ops", 0, "name"], "send",
         "p.json: gpus[0].threadblocks[0].ops[0].name: unknown value 'send'"),
        (["gpus", 1, "threadblocks", 0, "ops", 0, "src_buff", 0, "index"], -1,
         "p.json: gpus[1].threadblocks[0].ops[0].src_buff[0].index: -1 is outside"),
        (["gpus", 0, "channels", 0, "channel_type"], "nvlink",
         "p.json: gpus[0].channels[0].channel_type: unknown value 'nvlink'"),
        (["gpus", 0, "remote_buffers", 0, "type"], "x", "p.json: gpus[0].remote_buffers[0].type: unknown value 'x'"),
        (["gpus", 0, "input_chunks"], 1.5, "p.json: gpus[0].input_chunks: expected an integer, got 1.5"),
    ],
)
def test_reader_names_the_culprit(path: list[object], value: object, message: str) -> None:
    with pytest.raises(PlanError) as err:
        parse(_mutated(path, value), source="p.json")
    assert str(err.value).startswith(message)


def test_reader_rejects_non_json_and_oversized_files(tmp_path: Path) -> None:
    with pytest.raises(PlanError, match=r"x.json: not JSON: Expecting value at line 1 column 1"):
        parse("<algo/>", source="x.json")
    big = tmp_path / "big.json"
    with open(big, "wb") as fh:
        fh.truncate(MAX_PLAN_BYTES + 1)
    with pytest.raises(PlanError, match="more than the 67108864-byte cap"):
        read(big)
    with pytest.raises(PlanError, match=r"gpus: 5000 entries, more than the cap of 4096"):
        parse(json.dumps({**BASE, "gpus": [0] * 5000}))


def test_unknown_keys_survive_a_round_trip() -> None:
    doc = json.loads(json.dumps(BASE))
    doc["comment"] = {"by": "hand"}
    doc["gpus"][0]["threadblocks"][0]["ops"][0]["note"] = [1, 2]
    plan = parse(json.dumps(doc))
    assert json.loads(write(plan)) == doc


def test_structural_errors_name_the_place() -> None:
    plan = read(VECTORS / "transfer_pack.json")
    g0 = plan.gpus[0]
    tb = g0.threadblocks[0]
    bad_channel = Threadblock(0, tb.ops, (TbChannels("memory", (5,)),), tb.remote_buffer_refs)
    errors = check(Plan(**{**_fields(plan), "gpus": (PlanGpu(**{**_fields(g0), "threadblocks": (
        bad_channel, *g0.threadblocks[1:])}), *plan.gpus[1:])})).errors
    assert "gpu 0 tb 0: memory channel id 5 outside the gpu's 1 memory channels" in errors
    swapped = Plan(**{**_fields(plan), "gpus": (plan.gpus[1], plan.gpus[0])})
    assert any("id is 1; the executor reads gpus[rank]" in e for e in check(swapped).errors)
    self_loop = PlanGpu(**{**_fields(g0), "channels": (ChannelDecl("memory", (0,)),)})
    errors = check(Plan(**{**_fields(plan), "gpus": (self_loop, plan.gpus[1])})).errors
    assert "gpu 0 channels[0]: connected_to 0 is not another rank of 2" in errors


def test_semaphore_ids_per_op_are_capped() -> None:
    i, s = BufferRef(0, 1, type="i"), BufferRef(0, 1, type="o")
    ids = tuple(range(17))
    tb = Threadblock(0, (Op("copy", (i,), (s,)), Op("nop"), Op("sem_release", semaphore_ids=ids)))
    plan = Plan("s", "allreduce", "Simple", False, (PlanGpu(0, 1, 1, 0, (tb,), semaphores=(0,) * 17),))
    errors = check(plan).errors
    assert errors[0].startswith("gpu 0 tb 0 op 2 (sem_release): needs 1 to MAX_DEVICE_SEMAPHORES = 16")


def test_max_operation_is_enforced() -> None:
    copy = Op("copy", (BufferRef(0, 1, type="i"),), (BufferRef(0, 1, type="o"),))
    ops = (copy,) + (Op("nop"),) * 64
    plan = Plan("long", "allreduce", "Simple", False, (PlanGpu(0, 1, 1, 0, (Threadblock(0, ops),)),))
    assert check(plan).errors == ("gpu 0 tb 0: 65 operations, more than MAX_OPERATION = 64 "
                                  "(mscclpp@1f5f065 execution_common.hpp)",)
    assert check(Plan("ok", "allreduce", "Simple", False, (PlanGpu(0, 1, 1, 0, (Threadblock(0, ops[:64]),)),))).valid


def _fields(obj: object) -> dict[str, object]:
    return {f: getattr(obj, f) for f in obj.__slots__}  # type: ignore[attr-defined]


def _two_tb_plan(sync: list[Op], wait: list[Op], semaphores: tuple[int, ...] = (0,)) -> Plan:
    """gpu 0: tb 0 copies i -> s then syncs; tb 1 waits, then copies s -> o (allreduce on one rank)."""
    i, s, o = (BufferRef(0, 1, type=t) for t in "iso")
    tb0 = Threadblock(0, (Op("copy", (i,), (s,)), *sync))
    tb1 = Threadblock(1, (*wait, Op("copy", (s,), (o,))))
    return Plan("sync", "allreduce", "Simple", False, (PlanGpu(0, 1, 1, 1, (tb0, tb1), semaphores=semaphores),))


def test_semaphores_and_barriers_order_threadblocks() -> None:
    nop = Op("nop")
    rel, acq = Op("sem_release", semaphore_ids=(0,)), Op("sem_acquire", semaphore_ids=(0,))
    assert check(_two_tb_plan([nop, rel], [acq, nop])).valid
    assert any("race" in e for e in check(_two_tb_plan([rel], [acq, nop])).errors)  # release before the copy ends
    assert any("race" in e for e in check(_two_tb_plan([nop, rel], [acq])).errors)  # copy before the acquire ends
    assert any("race" in e for e in check(_two_tb_plan([nop], [nop])).errors)
    assert any("deadlock: acquires semaphore(s) [0]" in e for e in check(_two_tb_plan([nop], [acq, nop])).errors)
    assert any("semaphore 0 ends at 1" in e for e in check(_two_tb_plan([nop, rel], [nop])).errors)
    bar = Op("barrier", barrier_id=0, num_threadblocks=2)
    assert check(_two_tb_plan([bar], [bar], ())).valid
    wrong = Op("barrier", barrier_id=0, num_threadblocks=3)
    assert any("num_threadblocks must be at most" in e for e in check(_two_tb_plan([wrong], [wrong], ())).errors)
    assert any("never fills up with 2" in e for e in check(_two_tb_plan([bar], [Op("nop")], ())).errors)


def test_pipeline_inner_ops_run_in_order() -> None:
    i, s, o = (BufferRef(0, 1, type=t) for t in "iso")
    pipe = Op("pipeline", iter_context=(1 << 20, 1),
              ops=(Op("copy", (i,), (s,)), Op("nop"), Op("copy", (s,), (o,))))  # fmt: skip
    plan = Plan("p", "allreduce", "Simple", False, (PlanGpu(0, 1, 1, 1, (Threadblock(0, (pipe,)),)),))
    text = write(plan)
    assert parse(text) == plan and check_text(text).valid
    racy = Op("pipeline", iter_context=(1 << 20, 1), ops=(pipe.ops[0], pipe.ops[2]))
    assert not check(Plan("p", "allreduce", "Simple", False, (PlanGpu(0, 1, 1, 1, (Threadblock(0, (racy,)),)),))).valid


def test_write_file_is_atomic_and_deterministic(tmp_path: Path) -> None:
    plan = read(VECTORS / "reduce.json")
    write_file(plan, tmp_path / "a.json")
    write_file(read(tmp_path / "a.json"), tmp_path / "b.json")
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "b.json"]  # no temporary files left


_refs = st.builds(BufferRef, index=st.integers(0, 7), size=st.integers(1, 3), type=st.sampled_from("ios"))
_ops = st.one_of(
    st.builds(Op, name=st.just("copy"), src_buff=st.tuples(_refs), dst_buff=st.tuples(_refs)),
    st.builds(Op, name=st.just("re"), src_buff=st.tuples(_refs, _refs), dst_buff=st.tuples(_refs),
              reduce_op=st.just("sum")),
    st.just(Op("nop")),
)  # fmt: skip


@settings(max_examples=40, deadline=None)
@given(ops=st.lists(st.lists(_ops, max_size=6), min_size=1, max_size=3), inplace=st.booleans())
def test_random_local_plans_round_trip_and_check_without_crashing(ops: list[list[Op]], inplace: bool) -> None:
    tbs = tuple(Threadblock(k, tuple(o)) for k, o in enumerate(ops))
    plan = Plan("rnd", "allreduce", "Simple", inplace, (PlanGpu(0, 8, 8, 8, tbs),))
    assert parse(write(plan)) == plan
    verdict = check(plan)
    assert verdict.valid == (not verdict.errors) and verdict.message.startswith("valid" if verdict.valid else "invalid")
    # A single-rank allreduce is correct iff every output chunk ends up holding its input chunk:
    # a plan valid in place stays valid when the mode does not alias anything differently.
    if verdict.valid and not inplace:
        assert any(op.name in ("copy", "re") and op.dst_buff[0].type == "o" for o in ops for op in o)


def test_executor_quirks_are_errors() -> None:
    plan = read(VECTORS / "reduce.json")
    r, t, k = next((r, t, k) for r, g in enumerate(plan.gpus) for t, tb in enumerate(g.threadblocks)
                   for k, op in enumerate(tb.ops) if op.name == "get")  # fmt: skip
    ops = list(plan.gpus[r].threadblocks[t].ops)
    get = ops[k]
    shifted = Op(**{**_fields(get), "dst_buff": (BufferRef(get.dst_buff[0].index + 1, 1, type="s"),)})
    errors = check(_replace_op(plan, r, t, k, shifted)).errors
    assert any("handleGet at this commit uses each offset for the other buffer" in e for e in errors)
    over_port = Op(**{**_fields(get), "channel_type": "port"})
    errors = check(_replace_op(plan, r, t, k, over_port)).errors
    assert any("works over memory channels only" in e for e in errors)


def _replace_op(plan: Plan, r: int, t: int, k: int, op: Op) -> Plan:
    from ._plan_helpers import with_ops

    ops = list(plan.gpus[r].threadblocks[t].ops)
    ops[k] = op
    return with_ops(plan, r, t, ops)

"""Tests of msccl_xml.checker: structural rules, FIFO matching, deadlock, races, postconditions."""

from __future__ import annotations

from dataclasses import replace

import pytest

from msccl_xml import StepType, Threadblock, check, check_text, nop, read
from msccl_xml.program import Gpu, Program, Protocol
from synth.errors import XmlError

from tests.msccl_xml._msccl_helpers import (
    I, O, S, VECTORS, ring_allgather, replace_step, replace_tb, set_steps, step, vector_files,
)


def _errors(p: Program, **kw: object) -> tuple[str, ...]:
    result = check(p, **kw)  # type: ignore[arg-type]
    assert not result.valid
    return result.errors


def test_ring_allgather_is_valid_and_reports_its_collective() -> None:
    r = check(ring_allgather())
    assert (r.valid, r.errors, r.collective, r.nranks, r.runtime) == (
        True, (), "allgather", 4, "msccl-executor-nccl")


def test_unknown_runtime_is_an_error() -> None:
    with pytest.raises(XmlError, match=r"unknown runtime 'nccl'"):
        check(ring_allgather(), runtime="nccl")


# --- structural rules ------------------------------------------------------------------------

def test_coll_must_be_from_the_executors_list() -> None:
    assert _errors(replace(ring_allgather(), coll="reduce_scatter"))[0].startswith(
        "algo: coll 'reduce_scatter' is not accepted by msccl-executor-nccl")


def test_missing_header_attributes_fail_new_runtimes_only() -> None:
    old = replace(ring_allgather(), outofplace=None, min_bytes=None, max_bytes=None)
    errs = _errors(old)
    assert "algo: required attribute outofplace is missing for msccl-executor-nccl" in errs
    assert "algo: required attribute minBytes is missing for msccl-executor-nccl" in errs
    assert check(old, runtime="msccl-legacy").valid


def test_channel_limits() -> None:
    p = replace_tb(replace(ring_allgather(), nchannels=33), 2, 0, chan=32)
    errs = _errors(p)
    assert "algo: nchannels must be in 1..32 for msccl-executor-nccl, got 33" in errs
    assert "gpu 2 tb 0: chan 32 out of range 0..31 for msccl-executor-nccl" in errs
    q = replace_tb(ring_allgather(), 1, 0, chan=1)
    assert "gpu 1 tb 0: chan 1 >= nchannels 1" in _errors(q)


def test_threadblock_ids_must_be_dense_and_unique() -> None:
    p = replace_tb(ring_allgather(), 0, 0, id=1)
    assert "gpu 0: threadblock ids must be dense 0..n-1; missing [0]" in _errors(p)
    g = p.gpus[3]
    dup = replace(p, gpus=p.gpus[:3] + (replace(g, threadblocks=g.threadblocks * 2),))
    assert "gpu 3 tb 0: duplicate threadblock id" in _errors(dup)


def test_one_threadblock_per_channel_and_peer() -> None:
    p = ring_allgather()
    g = p.gpus[0]
    extra = Threadblock(id=1, send=1, recv=-1, chan=0, steps=())
    p = replace(p, gpus=(replace(g, threadblocks=g.threadblocks + (extra,)),) + p.gpus[1:])
    assert ("gpu 0 tb 1: send peer 1 on channel 0 is already used by tb 0 "
            "(one tb per (channel, send peer))") in _errors(p)


def test_peers_must_be_other_existing_ranks() -> None:
    assert "gpu 1 tb 0: send peer is the gpu itself" in _errors(replace_tb(ring_allgather(), 1, 0, send=1))
    assert "gpu 1 tb 0: recv peer 9 out of range -1..3" in _errors(replace_tb(ring_allgather(), 1, 0, recv=9))


def test_step_type_needs_the_matching_peer() -> None:
    p = replace_tb(ring_allgather(), 2, 0, send=-1)
    assert "gpu 2 tb 0 step 0: 's' sends but the threadblock has send=-1" in _errors(p)


def test_cnt_range_and_offsets_are_checked() -> None:
    assert "gpu 0 tb 0 step 1: cnt 72 out of range 0..71" in _errors(
        replace_step(ring_allgather(), 0, 0, 1, cnt=72))
    assert "gpu 0 tb 0 step 1: dstoff 4 out of range for o_chunks=4" in _errors(
        replace_step(ring_allgather(), 0, 0, 1, dstoff=4, srcoff=4))


def test_too_many_steps_per_threadblock() -> None:
    p = ring_allgather()
    steps = list(p.gpus[0].threadblocks[0].steps)
    padded = steps[:1] + [nop(depid=0, deps=0)] * 64 + steps[1:]
    errs = _errors(set_steps(p, 0, 0, padded))
    assert "gpu 0 tb 0: 68 steps (nops included), msccl-executor-nccl allows 64" in errs
    assert not any("68 steps" in e for e in check(set_steps(p, 0, 0, padded), runtime="msccl-legacy").errors)


def test_steps_must_be_numbered_in_document_order() -> None:
    assert ("gpu 3 tb 0 step 2: s=5, but steps must be numbered 0..n-1 in document order"
            in _errors(replace_step(ring_allgather(), 3, 0, 2, s=5)))


def test_dependency_target_rules() -> None:
    p = ring_allgather()
    # tb 0 step 1 waits on a tb that does not exist
    assert ("gpu 0 tb 0 step 1: depends on tb 4, which does not exist on gpu 0"
            in _errors(replace_step(p, 0, 0, 1, depid=4, deps=0)))
    # a target with hasdep=0 never publishes its flag
    g = p.gpus[0]
    local = Threadblock(id=1, send=-1, recv=-1, chan=0,
                        steps=(step(0, StepType.LOCAL_COPY, O, 0, depid=0, deps=1),))
    q = replace(p, gpus=(replace(g, threadblocks=g.threadblocks + (local,)),) + p.gpus[1:])
    errs = _errors(q)
    assert ("gpu 0 tb 1 step 0: depends on tb 0 step 1, which has hasdep=0 and never publishes "
            "its flag") in errs
    assert any(e.startswith("gpu 0 tb 1 step 0: deadlock: waits for a flag from gpu 0 tb 0") for e in errs)
    fixed = replace_step(q, 0, 0, 1, hasdep=1)
    assert check(fixed).valid


def test_hasdep_without_waiter_is_only_a_warning() -> None:
    r = check(replace_step(ring_allgather(), 1, 0, 2, hasdep=1))
    assert r.valid
    assert r.warnings == ("gpu 1 tb 0 step 2: hasdep=1 but no threadblock waits on it",)


def test_nop_rules() -> None:
    p = ring_allgather()
    steps = list(p.gpus[0].threadblocks[0].steps)
    trailing = set_steps(p, 0, 0, steps + [nop(depid=0, deps=0)])
    assert "gpu 0 tb 0: ends with 1 nop(s) not followed by a real step" in _errors(trailing)
    no_dep = set_steps(p, 0, 0, steps[:1] + [nop(depid=-1, deps=-1)] + steps[1:])
    errs = _errors(no_dep)
    assert "gpu 0 tb 0 step 1: a nop must carry exactly one dependency" in errs
    assert ("gpu 0 tb 0 step 2: follows 1 nop(s) but has no dependency of its own; the executor "
            "rejects the file") in errs


# --- FIFO matching, deadlock, races ----------------------------------------------------------

def test_unmatched_recv_names_gpu_tb_step_and_channel() -> None:
    p = ring_allgather()
    steps = list(p.gpus[2].threadblocks[0].steps)
    dropped = set_steps(p, 2, 0, steps[1:])  # gpu 2 forgets its own first send
    errs = _errors(dropped)
    assert any(e.startswith("gpu 3 tb 0 step 3: recv from gpu 2 on channel 0 has no matching send")
               for e in errs)


def test_cnt_mismatch_between_send_and_recv() -> None:
    p = replace_step(ring_allgather(), 1, 0, 0, cnt=2)
    assert ("gpu 2 tb 0 step 1: recv from gpu 1 on channel 0 has cnt=1 but its matching send "
            "gpu 1 tb 0 step 0 has cnt=2") in _errors(p)


def test_recv_before_send_everywhere_deadlocks() -> None:
    p = ring_allgather(3)
    for r in range(3):
        steps = list(p.gpus[r].threadblocks[0].steps)
        p = set_steps(p, r, 0, [steps[2], steps[1], steps[0]])
    errs = _errors(p)
    assert "gpu 0 tb 0 step 0: deadlock: recv from gpu 2 on channel 0 waits for a send that never comes" in errs


def test_bounded_fifo_can_expose_a_deadlock() -> None:
    # gpu 0 sends twice to gpu 1 before receiving; gpu 1 does the same: fine when buffered,
    # stuck when each connection holds one message.
    def gpu(r: int) -> Gpu:
        tb = Threadblock(0, 1 - r, 1 - r, 0, (
            step(0, StepType.SEND, O, 2 * r), step(1, StepType.SEND, O, 2 * r + 1),
            step(2, StepType.RECV, O, 2 * (1 - r)), step(3, StepType.RECV, O, 2 * (1 - r) + 1)))
        return Gpu(r, 0, 4, 0, (tb,))
    p = Program(name="ag", proto=Protocol.SIMPLE, nchannels=1, nchunksperloop=4, ngpus=2,
                coll="allgather", inplace=1, outofplace=0, min_bytes=0, max_bytes=0,
                gpus=(gpu(0), gpu(1)))
    assert check(p).valid
    assert check(p, fifo_depth=2).valid
    errs = _errors(p, fifo_depth=1)
    assert "gpu 0 tb 0 step 1: deadlock: send to gpu 1 on channel 0 blocks: its FIFO is full" in errs
    with pytest.raises(XmlError, match="fifo_depth must be >= 1"):
        check(p, fifo_depth=0)


def test_unordered_access_from_two_threadblocks_is_a_race() -> None:
    p = ring_allgather()
    g = p.gpus[1]
    # gpu 1 copies o[0] -> o[3] while its tb 0 receives into o[0]: no dependency orders them.
    local = Threadblock(1, -1, -1, 0, (replace(step(0, StepType.LOCAL_COPY, O, 0), dstoff=1),))
    q = replace(p, gpus=(p.gpus[0], replace(g, threadblocks=g.threadblocks + (local,))) + p.gpus[2:])
    errs = _errors(q)
    assert any("race on gpu 1 o[" in e and "no dependency orders them" in e for e in errs)


# --- postconditions --------------------------------------------------------------------------

def _allreduce2() -> Program:
    """2 ranks: rank r reduces chunk r (rrc), then the halves are exchanged."""
    def gpu(r: int) -> Gpu:
        steps = (step(0, StepType.SEND, I, 1 - r), step(1, StepType.RECV_REDUCE_COPY, I, r),
                 step(2, StepType.SEND, I, r), step(3, StepType.RECV, I, 1 - r))
        return Gpu(r, 2, 0, 0, (Threadblock(0, 1 - r, 1 - r, 0, steps),))
    return Program(name="ar", proto=Protocol.SIMPLE, nchannels=1, nchunksperloop=2, ngpus=2,
                   coll="allreduce", inplace=1, outofplace=0, min_bytes=0, max_bytes=0,
                   gpus=(gpu(0), gpu(1)))


def test_allreduce_counts_every_contribution_exactly_once() -> None:
    p = _allreduce2()
    assert check(p).valid
    steps = list(p.gpus[0].threadblocks[0].steps)
    doubled = set_steps(p, 0, 0, steps[:2] + [step(0, StepType.REDUCE, I, 0)] + steps[2:])
    errs = _errors(doubled)
    assert errs[0] == ("gpu 0 i[0]: allreduce in place wrongly holds rank 0 i[0], rank 1 i[0] "
                       "(written via gpu 1 tb 0 step 0 -> gpu 0 tb 0 step 1 -> gpu 0 tb 0 step 2)")
    missing = replace_step(p, 0, 0, 1, type=StepType.RECV)
    assert _errors(missing)[0].startswith("gpu 0 i[0]: allreduce in place misses rank 0 i[0]")


def test_in_place_and_out_of_place_layouts_differ() -> None:
    p = _allreduce2()
    # the same steps claimed out of place leave the output buffer empty
    errs = _errors(replace(p, inplace=0, outofplace=1))
    assert "gpu 0 o[0]: allreduce out of place holds uninitialised data (never written)" in errs
    assert ("gpu 0 tb 0 step 1: writes i[0..1) out of place; the caller's send buffer is "
            "read-only") in errs
    # and claimed for both modes, only the out-of-place run fails
    both = _errors(replace(p, outofplace=1))
    assert all("out of place" in e for e in both)


def test_out_of_place_program_may_not_write_the_send_buffer() -> None:
    p = read(VECTORS / "mscclang/alltoall_allpairs_8gpu_1inst_Simple.xml") if VECTORS.is_dir() else None
    if p is None:
        vector_files()
    assert p is not None
    q = replace_step(p, 0, 0, 0, dstbuf=I, dstoff=0, srcbuf=I)
    errs = check(q).errors
    assert any("writes i[" in e and "out of place; the caller's send buffer is read-only" in e
               for e in errs) or any(e.startswith("gpu 0 tb 0 step 0") for e in errs)


def test_check_text_reports_lexical_problems_with_the_source() -> None:
    text = ring_xml().replace(' cnt="1"', ' cnt="01"', 1)
    r = check_text(text, source="ring.xml")
    assert r.errors == ('ring.xml: line 4: <step> attribute cnt="01" has a leading zero or sign: '
                        "strtol(.., 0) reads it differently",)


def ring_xml() -> str:
    from msccl_xml import write

    return write(ring_allgather())


# --- mutations of valid external programs ----------------------------------------------------

MUTATED = [
    "mscclang/allgather_ring_8gpu_1ch_1inst_Simple.xml",
    "mscclang/allreduce_a100_allpairs_v2_8gpu_LL.xml",
    "mscclang/alltoall_a100_two_step_2node_4gpu_Simple.xml",
    "shipped_msccl_scheduler/ncv4/ar_hier_12_Simple.xml",
    "mscclang/reducescatter_allpairs_8gpu_Simple.xml",
]


def _real_steps(p: Program) -> list[tuple[int, int, int]]:
    return [(g.id, tb.id, st.s) for g in p.gpus for tb in g.threadblocks for st in tb.steps
            if st.type is not StepType.NOP]


@pytest.mark.parametrize("name", MUTATED)
def test_mutations_of_valid_programs_are_caught_and_located(name: str) -> None:
    vector_files()
    p = read(VECTORS / name)
    assert check(p).valid
    places = _real_steps(p)
    for g, t, s in places[:: max(1, len(places) // 12)]:
        tb = p.gpus[g].threadblocks[t]
        steps = list(tb.steps)
        st = steps[s]
        # 1. drop the step (renumbering the rest)
        q = set_steps(p, g, t, steps[:s] + steps[s + 1:])
        assert not check(q).valid, ("drop", g, t, s)
        # 2. corrupt an offset the step really uses
        field = "srcoff" if st.type.reads_src else "dstoff"
        buf = st.srcbuf if field == "srcoff" else st.dstbuf
        size = {I: p.gpus[g].i_chunks, O: p.gpus[g].o_chunks, S: p.gpus[g].s_chunks}[buf]
        if size > 1:
            bad = (getattr(st, field) + 1) % size
            q = replace_step(p, g, t, s, **{field: bad})
            r = check(q)
            assert r.errors, ("offset", g, t, s)
            # the mutated step is named by an error, or (a dead store) by a warning
            assert any(f"gpu {g} tb {t} step {s}" in e for e in r.errors + r.warnings), (
                "offset", r.errors[:3])
    # 3. swap two adjacent steps that both send (or both receive) different chunks: the FIFO
    #    order on the connection changes, so chunks land in the wrong places
    swapped = 0
    for g in p.gpus:
        for tb in g.threadblocks:
            steps = list(tb.steps)
            for k in range(len(steps) - 1):
                a, b = steps[k], steps[k + 1]
                same_kind = (a.type.sends and b.type.sends) or (a.type.receives and b.type.receives)
                if not same_kind or (a.srcoff, a.dstoff) == (b.srcoff, b.dstoff):
                    continue
                q = set_steps(p, g.id, tb.id, steps[:k] + [b, a] + steps[k + 2:])
                r = check(q)
                assert not r.valid, ("swap", g.id, tb.id, k)
                assert any(f"gpu {g.id} tb {tb.id} step {k}" in e or
                           f"gpu {g.id} tb {tb.id} step {k + 1}" in e for e in r.errors + r.warnings)
                swapped += 1
                break
        if swapped >= 4:
            break


def test_corrupted_dependency_is_reported_at_the_step() -> None:
    vector_files()
    p = read(VECTORS / "mscclang/allgather_recursive_doubling_8gpu_Simple.xml")
    target = next((g.id, tb.id, st.s) for g in p.gpus for tb in g.threadblocks for st in tb.steps
                  if st.depid >= 0)
    g, t, s = target
    st = p.gpus[g].threadblocks[t].steps[s]
    gone = replace_step(p, g, t, s, depid=-1, deps=-1)
    errs = _errors(gone)
    assert any(f"gpu {g}" in e for e in errs)
    wrong = replace_step(p, g, t, s, deps=st.deps + 7)
    assert any(e.startswith(f"gpu {g} tb {t} step {s}: depends on tb {st.depid} step {st.deps + 7}")
               for e in _errors(wrong))


def test_race_detection_holds_past_255_steps_per_threadblock() -> None:
    # Vector clocks take the narrowest integer type that holds every step count; a threadblock
    # of 300 steps must switch to a wider one, not wrap around.
    from msccl_xml import Step
    from msccl_xml.program import BufferKind

    i, o, s = BufferKind.INPUT, BufferKind.OUTPUT, BufferKind.SCRATCH
    copies = tuple(Step(s=k, type=StepType.LOCAL_COPY, srcbuf=i, srcoff=k, dstbuf=o, dstoff=k, cnt=1,
                        depid=-1, deps=-1, hasdep=int(k == 299)) for k in range(300))

    def program(depid: int, deps: int) -> Program:
        reader = Step(s=0, type=StepType.LOCAL_COPY, srcbuf=o, srcoff=299, dstbuf=s, dstoff=0, cnt=1,
                      depid=depid, deps=deps, hasdep=0)
        tbs = (Threadblock(0, -1, -1, 0, copies), Threadblock(1, -1, -1, 0, (reader,)))
        return Program(name="long", proto=Protocol.SIMPLE, nchannels=1, nchunksperloop=300, ngpus=1,
                       coll="allgather", inplace=0, outofplace=1, min_bytes=0, max_bytes=0,
                       gpus=(Gpu(0, 300, 300, 1, tbs),))

    ordered = check(program(0, 299), runtime="msccl-legacy")
    assert not any("race" in e for e in ordered.errors), ordered.errors[:3]
    unordered = check(program(-1, -1), runtime="msccl-legacy")
    assert any("race" in e or "holds no data yet" in e for e in unordered.errors), unordered.errors[:3]


def test_local_clocks_on_huge_programs_still_find_races_and_pass_lowered_programs(monkeypatch: pytest.MonkeyPatch) -> None:
    # Above FULL_CLOCK_ENTRIES the checker keeps per-GPU clocks only (a subset of happens-before):
    # sound for "race-free", and the lowering's explicit dependencies satisfy it.
    import random

    import msccl_xml._simulate as sim
    from msccl_xml import lower
    from synth.topologies import load_topology
    from tests.msccl_xml._msccl_helpers import random_schedule

    monkeypatch.setattr(sim, "FULL_CLOCK_ENTRIES", 0)
    p = ring_allgather()
    g = p.gpus[1]
    local = Threadblock(1, -1, -1, 0, (replace(step(0, StepType.LOCAL_COPY, O, 0), dstoff=1),))
    q = replace(p, gpus=(p.gpus[0], replace(g, threadblocks=g.threadblocks + (local,))) + p.gpus[2:])
    assert any("race on gpu 1 o[" in e and "through other GPUs" in e for e in _errors(q))
    topo = load_topology("nvswitch:6")
    for coll in ("allgather", "reducescatter", "allreduce", "alltoall"):
        program = lower(random_schedule(topo, coll, 3, random.Random(7)), max_channels=2)
        assert check(program).valid

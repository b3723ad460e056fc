"""Tests of msccl_xml.to_schedule (and the allreduce phases of msccl_xml.algbw it agrees with)."""

from __future__ import annotations

import random
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from msccl_xml import (
    Gpu,
    Program,
    Protocol,
    Step,
    StepType,
    Threadblock,
    check,
    lower,
    program_algbw_GBps,
    program_to_schedule,
    read,
)
from synth.errors import XmlError
from synth.schedule import RouteKind
from synth.topologies import load_topology

from tests.msccl_xml._msccl_helpers import (
    I,
    O,
    S,
    random_schedule,
    rel,
    replace_step,
    ring_allgather,
    ring_schedule,
    step,
    vector_files,
)

COLLS = ("allgather", "reducescatter", "allreduce", "alltoall")

# External vectors with no schedule form, and why (each message was read and checked by hand):
# ncv4 reduces within pairs, then ranks 0 and 2 both form the full sum by exchanging partials;
# 1step and ap-1pass are one-shot (every rank reduces everything itself); ncv4_v2 and ar_tree_12
# root all reductions at ranks 0 and 2; the dgx1 alltoall sends chunks to GPUs that never use
# them; pipeline_a100_ring is not an allreduce at all (see test_xml_external_vectors.py).
INEXPRESSIBLE = {
    "mscclang/allreduce_a100_ncv4_4gpu_Simple.xml": r"chunk 0 is reduced at 2 ranks \[0, 2\], not at one",
    "mscclang_testconfig/cfg_allreduce_1step_2_1.xml": r"chunk 0 is reduced at 2 ranks \[0, 1\]",
    "mscclang_testconfig/cfg_allreduce_a100_ncv4_4_2.xml": r"chunk 0 is reduced at 2 ranks \[0, 2\]",
    "mscclang_testconfig/cfg_allreduce_a100_ncv4_v2_4_2.xml":
        r"rank 0 is the reduction root of 2 of the 4 chunks, .* nchunksperloop/ngpus = 4/4",
    "mscclang_testconfig/cfg_pipeline_a100_ring_8_4_2.xml":
        r"does not deliver its allreduce: gpu 0 i\[0\]: allreduce in place misses rank 1",
    "negative/cfg_alltonext_backward_8_2.xml": r"coll 'custom' has no schedule form",
    "negative/cfg_alltonext_forward_8_2.xml": r"coll 'custom' has no schedule form",
    "shipped_msccl_scheduler/ncv4/ar_hier_12_Simple.xml": r"chunk 0 is reduced at 2 ranks \[0, 2\]",
    "shipped_msccl_scheduler/ncv4/ar_tree_12_LL.xml": r"rank 0 is the reduction root of 12 of the 24",
    "shipped_msccl_scheduler/ndv4/ap-1pass.xml":
        r"^program 'allreduce_pairs': allreduce: chunk 0 is reduced at 8 ranks \[0, 1, 2, 3, 4, 5, 6, 7\]"
        r", not at one: .*one-shot or allpairs allreduce",
    "synthesis/synth_alltoall_dgx1_steps3_ncclize.xml":
        r"alltoall: block 0->5 chunk 0 \(rank 0 i\[5\]\) leaves rank 0 twice \(to ranks 1 and 2\)",
}


@pytest.mark.parametrize("coll", COLLS)
@pytest.mark.parametrize("inplace", [False, True])
def test_ring_schedules_round_trip_with_merged_routes(coll: str, inplace: bool) -> None:
    if coll == "alltoall" and inplace:
        pytest.skip("in-place alltoall is not supported")
    topo = load_topology("ring:4")
    sched = ring_schedule(topo, coll, nchunks=3)
    back = program_to_schedule(lower(sched, inplace=inplace), topo)
    back.validate(topo)
    assert (back.collective, back.nranks, back.nchunks) == (coll, 4, 3)
    assert sorted(back.routes, key=repr) == sorted(sched.routes, key=repr)  # 3 chunks -> one route
    assert back.topology_fingerprint == topo.fingerprint
    assert back.meta["msccl_name"] == f"loopcoll_{coll}_4r_3c"


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(2, 6), nchunks=st.integers(1, 3), coll=st.sampled_from(COLLS),
       inplace=st.booleans(), seed=st.integers(0, 10**6))  # fmt: skip
def test_lowered_random_schedules_come_back_with_their_loads(
    n: int, nchunks: int, coll: str, inplace: bool, seed: int
) -> None:
    topo = load_topology(f"nvswitch:{n}")
    sched = random_schedule(topo, coll, nchunks, random.Random(seed))
    program = lower(sched, inplace=inplace and coll != "alltoall")
    back = program_to_schedule(program, topo)
    back.validate(topo)
    assert back.nchunks == nchunks
    assert back.link_loads() == sched.link_loads()
    assert back.algbw_GBps(topo) == sched.algbw_GBps(topo)
    assert program_algbw_GBps(program, topo) == pytest.approx(back.algbw_GBps(topo), rel=1e-12)


def test_every_external_vector_converts_or_says_why_not() -> None:
    converted = 0
    for f in vector_files():
        program = read(f)
        topo = load_topology(f"nvswitch:{program.ngpus}")
        name = rel(f)
        if name in INEXPRESSIBLE:
            with pytest.raises(XmlError, match=INEXPRESSIBLE[name]):
                program_to_schedule(program, topo)
            continue
        sched = program_to_schedule(program, topo)
        sched.validate(topo)
        assert sched.nchunks * program.ngpus == program.nchunksperloop, name
        assert sched.algbw_GBps(topo) == pytest.approx(program_algbw_GBps(program, topo), rel=1e-12), name
        converted += 1
    assert converted == 44


def test_external_ring_allgather_is_one_ring_per_source() -> None:
    program = read(next(f for f in vector_files() if f.name == "allgather_ring_8gpu_1ch_1inst_Simple.xml"))
    sched = program_to_schedule(program, load_topology("nvswitch:8"))
    assert [(r.kind, r.root, r.chunks, len(r.hops)) for r in sched.routes] == [
        (RouteKind.OUT_TREE, q, 1, 7) for q in range(8)]
    assert all(h.path == (f"gpu{h.src}", "nvs0.0", f"gpu{h.dst}") for h in sched.routes[0].hops)


def test_inputs_are_validated() -> None:
    with pytest.raises(XmlError, match=r"topology 'ring-3' has 3 ranks but the program has ngpus=4"):
        program_to_schedule(ring_allgather(4), load_topology("ring:3"))
    broken = replace_step(ring_allgather(4), 1, 0, 1, srcoff=3, dstoff=3)
    with pytest.raises(XmlError, match=r"^program 'allgather_ring' does not deliver its allgather: "):
        program_to_schedule(broken, load_topology("ring:4"))
    allpairs = read(next(f for f in vector_files() if f.name == "alltoall_allpairs_4gpu_2inst_LL.xml"))
    with pytest.raises(XmlError, match=r"no path gpu\d->gpu\d through switches only"):
        program_to_schedule(allpairs, load_topology("ring:4"))


def test_a_chunk_received_twice_has_no_out_tree() -> None:
    # Rank 0 sends its chunk to rank 1 twice; rank 1 keeps the second copy in scratch, unused.
    g0 = Gpu(0, 0, 2, 0, (Threadblock(0, 1, 1, 0, (
        step(0, StepType.SEND, O, 0), step(1, StepType.SEND, O, 0), step(2, StepType.RECV, O, 1))),))
    g1 = Gpu(1, 0, 2, 1, (Threadblock(0, 0, 0, 0, (
        step(0, StepType.RECV, O, 0), step(1, StepType.RECV, S, 0), step(2, StepType.SEND, O, 1))),))
    program = Program(name="twice", proto=Protocol.SIMPLE, nchannels=1, nchunksperloop=2, ngpus=2,
                      coll="allgather", inplace=1, outofplace=0, min_bytes=0, max_bytes=0,
                      gpus=(g0, g1))  # fmt: skip
    assert check(program).valid
    with pytest.raises(XmlError, match=re.escape(
            "program 'twice': allgather: rank 0's chunk 0 reaches rank 1 more than once "
            "(from rank 0 and from rank 0); a redundant transfer has no out-tree form")):  # fmt: skip
        program_to_schedule(program, load_topology("ring:2"))


def _reduce_at_rank0(by_re: bool) -> Program:
    """2-rank in-place allreduce that reduces both chunks at rank 0, then sends the sums back.

    ``by_re``: rank 0 receives into scratch and reduces with a local ``re`` (msccl-tools' allpairs
    style) instead of one ``rrc``.
    """
    if by_re:
        reduce_steps: tuple[Step, ...] = (
            Step(0, StepType.RECV, S, 0, S, 0, 2),
            Step(1, StepType.REDUCE, S, 0, I, 0, 2),
        )
    else:
        reduce_steps = (Step(0, StepType.RECV_REDUCE_COPY, I, 0, I, 0, 2),)
    send_back = Step(len(reduce_steps), StepType.SEND, I, 0, I, 0, 2)
    g0 = Gpu(0, 2, 0, 2 if by_re else 0, (Threadblock(0, 1, 1, 0, (*reduce_steps, send_back)),))
    g1 = Gpu(1, 2, 0, 0, (Threadblock(0, 0, 0, 0, (
        Step(0, StepType.SEND, I, 0, I, 0, 2), Step(1, StepType.RECV, I, 0, I, 0, 2))),))  # fmt: skip
    return Program(name="at0", proto=Protocol.SIMPLE, nchannels=1, nchunksperloop=2, ngpus=2,
                   coll="allreduce", inplace=1, outofplace=0, min_bytes=0, max_bytes=0,
                   gpus=(g0, g1))  # fmt: skip


def test_allreduce_phases_follow_the_data_not_the_step_type() -> None:
    topo = load_topology("ring:2")
    link_GBps = topo.link("gpu0", "gpu1").GBps
    by_rrc, by_re = _reduce_at_rank0(False), _reduce_at_rank0(True)
    assert check(by_rrc).valid and check(by_re).valid
    # 2 chunks of partial sums 1->0, then 2 chunks of full sums 0->1: the two terms add up.
    assert program_algbw_GBps(by_rrc, topo) == program_algbw_GBps(by_re, topo) == pytest.approx(link_GBps / 2)


def test_allreduce_rooted_at_one_rank_has_no_schedule_form() -> None:
    with pytest.raises(XmlError, match=r"rank 0 is the reduction root of 2 of the 2 chunks, but the "
                       r"Schedule IR needs every rank to root nchunksperloop/ngpus = 2/2 of them"):
        program_to_schedule(_reduce_at_rank0(True), load_topology("ring:2"))

"""The checker's vectorised first run (msccl_xml._simfast) is still a checker.

check() runs every program first with numpy chunk memory and only runs the full per-chunk
simulation (which names the problems) when that run flags something. These tests hold the first
run to the full one on corrupted lowered programs: it flags exactly when the full run finds an
error or a warning, so a valid verdict from the fast path is the full checker's verdict.
"""

from __future__ import annotations

import dataclasses
from functools import cache

from hypothesis import given, settings, strategies as hst

from msccl_xml import check, lower
from msccl_xml._layout import layout_for
from msccl_xml._simulate import _run
from msccl_xml.program import BufferKind, Program, Step
from synth import load_topology, synthesize

COLLECTIVES = ("allgather", "reducescatter", "alltoall", "allreduce")
MUTATIONS = ("srcoff+1", "dstoff-1", "no-dep", "cnt-1", "drop", "src=dst", "swap-next")


@cache
def _program(collective: str, failure: str) -> Program:
    topo = load_topology("hpn:1x2x8", [failure] if failure else [])
    return lower(synthesize(collective, topo).schedule)


def _mutated(p: Program, g: int, t: int, s: int, kind: str) -> Program:
    gpu = p.gpus[g % len(p.gpus)]
    tb = gpu.threadblocks[t % len(gpu.threadblocks)]
    steps = list(tb.steps)
    s %= len(steps)
    st = steps[s]
    new: list[Step] = {
        "srcoff+1": lambda: [dataclasses.replace(st, srcoff=st.srcoff + 1)],
        "dstoff-1": lambda: [dataclasses.replace(st, dstoff=max(0, st.dstoff - 1))],
        "no-dep": lambda: [dataclasses.replace(st, depid=-1, deps=-1)],
        "cnt-1": lambda: [dataclasses.replace(st, cnt=max(1, st.cnt - 1))],
        "drop": lambda: [],
        "src=dst": lambda: [dataclasses.replace(st, srcbuf=st.dstbuf, srcoff=st.dstoff)],
        "swap-next": lambda: steps[s + 1:s + 2] + [st],
    }[kind]()
    steps[s:s + (2 if kind == "swap-next" else 1)] = new
    steps = [dataclasses.replace(x, s=i) for i, x in enumerate(steps)]
    tbs = list(gpu.threadblocks)
    tbs[tbs.index(tb)] = dataclasses.replace(tb, steps=tuple(steps))
    gpus = list(p.gpus)
    gpus[gpus.index(gpu)] = dataclasses.replace(gpu, threadblocks=tuple(tbs))
    return dataclasses.replace(p, gpus=tuple(gpus))


#: (collective, failure) cases; the reductions' symbolic sums are slow, so they run healthy only.
CASES = [("allgather", ""), ("allgather", "fail2"), ("alltoall", ""), ("alltoall", "fail2"),
         ("reducescatter", ""), ("allreduce", "")]


@settings(max_examples=25, deadline=None)
@given(case=hst.sampled_from(CASES), g=hst.integers(0, 15), t=hst.integers(0, 63), s=hst.integers(0, 63),
       kind=hst.sampled_from(MUTATIONS), inplace=hst.booleans())
def test_fast_run_flags_exactly_what_the_full_run_finds(case: tuple[str, str], g: int, t: int, s: int,
                                                        kind: str, inplace: bool) -> None:
    q = _mutated(_program(*case), g, t, s, kind)
    layout, _ = layout_for(q, inplace)  # both modes: in place aliases the buffers
    fast = _run(q, layout, None, fast=True)
    full = _run(q, layout, None, provenance=True)
    assert bool(fast.errors) == bool(full.errors or full.warnings), (kind, inplace, full.errors[:2])
    if not inplace:  # the mode lowered programs declare (outofplace="1")
        verdict = check(q)
        assert verdict.valid == (not full.errors)


def test_corrupted_lowered_programs_fail_the_check_and_name_the_step() -> None:
    for coll in COLLECTIVES:
        p = _program(coll, "fail2" if coll in ("allgather", "alltoall") else "")
        assert check(p).valid, coll
        g, tb = next((g, tb) for g in p.gpus for tb in g.threadblocks
                     if any(st.type.reads_src for st in tb.steps))
        s = next(st.s for st in tb.steps if st.type.reads_src)
        bad = _mutated(p, g.id, list(g.threadblocks).index(tb), s, "srcoff+1")
        verdict = check(bad)
        assert not verdict.valid, coll
        assert any(f"gpu {g.id} tb {tb.id} step {s}" in e for e in verdict.errors + verdict.warnings), verdict.errors[:3]


def _first_step(p: Program, pred: object) -> tuple[int, int, int]:
    """(gpu index, tb index, step) of the first step ``pred`` accepts."""
    for gi, g in enumerate(p.gpus):
        for ti, tb in enumerate(g.threadblocks):
            for st in tb.steps:
                if pred(st):  # type: ignore[operator]
                    return gi, ti, st.s
    raise AssertionError("no such step")


def _replaced(p: Program, g: int, t: int, s: int, **changes: object) -> Program:
    gpu = p.gpus[g]
    tb = gpu.threadblocks[t]
    steps = tuple(dataclasses.replace(st, **changes) if st.s == s else st for st in tb.steps)  # type: ignore[arg-type]
    tbs = tuple(dataclasses.replace(x, steps=steps) if x is tb else x for x in gpu.threadblocks)
    return dataclasses.replace(p, gpus=tuple(dataclasses.replace(x, threadblocks=tbs) if x is gpu else x
                                             for x in p.gpus))


def test_out_of_place_write_to_the_read_only_input_is_rejected_by_name() -> None:
    # Out of place the fast run keeps no bookkeeping for input reads: a write there must still flag.
    p = _program("allgather", "fail2")
    g, t, s = _first_step(p, lambda st: st.type.name == "LOCAL_COPY")
    tb = p.gpus[g].threadblocks[t]
    bad = _replaced(p, g, t, s, dstbuf=BufferKind.INPUT, dstoff=tb.steps[s].srcoff)
    assert _run(bad, layout_for(bad, False)[0], None, fast=True).errors
    verdict = check(bad)
    assert not verdict.valid
    assert any(f"gpu {p.gpus[g].id} tb {tb.id} step {s}: writes i[" in e for e in verdict.errors), verdict.errors[:3]


def test_read_of_an_output_chunk_before_its_write_is_rejected_by_name() -> None:
    # A chunk without a writer has no readers in the fast run: the read itself must flag.
    p = _program("reducescatter", "")
    g, t, s = _first_step(p, lambda st: st.type.reads_src and st.srcbuf is BufferKind.INPUT)
    tb = p.gpus[g].threadblocks[t]
    bad = _replaced(p, g, t, s, srcbuf=BufferKind.OUTPUT, srcoff=0)
    assert _run(bad, layout_for(bad, False)[0], None, fast=True).errors
    verdict = check(bad)
    assert not verdict.valid
    assert f"gpu {p.gpus[g].id} tb {tb.id} step {s}: reads o[0], which holds no data yet" in verdict.errors, \
        verdict.errors[:3]

"""``loopcoll inspect`` on the real 2xH200 Inspector logs with a contention phase (tests/vectors/inspector)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runtime.observe import connect, ingest, phases, segments, select_window, slow_periods
from runtime.observe.bridge import inspector_samples
from runtime.observe.report import build_report, render_text

VEC = Path(__file__).resolve().parents[1] / "vectors" / "inspector" / "h200x2_contention"
GT = {p["phase"]: (p["start_us"] / 1e6, p["end_us"] / 1e6)
      for p in json.loads((VEC / "ground_truth.json").read_text())["phases"]}
# Per-rank median AllGather coll_busbw_gbs, healthy / contended / recovered (the figures).
EXPECTED = {0: (164.5, 101.1, 129.1), 1: (131.1, 102.3, 164.5)}


@pytest.fixture(scope="module")
def con():
    c = connect()
    s = ingest(c, [VEC])
    assert s.records["coll"] == 103365 + 103430 and not s.rejected
    return c


@pytest.fixture(scope="module")
def periods(con):
    return slow_periods(con)


def test_finds_the_contention_period_within_half_a_second(periods):
    assert len(periods) == 1
    p = periods[0]
    lo, hi = GT["contended"]
    assert abs(p.start_s - lo) <= 0.5 and abs(p.end_s - hi) <= 0.5
    assert p.drop > 0.3 and set(p.series) == {"AllGather:8M", "ReduceScatter:8M", "AllReduce:64M"}


def test_per_rank_medians_per_segment_match_the_phases(con, periods):
    ag = [s for s in segments(con) if s.coll == "AllGather"]
    assert sorted({s.segment for s in ag}) == [0, 1, 2]
    assert [any(s.slow for s in ag if s.segment == k) for k in (0, 1, 2)] == [False, True, False]
    for rank, want in EXPECTED.items():
        got = [next(s.busbw_median_gbs for s in ag if s.segment == k and s.rank == rank) for k in (0, 1, 2)]
        assert got == pytest.approx(want, rel=0.02), (rank, got)


def test_joined_view_recovered_matches_healthy_and_the_last_rank_moves(con, periods):
    ag = [s for s in segments(con) if s.coll == "AllGather"]
    joined = [next(s.joined_busbw_median_gbs for s in ag if s.segment == k) for k in (0, 1, 2)]
    assert joined[2] == pytest.approx(joined[0], rel=0.02) and joined[1] < 0.97 * joined[0]
    last = {(s.segment, s.rank): s.last_share for s in ag}
    assert last[(0, 0)] > 0.6 and last[(2, 1)] > 0.6        # rank 0 finishes last healthy, rank 1 recovered
    assert last[(0, 0)] + last[(0, 1)] == pytest.approx(1.0, abs=1e-9)


def test_phases_follow_the_workload_pauses(con):
    ph = phases(con)
    assert len(ph) == 3
    for row, name in zip(ph, ("healthy", "contended", "recovered")):
        assert abs(row.start_s - GT[name][0]) <= 0.5 and abs(row.end_s - GT[name][1]) <= 0.5


def test_report_text_and_bridge(con, periods):
    doc = build_report(con)
    text = render_text(doc)
    assert "Slow periods" in text and "busbw -" in text and "164.48" in text and "101.07" in text
    assert not [s for s in doc["stragglers"] if s["flagged"]]   # which rank is last moves: no steady straggler
    lo = GT["healthy"][0]
    select_window(con, lo, lo + 1.0)                          # one second of records is enough here
    try:
        n = con.execute("SELECT count(*) FROM w_coll").fetchone()[0]
        samples, report = inspector_samples(con)
    finally:
        select_window(con)
    assert report.accepted == n > 1000 and not report.rejected
    assert all(lo <= x.t_s <= lo + 1.0 for x in samples)
    s = samples[0]
    assert s.kind == "coll" and s.origin == "inspector" and s.seq is None and "coll_sn" in s.extra
    ag = next(x for x in samples if x.collective == "allgather")
    assert ag.bytes == 2 * 8388608                            # S = per-rank chunk x 2 ranks
    assert ag.throughput_GBps == pytest.approx(ag.extra["busbw_gbs"] * 2, rel=0.01)   # busbw = algbw/2 at n=2

"""Analyses on synthetic Inspector logs: slow periods, stragglers, phases, summary, bridge."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.observe import (
    SyntheticSpec,
    connect,
    cusum_segments,
    ingest,
    nodes,
    phases,
    query,
    select_window,
    slow_periods,
    stragglers,
    summary,
    write_logs,
)
from runtime.observe.bridge import inspector_samples
from runtime.observe.evaluate import score_periods, score_sets
from runtime.observe.synthetic import random_spec
from runtime.formats.profile import profile_from_dict


def loaded(tmp_path, spec):
    truth = write_logs(tmp_path, spec)
    con = connect()
    s = ingest(con, [tmp_path])
    assert s.records["coll"] + s.records["p2p"] == truth.records and not s.rejected
    return con, truth


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_detection_precision_and_recall_on_random_scenarios(tmp_path, seed):
    """A smaller version of benchmarks/observe.py (there: 512 ranks over more seeds)."""
    con, truth = loaded(tmp_path, random_spec(seed, nranks=48, ncolls=240))
    det = [(p.start_s, p.end_s) for p in slow_periods(con)]
    assert score_periods(det, [(a, b) for a, b, _ in truth.slow_periods]) == (1.0, 1.0)
    flagged = {r.rank for r in stragglers(con) if r.flagged}
    assert score_sets(flagged, truth.stragglers) == (1.0, 1.0)


def test_host_level_straggler_is_localised(tmp_path):
    con, _ = loaded(tmp_path, SyntheticSpec(nranks=32, ncolls=150, stragglers=tuple(range(8, 16)),
                                            straggler_delay=0.3, seed=4))
    rows = stragglers(con)
    assert {r.rank for r in rows if r.flagged} == set(range(8, 16))
    assert all(r.confidence > 0.999 for r in rows if r.flagged)
    assert [n["hostname"] for n in nodes(rows) if n["suspect"]] == ["node001"]


def test_healthy_run_has_no_findings(tmp_path):
    con, _ = loaded(tmp_path, SyntheticSpec(nranks=16, ncolls=200, hiccup_prob=0.05, seed=8))
    assert slow_periods(con) == []
    assert not [r for r in stragglers(con) if r.flagged]


def test_window_limits_every_analysis(tmp_path):
    con, truth = loaded(tmp_path, SyntheticSpec(nranks=4, ncolls=200, slow_periods=((20.0, 40.0, 0.5),), seed=3))
    assert len(slow_periods(con)) == 1
    select_window(con, truth.t0_s + 50.0, None)
    assert slow_periods(con) == []
    n = con.execute("SELECT count(*) FROM w_coll").fetchone()[0]
    assert n == sum(r["records"] for r in summary(con)) and 0 < n < truth.records
    assert min(p.start_s for p in phases(con)) >= truth.t0_s + 50.0


def test_summary_percentiles_match_numpy(tmp_path):
    con, _ = loaded(tmp_path, SyntheticSpec(nranks=4, ncolls=50, seed=6))
    for row in summary(con):
        vals = np.array([v for (v,) in con.execute("SELECT busbw_gbs FROM coll WHERE coll = ?", [row["coll"]]).fetchall()])
        assert row["records"] == len(vals)
        assert row["busbw_p50_gbs"] == pytest.approx(np.percentile(vals, 50), rel=1e-9)
        assert row["busbw_p90_gbs"] == pytest.approx(np.percentile(vals, 90), rel=1e-9)


def test_phases_split_on_pauses_and_on_a_changed_mix(tmp_path):
    write_logs(tmp_path / "a", SyntheticSpec(nranks=2, ncolls=40, colls=(("AllGather", 1 << 20),), seed=1))
    write_logs(tmp_path / "b", SyntheticSpec(nranks=2, ncolls=40, colls=(("AllReduce", 1 << 22),), seed=2,
                                             t0_s=1_800_000_100.0))
    con = connect()
    ingest(con, [tmp_path])
    ph = phases(con)
    assert [p.signature.split(":")[1] for p in ph] == ["AllGather", "AllReduce"]
    assert sum(p.records for p in ph) == 160


@settings(max_examples=40)
@given(n_before=st.integers(10, 60), n_slow=st.integers(4, 40), n_after=st.integers(0, 60),
       drop=st.floats(0.2, 0.6), seed=st.integers(0, 10_000))
def test_property_cusum_finds_one_step_down(n_before, n_slow, n_after, drop, seed):
    rng = np.random.default_rng(seed)
    x = np.concatenate([np.ones(n_before), np.full(n_slow, 1.0 - drop), np.ones(n_after)])
    x = x * (1.0 + rng.normal(0.0, 0.01, size=len(x)))
    segs = cusum_segments(list(x))
    assert len(segs) == 1
    a, b = segs[0]
    assert abs(a - n_before) <= 1 and abs(b - (n_before + n_slow - 1)) <= 1


@settings(max_examples=40)
@given(n=st.integers(1, 200), sigma=st.floats(0.0, 0.03), seed=st.integers(0, 10_000))
def test_property_cusum_quiet_on_noise(n, sigma, seed):
    x = 1.0 + np.random.default_rng(seed).normal(0.0, sigma, size=n)
    assert cusum_segments(list(x)) == []


def test_bridge_maps_ranks_through_the_profile_and_rejects_unknowns(tmp_path):
    con, _ = loaded(tmp_path, SyntheticSpec(nranks=4, ncolls=5, colls=(("AllGather", 1 << 20),), p2p=True))
    prof = profile_from_dict({"format": "loopcoll.profile/1", "topology": "ring:8", "communicators": [
        {"name": "world", "ranks": [7, 5, 3, 1], "collectives": [{"collective": "allgather", "sizes": [4194304]}]}]})
    samples, rep = inspector_samples(con, profile=prof)
    assert rep.accepted == 4 * 5 + 4 * 5 and not rep.rejected
    pairs = {(s.src, s.dst) for s in samples if s.kind == "pair"}
    assert pairs == {(7, 5), (5, 3), (3, 1), (1, 7)}                  # local r -> r+1, mapped
    assert {s.src for s in samples if s.kind == "coll"} == {7, 5, 3, 1}
    assert all(s.bytes == 4 << 20 for s in samples if s.kind == "coll")
    assert [s.t_s for s in samples if s.kind == "coll"] == sorted(s.t_s for s in samples if s.kind == "coll")
    other = profile_from_dict({"format": "loopcoll.profile/1", "topology": "ring:8", "communicators": [
        {"name": "tp", "ranks": [0, 1], "collectives": []}]})
    none, rep2 = inspector_samples(con, profile=other)
    assert none == [] and rep2.rejected == {"unknown_comm": 40}
    mapped, rep3 = inspector_samples(con, profile=other, comm_map={"0x5eed0c0ffee": "tp"})
    assert rep3.rejected == {"unknown_rank": 25} and len(mapped) == 15 and {s.src for s in mapped} == {0, 1}


def test_sql_errors_are_observe_errors(tmp_path):
    from runtime.observe import ObserveError

    con = connect()
    with pytest.raises(ObserveError, match="query failed"):
        query(con, "SELECT nope FROM coll")
    assert query(con, "SELECT count(*) AS n FROM coll") == (["n"], [(0,)])


def test_executor_coll_telemetry_gets_the_same_analyses(tmp_path):
    """loopcoll's own `coll` samples (global ranks, seq) run through the same views as Inspector records."""
    from runtime.formats.telemetry import parse_sample, write_jsonl

    rng = np.random.default_rng(0)
    samples = []
    for seq in range(300):
        t = 1_800_000_000.0 + 0.5 * seq
        slow = 2.0 if 50 <= seq < 100 else 1.0
        base = 0.004 * slow * (1.0 + rng.normal(0.0, 0.01))
        for src in range(4):
            wait = 0.0 if src == 2 else 0.0015 + rng.exponential(0.0002)   # rank 2 arrives last every time
            samples.append(parse_sample({"format": "loopcoll.telemetry/1", "t_s": t, "comm": "dp0", "seq": seq,
                                         "version": 1, "kind": "coll", "src": src, "bytes": 1 << 26,
                                         "busy_s": base + wait, "collective": "allgather", "origin": "executor"}))
    write_jsonl(tmp_path / "tele.jsonl", samples)
    con = connect()
    assert ingest(con, [tmp_path]).records["telemetry"] == 1200
    (row,) = summary(con)
    assert (row["coll"], row["n_ranks"], row["records"], row["size_bucket"]) == ("AllGather", 4, 1200, "16M")
    (p,) = slow_periods(con)
    assert abs(p.start_s - (1_800_000_000.0 + 25.0)) < 1.0 and abs(p.end_s - (1_800_000_000.0 + 49.5)) < 1.0
    assert [r.rank for r in stragglers(con) if r.flagged] == [2]
    assert inspector_samples(con)[0] == []                  # only Inspector records go back out as samples

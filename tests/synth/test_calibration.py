"""Cost model, calibration profiles and fitting (synth.simulation.costmodel / .calibration)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from synth.baselines import nccl_direct_alltoall, nccl_ring
from synth.simulation import IDEAL, CostProfile, ExecutorCost, load_profile, simulate
from synth.simulation.calibration import (
    CalibrationError,
    Observation,
    fit_profile,
    format_nccl_tests,
    parse_inspector,
    parse_nccl_tests,
    predict_us,
    synthetic_observations,
    tree_schedule,
)
from synth.simulation.costmodel import ProfileError, profile_from_dict, profile_to_dict
from synth.topologies import named_topology

VECTORS = Path(__file__).resolve().parents[1] / "vectors" / "inspector"
MB = 2**20
# Real 2xH200 NV18 NCCL 2.28.9 algbw (GB/s) at 1, 8, 64, 256, 1024 MB (the data the h200 profile was fitted on).
H200X2 = {"allgather": [14, 131, 361, 451, 518], "alltoall": [17, 101, 338, 484, 622]}


def test_ideal_profile_is_the_bandwidth_model():
    topo = named_topology("nvswitch:4")
    s = nccl_ring("allgather", topo)
    a = simulate(s, topo, 64 * MB)
    b = simulate(s, topo, 64 * MB, profile="ideal")
    assert a.time_s == b.time_s and b.profile == "ideal" and b.executor == ""


def test_launch_adds_and_efficiency_scales():
    topo = named_topology("nvswitch:2")
    s = nccl_ring("allgather", topo)
    base = simulate(s, topo, 1 << 30, slices_per_chunk=8, rtol=0)
    launch = simulate(s, topo, 1 << 30, slices_per_chunk=8, rtol=0,
                      profile=CostProfile("l", {"nccl_ring": ExecutorCost(100.0, 0.0, {"nvlink": 1.0})}))
    assert launch.time_s == pytest.approx(base.time_s + 100e-6, rel=1e-12)
    half = simulate(s, topo, 1 << 30, slices_per_chunk=8, rtol=0,
                    profile=CostProfile("h", {"nccl_ring": ExecutorCost(0.0, 0.0, {"nvlink": 0.5})}))
    # bandwidth part doubles, the 0.025 us wire latency does not
    assert half.time_s == pytest.approx(2 * base.time_s - 2 * 0.025e-6, rel=1e-9)
    assert half.profile == "h" and half.executor == "nccl_ring"


def test_hop_cost_grows_with_depth():
    topo = named_topology("nvswitch:8")
    prof = CostProfile("p", {"msccl": ExecutorCost(0.0, 5.0, {"nvlink": 1.0})})
    t = {}
    for name, s in (("ring", nccl_ring("allgather", topo)), ("tree", tree_schedule("allgather", topo))):
        t[name] = simulate(s, topo, MB, rtol=0, profile=prof, executor="msccl").time_s - simulate(s, topo, MB, rtol=0).time_s
    assert t["ring"] > t["tree"] > 0  # depth 7 vs 3


def test_missing_executor_or_class_is_an_error():
    topo = named_topology("nvswitch:2")
    with pytest.raises(ProfileError, match="no costs for executor 'nccl_ring'"):
        simulate(nccl_ring("allgather", topo), topo, MB, profile=CostProfile("x", {"msccl": ExecutorCost(1, 1, {"nvlink": 1})}))
    with pytest.raises(ProfileError, match="no efficiency for link class 'nvlink'"):
        simulate(nccl_ring("allgather", topo), topo, MB, profile=CostProfile("x", {"nccl_ring": ExecutorCost(1, 1, {"net": 1})}))


def test_profile_json_round_trip_and_validation(tmp_path):
    prof = load_profile("h200")
    doc = profile_to_dict(prof)
    assert doc["format"] == "loopcoll.calibration/1"
    again = profile_from_dict(json.loads(json.dumps(doc)))
    assert again.executors == prof.executors
    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc))
    assert load_profile(str(path)).executors == prof.executors
    bad = dict(doc, format="loopcoll.calibration/9")
    with pytest.raises(ProfileError, match="format"):
        profile_from_dict(bad)
    with pytest.raises(ProfileError, match="efficiency"):
        profile_from_dict(dict(doc, executors={"msccl": {"launch_us": 1, "hop_us": 1, "efficiency": {"nvlink": -1}}}))
    with pytest.raises(ProfileError, match="neither a shipped profile"):
        load_profile(str(tmp_path / "missing.json"))


@pytest.mark.parametrize("collective", ["allgather", "alltoall"])
def test_shipped_profile_matches_real_h200x2(collective):
    prof = load_profile("h200")
    topo = named_topology("nvswitch:2")
    sched = nccl_ring(collective, topo) if collective == "allgather" else nccl_direct_alltoall(topo)
    from synth.simulation import auto_slices

    for mb, real in zip([1, 8, 64, 256, 1024], H200X2[collective]):
        s = mb * MB
        sim = simulate(sched, topo, s, slices_per_chunk=auto_slices(sched, s), profile=prof).algbw_GBps
        bound = 2.0 if mb == 1 else 1.15
        assert 1 / bound <= sim / real <= bound, (collective, mb, sim, real)
        ideal = simulate(sched, topo, s, slices_per_chunk=auto_slices(sched, s)).algbw_GBps
        assert ideal / real > 1.15  # the ideal model is far off: the comparison is not vacuous


def test_shipped_profile_records_its_fit():
    fit = load_profile("h200").fit
    points = fit["points"]
    assert {p["executor"] for p in points} >= {"nccl_ring", "nccl_p2p", "torch_p2p"}
    assert all(p["loo_error"] is not None for p in points if p["topology"] == "nvswitch:2")
    assert fit["status"]["nccl_ring.launch_us"] == "fitted"
    assert fit["status"]["nccl_ring.hop_us"].startswith("prior")


_SIZES = [64 * 1024, MB, 16 * MB, 256 * MB]


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    launch=st.floats(5.0, 200.0),
    hop=st.floats(2.0, 20.0),  # nccl-tests prints 0.01 us: a smaller per-hop cost is below its resolution
    eff=st.floats(0.2, 1.0),
    n=st.sampled_from([4, 8]),
)
@example(launch=150.0, hop=2.0, eff=0.248046875, n=8)  # a local minimum at hop 0 before the restart
def test_roundtrip_through_nccl_tests_tables(launch, hop, eff, n):
    """profile -> nccl-tests tables of ring, tree and direct schedules -> calibrate -> same profile (1 %)."""
    true = CostProfile("t", {"msccl": ExecutorCost(launch, hop, {"nvlink": eff})})
    spec = f"nvswitch:{n}"
    obs = synthetic_observations(true, spec, "allgather", ("ring", "tree", "direct"), _SIZES)
    reread = []
    for shape in ("ring", "tree", "direct"):
        text = format_nccl_tests("allgather", n, [(o.nbytes, o.time_us) for o in obs if o.shape == shape])
        table = parse_nccl_tests(text)
        assert table["nranks"] == n and table["collective"] == "allgather"
        reread += [Observation("allgather", spec, "msccl", shape, s, t) for s, t, _ in table["rows"]]
    got = fit_profile(reread, name="t", loo=False).profile.cost("msccl")
    assert got.launch_us == pytest.approx(launch, rel=0.01)
    assert got.hop_us == pytest.approx(hop, rel=0.01)
    assert got.efficiency["nvlink"] == pytest.approx(eff, rel=0.01)


def test_single_depth_keeps_hop_at_prior_and_reports_it():
    true = CostProfile("t", {"nccl_p2p": ExecutorCost(30.0, 3.0, {"nvlink": 0.8})})
    obs = synthetic_observations(true, "nvswitch:4", "alltoall", ("direct",), [MB, 64 * MB], executor="nccl_p2p")
    cal = fit_profile(obs, name="t", base=CostProfile("b", {"nccl_p2p": ExecutorCost(0.0, 3.0, {})}), loo=True)
    assert cal.status["nccl_p2p.hop_us"] == "prior"
    assert cal.profile.cost("nccl_p2p").launch_us == pytest.approx(30.0, rel=1e-3)
    assert all(p.loo_error is None for p in cal.points)  # 2 points, 2 fitted parameters: no LOO


# A real all_gather_perf log layout (nccl-tests 2.13+: redop and root columns), 8 ranks; numbers invented.
REAL_AG = """# nThread 1 nGpus 1 minBytes 1048576 maxBytes 1073741824 step: 4(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid  41233 on  dgx-h200 device  0 [0x18] NVIDIA H200
#  Rank  1 Group  0 Pid  41234 on  dgx-h200 device  1 [0x2a] NVIDIA H200
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
     1048576        131072     float    none      -1    43.91   23.88   11.94      0    42.10   24.91   12.45      0
     4194304        524288     float    none      -1    48.52   86.44   43.22      0    47.99   87.40   43.70      0
  1073741824     134217728     float    none      -1   2071.4  518.36  259.18      0   2068.3  519.14  259.57      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 104.78
#
"""

# An old (2.0-era) alltoall_perf layout: no root column, "N/A" wrong counts, no "Collective test" line.
OLD_A2A = """# nThread 1 nGpus 2 minBytes 8 maxBytes 8388608 step: 2(factor) warmup iters: 5 iters: 20 validation: 0
#
# Using devices
#   Rank  0 Pid   1200 on    node01 device  0 [0x07] Tesla V100-SXM2-32GB
#
#                                                     out-of-place                       in-place
#       size         count    type   redop     time   algbw   busbw  error     time   algbw   busbw  error
#        (B)    (elements)                     (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
     8388608       1048576   float    none    95.43   87.90   43.95    N/A    95.10   88.21   44.10    N/A
"""


# The per-iteration layout (nccl-tests 2.17+, per-iteration timing on): 8 more columns per half.
PER_ITER = """# Collective test starting: alltoall_perf
#  Rank  0 Group  0 Pid  77 on  n1 device  0 [0000:18:00] NVIDIA H200
#  Rank  1 Group  0 Pid  78 on  n1 device  1 [0000:2a:00] NVIDIA H200
#       size         count      type   redop    root     time   algbw   busbw  #wrong    i_min    i_max    i_p99    i_cv%     time   algbw   busbw  #wrong    i_min    i_max    i_p99    i_cv%
    67108864      16777216     float    none      -1   198.55  338.00  169.00       0   196.10   203.70   203.10     0.91   198.20  338.60  169.30       0   196.00   201.90   201.50     0.70
"""


def test_parse_real_nccl_tests_layouts():
    it = parse_nccl_tests(PER_ITER)
    assert it["collective"] == "alltoall" and it["nranks"] == 2 and it["rows"] == [(67108864, 198.55, 338.0)]
    ag = parse_nccl_tests(REAL_AG, collective="allgather")
    assert ag["nranks"] == 2
    assert ag["rows"] == [(1048576, 43.91, 23.88), (4194304, 48.52, 86.44), (1073741824, 2071.4, 518.36)]
    old = parse_nccl_tests(OLD_A2A, collective="alltoall")
    assert old["rows"] == [(8388608, 95.43, 87.90)]
    with pytest.raises(CalibrationError, match="no nccl-tests header naming the collective.*pass --collective allgather"):
        parse_nccl_tests(REAL_AG)
    with pytest.raises(CalibrationError, match="line 10: cannot read"):
        parse_nccl_tests(REAL_AG.replace("23.88", "99.99"), collective="allgather")


def test_parse_real_inspector_excerpt():
    # the first 40 lines of a real 2xH200 NCCL 2.28.9 Inspector log (rank 0)
    d = parse_inspector([VECTORS / "h200x2_rank0_head.jsonl"])
    assert set(d) == {("allgather", 16 * MB), ("reducescatter", 16 * MB), ("allreduce", 64 * MB)}
    assert all(v["nranks"] == 2 and v["time_us"] > 0 for v in d.values())


def test_predict_uses_failures_in_spec():
    o = Observation("allgather", "h200-proto", "nccl_ring", "ring", 128 * MB, 1.0)
    d = Observation("allgather", "h200-proto@scale:gpu0:tor0.0:0.5", "nccl_ring", "ring", 128 * MB, 1.0)
    assert predict_us(d, IDEAL) == pytest.approx(2 * predict_us(o, IDEAL), rel=0.02)


def test_mixing_wall_and_kernel_times_in_one_executor_is_refused():
    a = Observation("allgather", "nvswitch:2", "nccl_ring", "ring", 16 * MB, 80.0, "torch")
    b = Observation("allgather", "nvswitch:2", "nccl_ring", "ring", 64 * MB, 200.0, "inspector", "kernel")
    with pytest.raises(CalibrationError, match="mix host-timed"):
        fit_profile([a, b], name="x")


def test_transfer_timings_follow_the_profile():
    from synth.simulation import simulate_transfers

    topo = named_topology("nvswitch:4")
    s = nccl_ring("allgather", topo)
    ideal = simulate_transfers(s, topo, 16 * MB, rtol=0)
    cal = simulate_transfers(s, topo, 16 * MB, rtol=0, profile="h200")
    assert cal.time_s == pytest.approx(simulate(s, topo, 16 * MB, rtol=0, profile="h200").time_s, rel=1e-12)
    launch = load_profile("h200").cost("nccl_ring").launch_us * 1e-6
    assert min(t.start_s for t in cal.transfers) == pytest.approx(launch)
    assert cal.time_s > ideal.time_s + launch


def _write(path, doc):
    path.write_text(json.dumps(doc))
    return str(path)


def test_a_profile_file_takes_missing_executors_from_its_base(tmp_path):
    """A file covering one executor (as calibrate wrote them before profiles recorded a base) simulates them all."""
    h200 = load_profile("h200")
    own = ExecutorCost(10.0, 1.0, {"nvlink": 0.5})
    plain = _write(tmp_path / "mine.json", profile_to_dict(CostProfile("mine", {"nccl_ring": own})))
    prof = load_profile(plain)
    assert prof.cost("nccl_ring") == own and prof.cost("msccl") == h200.cost("msccl")
    assert dict(prof.inherited) == {k: "h200" for k in ("msccl", "nccl_p2p", "nccl_tree", "torch_p2p")}
    topo = named_topology("nvswitch:2")
    from synth.simulation.costmodel import inherited_costs

    sched = tree_schedule("allgather", topo)
    assert simulate(sched, topo, MB, profile=prof).time_s == simulate(sched, topo, MB, profile="h200").time_s
    assert inherited_costs(prof, ["msccl", "nccl_ring"]) == {"msccl": "h200"}
    # a base that is another file, named relative to this one; its own base fills the rest
    (tmp_path / "sub").mkdir()
    _write(tmp_path / "p2p.json", profile_to_dict(CostProfile("p2p", {"nccl_p2p": own})))
    chained = load_profile(_write(tmp_path / "sub" / "c.json", {**profile_to_dict(CostProfile("c", {"nccl_ring": own})),
                                                                "base": "../p2p.json"}))
    assert chained.inherited["nccl_p2p"] == "p2p" and chained.inherited["msccl"] == "h200"
    assert chained.cost("nccl_p2p") == own


def test_an_ideal_base_or_a_looping_base_is_a_clear_error(tmp_path):
    topo = named_topology("nvswitch:2")
    doc = {**profile_to_dict(CostProfile("mine", {"msccl": ExecutorCost(1, 0, {"nvlink": 1})})), "base": "ideal"}
    prof = load_profile(_write(tmp_path / "i.json", doc))
    with pytest.raises(ProfileError, match="no costs for executor 'nccl_ring' .it has msccl; nor has its base profile "
                                           "'ideal'.: measure nccl_ring too, or .* --base h200"):
        simulate(nccl_ring("allgather", topo), topo, MB, profile=prof)
    with pytest.raises(ProfileError, match="base profile 'loop.json' leads back to itself"):
        load_profile(_write(tmp_path / "loop.json", {**doc, "base": "loop.json"}))


def test_fit_records_copied_executors_and_at_bound_parameters():
    true = CostProfile("t", {"nccl_ring": ExecutorCost(30.0, 3.4, {"nvlink": 0.8})})
    obs = synthetic_observations(true, "nvswitch:2", "allgather", ("ring",), [MB, 64 * MB, 256 * MB], executor="nccl_ring")
    cal = fit_profile(obs, name="t", base=load_profile("h200"), loo=False)
    assert dict(cal.profile.inherited) == {k: "h200" for k in ("msccl", "nccl_p2p", "nccl_tree", "torch_p2p")}
    assert cal.profile.base == "h200" and cal.implausible() == [] and cal.worst_error < 1e-6
    eff = next(p for p in cal.params if p.name == "nccl_ring.efficiency.nvlink")
    assert eff.status == "fitted" and eff.at_bound == "" and eff.value == pytest.approx(0.8, rel=1e-4)
    # the same times claimed for a fabric 10x slower: the efficiency hits its upper bound
    slow = [Observation(o.collective, "ring:2", o.executor, o.shape, o.nbytes, o.time_us / 10) for o in obs]
    bad = fit_profile(slow, name="t", loo=False)
    assert any("efficiency.direct sits at its upper bound 4 = 400% of capacity" in w for w in bad.implausible())


def test_one_step_leave_one_out_matches_refits_on_real_measurements():
    """2xH200 NCCL AllGather (real): the Gauss-Newton step predicts every left-out point like a full refit."""
    obs = [Observation("allgather", "nvswitch:2", "nccl_ring", "ring", mb * MB, mb * MB / 1e9 / g * 1e6)
           for mb, g in zip([8, 64, 256], [131, 361, 451])]
    step = fit_profile(obs, name="s", loo="step")
    refit = fit_profile(obs, name="r", loo="refit")
    assert step.profile.fit["leave_one_out"] == "step" and refit.profile.fit["leave_one_out"] == "refit"
    for a, b in zip(step.points, refit.points):
        assert a.loo_error is not None and abs(a.loo_error) > abs(a.error)  # held out: worse than in sample
        assert a.loo_error == pytest.approx(b.loo_error, abs=0.01)
    with pytest.raises(CalibrationError, match="leave-one-out mode 'jackknife'"):
        fit_profile(obs, name="x", loo="jackknife")

"""Cost model, calibration profiles and fitting (synth.simulation.costmodel / .calibration)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
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
    with pytest.raises(CalibrationError, match="say which collective"):
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

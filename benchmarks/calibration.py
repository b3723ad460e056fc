"""Calibrate the simulator on real 2×H200 measurements and report how far it is from them.

    python benchmarks/calibration.py [--write-profile] [--quick]

Data (copied into ``benchmarks/data/``):

* ``h200x2_nccl.json``: NCCL AllGather / AllToAll and torch batched-P2P AllGather algbw on one
  host with 2 H200 (NV18), torch 2.11 / NCCL 2.28.9, host-timed medians;
* ``h200x2_inspector_medians.json``: median kernel times of the real NCCL Inspector logs of the
  same host (AllGather 16 MB, ReduceScatter 16 MB, AllReduce 64 MB), healthy phase;
* the MCCL paper's prototype (2 hosts × 4 H200, 200 Gbit/s NIC per GPU): NCCL AllGather of 16 MB
  per GPU at 74.02 GB/s healthy, 44.76 GB/s with the rank 0 ↔ rank 4 path halved.

The shipped profile ``synth/simulation/profiles/h200.json`` is fitted here (``--write-profile``):

1. on ``nvswitch:2``: ``launch_us`` and the ``nvlink`` efficiency of ``nccl_ring`` (AllGather),
   ``nccl_p2p`` (AllToAll) and ``torch_p2p`` (batched P2P AllGather), with ``hop_us`` fixed at
   NCCL's own per-step latency estimate for NVLink/Simple rings (3.4 µs, NCCL ``tuning.cc``
   ``hwLat``): every 2-GPU schedule is one hop deep, so launch and per-hop costs are confounded;
2. on ``h200-proto``: the ``net`` efficiency of ``nccl_ring`` from the paper's healthy figure
   (one point, one parameter: exact in-sample, nothing left to validate it but the degraded case).

Executors with no measurement (``nccl_tree``, ``msccl``; the ``net`` class of ``nccl_p2p`` and
``torch_p2p``) borrow ``nccl_ring``'s terms and are marked ``borrowed`` in the profile.

Writes ``benchmarks/results/calibration.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _report import RESULTS, markdown_table  # noqa: E402

from synth.fileio import write_text_atomic  # noqa: E402
from synth.simulation.calibration import (  # noqa: E402
    Observation,
    fit_profile,
    predict_us,
    synthetic_observations,
)
from synth.simulation.costmodel import IDEAL, CostProfile, ExecutorCost, load_profile, profile_to_dict  # noqa: E402

DATA = Path(__file__).resolve().parent / "data"
PROFILE_PATH = Path(__file__).resolve().parents[1] / "synth" / "simulation" / "profiles" / "h200.json"
MB = 2**20
NCCL_NVLINK_RING_SIMPLE_HOP_US = 3.4  # NCCL src/graph/tuning.cc, hwLat[NVLINK][RING][SIMPLE]
PAPER = {"healthy_GBps": 74.02, "degraded_GBps": 44.76, "after_swap_GBps": 59.72}
PROTO_S = 8 * 16 * MB  # AllGather of 16 MB per GPU on 8 GPUs, nccl-tests S = output size
PROTO_DEGRADED = "h200-proto@scale:gpu0:tor0.0:0.5"  # scales the gpu0 <-> tor0.0 cable, both directions
# The 1 MB points weigh less: the measured 1 MB AllGather (75 us) is slower than the 8 MB one (64 us), which
# no model monotone in size reproduces (NCCL changes protocol and channel count at small sizes); at full
# weight they pull the 8 MB points 17 % off. The acceptance bound at 1 MB is 2x, at 8 MB-1 GB 15 %.
SMALL_WEIGHT = 0.3


def measured_observations() -> list[Observation]:
    doc = json.loads((DATA / "h200x2_nccl.json").read_text())
    src = "h200x2_nccl.json"
    obs = []
    for coll, kind, shape in (("allgather", "nccl_ring", "ring"), ("alltoall", "nccl_p2p", "direct")):
        d = doc["native_nccl"][coll]
        for mb, bw in zip(d["size_MB"], d["algbw_GBps"]):
            s = mb * MB
            obs.append(Observation(coll, "nvswitch:2", kind, shape, s, s / (bw * 1e9) * 1e6, f"{src} native {coll}",
                                   weight=SMALL_WEIGHT if mb < 8 else 1.0))
    d = doc["batched_p2p_allgather"]
    for mb, bw in zip(d["size_MB"], d["algbw_GBps"]):
        s = mb * MB
        obs.append(Observation("allgather", "nvswitch:2", "torch_p2p", "direct", s, s / (bw * 1e9) * 1e6, f"{src} batched P2P"))
    return obs


def proto_observation(bw: float, spec: str = "h200-proto") -> Observation:
    return Observation("allgather", spec, "nccl_ring", "ring", PROTO_S, PROTO_S / (bw * 1e9) * 1e6, "MCCL paper §6.2.2")


def build_profile() -> tuple[CostProfile, list[dict]]:
    """Fit the shipped h200 profile (two stages, module docstring); returns it and its points."""
    hop = NCCL_NVLINK_RING_SIMPLE_HOP_US
    priors = CostProfile("priors", {k: ExecutorCost(0.0, hop, {}) for k in ("nccl_ring", "nccl_p2p", "torch_p2p")})
    fixed = {k: {"hop_us"} for k in priors.executors}
    stage1 = fit_profile(measured_observations(), name="h200", base=priors, fixed=fixed, loo="refit")
    ring = stage1.profile.cost("nccl_ring")
    base2 = CostProfile("stage1", {"nccl_ring": ExecutorCost(ring.launch_us, ring.hop_us, {**ring.efficiency, "net": 1.0})})
    stage2 = fit_profile([proto_observation(PAPER["healthy_GBps"])], name="h200", base=base2,
                         fixed={"nccl_ring": {"launch_us", "hop_us", "efficiency.nvlink"}}, loo=False)
    ring = stage2.profile.cost("nccl_ring")
    execs = dict(stage1.profile.executors)
    execs["nccl_ring"] = ring
    for kind in ("nccl_p2p", "torch_p2p"):
        c = execs[kind]
        execs[kind] = ExecutorCost(c.launch_us, c.hop_us, {**c.efficiency, "net": ring.efficiency["net"],
                                                           "direct": c.efficiency["nvlink"]})
    execs["nccl_ring"] = ExecutorCost(ring.launch_us, ring.hop_us, {**ring.efficiency, "direct": ring.efficiency["nvlink"]})
    for kind in ("nccl_tree", "msccl"):
        execs[kind] = execs["nccl_ring"]
    points = [dict(p) for p in stage1.profile.fit["points"]] + [dict(p) for p in stage2.profile.fit["points"]]
    status = {**stage2.status, **stage1.status}  # stage 2 fitted only nccl_ring.efficiency.net
    status.update({f"{k}.hop_us": "prior: NCCL tuning.cc hwLat NVLink Ring Simple 3.4 us" for k in fixed})
    status.update({f"{k}.efficiency.{c}": "borrowed: nccl_ring" for k in ("nccl_p2p", "torch_p2p") for c in ("net",)})
    status.update({f"{k}.efficiency.direct": f"borrowed: {k} nvlink" for k in ("nccl_ring", "nccl_p2p", "torch_p2p")})
    status.update({f"{k}.{p}": "borrowed: nccl_ring (no measurement)" for k in ("nccl_tree", "msccl")
                   for p in ("launch_us", "hop_us", "efficiency.nvlink", "efficiency.net", "efficiency.direct")})
    fit = {
        "fitted_with": "python benchmarks/calibration.py --write-profile (scipy.optimize.least_squares on log time ratios)",
        "data": [
            "2xH200 NV18, torch 2.11 + NCCL 2.28.9, host-timed medians: NCCL AllGather/AllToAll 1 MB-1 GB, "
            "torch batched P2P AllGather 8 MB-1 GB (benchmarks/data/h200x2_nccl.json)",
            "MCCL paper section 6.2.2: 2 hosts x 4 H200, 200 Gbit/s NIC per GPU, NCCL AllGather 16 MB per GPU "
            "74.02 GB/s healthy (fits nccl_ring efficiency.net; 44.76 GB/s degraded is held out)",
        ],
        "status": dict(sorted(status.items())),
        "points": points,
        "worst_in_sample_error": max(abs(p["error"]) for p in points),
    }
    desc = ("H100/H200-class nodes: NVLink/NVSwitch hosts with 200-400 Gbit/s NICs per GPU. Fitted on 2xH200 "
            "measurements and the MCCL prototype; see fit.status for what each number rests on.")
    return CostProfile("h200", execs, desc, fit), points


def _row(o: Observation, prof: CostProfile, loo: float | None = None) -> dict:
    s = o.nbytes
    meas = s / (o.time_us * 1e-6) / 1e9
    cal = s / (predict_us(o, prof) * 1e-6) / 1e9
    ideal = s / (predict_us(o, IDEAL) * 1e-6) / 1e9
    return {"case": o.source, "collective": o.collective, "topology": o.topology, "executor": o.executor,
            "size_MB": round(s / MB, 3), "measured_GBps": round(meas, 2), "ideal_GBps": round(ideal, 2),
            "calibrated_GBps": round(cal, 2), "error_pct": round(100 * (cal / meas - 1), 2),
            "loo_error_pct": None if loo is None else round(100 * loo, 2)}


def _latency_only_profile(shipped: CostProfile) -> CostProfile:
    """nccl_ring with a lossless network and the per-hop cost that reproduces the paper's healthy figure."""
    from scipy.optimize import brentq

    ring = shipped.cost("nccl_ring")
    target_us = proto_observation(PAPER["healthy_GBps"]).time_us

    def prof(hop: float) -> CostProfile:
        return CostProfile("latency-only", {"nccl_ring": ExecutorCost(ring.launch_us, hop, {**ring.efficiency, "net": 1.0})})

    def gap(hop: float) -> float:
        return predict_us(proto_observation(PAPER["healthy_GBps"]), prof(hop)) - target_us

    return prof(brentq(gap, ring.hop_us, 5000.0, xtol=1e-6))


def roundtrip(seed_profile: CostProfile) -> list[dict]:
    """Profile → nccl-tests tables of ring / tree / direct schedules → calibrate → same profile?"""
    from synth.simulation.calibration import format_nccl_tests, parse_nccl_tests

    true = seed_profile.cost("msccl")
    obs = synthetic_observations(CostProfile("truth", {"msccl": true}), "nvswitch:8", "allgather",
                                 ("ring", "tree", "direct"), [MB, 16 * MB, 256 * MB])
    reread = []
    for shape in ("ring", "tree", "direct"):
        rows = [(o.nbytes, o.time_us) for o in obs if o.shape == shape]
        table = parse_nccl_tests(format_nccl_tests("allgather", 8, rows))
        reread += [Observation("allgather", "nvswitch:8", "msccl", shape, s, t, "synthetic") for s, t, _ in table["rows"]]
    got = fit_profile(reread, name="roundtrip", loo=False).profile.cost("msccl")
    out = []
    for p, a, b in (("launch_us", true.launch_us, got.launch_us), ("hop_us", true.hop_us, got.hop_us),
                    ("efficiency.nvlink", true.efficiency["nvlink"], got.efficiency["nvlink"])):
        out.append({"parameter": p, "true": round(a, 4), "recovered": round(b, 4), "rel_error_pct": round(100 * (b / a - 1), 4)})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write-profile", action="store_true", help=f"write the fitted profile to {PROFILE_PATH}")
    ap.add_argument("--quick", action="store_true", help="skip the round-trip check")
    args = ap.parse_args()
    t0 = time.perf_counter()
    prof, points = build_profile()
    if args.write_profile:
        write_text_atomic(PROFILE_PATH, json.dumps(profile_to_dict(prof), indent=1, sort_keys=True) + "\n")
        print(f"wrote {PROFILE_PATH}")
    shipped = load_profile("h200")
    loo = {(p["collective"], p["executor"], p["nbytes"], p["topology"]): p["loo_error"] for p in shipped.fit.get("points", [])}
    rows = [_row(o, shipped, loo.get((o.collective, o.executor, o.nbytes, o.topology))) for o in measured_observations()]
    cols = ["case", "size_MB", "measured_GBps", "ideal_GBps", "calibrated_GBps", "error_pct", "loo_error_pct"]
    print(f"profile {shipped.name}: simulated vs measured algbw (nvswitch:2; error = calibrated / measured - 1)")
    print(markdown_table(cols, rows))
    med = json.loads((DATA / "h200x2_inspector_medians.json").read_text())["phases"]["healthy"]
    insp = []
    for m in med:
        o = Observation(m["collective"], "nvswitch:2", "nccl_ring", "ring", m["nbytes"], m["time_us"], "Inspector kernel", "kernel")
        r = _row(o, shipped)
        r["kernel_us"] = m["time_us"]
        r["calibrated_us"] = round(predict_us(o, shipped), 1)
        r["launch_us"] = round(shipped.cost("nccl_ring").launch_us, 1)
        flow = r["calibrated_us"] - r["launch_us"]
        r["flow_us"] = round(flow, 1)  # the calibrated time without the launch term
        r["in_kernel_fixed_us"] = round(m["time_us"] - flow, 1)  # kernel time the flow part does not explain
        r["host_side_us"] = round(r["launch_us"] - r["in_kernel_fixed_us"], 1)  # launch not seen by the kernel timer
        insp.append(r)
    icols = ["collective", "size_MB", "kernel_us", "calibrated_us", "launch_us", "flow_us", "in_kernel_fixed_us",
             "host_side_us"]
    print("\nNCCL Inspector kernel times (healthy phase; out of sample, kernel-only: no host launch cost)")
    print(markdown_table(icols, insp))
    proto = []
    for label, spec, paper in (("healthy", "h200-proto", PAPER["healthy_GBps"]), ("degraded", PROTO_DEGRADED, PAPER["degraded_GBps"])):
        o = proto_observation(paper, spec)
        r = _row(o, shipped)
        r["case"] = f"h200-proto NCCL AllGather 16 MB/GPU, {label}"
        r["paper_GBps"] = paper
        proto.append(r)
    # The other extreme for the network's loss: none of it is capacity (efficiency.net = 1), all of it a per-hop
    # latency, solved (scipy brentq) so that the healthy case still gives the paper's 74.02 GB/s.
    latency_only = _latency_only_profile(shipped)
    for r, spec in zip(proto, ("h200-proto", PROTO_DEGRADED)):
        o = proto_observation(r["paper_GBps"], spec)
        r["latency_only_GBps"] = round(PROTO_S / (predict_us(o, latency_only) * 1e-6) / 1e9, 2)
    r_hop = round(latency_only.cost("nccl_ring").hop_us, 1)
    proto[0]["latency_only_hop_us"] = r_hop
    pcols = ["case", "paper_GBps", "ideal_GBps", "calibrated_GBps", "error_pct", "latency_only_GBps"]
    print("\nMCCL prototype (healthy: in-sample, the only net-class point; degraded: held out)")
    print(markdown_table(pcols, proto))
    rt = [] if args.quick else roundtrip(shipped)
    if rt:
        print("\nround trip (msccl terms of the profile → nccl-tests tables of ring/tree/direct AllGather on nvswitch:8 → calibrate)")
        print(markdown_table(["parameter", "true", "recovered", "rel_error_pct"], rt))
    params = [{"executor": k, "launch_us": round(c.launch_us, 3), "hop_us": round(c.hop_us, 3),
               **{f"eff_{cl}": round(v, 4) for cl, v in c.efficiency.items()}} for k, c in shipped.executors.items()]
    print("\nprofile h200 parameters")
    print(markdown_table(["executor", "launch_us", "hop_us", "eff_nvlink", "eff_net", "eff_direct"], params))
    elapsed = time.perf_counter() - t0
    RESULTS.mkdir(parents=True, exist_ok=True)
    cmd = "python benchmarks/calibration.py" + (" --write-profile" if args.write_profile else "") + (" --quick" if args.quick else "")
    doc = {"benchmark": "calibration", "command": cmd, "profile": profile_to_dict(shipped), "nvswitch2": rows,
           "inspector": insp, "h200_proto": proto, "roundtrip": rt, "parameters": params, "elapsed_s": round(elapsed, 2)}
    write_text_atomic(RESULTS / "calibration.json", json.dumps(doc, indent=1, sort_keys=True) + "\n")
    md = (f"# calibration\n\nProduced by `{cmd}` with profile `h200`.\n\n## 2×H200 (nvswitch:2)\n\n{markdown_table(cols, rows)}\n\n"
          f"## NCCL Inspector kernel times (out of sample)\n\n{markdown_table(icols, insp)}\n\n"
          f"## MCCL prototype (h200-proto)\n\n{markdown_table(pcols, proto)}\n\n"
          + (f"## Round trip\n\n{markdown_table(['parameter', 'true', 'recovered', 'rel_error_pct'], rt)}\n\n" if rt else "")
          + f"## Profile parameters\n\n{markdown_table(['executor', 'launch_us', 'hop_us', 'eff_nvlink', 'eff_net', 'eff_direct'], params)}\n")
    write_text_atomic(RESULTS / "calibration.md", md)
    print(f"\nwrote {RESULTS / 'calibration.json'} and .md in {elapsed:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Contention benchmark: SPRT gate delays, false reconfigurations, and the gains of transforms,
configuration choice and re-synthesis under steady and erratic congestion (flow simulator).

Setting: ``leaf_spine(8, 4)`` — 8 hosts with one GPU and a 100 Gbit/s NIC each, two hosts per leaf,
four 200 Gbit/s leaf uplinks to one spine — the ideal cost profile (pure bandwidth model), 64 MB
per collective. Background flows (:mod:`synth.simulation.contention`) take a fraction of a link's
capacity in both directions for an iteration; measured latency = simulated time × lognormal
noise (σ 3 %).

Tables (one run; every row measured in it):

1. detection delay (collectives from the onset to SUSTAINED) of the gate at 20–90 % sustained load
   on one NIC, median over seeds; plain CUSUM (h = 6.9, no cap) for contrast;
2. false reconfigurations under transient-only microbursts (1–2 iterations, 30–90 %), gate and CUSUM;
3. algbw over 8 evaluation epochs for ring and tree (double binary tree) AllReduce / AllGather under
   steady (one NIC at 80 %) and erratic (a flow at 80 % moving between leaf uplinks every epoch)
   congestion: unchanged pattern, REACT transforms (detected from FCTs over a batch of 4 epochs),
   configuration choice (ring / tree / loopcoll schedule, bounded exploration), and the full loop
   (ForestColl re-synthesized on the measured capacities).

Run: ``python benchmarks/contention.py`` (``--seeds N`` for more noise seeds; default 5).
Writes ``benchmarks/results/contention.{json,md,png}``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._report import RESULTS, markdown_table  # noqa: E402
from runtime.contention.configchoice import ConfigChooser, contention_bucket  # noqa: E402
from runtime.contention.gate import ContentionGate, ContentionState, Cusum  # noqa: E402
from runtime.contention.react import detect_congestion, flows_from_transfers  # noqa: E402
from runtime.contention.transforms import choose_transform, double_tree  # noqa: E402
from synth import synthesize  # noqa: E402
from synth.baselines import nccl_ring  # noqa: E402
from synth.simulation import simulate, simulate_transfers  # noqa: E402
from synth.simulation.contention import (  # noqa: E402
    ContentionScenario,
    erratic,
    leaf_spine,
    microbursts,
    nic_links,
    spine_links,
    sustained,
)
from synth.topologies.model import Link, Topology  # noqa: E402

NBYTES = 64 << 20
NOISE = 0.03
ONSET = 20
BATCH = 4
EVAL = 8


class Timer:
    """Simulated time of a schedule per iteration of a scenario, cached per load state."""

    def __init__(self, topo: Topology) -> None:
        self.topo = topo
        self.cache: dict[tuple[int, tuple[Any, ...]], float] = {}
        self.alive: list[Any] = []  # keeps every cached schedule alive, so its id() is never reused

    def time_s(self, sched: Any, sc: ContentionScenario, it: int) -> float:
        key = (id(sched), tuple(sc.loads_at(it).items()))
        if key not in self.cache:
            self.alive.append(sched)
            self.cache[key] = simulate(sched, sc.topology_at(self.topo, it), NBYTES, check=False).time_s
        return self.cache[key]


def detection(timer: Timer, sched: Any, seeds: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    rows, traces = [], {}
    for load in (0.2, 0.5, 0.8, 0.9):
        sc = sustained(nic_links(timer.topo, 3), load, start=ONSET)
        delays, cdelays, rhos = [], [], []
        for seed in range(seeds):
            rng = np.random.default_rng(seed)
            gate = ContentionGate()
            cus: Cusum | None = None
            base: list[float] = []
            det = cdet = None
            trace = []
            for it in range(ONSET + 40):
                x = timer.time_s(sched, sc, it) * math.exp(NOISE * rng.standard_normal())
                v = gate.observe("ring", x)
                trace.append((it, v.rho, v.state.value))
                if it < 8:
                    base.append(x)
                elif cus is None:
                    mu0, sd = float(np.mean(base)), float(np.std(base))
                    sd = max(sd / mu0, 0.02)
                    cus = Cusum(1.0, 1.2, sd, 6.9)
                if cus is not None and it >= ONSET and cdet is None and cus.update(x / mu0):
                    cdet = it - ONSET + 1
                elif cus is not None and it < ONSET:
                    cus.update(x / mu0)
                if it >= ONSET and det is None and v.state is ContentionState.SUSTAINED:
                    det = it - ONSET + 1
                if it >= ONSET:
                    rhos.append(v.rho)
            delays.append(det if det is not None else math.inf)
            cdelays.append(cdet if cdet is not None else math.inf)
            if seed == 0:
                traces[f"{round(100 * load)}"] = trace
        rows.append({"load_pct": round(100 * load), "rho_median": float(np.median(rhos)),
                     "gate_delay_median": float(np.median(delays)), "gate_delay_max": float(np.max(delays)),
                     "cusum_delay_median": float(np.median(cdelays)), "seeds": seeds})
    return rows, traces


def false_reconfigs(timer: Timer, sched: Any, seeds: int, iters: int = 200) -> list[dict[str, Any]]:
    rows = []
    for length in (1, 2):
        for load in (0.3, 0.5, 0.8, 0.9):
            sc = microbursts(nic_links(timer.topo, 3), load, length=length, every=10, start=12)
            gate_fp = cus_fp = transient = bursts = 0
            for seed in range(seeds):
                rng = np.random.default_rng(100 + seed)
                gate = ContentionGate()
                base: list[float] = []
                cus = None
                mu0 = 1.0
                for it in range(iters):
                    x = timer.time_s(sched, sc, it) * math.exp(NOISE * rng.standard_normal())
                    v = gate.observe("ring", x)
                    gate_fp += v.state is ContentionState.SUSTAINED
                    transient += v.state is ContentionState.TRANSIENT
                    if it < 8:
                        base.append(x)
                        continue
                    if cus is None:
                        mu0 = float(np.mean(base))
                        cus = Cusum(1.0, 1.2, max(float(np.std(base)) / mu0, 0.02), 6.9)
                    cus_fp += cus.update(x / mu0)
                bursts += sum(1 for it in range(iters) if sc.loads_at(it) and not sc.loads_at(it - 1))
            rows.append({"burst_len": length, "load_pct": round(100 * load), "bursts": bursts,
                         "gate_false_reconfigs": gate_fp, "gate_transient_verdicts": transient,
                         "cusum_false_alarms": cus_fp, "seeds": seeds})
    return rows


def _mean_topology(topo: Topology, sc: ContentionScenario, its: range) -> Topology:
    """What a link estimator averaging over the batch would measure: mean residual capacity."""
    caps = {lk.key: 0.0 for lk in topo.links}
    for it in its:
        for lk in sc.topology_at(topo, it).links:
            caps[lk.key] += lk.gbps / len(its)
    return topo.with_links([Link(lk.src, lk.dst, caps[lk.key], lk.latency_us) for lk in topo.links], name=topo.name)


def gains(timer: Timer) -> list[dict[str, Any]]:
    topo = timer.topo
    rows = []
    scenarios = {"steady": sustained(nic_links(topo, 3), 0.8, name="steady NIC 80%"),
                 "erratic": erratic(spine_links(topo), 0.8, seed=7, name="erratic uplinks 80%")}
    batch, ev = range(BATCH), range(BATCH, BATCH + EVAL)
    for coll in ("allreduce", "allgather"):
        pats = {"ring": nccl_ring(coll, topo), "tree": double_tree(coll, topo)}
        nominal_lc = synthesize(coll, topo, chunks=4).schedule
        for pname, sched in pats.items():
            for sname, sc in scenarios.items():
                t_un = [timer.time_s(sched, sc, it) for it in ev]
                # REACT: detect from FCTs over the batch (store-and-forward timing), transform, revert if slower
                tts = [simulate_transfers(sched, sc.topology_at(topo, it), NBYTES, slices_per_chunk=1) for it in batch]
                rep = detect_congestion(*flows_from_transfers(tts))
                congested = list(rep.steady_nodes) or list(rep.congested_ranks[:2])
                measured = _mean_topology(topo, sc, batch)
                choice = choose_transform(sched, topo, measured, NBYTES, congested, steps=8, min_gain=0.05,
                                          simulate_top=2)
                t_tr, reverted = list(t_un), False
                if choice.schedule is not None:
                    t_new = [timer.time_s(choice.schedule, sc, it) for it in ev]
                    if sum(t_new[:2]) > sum(t_un[:2]):  # the next epochs are slower: revert
                        reverted = True
                        t_tr = t_new[:2] + t_un[2:]
                    else:
                        t_tr = t_new
                # configuration choice over ring / tree / loopcoll schedule (nominal synthesis)
                cands = {"ring": pats["ring"], "tree": pats["tree"], "loopcoll": nominal_lc}
                healthy = {n: simulate(s, topo, NBYTES, check=False).time_s for n, s in cands.items()}
                prior = {n: simulate(s, measured, NBYTES, check=False).time_s for n, s in cands.items()}
                ch = ConfigChooser(list(cands), budget=0.1, warm_calls=1)
                cur = pname
                ran: list[str] = []
                for it in list(batch) + list(ev):
                    t = timer.time_s(cands[cur], sc, it)
                    ctx = (coll, contention_bucket(max(t / healthy[cur], 1.0)))
                    ch.record(ctx, cur, t)
                    if it in ev:
                        ran.append(cur)
                    nxt = ch.choose(ctx, prior_s=prior, current=cur)
                    if nxt.explore:  # run the exploration next iteration, charged to the budget
                        t2 = timer.time_s(cands[nxt.name], sc, it + 1)
                        ch.record(ctx, nxt, t2)
                    cur = ch.choose(ctx, prior_s=prior, current=cur).name
                t_cc = [timer.time_s(cands[n], sc, it) for n, it in zip(ran, ev)]
                # full loop: ForestColl re-synthesized on the measured capacities
                lc = synthesize(coll, measured, chunks=4).schedule
                t_lc = [timer.time_s(lc, sc, it) for it in ev]

                def algbw(ts: list[float]) -> float:
                    return NBYTES * len(ts) / sum(ts) / 1e9

                base = algbw(t_un)
                row = {"collective": coll, "pattern": pname, "scenario": sname,
                       "unchanged_GBps": base,
                       "transform_gain_pct": 100 * (algbw(t_tr) / base - 1),
                       "transform": (choice.message[:60] + (" (reverted)" if reverted else "")) if choice.schedule else "keep",
                       "config_gain_pct": 100 * (algbw(t_cc) / base - 1),
                       "config_ran": "/".join(sorted(set(ran))),
                       "config_explore_pct": 100 * ch.explore_fraction,
                       "resynth_gain_pct": 100 * (algbw(t_lc) / base - 1),
                       "detected": f"{len(rep.steady)} steady, {len(rep.erratic)} erratic flows; ranks {congested}"}
                g = {"transform": row["transform_gain_pct"], "config": row["config_gain_pct"],
                     "re-synthesis": row["resynth_gain_pct"]}
                row["winner"] = max(sorted(g), key=lambda k: g[k]) if max(g.values()) > 1.0 else "none"
                rows.append(row)
                print(f"  {coll} {pname} {sname}: transform {row['transform_gain_pct']:+.1f}% config "
                      f"{row['config_gain_pct']:+.1f}% resynth {row['resynth_gain_pct']:+.1f}%", flush=True)
    return rows


def plot(traces: dict[str, Any], gain_rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(13, 4.5))
    for load, trace in traces.items():
        its = [t[0] for t in trace]
        a1.plot(its, [t[1] for t in trace], label=f"{load} % load")
        hit = [t[0] for t in trace if t[2] == "sustained"]
        if hit:
            a1.axvline(hit[0], ls=":", color=a1.lines[-1].get_color())
    a1.axvline(ONSET, color="k", lw=0.8)
    a1.set_xlabel("collective (iteration)")
    a1.set_ylabel("ρ = latency / baseline")
    a1.set_title("SPRT gate: onset (black) and SUSTAINED (dotted)")
    a1.legend()
    labels = [f"{r['collective'][:4]} {r['pattern']}\n{r['scenario']}" for r in gain_rows]
    x = np.arange(len(gain_rows))
    for k, (key, name) in enumerate((("transform_gain_pct", "transforms"), ("config_gain_pct", "config choice"),
                                      ("resynth_gain_pct", "re-synthesis"))):
        a2.bar(x + (k - 1) * 0.27, [r[key] for r in gain_rows], 0.27, label=name)
    a2.set_xticks(x, labels, fontsize=7)
    a2.axhline(0, color="k", lw=0.8)
    a2.set_ylabel("algbw gain over unchanged pattern (%)")
    a2.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--out", default="contention")
    args = ap.parse_args(argv)
    topo = leaf_spine(8, 4)
    timer = Timer(topo)
    ring = nccl_ring("allreduce", topo)
    print("detection delay ...", flush=True)
    det_rows, traces = detection(timer, ring, args.seeds)
    print(markdown_table(list(det_rows[0]), det_rows))
    print("false reconfigurations ...", flush=True)
    fp_rows = false_reconfigs(timer, ring, args.seeds)
    print(markdown_table(list(fp_rows[0]), fp_rows))
    print("gains ...", flush=True)
    gain_rows = gains(timer)
    cols = ["collective", "pattern", "scenario", "unchanged_GBps", "transform_gain_pct", "config_gain_pct",
            "config_ran", "config_explore_pct", "resynth_gain_pct", "winner", "transform", "detected"]
    print(markdown_table(cols, gain_rows))
    command = "python benchmarks/contention.py" + (f" --seeds {args.seeds}" if args.seeds != 5 else "")
    RESULTS.mkdir(parents=True, exist_ok=True)
    doc = {"benchmark": args.out, "command": command, "topology": topo.name, "nbytes": NBYTES, "noise_sigma": NOISE,
           "profile": "ideal", "detection": det_rows, "false_reconfigurations": fp_rows, "gains": gain_rows}
    (RESULTS / f"{args.out}.json").write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    md = (f"# {args.out}\n\nProduced by `{command}` (topology {topo.name}, 64 MB, ideal cost profile, "
          f"latency noise σ {NOISE:.0%}).\n\n## Detection delay (collectives after the onset)\n\n"
          + markdown_table(list(det_rows[0]), det_rows)
          + "\n\n## False reconfigurations under transient-only traffic\n\n" + markdown_table(list(fp_rows[0]), fp_rows)
          + "\n\n## algbw gain over the unchanged pattern (8 evaluation epochs)\n\n" + markdown_table(cols, gain_rows) + "\n")
    (RESULTS / f"{args.out}.md").write_text(md)
    plot(traces, gain_rows, RESULTS / f"{args.out}.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Closed-loop timeline: the flow simulator runs collectives while a scenario changes capacities.

Each collective of the workload runs, on the simulated clock, with the version its
``(comm, collective)`` has in effect, on the *true* topology of that moment
(:func:`synth.simulation.simulate_transfers`). Its per-transfer timings become the telemetry an
executor would send (one ``pair`` sample per GPU pair, one ``inject`` sample per GPU with
intra-host sends); the in-process :class:`runtime.Controller` ingests them and polls. A
re-synthesis runs for real; **its measured wall time is charged to the simulated clock**: the new
version is ready that much later (collectives keep running the stale one meanwhile) and takes effect
at the first collective that starts after it is ready plus ``swap_s``.

The scenario format (``loopcoll.scenario/1``) is documented in ``docs/controller.md`` §7.

Examples
--------
>>> sc = scenario_from_dict({"format": "loopcoll.scenario/1", "topology": "hpn:1x2x4", "duration_s": 0.004,
...     "workload": [{"collective": "alltoall", "size_bytes": 1 << 22}],
...     "controller": {"export_xml": False}})
>>> res = run_timeline(sc)
>>> res.collectives > 0, res.publications, res.false_positives   # healthy: nothing to do
(True, 0, 0)
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from runtime.formats.aggregate import WindowAggregator
from runtime.formats.profile import profile_from_dict
from runtime.formats.telemetry import parse_sample
from runtime.loop.controller import Controller, ControllerConfig
from runtime.scenarios.noise import TimingNoise
from runtime.scenarios.scenario import (
    SCENARIO_FORMAT, Change, Scenario, ScenarioError, load_scenario, preset_scenario, scenario_from_dict,
)
from synth import LoopcollError, Schedule, Topology, load_topology
from synth.simulation import TransferTimes, simulate_transfers

__all__ = ["SCENARIO_FORMAT", "Change", "Scenario", "TimelineResult", "load_scenario", "preset_scenario",
           "run_timeline", "scenario_from_dict"]


@dataclass(frozen=True, slots=True)
class ChangeReport:
    """What the loop did about one persistent change (times in seconds of simulated time)."""

    label: str
    start_s: float
    end_s: float | None
    detected_s: float | None
    detection_delay_s: float | None
    detection_collectives: int | None
    detection_samples: int | None
    synth_time_s: float | None
    reaction_s: float | None
    version_before: int | None
    version_after: int | None
    version_final: int | None
    algbw_before_GBps: float | None
    algbw_stale_GBps: float | None
    algbw_adapted_GBps: float | None
    speedup: float | None
    recovery_reaction_s: float | None
    algbw_recovered_GBps: float | None


@dataclass(frozen=True)
class TimelineResult:
    """The timeline: per-collective rows, controller decisions, and per-change figures."""

    scenario: Scenario
    rows: tuple[dict[str, Any], ...]
    decisions: tuple[dict[str, Any], ...]
    changes: tuple[ChangeReport, ...]
    collectives: int
    publications: int
    syntheses: int
    aborts: int
    false_positives: int
    refinements: int
    wall_s: float
    message: str

    def to_dict(self) -> dict[str, Any]:
        sc = asdict(self.scenario)
        return {"format": "loopcoll.timeline/1", "scenario": sc, "collectives": self.collectives,
                "publications": self.publications, "syntheses": self.syntheses, "aborts": self.aborts,
                "false_positives": self.false_positives, "refinements": self.refinements, "wall_s": self.wall_s,
                "message": self.message,
                "changes": [asdict(c) for c in self.changes], "decisions": list(self.decisions),
                "rows": list(self.rows)}


def _samples(tt: TransferTimes, t0: float, comm: str, coll: str, seq: int, version: int,
             global_ranks: Sequence[int], host: Mapping[int, int | None],
             phases: Sequence[str | None] | None = None) -> list[dict[str, Any]]:
    """The telemetry of one simulated collective, as the executor reports it (docs/telemetry.md §1): per
    (pair, phase) and per (GPU, phase) the bytes and the span from the first transfer's start to the last's
    end; ``phases[route]`` names each route's AllReduce phase (None: no phases)."""
    Acc = dict[tuple[int, int | None, str | None], list[float]]
    pairs: Acc = defaultdict(lambda: [0.0, math.inf, 0.0])
    inject: Acc = defaultdict(lambda: [0.0, math.inf, 0.0])
    for x in tt.transfers:
        u, w = global_ranks[x.src], global_ranks[x.dst]
        phase = None if phases is None else phases[x.route]
        acc = [pairs[(u, w, phase)]]
        if host.get(u) is not None and host.get(u) == host.get(w):
            acc.append(inject[(u, None, phase)])
        for a in acc:
            a[0] += x.bytes
            a[1] = min(a[1], x.start_s)
            a[2] = max(a[2], x.end_s)
    base = {"format": "loopcoll.telemetry/1", "comm": comm, "seq": seq, "version": version, "collective": coll,
            "origin": "simulator"}
    out = []
    for kind, flows in (("pair", pairs), ("inject", inject)):
        for (u, v, phase), (b, s, e) in sorted(flows.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0, kv[0][2] or "")):
            if e > s:
                row = {**base, "t_s": t0 + e, "kind": kind, "src": u, "dst": v, "bytes": int(round(b)), "busy_s": e - s}
                out.append(row if phase is None else {**row, "extra": {"phase": phase}})
    return out


def route_phases(schedule: Schedule) -> tuple[str, ...] | None:
    """Each route's AllReduce phase (``reducescatter`` for an in-tree, ``allgather`` for an out-tree), or None
    for a collective of one phase.

    >>> from synth import load_topology, synthesize
    >>> sorted(set(route_phases(synthesize("allreduce", load_topology("ring:3")).schedule)))
    ['allgather', 'reducescatter']
    """
    if schedule.collective != "allreduce":
        return None
    return tuple("reducescatter" if r.kind.value == "in_tree" else "allgather" for r in schedule.routes)


def run_timeline(scenario: Scenario, *, store_dir: str | os.PathLike[str] | None = None,
                 nominal: Topology | None = None,
                 progress: Callable[[float, str], None] | None = None,
                 noise: TimingNoise | None = None, aggregate: WindowAggregator | None = None) -> TimelineResult:
    """Run the closed loop over the scenario; see the module docstring for the model.

    ``noise`` (:class:`runtime.scenarios.noise.TimingNoise`) perturbs every telemetry sample's
    ``busy_s`` before the controller sees it (the collectives' own times, and so algbw, stay exact).
    ``aggregate`` (:class:`runtime.formats.aggregate.WindowAggregator`) folds the (noisy) samples at the
    source as executors following with ``window`` > 1 do: the controller sees ``loopcoll.telemetry/2`` windows.

    ``progress`` is called before every simulated collective with the fraction of the scenario's
    simulated time done and a phrase (the CLI's live line; it throttles itself).
    """
    wall0 = time.perf_counter()
    topo = nominal if nominal is not None else load_topology(scenario.topology)
    comms: dict[str, dict[str, set[int]]] = defaultdict(lambda: defaultdict(set))
    for comm, coll, size in scenario.workload:
        comms[comm][coll].add(size)
    profile = profile_from_dict({"format": "loopcoll.profile/1", "topology": scenario.topology, "communicators": [
        {"name": c, "ranks": list(scenario.ranks.get(c, range(topo.nranks))),
         "collectives": [{"collective": k, "sizes": sorted(v)} for k, v in sorted(colls.items())]}
        for c, colls in sorted(comms.items())]})
    try:
        cfg = ControllerConfig(**{"export_xml": False, **dict(scenario.controller)})
    except TypeError as exc:
        raise ScenarioError(f"scenario: controller: {exc}") from None
    clock = [0.0]
    decisions: list[dict[str, Any]] = []
    tmp = None
    if store_dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="loopcoll-replay-")
        store_dir = tmp.name
    try:
        ctl = Controller(topo, profile, store_dir, config=cfg, clock=lambda: clock[0], log=decisions.append)
        ctl.manager.charged_synth_s = scenario.charge_synth_s
        if progress is not None:
            progress(0.0, "bootstrap: synthesizing the first versions")
        ctl.bootstrap()
        return _loop(scenario, topo, ctl, clock, decisions, wall0, progress, noise, aggregate)
    finally:
        if tmp is not None:
            tmp.cleanup()


def _loop(scenario: Scenario, topo: Topology, ctl: Controller, clock: list[float], decisions: list[dict[str, Any]],
          wall0: float, progress: Callable[[float, str], None] | None = None,
          noise: TimingNoise | None = None, aggregate: WindowAggregator | None = None) -> TimelineResult:
    host = {g.rank: g.host for g in topo.gpus if g.rank is not None}
    active: dict[tuple[str, str], tuple[int, Schedule]] = {}
    for key in sorted({(c, k) for c, k, _ in scenario.workload}):
        dep = ctl.deployed_schedule(*key)
        if dep is None:
            raise LoopcollError(f"no schedule for {key[0]}/{key[1]} after bootstrap")
        active[key] = (dep[0].version, dep[1])
    swaps: list[tuple[float, tuple[str, str], int, Schedule]] = []
    topo_cache: dict[tuple[int, ...], Topology] = {}
    sim_cache: dict[tuple[Any, ...], TransferTimes] = {}
    rows: list[dict[str, Any]] = []
    seq: dict[str, int] = defaultdict(int)
    t = 0.0
    i = 0
    persistent_at_version: dict[tuple[tuple[str, str], int], tuple[int, ...]] = {k: () for k in
                                                                                  ((key, v) for key, (v, _) in
                                                                                   active.items())}
    version_t: dict[tuple[tuple[str, str], int], float] = {}
    false_pos = 0
    refinements = 0
    seen_flags = 0
    stable = 0
    last_sig: tuple[Any, ...] | None = None
    while t < scenario.duration_s:
        if progress is not None:
            progress(t / scenario.duration_s, f"{t * 1e3:.3g} of {scenario.duration_s * 1e3:g} ms simulated, "
                     f"{len(decisions)} controller decisions")
        for sw in sorted([s for s in swaps if s[0] <= t], key=lambda s: s[0]):
            swaps.remove(sw)
            active[sw[1]] = (sw[2], sw[3])
        comm, coll, size = scenario.workload[i % len(scenario.workload)]
        i += 1
        key = (comm, coll)
        version, sched = active[key]
        on = tuple(j for j, c in enumerate(scenario.changes) if c.active(t))
        true = topo_cache.get(on)
        if true is None:
            true = topo
            for j in on:
                true = scenario.changes[j].apply(true)
            topo_cache[on] = true
        ck = (key, version, on, size)
        tt = sim_cache.get(ck)
        if tt is None:
            tt = simulate_transfers(sched, ctl.manager.comm_topology(comm, true), size,
                                    slices_per_chunk=scenario.slices_per_chunk, rtol=scenario.rtol, check=False)
            sim_cache[ck] = tt
        granks = sched.meta.get("global_ranks") or list(range(sched.nranks))
        samples = _samples(tt, t, comm, coll, seq[comm], version, granks, host, route_phases(sched))
        if noise is not None:
            samples = noise.apply(samples)
        if aggregate is not None:
            samples = [r.to_dict() for r in aggregate.add([parse_sample(x) for x in samples])]
        seq[comm] += 1
        row = {"t_s": t, "t_end_s": t + tt.time_s, "time_s": tt.time_s, "comm": comm, "collective": coll,
               "size_bytes": size, "version": version, "algbw_GBps": size / tt.time_s / 1e9,
               "changes": [scenario.changes[j].label for j in on], "n": 1, "samples": len(samples)}
        rows.append(row)
        t += tt.time_s + scenario.gap_s
        clock[0] = t
        ctl.ingest(samples)
        published = ctl.poll(now_s=t)
        for e in published:
            k2 = (e.comm, e.collective)
            swaps.append((t + scenario.swap_s, k2, e.version, ctl.manager.schedules[(e.comm, e.collective, e.version)]))
            persistent_at_version[(k2, e.version)] = tuple(j for j in on if not scenario.changes[j].transient)
            version_t[(k2, e.version)] = t
        # false positives: a re-synthesis started while no persistent change happened since its version was made
        flags = [d for d in decisions if d.get("event") == "flag"]
        for d in flags[seen_flags:]:
            k2 = (d["comm"], d["collective"])
            base = persistent_at_version.get((k2, d["version"]), ())
            now_p = tuple(j for j, c in enumerate(scenario.changes) if c.active(d["t_s"]) and not c.transient)
            since = version_t.get((k2, d["version"]), 0.0)
            touched = any(not c.transient and c.start_s <= d["t_s"] and (c.end_s is None or c.end_s > since)
                          for c in scenario.changes)  # a persistent change overlapped [version made, flag]
            if not touched:
                false_pos += 1
                d["false_positive"] = True
            elif now_p == base:
                refinements += 1
                d["refinement"] = True
        seen_flags = len(flags)
        # fast-forward a converged steady state to the next moment something can change
        sig = (on, tuple((k2, v2) for k2, (v2, _) in sorted(active.items(), key=lambda kv: kv[0])))
        est = ctl.estimator
        converged = all(abs(x.estimate_gbps - x.last_observation_gbps) <= 1e-4 * x.nominal_gbps
                        for x in est.snapshot())
        quiet = not swaps and not ctl.manager.jobs and (aggregate is None or not aggregate.open_windows)
        stable = stable + 1 if sig == last_sig and converged and quiet else 0
        last_sig = sig
        on_now = tuple(j for j, c in enumerate(scenario.changes) if c.active(t))
        if scenario.fast_forward and stable >= 2 * len(scenario.workload) and i % len(scenario.workload) == 0 \
                and on_now == on:
            horizon = _next_moment(scenario, ctl, t)
            period = sum(r["t_end_s"] - r["t_s"] for r in rows[-len(scenario.workload):]) + \
                scenario.gap_s * len(scenario.workload)
            k = int((horizon - t) / period) - 1 if period > 0 else 0
            if k > 0:
                for r in rows[-len(scenario.workload):]:
                    rows.append({**r, "t_s": r["t_s"] + period, "t_end_s": r["t_end_s"] + period * k, "n": k,
                                 "samples": r["samples"] * k, "fast_forward": True})
                t += period * k
                clock[0] = t
                for c in {c for c, _, _ in scenario.workload}:
                    seq[c] += k
                stable = 0
    return _report(scenario, rows, decisions, false_pos, refinements, ctl, wall0)


def _next_moment(scenario: Scenario, ctl: Controller, t: float) -> float:
    cands = [scenario.duration_s]
    for c in scenario.changes:
        cands += [x for x in (c.start_s, c.end_s) if x is not None and x > t]
    mc = ctl.manager.config
    for d in ctl.manager.deployed.values():
        if d.swapped_t_s + mc.cooldown_s > t:
            cands.append(d.swapped_t_s + mc.cooldown_s)
        if mc.recovery_check_s is not None:
            cands.append(max(t, d.last_recovery_check_t_s + mc.recovery_check_s))
    return min(cands)


def _mean(rows: Sequence[dict[str, Any]]) -> float | None:
    """Time-weighted algbw: total bytes over total busy time (a fast-forward row counts ``n`` times)."""
    tot_t = sum(r["time_s"] * r["n"] for r in rows)
    if not rows or tot_t <= 0:
        return None
    return sum(r["size_bytes"] * r["n"] for r in rows) / tot_t / 1e9


def _report(scenario: Scenario, rows: list[dict[str, Any]], decisions: list[dict[str, Any]], false_pos: int,
            refinements: int, ctl: Controller, wall0: float) -> TimelineResult:
    reports = []
    flags = [d for d in decisions if d.get("event") == "flag"]
    synths = [d for d in decisions if d.get("event") == "synthesized"]
    pubs = [d for d in decisions if d.get("event") == "publish" and d.get("reason") != "bootstrap"]
    for c in scenario.changes:
        if c.transient:
            continue
        end = c.end_s if c.end_s is not None else math.inf
        before = [r for r in rows if r["t_s"] < c.start_s][-20:]
        v0 = before[-1]["version"] if before else None
        flag = next((d for d in flags if c.start_s <= d["t_s"] < end), None)
        synth = next((d for d in synths if flag is not None and d["t_s"] >= flag["t_s"]), None)
        pub = next((d for d in pubs if flag is not None and d["t_s"] >= flag["t_s"] and d["t_s"] < end), None)
        first_new = next((r for r in rows if pub is not None and r["version"] == pub["version"]
                          and r["t_s"] >= c.start_s), None)
        inside = [r for r in rows if c.start_s <= r["t_s"] < end]
        stale = [r for r in inside if r["version"] == v0]
        later = [r for r in inside if pub is not None and r["version"] != v0 and r["t_s"] >= pub["t_s"]]
        final_v = later[-1]["version"] if later else None
        adapted = [r for r in later if r["version"] == final_v]
        det_rows = [r for r in inside if flag is not None and r["t_end_s"] <= flag["t_s"]]
        n_det = sum(r["n"] for r in det_rows) if flag is not None else None
        s_det = sum(r["samples"] for r in det_rows) if flag is not None else None
        back = next((d for d in pubs if d["t_s"] >= end), None) if c.end_s is not None else None
        first_back = next((r for r in rows if back is not None and r["version"] == back["version"]), None)
        after_end = [r for r in rows if back is not None and r["version"] == back["version"]]
        s_stale, s_adapt = _mean(stale), _mean(adapted)
        reports.append(ChangeReport(
            label=c.label, start_s=c.start_s, end_s=c.end_s,
            detected_s=None if flag is None else flag["t_s"],
            detection_delay_s=None if flag is None else flag["t_s"] - c.start_s,
            detection_collectives=n_det,
            detection_samples=s_det,
            synth_time_s=None if synth is None else synth["synth_time_s"],
            reaction_s=None if first_new is None else first_new["t_s"] - c.start_s,
            version_before=v0, version_after=None if pub is None else pub["version"], version_final=final_v,
            algbw_before_GBps=_mean(before), algbw_stale_GBps=s_stale, algbw_adapted_GBps=s_adapt,
            speedup=None if not s_stale or s_adapt is None else s_adapt / s_stale,
            recovery_reaction_s=None if first_back is None or c.end_s is None else first_back["t_s"] - c.end_s,
            algbw_recovered_GBps=_mean(after_end)))
    counts = ctl.manager.counters
    n = sum(r["n"] for r in rows)
    msg = (f"{n} collectives in {scenario.duration_s:g} s simulated ({time.perf_counter() - wall0:.1f} s wall); "
           f"{counts.syntheses - len({(c, k) for c, k, _ in scenario.workload})} re-syntheses, "
           f"{len(pubs)} new versions, {counts.aborts} aborted, {false_pos} false positives, {refinements} "
           "refinements; re-synthesis wall time is charged to the simulated clock")
    return TimelineResult(scenario, tuple(rows), tuple(_jsonable(d) for d in decisions), tuple(reports), n,
                          len(pubs), counts.syntheses, counts.aborts, false_pos, refinements,
                          time.perf_counter() - wall0, msg)


def _jsonable(d: Mapping[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(d, default=str))




def format_table(result: TimelineResult) -> str:
    """The timeline as text: segments of equal version and capacities, decisions, per-change figures."""
    lines = [result.message, "", f"{'t_start_ms':>11} {'t_end_ms':>11} {'coll':>9} {'ver':>3} {'n':>7} "
             f"{'algbw_GBps':>10}  capacities"]
    seg: list[dict[str, Any]] = []

    def flush() -> None:
        if seg:
            n = sum(r["n"] for r in seg)
            lines.append(f"{seg[0]['t_s'] * 1e3:11.3f} {seg[-1]['t_end_s'] * 1e3:11.3f} {seg[0]['collective']:>9} "
                         f"{seg[0]['version']:>3} {n:>7} {_mean(seg) or 0.0:10.2f}  "
                         f"{', '.join(seg[0]['changes']) or 'nominal'}")
            seg.clear()

    for r in result.rows:
        if seg and (r["version"], r["changes"], r["collective"]) != (seg[0]["version"], seg[0]["changes"],
                                                                     seg[0]["collective"]):
            flush()
        seg.append(r)
    flush()
    lines += ["", "decisions:"]
    for d in result.decisions:
        if d.get("event") in ("flag", "publish", "abort", "no_gain", "synthesized", "synthesis_failed"):
            what = d.get("reason") or d.get("message") or d.get("status") or ""
            extra = f" v{d['version']}" if "version" in d else ""
            took = f" ({d['synth_time_s'] * 1e3:.1f} ms)" if "synth_time_s" in d and d["event"] == "synthesized" \
                else ""
            fp = " [false positive]" if d.get("false_positive") else " [refinement]" if d.get("refinement") else ""
            lines.append(f"  {d['t_s'] * 1e3:11.3f} ms {d['event']:<12} {d.get('collective', '')}{extra}{took} "
                         f"{what}{fp}")
    for c in result.changes:
        lines += ["", f"change {c.label} on [{c.start_s:g}, {c.end_s if c.end_s is not None else 'end'}) s:"]
        if c.detection_delay_s is None:
            lines.append("  not detected")
            continue
        lines.append(f"  detection delay {c.detection_delay_s * 1e3:.2f} ms ({c.detection_collectives} "
                     f"collectives, {c.detection_samples} samples); re-synthesis "
                     f"{(c.synth_time_s or 0) * 1e3:.2f} ms; reaction "
                     + (f"{c.reaction_s * 1e3:.2f} ms" if c.reaction_s is not None else "none (no new version)"))
        lines.append(f"  algbw before {_fmt(c.algbw_before_GBps)} -> stale {_fmt(c.algbw_stale_GBps)} -> adapted "
                     f"{_fmt(c.algbw_adapted_GBps)} GB/s (v{c.version_final}; speedup {_fmt(c.speedup, '.3f')}x)"
                     + (f"; back after recovery in {c.recovery_reaction_s * 1e3:.2f} ms at "
                        f"{_fmt(c.algbw_recovered_GBps)} GB/s" if c.recovery_reaction_s is not None else ""))
    return "\n".join(lines)


def _fmt(x: float | None, spec: str = ".2f") -> str:
    return "-" if x is None else format(x, spec)


def plot_timeline(result: TimelineResult, path: str | os.PathLike[str]) -> None:
    """Draw algbw over simulated time with the capacity changes, flags and version swaps (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 4))
    by_coll: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for r in result.rows:
        by_coll[f"{r['collective']} {r['size_bytes'] / 2**20:g} MiB"].append((r["t_s"], r["algbw_GBps"]))
        if r["n"] > 1:
            by_coll[f"{r['collective']} {r['size_bytes'] / 2**20:g} MiB"].append((r["t_end_s"], r["algbw_GBps"]))
    for label, pts in sorted(by_coll.items()):
        ax.plot([p[0] for p in pts], [p[1] for p in pts], drawstyle="steps-post", label=label, lw=1.2)
    for c in result.scenario.changes:
        end = c.end_s if c.end_s is not None else result.scenario.duration_s
        ax.axvspan(c.start_s, end, color="tab:orange" if c.transient else "tab:red", alpha=0.12)
    for d in result.decisions:
        if d.get("event") == "flag":
            ax.axvline(d["t_s"], color="tab:purple", ls=":", lw=1)
        if d.get("event") == "publish" and d.get("reason") != "bootstrap":
            ax.axvline(d["t_s"], color="tab:green", ls="--", lw=1)
    ax.set_xlabel("simulated time (s); red: failure, orange: microburst, dotted: flag, dashed: new version")
    ax.set_ylabel("algbw (GB/s)")
    ax.set_title(f"closed loop on {result.scenario.topology}")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)

"""Schedule manager: which deployed schedules to re-synthesize, when, and when to keep the current one.

It holds the job profile and, per ``(comm, collective)``, the deployed version (its schedule and, when
made in this process, its in-memory :class:`~synth.SynthResult` so a warm start keeps AllToAll's
certified-repair state). On each :meth:`ScheduleManager.step` it runs the detector on every deployed
schedule and

* starts a **warm** re-synthesis of a flagged ``(comm, collective)`` on the measured topology (bounded
  by ``time_limit_s``), unless its cool-down since the last swap is running;
* when the result is ready (its measured synthesis time later on the caller's clock), **aborts** it
  if the degradation cleared meanwhile (the current version's ``max δ`` fell below ``Γ·(1 − h)``,
  the hysteresis band), keeps the current version when the new one is not better by ``min_gain`` on
  the measured topology (and re-bases the current version's cut there), and otherwise publishes;
* re-synthesizes **back** when capacity recovers: Algorithm 1 sees a recovery on the cut (slack
  opens there); a recovery elsewhere is caught by a rate-limited check of the deployed schedule's
  predicted algbw against the optimal bound on the measured topology.

``docs/controller.md`` §4 documents the state machine, the defaults and why.

Examples
--------
>>> size_bands([16777216, 134217728])
[(1, 47453132, 0), (47453133, None, 1)]
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from msccl_xml.deploy import fit
from msccl_xml.targets import MscclTarget, TorchTarget
from runtime.contention.gate import ContentionGate, GateConfig
from runtime.errors import ProfileError, RuntimeStateError
from runtime.formats.profile import JobProfile
from runtime.formats.store import VersionEntry, VersionStore
from runtime.loop.bootstrap import BUDGET_REASON, FALLBACK_REASON, budget_bound, fallback_schedule
from runtime.loop.detector import Verdict, VerdictCache, watched_cut
from runtime.loop.deployed import Deployed, Job, ManagerCounters
from runtime.loop.estimator import LinkEstimator
from runtime.loop.heap import frozen_heap
from runtime.loop.reasons import flag_reason
from synth import COLLECTIVES, Collective, LoopcollError, Schedule, SynthResult, Topology, optimal_bound, synthesize
from synth.errors import TimeLimitError
from synth.figures import warm_mode_of

__all__ = ["Deployed", "Job", "ManagerConfig", "ScheduleManager", "flag_reason", "size_bands", "SYNTHESIZABLE"]

#: Collectives the controller synthesizes (AllToAllv needs a demand matrix: not handled yet).
SYNTHESIZABLE = COLLECTIVES


def size_bands(sizes_bytes: Sequence[int]) -> list[tuple[int, int | None, int]]:
    """One band per profile size: ``(min_bytes, max_bytes, size index)``, split at geometric midpoints."""
    sizes = sorted(set(int(s) for s in sizes_bytes))
    out: list[tuple[int, int | None, int]] = []
    lo = 1
    for i, s in enumerate(sizes):
        hi = None if i == len(sizes) - 1 else int(math.isqrt(s * sizes[i + 1]))
        out.append((lo, hi, i))
        lo = (hi or 0) + 1
    return out


@dataclass(frozen=True, slots=True)
class ManagerConfig:
    """The manager's knobs (``runtime.ControllerConfig`` carries them; docs/controller.md §4)."""

    gamma: float = 0.1
    hysteresis: float = 0.5
    cooldown_s: float = 1.0
    time_limit_s: float | None = 30.0
    chunks: int | None = 16
    alltoall_chunks: int | None = None
    solver: str = "highs"
    min_gain: float = 0.02
    recovery_check_s: float | None = 5.0
    export_xml: bool = True
    min_capped_share: float = 0.9  # an MSCCL fit's re-synthesis under this share of the algbw: keep the schedule, no XML
    bootstrap_time_limit_s: float | None = 10.0  # bounds version 1's synthesis (runtime.loop.bootstrap)
    reaction_time_limit_s: float | None = None  # bounds a flag's re-synthesis; the optimum follows (None: time_limit_s)
    gate: GateConfig | None = None  # contention gate (runtime.contention.gate): act on SUSTAINED verdicts only


class ScheduleManager:
    """Deployed schedules, re-synthesis jobs and their decisions (driven by ``runtime.Controller``)."""

    def __init__(self, nominal: Topology, profile: JobProfile, store: VersionStore, estimator: LinkEstimator,
                 config: ManagerConfig, log: Callable[[dict[str, Any]], None]) -> None:
        self.nominal, self.profile, self.store, self.estimator, self.config = nominal, profile, store, estimator, config
        self._log = log
        self.deployed: dict[tuple[str, str], Deployed] = {}
        self.jobs: dict[tuple[str, str], Job] = {}
        self.budget_missed: set[tuple[str, str]] = set()  # reaction budget too short to build (see _resynthesize)
        self.schedules: dict[tuple[str, str, int], Schedule] = {}
        self.counters = ManagerCounters()
        self._verdicts = VerdictCache()  # Algorithm 1 reruns only when an estimate or the version changed
        #: opt-in contention gate on 1 / x_min per (comm, collective), once per step
        self.gate = ContentionGate(config.gate) if config.gate is not None else None
        #: called with (comm, collective, version, schedule) whenever a version becomes the deployed one
        self.on_deployed: Callable[[str, str, int, Schedule], None] | None = None
        #: simulated time charged per synthesis instead of its measured duration (timeline tests)
        self.charged_synth_s: float | None = None
        self.sizes: dict[tuple[str, str], tuple[int, ...]] = {}
        #: per communicator: (ranks to synthesize on, or None for the whole topology in rank order; relay)
        self.members: dict[str, tuple[tuple[int, ...] | None, bool]] = {}
        for comm in profile.communicators:
            whole = list(comm.ranks) == list(range(nominal.nranks))
            self.members[comm.name] = (None if whole else tuple(comm.ranks), comm.relay)
            if not whole:
                try:
                    nominal.communicator(comm.ranks, relay=comm.relay)
                except LoopcollError as exc:
                    raise ProfileError(f"communicator {comm.name!r}: {exc}") from None
            for spec in comm.collectives:
                self.sizes[(comm.name, spec.collective)] = spec.sizes_bytes
        for entry in store.latest():
            key = (entry.comm, entry.collective)
            if key not in self.sizes:
                continue
            sched = store.load_schedule(entry)
            self.schedules[(entry.comm, entry.collective, entry.version)] = sched
            # a reloaded version starts no cool-down: the store's clock may not be this one's
            cut = watched_cut(entry.cut, sched, self.comm_topology(entry.comm, nominal))
            self.deployed[key] = Deployed(entry, sched, None, cut, -math.inf)

    # -- lookups ----------------------------------------------------------------------------
    def schedule_of(self, comm: str, collective: str, version: int) -> Schedule | None:
        """The schedule of a version (loaded from the store on first use), or ``None``."""
        key = (comm, collective, version)
        if key not in self.schedules:
            entry = next((e for e in self.store.entries()
                          if e.comm == comm and e.collective == collective and e.version == version), None)
            if entry is None:
                return None
            self.schedules[key] = self.store.load_schedule(entry)
        return self.schedules[key]

    def verdict(self, key: tuple[str, str]) -> Verdict:
        """Algorithm 1 for the deployed version of ``key`` under the current estimates."""
        d = self.deployed[key]
        return self._verdicts.verdict(key, d.schedule, d.cut, self.estimator, self.config.gamma)

    # -- synthesis ------------------------------------------------------------------------
    def comm_topology(self, comm: str, topo: Topology) -> Topology:
        """``topo`` restricted to communicator ``comm`` (itself for a communicator of every GPU)."""
        ranks, relay = self.members[comm]
        return topo if ranks is None else topo.communicator(ranks, relay=relay)

    def _synthesize(self, key: tuple[str, str], topo: Topology, warm: SynthResult | Schedule | None,
                    chunks: int | None = None, limit_s: float | None | str = "config") -> SynthResult:
        """Synthesize ``key`` on ``topo`` (warm when it can); ``chunks`` and ``limit_s`` override the config's.
        The controller's heap is frozen meanwhile (:mod:`runtime.loop.heap`)."""
        with frozen_heap():
            return self._synthesize_now(key, topo, warm, chunks, limit_s)

    def _synthesize_now(self, key: tuple[str, str], topo: Topology, warm: SynthResult | Schedule | None,
                        chunks: int | None, limit_s: float | None | str) -> SynthResult:
        collective = Collective.parse(key[1])
        ranks, relay = self.members[key[0]]
        if chunks is None:
            chunks = self.config.alltoall_chunks if collective is Collective.ALLTOALL else self.config.chunks
        limit = self.config.time_limit_s if isinstance(limit_s, str) else limit_s
        try:
            return synthesize(collective, topo, chunks=chunks, warm_from=warm, solver=self.config.solver,
                              time_limit_s=limit, ranks=ranks, relay=relay)
        except LoopcollError as exc:
            if warm is None or isinstance(exc, TimeLimitError):  # a cold solve within the same limit is slower
                raise
            self._log({"event": "warm_failed", "collective": collective, "error": str(exc)[:300]})
            return synthesize(collective, topo, chunks=chunks, solver=self.config.solver, time_limit_s=limit,
                              ranks=ranks, relay=relay)

    def _resynthesize(self, key: tuple[str, str], topo: Topology, warm: SynthResult | Schedule | None, reason: str,
                      now: float) -> tuple[SynthResult, float | None]:
        """A flag's re-synthesis and its budget: ``reaction_time_limit_s`` (not for an optimum's, nor once it
        missed: at 2048 ranks an AllToAll's setup outlasts 3 s), then ``time_limit_s`` if it gave no schedule."""
        budget = None if reason.startswith(("bootstrap", "reaction")) or key in self.budget_missed \
            else self.config.reaction_time_limit_s
        res = None
        if budget is not None:
            try:
                res = self._synthesize(key, topo, warm, limit_s=budget)
            except TimeLimitError as exc:  # e.g. a 1M-route AllToAll not even built within the budget
                self.budget_missed.add(key)
                self._log({"event": "reaction_budget_missed", "t_s": now, "comm": key[0], "collective": key[1],
                           "error": str(exc)[:300], "message": "later reactions run under time_limit_s"})
        if res is None or res.schedule is None:  # nothing within the reaction budget: the full limit
            res, budget = self._synthesize(key, topo, warm, limit_s="config"), None
        return res, budget

    def _publish(self, key: tuple[str, str], result: SynthResult | Schedule, topo: Topology, reason: str,
                 verdict: Verdict | None, trigger_samples: int, now: float, *, refit: bool = True) -> VersionEntry:
        """Fit ``result`` and publish it. ``refit``: re-synthesize with fewer chunks where the MSCCL program
        is over the executor's limits; a provisional version (made within the reaction budget) is published
        without, so the executors get it at once: the optimum that follows is fitted in full."""
        comm, coll = key
        comm_topo = self.comm_topology(comm, topo)
        redo = None if isinstance(result, Schedule) or not refit else \
            (lambda cap: self._synthesize(key, topo, None, chunks=cap))
        with frozen_heap():
            return self._publish_now(key, result, comm_topo, redo, reason, verdict, trigger_samples, now, refit)

    def _publish_now(self, key: tuple[str, str], result: SynthResult | Schedule, comm_topo: Topology,
                     redo: Callable[[int], SynthResult] | None, reason: str, verdict: Verdict | None,
                     trigger_samples: int, now: float, refit: bool) -> VersionEntry:
        comm, coll = key
        version = fit(result, comm_topo, MscclTarget() if self.config.export_xml else TorchTarget(),
                      bands=[(lo, hi) for lo, hi, _ in size_bands(self.sizes[key])], resynthesize=redo, strict=False,
                      min_capped_share=self.config.min_capped_share)
        entry = self.store.publish(comm, coll, version, reason=reason, topology=comm_topo,
                                   nominal=self.comm_topology(comm, self.nominal),
                                   verdict=None if verdict is None else verdict.to_dict(),
                                   trigger_samples=trigger_samples, created_t_s=now)
        if not refit and version.bands[0].program is None and self.config.export_xml:
            self._log({"event": "xml_deferred", "t_s": now, "comm": comm, "collective": coll, "version": entry.version,
                       "message": f"provisional version without MSCCL XML ({version.bands[0].error or ''}"[:300]
                                  + "); the optimum that follows is fitted with re-synthesis"})
        if version.note is not None:
            self._log({"event": "capped", "t_s": now, "comm": comm, "collective": coll, "version": entry.version,
                       "chunks": version.capped_chunks, "message": version.note})
        kept = version.result or (None if isinstance(result, Schedule) else result)
        self.schedules[(comm, coll, entry.version)] = version.schedule
        self.deployed[key] = Deployed(entry, version.schedule, kept, watched_cut(entry.cut, version.schedule, comm_topo), now)
        self.counters.publications += 1
        self._deployed_hook(key, entry, version.schedule)
        if self.gate is not None:
            self.gate.reconfigured(f"{comm}/{coll}")
        self._log({"event": "publish", "t_s": now, "comm": comm, "collective": coll, "version": entry.version,
                   "reason": reason, "algbw_GBps": entry.algbw_GBps, "warm_mode": entry.warm_mode,
                   "synth_time_s": entry.synth_time_s,
                   "xml": [b.xml for b in entry.bands], "xml_error": entry.bands[0].xml_error})
        return entry

    def _deployed_hook(self, key: tuple[str, str], entry: VersionEntry, schedule: Schedule) -> None:
        if self.on_deployed is not None:
            self.on_deployed(key[0], key[1], entry.version, schedule)

    def deploy(self, key: tuple[str, str], schedule: Schedule, *, reason: str, now: float,
               extra: Mapping[str, Any] | None = None) -> VersionEntry:
        """Publish a given schedule (a safe transform, a configuration choice) as the next version of ``key``.

        The schedule is validated on the communicator's measured topology first; it becomes the deployed
        version exactly like a synthesized one (cool-down, contention-gate reset), with no warm state.
        """
        if key not in self.sizes:
            raise ProfileError(f"{key[0]}/{key[1]}: not in the job profile")
        topo = self.estimator.measured_topology()
        comm_topo = self.comm_topology(key[0], topo)
        try:
            schedule.validate(comm_topo)
        except LoopcollError as exc:
            raise ProfileError(f"{key[0]}/{key[1]}: the schedule to deploy is not valid on "
                               f"{comm_topo.name}: {exc}") from None
        if schedule.collective != key[1]:
            raise ProfileError(f"{key[0]}/{key[1]}: the schedule to deploy is a {schedule.collective} schedule")
        comm, coll = key
        bands = [(lo, hi, schedule) for lo, hi, _ in size_bands(self.sizes[key])]
        entry = self.store.publish(comm, coll, bands, reason=reason, topology=comm_topo,
                                   nominal=self.comm_topology(comm, self.nominal), created_t_s=now,
                                   export_xml=self.config.export_xml, extra=extra)
        self.schedules[(comm, coll, entry.version)] = schedule
        self.deployed[key] = Deployed(entry, schedule, None, watched_cut(entry.cut, schedule, comm_topo), now)
        self.jobs.pop(key, None)  # a pending re-synthesis was made for the version this one replaces
        self.counters.publications += 1
        self._deployed_hook(key, entry, schedule)
        if self.gate is not None:
            self.gate.reconfigured(f"{comm}/{coll}")
        self._log({"event": "publish", "t_s": now, "comm": comm, "collective": coll, "version": entry.version,
                   "reason": reason, "algbw_GBps": entry.algbw_GBps, "warm_mode": None, "synth_time_s": 0.0,
                   "xml": [b.xml for b in entry.bands], "xml_error": entry.bands[0].xml_error})
        return entry

    def bootstrap(self, now: float) -> list[VersionEntry]:
        """Publish a first version of every synthesizable (comm, collective) the store lacks, each within
        ``bootstrap_time_limit_s``: the synthesis, or when that budget binds a provisional version 1 (the
        incumbent, else the NCCL-like baseline) whose optimum the next ``step`` makes (runtime.loop.bootstrap)."""
        out = []
        topo = self.estimator.measured_topology()
        for key in sorted(self.sizes):
            if key in self.deployed:
                continue
            if key[1] not in SYNTHESIZABLE:
                self._log({"event": "unsupported", "t_s": now, "comm": key[0], "collective": key[1],
                           "message": f"{key[1]} schedules need a demand matrix; left to the native library"})
                continue
            t0 = time.perf_counter()
            res: SynthResult | None = None
            try:
                res = self._synthesize(key, topo, None, limit_s=self.config.bootstrap_time_limit_s)
                self.counters.syntheses += 1
            except LoopcollError as exc:
                self._log({"event": "synthesis_failed", "t_s": now, "comm": key[0], "collective": key[1],
                           "error": str(exc)[:300]})
            provisional = budget_bound(res, self.config.bootstrap_time_limit_s, self.config.time_limit_s)
            source: SynthResult | Schedule | None = res if res is not None and res.schedule is not None else None
            if source is None:
                try:
                    source = fallback_schedule(key[1], self.comm_topology(key[0], topo))
                except LoopcollError as exc:
                    raise RuntimeStateError(f"{key[0]}/{key[1]}: bootstrap synthesis failed "
                                            f"({'' if res is None else res.message}) and no fallback: {exc}") from None
            self._log({"event": "bootstrap", "t_s": now, "comm": key[0], "collective": key[1],
                       "synth_time_s": time.perf_counter() - t0, "provisional": provisional,
                       "status": "baseline" if isinstance(source, Schedule) else source.status.value})
            # The synthesizer's own time-limit fallback (the ring, issue 31) is the baseline too.
            baseline = isinstance(source, Schedule) or (
                source.schedule is not None and source.schedule.meta.get("synthesizer") == "nccl-ring")
            reason = FALLBACK_REASON if baseline else BUDGET_REASON if provisional else "bootstrap"
            out.append(self._publish(key, source, topo, reason, None, 0, now, refit=not provisional))
            self.deployed[key].swapped_t_s = -math.inf  # no cool-down after a bootstrap
            self.deployed[key].provisional = provisional
        return out

    def step(self, now: float, clock: Callable[[], float] | None, trigger_samples: int,
             refresh: Callable[[], object] | None = None) -> list[VersionEntry]:
        """Finish ready jobs, run the detector, start re-syntheses; returns the versions published.

        ``clock`` (real time) lets a job finish in the same step; ``None`` (simulated time) makes
        every job wait for a later step at ``now + synthesis time``. ``refresh`` folds in the samples
        that arrived during a synthesis before its abort/publish decision (real time).
        """
        out = [e for e in (self._finish_ready(now)) if e is not None]
        for key in sorted(self.deployed):
            if key in self.jobs:
                continue
            d = self.deployed[key]
            v = self.verdict(key)
            reason = None
            allowed = self._gate_allows(key, v, now)
            if d.provisional:
                reason = "bootstrap: optimum (version 1 was made within the bootstrap budget)" if \
                    d.entry.reason.startswith("bootstrap") else \
                    f"reaction: optimum (version {d.entry.version} was made within the reaction budget)"
            elif v.flagged and not allowed:
                self.counters.gated += 1
            elif v.flagged:
                reason = flag_reason(v, self.estimator.snapshot(), snap=self.estimator.snap)
            elif self._recovery_due(key, now):
                reason = self._recovery_reason(key, now)
            if reason is None:
                continue
            if now - d.swapped_t_s < self.config.cooldown_s:
                self.counters.deferred_cooldown += 1
                if d.deferred_logged:
                    continue
                d.deferred_logged = True
                self._log({"event": "cooldown", "t_s": now, "comm": key[0], "collective": key[1],
                           "version": d.entry.version, "left_s": self.config.cooldown_s - (now - d.swapped_t_s),
                           "verdict": v.to_dict()})
                continue
            d.provisional = False  # one try: a failure or no gain keeps the version (after its cool-down)
            topo = self.estimator.measured_topology(recent=True)
            self._log({"event": "flag", "t_s": now, "comm": key[0], "collective": key[1],
                       "version": d.entry.version, "reason": reason, "verdict": v.to_dict(),
                       "measured_fingerprint": topo.fingerprint})
            t0 = time.perf_counter()
            try:
                warm = None if reason.startswith("bootstrap") else d.result if d.result is not None else d.schedule
                res, budget = self._resynthesize(key, topo, warm, reason, now)
            except LoopcollError as exc:
                self.counters.failures += 1
                d.swapped_t_s = now  # back off for a cool-down before trying again
                self._log({"event": "synthesis_failed", "t_s": now, "comm": key[0], "collective": key[1],
                           "error": str(exc)[:300]})
                continue
            took = time.perf_counter() - t0
            self.counters.syntheses += 1
            self._log({"event": "synthesized", "t_s": now, "comm": key[0], "collective": key[1],
                       "synth_time_s": took, "status": res.status.value,
                       "warm_mode": warm_mode_of(res.figures),
                       "algbw_GBps": res.algbw_GBps})
            charged = took if self.charged_synth_s is None else self.charged_synth_s
            ready = now + charged if clock is None else max(now + took, clock())
            self.jobs[key] = Job(key, reason, v if v.flagged else None, res, topo, now, ready, trigger_samples,
                                 budget is not None and budget_bound(res, budget, self.config.time_limit_s))
            if clock is not None:
                if refresh is not None:
                    refresh()
                e = self._finish(key, clock(), trigger_samples)
                if e is not None:
                    out.append(e)
        return out

    def _gate_allows(self, key: tuple[str, str], v: Verdict, now: float) -> bool:
        """Without a gate: always. With one: feed the predicted time per chunk ``1 / x_min`` (flagged or
        not, so the gate learns its healthy baseline; ρ is its ratio to that) and allow only a
        SUSTAINED verdict; a dead link (``x_min = 0``) is a failure, not contention, and always passes."""
        if self.gate is None:
            return True
        x_min = v.x_min_gbps
        if not (x_min > 0 and math.isfinite(x_min)):
            return True
        g = self.gate.observe(f"{key[0]}/{key[1]}", 1.0 / x_min)
        if g.state.value in ("transient", "sustained", "cooldown"):
            self._log({"event": "contention", "t_s": now, "comm": key[0], "collective": key[1],
                       "state": g.state.value, "rho": g.rho})
        return g.act

    def _finish_ready(self, now: float) -> list[VersionEntry | None]:
        return [self._finish(k, now, self.jobs[k].trigger_samples) for k in sorted(self.jobs)
                if self.jobs[k].ready_t_s <= now]

    def _finish(self, key: tuple[str, str], now: float, trigger_samples: int) -> VersionEntry | None:
        job = self.jobs.pop(key)
        d = self.deployed[key]
        comm, coll = key
        res = job.result
        if res.schedule is None:
            self.counters.failures += 1
            d.swapped_t_s = now
            self._log({"event": "synthesis_failed", "t_s": now, "comm": comm, "collective": coll,
                       "error": res.message})
            return None
        clear = self.config.gamma * (1.0 - self.config.hysteresis)
        if job.verdict is not None:
            v = self.verdict(key)
            if v.max_delta <= clear:
                self.counters.aborts += 1
                self._log({"event": "abort", "t_s": now, "comm": comm, "collective": coll,
                           "version": d.entry.version, "reason": "degradation cleared before the new schedule "
                           f"was ready (max delta {v.max_delta:.4f} <= {clear:.4g})",
                           "verdict": v.to_dict()})
                return None
        measured = self.estimator.measured_topology(recent=True)
        try:
            new_GBps = res.schedule.algbw_GBps(measured)
            old_GBps = d.schedule.algbw_GBps(measured)
        except LoopcollError:
            new_GBps, old_GBps = res.algbw_GBps, 0.0
        if new_GBps <= old_GBps * (1.0 + self.config.min_gain):
            self.counters.no_gain += 1
            try:
                d.cut = d.schedule.bottleneck_for(measured)
            except LoopcollError:
                pass
            self._rebase(measured, now)
            d.swapped_t_s = now
            d.deferred_logged = False
            self._log({"event": "no_gain", "t_s": now, "comm": comm, "collective": coll,
                       "version": d.entry.version, "new_algbw_GBps": new_GBps, "current_algbw_GBps": old_GBps,
                       "message": "kept the current version; its cut re-based on the measured topology"})
            return None
        entry = self._publish(key, res, job.topology, job.reason, job.verdict, trigger_samples, now,
                              refit=not job.provisional)
        self.deployed[key].provisional = job.provisional
        self._rebase(job.topology, now)
        return entry

    def _rebase(self, topo: Topology, now: float) -> None:
        moved = self.estimator.rebase(topo)
        if moved:
            self._log({"event": "rebase", "t_s": now, "links": [f"{a}->{b}" for a, b in moved[:16]],
                       "message": "EWMA set to the measured levels the decision used"})

    # -- recovery -------------------------------------------------------------------------
    def _recovery_due(self, key: tuple[str, str], now: float) -> bool:
        every = self.config.recovery_check_s
        d = self.deployed[key]
        return every is not None and now - d.last_recovery_check_t_s >= every and \
            now - d.swapped_t_s >= self.config.cooldown_s

    def _recovery_reason(self, key: tuple[str, str], now: float) -> str | None:
        """A reason when the deployed schedule is further from the optimum than it was when made."""
        d = self.deployed[key]
        d.last_recovery_check_t_s = now
        # whether to act is the EWMA's call (a burst flips the recent median, not the EWMA); the re-synthesis
        # itself then runs on the recent levels like every other (docs/controller.md §2)
        measured = self.estimator.measured_topology()
        if measured.fingerprint == d.entry.topology_fingerprint:
            return None
        try:
            pred = d.schedule.algbw_GBps(measured)
            ranks, relay = self.members[key[0]]
            opt = optimal_bound(key[1], measured, ranks=ranks, relay=relay).algbw_GBps
        except LoopcollError:
            return None
        made = d.entry.algbw_GBps / d.entry.optimal_algbw_GBps if d.entry.optimal_algbw_GBps > 0 else 1.0
        if opt > 0 and pred / opt < made * (1.0 - self.config.gamma):
            return (f"recovery: predicted {pred:.4g} GB/s is {100 * (1 - pred / opt):.1f}% below the optimal "
                    f"{opt:.4g} GB/s on the measured topology")
        return None

    def status(self) -> dict[str, Any]:
        return {
            "deployed": {f"{k[0]}/{k[1]}": {"version": d.entry.version, "swapped_t_s": d.swapped_t_s,
                                            "algbw_GBps": d.entry.algbw_GBps, "status": d.entry.status,
                                            "reason": d.entry.reason, "provisional": d.provisional}
                         for k, d in sorted(list(self.deployed.items()))},
            "pending": [{"comm": j.key[0], "collective": j.key[1], "ready_t_s": j.ready_t_s, "reason": j.reason}
                        for j in list(self.jobs.values())],
        }



"""``runtime.Controller``: telemetry in, schedule versions out (the in-process face of the daemon).

The controller validates samples (:mod:`runtime.formats.telemetry`), groups them per collective, folds them
into the link estimator (:mod:`runtime.loop.estimator`), runs the detector (:mod:`runtime.loop.detector`) on
every deployed schedule and lets the manager (:mod:`runtime.loop.manager`) re-synthesize and publish
versions into the store (:mod:`runtime.formats.store`). ``ingest`` and ``status`` are cheap and thread-safe
while ``poll`` (which may run a synthesis) runs in another thread.

Examples
--------
>>> import tempfile
>>> from synth import load_topology
>>> from runtime.formats.profile import profile_from_dict
>>> topo = load_topology("hpn:1x2x4")
>>> prof = profile_from_dict({"format": "loopcoll.profile/1", "topology": "hpn:1x2x4", "communicators": [
...     {"name": "world", "ranks": list(range(8)), "collectives": [{"collective": "allgather", "sizes": [1 << 24]}]}]})
>>> ctl = Controller(topo, prof, tempfile.mkdtemp(), config=ControllerConfig(export_xml=False), clock=lambda: 0.0)
>>> [(e.comm, e.collective, e.version) for e in ctl.bootstrap()]
[('world', 'allgather', 1)]
>>> ctl.ingest([{"kind": "pair"}]).rejected["missing_field"]
1
>>> ctl.poll()
[]
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from runtime.contention.gate import GateConfig
from runtime.errors import StoreError
from runtime.formats.profile import JobProfile
from runtime.formats.store import VersionEntry, VersionStore
from runtime.formats.aggregate import AggRecord, sample_count, window_measurements
from runtime.formats.columnar import AggBatch, validate_telemetry
from runtime.formats.telemetry import IngestReport, Sample, SampleStore
from runtime.loop.demand import AllToAllvPlanner, DemandEstimator
from runtime.loop.detector import Verdict
from runtime.loop.estimator import LinkEstimator, ScheduleRouting
from runtime.loop.colestim import ColumnFold
from runtime.loop.colgroups import ColumnGroups
from runtime.loop.grouping import SampleGroups
from runtime.loop.configcheck import check_config
from runtime.loop.manager import ManagerConfig, ScheduleManager
from synth import Schedule, Topology

__all__ = ["Controller", "ControllerConfig"]

_LOG = logging.getLogger("runtime.controller")  # the name users configure (the module moved)


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    """Every knob of the loop; ``docs/controller.md`` gives each default and why.

    alpha, tau_s
        EWMA weight per observation (MCCL: 0.012), or the time constant for irregular sampling.
    gamma
        Γ, the detector's threshold on the cut-slack deviation ``max δ_a``.
    hysteresis
        A pending re-synthesis is aborted when ``max δ`` falls to ``Γ·(1 − hysteresis)`` or below.
    cooldown_s
        No re-synthesis of a (comm, collective) within this long after its last swap (or kept decision).
    time_limit_s, solver
        Passed to :func:`synth.synthesize` (``time_limit_s`` bounds every re-synthesis, and the optimum made
        after a provisional version 1).
    reaction_time_limit_s
        Bounds the warm re-synthesis a flag (or the recovery check) starts; when it binds, the time-limited
        incumbent is published (if it beats the current version) and the optimum under ``time_limit_s``
        follows at the next ``poll``, like after a provisional version 1. ``None``: ``time_limit_s``.
    bootstrap_time_limit_s
        Bounds version 1's synthesis; when it binds, version 1 is the time-capped incumbent or the NCCL-like
        baseline and the optimum follows at the next ``poll`` (:mod:`runtime.loop.bootstrap`). ``None``: no bound.
    chunks, alltoall_chunks
        ``chunks`` for the tree collectives (at most this many chunks per source: MSCCL programs need
        few; ``None`` = the exact optimum, whose chunk count can explode on measured decimals) and for
        AllToAll (``None`` = the synthesizer's default, 10).
    min_gain
        A new version must beat the current one by this fraction on the measured topology.
    recovery_check_s
        How often (at most) the predicted-vs-optimal recovery check runs per schedule (``None``: never).
    slow_tolerance, pace_tolerance, snap
        The estimator's tolerances (:class:`runtime.loop.estimator.LinkEstimator`).
    export_xml
        Export MSCCL XML per band into the store.
    min_capped_share
        When a version's program is over msccl-executor-nccl's limits, the fit re-synthesizes it with fewer
        chunks; a re-synthesis under this share of the version's algbw is not taken: the version keeps its
        schedule (what loopcoll's executor runs) and its bands say why there is no XML (docs/controller.md §4).
    max_samples_per_comm
        Bound of the in-memory sample store (oldest dropped first).
    max_pending_samples
        Bound of the samples waiting for the next ``poll`` (oldest dropped and counted beyond it).
    recent_verdicts
        How many recent verdicts ``status`` keeps.
    contention_gate
        ``None`` (default): act on every flagged verdict. A dict of :class:`runtime.contention.gate.GateConfig`
        fields (``{}`` for the defaults): a flagged verdict starts a re-synthesis only when the SPRT gate
        on the predicted time per chunk (1 / x_min) says SUSTAINED (docs/contention.md).
    """

    alpha: float = 0.012
    tau_s: float | None = None
    gamma: float = 0.1
    hysteresis: float = 0.5
    cooldown_s: float = 1.0
    time_limit_s: float | None = 30.0
    bootstrap_time_limit_s: float | None = 10.0
    reaction_time_limit_s: float | None = None
    chunks: int | None = 16
    alltoall_chunks: int | None = None
    solver: str = "highs"
    min_gain: float = 0.02
    recovery_check_s: float | None = 5.0
    slow_tolerance: float = 0.1
    pace_tolerance: float = 0.1
    snap: float = 0.02
    export_xml: bool = True
    min_capped_share: float = 0.9
    max_samples_per_comm: int = 100_000
    max_pending_samples: int = 1_000_000
    recent_verdicts: int = 64
    contention_gate: dict[str, Any] | None = None

    def manager_config(self) -> ManagerConfig:
        """The manager's share of this config: every :class:`ManagerConfig` field of the same name, and
        ``gate`` from ``contention_gate``.

        >>> ControllerConfig(gamma=0.2).manager_config().gamma
        0.2
        """
        shared = {f.name: getattr(self, f.name) for f in fields(ManagerConfig) if f.name != "gate"}
        gate = None if self.contention_gate is None else GateConfig.from_dict(self.contention_gate)
        return ManagerConfig(**shared, gate=gate)


class Controller:
    """The closed loop's controller over one nominal topology and job profile (docs/controller.md).

    Parameters
    ----------
    topology
        The nominal topology (capacities are the estimator's prior and upper bound).
    profile
        Communicators, collectives and sizes; every communicator must span all GPUs for now.
    store
        A :class:`VersionStore` or a directory for one; existing versions are reloaded (restart).
    config
        :class:`ControllerConfig`.
    clock
        Seconds; ``time.time`` by default. A simulated clock makes ``poll(now_s)`` hold a finished
        synthesis until ``now_s`` passes its measured duration (closed-loop timeline).
    log
        Receives one structured dict per decision (``event`` names it).
    """

    def __init__(self, topology: Topology, profile: JobProfile, store: VersionStore | str | os.PathLike[str], *,
                 config: ControllerConfig = ControllerConfig(), clock: Callable[[], float] = time.time,
                 log: Callable[[dict[str, Any]], None] | None = None) -> None:
        check_config(config)
        profile.check_topology(topology)
        self.topology = topology
        self.profile = profile
        self.config = config
        self._clock = clock
        self._user_log = log
        self.store = store if isinstance(store, VersionStore) else VersionStore(Path(store))
        self._lock = threading.RLock()
        self._poll_lock = threading.Lock()
        self._comms = profile.comm_ranks()
        self._comm_sets = {k: frozenset(v) for k, v in self._comms.items()}  # built once: ingest checks ranks
        self._pending: deque[Sample] = deque()
        self.samples = SampleStore(max_per_comm=config.max_samples_per_comm)
        self._report = IngestReport(0)
        self._skipped: Counter[str] = Counter()
        self._verdicts: deque[dict[str, Any]] = deque(maxlen=config.recent_verdicts)
        self._last_verdict: dict[tuple[str, str], Verdict] = {}
        self._events: deque[dict[str, Any]] = deque(maxlen=256)
        self._routing: dict[tuple[str, str, int, str | None], ScheduleRouting | None] = {}
        #: routings being built in the background since their version was published (docs/controller.md §1)
        self._building: dict[tuple[str, str, int, str | None], _RoutingBuild] = {}
        self._groups = SampleGroups(clock=self._now, skipped=self._skipped)
        self._pending_cols: deque[AggBatch] = deque()  # columnar batches (docs/telemetry.md §6) not grouped yet
        self._pending_rows = 0
        self._col_groups = ColumnGroups(clock=self._now, skipped=self._skipped)
        self.samples_since_publish = 0
        self.estimator = LinkEstimator(topology, alpha=config.alpha, tau_s=config.tau_s,
                                       slow_tolerance=config.slow_tolerance, pace_tolerance=config.pace_tolerance,
                                       snap=config.snap)
        self._col_fold = ColumnFold(self.estimator)  # the estimator's fold of columnar windows (its flow tables)
        self.manager = ScheduleManager(topology, profile, self.store, self.estimator, config.manager_config(),
                                       self._log)
        self.manager.on_deployed = self._start_routing
        for key, d in sorted(self.manager.deployed.items()):  # versions reloaded from the store
            self._start_routing(key[0], key[1], d.entry.version, d.schedule)
        self._seed_estimates_from_store()
        # AllToAllv: demand samples -> traffic matrix -> versions per (comm, alltoallv) (runtime.loop.demand)
        a2av = {c.name: c.ranks for c in profile.communicators if c.collective("alltoallv") is not None}
        self.demand = DemandEstimator(a2av, alpha=config.alpha, nranks=topology.nranks)
        self.alltoallv = AllToAllvPlanner(self.estimator.measured_topology, a2av, directory=self.store.directory,
                                          log=self._log)

    def _seed_estimates_from_store(self) -> None:
        """On restart, start link estimates at the capacities the latest versions were made for (oldest
        first, so the newest version's figures win where two disagree)."""
        for entry in sorted(self.store.latest(), key=lambda e: (e.created_t_s, e.comm, e.collective)):
            caps = {}
            for name, gbps in entry.capacities_gbps.items():
                src, sep, dst = name.partition("->")
                if sep:
                    caps[(src, dst)] = gbps
            seeded = self.estimator.seed(caps, t_s=entry.created_t_s)
            if seeded:
                self._log({"event": "seed_estimates", "comm": entry.comm, "collective": entry.collective,
                           "version": entry.version, "links": [f"{a}->{b}" for a, b in seeded]})

    # -- logging ------------------------------------------------------------------------------
    def _log(self, record: dict[str, Any]) -> None:
        record = {"t_s": self._now(), **record}
        self._events.append(record)
        _LOG.info("%s", record.get("event"), extra={"loopcoll": record})
        if self._user_log is not None:
            try:
                self._user_log(record)
            except Exception:  # noqa: BLE001 - a broken log sink must not stop the loop
                _LOG.exception("controller log callback failed")

    def _now(self) -> float:
        return float(self._clock())

    # -- ingest -----------------------------------------------------------------------------
    def ingest(self, samples: Iterable[Mapping[str, Any] | Sample | str]) -> IngestReport:
        """Validate and queue samples; bad ones are counted by reason, never raised.

        Columnar batches (``aggcols``, docs/telemetry.md §6) are validated and queued whole, as arrays: they do
        not enter the recent-sample store :attr:`samples` (its bound is per record object)."""
        if isinstance(samples, (str, bytes, Mapping, Sample)):
            items: list[Any] = [samples]  # one sample given bare
        else:
            try:
                items = list(samples)
            except TypeError:
                items = [samples]
        records, batches, report = validate_telemetry(items, comms=self._comm_sets, nranks=self.topology.nranks)
        ok = [r.window_sample() if isinstance(r, AggRecord) else r for r in records]
        with self._lock:
            self._report = self._report.merged(report)
            self.samples.add(ok)
            self._pending.extend(ok)
            while len(self._pending) > self.config.max_pending_samples:
                self._pending.popleft()
                self._skipped["pending_overflow"] += 1
            self._pending_cols.extend(batches)
            self._pending_rows += sum(len(b) for b in batches)
            while self._pending_rows > self.config.max_pending_samples:
                dropped = len(self._pending_cols.popleft())
                self._pending_rows -= dropped
                self._skipped["pending_overflow"] += dropped
        self.demand.observe(ok)
        if report.rejected_total:
            self._log({"event": "samples_rejected", "rejected": dict(report.rejected),
                       "first_error": report.first_error})
        return report

    # -- sample groups → estimator --------------------------------------------------------------
    def _start_routing(self, comm: str, collective: str, version: int, schedule: Schedule) -> None:
        """Build the routing of a version just deployed in a background thread (its telemetry will need it):
        at 2048 ranks a build takes seconds, which a poll would otherwise spend before folding anything in."""
        phases: tuple[str | None, ...] = ("reducescatter", "allgather") if collective == "allreduce" else (None,)
        with self._lock:
            for phase in phases:
                key = (comm, collective, version, phase)
                if key not in self._routing and key not in self._building:
                    self._building[key] = _RoutingBuild(schedule, self.topology, phase, self._col_fold.table)

    def _routing_for(self, comm: str, collective: str, version: int,
                     phase: str | None = None) -> ScheduleRouting | None:
        key = (comm, collective, version, phase)
        if key not in self._routing:
            build = self._building.pop(key, None)
            if build is not None:
                self._routing[key] = build.result()  # started at publish: usually done by now
                return self._routing[key]
            sched: Schedule | None = None
            try:
                sched = self.manager.schedule_of(comm, collective, version)
            except StoreError as exc:
                self._log({"event": "store_error", "message": str(exc)})
            self._routing[key] = None if sched is None else ScheduleRouting.build(sched, self.topology, phase)
        return self._routing[key]

    def _process_samples(self) -> int:
        """Group pending samples per collective (:mod:`runtime.loop.grouping`) and fold the groups ready into
        the estimator."""
        with self._lock:
            batch = list(self._pending)
            self._pending.clear()
            done = 0
            for routing, samples in self._groups.collect(batch, self._routing_for):
                meas, count = window_measurements(samples)  # count > 1: aggregated windows (docs/telemetry.md §5)
                self.estimator.observe_group(routing, meas, t_s=max(s.t_s for s in samples), count=count)
                self.samples_since_publish += sum(sample_count(s) for s in samples)
                done += 1
            self._col_groups.add(self._pending_cols)  # columnar batches (docs/telemetry.md §6), as arrays
            self._pending_cols.clear()
            self._pending_rows = 0
            for g in self._col_groups.collect(self._routing_for):
                self._col_fold.observe(g.routing, g.src, g.dst, g.nbytes, g.busy_s, t_s=g.t_s, count=g.count)
                self.samples_since_publish += g.collectives
                done += 1
            return done

    # -- the loop ---------------------------------------------------------------------------
    def bootstrap(self) -> list[VersionEntry]:
        """Publish version 1 of every (comm, collective) of the profile that the store lacks."""
        with self._poll_lock:
            return self.manager.bootstrap(self._now())

    def poll(self, now_s: float | None = None) -> list[VersionEntry]:
        """Fold in the samples, run the detector, (re-)synthesize; returns the versions published now.

        With ``now_s`` given (simulated time) a synthesis started here is ready ``its measured
        duration`` later and is finished (published or aborted) by a later ``poll``; without it
        (real time) it is finished before this call returns.
        """
        with self._poll_lock:
            now = self._now() if now_s is None else float(now_s)
            self._process_samples()
            with self._lock:
                trig = self.samples_since_publish
            clock = self._clock if now_s is None else None
            # samples that arrive during a synthesis count before its abort/publish decision
            out = self.manager.step(now, clock, trig, refresh=self._process_samples)
            self.alltoallv.poll(self.demand, now_s=now)
            if out:
                with self._lock:
                    self.samples_since_publish = 0
            with self._lock:
                for key in sorted(self.manager.deployed):
                    v = self.manager.verdict(key)
                    prev = self._last_verdict.get(key)
                    self._last_verdict[key] = v
                    if prev is None or prev.flagged != v.flagged or v.flagged:
                        self._verdicts.append({"t_s": now, "comm": key[0], "collective": key[1],
                                               "version": self.manager.deployed[key].entry.version, **v.to_dict()})
            return out

    # -- queries ----------------------------------------------------------------------------
    def deploy(self, comm: str, collective: str, schedule: Schedule, *, reason: str,
               extra: Mapping[str, Any] | None = None) -> VersionEntry:
        """Publish a given schedule as the next version of ``(comm, collective)`` (docs/controller.md §6).

        For decisions made outside the detector: a safe rank transform (:mod:`runtime.contention.transforms`) or a
        configuration choice (:mod:`runtime.contention.configchoice`). Executors receive it like any version.

        Raises :class:`ProfileError` when the pair is not in the profile or the schedule is not valid on
        the communicator's (measured) topology.
        """
        with self._poll_lock, self._lock:
            return self.manager.deploy((comm, collective), schedule, reason=reason, now=self._now(), extra=extra)

    def latest(self, comm: str | None = None) -> list[VersionEntry]:
        """The newest version of every (comm, collective), optionally of one communicator."""
        return self.store.latest(comm)

    def deployed_schedule(self, comm: str, collective: str) -> tuple[VersionEntry, Schedule] | None:
        """The newest version of ``(comm, collective)`` and its schedule, or ``None``."""
        d = self.manager.deployed.get((comm, collective))
        return None if d is None else (d.entry, d.schedule)

    def status(self) -> dict[str, Any]:
        """JSON-able figures: versions, link estimates, recent verdicts, counters."""
        with self._lock:
            rep = self._report
            counters = {
                "samples_accepted": rep.accepted, "samples_rejected": dict(rep.rejected),
                "samples_skipped": dict(sorted(self._skipped.items())), "samples_dropped": self.samples.dropped,
                "samples_pending": (len(self._pending) + self._groups.pending_samples + self._pending_rows
                                    + self._col_groups.pending_rows),
                "groups": self.estimator.groups, **asdict(self.manager.counters),
            }
            return {
                "format": "loopcoll.controller-status/1",
                "t_s": self._now(),
                "topology": self.topology.name,
                "measured_fingerprint": self.estimator.measured_topology().fingerprint,
                "versions": [e.to_dict() for e in self.store.latest()],
                "links": [e.to_dict() for e in self.estimator.snapshot()],
                "verdicts": list(self._verdicts),
                "counters": counters,
                "config": asdict(self.config),
                **self.manager.status(),
            }

    def prometheus(self) -> str:
        """The status figures in the Prometheus text exposition format (version 0.0.4)."""
        st = self.status()
        c = st["counters"]
        lines: list[str] = []

        def metric(name: str, kind: str, help_text: str, rows: list[tuple[dict[str, str], float]]) -> None:
            lines.append(f"# HELP {name} {help_text}")
            lines.append(f"# TYPE {name} {kind}")
            for labels, value in rows:
                lab = ",".join(f'{k}="{_esc(v)}"' for k, v in sorted(labels.items()))
                lines.append(f"{name}{{{lab}}} {_num(value)}" if lab else f"{name} {_num(value)}")

        metric("loopcoll_samples_accepted_total", "counter", "Telemetry samples accepted.",
               [({}, c["samples_accepted"])])
        metric("loopcoll_samples_rejected_total", "counter", "Telemetry samples rejected, by reason.",
               [({"reason": r}, n) for r, n in sorted(c["samples_rejected"].items())])
        metric("loopcoll_samples_skipped_total", "counter", "Valid samples not used for link estimates, by reason.",
               [({"reason": r}, n) for r, n in sorted(c["samples_skipped"].items())])
        for name in ("syntheses", "publications", "aborts", "no_gain", "deferred_cooldown", "failures", "gated"):
            metric(f"loopcoll_{name}_total", "counter", f"Controller decisions: {name.replace('_', ' ')}.",
                   [({}, c[name])])
        metric("loopcoll_link_capacity_gbps", "gauge", "Smoothed link capacity estimate M_a (Gbit/s).",
               [({"link": lk["link"]}, lk["estimate_gbps"]) for lk in st["links"]])
        metric("loopcoll_link_nominal_gbps", "gauge", "Nominal link capacity (Gbit/s) of estimated links.",
               [({"link": lk["link"]}, lk["nominal_gbps"]) for lk in st["links"]])
        metric("loopcoll_schedule_version", "gauge", "Newest schedule version.",
               [({"comm": v["comm"], "collective": v["collective"]}, v["version"]) for v in st["versions"]])
        metric("loopcoll_schedule_algbw_GBps", "gauge", "Predicted algbw of the newest version when made (GB/s).",
               [({"comm": v["comm"], "collective": v["collective"]}, v["algbw_GBps"]) for v in st["versions"]])
        with self._lock:
            last = sorted(self._last_verdict.items())
        metric("loopcoll_detector_max_delta", "gauge", "Latest max cut-slack deviation (Algorithm 1).",
               [({"comm": k[0], "collective": k[1]}, v.max_delta) for k, v in last])
        metric("loopcoll_detector_flagged", "gauge", "Latest detector verdict (1 = flagged).",
               [({"comm": k[0], "collective": k[1]}, 1.0 if v.flagged else 0.0) for k, v in last])
        return "\n".join(lines) + "\n"


class _RoutingBuild:
    """``ScheduleRouting.build(schedule, topology, phase)`` in a daemon thread, then ``then(routing)`` (the columnar
    fold's flow table); :meth:`result` waits for it (and raises what the build raised, in the caller's thread)."""

    def __init__(self, schedule: Schedule, topology: Topology, phase: str | None,
                 then: Callable[[ScheduleRouting], object]) -> None:
        self._args, self._then = (schedule, topology, phase), then
        self._value: ScheduleRouting | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="loopcoll-routing", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._value = ScheduleRouting.build(*self._args)
            self._then(self._value)
        except BaseException as exc:  # noqa: BLE001 - re-raised by result() (a failed table: by the poll's own build)
            self._error = exc if self._value is None else None

    def result(self) -> ScheduleRouting:
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._value is not None
        return self._value


def _esc(v: str) -> str:
    return str(v).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _num(x: float) -> str:
    if isinstance(x, bool):
        return "1" if x else "0"
    if isinstance(x, int):
        return str(x)
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    return repr(float(x))

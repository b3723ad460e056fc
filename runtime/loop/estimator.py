"""Link estimator: telemetry samples → per-link capacity estimates ``M_a`` → a measured topology.

MCCL's hybrid metric (Section 3.2): a ``pair`` sample (bytes ``src`` sent to ``dst`` over the one
path a peer-addressed executor uses) bounds the links of that path; an ``inject`` sample (bytes a GPU
sent inside its host) bounds the GPU's host-fabric up-links. A sample measures *achieved throughput*
``r``; with the running schedule's chunk counts it becomes an *implied capacity* per link

    c_a = r · n_a / n_{m,a}

(``n_a`` chunks of the schedule cross link ``a``, ``n_{m,a}`` of them belong to the measurement).
``docs/controller.md`` §2 derives it and states the assumptions: while the measured transfers run,
the flows on a saturated link share it in proportion to their chunks, so the measurement equals
``M_a · n_{m,a} / n_a`` when ``a`` binds it and is lower otherwise; ``c_a`` is therefore a lower bound
of ``M_a``, exact on the measurement's binding link.

Per collective (samples grouped by ``(comm, collective, version, seq)``) a link's observation is

* its **nominal** capacity when some informative measurement crossing it ran at its expected speed
  (at least ``1 − slow_tolerance`` of its proportional share on the nominal topology): the link is
  not what slows anything down;
* otherwise the **largest implied capacity** over the slow measurements crossing it (every one of
  them is slow: the link is implicated), clipped to the nominal capacity;
* nothing when no informative measurement crosses it.

A slow measurement whose sender was fed by a slow upstream transfer at the same per-chunk rate (a
relay paced by its input, not by its own links) is *uninformative* and implicates nothing.
Observations are smoothed per link by an EWMA (``alpha`` per observation, or ``1 − exp(−Δt/τ)``
with a time constant ``tau_s`` for irregular sampling), starting from the nominal capacity.

Examples
--------
>>> from synth import load_topology, synthesize
>>> topo = load_topology("hpn:1x2x4")
>>> sched = synthesize("allgather", topo).schedule
>>> est = LinkEstimator(topo, alpha=1.0)
>>> routing = ScheduleRouting.build(sched, topo)
>>> routing.link_chunks[("gpu0", "tor0.0")] == routing.pair_chunks[(0, 4)]  # only 0->4 crosses it
True
>>> obs = est.observe_group(routing, [("pair", 0, 4, 30e9 / 8, 1.0)], t_s=0.0)  # 30 Gbit/s achieved
>>> est.estimate_gbps(("gpu0", "tor0.0")), est.estimate_gbps(("gpu1", "tor0.1"))
(30.0, 400.0)
"""

from __future__ import annotations

import math
from collections import defaultdict, deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from synth import Link, Schedule, Topology
from synth.errors import LoopcollError
from synth.routing import pair_route

from runtime.loop.pacing import Pacing
from runtime.loop.routeflows import route_flows

__all__ = ["LinkEstimate", "LinkEstimator", "Measurement", "ScheduleRouting"]

LinkKey = tuple[str, str]
#: The routes an AllReduce phase runs (``Sample.phase``): its ReduceScatter in-trees, its AllGather out-trees.
_PHASE_ROUTES = {"reducescatter": "in_tree", "allgather": "out_tree"}
#: One measurement of a collective: (kind, src, dst or None, bytes, busy_s).
Measurement = tuple[str, int, "int | None", float, float]


def _route_path(topo: Topology, sched_paths: Mapping[tuple[int, int], set[tuple[str, ...]]],
                u: int, v: int) -> tuple[str, ...] | None:
    """The path the executor uses for u→v: the pair's route (:func:`synth.routing.pair_route`);
    the schedule's own path only where the pair has no route (it cannot run then, but loads stay
    attributable)."""
    try:
        path = pair_route(topo, topo.gpu_id(u), topo.gpu_id(v))
    except LoopcollError:
        path = None
    if path is None:
        paths = sched_paths.get((u, v))
        if paths is not None and len(paths) == 1:
            return next(iter(paths))
    return path


@dataclass(frozen=True)
class ScheduleRouting:
    """What the estimator needs from one running schedule: per-pair paths and chunk counts, ``n_a``.

    ``pair_chunks[(u, v)]`` chunks go u→v in one collective; ``pair_links[(u, v)]`` is the path's links;
    ``link_chunks[a]`` = ``n_a``; ``inject_links[u]`` maps each host-fabric up-link of ``u`` to the
    chunks of ``u``'s intra-host sends crossing it; ``upstream[(u, v)]`` the pairs that feed ``u`` the
    data it relays to ``v``; ``chunk_bytes_per_S`` is the chunk size per byte of ``S``. Of one AllReduce
    ``phase``, ``before[(u, v)]`` are the pairs of the phase before (the ReduceScatter) that feed ``u``.
    """

    pair_chunks: Mapping[tuple[int, int], int]
    pair_links: Mapping[tuple[int, int], tuple[LinkKey, ...]]
    link_chunks: Mapping[LinkKey, int]
    inject_links: Mapping[int, Mapping[LinkKey, int]]
    upstream: Mapping[tuple[int, int], frozenset[tuple[int, int]]]
    host_of: Mapping[int, int | None]
    nchunks_total: int = 1
    meta: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    phase: str | None = None
    before: Mapping[tuple[int, int], frozenset[tuple[int, int]]] = field(default_factory=lambda: MappingProxyType({}))

    @classmethod
    def build(cls, schedule: Schedule, topology: Topology, phase: str | None = None) -> ScheduleRouting:
        """Routing of ``schedule`` as a peer-addressed executor runs it on ``topology``.

        Each GPU pair uses one path, its route (:func:`synth.routing.pair_route`), whatever paths
        the schedule's hops name. Loads ``n_a`` are recomputed from those paths. ``phase`` keeps one
        phase of an AllReduce: ``reducescatter`` its in-trees, ``allgather`` its out-trees (the flows of
        the samples measured in that phase); its loads ``n_a`` stay the whole schedule's, since the phases
        of pipelined trees overlap in time and share the links (docs/controller.md §1).
        """
        # a communicator's schedule has local ranks 0..k-1; samples and paths use the job's global ranks
        g = list(schedule.meta.get("global_ranks") or range(schedule.nranks))
        routes = schedule.routes if phase is None else \
            tuple(r for r in schedule.routes if r.kind.value == _PHASE_ROUTES[phase])
        flows = route_flows(routes, g)
        chunks, paths, upstream = flows.chunks, flows.paths, defaultdict(set, flows.upstream)
        # AllReduce: an out-tree's root broadcasts what the in-tree into it reduced (the phase before it)
        before: dict[tuple[int, int], set[tuple[int, int]]] = defaultdict(set)
        reduced: Mapping[int, set[tuple[int, int]]] = {}
        if phase != "reducescatter" and any(r.kind.value == "in_tree" for r in schedule.routes):
            reduced = flows.reduced_into if phase is None else route_flows(schedule.routes, g).reduced_into
        for route in routes if reduced else ():
            for hop in route.hops:
                if route.kind.value == "out_tree" and g[hop.src] == g[route.root]:
                    (upstream if phase is None else before)[(g[hop.src], g[hop.dst])].update(
                        reduced.get(g[route.root], ()))
        pair_links: dict[tuple[int, int], tuple[LinkKey, ...]] = {}
        link_chunks: dict[LinkKey, int] = defaultdict(int)
        link_key: dict[LinkKey, LinkKey] = {}  # one tuple per link, shared by the pairs crossing it
        for pair in sorted(chunks):
            path = _route_path(topology, paths, *pair)
            if path is None:
                continue
            keys = tuple([link_key.setdefault(a, a) for a in zip(path[:-1], path[1:])])
            pair_links[pair] = keys
            for a in keys:
                link_chunks[a] += chunks[pair]
        if phase is not None:  # the phases overlap in time (pipelined trees): a link is shared by both
            link_chunks = defaultdict(int, cls.build(schedule, topology).link_chunks)
        host_of = {g.rank: g.host for g in topology.gpus if g.rank is not None}
        inject: dict[int, dict[LinkKey, int]] = defaultdict(lambda: defaultdict(int))
        for (u, v), keys in pair_links.items():
            if host_of.get(u) is not None and host_of.get(u) == host_of.get(v) and keys:
                inject[u][keys[0]] += chunks[(u, v)]
        return cls(
            pair_chunks=MappingProxyType(dict(chunks)),
            pair_links=MappingProxyType(pair_links),
            link_chunks=MappingProxyType(dict(sorted(link_chunks.items()))),
            inject_links=MappingProxyType({u: MappingProxyType(dict(v)) for u, v in sorted(inject.items())}),
            upstream=MappingProxyType({k: frozenset(v - {k}) for k, v in upstream.items() if v - {k}}),
            host_of=MappingProxyType(host_of),
            nchunks_total=schedule.nchunks * schedule.nranks,
            meta=MappingProxyType({} if phase is None else {"phase_of": id(schedule)}),
            phase=phase,
            before=MappingProxyType({k: frozenset(v) for k, v in before.items() if v}),
        )

    def measured_links(self, kind: str, src: int, dst: int | None) -> dict[LinkKey, int] | None:
        """Links a measurement bounds and its chunks on each (``None``: the schedule has no such flow)."""
        if kind == "pair" and dst is not None:
            keys = self.pair_links.get((src, dst))
            if keys is None:
                return None
            n = self.pair_chunks[(src, dst)]
            return {a: n for a in keys}
        if kind == "inject":
            links = self.inject_links.get(src)
            return None if not links else dict(links)
        return None


@dataclass(frozen=True, slots=True)
class LinkEstimate:
    """The smoothed capacity ``M_a`` of one link and how it was reached."""

    src: str
    dst: str
    nominal_gbps: float
    estimate_gbps: float
    observations: int
    last_observation_gbps: float
    last_t_s: float

    def to_dict(self) -> dict[str, Any]:
        return {"link": f"{self.src}->{self.dst}", "nominal_gbps": self.nominal_gbps,
                "estimate_gbps": self.estimate_gbps, "observations": self.observations,
                "last_observation_gbps": self.last_observation_gbps, "last_t_s": self.last_t_s}


class LinkEstimator:
    """Per-link EWMA of capacity observations over a nominal topology (not thread-safe by itself).

    Parameters
    ----------
    nominal
        The topology whose capacities are the prior (and the upper bound) of every estimate.
    alpha
        EWMA weight of one observation (MCCL uses 0.012), used when ``tau_s`` is ``None``.
    tau_s
        Time constant for irregular sampling: an observation ``Δt`` seconds after the link's previous
        one gets weight ``1 − exp(−Δt / tau_s)``.
    slow_tolerance
        A measurement is *slow* below ``1 − slow_tolerance`` of its expected (proportional-share,
        nominal) throughput.
    pace_tolerance
        A slow relay is *paced* (uninformative) when an upstream transfer feeding it was slow with a
        per-chunk rate at most ``1 + pace_tolerance`` times its own.
    snap
        Estimates within this relative distance of the nominal capacity count as nominal in
        :meth:`measured_topology` (keeps the fingerprint stable while healthy).
    """

    def __init__(self, nominal: Topology, *, alpha: float = 0.012, tau_s: float | None = None,
                 slow_tolerance: float = 0.1, pace_tolerance: float = 0.1, snap: float = 0.02,
                 window: int = 8, pace_window: int = 16) -> None:
        if not 0.0 < alpha <= 1.0:
            raise ValueError(f"alpha must be in (0, 1], got {alpha!r}")
        if tau_s is not None and not (math.isfinite(tau_s) and tau_s > 0):
            raise ValueError(f"tau_s must be > 0, got {tau_s!r}")
        self.nominal = nominal
        self.alpha = float(alpha)
        self.tau_s = tau_s
        self.slow_tolerance = float(slow_tolerance)
        self.pace_tolerance = float(pace_tolerance)
        self.snap = float(snap)
        self._nominal_gbps: dict[LinkKey, float] = {lk.key: lk.gbps for lk in nominal.links}
        self._m: dict[LinkKey, float] = {}
        self._count: dict[LinkKey, int] = defaultdict(int)
        self._last: dict[LinkKey, tuple[float, float]] = {}
        self._recent: dict[LinkKey, deque[float]] = {}
        self.window = max(1, int(window))
        self.pace_window = max(1, int(pace_window))
        self._pacing = Pacing(self.pace_tolerance, self.pace_window)
        #: per AllReduce schedule (its routing's meta ``phase_of``): the per-chunk rates of its last ReduceScatter phase
        self._phase_rates: dict[Any, Mapping[tuple[int, int], float]] = {}
        self._flow_cache: dict[int, tuple[ScheduleRouting, dict[tuple[str, int, int | None], Any]]] = {}
        self.groups = 0
        #: bumped by every change of an estimate (a consumer recomputes what it derived only when it moved)
        self.revision = 0

    # -- updates ----------------------------------------------------------------------------
    def _weight(self, key: LinkKey, t_s: float, count: int = 1) -> float:
        if self.tau_s is None:
            return 1.0 - (1.0 - self.alpha) ** count
        last = self._last.get(key)
        if last is None:
            return 1.0 - (1.0 - self.alpha) ** count
        dt = max(0.0, t_s - last[0])
        return 1.0 - math.exp(-dt / self.tau_s)

    def update(self, key: LinkKey, observation_gbps: float, t_s: float, count: int = 1) -> None:
        """Fold a capacity observation of link ``key`` into its EWMA; ``count`` > 1: an aggregated window's
        level standing for that many collectives (weight ``1 − (1 − alpha)^count``, as many recent entries)."""
        nominal = self._nominal_gbps[key]
        obs = min(max(observation_gbps, 0.0), nominal)
        a = self._weight(key, t_s, count)
        prev = self._m.get(key, nominal)
        self._m[key] = (1.0 - a) * prev + a * obs
        self.revision += 1
        self._count[key] += count
        self._last[key] = (t_s, obs)
        self._recent.setdefault(key, deque(maxlen=self.window)).extend([obs] * min(count, self.window))

    def update_many(self, keys: Sequence[LinkKey], observations_gbps: Sequence[float], t_s: float,
                    count: int = 1) -> None:
        """:meth:`update` of each ``keys[i]`` with ``observations_gbps[i]`` (distinct keys; the same figures, one
        loop without a call per link: the columnar fold's EWMA step)."""
        if self.tau_s is not None:
            for key, obs in zip(keys, observations_gbps):
                self.update(key, obs, t_s, count)
            return
        a = 1.0 - (1.0 - self.alpha) ** count
        nominal, m, n, last, recent = self._nominal_gbps, self._m, self._count, self._last, self._recent
        reps, window = min(count, self.window), self.window
        for key, x in zip(keys, observations_gbps):
            top = nominal[key]
            obs = min(max(x, 0.0), top)
            m[key] = (1.0 - a) * m.get(key, top) + a * obs
            n[key] += count
            last[key] = (t_s, obs)
            hist = recent.get(key)
            if hist is None:
                hist = recent[key] = deque(maxlen=window)
            hist.extend([obs] * reps)
        self.revision += len(keys)

    def observe_group(self, routing: ScheduleRouting, measurements: Iterable[Measurement], *, t_s: float,
                      count: int = 1) -> dict[LinkKey, float]:
        """Fold one collective's measurements in; returns the per-link observations made (Gbit/s).

        ``count`` > 1: the measurements are an aggregated window's medians (docs/telemetry.md §5) standing
        for that many collectives; each link's observation is weighted as that many (:meth:`update`) while
        the pacing decision is made once, on the medians."""
        slow: dict[LinkKey, float] = {}
        healthy: set[LinkKey] = set()
        rows = []
        verdicts = []
        flows = self._flows(routing)
        keep = 1.0 - self.slow_tolerance
        for kind, src, dst, nbytes, busy_s in measurements:
            if busy_s <= 0 or nbytes <= 0:
                continue
            flow = flows.get((kind, src, dst))
            if flow is None:
                continue
            links, chunks, expected = flow
            rate = 8.0 * nbytes / busy_s / 1e9
            rows.append((kind, src, dst, rate, links, rate / chunks))
            verdicts.append(rate < keep * expected)
        per_chunk = {(src, dst): pc for kind, src, dst, _, _, pc in rows if kind == "pair" and dst is not None}
        prior = self.phase_prior(routing, per_chunk)
        paced = self._pacing.paced(routing, rows, verdicts, per_chunk, prior, count)
        for (kind, src, dst, rate, links, _pc), is_slow in zip(rows, verdicts):
            if not is_slow:
                healthy.update(links)
                continue
            if (kind, src, dst) in paced:
                continue
            for a, n in links.items():
                implied = rate * routing.link_chunks[a] / n
                slow[a] = max(slow.get(a, 0.0), implied)
        out: dict[LinkKey, float] = {}
        for a in sorted(healthy | set(slow)):
            out[a] = self._nominal_gbps[a] if a in healthy else slow[a]
            self.update(a, out[a], t_s, count)
        self.groups += 1
        return out

    def phase_prior(self, routing: ScheduleRouting,
                    per_chunk: Mapping[tuple[int, int], float]) -> Mapping[tuple[int, int], float]:
        """Of an AllReduce phase: a ReduceScatter's per-chunk pair rates are kept (returns ``{}``), an AllGather
        gets its ReduceScatter's last ones (its pacing looks at them); ``{}`` for any other routing."""
        if routing.phase is None:
            return {}
        family = routing.meta.get("phase_of")
        if routing.phase != "reducescatter":
            return self._phase_rates.get(family, {})
        self._phase_rates[family] = per_chunk
        while len(self._phase_rates) > 16:
            del self._phase_rates[next(iter(self._phase_rates))]
        return {}

    @property
    def pacing(self) -> Pacing:
        """The relay-pacing memory (:class:`~runtime.loop.pacing.Pacing`) the estimator decides with."""
        return self._pacing

    def nominal_gbps(self, key: LinkKey) -> float:
        """The nominal capacity of link ``key`` (KeyError for a link the topology lacks)."""
        return self._nominal_gbps[key]

    def _flows(self, routing: ScheduleRouting) -> dict[tuple[str, int, int | None], tuple[dict[LinkKey, int], int,
                                                                                          float]]:
        """Per measurement of ``routing`` (kind, src, dst): its links with their chunks, its chunk count and its
        expected (proportional-share, nominal) rate in Gbit/s; computed once per routing (the hot path's tables)."""
        cached = self._flow_cache.get(id(routing))
        if cached is not None and cached[0] is routing:
            return cached[1]
        table: dict[tuple[str, int, int | None], tuple[dict[LinkKey, int], int, float]] = {}
        keys: list[tuple[str, int, int | None]] = [("pair", u, v) for u, v in routing.pair_links]
        keys += [("inject", u, None) for u in routing.inject_links]
        for kind, src, dst in keys:
            links = routing.measured_links(kind, src, dst)
            if links:
                expected = min(self._nominal_gbps[a] * n / routing.link_chunks[a] for a, n in links.items())
                table[(kind, src, dst)] = (links, max(links.values()), expected)
        self._flow_cache[id(routing)] = (routing, table)
        while len(self._flow_cache) > 16:  # one per running version
            del self._flow_cache[next(iter(self._flow_cache))]
        return table

    # -- queries ----------------------------------------------------------------------------
    def estimate_gbps(self, key: LinkKey) -> float:
        """``M_a`` of link ``key`` (its nominal capacity while unobserved)."""
        return self._m.get(key, self._nominal_gbps[key])

    def capacities_gbps(self, keys: Iterable[LinkKey] | None = None) -> dict[LinkKey, float]:
        """``M_a`` for the given links (default: every link of the topology)."""
        ks = self._nominal_gbps.keys() if keys is None else keys
        return {k: self.estimate_gbps(k) for k in ks}

    def estimated_links(self) -> list[LinkKey]:
        """Links with at least one observation, sorted."""
        return sorted(self._m)

    def snapshot(self) -> list[LinkEstimate]:
        """Every observed link's estimate, sorted by link."""
        return [LinkEstimate(a, b, self._nominal_gbps[(a, b)], self._m[(a, b)], self._count[(a, b)],
                             self._last[(a, b)][1], self._last[(a, b)][0]) for a, b in sorted(self._m)]

    def recent_gbps(self, key: LinkKey) -> float:
        """The median of the link's last ``window`` observations (its EWMA until it has that many)."""
        recent = self._recent.get(key)
        if recent is None or len(recent) < self.window:
            return self.estimate_gbps(key)
        return float(sorted(recent)[len(recent) // 2])

    def measured_topology(self, *, recent: bool = False) -> Topology:
        """The nominal topology with estimated capacities (only observed links off nominal by > ``snap``).

        ``recent`` uses each link's recent level (:meth:`recent_gbps`) instead of its EWMA: the
        EWMA decides *whether* to act, the recent level *what for* (docs/controller.md §2).
        """
        links = []
        changed = False
        for lk in self.nominal.links:
            m = self._m.get(lk.key)
            if m is not None and recent:
                m = self.recent_gbps(lk.key)
            if m is not None and m < (1.0 - self.snap) * lk.gbps:
                links.append(Link(lk.src, lk.dst, _round_gbps(m), lk.latency_us))
                changed = True
            else:
                links.append(lk)
        if not changed:
            return self.nominal
        return self.nominal.with_links(links, name=f"{self.nominal.name}+measured")

    def seed(self, capacities_gbps: Mapping[LinkKey, float], *, t_s: float) -> list[LinkKey]:
        """Start the EWMA of the given links at these levels (a restarted controller's memory).

        The store records, per version, the measured capacities it was made for; seeding from them
        keeps a restarted controller from judging a deployed degraded version against nominal links
        it has no evidence for. Unknown links are ignored; levels are clipped to ``[0, nominal]``.
        Returns the links seeded. Seeds count as no observation.
        """
        seeded = []
        for key, gbps in sorted(capacities_gbps.items()):
            nominal = self._nominal_gbps.get(key)
            if nominal is None or not math.isfinite(gbps):
                continue
            level = min(max(float(gbps), 0.0), nominal)
            self._m[key] = level
            self.revision += 1
            self._last[key] = (t_s, level)
            self._count.setdefault(key, 0)
            seeded.append(key)
        return seeded

    def rebase(self, topology: Topology) -> list[LinkKey]:
        """Set the EWMA of every observed link to its capacity in ``topology``; returns the links moved.

        The manager calls it after acting on a measured topology, so that the detector judges the new
        version against the levels it was made for instead of a filter still catching up to them.
        """
        moved = []
        for key in sorted(self._m):
            if topology.has_link(*key):
                new = min(topology.link(*key).gbps, self._nominal_gbps[key])
                if abs(new - self._m[key]) > 1e-12 * self._nominal_gbps[key]:
                    self._m[key] = new
                    self.revision += 1
                    moved.append(key)
        return moved

    def reset(self, keys: Sequence[LinkKey] | None = None) -> None:
        """Forget estimates (all, or of ``keys``)."""
        for k in list(self._m) if keys is None else keys:
            self.revision += self._m.pop(k, None) is not None
            self._last.pop(k, None)
            self._count.pop(k, None)
            self._recent.pop(k, None)


def _round_gbps(x: float) -> float:
    """Estimates rounded to 4 significant digits: re-synthesis sees stable, exact-friendly decimals."""
    if x <= 0:
        return 0.0
    digits = 3 - int(math.floor(math.log10(x)))
    return round(x, max(digits, 0))

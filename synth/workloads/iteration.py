"""Iteration time of a workload on a (failed) topology, per schedule family.

Families (``FAMILIES``):

* ``nccl``: the NCCL-like baselines of :mod:`synth.baselines` (multi-ring AllGather/ReduceScatter/
  AllReduce, rail-direct AllToAll) built for the communicator's own GPUs;
* ``static``: loopcoll's schedule synthesized once on the healthy fabric and kept after the failure;
* ``resynth``: re-synthesized (warm, from the healthy result) for the failed fabric.

A communicator with ``relay_share`` (one of several identical collectives running at once, such as
the 8 rail groups of a data-parallel step) is synthesized with relays through the job's other GPUs
(``Topology.communicator(ranks, relay=True)``) and gets ``relay_share`` of every link: the
siblings each using that share of every link fit the fabric together, so the joint schedule is
feasible; its rate is the relayed schedule's algbw × share. NCCL-like rings never relay.

Collective time (bandwidth+latency model): ``latency + S / algbw`` with ``algbw`` the schedule's
exact bandwidth term (:meth:`synth.Schedule.algbw_GBps`) and ``latency`` the deepest route's sum of
link latencies (store-and-forward per GPU hop, cut-through switches). The flow simulator is more
precise but costs seconds to minutes per collective at 256+ GPUs; ``benchmarks/training.py``
measures this model's error against it at 16–128 GPUs. Concurrent collectives of different
streams are not modelled as contending, and communicators without GPU 0 are not timed (every
failure scenario hits GPU 0; training waits for the slowest instance).

>>> from synth.workloads.generators import llama405b
>>> from synth import load_topology
>>> res = whatif(llama405b(16), load_topology("hpn:1x2x8"), "fail2")
>>> res.iteration["resynth"].iteration_s < res.iteration["nccl"].iteration_s
True
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from synth.baselines import nccl_direct_alltoall, nccl_ring
from synth.bounds import optimal_bound
from synth.result import SynthResult
from synth.schedule import RouteKind, Schedule
from synth.synthesis import synthesize
from synth.topologies.model import Topology
from synth.workloads.model import Op, Workload, WorkloadError

__all__ = ["FAMILIES", "CollectiveFigure", "CollectiveTimer", "IterationTimes", "WhatIf", "route_latency_s",
           "run_iteration", "whatif"]

FAMILIES = ("nccl", "static", "resynth")


def route_latency_s(schedule: Schedule, topo: Topology) -> float:
    """Deepest route's latency: link latencies summed along the longest chain of GPU hops.

    >>> from synth import load_topology
    >>> t = load_topology("ring:4")
    >>> round(route_latency_s(nccl_ring("allgather", t), t) * 1e6, 6)  # 3 hops of 0.5 us
    1.5
    """
    cache: dict[tuple[str, ...], float] = {}

    def path_s(path: tuple[str, ...]) -> float:
        val = cache.get(path)
        if val is None:
            val = sum(topo.link(a, b).latency_us for a, b in zip(path[:-1], path[1:])) * 1e-6
            cache[path] = val
        return val

    worst = 0.0
    for route in schedule.routes:
        at: dict[int, float] = {}
        for hop in route.hops:  # parents first (out-tree, path) or leaves first (in-tree)
            t = at.get(hop.src, 0.0) + path_s(hop.path)
            if route.kind is RouteKind.IN_TREE:
                at[hop.dst] = max(at.get(hop.dst, 0.0), t)
            else:
                at[hop.dst] = t
            worst = max(worst, t)
    return worst


@dataclass(frozen=True)
class CollectiveFigure:
    """One collective on one communicator under one family and scenario (bandwidth+latency model)."""

    collective: str
    comm: str
    family: str
    scenario: str
    nranks: int
    algbw_GBps: float
    latency_s: float
    bound_GBps: float
    gap_pct: float
    solve_s: float
    warm: bool
    synthesizer: str

    def time_s(self, nbytes: float) -> float:
        """``latency + S / algbw`` for an nccl-tests numerator of ``nbytes``."""
        return self.latency_s + nbytes / (self.algbw_GBps * 1e9)


@dataclass
class CollectiveTimer:
    """Caches schedules per (collective, communicator): healthy syntheses are reused across scenarios.

    ``chunks`` and ``time_limit_s`` go to :func:`synth.synthesize`.
    """

    topology: Topology
    workload: Workload
    chunks: int | None = None
    time_limit_s: float | None = None
    healthy: dict[tuple[str, str], tuple[SynthResult, float]] = field(default_factory=dict)

    def _designs(self, topo: Topology, comm: str) -> list[tuple[str, Topology, float]]:
        """(name, topology, share): ``plain`` (members only, every link whole) and, with a relay share,
        ``relay`` (other GPUs forward, ``share`` of every link)."""
        c = self.workload.communicators[comm]
        out = [("plain", topo.communicator(c.ranks), 1.0)]
        if c.relay_share is not None:
            out.append(("relay", topo.communicator(c.ranks, relay=True), c.relay_share))
        return out

    def _healthy(self, collective: str, comm: str, design: str, syn: Topology) -> tuple[SynthResult, float]:
        key = (collective, comm + ":" + design)
        if key not in self.healthy:
            t0 = time.perf_counter()
            res = synthesize(collective, syn, chunks=self.chunks, time_limit_s=self.time_limit_s,
                             routing="free")
            if res.schedule is None:
                raise WorkloadError(f"{collective} on communicator {comm!r} ({design}): no schedule ({res.message})")
            self.healthy[key] = (res, time.perf_counter() - t0)
        return self.healthy[key]

    def figures(self, collective: str, comm: str, scenario: str) -> dict[str, CollectiveFigure]:
        """The three families' figures for ``collective`` on ``comm`` after ``scenario`` (``healthy``: none).

        With a relay share both designs are synthesized; ``static`` keeps the design that was best
        when healthy (``plain`` on ties), ``resynth`` takes the better one after the failure.
        """
        topo = self.topology if scenario == "healthy" else self.topology.with_failure(scenario)
        designs = self._designs(topo, comm)
        healthy_designs = self._designs(self.topology, comm)
        plain = designs[0][1]
        out: dict[str, CollectiveFigure] = {}
        t0 = time.perf_counter()
        base = nccl_direct_alltoall(plain) if collective == "alltoall" else nccl_ring(collective, plain)
        nccl_s = time.perf_counter() - t0
        bw = base.algbw_GBps(plain)
        bound_plain = optimal_bound(collective, plain).algbw_GBps
        out["nccl"] = CollectiveFigure(collective, comm, "nccl", scenario, plain.nranks, bw, route_latency_s(base, plain),
                                       bound_plain, 100.0 * max(0.0, 1 - bw / bound_plain), nccl_s, False,
                                       str(base.meta.get("baseline", "nccl")))
        static: tuple[float, CollectiveFigure] | None = None
        resyn: tuple[float, CollectiveFigure] | None = None
        for (design, syn, share), (_, syn0, _) in zip(designs, healthy_designs):
            res0, cold_s = self._healthy(collective, comm, design, syn0)
            assert res0.schedule is not None
            sched0 = res0.schedule
            healthy_bw = sched0.algbw_GBps(syn0) * share
            bound = bound_plain if design == "plain" else optimal_bound(collective, syn).algbw_GBps * share
            bw0 = sched0.algbw_GBps(syn) * share
            name = f"{sched0.meta.get('synthesizer', '')}/{design}"
            fig0 = CollectiveFigure(collective, comm, "static", scenario, plain.nranks, bw0, route_latency_s(sched0, syn),
                                    bound, 100.0 * max(0.0, 1 - bw0 / bound), cold_s, False, name)
            if static is None or healthy_bw > static[0] * (1 + 1e-9):
                static = (healthy_bw, fig0)
            if scenario == "healthy":
                fig1 = CollectiveFigure(**{**fig0.__dict__, "family": "resynth"})
            else:
                t0 = time.perf_counter()
                res = synthesize(collective, syn, chunks=self.chunks, time_limit_s=self.time_limit_s,
                                 warm_from=res0, routing="free")
                warm_s = time.perf_counter() - t0
                if res.schedule is None:
                    raise WorkloadError(f"{collective} on communicator {comm!r} ({design}) after {scenario}: "
                                        f"no schedule ({res.message})")
                bw1 = res.schedule.algbw_GBps(syn) * share
                fig1 = CollectiveFigure(collective, comm, "resynth", scenario, plain.nranks, bw1,
                                        route_latency_s(res.schedule, syn), bound, 100.0 * max(0.0, 1 - bw1 / bound),
                                        warm_s, True, f"{res.schedule.meta.get('synthesizer', '')}/{design}")
            if resyn is None or fig1.algbw_GBps > resyn[0] * (1 + 1e-9):
                resyn = (fig1.algbw_GBps, fig1)
        assert static is not None and resyn is not None
        out["static"], out["resynth"] = static[1], resyn[1]
        return out


@dataclass(frozen=True)
class IterationTimes:
    """One family's iteration: wall time, compute and collective busy time, shares."""

    iteration_s: float
    compute_s: float
    comm_s: float
    by_label_s: Mapping[str, float]

    @property
    def comm_share(self) -> float:
        """Collective busy time / (collective + compute busy time): the share if nothing overlapped."""
        return self.comm_s / (self.comm_s + self.compute_s)

    @property
    def exposed_comm_share(self) -> float:
        """Share of the iteration not covered by compute (communication on the critical path)."""
        return 1.0 - self.compute_s / self.iteration_s


def run_iteration(workload: Workload, op_time_s: Callable[[Op], float]) -> IterationTimes:
    """List-schedule the ops: each starts when its stream is free and its ``after`` ops have finished.

    >>> from synth.workloads.model import Workload
    >>> w = Workload.from_dict({"format": "loopcoll.workload/1", "name": "t", "gpus": 2,
    ...     "compute": {"peak_tflops": 1.0, "mfu": 1.0}, "communicators": {"w": {"size": 2}},
    ...     "ops": [{"name": "c1", "kind": "compute", "time_s": 1.0},
    ...             {"name": "ag", "kind": "allgather", "comm": "w", "bytes": 1.0, "stream": "net"},
    ...             {"name": "c2", "kind": "compute", "time_s": 1.0, "after": ["ag"]}]})
    >>> run_iteration(w, lambda op: 1.5 if op.is_collective else w.compute_time_s(op)).iteration_s
    2.5
    """
    end: dict[str, float] = {}
    free: dict[str, float] = {}
    compute = comm = 0.0
    by_label: dict[str, float] = {}
    for op in workload.ops:
        dur = op_time_s(op)
        start = max([free.get(op.stream, 0.0)] + [end[a] for a in op.after])
        end[op.name] = free[op.stream] = start + dur
        if op.is_collective:
            comm += dur
        else:
            compute += dur
        label = op.label or op.kind
        by_label[label] = by_label.get(label, 0.0) + dur
    return IterationTimes(max(end.values()), compute, comm, dict(by_label))


@dataclass(frozen=True)
class WhatIf:
    """Iteration times of one workload after one scenario, per family, and the per-collective figures."""

    workload: str
    topology: str
    scenario: str
    iteration: Mapping[str, IterationTimes]
    collectives: tuple[CollectiveFigure, ...]

    def speedup(self, family: str = "resynth", over: str = "nccl") -> float:
        return self.iteration[over].iteration_s / self.iteration[family].iteration_s

    def to_dict(self) -> dict[str, Any]:
        return {
            "workload": self.workload, "topology": self.topology, "scenario": self.scenario,
            "iteration": {f: {"iteration_s": it.iteration_s, "compute_s": it.compute_s, "comm_s": it.comm_s,
                              "comm_share": it.comm_share, "exposed_comm_share": it.exposed_comm_share,
                              "by_label_s": dict(it.by_label_s)} for f, it in self.iteration.items()},
            "speedup_vs_nccl": self.speedup("resynth", "nccl"), "speedup_vs_static": self.speedup("resynth", "static"),
            "collectives": [dict(c.__dict__) for c in self.collectives],
        }


def whatif(workload: Workload, topology: Topology, scenario: str, *, timer: CollectiveTimer | None = None,
           chunks: int | None = None, time_limit_s: float | None = None) -> WhatIf:
    """Iteration time of ``workload`` on ``topology`` after ``scenario`` (``healthy`` or a failure) per family."""
    if topology.nranks != workload.gpus:
        raise WorkloadError(f"workload {workload.name!r} is for {workload.gpus} GPUs but topology "
                            f"{topology.name!r} has {topology.nranks}")
    if timer is None:
        timer = CollectiveTimer(topology, workload, chunks=chunks, time_limit_s=time_limit_s)
    figs: dict[tuple[str, str], dict[str, CollectiveFigure]] = {}
    for coll, comm in workload.collective_keys():
        figs[(coll, comm)] = timer.figures(coll, comm, scenario)
    iters: dict[str, IterationTimes] = {}
    for fam in FAMILIES:
        def op_time(op: Op, fam: str = fam) -> float:
            if not op.is_collective:
                return workload.compute_time_s(op)
            assert op.comm is not None and op.nbytes is not None
            return figs[(op.kind, op.comm)][fam].time_s(op.nbytes)
        iters[fam] = run_iteration(workload, op_time)
    flat = tuple(f for per in figs.values() for f in per.values())
    return WhatIf(workload.name, topology.name, scenario, iters, flat)

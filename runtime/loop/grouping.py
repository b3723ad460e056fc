"""Telemetry grouping: the controller's held samples, one group per collective, until each is ready to fold.

Samples are grouped per ``(comm, collective, version, incarnation, seq, phase)`` (``phase``: the AllReduce
phase a sample measured, :attr:`~runtime.formats.telemetry.Sample.phase`; each phase is folded on its own routes). A group is ready once it is
complete by content (every flow its schedule version produces), or when it is closed incomplete: every rank
it lacks has reported a later collective of the same incarnation (at most :data:`SEQ_WINDOW` ahead), it was
held :data:`GROUP_TIMEOUT_S`, or more than :data:`MAX_HELD_GROUPS` groups wait (the oldest close first).
``docs/controller.md`` §1 gives the rules and why. :class:`~runtime.loop.controller.Controller` owns one
:class:`SampleGroups` and folds what it returns into the link estimator.

Examples
--------
>>> from collections import Counter
>>> from runtime.formats.telemetry import Sample
>>> skipped: Counter[str] = Counter()
>>> groups = SampleGroups(clock=lambda: 0.0, skipped=skipped)
>>> def sample(collective: str) -> Sample:
...     return Sample(t_s=0.0, comm="world", seq=1, version=1, kind="pair", src=0, dst=1, bytes=1 << 20,
...                   busy_s=1e-3, collective=collective, origin="executor")
>>> groups.collect([sample("reduce"), sample("allgather")], lambda comm, collective, version, phase: None)
[]
>>> dict(sorted(skipped.items())), groups.pending_samples
({'rooted_reduce': 1, 'unknown_version': 1}, 0)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from runtime.formats.telemetry import Sample
from runtime.loop.estimator import ScheduleRouting

__all__ = ["GROUP_TIMEOUT_S", "MAX_HELD_GROUPS", "MAX_TRACKED_RANKS", "SEQ_WINDOW", "RoutingLookup", "SampleGroups"]

#: Collectives whose samples are skipped, with the reason: the rooted reduce has no synthesized schedule.
_UNSUPPORTED = {"reduce": "rooted_reduce"}
#: Fold order of an AllReduce's phases: its ReduceScatter before its AllGather (the estimator paces the one by the other).
_PHASE_ORDER = {None: 0, "reducescatter": 1, "allgather": 2}

#: Held (incomplete) sample groups at most; past it the oldest are folded as they are (docs/controller.md §1).
MAX_HELD_GROUPS = 4096
#: An incomplete group is folded as it is once held this long (controller clock seconds).
GROUP_TIMEOUT_S = 60.0
#: A rank's later report closes a group it left incomplete only when at most this many collectives ahead.
SEQ_WINDOW = 1024
#: Ranks (comm, incarnation, rank) whose latest seq is remembered, least recently heard forgotten first.
MAX_TRACKED_RANKS = 65536

_Flow = tuple[str, int, int | None]
_GroupKey = tuple[str, str, int, str | None, int, str | None]
#: ``(comm, collective, version, phase)`` -> the routing of that schedule version (of that AllReduce phase
#: when ``phase`` is given), or None when it is unknown.
RoutingLookup = Callable[[str, str, int, str | None], ScheduleRouting | None]


@dataclass(slots=True)
class _Group:
    """The samples held for one collective: per (kind, src, dst) flow, the first sample received."""

    serial: int
    created_t_s: float
    flows: dict[_Flow, Sample] = field(default_factory=dict)


class SampleGroups:
    """The held sample groups of one controller; not thread-safe (the controller calls it under its lock).

    Parameters
    ----------
    clock
        Seconds (the controller's clock): when a group was opened, for :data:`GROUP_TIMEOUT_S`.
    skipped
        The controller's counter of valid samples not used, by reason; grouping adds its reasons to it.
    """

    def __init__(self, *, clock: Callable[[], float], skipped: Counter[str]) -> None:
        self._now = clock
        self._skipped = skipped
        self._held: dict[_GroupKey, _Group] = {}
        self._want: dict[tuple[str, str, int, str | None], frozenset[_Flow]] = {}
        self._latest_seq: dict[tuple[str, str | None, int], int] = {}
        self._serial = 0

    @property
    def pending_samples(self) -> int:
        """Samples held in groups not folded yet."""
        return sum(len(g.flows) for g in self._held.values())

    def collect(self, batch: Iterable[Sample], routing_for: RoutingLookup) -> list[tuple[ScheduleRouting, list[Sample]]]:
        """Hold ``batch``'s samples in their groups and take out every group ready to fold, in fold order
        (per comm, collective, seq, version, incarnation, phase): each as its routing and samples."""
        single: list[Sample] = []
        for s in batch:
            if s.kind not in ("pair", "inject"):
                continue
            if s.collective in _UNSUPPORTED:
                self._skipped[_UNSUPPORTED[s.collective]] += 1
                continue
            if s.version is None or s.collective is None:
                self._skipped["no_schedule_version"] += 1
                continue
            if s.seq is None:
                single.append(s)  # no collective to group with: a group of its own
            else:
                self._hold(s)
        now = self._now()
        ready: list[tuple[tuple[Any, ...], ScheduleRouting, list[Sample]]] = []
        for i, s in enumerate(single):
            assert s.collective is not None and s.version is not None
            routing = routing_for(s.comm, s.collective, s.version, s.phase)
            if routing is None:
                self._skipped["unknown_version"] += 1
            else:
                ready.append(((s.comm, s.collective, -1 - i, s.version, "", _PHASE_ORDER[s.phase]), routing, [s]))
        waiting: list[_GroupKey] = []
        for gkey in list(self._held):
            comm, coll, version, inc, seq, phase = gkey
            group = self._held[gkey]
            routing = routing_for(comm, coll, version, phase)
            if routing is None:
                self._skipped["unknown_version"] += len(group.flows)
                del self._held[gkey]
                continue
            missing = {src for kind, src, dst in self._expected((comm, coll, version, phase), routing)
                       if (kind, src, dst) not in group.flows}
            if missing and not self._moved_on(gkey, missing) and now - group.created_t_s <= GROUP_TIMEOUT_S:
                waiting.append(gkey)
                continue
            del self._held[gkey]
            ready.append(((comm, coll, seq, version, inc or "", _PHASE_ORDER[phase]), routing,
                          list(group.flows.values())))
        waiting.sort(key=lambda k: self._held[k].serial)
        for gkey in waiting[:max(0, len(waiting) - MAX_HELD_GROUPS)]:  # the oldest past the bound
            comm, coll, version, inc, seq, phase = gkey
            routing = routing_for(comm, coll, version, phase)
            assert routing is not None
            ready.append(((comm, coll, seq, version, inc or "", _PHASE_ORDER[phase]), routing,
                          list(self._held.pop(gkey).flows.values())))
        return [(routing, samples) for _order, routing, samples in sorted(ready, key=lambda r: r[0])]

    def _expected(self, key: tuple[str, str, int, str | None], routing: ScheduleRouting) -> frozenset[_Flow]:
        """The (kind, src, dst) flows one collective of this version reports: a ``pair`` per GPU pair it sends
        over, an ``inject`` per GPU with intra-host sends."""
        want = self._want.get(key)
        if want is None:
            want = frozenset([("pair", u, v) for u, v in routing.pair_links] +
                             [("inject", u, None) for u in routing.inject_links])
            self._want[key] = want
        return want

    def _hold(self, s: Sample) -> None:
        """Put one sample into its collective's group (a duplicate flow of a group is skipped)."""
        assert s.collective is not None and s.version is not None and s.seq is not None
        gkey = (s.comm, s.collective, s.version, s.incarnation, s.seq, s.phase)
        group = self._held.get(gkey)
        if group is None:
            self._serial += 1
            group = self._held[gkey] = _Group(self._serial, self._now())
        flow = (s.kind, s.src, s.dst)
        if flow in group.flows:
            self._skipped["duplicate_sample"] += 1
            return
        group.flows[flow] = s
        rank = (s.comm, s.incarnation, s.src)
        self._latest_seq.pop(rank, None)  # re-inserted last: the dict's order is least recently heard first
        self._latest_seq[rank] = s.seq
        while len(self._latest_seq) > MAX_TRACKED_RANKS:
            del self._latest_seq[next(iter(self._latest_seq))]

    def _moved_on(self, gkey: _GroupKey, missing: Iterable[int]) -> bool:
        """Whether every rank whose flows a group lacks has since reported a later collective of the same
        incarnation, at most ``SEQ_WINDOW`` ahead (a rank reports in order: what it skipped is lost)."""
        comm, _coll, _version, inc, seq, _phase = gkey
        for r in missing:
            latest = self._latest_seq.get((comm, inc, r))
            if latest is None or not seq < latest <= seq + SEQ_WINDOW:
                return False
        return True

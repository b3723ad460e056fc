"""The schedule IR shared by every synthesizer, exporter, simulator and the runtime.

A :class:`Schedule` moves ``nchunks`` chunks of every source buffer (AllGather, ReduceScatter,
AllReduce) or of every (source, destination) block (AllToAll) along :class:`Route` objects. A route
carries ``chunks`` chunks along a tree over GPUs (out-tree for broadcast, in-tree for reduction) or
along a path (AllToAll); each GPU→GPU :class:`Hop` records the physical path through switches, so
per-link chunk loads are exact.

Timing convention (nccl-tests): with ``S`` the algbw numerator (AllGather output, AllToAll and
AllReduce buffer, ReduceScatter input), one chunk is ``S / (N · nchunks)`` bytes, so the bandwidth
term is ``T = max_a n_a · S / (N · nchunks · c_a)`` and ``algbw = N · nchunks / max_a(n_a / c_a)``.
An AllReduce runs its ReduceScatter phase (in-trees), then its AllGather phase (out-trees), so
the two phases' terms add up; this matches the bound ``1 / (1/RS + 1/AG)`` of :mod:`synth.bounds`.

Examples
--------
>>> from synth.topologies import named_topology
>>> topo = named_topology("ring:3")
>>> def hop(a, b):
...     return Hop(a, b, (f"gpu{a}", f"gpu{b}"))
>>> routes = tuple(Route(RouteKind.OUT_TREE, r, 1, (hop(r, (r + 1) % 3), hop((r + 1) % 3, (r + 2) % 3)))
...                for r in range(3))
>>> s = Schedule("allgather", 3, 1, routes)
>>> s.validate(topo)
>>> s.algbw_GBps(topo)
75.0
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from fractions import Fraction
from types import MappingProxyType
from typing import Any, NoReturn

from synth._types import Collective, NodeId
from synth.errors import ScheduleError, expect_type, short_repr
from synth.schedule._windows import RingWindows, ring_windows
from synth.schedule.decode import schedule_fields
from synth.schedule.encode import compact_document, legacy_document
from synth.schedule.parts import SCHEDULE_FORMAT, CutLink, Hop, Route, RouteKind
from synth.schedule.validate import validate_schedule
from synth.topologies.model import Topology

__all__ = ["CutLink", "Hop", "Route", "RouteKind", "Schedule", "SCHEDULE_FORMAT"]


def _cover(marks: list[int], start: int, length: int, chunks: int) -> None:
    """Add ``chunks`` to the cyclic positions ``start .. start + length - 1`` of a difference array
    (``marks[k] - marks[k-1]`` style: its running sum over ``0..n-1`` is each position's load)."""
    n = len(marks) - 1
    end = start + length
    marks[start] += chunks
    if end <= n:
        marks[end] -= chunks
    else:
        marks[n] -= chunks
        marks[0] += chunks
        marks[end - n] -= chunks


def _raise_bad_link(topo: Topology, loads: Mapping[tuple[NodeId, NodeId], int]) -> NoReturn:
    """Name the first (sorted) used link that ``topo`` lacks or has down, whatever order loads came in."""
    caps = topo.capacity_grid.caps
    key = min(k for k in loads if not caps.get(k))
    if caps.get(key) is None:
        raise ScheduleError(f"schedule uses link {key[0]}->{key[1]}, absent from topology {topo.name!r}")
    raise ScheduleError(f"schedule uses link {key[0]}->{key[1]}, which is down (0 Gbit/s)")


def _freeze(meta: Mapping[str, Any] | None) -> Mapping[str, Any]:
    try:
        return MappingProxyType(json.loads(json.dumps(dict(meta or {}), sort_keys=True, allow_nan=False)))
    except (TypeError, ValueError) as exc:
        raise ScheduleError(f"schedule meta must be JSON-serialisable: {exc}") from exc


@dataclass(frozen=True, eq=False)
class Schedule:
    """One schedule of one collective (see the module docstring for the timing convention).

    ``meta`` is free-form JSON (synthesizer, solve time, optimal bound, ...); ``bottleneck`` is the
    cut ``K_s`` with base slacks; ``topology_fingerprint`` names the topology it was made for.
    """

    collective: Collective
    nranks: int
    nchunks: int
    routes: tuple[Route, ...]
    bottleneck: tuple[CutLink, ...] = ()
    topology_fingerprint: str | None = None
    meta: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        object.__setattr__(self, "collective", Collective.parse(self.collective, error=ScheduleError))
        if isinstance(self.nranks, bool) or not isinstance(self.nranks, int) or self.nranks < 2:
            raise ScheduleError(f"schedule nranks must be an integer >= 2, got {self.nranks!r}")
        if isinstance(self.nchunks, bool) or not isinstance(self.nchunks, int) or self.nchunks < 1:
            raise ScheduleError(f"schedule nchunks must be an integer >= 1, got {self.nchunks!r}")
        if not isinstance(self.meta, MappingProxyType):
            object.__setattr__(self, "meta", _freeze(self.meta))
        object.__setattr__(self, "routes", tuple(self.routes))
        object.__setattr__(self, "bottleneck", tuple(self.bottleneck))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Schedule):
            return NotImplemented
        return (
            self.collective == other.collective
            and self.nranks == other.nranks
            and self.nchunks == other.nchunks
            and self.routes == other.routes
            and self.bottleneck == other.bottleneck
            and self.topology_fingerprint == other.topology_fingerprint
            and dict(self.meta) == dict(other.meta)
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Schedule({self.collective}, nranks={self.nranks}, nchunks={self.nchunks}, {len(self.routes)} routes)"

    def with_meta(self, **updates: Any) -> Schedule:
        """A copy with ``meta`` keys added or replaced."""
        return self._same_routes(replace(self, meta=_freeze({**self.meta, **updates})))

    def _same_routes(self, out: Schedule) -> Schedule:
        """``out`` (a copy with these routes) given what was found of them: windows, loads, validity."""
        for cache in ("_windows_cache", "_phase_loads_cache", "_valid_on"):
            if cache in self.__dict__:
                object.__setattr__(out, cache, self.__dict__[cache])
        return out

    # -- loads and timing ---------------------------------------------------------------------
    def link_loads(self) -> dict[tuple[NodeId, NodeId], int]:
        """Chunks crossing each physical link, ``n_a`` (links with no load are absent)."""
        loads: dict[tuple[NodeId, NodeId], int] = defaultdict(int)
        for phase in self._phase_loads():
            for key, n in phase.items():
                loads[key] += n
        return dict(sorted(loads.items()))

    def _phase_loads(self) -> list[dict[tuple[NodeId, NodeId], int]]:
        """Per-phase link loads (AllReduce: in-trees, then out-trees), computed once per schedule."""
        cached = self.__dict__.get("_phase_loads_cache")
        if cached is not None:
            return cached
        kinds = (RouteKind.IN_TREE, RouteKind.OUT_TREE) if self.collective == "allreduce" else (None,)
        windows = self._ring_windows()
        phases = []
        for kind in kinds:
            # Chunks per hop object (by id: routes share hop objects, and a dataclass hash per hop
            # costs more than the count at 2048 GPUs; equal copies are simply counted apart).
            per_hop: Counter[int] = Counter()
            hops: dict[int, Hop] = {}
            cover = [[0] * (self.nranks + 1) for _ in windows.cycles]  # per cycle: chunks starting/ending
            for route, at in zip(self.routes, windows.where):
                if kind is not None and route.kind is not kind:
                    continue
                if at is not None:  # a window of n - 1 hops from position p of cycle ci
                    ci, p = at
                    _cover(cover[ci], p, self.nranks - 1, route.chunks)
                    continue
                ids = list(map(id, route.hops))
                hops.update(zip(ids, route.hops))
                if route.chunks == 1:
                    per_hop.update(ids)  # counted in C
                else:
                    for i in ids:
                        per_hop[i] += route.chunks
            for cycle, marks in zip(windows.cycles, cover):
                total = 0
                for hop, mark in zip(cycle, marks):
                    total += mark
                    if total:
                        hops[id(hop)] = hop
                        per_hop[id(hop)] += total
            loads: dict[tuple[NodeId, NodeId], int] = defaultdict(int)
            for key_id, n in per_hop.items():
                for key in hops[key_id].links:
                    loads[key] += n
            phases.append(dict(loads))
        object.__setattr__(self, "_phase_loads_cache", phases)
        return phases

    def _ring_windows(self) -> RingWindows:
        """The routes that are windows of hop cycles (:mod:`synth.schedule._windows`), found once."""
        cached = self.__dict__.get("_windows_cache")
        if cached is None:
            cached = ring_windows(self.routes, self.nranks)
            object.__setattr__(self, "_windows_cache", cached)
        return cached

    def _max_ratio(self, topo: Topology) -> Fraction:
        """Sum over phases of ``max_a n_a / c_a`` (one phase except AllReduce: reduce, then broadcast)."""
        expect_type(topo, Topology, "topo", ScheduleError)
        total = Fraction(0)
        for loads in self._phase_loads():
            total += self._phase_ratio(topo, loads)
        if total == 0:
            raise ScheduleError("schedule moves no data")
        return total

    def _phase_ratio(self, topo: Topology, loads: dict[tuple[NodeId, NodeId], int]) -> Fraction:
        caps = topo.capacity_grid.caps  # exact capacities, looked up once (exact_capacity per link: µs each)
        worst = Fraction(0)
        for key, load in loads.items():
            gbps = caps.get(key)
            if not gbps:
                _raise_bad_link(topo, loads)
            worst = max(worst, Fraction(load) * 8 / gbps)
        return worst

    def rate_GBps(self, topo: Topology) -> Fraction:  # noqa: N802
        """Exact per-(source, chunk-stream) rate: ``nchunks / max_a(n_a / c_a)`` in GB/s."""
        return Fraction(self.nchunks) / self._max_ratio(topo)

    def algbw_GBps(self, topo: Topology) -> float:  # noqa: N802
        """Bandwidth-term algbw in GB/s (nccl-tests convention) on ``topo``."""
        return float(self.nranks * self.rate_GBps(topo))

    def busbw_GBps(self, topo: Topology) -> float:  # noqa: N802
        """busbw = algbw × (N−1)/N (AllReduce: × 2(N−1)/N)."""
        return self.algbw_GBps(topo) * self.collective.busbw_multiplier * (self.nranks - 1) / self.nranks

    def time_s(self, topo: Topology, nbytes: float) -> float:
        """Bandwidth-term completion time for an algbw numerator of ``nbytes`` bytes."""
        expect_type(nbytes, (int, float), "nbytes", ScheduleError)
        return nbytes / (self.algbw_GBps(topo) * 1e9)

    def slacks(self, topo: Topology) -> dict[tuple[NodeId, NodeId], float]:
        """Per used link, the unused fraction of capacity at the bottleneck rate ``x_min``."""
        expect_type(topo, Topology, "topo", ScheduleError)
        loads = self.link_loads()
        caps = {key: float(topo.exact_capacity(*key)) / 8 for key in loads}  # effective (capacity.py)
        x_min = min(caps[key] / n for key, n in loads.items())
        return {key: (caps[key] - n * x_min) / caps[key] for key, n in loads.items()}

    def bottleneck_for(self, topo: Topology, cut: Iterable[tuple[NodeId, NodeId]] | None = None) -> tuple[CutLink, ...]:
        """``K_s`` with base slacks: the given cut links, or the links the schedule saturates.

        A cut link the schedule does not use has base slack 1.0.
        """
        slacks = self.slacks(topo)
        if cut is None:
            keys = sorted(k for k, v in slacks.items() if v <= 1e-9)
        else:
            try:
                keys = sorted({(str(a), str(b)) for a, b in cut})
            except (TypeError, ValueError):
                raise ScheduleError(f"cut must be (src, dst) pairs of node ids, got {short_repr(cut)}") from None
        return tuple(CutLink(a, b, slacks.get((a, b), 1.0)) for a, b in keys)

    def with_bottleneck(self, topo: Topology, cut: Iterable[tuple[NodeId, NodeId]] | None = None) -> Schedule:
        """A copy carrying ``K_s`` for ``topo`` and its fingerprint."""
        return self._same_routes(replace(self, bottleneck=self.bottleneck_for(topo, cut),
                                         topology_fingerprint=topo.fingerprint))

    # -- validation ---------------------------------------------------------------------------
    def validate(self, topo: Topology) -> None:
        """Prove the collective's postcondition on ``topo``; raise :class:`ScheduleError` if not.

        Checks every physical path exists with capacity > 0, every route's shape, and coverage:
        AllGather every GPU receives every source's ``nchunks`` chunks; ReduceScatter every
        contribution reaches its root exactly once; AllReduce both; AllToAll every ordered pair's
        ``nchunks`` chunks arrive. A schedule proven on a topology of the same
        :attr:`~synth.Topology.fingerprint` is not walked again (remembered on the instance).
        """
        expect_type(topo, Topology, "topo", ScheduleError)
        valid_on = self.__dict__.get("_valid_on", frozenset())
        if topo.fingerprint in valid_on:  # proven on an equal fabric (nodes, links, overrides) already
            return
        validate_schedule(self.collective, self.nranks, self.nchunks, self.routes, topo, self._ring_windows())
        object.__setattr__(self, "_valid_on", valid_on | {topo.fingerprint})

    # -- JSON ---------------------------------------------------------------------------------
    def to_dict(self, *, legacy: bool = False) -> dict[str, Any]:
        """The JSON document: compact ``loopcoll-schedule/2`` (a shared hop table, ring routes as cycle
        windows: :mod:`synth.schedule.encode`), or the old ``/1`` form with ``legacy=True``.

        >>> s = Schedule("alltoall", 2, 1, (Route(RouteKind.PATH, 0, 1, (Hop(0, 1, ("gpu0", "gpu1")),), dest=1),))
        >>> s.to_dict()["format"], s.to_dict()["routes"][0]["hops"], s.to_dict(legacy=True)["format"]
        ('loopcoll-schedule/2', [0], 'loopcoll-schedule/1')
        """
        if legacy:
            doc = legacy_document(self.collective, self.nranks, self.nchunks, self.routes)
        else:
            doc = compact_document(self.collective, self.nranks, self.nchunks, self.routes, self._ring_windows())
        doc.update(bottleneck=[c.to_dict() for c in self.bottleneck], topology_fingerprint=self.topology_fingerprint,
                   meta=dict(self.meta))
        return doc

    def to_json(self) -> str:
        """Deterministic JSON text; :meth:`from_json` reads it back to an equal schedule."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":")) + "\n"

    @classmethod
    def from_dict(cls, doc: Any, *, source: str = "<dict>") -> Schedule:
        """Build a schedule from its JSON document, validating every field (:mod:`synth.schedule.decode`)."""
        return cls(**schedule_fields(doc, source=source))

    @classmethod
    def from_json(cls, text: str, *, source: str = "<string>") -> Schedule:
        if not isinstance(text, (str, bytes, bytearray)):
            raise ScheduleError(f"{source}: schedule JSON must be text, got {type(text).__name__}")
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ScheduleError(f"{source}: malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from exc
        except RecursionError:
            raise ScheduleError(f"{source}: JSON nested too deeply") from None
        except (ValueError, UnicodeDecodeError) as exc:  # e.g. an integer literal of more than 4300 digits
            raise ScheduleError(f"{source}: unreadable JSON: {str(exc)[:200]}") from None
        return cls.from_dict(doc, source=source)


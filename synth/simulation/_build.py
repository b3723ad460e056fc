"""Lower a schedule on a topology to the flat arrays the simulation engine runs on.

One *hop-flow* per (route, hop): a FIFO of ``route.chunks × slices_per_chunk`` equal slices that
crosses the hop's physical path. Hop-flows whose hops take the same physical node path share one
*path class*: under max-min fairness every flow of a class gets the same rate, so the engine
solves rates per class, never per flow.

Dependencies are *terms*: hop-flow ``d`` may send its slice ``k`` (0-based) once, for every term
``(d, g, off, full)`` of ``d``, ``value(arrived_g) > k`` where ``arrived_g`` counts the slices
hop-flow ``g`` has delivered and ``value(x) = nsl_d if x >= full else clip(x + off, 0, nsl_d)``.
Tree and path parents are plain terms (``off = 0``, ``full`` never reached); the offset form maps
the reduced chunks of an AllReduce's in-trees onto the chunks of its out-trees (module
:mod:`synth.simulation.simulator`, Notes).
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from synth.errors import ScheduleError
from synth.schedule import RouteKind

if TYPE_CHECKING:
    from synth.schedule import Route, Schedule
    from synth.topologies.model import Topology

__all__ = ["FlowModel", "build_model"]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

_NEVER = np.iinfo(np.int64).max // 4  # a `full` threshold no slice count reaches


@dataclass(frozen=True, slots=True)
class FlowModel:
    """Flat, size-independent description of one schedule on one topology (slice counts only)."""

    link_keys: tuple[tuple[str, str], ...]  # every topology link, in topology order
    link_cap_Bps: FloatArray
    link_slices: IntArray  # slices crossing each link over the whole run
    path_lat_s: FloatArray  # per path class: sum of its links' latencies
    path_weight: IntArray  # per path class: chunks of the route each of its hop-flows carries
    pair_path: IntArray  # (path class, link) incidence, sorted by path class
    pair_link: IntArray
    flow_path: IntArray  # per hop-flow: its path class
    flow_nsl: IntArray  # per hop-flow: slices it carries
    term_dst: IntArray  # dependency terms, sorted by dst hop-flow
    term_src: IntArray
    term_off: IntArray
    term_full: IntArray
    dst_ptr: IntArray  # CSR: terms of hop-flow d are term_*[dst_ptr[d]:dst_ptr[d + 1]]
    src_ptr: IntArray  # CSR: terms fed by hop-flow g are src_terms[src_ptr[g]:src_ptr[g + 1]]
    src_terms: IntArray

    @property
    def nflows(self) -> int:
        return int(self.flow_path.size)

    @property
    def npaths(self) -> int:
        return int(self.path_lat_s.size)


class _Lowering:
    """Accumulates path classes, hop-flows and terms while walking the routes once."""

    def __init__(self, topo: Topology, spc: int) -> None:
        self.topo = topo
        self.spc = spc
        self.link_index = {lk.key: i for i, lk in enumerate(topo.links)}
        self.path_id: dict[tuple[tuple[str, ...], int], int] = {}
        self.path_lat: list[float] = []
        self.path_weight: list[int] = []
        self.pair_path: list[int] = []
        self.pair_link: list[int] = []
        self.flow_path: list[int] = []
        self.flow_nsl: list[int] = []
        self.terms: list[tuple[int, int, int, int]] = []

    def path_class(self, path: tuple[str, ...], weight: int, where: str) -> int:
        """Class of hop-flows on ``path`` that each stand for ``weight`` concurrent chunk transfers."""
        pid = self.path_id.get((path, weight))
        if pid is not None:
            return pid
        pid = len(self.path_lat)
        lat_s = 0.0
        for key in itertools.pairwise(path):
            li = self.link_index.get(key)
            if li is None:
                raise ScheduleError(f"{where}: uses link {key[0]}->{key[1]}, absent from topology {self.topo.name!r}")
            link = self.topo.links[li]
            if link.gbps <= 0:
                raise ScheduleError(f"{where}: uses link {key[0]}->{key[1]}, which is down (0 Gbit/s)")
            lat_s += link.latency_us * 1e-6
            self.pair_path.append(pid)
            self.pair_link.append(li)
        if len(path) < 2:
            raise ScheduleError(f"{where}: hop has a physical path of {len(path)} node(s)")
        self.path_id[(path, weight)] = pid
        self.path_lat.append(lat_s)
        self.path_weight.append(weight)
        return pid

    def add_route(self, i: int, route: Route) -> list[int]:
        """Hop-flows of one route (in hop order) and the plain tree/path terms between them."""
        nsl = route.chunks * self.spc
        first = len(self.flow_path)
        path_id, path_class = self.path_id, self.path_class
        hops = route.hops
        w = route.chunks
        self.flow_path.extend(
            [path_id[(h.path, w)] if (h.path, w) in path_id else path_class(h.path, w, f"route {i} hop {h.src}->{h.dst}")
             for h in hops]
        )
        self.flow_nsl.extend([nsl] * len(hops))
        flows = list(range(first, first + len(hops)))
        terms = self.terms
        if route.kind is RouteKind.IN_TREE:
            into: dict[int, list[int]] = defaultdict(list)
            for f, hop in zip(flows, hops):
                into[hop.dst].append(f)
            for f, hop in zip(flows, hops):
                terms.extend((f, c, 0, _NEVER) for c in into.get(hop.src, ()))
        else:  # out-tree and path: one parent, the hop that brought the data to hop.src
            holder = {route.root: -1}
            for f, hop in zip(flows, hops):
                parent = holder.get(hop.src)
                if parent is None:
                    raise ScheduleError(f"route {i}: hop {hop.src}->{hop.dst} leaves rank {hop.src} before it holds the data")
                if parent >= 0:
                    terms.append((f, parent, 0, _NEVER))
                holder[hop.dst] = f
        return flows


def _allreduce_terms(
    low: _Lowering, sched: Schedule, route_flows: list[list[int]]
) -> None:
    """Out-tree hops leaving root r wait for r's reduced slices, matched in route order.

    The in-trees into r cover r's slices in list order, [c, d) each; the out-trees from r
    likewise, [a, b) each. Out-tree slice a + k may leave r once every in-tree hop into r of the
    in-tree covering it has delivered that slice: one offset term per overlapping pair.
    """
    spc = low.spc
    reduce_ranges: dict[int, list[tuple[int, int, list[int]]]] = defaultdict(list)
    spread_ranges: dict[int, list[tuple[int, int, list[int]]]] = defaultdict(list)
    for route, flows in zip(sched.routes, route_flows):
        if route.kind is RouteKind.IN_TREE:
            table, ends = reduce_ranges, [f for f, h in zip(flows, route.hops) if h.dst == route.root]
        else:
            table, ends = spread_ranges, [f for f, h in zip(flows, route.hops) if h.src == route.root]
        start = table[route.root][-1][1] if table[route.root] else 0
        table[route.root].append((start, start + route.chunks * spc, ends))
    for root, spreads in sorted(spread_ranges.items()):
        for a, b, senders in spreads:
            for c, d, into_root in reduce_ranges.get(root, []):
                if c >= b or d <= a:
                    continue
                full = min(b, d) - c
                low.terms.extend((f, h, c - a, full) for f in senders for h in into_root)


def _csr(keys: IntArray, n: int) -> tuple[IntArray, IntArray]:
    order = np.argsort(keys, kind="stable")
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(keys, minlength=n), out=ptr[1:])
    return order.astype(np.int64), ptr


def build_model(sched: Schedule, topo: Topology, slices_per_chunk: int) -> FlowModel:
    """Lower ``sched`` on ``topo``; :class:`ScheduleError` for a hop on a missing or down link."""
    low = _Lowering(topo, slices_per_chunk)
    route_flows = [low.add_route(i, route) for i, route in enumerate(sched.routes)]
    if sched.collective == "allreduce":
        _allreduce_terms(low, sched, route_flows)
    nflows = len(low.flow_path)
    if nflows == 0:
        raise ScheduleError("schedule moves no data")
    terms = np.array(low.terms, dtype=np.int64).reshape(-1, 4)
    order, dst_ptr = _csr(terms[:, 0], nflows)
    terms = terms[order]
    src_terms, src_ptr = _csr(terms[:, 1], nflows)
    pair_path = np.array(low.pair_path, dtype=np.int64)
    pair_link = np.array(low.pair_link, dtype=np.int64)
    flow_path = np.array(low.flow_path, dtype=np.int64)
    flow_nsl = np.array(low.flow_nsl, dtype=np.int64)
    path_slices = np.bincount(flow_path, weights=flow_nsl, minlength=len(low.path_lat))
    link_slices = np.bincount(pair_link, weights=path_slices[pair_path], minlength=len(topo.links))
    return FlowModel(
        link_keys=tuple(lk.key for lk in topo.links),
        link_cap_Bps=np.array([float(topo.exact_capacity(*lk.key)) * 1e9 / 8.0 for lk in topo.links], dtype=np.float64),
        link_slices=np.rint(link_slices).astype(np.int64),
        path_lat_s=np.array(low.path_lat, dtype=np.float64),
        path_weight=np.array(low.path_weight, dtype=np.int64),
        pair_path=pair_path,
        pair_link=pair_link,
        flow_path=flow_path,
        flow_nsl=flow_nsl,
        term_dst=terms[:, 0].copy(),
        term_src=terms[:, 1].copy(),
        term_off=terms[:, 2].copy(),
        term_full=terms[:, 3].copy(),
        dst_ptr=dst_ptr,
        src_ptr=src_ptr,
        src_terms=src_terms,
    )

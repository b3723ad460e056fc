"""Postcondition checks of :meth:`synth.schedule.Schedule.validate`, on a schedule's parts.

Examples
--------
>>> from synth.topologies import named_topology
>>> from synth.schedule.parts import Hop, Route, RouteKind
>>> path = Route(RouteKind.PATH, 0, 1, (Hop(0, 1, ("gpu0", "gpu1")),), dest=1)
>>> validate_schedule("alltoall", 2, 1, (path,), named_topology("ring:2"))
Traceback (most recent call last):
...
synth.errors.ScheduleError: block 1->0 carries 0 chunk(s), expected nchunks=1
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

from synth.errors import ScheduleError
from synth.schedule._windows import RingWindows, ring_windows
from synth.schedule.parts import Hop, Route

if TYPE_CHECKING:
    from synth._types import Collective
    from synth.topologies.model import Topology

__all__ = ["validate_schedule"]


class _Fabric:
    """What a hop check looks up, as plain sets (a topology lookup per node costs µs: seconds at 2048 GPUs)."""

    def __init__(self, topo: Topology) -> None:
        self.gpu = [g.id for g in sorted(topo.gpus, key=lambda g: topo.rank_of(g.id))]
        self.switches = {nd.id for nd in topo.nodes if not nd.is_gpu}
        self.live = {lk.key for lk in topo.links if lk.gbps > 0}

    def fine(self, hop: Hop) -> bool:
        """Whether ``hop`` passes every check of :func:`_check_hop` (``False``: run it for the message)."""
        path = hop.path
        try:
            ends = path[0] == self.gpu[hop.src] and path[-1] == self.gpu[hop.dst] and len(path) >= 2
        except (IndexError, TypeError):
            return False
        return ends and all(m in self.switches for m in path[1:-1]) and \
            all(key in self.live for key in zip(path[:-1], path[1:]))


def _check_hop(hop: Hop, where: str, topo: Topology) -> None:
    if len(hop.path) < 2:
        raise ScheduleError(f"{where}: hop {hop.src}->{hop.dst} has a physical path of {len(hop.path)} node(s)")
    if hop.path[0] != topo.gpu_id(hop.src) or hop.path[-1] != topo.gpu_id(hop.dst):
        raise ScheduleError(
            f"{where}: hop {hop.src}->{hop.dst} path {'->'.join(hop.path)} must run from "
            f"{topo.gpu_id(hop.src)} to {topo.gpu_id(hop.dst)}"
        )
    for mid in hop.path[1:-1]:
        if not topo.has_node(mid):
            raise ScheduleError(f"{where}: hop {hop.src}->{hop.dst} passes through unknown node {mid!r}")
        if topo.node(mid).is_gpu:
            raise ScheduleError(
                f"{where}: hop {hop.src}->{hop.dst} passes through gpu {mid!r}; relays must be separate hops"
            )
    for a, b in hop.links:
        if not topo.has_link(a, b):
            raise ScheduleError(f"{where}: hop {hop.src}->{hop.dst} uses link {a}->{b}, absent from {topo.name!r}")
        if topo.link(a, b).gbps <= 0:
            raise ScheduleError(f"{where}: hop {hop.src}->{hop.dst} uses link {a}->{b}, which is down (0 Gbit/s)")


def _check_out_tree(route: Route, where: str, nranks: int) -> None:
    have = {route.root}
    for hop in route.hops:
        if hop.src not in have:
            raise ScheduleError(f"{where}: hop {hop.src}->{hop.dst} leaves rank {hop.src} before it holds the data")
        if hop.dst in have:
            raise ScheduleError(f"{where}: rank {hop.dst} receives the data twice (hop {hop.src}->{hop.dst})")
        have.add(hop.dst)
    missing = sorted(set(range(nranks)) - have)
    if missing:
        raise ScheduleError(f"{where}: out-tree from rank {route.root} misses rank(s) {missing}")


def _check_in_tree(route: Route, where: str, nranks: int) -> None:
    sent: set[int] = set()
    for hop in route.hops:
        if hop.src == route.root:
            raise ScheduleError(f"{where}: root rank {route.root} sends its partial sum away (hop {hop.src}->{hop.dst})")
        if hop.src in sent:
            raise ScheduleError(f"{where}: rank {hop.src} contributes twice (hop {hop.src}->{hop.dst})")
        if hop.dst in sent:
            raise ScheduleError(f"{where}: rank {hop.dst} receives after it already sent (hop {hop.src}->{hop.dst})")
        sent.add(hop.src)
    missing = sorted(set(range(nranks)) - sent - {route.root})
    if missing:
        raise ScheduleError(f"{where}: in-tree into rank {route.root} misses the contribution of rank(s) {missing}")


def _check_path(route: Route, where: str) -> None:
    if route.dest is None or route.dest == route.root:
        raise ScheduleError(f"{where}: a path route needs a destination other than its source, got {route.dest!r}")
    at = route.root
    seen = {at}
    for hop in route.hops:
        if hop.src != at:
            raise ScheduleError(f"{where}: hop {hop.src}->{hop.dst} does not continue the path at rank {at}")
        if hop.dst in seen:
            raise ScheduleError(f"{where}: path revisits rank {hop.dst}")
        seen.add(hop.dst)
        at = hop.dst
    if at != route.dest:
        raise ScheduleError(f"{where}: path from rank {route.root} ends at rank {at}, not {route.dest}")


_ALLOWED = {
    "allgather": {"out_tree"},
    "reducescatter": {"in_tree"},
    "allreduce": {"in_tree", "out_tree"},
    "alltoall": {"path"},
}


def _check_ranks(route: Route, where: str, n: int) -> None:
    """Every rank of ``route`` in ``0..n-1``: min and max first (C speed), the culprit named after."""
    ranks = [h.src for h in route.hops] + [h.dst for h in route.hops] + [route.root]
    if route.dest is not None:
        ranks.append(route.dest)
    try:
        if 0 <= min(ranks) and max(ranks) < n:
            return
    except TypeError:
        pass  # not comparable: the loop below meets it
    for rank in (route.root, route.dest, *(r for h in route.hops for r in (h.src, h.dst))):
        if rank is not None and not 0 <= rank < n:
            raise ScheduleError(f"{where}: rank {rank!r} out of range 0..{n - 1}")


def validate_schedule(collective: Collective, nranks: int, nchunks: int, routes: tuple[Route, ...],
                      topo: Topology, windows: RingWindows | None = None) -> None:
    """Raise :class:`ScheduleError` naming the first route or rank that breaks the postcondition of a
    schedule of ``collective`` with these fields on ``topo``.

    A route that is a window of a hop cycle (:mod:`synth.schedule._windows`; ``windows``: that
    decomposition of ``routes``, found here if not given) is a valid tree by construction: only its
    kind and chunk count are checked, and the physical paths of its cycle's hops (once per cycle)."""
    n = nranks
    if topo.nranks != n:
        raise ScheduleError(f"schedule is for {n} ranks but topology {topo.name!r} has {topo.nranks}")
    if not routes:
        raise ScheduleError("schedule has no routes")
    delivered: dict[tuple[str, int, int | None], int] = defaultdict(int)
    # Schedules share hop objects between routes: a hop's path is checked once per object (by id: a
    # dataclass hash per hop costs more than the check at 2048 GPUs; equal copies are checked again).
    checked: set[int] = set()
    found = windows if windows is not None else ring_windows(routes, n)
    where = found.where
    cycles_checked: set[int] = set()
    fabric = _Fabric(topo)
    for i, route in enumerate(routes):
        at = f"route {i} ({route.kind.value}, root {route.root})"
        if route.kind.value not in _ALLOWED[collective]:
            raise ScheduleError(f"{at}: {route.kind.value} routes do not belong in a schedule of collective {collective!r}")
        if isinstance(route.chunks, bool) or not isinstance(route.chunks, int) or route.chunks < 1:
            raise ScheduleError(f"{at}: chunks must be an integer >= 1, got {route.chunks!r}")
        window = where[i]
        if window is not None:
            ci = window[0]
            if ci not in cycles_checked:  # the window's hops are its cycle's: their paths, once per cycle
                cycles_checked.add(ci)
                for hop in found.cycles[ci]:
                    if id(hop) not in checked:
                        if not fabric.fine(hop):
                            _check_hop(hop, at, topo)
                        checked.add(id(hop))
            delivered[(route.kind.value, route.root, route.dest)] += route.chunks
            continue
        _check_ranks(route, at, n)
        for hop in route.hops:
            if id(hop) not in checked:
                if not fabric.fine(hop):
                    _check_hop(hop, at, topo)
                checked.add(id(hop))
        if route.kind.value == "out_tree":
            _check_out_tree(route, at, n)
        elif route.kind.value == "in_tree":
            _check_in_tree(route, at, n)
        else:
            _check_path(route, at)
        delivered[(route.kind.value, route.root, route.dest)] += route.chunks
    expected: list[tuple[str, int, int | None]] = []
    for kind in sorted(_ALLOWED[collective]):
        if kind == "path":
            expected += [(kind, s, d) for s in range(n) for d in range(n) if s != d]
        else:
            expected += [(kind, r, None) for r in range(n)]
    for key in expected:
        got = delivered.get(key, 0)
        if got != nchunks:
            kind, root, dest = key
            what = f"block {root}->{dest}" if dest is not None else f"{kind.replace('_', '-')} of rank {root}"
            raise ScheduleError(f"{what} carries {got} chunk(s), expected nchunks={nchunks}")

"""Contention scenarios: background flows with on/off patterns on chosen links, per iteration.

Model
-----
An *iteration* (epoch) is one call of the collective. A background flow at load ``L`` on a link
leaves the collective the residual capacity ``(1 − L) · C`` of that link in **both** directions
(the flow is rate-limited below its fair share, as storage or another job's traffic is; both
directions keep switches Eulerian for ForestColl). Several flows on one link add up, capped at
:data:`MAX_LOAD`. Within one iteration the load is constant: the collective is simulated by
:func:`synth.simulation.simulate` on :meth:`ContentionScenario.topology_at`.

Patterns (:class:`BackgroundFlow`): active from ``start`` to ``stop`` (exclusive, ``None``: for
ever), and within that on for ``on`` iterations then off for ``off`` iterations (``off = 0``:
always on). Builders: :func:`sustained` (partial load 20–90 % from an onset), :func:`microbursts`
(short on/off spikes), :func:`erratic` (a flow that moves between candidate links — spine links by
default — from epoch to epoch, chosen by a seeded hash so the scenario is deterministic).

Examples
--------
>>> from synth.topologies import named_topology
>>> topo = named_topology("hpn:2x1x4")
>>> sc = sustained([("gpu0", "tor0.0")], 0.5, start=3)
>>> sc.loads_at(2), sc.loads_at(3)
({}, {('gpu0', 'tor0.0'): 0.5})
>>> sc.topology_at(topo, 5).link("tor0.0", "gpu0").gbps == topo.link("tor0.0", "gpu0").gbps / 2
True
>>> mb = microbursts([("gpu0", "tor0.0")], 0.8, length=2, every=10, start=5)
>>> [i for i in range(30) if mb.loads_at(i)]
[5, 6, 15, 16, 25, 26]
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from synth._types import NodeId
from synth.errors import TopologyError
from synth.topologies.model import Link, Node, NodeKind, Topology

__all__ = ["MAX_LOAD", "BackgroundFlow", "ContentionScenario", "erratic", "leaf_spine", "microbursts", "nic_links",
           "spine_links", "sustained"]

LinkKey = tuple[NodeId, NodeId]

#: The most of a link's capacity background traffic takes (the collective always keeps 5 %).
MAX_LOAD = 0.95


def _check_load(load: float) -> float:
    if isinstance(load, bool) or not isinstance(load, (int, float)) or not math.isfinite(load) or not 0 <= load <= MAX_LOAD:
        raise TopologyError(f"background load must be a number in [0, {MAX_LOAD}], got {load!r}")
    return float(load)


def _check_int(name: str, v: object, lo: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise TopologyError(f"background flow `{name}` must be an integer >= {lo}, got {v!r}")
    return v


@dataclass(frozen=True, slots=True)
class BackgroundFlow:
    """Load ``load`` on ``links`` (or, with ``moving > 0``, on ``moving`` of them chosen per epoch)."""

    links: tuple[LinkKey, ...]
    load: float
    start: int = 0
    stop: int | None = None
    on: int = 1
    off: int = 0
    moving: int = 0
    seed: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "links", tuple(tuple(k) for k in self.links))
        if not self.links:
            raise TopologyError("background flow needs at least one link")
        _check_load(self.load)
        _check_int("start", self.start, 0)
        _check_int("on", self.on, 1)
        _check_int("off", self.off, 0)
        _check_int("moving", self.moving, 0)
        if self.moving > len(self.links):
            raise TopologyError(f"background flow moves over {self.moving} of only {len(self.links)} links")
        if self.stop is not None and _check_int("stop", self.stop, 0) < self.start:
            raise TopologyError(f"background flow stops ({self.stop}) before it starts ({self.start})")

    def active(self, it: int) -> bool:
        """Whether the flow runs in iteration ``it``."""
        if it < self.start or (self.stop is not None and it >= self.stop):
            return False
        return (it - self.start) % (self.on + self.off) < self.on

    def links_at(self, it: int) -> tuple[LinkKey, ...]:
        """The links loaded in iteration ``it`` (empty when off)."""
        if not self.active(it):
            return ()
        if self.moving == 0:
            return self.links
        ranked = sorted(self.links, key=lambda k: hashlib.sha256(f"{self.seed}:{it}:{k[0]}:{k[1]}".encode()).digest())
        return tuple(sorted(ranked[: self.moving]))


@dataclass(frozen=True, slots=True)
class ContentionScenario:
    """A named set of background flows; :meth:`topology_at` is the residual topology of an iteration."""

    name: str
    flows: tuple[BackgroundFlow, ...]

    def loads_at(self, it: int) -> dict[LinkKey, float]:
        """Background load per loaded link in iteration ``it`` (sorted, capped at :data:`MAX_LOAD`)."""
        loads: dict[LinkKey, float] = {}
        for f in self.flows:
            for k in f.links_at(it):
                loads[k] = min(MAX_LOAD, loads.get(k, 0.0) + f.load)
        return dict(sorted(loads.items()))

    def topology_at(self, topo: Topology, it: int) -> Topology:
        """``topo`` with every loaded link (both directions) at ``(1 − load)`` of its capacity."""
        factor: dict[LinkKey, float] = {}
        for (a, b), load in self.loads_at(it).items():
            if not topo.has_link(a, b):
                raise TopologyError(f"scenario {self.name!r}: no link {a}->{b} on {topo.name!r}")
            for k in ((a, b), (b, a)):
                factor[k] = min(factor.get(k, 1.0), 1.0 - load)
        if not factor:
            return topo
        return topo.with_links(
            [Link(lk.src, lk.dst, lk.gbps * factor.get(lk.key, 1.0), lk.latency_us) for lk in topo.links], name=topo.name)


def sustained(links: Iterable[LinkKey], load: float, *, start: int = 0, stop: int | None = None,
              name: str | None = None) -> ContentionScenario:
    """Constant partial load from ``start`` (to ``stop``) on ``links``."""
    flow = BackgroundFlow(tuple(links), load, start, stop)
    return ContentionScenario(name or f"sustained-{round(100 * load)}", (flow,))


def microbursts(links: Iterable[LinkKey], load: float, *, length: int = 2, every: int = 20, start: int = 0,
                stop: int | None = None, name: str | None = None) -> ContentionScenario:
    """Spikes of ``length`` iterations every ``every`` iterations: transient-only traffic."""
    if _check_int("every", every, 1) <= _check_int("length", length, 1):
        raise TopologyError(f"microbursts: `every` ({every}) must exceed `length` ({length})")
    flow = BackgroundFlow(tuple(links), load, start, stop, on=length, off=every - length)
    return ContentionScenario(name or f"microbursts-{round(100 * load)}", (flow,))


def erratic(links: Sequence[LinkKey], load: float, *, per_epoch: int = 1, start: int = 0, seed: int = 0,
            name: str | None = None) -> ContentionScenario:
    """A flow on ``per_epoch`` of ``links`` that moves to other links every epoch (seeded, deterministic)."""
    flow = BackgroundFlow(tuple(links), load, start, moving=per_epoch, seed=seed)
    return ContentionScenario(name or f"erratic-{round(100 * load)}", (flow,))


def spine_links(topo: Topology) -> tuple[LinkKey, ...]:
    """Switch-to-switch links, one direction each (``src < dst``): the spine/aggregation layer.

    >>> from synth.topologies import named_topology
    >>> spine_links(named_topology("hpn:2x1x2"))[:2]
    (('agg0', 'tor0.0'), ('agg0', 'tor1.0'))
    """
    out = {tuple(sorted(lk.key)) for lk in topo.links
           if not topo.node(lk.src).is_gpu and not topo.node(lk.dst).is_gpu}
    return tuple(sorted(out))  # type: ignore[arg-type]


def nic_links(topo: Topology, rank: int) -> tuple[LinkKey, ...]:
    """The links from rank's GPU to switches that are not intra-host (names not starting ``nvs``).

    >>> from synth.topologies import named_topology
    >>> nic_links(named_topology("hpn:2x1x2"), 0)
    (('gpu0', 'tor0.0'),)
    """
    gpu = topo.gpu_id(rank)
    return tuple(sorted(lk.key for lk in topo.out_links(gpu) if not str(lk.dst).startswith("nvs")))


def leaf_spine(hosts: int = 8, leaves: int = 2, *, nic_gbps: float = 100.0, uplink_gbps: float = 200.0,
               latency_us: float = 0.5) -> Topology:
    """A two-tier shared cluster (REACT's setting): one GPU per host behind its NIC, ``hosts/leaves``
    hosts per leaf (ToR) switch, every leaf linked to one spine; rank = host.

    Every GPU reaches every other through switches, so any rank permutation stays routable.

    >>> t = leaf_spine(8, 2)
    >>> t.nranks, nic_links(t, 5), len(spine_links(t))
    (8, (('gpu5', 'leaf1'),), 2)
    """
    if isinstance(hosts, bool) or not isinstance(hosts, int) or isinstance(leaves, bool) or not isinstance(leaves, int) \
            or leaves < 1 or hosts < 2 or hosts % leaves:
        raise TopologyError(f"leaf_spine: hosts ({hosts!r}) must be an integer >= 2 divisible by leaves ({leaves!r})")
    per = hosts // leaves
    nodes = [Node(f"gpu{r}", NodeKind.GPU, r, r) for r in range(hosts)]
    nodes += [Node(f"leaf{i}", NodeKind.SWITCH, role="tor") for i in range(leaves)] + [Node("spine", NodeKind.SWITCH, role="spine")]
    links: list[Link] = []
    for r in range(hosts):
        links += [Link(f"gpu{r}", f"leaf{r // per}", float(nic_gbps), latency_us),
                  Link(f"leaf{r // per}", f"gpu{r}", float(nic_gbps), latency_us)]
    for i in range(leaves):
        links += [Link(f"leaf{i}", "spine", float(uplink_gbps), latency_us), Link("spine", f"leaf{i}", float(uplink_gbps), latency_us)]
    return Topology.create(f"leaf-spine-{hosts}x{leaves}", nodes, links)

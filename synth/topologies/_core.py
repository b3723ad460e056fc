"""The immutable topology object: GPU and switch nodes joined by directed, capacitated links.

:class:`TopologyCore` holds the parts (:mod:`synth.topologies.parts`), validates them
(:mod:`synth.topologies._validate`), looks nodes and links up and derives changed copies; the
views built from other modules (communicators, failure scenarios) are added by its subclass
:class:`synth.topologies.model.Topology`, the class every caller uses. Modules between the two
(structure, communicators, failures, NIC layouts) take a :class:`TopologyCore` and build their
results with ``type(topo).create``, so nothing here imports them.

Examples
--------
>>> from synth.topologies import named_topology
>>> topo = named_topology("ring:4")
>>> topo.nranks, len(topo.links), topo.link("gpu0", "gpu1").GBps
(4, 8, 50.0)
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from functools import cached_property
from types import MappingProxyType
from typing import Any, TypeVar

from synth._types import NodeId, Rank
from synth.errors import TopologyError, expect_type, short_repr
from synth.topologies._validate import validate_parts, validate_routes
from synth.topologies.capacity import CapacityGrid, capacity_grid
from synth.topologies.parts import Link, Node, topology_document

__all__ = ["TopologyCore"]

#: A topology class (:class:`TopologyCore` or its subclass): what ``create`` and the copies return.
T = TypeVar("T", bound="TopologyCore")


def _tuple_of(items: Any, kind: type, what: str) -> tuple[Any, ...]:
    """``tuple(items)``, every element a ``kind``; :class:`TopologyError` naming ``what`` otherwise."""
    if isinstance(items, (str, bytes)) or not isinstance(items, Iterable):
        raise TopologyError(f"{what} must be an iterable of {kind.__name__}, got {type(items).__name__}")
    out = tuple(items)
    for item in out:
        expect_type(item, kind, f"each of {what}", TopologyError)
    return out


def _node_key(node_id: Any, what: str = "node_id") -> str:
    expect_type(node_id, str, what, TopologyError)
    return str(node_id)


def _freeze_meta(meta: Mapping[str, Any] | None) -> Mapping[str, Any]:
    # A JSON round trip both deep-copies and rejects what JSON cannot hold.
    try:
        copied = json.loads(json.dumps(dict(meta or {}), sort_keys=True, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise TopologyError(f"topology meta must be JSON-serialisable: {exc}") from exc
    return MappingProxyType(copied)


@dataclass(frozen=True, eq=False)
class TopologyCore:
    """A validated, immutable topology.

    Build one with :func:`synth.topologies.named_topology`, :func:`synth.topologies.load_topology`
    or :meth:`Topology.create`, which validates. Changes return new objects (:meth:`scaled`,
    :meth:`with_link`, :meth:`with_failure`).

    Examples
    --------
    >>> from synth.topologies import named_topology
    >>> t = named_topology("nvswitch:4")
    >>> [n.id for n in t.gpus]
    ['gpu0', 'gpu1', 'gpu2', 'gpu3']
    >>> t.scaled("gpu0", "nvs0.0", 0.5).link("nvs0.0", "gpu0").gbps
    1440.0
    """

    name: str
    nodes: tuple[Node, ...]
    links: tuple[Link, ...]
    meta: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    #: Per-pair path overrides of the executor's routing (docs/topology.md, "Routing"): each a
    #: node path GPU -> switches -> GPU; at most one per ordered GPU pair.
    routes: tuple[tuple[NodeId, ...], ...] = ()

    # -- construction -------------------------------------------------------------------------
    @classmethod
    def create(
        cls: type[T],
        name: str,
        nodes: Iterable[Node],
        links: Iterable[Link],
        meta: Mapping[str, Any] | None = None,
        routes: Iterable[Iterable[NodeId]] = (),
    ) -> T:
        """Validate and build a topology (see docs/topology.md for the rules)."""
        nodes_t = _tuple_of(nodes, Node, "nodes")
        links_t = _tuple_of(links, Link, "links")
        validate_parts(name, nodes_t, links_t)
        routes_t = tuple(tuple(r) for r in routes)
        validate_routes(name, nodes_t, links_t, routes_t)
        return cls(name=name, nodes=nodes_t, links=links_t, meta=_freeze_meta(meta), routes=routes_t)

    # -- lookups ------------------------------------------------------------------------------
    @cached_property
    def _node_index(self) -> dict[NodeId, Node]:
        return {n.id: n for n in self.nodes}

    @cached_property
    def _link_index(self) -> dict[tuple[NodeId, NodeId], Link]:
        return {lk.key: lk for lk in self.links}

    @cached_property
    def gpus(self) -> tuple[Node, ...]:
        """GPU nodes ordered by rank."""
        return tuple(sorted((n for n in self.nodes if n.is_gpu), key=lambda n: n.rank or 0))

    @cached_property
    def switches(self) -> tuple[Node, ...]:
        """Switch nodes in file order."""
        return tuple(n for n in self.nodes if not n.is_gpu)

    @property
    def nranks(self) -> int:
        return len(self.gpus)

    def node(self, node_id: NodeId) -> Node:
        """The node with this id; :class:`TopologyError` if there is none."""
        _node_key(node_id)
        try:
            return self._node_index[node_id]
        except KeyError:
            raise TopologyError(f"topology {short_repr(self.name)} has no node {short_repr(node_id)}") from None

    def has_node(self, node_id: NodeId) -> bool:
        return isinstance(node_id, str) and node_id in self._node_index

    def gpu_id(self, rank: Rank) -> NodeId:
        """Node id of the GPU of this rank."""
        expect_type(rank, int, "rank", TopologyError)
        if not 0 <= rank < self.nranks:
            raise TopologyError(f"topology {short_repr(self.name)} has no rank {short_repr(rank)} (ranks 0..{self.nranks - 1})")
        return self.gpus[rank].id

    def rank_of(self, node_id: NodeId) -> Rank:
        """Rank of a GPU node; :class:`TopologyError` for a switch."""
        node = self.node(node_id)
        if node.rank is None:
            raise TopologyError(f"node {short_repr(node_id)} is a switch, not a GPU")
        return node.rank

    def link(self, src: NodeId, dst: NodeId) -> Link:
        """The link ``src->dst``; :class:`TopologyError` if absent."""
        _node_key(src, "src")
        _node_key(dst, "dst")
        try:
            return self._link_index[(src, dst)]
        except KeyError:
            raise TopologyError(f"topology {short_repr(self.name)} has no link {src}->{dst}") from None

    def has_link(self, src: NodeId, dst: NodeId) -> bool:
        return isinstance(src, str) and isinstance(dst, str) and (src, dst) in self._link_index

    @cached_property
    def capacity_grid(self) -> CapacityGrid:
        """The exact capacities every exact algorithm uses (:mod:`synth.topologies.capacity`)."""
        return capacity_grid(self)

    def exact_capacity(self, src: NodeId, dst: NodeId) -> Fraction:
        """Capacity of ``src->dst`` in Gbit/s as an exact rational on the topology's decimal grid."""
        self.link(src, dst)
        return self.capacity_grid.caps[(src, dst)]

    @cached_property
    def _out(self) -> dict[NodeId, tuple[Link, ...]]:
        out: dict[NodeId, list[Link]] = {n.id: [] for n in self.nodes}
        for lk in self.links:
            out[lk.src].append(lk)
        return {k: tuple(v) for k, v in out.items()}

    @cached_property
    def _in(self) -> dict[NodeId, tuple[Link, ...]]:
        inn: dict[NodeId, list[Link]] = {n.id: [] for n in self.nodes}
        for lk in self.links:
            inn[lk.dst].append(lk)
        return {k: tuple(v) for k, v in inn.items()}

    def out_links(self, node_id: NodeId) -> tuple[Link, ...]:
        return self._out[self.node(node_id).id]

    def in_links(self, node_id: NodeId) -> tuple[Link, ...]:
        return self._in[self.node(node_id).id]

    @cached_property
    def live_links(self) -> tuple[Link, ...]:
        """Links with capacity > 0, in file order."""
        return tuple(lk for lk in self.links if lk.gbps > 0)

    @property
    def is_symmetric(self) -> bool:
        """True when every link has a reverse link of equal capacity."""
        idx = self._link_index
        return all((lk.dst, lk.src) in idx and idx[(lk.dst, lk.src)].gbps == lk.gbps for lk in self.links)

    # -- identity -----------------------------------------------------------------------------
    @cached_property
    def fingerprint(self) -> str:
        """Stable sha256 (hex, 16 chars) of nodes, links and route overrides; ignores name, meta and
        switch roles (which name what a switch is, not how bytes flow)."""
        return self._content_sha256(exact=False)[:16]

    @cached_property
    def _digest(self) -> str:
        """The whole sha256 (hex) of what :attr:`fingerprint` covers, capacities and latencies as floats (so
        ``400`` and ``400.0`` agree, as the fields compare): the identity :meth:`__eq__` compares."""
        return self._content_sha256(exact=True)

    def _content_sha256(self, *, exact: bool) -> str:
        doc = topology_document(self.name, self.nodes, self.links, self.meta, self.routes)
        doc.pop("name")
        doc.pop("meta")
        for node in doc["nodes"]:
            node.pop("role", None)
        if exact:
            for lk in doc["links"]:
                lk["gbps"], lk["latency_us"] = float(lk["gbps"]), float(lk["latency_us"])
        text = json.dumps(doc, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    @cached_property
    def _roles(self) -> tuple[str | None, ...]:
        return tuple(n.role for n in self.nodes)

    def __eq__(self, other: object) -> bool:
        """Equal name, meta, switch roles and content (nodes, links, route overrides: compared by their whole
        sha256, cached per object, so an equal but distinct topology costs no field-by-field walk: cache keys
        holding topologies, as :mod:`synth.routing`'s, are compared per lookup)."""
        if self is other:
            return True
        if not isinstance(other, TopologyCore):
            return NotImplemented
        return (
            self.name == other.name
            and self._digest == other._digest
            and self._roles == other._roles
            and dict(self.meta) == dict(other.meta)
        )

    def __hash__(self) -> int:
        return hash((self.name, self.fingerprint))

    def __repr__(self) -> str:
        return f"Topology({short_repr(self.name)}, {self.nranks} GPUs, {len(self.switches)} switches, {len(self.links)} links)"

    # -- derived topologies -------------------------------------------------------------------
    def with_links(self: T, links: Iterable[Link], *, name: str | None = None) -> T:
        """A new topology with the same nodes and these links (validated)."""
        if name is not None:
            expect_type(name, str, "name", TopologyError)
        return type(self).create(name or self.name, self.nodes, links, self.meta, self.routes)

    def with_link(
        self: T,
        src: NodeId,
        dst: NodeId,
        *,
        gbps: float | None = None,
        latency_us: float | None = None,
    ) -> T:
        """A copy in which link ``src->dst`` has a new capacity and/or latency."""
        self.link(src, dst)
        for value, what in ((gbps, "gbps"), (latency_us, "latency_us")):
            if value is not None:
                expect_type(value, (int, float), what, TopologyError)
        new = tuple(
            Link(
                lk.src,
                lk.dst,
                lk.gbps if gbps is None else float(gbps),
                lk.latency_us if latency_us is None else float(latency_us),
            )
            if lk.key == (src, dst)
            else lk
            for lk in self.links
        )
        return self.with_links(new)

    def scaled(self: T, src: NodeId, dst: NodeId, factor: float) -> T:
        """Multiply the capacity of ``src->dst`` and ``dst->src`` (where present) by ``factor``."""
        expect_type(factor, (int, float), "factor", TopologyError)
        if not math.isfinite(factor) or factor < 0:
            raise TopologyError(f"scale factor for {src}->{dst} must be finite and >= 0, got {short_repr(factor)}")
        self.link(src, dst)
        keys = {(src, dst), (dst, src)}
        new = tuple(
            Link(lk.src, lk.dst, lk.gbps * factor, lk.latency_us) if lk.key in keys else lk for lk in self.links
        )
        return self.with_links(new, name=self.name)

    def reversed(self: T) -> T:
        """Every link turned around (used for ReduceScatter bounds on asymmetric topologies)."""
        new = tuple(Link(lk.dst, lk.src, lk.gbps, lk.latency_us) for lk in self.links)
        routes = tuple(tuple(reversed(r)) for r in self.routes)
        return type(self).create(self.name + "-reversed", self.nodes, new, self.meta, routes)

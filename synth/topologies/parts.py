"""The plain parts a topology is made of: nodes, links, switch roles, exact capacities, and the JSON
document of a set of parts.

Everything below :class:`~synth.topologies.model.Topology` (validation, capacities, the JSON
encoding) takes these parts, not the topology object, so nothing here imports a topology module.

Examples
--------
>>> gpu = Node("gpu0", NodeKind.GPU, rank=0)
>>> Link("gpu0", "sw", 400.0, 1.0).GBps, gpu.is_gpu
(50.0, True)
>>> topology_document("t", (gpu,), (), {}, ())["nodes"]
[{'id': 'gpu0', 'kind': 'gpu', 'rank': 0}]
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from fractions import Fraction
from typing import Any

from synth._types import NodeId, Rank

__all__ = ["ROLES", "Link", "Node", "NodeKind", "exact_gbps", "topology_document"]


#: The switch roles a topology may name (docs/topology.md): an intra-host GPU switch, a host's
#: NIC-side switch, a first-tier network (rail/leaf) switch, a higher-tier switch with no GPU.
ROLES: tuple[str, ...] = ("nvswitch", "nic", "tor", "spine")


class NodeKind(str, Enum):
    """What a node is; the value is the JSON token."""

    GPU = "gpu"
    SWITCH = "switch"


@dataclass(frozen=True, slots=True)
class Node:
    """A GPU (holds data, relays, reduces) or a switch (forwards bytes only).

    ``role`` (switches only, one of :data:`ROLES`, optional) says what a switch is where the graph
    alone cannot tell; ``None`` means "infer it" (:func:`synth.topologies.structure.switch_roles`).
    """

    id: NodeId
    kind: NodeKind
    rank: Rank | None = None
    host: int | None = None
    role: str | None = None

    @property
    def is_gpu(self) -> bool:
        return self.kind is NodeKind.GPU


@dataclass(frozen=True, slots=True)
class Link:
    """A directed link; ``gbps`` is 10^9 bit/s (0.0 = down), ``latency_us`` microseconds."""

    src: NodeId
    dst: NodeId
    gbps: float
    latency_us: float

    @property
    def GBps(self) -> float:  # noqa: N802 - unit in the name, by convention
        """Capacity in 10^9 byte/s."""
        return self.gbps / 8.0

    @property
    def key(self) -> tuple[NodeId, NodeId]:
        return (self.src, self.dst)


def exact_gbps(gbps: float) -> Fraction:
    """The capacity as the exact rational its shortest decimal form denotes.

    Exact algorithms work on :meth:`Topology.exact_capacity`: this value, rounded to the topology's
    decimal grid where the exact integers would otherwise overflow (:mod:`synth.topologies.capacity`).

    >>> exact_gbps(2880.0), exact_gbps(0.1)
    (Fraction(2880, 1), Fraction(1, 10))
    """
    return Fraction(repr(float(gbps)))


def topology_document(name: str, nodes: tuple[Node, ...], links: tuple[Link, ...], meta: Mapping[str, Any],
                      routes: tuple[tuple[NodeId, ...], ...]) -> dict[str, Any]:
    """The JSON document of a topology's parts, as plain dicts and lists (docs/topology.md)."""
    node_docs: list[dict[str, Any]] = []
    for n in nodes:
        doc: dict[str, Any] = {"id": n.id, "kind": n.kind.value}
        if n.rank is not None:
            doc["rank"] = n.rank
        if n.host is not None:
            doc["host"] = n.host
        if n.role is not None:
            doc["role"] = n.role
        node_docs.append(doc)
    link_docs = [{"src": lk.src, "dst": lk.dst, "gbps": lk.gbps, "latency_us": lk.latency_us} for lk in links]
    out: dict[str, Any] = {
        "name": name, "nodes": node_docs, "links": link_docs, "meta": json.loads(json.dumps(dict(meta)))
    }
    if routes:  # written only when present: files without overrides stay as they were
        out["routes"] = [list(r) for r in routes]
    return out

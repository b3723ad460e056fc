"""Topology JSON I/O: exactly the format of docs/topology.md, with an exact round trip.

Examples
--------
>>> from synth.topologies import named_topology
>>> t = named_topology("ring:3")
>>> topology_from_json(topology_to_json(t)) == t
True
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any

from synth._atomic import write_text_atomic
from synth.errors import TopologyError, TopologyWarning, short_repr
from synth.topologies.model import Topology
from synth.topologies.parts import Link, Node, NodeKind, topology_document

__all__ = [
    "read_topology",
    "topology_from_dict",
    "topology_from_json",
    "topology_to_dict",
    "topology_to_json",
    "write_topology",
]

#: How many one-way links a :class:`~synth.errors.TopologyWarning` names (the count covers the rest).
NAMED_ONE_WAY_LINKS = 3

_NODE_KEYS = {"id", "kind", "rank", "host", "role"}
_LINK_KEYS = {"src", "dst", "gbps", "latency_us"}
_TOP_KEYS = {"name", "nodes", "links", "meta", "routes"}


def topology_to_dict(topo: Topology) -> dict[str, Any]:
    """The JSON document of a topology, as plain dicts and lists."""
    return topology_document(topo.name, topo.nodes, topo.links, topo.meta, topo.routes)


def topology_to_json(topo: Topology) -> str:
    """Deterministic JSON text (keys sorted, two-space indent, trailing newline)."""
    return json.dumps(topology_to_dict(topo), indent=2, sort_keys=True) + "\n"


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TopologyError(f"{what} must be a number, got {short_repr(value)}")
    try:
        return float(value)
    except OverflowError:  # an integer beyond the float range (~1.8e308)
        raise TopologyError(f"{what} must be a finite number, got {short_repr(value)}") from None


def _node_from(doc: Any, i: int) -> Node:
    if not isinstance(doc, dict):
        raise TopologyError(f"nodes[{i}] must be an object, got {short_repr(doc)}")
    unknown = sorted(set(doc) - _NODE_KEYS)
    ident = doc.get("id", f"nodes[{i}]")
    if unknown:
        raise TopologyError(f"node {short_repr(ident)}: unknown key(s) {unknown} (allowed: {sorted(_NODE_KEYS)})")
    if "id" not in doc:
        raise TopologyError(f"nodes[{i}]: missing 'id'")
    if "kind" not in doc:
        raise TopologyError(f"node {short_repr(ident)}: missing 'kind'")
    try:
        kind = NodeKind(doc["kind"])
    except ValueError:
        raise TopologyError(f"node {short_repr(ident)}: kind must be 'gpu' or 'switch', got {short_repr(doc['kind'])}") from None
    if kind is NodeKind.GPU and "rank" not in doc:
        raise TopologyError(f"node {short_repr(ident)}: a gpu needs a 'rank'")
    return Node(id=doc["id"], kind=kind, rank=doc.get("rank"), host=doc.get("host"), role=doc.get("role"))


def _link_from(doc: Any, i: int) -> Link:
    if not isinstance(doc, dict):
        raise TopologyError(f"links[{i}] must be an object, got {short_repr(doc)}")
    name = f"{doc.get('src', '?')}->{doc.get('dst', '?')}"
    unknown = sorted(set(doc) - _LINK_KEYS)
    if unknown:
        raise TopologyError(f"link {name}: unknown key(s) {unknown} (allowed: {sorted(_LINK_KEYS)})")
    missing = sorted(_LINK_KEYS - set(doc))
    if missing:
        raise TopologyError(f"link {name}: missing key(s) {missing}")
    for end in ("src", "dst"):
        if not isinstance(doc[end], str):
            raise TopologyError(f"links[{i}]: {end} must be a node id string, got {short_repr(doc[end])}")
    return Link(
        src=doc["src"],
        dst=doc["dst"],
        gbps=_number(doc["gbps"], f"link {name}: gbps"),
        latency_us=_number(doc["latency_us"], f"link {name}: latency_us"),
    )


def topology_from_dict(doc: Any, *, source: str = "<dict>") -> Topology:
    """Validate a parsed JSON document and build the topology it describes."""
    if not isinstance(doc, dict):
        raise TopologyError(f"{source}: a topology must be a JSON object, got {type(doc).__name__}")
    unknown = sorted(set(doc) - _TOP_KEYS)
    if unknown:
        raise TopologyError(f"{source}: unknown top-level key(s) {unknown} (allowed: {sorted(_TOP_KEYS)})")
    for key in ("name", "nodes", "links"):
        if key not in doc:
            raise TopologyError(f"{source}: missing top-level key {short_repr(key)}")
    if not isinstance(doc["nodes"], list) or not isinstance(doc["links"], list):
        raise TopologyError(f"{source}: 'nodes' and 'links' must be lists")
    meta = doc.get("meta", {})
    if not isinstance(meta, dict):
        raise TopologyError(f"{source}: 'meta' must be an object, got {short_repr(meta)}")
    nodes = [_node_from(n, i) for i, n in enumerate(doc["nodes"])]
    links = [_link_from(lk, i) for i, lk in enumerate(doc["links"])]
    routes = doc.get("routes", [])
    if not isinstance(routes, list) or not all(
        isinstance(r, list) and all(isinstance(v, str) for v in r) for r in routes
    ):
        raise TopologyError(f"{source}: 'routes' must be a list of node-id lists (paths), got {routes!r}")
    topo = Topology.create(doc["name"], nodes, links, meta, routes)
    _warn_one_way(topo, source)
    return topo


def one_way_links(topo: Topology) -> list[tuple[str, str]]:
    """The links ``u->v`` of ``topo`` without a link ``v->u`` (of any capacity), in file order.

    >>> from synth.topologies import named_topology
    >>> one_way_links(named_topology("ring:4"))
    []
    """
    pairs = {(lk.src, lk.dst) for lk in topo.links}
    return [(lk.src, lk.dst) for lk in topo.links if (lk.dst, lk.src) not in pairs]


def _warn_one_way(topo: Topology, source: str) -> None:
    """Links are directed, and a cable written once is usually a mistake: say so, naming the first few."""
    one_way = one_way_links(topo)
    if not one_way:
        return
    named = ", ".join(f"{u}->{v}" for u, v in one_way[:NAMED_ONE_WAY_LINKS])
    more = f" and {len(one_way) - NAMED_ONE_WAY_LINKS} more" if len(one_way) > NAMED_ONE_WAY_LINKS else ""
    warnings.warn(TopologyWarning(
        f"{source}: {len(one_way)} link(s) without a reverse link: {named}{more}; links are directed, so "
        "nothing flows back over them (add the reverse links if the cables carry traffic both ways)"),
        stacklevel=3)


def topology_from_json(text: str, *, source: str = "<string>") -> Topology:
    """Parse JSON text into a topology; malformed JSON names the line and column."""
    if not isinstance(text, (str, bytes, bytearray)):
        raise TopologyError(f"{source}: topology JSON must be text, got {type(text).__name__}")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TopologyError(f"{source}: malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from exc
    except RecursionError:
        raise TopologyError(f"{source}: JSON nested too deeply") from None
    except (ValueError, UnicodeDecodeError) as exc:  # e.g. an integer literal of more than 4300 digits
        raise TopologyError(f"{source}: unreadable JSON: {short_repr(str(exc), 200)}") from None
    return topology_from_dict(doc, source=source)


def read_topology(path: str | os.PathLike[str]) -> Topology:
    """Read a topology JSON file."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TopologyError(f"{p}: cannot read topology file: {exc}") from exc
    return topology_from_json(text, source=str(p))


def write_topology(topo: Topology, path: str | os.PathLike[str]) -> None:
    """Write a topology as JSON, atomically."""
    write_text_atomic(path, topology_to_json(topo))

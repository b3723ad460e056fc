"""Validation rules of docs/topology.md, applied once when a topology is built."""

from __future__ import annotations

import math

from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components

from synth.errors import TopologyError, short_repr
from synth.topologies.parts import ROLES, Link, Node, NodeKind

__all__ = ["validate_parts", "validate_routes"]


def _validate_nodes(name: str, nodes: tuple[Node, ...]) -> None:
    seen: set[str] = set()
    ranks: dict[int, str] = {}
    for node in nodes:
        if not isinstance(node.id, str) or not node.id:
            raise TopologyError(f"topology {short_repr(name)}: node id must be a non-empty string, got {short_repr(node.id)}")
        if node.id in seen:
            raise TopologyError(f"topology {short_repr(name)}: duplicate node id {short_repr(node.id)}")
        seen.add(node.id)
        if not isinstance(node.kind, NodeKind):
            raise TopologyError(f"node {short_repr(node.id)}: kind must be 'gpu' or 'switch', got {short_repr(node.kind)}")
        if node.role is not None and (node.kind is not NodeKind.SWITCH or node.role not in ROLES):
            what = f"unknown role {short_repr(node.role)}" if node.kind is NodeKind.SWITCH else "a gpu has no role"
            raise TopologyError(f"node {short_repr(node.id)}: {what} (switch roles: {', '.join(ROLES)})")
        if node.kind is NodeKind.SWITCH:
            if node.rank is not None:
                raise TopologyError(f"node {short_repr(node.id)}: a switch has no rank, got rank {short_repr(node.rank)}")
            continue
        if isinstance(node.rank, bool) or not isinstance(node.rank, int):
            raise TopologyError(f"node {short_repr(node.id)}: a gpu needs an integer rank, got {short_repr(node.rank)}")
        if node.rank in ranks:
            raise TopologyError(f"node {short_repr(node.id)}: rank {node.rank} already used by node {short_repr(ranks[node.rank])}")
        ranks[node.rank] = node.id
        if node.host is not None and (isinstance(node.host, bool) or not isinstance(node.host, int)):
            raise TopologyError(f"node {short_repr(node.id)}: host must be an integer, got {short_repr(node.host)}")
    if not ranks:
        raise TopologyError(f"topology {short_repr(name)}: has no gpu nodes")
    expected = set(range(len(ranks)))
    if set(ranks) != expected:
        missing = sorted(expected - set(ranks))
        extra = sorted(set(ranks) - expected)
        # Name both sides: the ranks nobody holds and the nodes holding ranks out of range.
        detail = ", ".join(
            ([f"missing {missing}"] if missing else [])
            + ([f"unexpected {[(r, ranks[r]) for r in extra]}"] if extra else [])
        )
        raise TopologyError(f"topology {short_repr(name)}: ranks must be exactly 0..{len(ranks) - 1}, {detail}")


def _validate_links(name: str, ids: set[str], links: tuple[Link, ...]) -> None:
    seen: set[tuple[str, str]] = set()
    for lk in links:
        for end in (lk.src, lk.dst):
            if end not in ids:
                raise TopologyError(f"link {lk.src}->{lk.dst}: unknown node id {short_repr(end)}")
        if lk.src == lk.dst:
            raise TopologyError(f"link {lk.src}->{lk.dst}: a link cannot join a node to itself")
        if lk.key in seen:
            raise TopologyError(f"link {lk.src}->{lk.dst}: duplicate link")
        seen.add(lk.key)
        if isinstance(lk.gbps, bool) or not isinstance(lk.gbps, (int, float)) or not math.isfinite(lk.gbps) or lk.gbps < 0:
            raise TopologyError(f"link {lk.src}->{lk.dst}: gbps must be finite and >= 0, got {short_repr(lk.gbps)}")
        lat = lk.latency_us
        if isinstance(lat, bool) or not isinstance(lat, (int, float)) or not math.isfinite(lat) or lat < 0:
            raise TopologyError(f"link {lk.src}->{lk.dst}: latency_us must be finite and >= 0, got {short_repr(lat)}")


def _validate_reachability(name: str, nodes: tuple[Node, ...], links: tuple[Link, ...]) -> None:
    index = {n.id: i for i, n in enumerate(nodes)}
    live = [lk for lk in links if lk.gbps > 0]
    rows = [index[lk.src] for lk in live]
    cols = [index[lk.dst] for lk in live]
    graph = csr_matrix(([1] * len(live), (rows, cols)), shape=(len(nodes), len(nodes)))
    _, labels = connected_components(graph, directed=True, connection="strong")
    gpus = sorted((n for n in nodes if n.kind is NodeKind.GPU), key=lambda n: n.rank or 0)
    home = labels[index[gpus[0].id]]
    for gpu in gpus[1:]:
        if labels[index[gpu.id]] != home:
            raise TopologyError(
                f"topology {short_repr(name)}: gpu {short_repr(gpu.id)} (rank {gpu.rank}) and gpu {short_repr(gpus[0].id)} (rank 0) "
                "cannot reach each other over links with capacity > 0"
            )


def validate_parts(name: str, nodes: tuple[Node, ...], links: tuple[Link, ...]) -> None:
    """Raise :class:`TopologyError` naming the first rule the parts break."""
    if not isinstance(name, str) or not name:
        raise TopologyError(f"topology name must be a non-empty string, got {short_repr(name)}")
    _validate_nodes(name, nodes)
    _validate_links(name, {n.id for n in nodes}, links)
    _validate_reachability(name, nodes, links)


def validate_routes(
    name: str, nodes: tuple[Node, ...], links: tuple[Link, ...], routes: tuple[tuple[str, ...], ...]
) -> None:
    """Raise :class:`TopologyError` naming the first route override that is not a GPU → switches → GPU
    path over existing links, or a second override of one ordered GPU pair (docs/topology.md, Routing).

    A route may cross a link that is down (0 Gbit/s): the pair then has no route until it is back.
    """
    kinds = {n.id: n.kind for n in nodes}
    keys = {lk.key for lk in links}
    seen: set[tuple[str, str]] = set()
    for path in routes:
        shown = "->".join(str(v) for v in path)
        if len(path) < 2 or not all(isinstance(v, str) for v in path):
            raise TopologyError(f"topology {name!r}: route {shown or '[]'} must list at least two node ids")
        for v in path:
            if v not in kinds:
                raise TopologyError(f"topology {name!r}: route {shown}: unknown node id {v!r}")
        if kinds[path[0]] is not NodeKind.GPU or kinds[path[-1]] is not NodeKind.GPU:
            raise TopologyError(f"topology {name!r}: route {shown} must start and end at a gpu")
        inner = [v for v in path[1:-1] if kinds[v] is not NodeKind.SWITCH]
        if inner:
            raise TopologyError(f"topology {name!r}: route {shown} passes gpu {inner[0]!r}; only switches may lie "
                                "between its ends (a GPU relay is a hop of the schedule, not a route)")
        if len(set(path)) != len(path):
            raise TopologyError(f"topology {name!r}: route {shown} visits a node twice")
        for a, b in zip(path[:-1], path[1:]):
            if (a, b) not in keys:
                raise TopologyError(f"topology {name!r}: route {shown} uses link {a}->{b}, absent from the topology")
        pair = (path[0], path[-1])
        if pair in seen:
            raise TopologyError(f"topology {name!r}: two routes for {pair[0]}->{pair[1]}; give at most one per pair")
        seen.add(pair)

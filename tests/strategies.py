"""Shared hypothesis strategies and bad-input catalogues for loopcoll tests.

Stable API (other test modules import it; extend compatibly):

* :func:`random_topologies` -- valid random :class:`~synth.topologies.Topology` objects.
* :func:`switch_fabrics` -- random multi-NIC switch fabrics where GPU pairs have a route choice.
* :data:`BAD_TOPOLOGY_CASES` -- ``(case id, JSON text, culprit regex)`` for every validation rule
  of ``docs/topology.md``; a reader must reject the text with a message matching the regex.
* :func:`topology_doc` -- a small valid topology document (2 GPUs, 1 switch) to mutate.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st

from synth.topologies import Link, Node, NodeKind, Topology

__all__ = ["BAD_TOPOLOGY_CASES", "CAPACITIES_GBPS", "LATENCIES_US", "random_topologies", "switch_fabrics",
           "topology_doc"]

#: Capacities drawn for live links: integers, and decimals whose binary floats are inexact, so that
#: exact (Fraction) arithmetic is exercised.
CAPACITIES_GBPS: tuple[float, ...] = (1.0, 2.0, 3.0, 5.0, 7.0, 10.0, 12.5, 0.1, 0.3, 25.0, 100.0, 400.0, 2880.0)
LATENCIES_US: tuple[float, ...] = (0.0, 0.025, 0.5, 1.0)


@st.composite
def random_topologies(
    draw: st.DrawFn,
    min_gpus: int = 2,
    max_gpus: int = 6,
    max_switches: int = 3,
    symmetric: bool | None = None,
    allow_down: bool = True,
) -> Topology:
    """Valid random topologies: GPUs ``gpu{r}``, switches ``sw{j}``, nodes and links in random order.

    A directed cycle of live links through every GPU and some switches guarantees that the GPUs
    reach each other; extra links (some down, 0 Gbit/s, when ``allow_down``) are added on top.
    ``symmetric=True`` gives every link a reverse link of equal capacity, ``False`` draws each
    direction independently, ``None`` draws which.
    """
    n = draw(st.integers(min_gpus, max_gpus), label="gpus")
    k = draw(st.integers(0, max_switches), label="switches")
    sym = draw(st.booleans(), label="symmetric") if symmetric is None else symmetric
    ranks = draw(st.permutations(range(n)), label="rank order")
    hosts = draw(st.one_of(st.none(), st.lists(st.integers(0, 3), min_size=n, max_size=n)), label="hosts")
    gpus = [Node(f"gpu{r}", NodeKind.GPU, r, None if hosts is None else hosts[r]) for r in ranks]
    switches = [Node(f"sw{j}", NodeKind.SWITCH) for j in range(k)]
    ids = [g.id for g in gpus] + [s.id for s in switches]

    links: dict[tuple[str, str], tuple[float, float]] = {}

    def put(a: str, b: str, gbps: float, latency_us: float) -> None:
        links[(a, b)] = (gbps, latency_us)
        if sym:
            links[(b, a)] = (gbps, latency_us)

    capacity = st.sampled_from(CAPACITIES_GBPS)
    latency = st.sampled_from(LATENCIES_US)
    relays = draw(st.lists(st.sampled_from([s.id for s in switches]), unique=True), label="relays") if k else []
    cycle = draw(st.permutations([g.id for g in gpus] + relays), label="cycle")
    for a, b in zip(cycle, cycle[1:] + cycle[:1]):
        put(a, b, draw(capacity), draw(latency))
    pair = st.tuples(st.sampled_from(ids), st.sampled_from(ids)).filter(lambda p: p[0] != p[1])
    extra_capacity = st.one_of(capacity, st.just(0.0)) if allow_down else capacity
    for a, b in draw(st.lists(pair, max_size=2 * (n + k)), label="extra links"):
        if (a, b) not in links:
            put(a, b, draw(extra_capacity), draw(latency))
    nodes = draw(st.permutations(gpus + switches), label="node order")
    order = draw(st.permutations(sorted(links)), label="link order")
    meta = draw(st.sampled_from([{}, {"family": "random"}, {"note": [1, 2.5, None, "x"]}]), label="meta")
    return Topology.create(
        f"random-{n}g{k}s",
        nodes,
        [Link(a, b, *links[(a, b)]) for a, b in order],
        meta,
    )


@st.composite
def switch_fabrics(draw: st.DrawFn, max_hosts: int = 2, max_gpus_per_host: int = 3, max_leaves: int = 2) -> Topology:
    """Random multi-NIC switch fabrics (symmetric cables): hosts of GPUs, each host with or without a
    host switch ``hs{h}`` (NVSwitch-like), every GPU with one or two NICs, each on a leaf switch
    ``leaf{j}``, the leaves cabled to a spine ``spine`` (or, with one leaf, nothing more). Two NICs of a
    GPU, or a host switch besides the NICs, give GPU pairs several switch-only paths: the route
    choice of ``synth.routing.has_route_choice`` (most draws have one; none is forced).
    """
    hosts = draw(st.integers(1, max_hosts), label="hosts")
    sizes = draw(st.lists(st.integers(1, max_gpus_per_host), min_size=hosts, max_size=hosts), label="gpus per host")
    if sum(sizes) < 2:
        sizes[0] = 2
    leaves = draw(st.integers(1, max_leaves), label="leaves")
    capacity = st.sampled_from((25.0, 50.0, 100.0, 200.0, 400.0, 12.5, 0.3))
    nodes = [Node(f"leaf{j}", NodeKind.SWITCH, role="tor") for j in range(leaves)]
    links: list[Link] = []

    def cable(a: str, b: str, gbps: float) -> None:
        links.extend([Link(a, b, gbps, 0.5), Link(b, a, gbps, 0.5)])

    if leaves > 1:
        nodes.append(Node("spine", NodeKind.SWITCH, role="spine"))
        for j in range(leaves):
            cable(f"leaf{j}", "spine", draw(capacity, label="uplink"))
    rank = 0
    for h, size in enumerate(sizes):
        host_switch = draw(st.booleans(), label="host switch")
        if host_switch:
            nodes.append(Node(f"hs{h}", NodeKind.SWITCH, role="nvswitch"))
        for _ in range(size):
            gpu = f"gpu{rank}"
            nodes.append(Node(gpu, NodeKind.GPU, rank, h))
            if host_switch:
                cable(gpu, f"hs{h}", draw(st.sampled_from((400.0, 900.0, 2400.0)), label="nvlink"))
            nics = draw(st.lists(st.integers(0, leaves - 1), min_size=1, max_size=2), label="nic leaves")
            for j, leaf in enumerate(nics):
                nic = f"nic{rank}.{j}"
                nodes.append(Node(nic, NodeKind.SWITCH, role="nic"))
                cable(gpu, nic, draw(capacity, label="pcie"))
                cable(nic, f"leaf{leaf}", draw(capacity, label="nic"))
            rank += 1
    return Topology.create(f"switch-fabric-{rank}g{leaves}l", nodes, links, {"family": "switch-fabric"})


def topology_doc() -> dict[str, Any]:
    """A fresh small valid document: ``gpu0``, ``gpu1`` and switch ``sw0``, 100 Gbit/s cables."""
    return {
        "name": "tiny",
        "nodes": [
            {"id": "gpu0", "kind": "gpu", "rank": 0, "host": 0},
            {"id": "gpu1", "kind": "gpu", "rank": 1, "host": 0},
            {"id": "sw0", "kind": "switch"},
        ],
        "links": [
            {"src": "gpu0", "dst": "sw0", "gbps": 100.0, "latency_us": 0.5},
            {"src": "sw0", "dst": "gpu0", "gbps": 100.0, "latency_us": 0.5},
            {"src": "gpu1", "dst": "sw0", "gbps": 100.0, "latency_us": 0.5},
            {"src": "sw0", "dst": "gpu1", "gbps": 100.0, "latency_us": 0.5},
        ],
        "meta": {},
    }


def _mutated(change: Callable[[dict[str, Any]], object]) -> str:
    doc = topology_doc()
    change(doc)
    # allow_nan: the NaN/Infinity literals Python's json reads are part of what readers must reject.
    return json.dumps(doc, indent=2)


def _node(doc: dict[str, Any], node_id: str) -> dict[str, Any]:
    return next(n for n in doc["nodes"] if n["id"] == node_id)


def _link(doc: dict[str, Any], src: str, dst: str) -> dict[str, Any]:
    return next(lk for lk in doc["links"] if (lk["src"], lk["dst"]) == (src, dst))


def _set(getter: Callable[[dict[str, Any]], dict[str, Any]], key: str, value: object) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        getter(doc)[key] = value

    return change


def _drop(getter: Callable[[dict[str, Any]], dict[str, Any]], key: str) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        del getter(doc)[key]

    return change


def _append(section: str, item: object) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        doc[section].append(copy.deepcopy(item))

    return change


def _gpu1_links(gbps: float | None) -> Callable[[dict[str, Any]], None]:
    """gbps None: drop gpu1's links entirely; otherwise set both directions to ``gbps``."""

    def change(doc: dict[str, Any]) -> None:
        if gbps is None:
            doc["links"] = [lk for lk in doc["links"] if "gpu1" not in (lk["src"], lk["dst"])]
        else:
            for lk in doc["links"]:
                if "gpu1" in (lk["src"], lk["dst"]):
                    lk["gbps"] = gbps

    return change


def _gpu1_one_way(doc: dict[str, Any]) -> None:
    doc["links"] = [lk for lk in doc["links"] if (lk["src"], lk["dst"]) != ("gpu1", "sw0")]


def _only_switches(doc: dict[str, Any]) -> None:
    doc["nodes"] = [{"id": "sw0", "kind": "switch"}, {"id": "sw1", "kind": "switch"}]
    doc["links"] = [{"src": "sw0", "dst": "sw1", "gbps": 1.0, "latency_us": 0.0}]


def _top(key: str, value: object) -> Callable[[dict[str, Any]], None]:
    return _set(lambda d: d, key, value)


def _g0(d: dict[str, Any]) -> dict[str, Any]:
    return _node(d, "gpu0")


def _g1(d: dict[str, Any]) -> dict[str, Any]:
    return _node(d, "gpu1")


def _s0(d: dict[str, Any]) -> dict[str, Any]:
    return _node(d, "sw0")


def _l01(d: dict[str, Any]) -> dict[str, Any]:
    return _link(d, "gpu0", "sw0")


def _l10(d: dict[str, Any]) -> dict[str, Any]:
    return _link(d, "gpu1", "sw0")


_LINK = {"src": "gpu0", "dst": "sw0", "gbps": 100.0, "latency_us": 0.5}

#: (case id, JSON text, regex the error message must match; it names the culprit).
BAD_TOPOLOGY_CASES: tuple[tuple[str, str, str], ...] = (
    # unknown node ids in links
    ("link_unknown_dst", _mutated(_append("links", {**_LINK, "dst": "ghost"})), r"gpu0->ghost.*unknown node id 'ghost'"),
    ("link_unknown_src", _mutated(_append("links", {**_LINK, "src": "ghost"})), r"ghost->sw0.*unknown node id 'ghost'"),
    # duplicates
    ("duplicate_node_id", _mutated(_append("nodes", {"id": "gpu1", "kind": "switch"})), r"duplicate node id 'gpu1'"),
    ("duplicate_link", _mutated(_append("links", {**_LINK, "gbps": 5.0})), r"link gpu0->sw0: duplicate link"),
    # capacity
    ("negative_gbps", _mutated(_set(_l10, "gbps", -1.0)), r"link gpu1->sw0: gbps must be finite and >= 0, got -1\.0"),
    ("nan_gbps", _mutated(_set(_l10, "gbps", float("nan"))), r"link gpu1->sw0: gbps must be finite and >= 0, got nan"),
    ("inf_gbps", _mutated(_set(_l10, "gbps", float("inf"))), r"link gpu1->sw0: gbps must be finite and >= 0, got inf"),
    ("minus_inf_gbps", _mutated(_set(_l10, "gbps", float("-inf"))), r"link gpu1->sw0: gbps .* got -inf"),
    ("huge_gbps_overflows_to_inf", _mutated(_set(_l10, "gbps", 12345.0)).replace("12345.0", "1e999"),
     r"link gpu1->sw0: gbps .* got inf"),
    # latency
    ("negative_latency", _mutated(_set(_l10, "latency_us", -0.5)), r"link gpu1->sw0: latency_us .* got -0\.5"),
    ("nan_latency", _mutated(_set(_l10, "latency_us", float("nan"))), r"link gpu1->sw0: latency_us .* got nan"),
    ("inf_latency", _mutated(_set(_l10, "latency_us", float("inf"))), r"link gpu1->sw0: latency_us .* got inf"),
    # ranks
    ("rank_gap", _mutated(_set(_g1, "rank", 2)), r"ranks must be exactly 0\.\.1, missing \[1\], unexpected \[\(2, 'gpu1'\)\]"),
    ("rank_negative", _mutated(_set(_g0, "rank", -1)), r"missing \[0\], unexpected \[\(-1, 'gpu0'\)\]"),
    ("rank_duplicate", _mutated(_set(_g1, "rank", 0)), r"node 'gpu1': rank 0 already used by node 'gpu0'"),
    ("rank_missing_on_gpu", _mutated(_drop(_g1, "rank")), r"node 'gpu1': a gpu needs a 'rank'"),
    ("rank_null_on_gpu", _mutated(_set(_g1, "rank", None)), r"node 'gpu1': a gpu needs an integer rank, got None"),
    ("rank_string", _mutated(_set(_g1, "rank", "1")), r"node 'gpu1': a gpu needs an integer rank, got '1'"),
    ("rank_float", _mutated(_set(_g1, "rank", 1.0)), r"node 'gpu1': a gpu needs an integer rank, got 1\.0"),
    ("rank_bool", _mutated(_set(_g1, "rank", True)), r"node 'gpu1': a gpu needs an integer rank, got True"),
    ("rank_on_switch", _mutated(_set(_s0, "rank", 2)), r"node 'sw0': a switch has no rank, got rank 2"),
    # switch roles (docs/topology.md: a closed set, switches only)
    ("role_unknown", _mutated(_set(_s0, "role", "router")), r"node 'sw0': unknown role 'router' \(switch roles: nvswitch"),
    ("role_not_a_string", _mutated(_set(_s0, "role", 7)), r"node 'sw0': unknown role 7"),
    ("role_on_gpu", _mutated(_set(_g0, "role", "nic")), r"node 'gpu0': a gpu has no role"),
    # reachability over live links
    ("gpu_isolated", _mutated(_gpu1_links(None)), r"gpu 'gpu1' \(rank 1\).*cannot reach each other"),
    ("gpu_only_down_links", _mutated(_gpu1_links(0.0)), r"gpu 'gpu1' \(rank 1\).*cannot reach each other"),
    ("gpu_one_way", _mutated(_gpu1_one_way), r"gpu 'gpu1' \(rank 1\).*cannot reach each other"),
    ("gpu_extra_unlinked", _mutated(_append("nodes", {"id": "gpu2", "kind": "gpu", "rank": 2})),
     r"gpu 'gpu2' \(rank 2\).*cannot reach each other"),
    # malformed JSON
    ("malformed_json", _mutated(lambda d: None)[:-40], r"malformed JSON at line \d+ column \d+"),
    ("malformed_json_trailing_comma", '{"name": "x",\n  "nodes": [,]}', r"malformed JSON at line 2 column 13"),
    ("empty_text", "", r"malformed JSON at line 1 column 1"),
    # unknown keys
    ("unknown_top_key", _mutated(_top("nodez", [])), r"unknown top-level key\(s\) \['nodez'\]"),
    ("unknown_node_key", _mutated(_set(_g0, "gpus", 1)), r"node 'gpu0': unknown key\(s\) \['gpus'\]"),
    ("unknown_link_key", _mutated(_set(_l01, "bw", 1)), r"link gpu0->sw0: unknown key\(s\) \['bw'\]"),
    # missing keys
    ("missing_links", _mutated(lambda d: d.pop("links")), r"missing top-level key 'links'"),
    ("missing_nodes", _mutated(lambda d: d.pop("nodes")), r"missing top-level key 'nodes'"),
    ("missing_name", _mutated(lambda d: d.pop("name")), r"missing top-level key 'name'"),
    ("missing_latency", _mutated(_drop(_l01, "latency_us")), r"link gpu0->sw0: missing key\(s\) \['latency_us'\]"),
    ("missing_gbps", _mutated(_drop(_l01, "gbps")), r"link gpu0->sw0: missing key\(s\) \['gbps'\]"),
    ("missing_kind", _mutated(_drop(_s0, "kind")), r"node 'sw0': missing 'kind'"),
    ("missing_id", _mutated(_drop(_s0, "id")), r"nodes\[2\]: missing 'id'"),
    # wrong types
    ("gbps_string", _mutated(_set(_l01, "gbps", "100")), r"link gpu0->sw0: gbps must be a number, got '100'"),
    ("gbps_bool", _mutated(_set(_l01, "gbps", True)), r"link gpu0->sw0: gbps must be a number, got True"),
    ("gbps_null", _mutated(_set(_l01, "gbps", None)), r"link gpu0->sw0: gbps must be a number, got None"),
    ("latency_string", _mutated(_set(_l01, "latency_us", "0.5")), r"link gpu0->sw0: latency_us must be a number, got '0\.5'"),
    ("latency_bool", _mutated(_set(_l01, "latency_us", False)), r"link gpu0->sw0: latency_us must be a number, got False"),
    ("host_string", _mutated(_set(_g0, "host", "0")), r"node 'gpu0': host must be an integer, got '0'"),
    ("host_bool", _mutated(_set(_g0, "host", False)), r"node 'gpu0': host must be an integer, got False"),
    ("kind_unknown", _mutated(_set(_s0, "kind", "nic")), r"node 'sw0': kind must be 'gpu' or 'switch', got 'nic'"),
    ("src_not_string", _mutated(_set(_l01, "src", 7)), r"links\[0\]: src must be a node id string, got 7"),
    ("dst_not_string", _mutated(_set(_l01, "dst", None)), r"links\[0\]: dst must be a node id string, got None"),
    ("node_not_object", _mutated(lambda d: d["nodes"].append("gpu9")), r"nodes\[3\] must be an object, got 'gpu9'"),
    ("link_not_object", _mutated(lambda d: d["links"].append(["a", "b"])), r"links\[4\] must be an object"),
    ("nodes_not_list", _mutated(_top("nodes", {})), r"'nodes' and 'links' must be lists"),
    ("document_not_object", "[]", r"a topology must be a JSON object, got list"),
    ("meta_not_object", _mutated(_top("meta", [1])), r"'meta' must be an object, got \[1\]"),
    ("meta_nan", _mutated(_top("meta", {"x": float("nan")})), r"topology meta must be JSON-serialisable"),
    ("name_empty", _mutated(_top("name", "")), r"topology name must be a non-empty string, got ''"),
    ("name_not_string", _mutated(_top("name", 3)), r"topology name must be a non-empty string, got 3"),
    # structure
    ("self_loop", _mutated(_append("links", {**_LINK, "dst": "gpu0"})), r"link gpu0->gpu0: a link cannot join a node to itself"),
    ("empty_node_id", _mutated(_set(_s0, "id", "")), r"node id must be a non-empty string, got ''"),
    ("node_id_not_string", _mutated(_set(_s0, "id", 5)), r"node id must be a non-empty string, got 5"),
    ("no_gpus", _mutated(_only_switches), r"topology 'tiny': has no gpu nodes"),
    ("no_nodes", _mutated(lambda d: d.update(nodes=[], links=[])), r"topology 'tiny': has no gpu nodes"),
)

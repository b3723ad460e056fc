"""Hosts, NICs and (virtual) rails read from a fabric's graph: the layout NCCL builds channels on.

NCCL opens one ring channel per NIC and pairs the NICs of different hosts by index, as if NIC i of
every host sat on rail i. :func:`nic_layout` finds that pairing on any fabric whose hosts are alike:

* rail-optimised fabrics (:func:`synth.topologies.structure.rail_layout`): rail i is a network of
  its own holding GPU i of every host;
* every other multi-host fabric with NICs: one leaf switch for all NICs, several leaves under a
  spine, fewer NICs than GPUs (a NIC switch shared by several GPUs, or NICs on some GPUs only).

A **NIC** is read from the cabling, never from ids or names: a switch of role ``nic`` whose GPUs all
sit in one host is that host's NIC, shared by the GPUs cabled to it; a GPU's live link straight into
any other network switch (``tor``, ``spine``) is a NIC of that GPU alone. NICs whose network sides
reach each other through network switches form a **group** (one per rail on a rail-optimised fabric,
one for a single leaf or a leaf-spine fabric). Every group must hold the same number of NICs of every
host; the NICs of the first host, by their lowest local GPU, define the rails, and each other host's
NIC on rail r is the one in the same group on the same first switch (else the next by position).

Examples
--------
>>> from synth.topologies import named_topology
>>> lay = nic_layout(named_topology("hpn:1x2x4"))
>>> lay.kind, lay.nrails, lay.nics[1]
('rail', 4, ((0,), (1,), (2,), (3,)))
>>> nic_layout(named_topology("torus:2x2"))
'no network switches: the GPUs are joined by direct links'
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass

from synth._types import NodeId, Rank
from synth.topologies.model import Node, Topology
from synth.topologies.structure import rail_layout, switch_roles

__all__ = ["NicLayout", "nic_layout"]


@dataclass(frozen=True)
class NicLayout:
    """Hosts × rails: the structure NCCL-like channels are built on.

    ``hosts[h]``: host h's GPU ranks in position order (rail order on rail-optimised fabrics, else
    rank order). ``nics[h][r]``: positions (indices into ``hosts[h]``) of the GPUs local to host h's
    NIC on rail r. ``gpu_rail[h][p]``: the rail GPU p of host h sends and receives over (its own
    NIC's, else one assigned evenly among the NICs, as NCCL's PCIe affinity would). ``kind``:
    ``"rail"`` where every rail is a network of its own, ``"nic"`` where rails share a network.
    ``networks``: how many groups of NICs reach each other (one per rail on a rail-optimised
    fabric; 1 where every NIC reaches every NIC, so any NIC of one host may talk to any of another).
    """

    hosts: tuple[tuple[Rank, ...], ...]
    nics: tuple[tuple[tuple[int, ...], ...], ...]
    gpu_rail: tuple[tuple[int, ...], ...]
    kind: str
    networks: int

    @property
    def nhosts(self) -> int:
        return len(self.hosts)

    @property
    def nrails(self) -> int:
        return len(self.nics[0])

    def describe(self) -> str:
        """``"8 NICs per host, one rail network per NIC"`` and the like."""
        g = len(self.hosts[0])
        k = self.nrails
        nics = f"{k} NIC{'s' if k != 1 else ''} per host"
        if k < g:
            nics += f" for {g} GPUs"
        if self.kind == "rail":
            return f"{nics}, one rail network per NIC"
        where = "all on one network" if self.networks == 1 else f"on {self.networks} networks"
        return f"{nics}, {where} (not rail-optimised: NICs paired across hosts by network and position)"


@dataclass(frozen=True)
class _Nic:
    """One NIC: ``locals_`` its GPUs' positions in the host, ``entry`` the network switch(es) it feeds."""

    key: tuple[str, ...]  # ("switch", nic switch id) or ("link", gpu id, network switch id)
    host: int
    locals_: tuple[int, ...]
    entry: frozenset[NodeId]


def _hosts(topo: Topology) -> list[list[Node]]:
    by_host: dict[Hashable, list[Node]] = {}
    for gpu in topo.gpus:
        by_host.setdefault(("host", gpu.host) if gpu.host is not None else ("rank", gpu.rank), []).append(gpu)
    hosts = [sorted(members, key=lambda g: topo.rank_of(g.id)) for members in by_host.values()]
    return sorted(hosts, key=lambda members: topo.rank_of(members[0].id))


def _live(topo: Topology, a: NodeId, b: NodeId) -> bool:
    return topo.has_link(a, b) and topo.link(a, b).gbps > 0


def _find_nics(topo: Topology, hosts: list[list[Node]], roles: dict[NodeId, str]) -> list[_Nic]:
    host_of = {g.id: h for h, members in enumerate(hosts) for g in members}
    pos = {g.id: p for members in hosts for p, g in enumerate(members)}
    shared: dict[NodeId, list[NodeId]] = {}
    hosts_at: dict[NodeId, set[int]] = {}  # the hosts of the GPUs cabled to each switch met
    nics: list[_Nic] = []
    for h, members in enumerate(hosts):
        for g in members:
            for lk in topo.out_links(g.id):
                s = lk.dst
                if topo.node(s).is_gpu or roles[s] == "nvswitch" or not _live(topo, s, g.id) or lk.gbps <= 0:
                    continue
                if s not in hosts_at:
                    hosts_at[s] = {host_of[v] for v in _cabled(topo, s) if topo.node(v).is_gpu}
                if roles[s] == "nic" and hosts_at[s] == {h}:
                    shared.setdefault(s, []).append(g.id)
                else:
                    nics.append(_Nic(("link", g.id, s), h, (pos[g.id],), frozenset({s})))
    for s, local in shared.items():
        uplinks = frozenset(v for v in _cabled(topo, s) if not topo.node(v).is_gpu)
        nics.append(_Nic(("switch", s), host_of[local[0]], tuple(sorted(pos[g] for g in local)), uplinks))
    return nics


def _cabled(topo: Topology, node: NodeId) -> set[NodeId]:
    return {lk.dst for lk in topo.out_links(node)} | {lk.src for lk in topo.in_links(node)}


_Groups = dict[tuple[str, ...], frozenset[tuple[str, ...]]]


def _groups(topo: Topology, nics: list[_Nic], roles: dict[NodeId, str]) -> _Groups | None:
    """Each NIC's group: the NICs it reaches through network switches (``None`` if reach is not mutual)."""
    switch_nic = {n.key[1]: n.key for n in nics if n.key[0] == "switch"}
    link_nic = {(n.key[2], n.key[1]): n.key for n in nics if n.key[0] == "link"}
    found_from: dict[tuple[NodeId, ...], frozenset[tuple[str, ...]]] = {}
    reach: _Groups = {}
    canon: dict[frozenset[tuple[str, ...]], frozenset[tuple[str, ...]]] = {}
    for nic in nics:
        start = (nic.key[1],) if nic.key[0] == "switch" else tuple(sorted(nic.entry))
        if start not in found_from:  # GPU-direct NICs into one switch share their search
            found_from[start] = _search(topo, start, nic.key[0] == "switch", switch_nic, link_nic, roles)
        group = found_from[start] | {nic.key}
        reach[nic.key] = canon.setdefault(group, group)  # one object per distinct group: identity below
    if any(reach[other] is not group for group in canon for other in group):
        return None
    return reach


def _search(topo: Topology, start: tuple[NodeId, ...], own_switch: bool, switch_nic: dict[NodeId, tuple[str, ...]],
            link_nic: dict[tuple[NodeId, NodeId], tuple[str, ...]], roles: dict[NodeId, str]) -> frozenset[tuple[str, ...]]:
    """The NICs reached from ``start`` over live links through network switches (a NIC switch is an
    end point, not a transit, unless it is the start itself: ``own_switch``)."""
    seen, found = set(start), set()
    queue = deque(start)
    while queue:
        u = queue.popleft()
        if u in switch_nic:
            found.add(switch_nic[u])
            if not (own_switch and u == start[0]):
                continue
        for lk in topo.out_links(u):
            v = lk.dst
            if lk.gbps <= 0 or v in seen:
                continue
            if (u, v) in link_nic:
                found.add(link_nic[(u, v)])
            elif v in roles and roles[v] != "nvswitch":
                seen.add(v)
                queue.append(v)
    return frozenset(found)


def nic_layout(topo: Topology) -> NicLayout | str:
    """The hosts × rails layout NCCL would build channels on, or a sentence saying why there is none.

    >>> from synth.topologies import named_topology
    >>> nic_layout(named_topology("nvswitch:4"))
    'one host: no network between hosts'
    """
    rail = rail_layout(topo)
    if rail is not None:
        g = rail.gpus_per_host
        ident = tuple(range(g))
        return NicLayout(rail.hosts, tuple(tuple((i,) for i in ident) for _ in rail.hosts),
                         tuple(ident for _ in rail.hosts), "rail", g)
    hosts = _hosts(topo)
    if len(hosts) == 1:
        return "one host: no network between hosts"
    sizes = sorted({len(members) for members in hosts})
    if len(sizes) > 1:
        return f"hosts have different GPU counts ({', '.join(map(str, sizes))})"
    roles = switch_roles(topo)
    if not any(r != "nvswitch" for r in roles.values()):
        return "no network switches: the GPUs are joined by direct links"
    nics = _find_nics(topo, hosts, roles)
    per_host = [[n for n in nics if n.host == h] for h in range(len(hosts))]
    bare = [h for h, own in enumerate(per_host) if not own]
    if bare:
        return f"host {bare[0]} (GPU rank {topo.rank_of(hosts[bare[0]][0].id)}) has no NIC"
    groups = _groups(topo, nics, roles)
    if groups is None:
        return "the NICs do not reach each other alike through the network"
    rails = _rails(per_host, groups)
    if isinstance(rails, str):
        return rails
    distinct = set(groups.values())
    kind = "rail" if {len(g) for g in distinct} == {len(hosts)} else "nic"
    table = tuple(tuple(nic.locals_ for nic in row) for row in rails)
    return NicLayout(tuple(tuple(topo.rank_of(g.id) for g in members) for members in hosts), table,
                     tuple(_gpu_rails(row, len(hosts[0])) for row in table), kind, len(distinct))


def _order(nic: _Nic) -> tuple[int, ...]:
    return nic.locals_


def _rails(per_host: list[list[_Nic]], groups: _Groups) -> list[list[_Nic]] | str:
    """``rails[h][r]``: host h's NIC on rail r, or why the NICs do not pair up."""
    first = sorted(per_host[0], key=_order)
    table = [first]
    for h, own in enumerate(per_host[1:], start=1):
        if len(own) != len(first):
            return f"hosts have different NIC counts ({len(first)} on host 0, {len(own)} on host {h})"
        free = sorted(own, key=_order)
        row: list[_Nic | None] = [None] * len(first)
        for same_entry in (True, False):
            for r, ref in enumerate(first):
                if row[r] is not None:
                    continue
                match = next((n for n in free if n.key in groups[ref.key]
                              and (not same_entry or n.entry == ref.entry)), None)
                if match is not None:
                    row[r] = match
                    free.remove(match)
        if free:
            return f"host {h}'s NICs do not pair up with host 0's over the network"
        table.append([n for n in row if n is not None])
    return table


def _gpu_rails(row: tuple[tuple[int, ...], ...], g: int) -> tuple[int, ...]:
    """Each GPU's rail: its own NIC's (the first), else NICs dealt out evenly in position order."""
    own = {p: r for r in reversed(range(len(row))) for p in row[r]}
    bare = [p for p in range(g) if p not in own]
    for j, p in enumerate(bare):
        own[p] = j * len(row) // len(bare)
    return tuple(own[p] for p in range(g))

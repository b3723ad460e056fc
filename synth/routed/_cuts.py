"""Cheap cut bounds on routed (and free) collectives: a fallback certificate when a limit stops an LP.

A node set S of the physical graph holding the GPUs X (every GPU alone, and every host: its GPUs
and the switches linked to them only) is crossed by every path between X and the other GPUs, so:
AllToAll moves ``|X|·|V∖X|`` blocks out of S, hence algbw ≤ ``N·c_out(S) / (|X|·|V∖X|)``; the
out-trees of an AllGather rooted outside X each enter S, hence ``T ≥ |V∖X| / c_in(S)`` per unit
(ReduceScatter's in-trees: ``c_out``). Capacities are :meth:`~synth.topologies.Topology.exact_capacity`
in GB/s, as the logical graph's.

Examples
--------
>>> from synth.topologies import named_topology
>>> t = named_topology("nvswitch:4")
>>> round(alltoall_cut_bound_GBps(t), 3), round(4 / tree_cut_T(t, into=True), 3)
(480.0, 480.0)
"""

from __future__ import annotations

from collections import defaultdict

from synth.topologies.model import Topology

__all__ = ["alltoall_cut_bound_GBps", "gpu_node_sets", "tree_cut_T"]


def gpu_node_sets(topology: Topology) -> list[tuple[frozenset[str], int]]:
    """(node set, GPUs in it): every GPU alone, then every host short of all GPUs with the switches
    whose every neighbour is one of its GPUs."""
    out = [(frozenset({g.id}), 1) for g in topology.gpus]
    hosts: dict[int, set[str]] = defaultdict(set)
    for g in topology.gpus:
        if g.host is not None:
            hosts[g.host].add(g.id)
    for members in hosts.values():
        if len(members) >= topology.nranks:
            continue
        inner = set(members)
        for sw in topology.switches:
            near = {lk.dst for lk in topology.out_links(sw.id)} | {lk.src for lk in topology.in_links(sw.id)}
            if near and near <= members:
                inner.add(sw.id)
        out.append((frozenset(inner), len(members)))
    return out


def _capacity(topology: Topology, nodes: frozenset[str], *, out: bool) -> float:
    """GB/s of the links leaving (``out``) or entering ``nodes``."""
    return sum(float(topology.exact_capacity(*lk.key)) / 8.0 for lk in topology.links
               if (lk.src in nodes) is out and (lk.dst in nodes) is not out)


def alltoall_cut_bound_GBps(topology: Topology) -> float:  # noqa: N802
    """An upper bound on any AllToAll algbw from :func:`gpu_node_sets` (module docstring)."""
    n = topology.nranks
    return min((n * _capacity(topology, s, out=out) / (k * (n - k)) for s, k in gpu_node_sets(topology)
                for out in (True, False)), default=float("inf"))


def tree_cut_T(topology: Topology, *, into: bool) -> float:  # noqa: N802
    """A lower bound on the per-unit time T of one tree phase (``algbw ≤ N / T``): out-trees
    (AllGather, ``into``) enter each set, in-trees (ReduceScatter) leave it (module docstring)."""
    n = topology.nranks
    return max(((n - k) / cap if (cap := _capacity(topology, s, out=not into)) > 0 else float("inf")
                for s, k in gpu_node_sets(topology)), default=0.0)

"""Fabrics whose GPU pairs have several switch-only paths (routing matters on them).

* :func:`forestcoll_dgx_a100`: ForestColl's DGX-A100 model: 8 GPUs per box at 2400 Gbit/s
  (300 GB/s) each to the box's NVSwitch, one 200 Gbit/s (25 GB/s) NIC per GPU, NICs of even GPUs
  on one InfiniBand switch and of odd GPUs on another. Two GPUs of one box reach each other over
  the NVSwitch and over IB.
* :func:`mi250_like`: boxes of 8 GCDs on an xGMI partial mesh (1600 Gbit/s between the two GCDs
  of a package, 400 Gbit/s rings across packages), every GCD with a 200 Gbit/s NIC on one IB
  switch: GCDs without a direct link reach each other only through IB.
* :func:`random_fabric`: random irregular: hosts with an NVSwitch-like host switch for some GPUs,
  random direct GPU links, every GPU's NIC on one of two network switches that are cabled together.

Examples
--------
>>> t = forestcoll_dgx_a100(2)
>>> t.nranks, t.link("gpu1", "ib1").gbps
(16, 200.0)
>>> from synth.routing import has_route_choice
>>> has_route_choice(t), has_route_choice(mi250_like(2)), has_route_choice(random_fabric(3, 12))
(True, True, True)
"""

from __future__ import annotations

import random

from synth.topologies.model import Link, Node, NodeKind, Topology

__all__ = ["forestcoll_dgx_a100", "mi250_like", "random_fabric"]


def _cable(a: str, b: str, gbps: float, latency_us: float = 0.5) -> list[Link]:
    return [Link(a, b, float(gbps), latency_us), Link(b, a, float(gbps), latency_us)]


def forestcoll_dgx_a100(boxes: int) -> Topology:
    """``boxes`` DGX-A100 boxes, NICs by GPU parity on two IB switches (module docstring)."""
    nodes = [Node("ib0", NodeKind.SWITCH, role="tor"), Node("ib1", NodeKind.SWITCH, role="tor")]
    links: list[Link] = []
    for b in range(boxes):
        nvs = f"nvs{b}"
        nodes.append(Node(nvs, NodeKind.SWITCH, role="nvswitch"))
        for i in range(8):
            r = 8 * b + i
            nodes.append(Node(f"gpu{r}", NodeKind.GPU, r, b))
            links += _cable(f"gpu{r}", nvs, 2400.0, 0.025)
            links += _cable(f"gpu{r}", f"ib{i % 2}", 200.0)
    return Topology.create(f"forestcoll-dgx-a100-{boxes}", nodes, links, {"family": "forestcoll-dgx-a100"})


def mi250_like(boxes: int) -> Topology:
    """``boxes`` MI250-like boxes of 8 GCDs, xGMI partial mesh plus one IB switch (module docstring)."""
    nodes = [Node("ib", NodeKind.SWITCH, role="tor")]
    links: list[Link] = []
    for b in range(boxes):
        base = 8 * b
        for i in range(8):
            nodes.append(Node(f"gpu{base + i}", NodeKind.GPU, base + i, b))
            links += _cable(f"gpu{base + i}", "ib", 200.0)
        for i in range(0, 8, 2):
            links += _cable(f"gpu{base + i}", f"gpu{base + i + 1}", 1600.0)
        for i in range(8):
            j = (i + 2) % 8
            if i < j or j < 2 and i >= 6:
                links += _cable(f"gpu{base + i}", f"gpu{base + j}", 400.0)
    return Topology.create(f"mi250-like-{boxes}", nodes, links, {"family": "mi250-like"})


def random_fabric(seed: int, n_gpus: int, *, hosts: int | None = None) -> Topology:
    """A random irregular fabric of ``n_gpus`` GPUs (module docstring); deterministic per ``seed``."""
    rng = random.Random(seed)
    hosts = hosts or max(1, n_gpus // 4)
    nodes = [Node("net0", NodeKind.SWITCH, role="tor"), Node("net1", NodeKind.SWITCH, role="tor")]
    links = _cable("net0", "net1", 100.0 * rng.choice((2, 4, 8)))
    host_of = [r * hosts // n_gpus for r in range(n_gpus)]
    for h in range(hosts):
        nodes.append(Node(f"hs{h}", NodeKind.SWITCH, role="nvswitch"))
    for r in range(n_gpus):
        nodes.append(Node(f"gpu{r}", NodeKind.GPU, r, host_of[r]))
        if rng.random() < 0.75:
            links += _cable(f"gpu{r}", f"hs{host_of[r]}", 100.0 * rng.choice((4, 8, 16)))
        links += _cable(f"gpu{r}", f"net{rng.randrange(2)}", 100.0 * rng.choice((1, 2, 4)))
    pairs = set()
    for _ in range(n_gpus):
        a, b = rng.sample(range(n_gpus), 2)
        if (min(a, b), max(a, b)) not in pairs:
            pairs.add((min(a, b), max(a, b)))
            links += _cable(f"gpu{min(a, b)}", f"gpu{max(a, b)}", 100.0 * rng.choice((2, 4, 8)))
    return Topology.create(f"random-fabric-{seed}-{n_gpus}", nodes, links, {"family": "random-fabric", "seed": seed})

"""Failure scenarios of the MCCL paper (Sec. 6.1) as topology transformations.

Examples
--------
>>> from synth.topologies import named_topology
>>> t = apply_failure(named_topology("hpn:1x2x8"), "fail2")
>>> t.name, t.link("tor0.0", "gpu0").gbps
('hpn-1x2x8+fail2', 50.0)
"""

from __future__ import annotations

from collections.abc import Iterable

from synth.errors import TopologyError
from synth.topologies.model import Link, Topology

__all__ = ["FAILURES", "apply_failure", "apply_failures"]

FAILURES: tuple[str, ...] = ("fail1", "fail2", "fail3", "scale:SRC:DST:F")


def _neighbour(topo: Topology, prefix: str, scenario: str, what: str) -> str:
    gpu = topo.gpu_id(0)
    for lk in topo.out_links(gpu):
        if lk.dst.startswith(prefix) and not topo.node(lk.dst).is_gpu and topo.has_link(lk.dst, gpu):
            return lk.dst
    raise TopologyError(
        f"failure {scenario!r} needs rank 0 ({gpu}) to be cabled to {what} (a switch named {prefix}*), "
        f"which topology {topo.name!r} lacks"
    )


def _set_both(topo: Topology, a: str, b: str, gbps: float) -> dict[tuple[str, str], float]:
    return {(a, b): gbps, (b, a): gbps}


def _rewrite(topo: Topology, gbps: dict[tuple[str, str], float], extra_latency_us: float, tag: str) -> Topology:
    gpu = topo.gpu_id(0)
    links = []
    for lk in topo.links:
        new_gbps = gbps.get(lk.key, lk.gbps)
        touches = gpu in lk.key
        latency = lk.latency_us + (extra_latency_us if touches else 0.0)
        links.append(Link(lk.src, lk.dst, new_gbps, latency))
    return topo.with_links(links, name=f"{topo.name}+{tag}")


def apply_failure(topo: Topology, scenario: str) -> Topology:
    """Apply one scenario: ``fail1``, ``fail2``, ``fail3`` or ``scale:SRC:DST:F``.

    ``fail1+fail2`` applies several in order.
    """
    if not isinstance(scenario, str) or not scenario:
        raise TopologyError(f"failure scenario must be a non-empty string, got {scenario!r}")
    if "+" in scenario:
        return apply_failures(topo, scenario.split("+"))
    gpu = topo.gpu_id(0)
    if scenario == "fail1":
        nvs = _neighbour(topo, "nvs", scenario, "an NVSwitch")
        return _rewrite(topo, _set_both(topo, gpu, nvs, 800.0), 0.0, scenario)
    if scenario == "fail2":
        tor = _neighbour(topo, "tor", scenario, "a NIC/ToR")
        return _rewrite(topo, _set_both(topo, gpu, tor, 50.0), 0.0, scenario)
    if scenario == "fail3":
        nvs = _neighbour(topo, "nvs", scenario, "an NVSwitch")
        tor = _neighbour(topo, "tor", scenario, "a NIC/ToR")
        changes = {**_set_both(topo, gpu, nvs, 50.0), **_set_both(topo, gpu, tor, 100.0)}
        return _rewrite(topo, changes, 1.0, scenario)
    if scenario.startswith("scale:"):
        parts = scenario.split(":")
        if len(parts) != 4:
            raise TopologyError(f"failure {scenario!r}: expected scale:SRC:DST:F")
        _, src, dst, factor_text = parts
        try:
            factor = float(factor_text)
        except ValueError:
            raise TopologyError(f"failure {scenario!r}: factor {factor_text!r} is not a number") from None
        scaled = topo.scaled(src, dst, factor)
        return scaled.with_links(scaled.links, name=f"{topo.name}+{scenario}")
    raise TopologyError(f"unknown failure scenario {scenario!r}; known: {', '.join(FAILURES)}")


def apply_failures(topo: Topology, scenarios: Iterable[str]) -> Topology:
    """Apply several scenarios in order.

    >>> from synth.topologies import named_topology
    >>> apply_failures(named_topology("hpn:1x2x8"), ["fail1", "fail2"]).name
    'hpn-1x2x8+fail1+fail2'
    """
    for scenario in scenarios:
        topo = apply_failure(topo, scenario)
    return topo

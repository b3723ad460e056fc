"""Failure scenarios of the MCCL paper (Sec. 6.1) as topology transformations.

The switches a scenario touches are found by role and structure (``docs/topology.md``), never by
node id, so a scenario applies identically to a plain JSON copy of a named fabric.

Examples
--------
>>> from synth.topologies import named_topology
>>> t = apply_failure(named_topology("hpn:1x2x8"), "fail2")
>>> t.name, t.link("tor0.0", "gpu0").gbps
('hpn-1x2x8+fail2', 50.0)
"""

from __future__ import annotations

from collections.abc import Iterable

from synth.errors import TopologyError, short_repr
from synth.topologies._core import T, TopologyCore
from synth.topologies.parts import Link
from synth.topologies.structure import switch_roles

__all__ = ["FAILURES", "apply_failure", "apply_failures"]

FAILURES: tuple[str, ...] = ("fail1", "fail2", "fail3", "scale:SRC:DST:F")

# Which of rank 0's switches a scenario degrades, by role: its NVSwitch, and its network side
# (a NIC-side switch where the GPU has one, else its ToR).
_NVSWITCH: tuple[str, ...] = ("nvswitch",)
_NETWORK: tuple[str, ...] = ("nic", "tor")


def _neighbour(topo: TopologyCore, roles: tuple[str, ...], scenario: str, what: str) -> str:
    """Rank 0's switch, cabled both ways, whose role (explicit or inferred) comes first in ``roles``;
    ties go to the first link in file order."""
    gpu = topo.gpu_id(0)
    role_of = switch_roles(topo)
    cabled = [lk.dst for lk in topo.out_links(gpu) if lk.dst in role_of and topo.has_link(lk.dst, gpu)]
    for role in roles:
        for node_id in cabled:
            if role_of[node_id] == role:
                return node_id
    found = ", ".join(f"{v} ({role_of[v]})" for v in cabled) or "none"
    raise TopologyError(
        f"failure {short_repr(scenario)} needs rank 0 ({gpu}) to be cabled to {what} (a switch of role "
        f"{' or '.join(roles)}), which topology {short_repr(topo.name)} lacks; its switches: {found}. "
        "Set the switches' \"role\" field where the inferred role is wrong (docs/topology.md)"
    )


def _set_both(topo: TopologyCore, a: str, b: str, gbps: float) -> dict[tuple[str, str], float]:
    return {(a, b): gbps, (b, a): gbps}


def _rewrite(topo: T, gbps: dict[tuple[str, str], float], extra_latency_us: float, tag: str) -> T:
    gpu = topo.gpu_id(0)
    links = []
    for lk in topo.links:
        new_gbps = gbps.get(lk.key, lk.gbps)
        touches = gpu in lk.key
        latency = lk.latency_us + (extra_latency_us if touches else 0.0)
        links.append(Link(lk.src, lk.dst, new_gbps, latency))
    return topo.with_links(links, name=f"{topo.name}+{tag}")


def apply_failure(topo: T, scenario: str) -> T:
    """Apply one scenario: ``fail1``, ``fail2``, ``fail3`` or ``scale:SRC:DST:F``.

    ``fail1+fail2`` applies several in order.
    """
    if not isinstance(scenario, str) or not scenario:
        raise TopologyError(f"failure scenario must be a non-empty string, got {short_repr(scenario)}")
    if "+" in scenario:
        return apply_failures(topo, scenario.split("+"))
    gpu = topo.gpu_id(0)
    if scenario == "fail1":
        nvs = _neighbour(topo, _NVSWITCH, scenario, "an NVSwitch")
        return _rewrite(topo, _set_both(topo, gpu, nvs, 800.0), 0.0, scenario)
    if scenario == "fail2":
        tor = _neighbour(topo, _NETWORK, scenario, "a NIC/ToR")
        return _rewrite(topo, _set_both(topo, gpu, tor, 50.0), 0.0, scenario)
    if scenario == "fail3":
        nvs = _neighbour(topo, _NVSWITCH, scenario, "an NVSwitch")
        tor = _neighbour(topo, _NETWORK, scenario, "a NIC/ToR")
        changes = {**_set_both(topo, gpu, nvs, 50.0), **_set_both(topo, gpu, tor, 100.0)}
        return _rewrite(topo, changes, 1.0, scenario)
    if scenario.startswith("scale:"):
        parts = scenario.split(":")
        if len(parts) != 4:
            raise TopologyError(f"failure {short_repr(scenario)}: expected scale:SRC:DST:F")
        _, src, dst, factor_text = parts
        try:
            factor = float(factor_text)
        except ValueError:
            raise TopologyError(f"failure {short_repr(scenario)}: factor {short_repr(factor_text)} is not a number") from None
        scaled = topo.scaled(src, dst, factor)
        return scaled.with_links(scaled.links, name=f"{topo.name}+{scenario}")
    raise TopologyError(f"unknown failure scenario {short_repr(scenario)}; known: {', '.join(FAILURES)}")


def apply_failures(topo: T, scenarios: Iterable[str]) -> T:
    """Apply several scenarios in order.

    >>> from synth.topologies import named_topology
    >>> apply_failures(named_topology("hpn:1x2x8"), ["fail1", "fail2"]).name
    'hpn-1x2x8+fail1+fail2'
    """
    for scenario in scenarios:
        topo = apply_failure(topo, scenario)
    return topo

"""Topology model, JSON I/O (docs/topology.md), named builders, structure and failure scenarios.

Inside, modules import downwards only: ``parts`` (nodes, links, their JSON document) ← ``_validate``,
``capacity`` ← ``_core`` (:class:`~synth.topologies._core.TopologyCore`) ← ``structure``,
``communicator``, ``failures`` ← ``model`` (:class:`Topology`, adding the communicator and failure
views) ← ``io``, ``named``, ``nics``, ``probe``. The package may import ``synth.errors``,
``synth._types`` and ``synth._atomic``; nothing else in synth, which all builds on it.

Examples
--------
>>> t = load_topology("hpn:1x2x8", failures=["fail2"])
>>> t.name, t.nranks
('hpn-1x2x8+fail2', 16)
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from synth.errors import TopologyError, short_repr
from synth.topologies.communicator import communicator, communicator_meta, global_ranks
from synth.topologies.failures import FAILURES, apply_failure, apply_failures
from synth.topologies.io import (
    read_topology,
    topology_from_dict,
    topology_from_json,
    topology_to_dict,
    topology_to_json,
    write_topology,
)
from synth.topologies.model import ROLES, Link, Node, NodeKind, Topology, exact_gbps
from synth.topologies.named import (
    NAMED_SPECS,
    dgx_a100,
    dgx_h100,
    hpn,
    named_topology,
    nvswitch,
    ring,
    torus,
)
from synth.topologies.nics import NicLayout, nic_layout
from synth.topologies.structure import NETWORK_ROLES, RailLayout, infer_role, rail_layout, switch_roles

__all__ = [
    "FAILURES",
    "NAMED_SPECS",
    "NETWORK_ROLES",
    "ROLES",
    "Link",
    "Node",
    "NicLayout",
    "NodeKind",
    "RailLayout",
    "Topology",
    "apply_failure",
    "apply_failures",
    "communicator",
    "communicator_meta",
    "dgx_a100",
    "dgx_h100",
    "exact_gbps",
    "global_ranks",
    "hpn",
    "infer_role",
    "load_topology",
    "named_topology",
    "nic_layout",
    "nvswitch",
    "rail_layout",
    "read_topology",
    "ring",
    "switch_roles",
    "topology_from_dict",
    "topology_from_json",
    "topology_to_dict",
    "topology_to_json",
    "torus",
    "write_topology",
]


def load_topology(spec: str | os.PathLike[str], failures: Sequence[str] = ()) -> Topology:
    """A topology from a named spec or a JSON file path, with failure scenarios applied in order.

    A string that names an existing file, or ends in ``.json``, is read as a file.
    """
    if isinstance(failures, (str, bytes)) or not isinstance(failures, Sequence):
        raise TopologyError(
            f"failures must be a sequence of scenario strings such as ['fail2'], got {short_repr(failures)}"
        )
    if isinstance(spec, os.PathLike) or (isinstance(spec, str) and (spec.endswith(".json") or _is_file(spec))):
        topo = read_topology(spec)
    elif isinstance(spec, str):
        topo = named_topology(spec)
    else:
        raise TopologyError(f"topology must be a named spec or a JSON path, got {short_repr(spec)}")
    return apply_failures(topo, failures)


def _is_file(spec: str) -> bool:
    try:
        return Path(spec).is_file()
    except (OSError, ValueError):  # a name too long for the file system, or with a NUL byte
        return False

"""Build a topology from what a user can collect on a node (docs/topology.md, "Probing a node").

Each parser is a pure function from a tool's text to typed records, with errors naming the file and
line: :func:`parse_topo_matrix` (``nvidia-smi topo -m``), :func:`parse_ibstat` and
:func:`parse_ibv_devinfo`, :func:`parse_gpu_names` (``nvidia-smi -L``). :func:`probe_topology`
turns one :class:`HostProbe` per host into a validated :class:`~synth.topologies.Topology`.

Examples
--------
>>> gpu_model("NVIDIA H100 80GB HBM3").nvlink_gbps_per_link
200.0
"""

from __future__ import annotations

from synth.topologies.probe.build import FABRICS, HostProbe, ProbedNic, ProbeResult, probe_topology
from synth.topologies.probe.gpus import GPU_MODELS, GpuModel, gpu_model, parse_gpu_names
from synth.topologies.probe.ibstat import HcaPort, parse_ibstat, parse_ibv_devinfo
from synth.topologies.probe.nvidia_smi import Cell, Relation, TopoMatrix, parse_topo_matrix

__all__ = [
    "FABRICS",
    "GPU_MODELS",
    "Cell",
    "GpuModel",
    "HcaPort",
    "HostProbe",
    "ProbeResult",
    "ProbedNic",
    "Relation",
    "TopoMatrix",
    "gpu_model",
    "parse_gpu_names",
    "parse_ibstat",
    "parse_ibv_devinfo",
    "parse_topo_matrix",
    "probe_topology",
]

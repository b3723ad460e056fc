"""Build a topology from what was probed on the hosts (docs/topology.md, "Probing a node").

Per host, from its ``nvidia-smi topo -m`` matrix (and, where given, ``ibstat``/``ibv_devinfo``
ports and GPU names):

* **NVLink.** When every GPU pair shows the same ``NV#`` and ``# × (GPUs − 1)`` exceeds the links a
  GPU has (its model's count, else :data:`~synth.topologies.probe.gpus.MAX_NVLINKS_PER_GPU`), the
  GPUs sit on an NVSwitch: one switch ``nvs0.{h}``, GPU↔switch ``# × per-link`` Gbit/s. Otherwise
  each ``NV#`` pair is a direct cable of ``# × per-link``.
* **NICs.** A NIC is used when it is selected (all by default), has an ``Active`` port (when port
  output is given; else a warning says it was left out) and is the nearest NIC (by PCIe distance)
  of at least one GPU. Its rate is the sum of its active ports' rates, or ``nic_gbps``.
* **PCIe.** Where the NVLink cables join all GPUs of a host, GPU↔GPU PCIe paths are left out (they
  are far slower and NCCL uses NVLink); a NIC that is the nearest of one GPU only is that GPU's own
  link into the fabric at the NIC's rate (the PCIe hop between them is taken not to be narrower), a
  NIC shared by several GPUs a switch ``nic{h}.{j}`` with GPU↔NIC links at the PCIe rate. Otherwise
  the host gets its PCIe tree
  (:mod:`~synth.topologies.probe.pcie`): switches ``pcie{h}.{k}``, every edge at the PCIe rate, NICs
  hanging from it.
* **Fabric.** ``rail``: the NICs of one name (``mlx5_3``) on every host plug into one leaf, ``tor0.{j}``
  for the j-th name (host 0's NICs ordered by the first GPU that uses them, then names first met on
  later hosts); ``single-leaf``: every NIC into ``leaf0``; ``none``: no network (one host only).

The ids follow the named specs (``gpu{rank}``, ``nvs0.{h}``, ``tor0.{j}``), and so does the order,
so a probed DGX H100 is the very topology ``dgx-h100:H`` (same fingerprint).

Examples
--------
>>> from synth.topologies.probe.nvidia_smi import parse_topo_matrix
>>> m = parse_topo_matrix("GPU0 GPU1 mlx5_0\\nGPU0 X NV4 PIX\\nGPU1 NV4 X PIX\\nmlx5_0 PIX PIX X\\n"
...                       "Legend:\\n X = Self\\n NV# = NVLinks\\n PIX = one bridge\\n", source="t")
>>> r = probe_topology([HostProbe("n0", m), HostProbe("n1", m)], nvlink_gbps=200.0, nic_gbps=200.0)
>>> r.topology.nranks, r.topology.link("gpu0", "gpu1").gbps, r.topology.link("nic0.0", "tor0.0").gbps
(4, 800.0, 200.0)
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from synth.errors import TopologyError, short_repr
from synth.topologies.model import Link, Node, NodeKind, Topology
from synth.topologies.named import NIC_LATENCY_US, NVSWITCH_LATENCY_US, positive_value
from synth.topologies.probe.gpus import MAX_NVLINKS_PER_GPU, GpuModel, gpu_model
from synth.topologies.probe.ibstat import HcaPort
from synth.topologies.probe.nvidia_smi import PCIE_LEVELS, Relation, TopoMatrix
from synth.topologies.probe.pcie import pcie_tree

__all__ = ["DEFAULT_PCIE_GBPS", "FABRICS", "PCIE_LATENCY_US", "HostProbe", "ProbeResult", "ProbedNic",
           "probe_topology"]

#: The fabrics beyond the NICs :func:`probe_topology` can build.
FABRICS: tuple[str, ...] = ("rail", "single-leaf", "none")

#: PCIe Gen4 x16, each direction, where neither the GPU model nor an option says otherwise.
DEFAULT_PCIE_GBPS = 252.0
PCIE_LATENCY_US = 0.5


@dataclass(frozen=True, slots=True)
class HostProbe:
    """What was collected on one host: its matrix, optionally its HCA ports and GPU names."""

    name: str
    matrix: TopoMatrix
    ports: tuple[HcaPort, ...] | None = None
    ports_source: str | None = None
    gpu_names: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class ProbedNic:
    """A NIC in the topology: its rate and the host-local GPU indices whose nearest NIC it is."""

    name: str
    gbps: float
    gpus: tuple[int, ...]


@dataclass(frozen=True)
class ProbeResult:
    """The topology, the NICs used per host (in rail order), warnings about the inputs (a NIC down
    or missing), and notes: the values assumed because no tool states them, NICs left out by rule."""

    topology: Topology
    nics: tuple[tuple[ProbedNic, ...], ...]
    warnings: tuple[str, ...]
    notes: tuple[str, ...]


class _Notes:
    """Warnings and notes, each once, in the order first met."""

    def __init__(self) -> None:
        self.warnings: dict[str, None] = {}
        self.notes: dict[str, None] = {}

    def warn(self, text: str) -> None:
        self.warnings.setdefault(text, None)

    def note(self, text: str) -> None:
        self.notes.setdefault(text, None)


class _Wiring:
    """Nodes and cables in insertion order; a cable laid twice adds its capacity (two NICs of one
    GPU into one leaf are one wider link)."""

    def __init__(self) -> None:
        self.nodes: list[Node] = []
        self.links: dict[tuple[str, str], tuple[float, float]] = {}

    def cable(self, a: str, b: str, gbps: float, latency_us: float) -> None:
        for key in ((a, b), (b, a)):
            old = self.links.get(key, (0.0, 0.0))
            self.links[key] = (old[0] + gbps, max(old[1], latency_us))

    def topology(self, name: str, meta: dict[str, object]) -> Topology:
        links = [Link(s, d, g, lat) for (s, d), (g, lat) in self.links.items()]
        return Topology.create(name, self.nodes, links, meta)


def _natural(name: str) -> tuple[object, ...]:
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


def _model(host: HostProbe) -> GpuModel | None:
    if host.gpu_names is None:
        return None
    m = host.matrix
    if len(host.gpu_names) != len(m.gpus):
        raise TopologyError(f"host {host.name!r}: the GPU list names {len(host.gpu_names)} GPU(s), "
                            f"{m.source} has {len(m.gpus)}")
    models = {gpu_model(n) for n in host.gpu_names}
    if len(models) > 1:
        raise TopologyError(f"host {host.name!r}: GPUs of different models {sorted({*host.gpu_names})}; "
                            "a probed host must have one model")
    return models.pop()


def _pcie_level(m: TopoMatrix, a: str, b: str) -> int | None:
    rel = m.cell(a, b).relation
    return PCIE_LEVELS.index(rel) if rel in PCIE_LEVELS else None


def _nic_rates(host: HostProbe, selection: Sequence[str] | None, nic_gbps: float | None,
               notes: _Notes) -> dict[str, float]:
    """The NICs of the host that may be used, with their rates."""
    m = host.matrix
    names = list(m.nics)
    if selection is not None:
        unknown = [n for n in selection if n not in names]
        if unknown:
            raise TopologyError(f"{m.source}: no NIC {', '.join(map(repr, unknown))} in the matrix "
                                f"(NICs: {', '.join(names) or 'none'})")
        names = [n for n in names if n in selection]
    out: dict[str, float] = {}
    for nic in names:
        rate, stated = nic_gbps, False
        if host.ports is not None:
            ports = [p for p in host.ports if p.hca == nic]
            if not ports:
                notes.warn(f"{nic}: not in {host.ports_source}; left out")
                continue
            live = [p for p in ports if p.active]
            if not live:
                states = ", ".join(f"port {p.port} {p.state}" for p in ports)
                notes.warn(f"{nic}: no active port in {host.ports_source} ({states}); left out")
                continue
            if all(p.rate_gbps is not None for p in live):
                rate, stated = sum(p.rate_gbps or 0.0 for p in live), True
            elif rate is None:
                raise TopologyError(f"{host.ports_source}:{live[0].line}: {nic} port {live[0].port} states no "
                                    "rate (use `ibstat` or `ibv_devinfo -v`), or give --nic-gbps")
        if rate is None:
            raise TopologyError(f"{m.source}: the rate of NIC {nic} is unknown: give --ibstat/--ibv-devinfo "
                                "output or --nic-gbps (or --fabric none: one host, no network)")
        if rate <= 0:
            raise TopologyError(f"{nic}: rate must be > 0 Gbit/s, got {rate!r}")
        if not stated:
            notes.note(f"NIC rate {rate:g} Gbit/s (--nic-gbps)")
        out[nic] = rate
    return out


def _nics(host: HostProbe, rates: dict[str, float], notes: _Notes) -> tuple[ProbedNic, ...]:
    """NICs that are some GPU's nearest, in rail order (by first GPU, then name)."""
    m = host.matrix
    users: dict[str, list[int]] = {n: [] for n in rates}
    for g, gpu in enumerate(m.gpus):
        levels = {n: _pcie_level(m, gpu, n) for n in rates}
        best = min((lv for lv in levels.values() if lv is not None), default=None)
        for n, lv in levels.items():
            if lv == best:
                users[n].append(g)
    for n, gs in users.items():
        if not gs:
            notes.note(f"{n} left out: no GPU of {m.source} has it as its nearest NIC")
    used = [ProbedNic(n, rates[n], tuple(gs)) for n, gs in users.items() if gs]
    return tuple(sorted(used, key=lambda nic: (nic.gpus[0], _natural(nic.name))))


def _nvlink(m: TopoMatrix, model: GpuModel | None, nvlink_gbps: float | None,
            notes: _Notes) -> tuple[bool, list[tuple[int, int, float]]]:
    """(on an NVSwitch?, NVLink cables (gpu a, gpu b, Gbit/s))."""
    pairs = [(a, b, m.cells[a][b].nvlinks) for a in range(len(m.gpus)) for b in range(a + 1, len(m.gpus))
             if m.cells[a][b].relation is Relation.NVLINK]
    if not pairs:
        return False, []
    per_link = nvlink_gbps
    if per_link is None:
        per_link = model.nvlink_gbps_per_link if model is not None else None
        if per_link is None:
            what = "the GPU model has no NVLink figure" if model is not None else "the GPU model is unknown"
            raise TopologyError(f"{m.source}: GPUs are joined by NVLink (NV{pairs[0][2]}) but {what}: give the "
                                "output of `nvidia-smi -L` (--gpu-list) or --nvlink-gbps")
        notes.note(f"NVLink {per_link:g} Gbit/s per link ({model.name if model else '?'}, each direction)")
    else:
        notes.note(f"NVLink {per_link:g} Gbit/s per link (--nvlink-gbps)")
    g = len(m.gpus)
    counts = {k for _, _, k in pairs}
    bound = model.nvlinks_per_gpu if model is not None and model.nvlinks_per_gpu else MAX_NVLINKS_PER_GPU
    if model is not None and max(counts) > bound:
        raise TopologyError(f"{m.source}: NV{max(counts)} joins two GPUs, but the {model.name} has {bound} NVLinks "
                            "per GPU: is the GPU list from the same host?")
    switched = len(pairs) == g * (g - 1) // 2 and len(counts) == 1 and g > 2 and counts.pop() * (g - 1) > bound
    return switched, [(a, b, k * per_link) for a, b, k in pairs]


def _connected(n: int, pairs: list[tuple[int, int, float]]) -> bool:
    seen, todo = {0}, [0]
    while todo:
        u = todo.pop()
        for a, b, _ in pairs:
            for x, y in ((a, b), (b, a)):
                if x == u and y not in seen:
                    seen.add(y)
                    todo.append(y)
    return len(seen) == n


def _pcie_rate(model: GpuModel | None, pcie_gbps: float | None, notes: _Notes) -> float:
    if pcie_gbps is not None:
        notes.note(f"PCIe {pcie_gbps:g} Gbit/s per x16 link (--pcie-gbps)")
        return pcie_gbps
    if model is not None:
        notes.note(f"PCIe {model.pcie_gbps:g} Gbit/s per x16 link ({model.name})")
        return model.pcie_gbps
    notes.note(f"PCIe {DEFAULT_PCIE_GBPS:g} Gbit/s per x16 link (Gen4; GPU model unknown)")
    return DEFAULT_PCIE_GBPS


def _wire_host(w: _Wiring, h: int, rank0: int, host: HostProbe, nics: tuple[ProbedNic, ...],
               leaf: list[str], opts: _Options, notes: _Notes) -> None:
    m = host.matrix
    model = _model(host)
    switched, cables = _nvlink(m, model, opts.nvlink_gbps, notes)
    gpu = [f"gpu{rank0 + g}" for g in range(len(m.gpus))]
    nvs = f"nvs0.{h}"
    if switched:
        w.nodes.append(Node(nvs, NodeKind.SWITCH, role="nvswitch"))
    tree = not _connected(len(m.gpus), cables)
    own: dict[int, list[int]] = {}  # GPU -> the NICs that are its alone: its direct links into the fabric
    for j, nic in enumerate(nics):
        if not tree and len(nic.gpus) == 1:
            own.setdefault(nic.gpus[0], []).append(j)
    for g, gid in enumerate(gpu):
        w.nodes.append(Node(gid, NodeKind.GPU, rank0 + g, h))
        if switched:
            w.cable(gid, nvs, cables[0][2], NVSWITCH_LATENCY_US)
        else:
            for a, b, gbps in cables:
                if a == g:
                    w.cable(gid, gpu[b], gbps, NVSWITCH_LATENCY_US)
        for j in own.get(g, []):
            w.cable(gid, leaf[j], nics[j].gbps, NIC_LATENCY_US)
    owned = {j for js in own.values() for j in js}
    nic_id = {j: f"nic{h}.{j}" for j in range(len(nics)) if j not in owned}
    if not tree and not nic_id:
        return  # no PCIe link to lay (and no PCIe rate to assume)
    pcie = _pcie_rate(model, opts.pcie_gbps, notes)
    for j, node_id in nic_id.items():
        w.nodes.append(Node(node_id, NodeKind.SWITCH, role="nic"))
        w.cable(node_id, leaf[j], nics[j].gbps, NIC_LATENCY_US)
        if not tree:
            for g in nics[j].gpus:
                w.cable(gpu[g], node_id, pcie, PCIE_LATENCY_US)
    if tree:
        _wire_pcie(w, h, m, gpu, {nics[j].name: node for j, node in nic_id.items()}, pcie)


def _wire_pcie(w: _Wiring, h: int, m: TopoMatrix, gpu: list[str], nic_node: dict[str, str], pcie: float) -> None:
    devices = [*m.gpus, *nic_node]
    node_of = {**dict(zip(m.gpus, gpu)), **nic_node}
    groups, parent, attach = pcie_tree(devices, lambda a, b: _pcie_level(m, a, b), len(PCIE_LEVELS))
    ids = [f"pcie{h}.{k}" for k in range(len(groups))]
    w.nodes.extend(Node(i, NodeKind.SWITCH, role="nvswitch") for i in ids)
    for k, p in enumerate(parent):
        if p is not None:
            w.cable(ids[k], ids[p], pcie, PCIE_LATENCY_US)
    for d in devices:
        if d in attach:
            w.cable(node_of[d], ids[attach[d]], pcie, PCIE_LATENCY_US)


@dataclass(frozen=True, slots=True)
class _Options:
    nvlink_gbps: float | None
    pcie_gbps: float | None


def _positive_or_none(value: float | None, what: str) -> float | None:
    return None if value is None else positive_value(value, what)


def probe_topology(
    hosts: Sequence[HostProbe],
    *,
    fabric: str = "rail",
    nvlink_gbps: float | None = None,
    pcie_gbps: float | None = None,
    nic_gbps: float | None = None,
    nics: Sequence[str] | None = None,
    name: str | None = None,
) -> ProbeResult:
    """The topology of these hosts (ranks host by host, GPU index order), see the module docstring.

    Parameters
    ----------
    hosts
        One :class:`HostProbe` per host, in rank order (the same probe may repeat: identical hosts).
    fabric
        One of :data:`FABRICS`: ``rail`` (default), ``single-leaf`` or ``none`` (one host only).
    nvlink_gbps, pcie_gbps
        Per-link NVLink and per-x16 PCIe Gbit/s (each direction); default from the GPU model.
    nic_gbps
        NIC rate where no port output states one.
    nics
        Use only these NICs (device names such as ``mlx5_0``); default all.
    name
        Topology name; default ``probe-{hosts}x{gpus}``.

    Raises
    ------
    TopologyError
        An unknown fabric or NIC; a speed that is needed but neither stated nor given; several hosts
        with ``fabric="none"`` or a host without a usable NIC; the validator's own errors.
    """
    if fabric not in FABRICS:
        raise TopologyError(f"unknown fabric {short_repr(fabric)}; choose one of {', '.join(FABRICS)}")
    hosts = tuple(hosts)
    if not hosts or not all(isinstance(h, HostProbe) for h in hosts):
        raise TopologyError("probe_topology needs at least one HostProbe")
    if fabric == "none" and len(hosts) > 1:
        raise TopologyError(f"fabric 'none' joins no hosts, but {len(hosts)} hosts were given; "
                            "choose --fabric rail or single-leaf")
    opts = _Options(_positive_or_none(nvlink_gbps, "nvlink_gbps"), _positive_or_none(pcie_gbps, "pcie_gbps"))
    nic_gbps = _positive_or_none(nic_gbps, "nic_gbps")
    notes = _Notes()
    per_host: list[tuple[ProbedNic, ...]] = []
    for host in hosts:
        used = () if fabric == "none" else _nics(host, _nic_rates(host, nics, nic_gbps, notes), notes)
        if fabric != "none" and not used and len(hosts) > 1:
            raise TopologyError(f"host {host.name!r} ({host.matrix.source}) has no usable NIC to join the others")
        per_host.append(used)
    # A rail is a NIC name: the same slot on identical hosts is cabled to the same rail switch.
    rails = list(dict.fromkeys(nic.name for used in per_host for nic in used))
    leaves = [f"tor0.{j}" for j in range(len(rails))] if fabric == "rail" else ["leaf0"] if rails else []
    w = _Wiring()
    rank0 = 0
    for h, (host, used) in enumerate(zip(hosts, per_host)):
        leaf = [leaves[rails.index(nic.name)] if fabric == "rail" else leaves[0] for nic in used]
        _wire_host(w, h, rank0, host, used, leaf, opts, notes)
        rank0 += len(host.matrix.gpus)
    w.nodes.extend(Node(lf, NodeKind.SWITCH, role="tor") for lf in leaves)
    if fabric != "none":
        notes.note(f"fabric {fabric}: " + ("the NICs of one name on every host into one leaf tor0.j" if fabric == "rail"
                                            else "every NIC into one leaf, leaf0"))
    gpus_per_host = {len(h.matrix.gpus) for h in hosts}
    default = f"probe-{len(hosts)}x{gpus_per_host.pop()}" if len(gpus_per_host) == 1 else f"probe-{rank0}"
    meta: dict[str, object] = {
        "probe": {
            "fabric": fabric,
            "hosts": [h.name for h in hosts],
            "nics": [[nic.name for nic in used] for used in per_host],
            "gpu_models": [None if (md := _model(h)) is None else md.name for h in hosts],
        }
    }
    topo = w.topology(name or default, meta)
    return ProbeResult(topo, tuple(per_host), tuple(notes.warnings), tuple(notes.notes))

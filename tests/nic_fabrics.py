"""Multi-NIC fabrics that are not named specs, as a user would write them (topology JSON, no roles).

Each builder returns ``(doc, nic_cables)``: the topology document (docs/topology.md) and the
(host side, network side) node pairs of every NIC cable, so tests can check each NIC's load without
asking the code under test where the NICs are. H100-like numbers: NVSwitch 3600 Gbit/s per GPU,
400 Gbit/s NICs, the latencies of ``dgx-h100``.
"""

from __future__ import annotations

from typing import Any

Doc = dict[str, Any]
Cables = list[tuple[str, str]]

NVS_GBPS, NIC_GBPS, PCIE_GBPS = 3600.0, 400.0, 512.0


def _cable(a: str, b: str, gbps: float, latency_us: float) -> list[dict[str, Any]]:
    return [{"src": a, "dst": b, "gbps": gbps, "latency_us": latency_us},
            {"src": b, "dst": a, "gbps": gbps, "latency_us": latency_us}]


def _hosts(doc: Doc, hosts: int, gpus: int) -> None:
    for h in range(hosts):
        doc["nodes"].append({"id": f"nvs{h}", "kind": "switch"})
        for i in range(gpus):
            r = h * gpus + i
            doc["nodes"].append({"id": f"g{r}", "kind": "gpu", "rank": r, "host": h})
            doc["links"] += _cable(f"g{r}", f"nvs{h}", NVS_GBPS, 0.025)


def leaf_fabric(hosts: int = 2, gpus: int = 8, *, nic_gpus: tuple[int, ...] | None = None,
                leaf_of: Any = None, spine_gbps: float | None = None, name: str = "one-leaf") -> tuple[Doc, Cables]:
    """GPU-direct NICs (GPU i of each host in ``nic_gpus``, default all) into leaf switches.

    ``leaf_of(host, gpu)`` names the leaf (default: one leaf for all); several leaves hang off one
    spine at ``spine_gbps`` per leaf (default non-blocking).
    """
    doc: Doc = {"name": name, "nodes": [], "links": []}
    _hosts(doc, hosts, gpus)
    where = leaf_of or (lambda h, i: "leaf")
    nic_gpus = tuple(range(gpus)) if nic_gpus is None else nic_gpus
    cables: Cables = []
    leaves: dict[str, int] = {}
    for h in range(hosts):
        for i in nic_gpus:
            leaf = where(h, i)
            leaves[leaf] = leaves.get(leaf, 0) + 1
            doc["links"] += _cable(f"g{h * gpus + i}", leaf, NIC_GBPS, 0.5)
            cables.append((f"g{h * gpus + i}", leaf))
    doc["nodes"] += [{"id": leaf, "kind": "switch"} for leaf in sorted(leaves)]
    if len(leaves) > 1:
        doc["nodes"].append({"id": "spine", "kind": "switch"})
        for leaf, count in sorted(leaves.items()):
            doc["links"] += _cable(leaf, "spine", spine_gbps or count * NIC_GBPS, 0.5)
    return doc, cables


def shared_nic_fabric(hosts: int = 2, gpus: int = 8, nics: int = 2, *, rails: bool = False) -> tuple[Doc, Cables]:
    """``nics`` NICs per host, each a NIC switch shared by ``gpus // nics`` GPUs (PCIe), into one
    leaf (or, with ``rails``, NIC j of every host into rail switch j)."""
    doc: Doc = {"name": "shared-nics", "nodes": [], "links": []}
    _hosts(doc, hosts, gpus)
    cables: Cables = []
    for h in range(hosts):
        for j in range(nics):
            nic, leaf = f"nic{h}.{j}", f"rail{j}" if rails else "leaf"
            doc["nodes"].append({"id": nic, "kind": "switch"})
            doc["links"] += _cable(nic, leaf, NIC_GBPS, 0.5)
            cables.append((nic, leaf))
        for i in range(gpus):
            doc["links"] += _cable(f"g{h * gpus + i}", f"nic{h}.{i * nics // gpus}", PCIE_GBPS, 0.1)
    doc["nodes"] += [{"id": leaf, "kind": "switch"} for leaf in sorted({leaf for _, leaf in cables})]
    return doc, cables

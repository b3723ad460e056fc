"""The canned tool outputs of tests/vectors/probe, read and parsed."""

from __future__ import annotations

from pathlib import Path

from synth.topologies.probe import (
    HcaPort,
    HostProbe,
    parse_gpu_names,
    parse_ibstat,
    parse_ibv_devinfo,
    parse_topo_matrix,
)

VECTORS = Path(__file__).resolve().parents[3] / "vectors" / "probe"


def text(name: str) -> str:
    return (VECTORS / name).read_text(encoding="utf-8")


def ports(name: str) -> tuple[HcaPort, ...]:
    parse = parse_ibv_devinfo if "ibv_devinfo" in name else parse_ibstat
    return parse(text(name), source=name)


def host(topo: str, port_file: str | None = None, gpus: str | None = None, name: str = "node") -> HostProbe:
    """The HostProbe of these vector files."""
    return HostProbe(
        name,
        parse_topo_matrix(text(topo), source=topo),
        None if port_file is None else ports(port_file),
        port_file,
        None if gpus is None else parse_gpu_names(text(gpus), source=gpus),
    )


def dgx(port_file: str = "dgx-h100.ibstat.txt", name: str = "node") -> HostProbe:
    return host("dgx-h100.topo.txt", port_file, "dgx-h100.gpus.txt", name)

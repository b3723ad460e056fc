"""``loopcoll topo probe``: a topology JSON from ``nvidia-smi topo -m``, ``ibstat``/``ibv_devinfo``, a host list.

Reading files (``-`` is stdin, ``{host}`` in a path is replaced by each host of ``--hostfile``) and
printing live here; parsing and building are :mod:`synth.topologies.probe`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from loopcoll._common import check_outputs, positive_number
from synth.errors import LoopcollError, TopologyError
from synth.topologies import Topology, topology_to_json, write_topology
from synth.topologies.probe import (
    FABRICS,
    HostProbe,
    ProbeResult,
    parse_gpu_names,
    parse_ibstat,
    parse_ibv_devinfo,
    parse_topo_matrix,
    probe_topology,
)

__all__ = ["add_probe_parser", "read_hostfile"]

_INPUTS = ("nvidia_smi_topo", "ibstat", "ibv_devinfo", "gpu_list", "hostfile")


def _gbps(text: str) -> float:
    return positive_number(text, "Gbit/s")


def _count(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text[:40]!r}")
    return int(text)


class _Inputs:
    """Reads each input file once; ``-`` is stdin."""

    def __init__(self, args: argparse.Namespace) -> None:
        self._cache: dict[str, tuple[str, str]] = {}
        stdin = [f"--{k.replace('_', '-')}" for k in _INPUTS if getattr(args, k) == "-"]
        if len(stdin) > 1:
            both = "both" if len(stdin) == 2 else "all"
            raise LoopcollError(f"{' and '.join(stdin)} {both} read stdin ('-'); give all but one of them a file")

    def read(self, path: str, flag: str) -> tuple[str, str]:
        """(text, name for messages)."""
        if path not in self._cache:
            if path == "-":
                self._cache[path] = (sys.stdin.read(), "<stdin>")
            else:
                try:
                    self._cache[path] = (Path(path).read_text(encoding="utf-8"), path)
                except (OSError, UnicodeDecodeError) as exc:
                    raise LoopcollError(f"{flag} {path}: cannot read: {exc}") from exc
        return self._cache[path]


def read_hostfile(text: str, source: str) -> list[str]:
    """Host names, one per line (the first word; ``#`` comments and blank lines skipped), each once.

    >>> read_hostfile("# rack 3\\nnode01 slots=8\\nnode02\\n", "hosts.txt")
    ['node01', 'node02']
    """
    names: list[str] = []
    where: dict[str, int] = {}
    for no, line in enumerate(text.splitlines(), start=1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        if words[0] in where:
            raise TopologyError(f"{source}:{no}: host {words[0]!r} already on line {where[words[0]]}")
        where[words[0]] = no
        names.append(words[0])
    if not names:
        raise TopologyError(f"{source}: no host names")
    return names


def _hosts(args: argparse.Namespace, inputs: _Inputs) -> list[str]:
    if args.hostfile is not None:
        return read_hostfile(*inputs.read(args.hostfile, "--hostfile"))
    return [f"host{h}" for h in range(args.hosts)]


def _probe(args: argparse.Namespace, inputs: _Inputs, host: str, templated: bool) -> HostProbe:
    def text(path: str | None, flag: str) -> tuple[str, str] | None:
        if path is None:
            return None
        if "{host}" in path:
            if not templated:
                raise LoopcollError(f"{flag} {path!r}: '{{host}}' needs --hostfile (per-host files)")
            path = path.replace("{host}", host)
        return inputs.read(path, flag)

    topo = text(args.nvidia_smi_topo, "--nvidia-smi-topo")
    assert topo is not None  # a required option
    matrix = parse_topo_matrix(topo[0], source=topo[1])
    ports = None
    ports_source = None
    for flag, path, parse in (("--ibstat", args.ibstat, parse_ibstat), ("--ibv-devinfo", args.ibv_devinfo,
                                                                      parse_ibv_devinfo)):
        got = text(path, flag)
        if got is not None:
            ports, ports_source = parse(got[0], source=got[1]), got[1]
    gpus = text(args.gpu_list, "--gpu-list")
    names = None if gpus is None else parse_gpu_names(gpus[0], source=gpus[1])
    return HostProbe(host, matrix, ports, ports_source, names)


def _nic_lines(result: ProbeResult) -> list[str]:
    lines: list[str] = []
    previous = None
    for h, nics in enumerate(result.nics):
        if nics == previous:
            continue
        previous = nics
        label = "every host" if all(n == nics for n in result.nics) else f"host {h}"
        listed = "; ".join(f"{n.name} {n.gbps:g} Gbit/s <- GPU {','.join(map(str, n.gpus))}" for n in nics)
        lines.append(f"  NICs ({label}): {listed or 'none'}")
    return lines


def _run(args: argparse.Namespace, describe: Callable[[Topology], str]) -> int:
    if args.output != "-":
        check_outputs(output=args.output)
    inputs = _Inputs(args)
    hosts = _hosts(args, inputs)
    templated = args.hostfile is not None
    probes = [_probe(args, inputs, h, templated) for h in hosts]
    nics = None if args.nics is None else [n.strip() for n in args.nics.split(",") if n.strip()]
    result = probe_topology(probes, fabric=args.fabric, nvlink_gbps=args.nvlink_gbps, pcie_gbps=args.pcie_gbps,
                            nic_gbps=args.nic_gbps, nics=nics, name=args.name)
    for warning in result.warnings:
        print(f"loopcoll: warning: {warning}", file=sys.stderr)
    topo = result.topology
    summary = [describe(topo), *_nic_lines(result), *(f"  note: {a}" for a in result.notes)]
    if args.output == "-":
        sys.stdout.write(topology_to_json(topo))
        print("\n".join(summary), file=sys.stderr)
    else:
        write_topology(topo, args.output)
        print("\n".join(summary))
        print(f"wrote {args.output}: {topo.name}, {topo.nranks} GPUs, {len(topo.links)} links")
    return 0


def add_probe_parser(
    tsub: argparse._SubParsersAction,  # type: ignore[type-arg]
    describe: Callable[[Topology], str],
) -> None:
    """Add ``topo probe`` to the ``topo`` subcommands (``describe`` prints the summary)."""
    p = tsub.add_parser(
        "probe",
        help="build a topology JSON from nvidia-smi topo -m, ibstat/ibv_devinfo and a host list",
        description="Build a topology JSON from what can be collected on a node: `nvidia-smi topo -m`, "
        "`ibstat` or `ibv_devinfo -v`, `nvidia-smi -L`, and a host list (hosts are identical unless a path "
        "holds '{host}', replaced by each name of --hostfile). '-' reads stdin. See docs/topology.md, "
        "'Probing a node'.",
    )
    p.add_argument("--nvidia-smi-topo", metavar="FILE", required=True, help="output of `nvidia-smi topo -m`")
    ports = p.add_mutually_exclusive_group()
    ports.add_argument("--ibstat", metavar="FILE", help="output of `ibstat` (port state and rate per HCA)")
    ports.add_argument("--ibv-devinfo", metavar="FILE",
                       help="output of `ibv_devinfo -v` (without -v it states no rate: add --nic-gbps)")
    p.add_argument("--gpu-list", metavar="FILE",
                   help="output of `nvidia-smi -L` or `nvidia-smi --query-gpu=name --format=csv` (the GPU model "
                   "gives NVLink and PCIe speeds)")
    hosts = p.add_mutually_exclusive_group()
    hosts.add_argument("--hosts", metavar="N", type=_count, default=1, help="number of identical hosts (default 1)")
    hosts.add_argument("--hostfile", metavar="FILE", help="host names, one per line (first word; # comments)")
    p.add_argument("--fabric", choices=FABRICS, default="rail",
                   help="the network beyond the NICs: rail (default; the NICs of one name, e.g. mlx5_3, on every "
                   "host into one leaf), "
                   "single-leaf (every NIC into one leaf), none (one host, no network)")
    p.add_argument("--nics", metavar="NAME,...", help="use only these NICs (e.g. mlx5_0,mlx5_3); default all")
    p.add_argument("--nvlink-gbps", metavar="GBIT", type=_gbps,
                   help="NVLink Gbit/s per link, each direction (default from the GPU model)")
    p.add_argument("--pcie-gbps", metavar="GBIT", type=_gbps,
                   help="PCIe Gbit/s per x16 link, each direction (default from the GPU model, else 252)")
    p.add_argument("--nic-gbps", metavar="GBIT", type=_gbps,
                   help="NIC rate where ibstat/ibv_devinfo state none (or none is given)")
    p.add_argument("--name", help="topology name (default probe-HxG)")
    p.add_argument("-o", "--output", metavar="FILE", required=True,
                   help="output topology JSON (written atomically; '-' for stdout, the summary then goes to stderr)")
    p.set_defaults(func=lambda args: _run(args, describe))

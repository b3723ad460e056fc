"""``loopcoll topo show|export|probe``: inspect a topology, write it as JSON, or build one from tool output."""

from __future__ import annotations

import argparse
from collections import Counter

from loopcoll._common import add_topology_args, print_json, topology_from_args
from loopcoll._probe import add_probe_parser
from synth.baselines import baseline_choice
from synth.topologies import Topology, topology_to_dict, write_topology

__all__ = ["describe", "register"]


def describe(topo: Topology) -> str:
    """The ``topo show`` summary of a topology."""
    lines = [
        f"topology {topo.name}  (fingerprint {topo.fingerprint})",
        f"  {topo.nranks} GPUs, {len(topo.switches)} switches, {len(topo.links)} links "
        f"({len(topo.live_links)} up)",
    ]
    hosts = sorted({g.host for g in topo.gpus if g.host is not None})
    if hosts:
        lines.append(f"  hosts: {len(hosts)}")
    classes = Counter((lk.gbps, lk.latency_us) for lk in topo.links)
    lines.append("  link classes (Gbit/s, latency us: count):")
    for (gbps, lat), count in sorted(classes.items(), key=lambda kv: (-kv[0][0], kv[0][1])):
        lines.append(f"    {gbps:>9g} Gbit/s  {lat:>6g} us  x{count}")
    choice = baseline_choice(topo)
    lines.append(f"  NCCL-like baseline: {_BASELINE_TEXT[choice.kind]}: {choice.reason}")
    down = [f"{lk.src}->{lk.dst}" for lk in topo.links if lk.gbps == 0]
    if down:
        lines.append("  down: " + ", ".join(down))
    return "\n".join(lines)


#: What each baseline kind of :func:`synth.baselines.baseline_choice` builds, for ``topo show``.
_BASELINE_TEXT = {
    "rail": "rail rings (one channel per NIC), direct AllToAll with PXN",
    "nic": "NIC rings (one channel per NIC), direct AllToAll with PXN",
    "generic": "generic ring (2 channels), direct AllToAll relayed through GPUs",
}


def _show(args: argparse.Namespace) -> int:
    topo = topology_from_args(args)
    if args.json:
        choice = baseline_choice(topo)
        print_json({
            "name": topo.name, "fingerprint": topo.fingerprint, "nranks": topo.nranks,
            "nccl_baseline": {"kind": choice.kind, "reason": choice.reason},
            "topology": topology_to_dict(topo),
        })
    else:
        print(describe(topo))
    return 0


def _export(args: argparse.Namespace) -> int:
    topo = topology_from_args(args)
    write_topology(topo, args.output)
    print(f"wrote {args.output}: {topo.name}, {topo.nranks} GPUs, {len(topo.links)} links")
    return 0


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``topo show``, ``topo export`` and ``topo probe``."""
    topo = sub.add_parser("topo", help="show, export or probe a topology",
                          description="Show or export a topology, or build one from nvidia-smi/ibstat output.")
    tsub = topo.add_subparsers(dest="topo_command", metavar="ACTION", parser_class=type(topo))
    tsub.required = True
    show = tsub.add_parser("show", help="summarise a topology", description="Summarise a topology.")
    add_topology_args(show)
    show.add_argument("--json", action="store_true",
                      help="print one JSON object: name, fingerprint, nranks, nccl_baseline {kind, reason} and "
                      "topology (the file format; topo export writes it as a file)")
    show.set_defaults(func=_show)
    export = tsub.add_parser(
        "export", help="write a topology as JSON", description="Write a topology in the JSON format of docs/topology.md."
    )
    add_topology_args(export)
    export.add_argument("-o", "--output", metavar="FILE", required=True, help="output JSON file (written atomically)")
    export.set_defaults(func=_export)
    add_probe_parser(tsub, describe)

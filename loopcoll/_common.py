"""Arguments and helpers shared by the CLI subcommands."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from synth.errors import TopologyError
from synth.topologies import FAILURES, NAMED_SPECS, Topology, load_topology

__all__ = ["add_topology_args", "print_json", "topology_from_args"]

SPEC_HELP = "a named spec (" + ", ".join(NAMED_SPECS) + ") or a topology JSON file"


def add_topology_args(p: argparse.ArgumentParser) -> None:
    """``SPEC`` and repeatable ``--fail F``."""
    p.add_argument("spec", metavar="SPEC", help=SPEC_HELP)
    p.add_argument(
        "--fail",
        metavar="F",
        action="append",
        default=[],
        help="apply a failure scenario first (" + ", ".join(FAILURES) + "); repeatable",
    )
    p.add_argument(
        "--ranks",
        metavar="R,R,...",
        type=parse_ranks,
        default=None,
        help="run on the communicator of these global ranks (re-ranked 0..k-1 in this order)",
    )
    p.add_argument("--relay", action="store_true", help="with --ranks: the other GPUs may forward data")


def parse_ranks(text: str) -> list[int]:
    """``"0,2,4"`` -> ``[0, 2, 4]``; a clear error otherwise."""
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--ranks must be comma-separated integers, got {text!r}") from None


def topology_from_args(args: argparse.Namespace, *, failures: bool = True) -> Topology:
    """The topology of ``SPEC`` (with ``--fail`` scenarios unless ``failures=False``), restricted to
    the communicator of ``--ranks`` when given."""
    topo = load_topology(args.spec, args.fail if failures else ())
    ranks = getattr(args, "ranks", None)
    if ranks is not None:
        return topo.communicator(ranks, relay=args.relay)
    if getattr(args, "relay", False):
        raise TopologyError("--relay needs --ranks")
    return topo


def print_json(doc: Any) -> None:
    """One JSON object on stdout, keys sorted."""
    json.dump(doc, sys.stdout, sort_keys=True)
    sys.stdout.write("\n")

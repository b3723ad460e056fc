"""Arguments and helpers shared by the CLI subcommands."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

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


def topology_from_args(args: argparse.Namespace) -> Topology:
    return load_topology(args.spec, args.fail)


def print_json(doc: Any) -> None:
    """One JSON object on stdout, keys sorted."""
    json.dump(doc, sys.stdout, sort_keys=True)
    sys.stdout.write("\n")

"""Arguments and helpers shared by the CLI subcommands."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from synth.errors import LoopcollError, TopologyError
from synth.topologies import FAILURES, NAMED_SPECS, Topology, load_topology

__all__ = ["add_topology_args", "check_outputs", "positive_seconds", "print_json", "topology_from_args",
           "xml_chunk_cap"]

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


def check_outputs(**paths: str | None) -> None:
    """Refuse an empty output path and two outputs naming the same file (one would be lost).

    >>> check_outputs(output="a.xml", schedule_out=None)
    >>> check_outputs(output="")
    Traceback (most recent call last):
    ...
    synth.errors.LoopcollError: --output: an empty path names no file
    """
    import os

    seen: dict[str, str] = {}
    for name, path in paths.items():
        if path is None:
            continue
        flag = "--" + name.replace("_", "-")
        if not path.strip():
            raise LoopcollError(f"{flag}: an empty path names no file")
        real = os.path.realpath(path)
        if real in seen:
            raise LoopcollError(f"{seen[real]} and {flag} both name {path!r}: one output would overwrite the other")
        seen[real] = flag


def positive_seconds(text: str) -> float:
    """argparse type of ``--time-limit``: a finite number of seconds > 0.

    >>> positive_seconds("2.5")
    2.5
    """
    import math

    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds > 0, got {text[:40]!r}")
    return value


def xml_chunk_cap(runtime: str, nranks: int) -> int:
    """Most chunks per source the MSCCL ``runtime`` addresses on ``nranks`` GPUs (int16 buffer offsets).

    >>> xml_chunk_cap("msccl-executor-nccl", 256)
    128
    """
    from msccl_xml import runtime_limits

    return (runtime_limits(runtime).max_offset + 1) // nranks

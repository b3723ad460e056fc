"""Arguments and helpers shared by the CLI subcommands."""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from typing import Any

from synth.errors import LoopcollError, TopologyError
from synth.figures import (
    AllToAllFigures,
    DepthFigures,
    RoutedAllToAllFigures,
    RoutedTreeFigures,
    binding_limit_of,
    routing_of,
)
from synth.result import SynthResult
from synth.topologies import FAILURES, NAMED_SPECS, Topology, load_topology

__all__ = ["add_topology_args", "check_outputs", "parse_size", "parse_sizes", "positive_seconds", "print_json",
           "result_json", "topology_from_args"]

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


def positive_number(text: str, unit: str) -> float:
    """A finite number > 0 from a command-line string, else an argparse error naming ``unit``.

    >>> positive_number("400", "Gbit/s")
    400.0
    """
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a finite number of {unit} > 0, got {text[:40]!r}")
    return value


def positive_seconds(text: str) -> float:
    """argparse type of ``--time-limit``: a finite number of seconds > 0.

    >>> positive_seconds("2.5")
    2.5
    """
    return positive_number(text, "seconds")


_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}


def parse_size(text: str) -> int:
    """``"128M"`` → 134217728 (nccl-tests convention: binary units).

    >>> parse_size("1G"), parse_size("4K"), parse_size("100")
    (1073741824, 4096, 100)
    """
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([KMG]?)i?B?\s*", text, flags=re.IGNORECASE)
    if not m or float(m.group(1)) <= 0:
        raise LoopcollError(f"bad message size {text!r}: expected e.g. 1M, 128M, 1G")
    return int(float(m.group(1)) * _UNITS[m.group(2).upper()])


def parse_sizes(text: str) -> list[int]:
    """``--sizes`` ``"1M,64M"`` → ``[1048576, 67108864]``; an empty list is an error.

    >>> parse_sizes("4K, 1M")
    [4096, 1048576]
    """
    sizes = [parse_size(s) for s in text.split(",") if s.strip()]
    if not sizes:
        raise LoopcollError("--sizes is empty")
    return sizes


def result_json(collective: str, topo_name: str, nranks: int, result: SynthResult) -> dict[str, object]:
    """The ``--json`` object of ``loopcoll synth``."""
    sched = result.schedule
    doc: dict[str, object] = {
        "collective": collective,
        "topology": topo_name,
        "nranks": nranks,
        "nchunks": None if sched is None else sched.nchunks,
        "algbw_GBps": result.algbw_GBps,
        "optimal_algbw_GBps": result.optimal_algbw_GBps,
        "solve_time_s": result.solve_time_s,
        "warm": result.warm,
        "status": result.status.value,
        "gap_pct": result.gap_pct,
    }
    figures = result.figures.inner if isinstance(result.figures, DepthFigures) else result.figures
    routing = routing_of(figures)
    doc["routing"] = "free" if routing is None else "routed"
    if routing is not None:
        doc.update(routed_optimal_algbw_GBps=routing.routed_optimal_algbw_GBps, **routing.tail())
    if isinstance(figures, AllToAllFigures | RoutedTreeFigures | RoutedAllToAllFigures):
        doc["binding_limit"] = binding_limit_of(figures)
    if collective == "alltoall":
        lp = figures if isinstance(figures, AllToAllFigures | RoutedAllToAllFigures) else None
        doc["lp_algbw_GBps"] = result.optimal_algbw_GBps if lp is None else lp.lp_algbw_GBps
        doc["gap"] = result.gap_pct / 100.0 if lp is None else lp.gap
    if sched is not None and "global_ranks" in sched.meta:  # a communicator (--ranks)
        doc["global_ranks"] = list(sched.meta["global_ranks"])
    return doc

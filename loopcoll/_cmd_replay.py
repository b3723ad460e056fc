"""``loopcoll replay``: the closed-loop timeline (flow simulator + in-process controller) over a scenario."""

from __future__ import annotations

import argparse
from pathlib import Path

from loopcoll._common import print_json
from loopcoll._progress import ProgressLine
from synth.errors import LoopcollError

__all__ = ["register"]

PRESETS = ("fail1", "fail2", "fail3", "transient")


def _run(args: argparse.Namespace) -> int:
    from runtime.scenarios.timeline import (
        format_table,
        load_scenario,
        plot_timeline,
        preset_scenario,
        run_timeline,
        scenario_from_dict,
    )

    if args.scenario in PRESETS and not Path(args.scenario).exists():
        doc = preset_scenario(args.scenario, topology=args.topology or "hpn:1x2x8", collective=args.collective,
                              size_per_rank_bytes=args.size_per_rank)
        if args.duration is not None:
            doc["duration_s"] = args.duration
        scenario = scenario_from_dict(doc)
    else:
        if args.duration is not None:
            raise LoopcollError("--duration applies to preset scenarios; edit duration_s in the scenario file")
        scenario = load_scenario(args.scenario, topology=args.topology)
    with ProgressLine("replay", quiet=args.quiet) as bar:
        result = run_timeline(scenario, store_dir=args.store, progress=bar)
    if args.plot:
        plot_timeline(result, args.plot)
    if args.json:
        print_json(result.to_dict())
    else:
        print(format_table(result))
        if args.plot:
            print(f"\nplot: {args.plot}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``replay``."""
    p = sub.add_parser(
        "replay",
        help="closed-loop timeline: simulated collectives, capacity changes, the controller reacting",
        description="Run a stream of collectives in the flow simulator while a scenario changes link capacities; "
        "the controller ingests the simulated telemetry, detects, re-synthesizes and publishes versions that take "
        "effect at the next collective. Re-synthesis wall time is charged to the simulated clock. SCENARIO is a "
        "loopcoll.scenario/1 file (docs/controller.md) or a preset: " + ", ".join(PRESETS) + ".",
    )
    p.add_argument("scenario", metavar="SCENARIO", help="scenario JSON file or preset name")
    p.add_argument("--topology", metavar="SPEC", help="override the scenario's topology (presets: hpn:1x2x8)")
    p.add_argument("--collective", choices=("allgather", "alltoall", "allreduce", "reducescatter"),
                   default="allgather", help="presets: the collective to run (default allgather)")
    p.add_argument("--size-per-rank", type=int, default=16 << 20, metavar="BYTES",
                   help="presets: input bytes per rank (default 16 MiB)")
    p.add_argument("--duration", type=float, default=None, metavar="S", help="presets: simulated seconds")
    p.add_argument("--store", metavar="DIR", help="keep the version store here (default: a temporary directory)")
    p.add_argument("--plot", metavar="FILE.png", help="draw algbw over time with changes, flags and swaps")
    p.add_argument("--json", action="store_true", help="print one JSON object (rows, decisions, figures)")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(func=_run)

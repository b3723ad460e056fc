"""``loopcoll calibrate``: fit a simulator cost profile to measurements and print the fit per point.

Inputs (repeatable, any mix): nccl-tests ``*_perf`` stdout files (``FILE[@SHAPE]``, SHAPE one of
``ring``, ``tree``, ``direct``: the schedule the measured kernel ran; default ``direct`` for
AllToAll, else ``ring``), NCCL Inspector JSONL logs (``--inspector FILE``, ``.gz`` too; kernel
times) and loopcoll telemetry JSONL (``--telemetry FILE``, ``coll`` samples). The profile format
is ``loopcoll.calibration/1`` (docs/calibration.md).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from loopcoll._common import print_json
from loopcoll._progress import ProgressLine
from synth.errors import LoopcollError
from synth.fileio import write_text_atomic

if TYPE_CHECKING:
    from synth.simulation.calibration import Calibration
    from synth.simulation.costmodel import CostProfile

__all__ = ["register"]


def _observations(args: argparse.Namespace) -> list:
    from synth.simulation.calibration import (
        SHAPES,
        Observation,
        default_executor,
        parse_inspector,
        parse_nccl_tests,
        parse_telemetry,
        reference_schedule,
    )

    spec = args.topology
    nranks = reference_schedule("alltoall", spec, "direct").nranks if spec else None
    obs: list[Observation] = []
    for item in args.inputs:
        path, _, shape = item.partition("@")
        if shape and shape not in SHAPES:
            raise LoopcollError(f"{item}: unknown schedule shape {shape!r}; choose from {', '.join(SHAPES)}")
        p = Path(path)
        if not p.is_file():
            raise LoopcollError(f"{path}: no such nccl-tests output file")
        table = parse_nccl_tests(p.read_text(errors="replace"), where=path, collective=args.collective)
        coll = table["collective"]
        if table["nranks"] is not None and nranks is not None and table["nranks"] != nranks:
            raise LoopcollError(f"{path}: measured on {table['nranks']} ranks but topology {spec!r} has {nranks}")
        sh = shape or ("direct" if coll == "alltoall" else "ring")
        kind = args.executor or default_executor(coll, sh)
        obs += [Observation(coll, spec, kind, sh, size, t, f"{p.name}") for size, t, _ in table["rows"]
                if size >= args.min_bytes]
    if args.inspector:
        window = None
        if args.window:
            try:
                lo, hi = (float(x) for x in args.window.split(":"))
            except ValueError:
                raise LoopcollError(f"--window {args.window!r}: expected START_US:END_US") from None
            window = (lo, hi)
        for (coll, size), d in parse_inspector(args.inspector, window_us=window).items():
            if nranks is not None and d["nranks"] != nranks:
                raise LoopcollError(f"Inspector records of {coll} come from {d['nranks']} ranks; topology {spec!r} has {nranks}")
            sh = "direct" if coll == "alltoall" else "ring"
            if size >= args.min_bytes:
                obs.append(Observation(coll, spec, args.executor or default_executor(coll, sh), sh, size, d["time_us"],
                                       f"inspector ({d['records']} records)", "kernel"))
    if args.telemetry:
        for (coll, size, native), d in parse_telemetry(args.telemetry).items():
            sh = "direct" if coll == "alltoall" or not native else "ring"
            if coll in ("allreduce", "reducescatter") and sh == "direct":
                continue  # no direct schedule for reductions
            kind = args.executor or (default_executor(coll, sh) if native else "torch_p2p")
            if size >= args.min_bytes:
                obs.append(Observation(coll, spec, kind, sh, size, d["time_us"], f"telemetry ({d['records']} samples)"))
    if not obs:
        raise LoopcollError("no measurements: give nccl-tests files, --inspector or --telemetry")
    return obs


def _quality_lines(cal: Calibration, nrows: int) -> list[str]:
    """The fit quality: every parameter (``<- at upper bound`` marks), median and worst error, rows used."""
    out = [f"fit quality: {nrows} row(s) used; median |error| {100 * cal.median_error:.2f}%, "
           f"worst |error| {100 * cal.worst_error:.2f}%"]
    for p in cal.params:
        mark = f"  <- at {p.at_bound} bound [{p.lower:g}, {p.upper:g}]" if p.at_bound else ""
        out.append(f"  {p.name:<28} {p.value:>12.4f}  {p.status}{mark}")
    return out


def _run(args: argparse.Namespace) -> int:
    from synth.simulation.calibration import fit_profile
    from synth.simulation.costmodel import load_profile, profile_to_dict

    if not args.topology:
        raise LoopcollError("--topology is required: the fabric the measurements ran on (e.g. nvswitch:8)")
    for flag, value in (("--max-median-error", args.max_median_error), ("--max-worst-error", args.max_worst_error)):
        if not value > 0:
            raise LoopcollError(f"{flag} must be > 0 (a fraction: 0.15 = 15 %), got {value!r}")
    obs = _observations(args)
    base = load_profile(args.base)
    fixed: dict[str, set[str]] = {}
    for item in args.fix or []:
        kind, _, param = item.partition(".")
        if not param:
            raise LoopcollError(f"--fix {item!r}: expected EXECUTOR.PARAM, e.g. nccl_ring.hop_us")
        fixed.setdefault(kind, set()).add(param)
    with ProgressLine("calibrate", quiet=args.quiet) as bar:
        cal = fit_profile(obs, name=args.name, base=base, fixed=fixed, loo=args.loo,
                          description=f"fitted by loopcoll calibrate on {args.topology}", progress=bar)
    why = cal.implausible(max_median_error=args.max_median_error, max_worst_error=args.max_worst_error)
    fit = {**cal.profile.fit, "quality": {"rows": len(obs), "median_abs_error": cal.median_error,
                                          "worst_abs_error": cal.worst_error, "implausible": why,
                                          "forced": bool(why) and args.force}}
    profile = replace(cal.profile, fit=fit, base=args.base)
    if not args.json:
        _print_fit(cal, profile, obs, args)
    if why and not args.force:
        hint = ("the topology may not match the measurements (check --topology: its link capacities and ranks)"
                if any("bound" in w for w in why) else "the measurements may be noisy or the shape wrong (FILE@SHAPE)")
        raise LoopcollError(f"implausible fit, nothing written: {'; '.join(why)}; {hint}, or pass --force to keep it")
    if why:
        print(f"loopcoll: warning: implausible fit kept (--force): {'; '.join(why)}", file=sys.stderr)
    if args.output:
        write_text_atomic(args.output, json.dumps(profile_to_dict(profile), indent=1, sort_keys=True) + "\n")
    if args.json:
        print_json(profile_to_dict(profile))
    elif args.output:
        print(f"wrote {args.output}")
    return 0


def _print_fit(cal: Calibration, profile: CostProfile, obs: list, args: argparse.Namespace) -> None:
    print(f"profile {profile.name!r} on {args.topology}: {cal.message}")
    for kind, c in profile.executors.items():
        if any(o.executor == kind for o in obs):
            eff = ", ".join(f"{k} {v:.4f}" for k, v in c.efficiency.items())
            st = {p: cal.status.get(f"{kind}.{p}", "prior") for p in ("launch_us", "hop_us")}
            print(f"  {kind}: launch {c.launch_us:.3f} us ({st['launch_us']}), hop {c.hop_us:.3f} us ({st['hop_us']}), "
                  f"efficiency {eff}")
    if profile.inherited:
        print(f"  other executors ({', '.join(profile.inherited)}) copied from base profile {args.base!r}")
    head = f"{'source':<28} {'coll':<13} {'shape':<6} {'size':>12} {'meas us':>10} {'model us':>10} {'error':>8} {'LOO':>8}"
    print(head)
    for p in cal.points:
        o = p.observation
        loo = "-" if p.loo_error is None else f"{100 * p.loo_error:+.2f}%"
        print(f"{o.source[:28]:<28} {o.collective:<13} {o.shape:<6} {o.nbytes:>12d} {o.time_us:>10.2f} {p.model_us:>10.2f} "
              f"{100 * p.error:>+7.2f}% {loo:>8}")
    loo = {"step": " (one Gauss-Newton step from the full fit)", "refit": " (refitted)", "off": " (off)"}[args.loo]
    print(f"error = model algbw / measured algbw - 1; LOO = the same for a fit without that point{loo}")
    for line in _quality_lines(cal, len(obs)):
        print(line)


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``calibrate``."""
    p = sub.add_parser(
        "calibrate",
        help="fit a simulator cost profile to nccl-tests, Inspector or telemetry measurements",
        description="Fit launch, per-hop and link-efficiency costs (a loopcoll.calibration/1 profile) to measured "
        "collective times, and print the fit with per-point and leave-one-out errors.",
    )
    p.add_argument("inputs", nargs="*", metavar="FILE[@SHAPE]", help="nccl-tests output (shape: ring, tree or direct)")
    p.add_argument("--topology", metavar="SPEC", help="the fabric measured (named spec, SPEC@FAILURE, or JSON file)")
    p.add_argument("--inspector", action="append", metavar="LOG", help="NCCL Inspector JSONL log (.gz ok); repeatable")
    p.add_argument("--window", metavar="START_US:END_US", help="keep Inspector records dumped in this window")
    p.add_argument("--telemetry", action="append", metavar="JSONL", help="loopcoll.telemetry/1 samples; repeatable")
    p.add_argument("--collective", choices=("allgather", "alltoall", "allreduce", "reducescatter"),
                   help="collective of nccl-tests files that do not name it")
    p.add_argument("--executor", choices=("nccl_ring", "nccl_tree", "nccl_p2p", "msccl", "torch_p2p"),
                   help="executor kind of every input (default: NCCL's kernel for the shape)")
    p.add_argument("--base", default="h200", metavar="PROFILE",
                   help="profile whose values unfitted terms keep and whose other executors the profile copies "
                   "(default h200; ideal for none)")
    p.add_argument("--fix", action="append", metavar="EXECUTOR.PARAM", help="keep this parameter at --base's value")
    p.add_argument("--min-bytes", type=int, default=1, metavar="B", help="ignore sizes below B bytes")
    p.add_argument("--name", default="calibrated", help="profile name (default calibrated)")
    p.add_argument("-o", "--output", metavar="PROFILE.json", help="write the profile here")
    p.add_argument("--loo", choices=("step", "refit", "off"), default="step",
                   help="leave-one-out errors: step = one Gauss-Newton step from the full fit per point (default; no "
                   "refit, one simulation per point), refit = a warm-started refit per point (slow on large fabrics), off")
    p.add_argument("--no-loo", dest="loo", action="store_const", const="off", help="same as --loo off")
    p.add_argument("--max-median-error", type=float, default=0.15, metavar="F",
                   help="refuse a fit whose median |error| exceeds F, a fraction (default 0.15)")
    p.add_argument("--max-worst-error", type=float, default=0.5, metavar="F",
                   help="refuse a fit whose worst |error| exceeds F, a fraction (default 0.5)")
    p.add_argument("--force", action="store_true",
                   help="write an implausible fit (parameters at bounds, errors past the limits) with a warning")
    p.add_argument("--json", action="store_true", help="print the profile as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(func=_run)

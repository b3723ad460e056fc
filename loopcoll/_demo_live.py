"""``loopcoll demo --live``: the whole loop on real processes (needs torch: ``pip install loopcoll[runtime]``).

Starts the loopcoll daemon (in this process, 127.0.0.1) and N gloo executor processes wired through the
daemon's client, runs a training-like loop (AllGather + AllToAll per step) on an emulated topology scaled to
CPU speeds, injects a failure mid-run, prints a live view (progress, algbw per window, detector state,
versions, decisions) and at the end the timeline table; with ``--out-dir`` writes ``live.png`` and
``live.json`` there (nothing is written without it). Every process it starts ends with it (Ctrl-C too).
``docs/live.md`` explains the figures.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from loopcoll._common import parse_size
from synth.errors import LoopcollError
from synth.fileio import write_text_atomic

__all__ = ["add_live_arguments", "run_live_demo"]


def add_live_arguments(p: argparse.ArgumentParser) -> None:
    """The ``--live`` options of ``loopcoll demo``."""
    g = p.add_argument_group("live loop (--live; needs the runtime extra: pip install loopcoll[runtime])")
    g.add_argument("--live", action="store_true",
                   help="run the closed loop live: daemon + executor processes (gloo), injected failure, hot-swap")
    g.add_argument("--steps", type=int, default=3000, metavar="N", help="training steps (default 3000)")
    g.add_argument("--fault-at", type=int, default=None, metavar="STEP", help="inject at this step (default steps/3)")
    g.add_argument("--clear-at", type=int, default=None, metavar="STEP",
                   help="clear at this step (default 2*steps/3; -1: never)")
    g.add_argument("--transient", type=int, default=0, metavar="STEPS",
                   help="also inject a transient of this many steps at steps/6 (the loop must not swap)")
    g.add_argument("--allgather-size", default="1M", metavar="SIZE", help="AllGather output bytes (default 1M)")
    g.add_argument("--alltoall-size", default="1M", metavar="SIZE", help="AllToAll buffer bytes (default 1M)")
    g.add_argument("--gbps-scale", type=float, default=1000.0, metavar="X",
                   help="emulated Gbit/s per real Gbit/s (default 1000: a 400G NIC runs at 50 MB/s)")
    g.add_argument("--window", type=int, default=100, metavar="STEPS", help="steps per live-view line (default 100)")
    g.add_argument("--check-every", type=int, default=0, metavar="K",
                   help="compare outputs with the native collectives every K steps (default 0: never)")


class _View:
    """Prints the live view: one line per window, one per controller decision, and the detector state."""

    def __init__(self, steps: int, stream: Any = None) -> None:
        self.steps = steps
        self.out = stream or sys.stdout
        self.state: dict[str, Any] = {}
        self.t0: float | None = None

    def __call__(self, kind: str, data: dict[str, Any]) -> None:
        if kind == "status":
            self.state = data
            return
        if kind == "window":
            if self.t0 is None:
                self.t0 = data["t_wall"]
            done = data["step"] / data["steps"]
            bar = "#" * int(20 * done) + "." * (20 - int(20 * done))
            short = {"allgather": "ag", "alltoall": "a2a"}
            det = " ".join(f"{short.get(c, c)} {'FLAG' if s['flagged'] else 'ok'} d={s['max_delta']:.2f}"
                           for c, s in self.state.items())
            v = data["versions"]
            print(f"[{bar}] {data['step']:>5}/{data['steps']}  allgather {1e3 * data['allgather_GBps']:6.1f} MB/s "
                  f"v{v['allgather']}  alltoall {1e3 * data['alltoall_GBps']:6.1f} MB/s v{v['alltoall']}  "
                  f"{'FAULT' if data['fault'] else '     '}  detector {det}", file=self.out, flush=True)
            return
        ev = data.get("event")
        if ev in ("bootstrap", "synthesized"):
            return
        t = data.get("t_s", 0.0) - (self.t0 or data.get("t_s", 0.0))
        what = {"flag": f"flags v{data.get('version')}: {data.get('reason')}",
                "publish": f"publishes v{data.get('version')} ({data.get('reason')}; synthesis "
                           f"{1e3 * (data.get('synth_time_s') or 0):.0f} ms)",
                "cooldown": f"v{data.get('version')} in cool-down", "abort": "aborts: degradation cleared",
                "no_gain": f"keeps v{data.get('version')} (no gain)",
                "synthesis_failed": f"synthesis failed: {data.get('error')}"}.get(str(ev), str(ev))
        if ev == "publish" and data.get("version") == 1:
            return
        print(f"    {t:+7.2f}s controller  {data.get('collective')}: {what}", file=self.out, flush=True)


def run_live_demo(args: argparse.Namespace) -> int:
    """``loopcoll demo --live``."""
    try:
        import torch  # noqa: F401
    except ImportError:
        raise LoopcollError("demo --live needs torch: pip install loopcoll[runtime]") from None
    from runtime.scenarios.live import LiveConfig, format_timeline, plot_live, run_live

    steps = args.steps
    if steps < 30:
        raise LoopcollError(f"--steps must be at least 30, got {steps}")
    a = steps // 3 if args.fault_at is None else args.fault_at
    b = 2 * steps // 3 if args.clear_at is None else (None if args.clear_at < 0 else args.clear_at)
    if not 0 < a < steps or (b is not None and not a < b <= steps):
        raise LoopcollError(f"need 0 < --fault-at < --clear-at <= --steps, got {a}, {b}, {steps}")
    faults: list[tuple[int, int | None]] = []
    if args.transient:
        t0 = max(1, steps // 6)
        if t0 + args.transient >= a:
            raise LoopcollError("--transient does not fit before --fault-at")
        faults.append((t0, t0 + args.transient))
    faults.append((a, b))
    failure = (args.fail or ["fail2"])[0]
    topology = args.topology if args.topology != "hpn:1x2x8" else "hpn:1x2x2"
    cfg = LiveConfig(topology=topology, gbps_scale=args.gbps_scale, steps=steps,
                     allgather_bytes=parse_size(args.allgather_size), alltoall_bytes=parse_size(args.alltoall_size),
                     failure=failure, faults=tuple(faults), window=args.window, check_every=args.check_every)
    from runtime.executor.throttle import emulation_from_dict

    emulation_from_dict(cfg.emulation().to_dict())  # a bad topology or failure fails here, before any process starts
    out = None if args.out_dir is None else Path(args.out_dir)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    quiet = args.json or args.quiet
    if not args.quiet:  # with --json the header goes to stderr, keeping stdout one JSON object
        print(f"loopcoll demo --live: {topology} / {args.gbps_scale:g} on {cfg.emulation().nominal().nranks} gloo "
              f"processes, {steps} steps of AllGather {args.allgather_size} + AllToAll {args.alltoall_size}; "
              f"{failure} at step {a}" + (f", cleared at {b}" if b is not None else ""),
              file=sys.stderr if quiet else sys.stdout)
    res = run_live(cfg, on_event=None if quiet else _View(steps))
    if res.status != "ok":
        raise LoopcollError(f"demo --live: {res.message.splitlines()[0][:300]}")
    if out is not None:
        write_text_atomic(str(out / "live.json"), json.dumps(res.to_dict(), default=str) + "\n")
        plot_live(res, out / "live.png")
    if args.json:
        print(json.dumps({"status": res.status, "message": res.message, "timeline": res.timeline}, sort_keys=True))
        return 0
    print()
    print(f"timeline ({res.message}; algbw in MB/s on the emulated links, x{args.gbps_scale:g} for the emulated GB/s)")
    print(format_timeline(res))
    if out is None:
        print("nothing written (--out-dir DIR keeps live.png and live.json)")
    else:
        print(f"wrote {out / 'live.png'} and {out / 'live.json'}")
    return 0

"""Closed loop on the machine: ``loopcoll daemon run`` + one executor per GPU, contention injected, detection and reaction.

1. **Calibrate.** Every rank runs loopcoll's AllGather for ``nvswitch:N`` (in-place MSCCL program) with a
   telemetry sink; the median ``inject`` throughput becomes the capacity of every GPU<->NVSwitch link of the
   daemon's topology (``nvswitch(N, gbps=...)``): the controller judges the measured rates against what this
   machine delivers healthy, not against a nameplate.
2. **Daemon.** ``python -m loopcoll daemon run`` (a separate process: topology file, profile with one
   communicator ``world`` doing AllGather of ``--size``, controller config ``--alpha/--gamma``, token file,
   JSON log file) bootstraps version 1 and pushes it.
3. **Loop.** Every rank follows the daemon (``Executor.follow``: its versions are staged, its samples go to
   the daemon) and runs in-place AllGathers for ``--duration`` s, agreeing versions every ``--sync-every``
   calls. Rank 0 releases a contender process ``--inject-at`` s in (on GPUs: device-to-device copies
   GPU0 -> GPU1 over the GPU0<->GPU1 link; CPU dry run: a busy loop) and stops it at ``--clear-at``.

Figures: detection (contender start -> the daemon's first ``flag``), synthesis time, publish, reaction
(contender start -> the last rank's first collective on the new version), AllGather algbw before / stale
(contended, old version) / adapted (contended, new version) / after clearing, versions, false flags before
the injection. MCCL's anchor (2x4 H200): detects in 53.1 ms, adapts in 24.7 ms, reacts in 78.2 ms.

    python benchmarks/gpu/closed_loop.py                       # every visible GPU, 256 MB AllGather
    python benchmarks/gpu/closed_loop.py --backend gloo        # CPU dry run (figures are not meaningful)
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.gpu import _workers as W  # noqa: E402
from benchmarks.gpu._common import (ROOT, add_common, command_line, environment, fmt_size,  # noqa: E402
                                    launch_workers, parse_size, resolve, write_outputs)
from runtime.executor import ExecutorError  # noqa: E402
from synth.fileio import write_text_atomic  # noqa: E402

TARGETS = ["MCCL anchor (2x4 H200, 16 MB AllGather, one link halved): detection 53.1 ms, adaptation 24.7 ms "
           "(13.1 ms synthesis + 11.6 ms swap), reaction 78.2 ms"]


def _wait(path: Path, timeout_s: float, alive: Any) -> str:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline or not alive():
            raise ExecutorError(f"closed loop: {path.name} did not appear (workers or daemon ended early)")
        time.sleep(0.05)
    return path.read_text().strip()


def _daemon(wd: Path, n: int, size: int, gbps: float, args: argparse.Namespace) -> subprocess.Popen:
    from synth.topologies import nvswitch, write_topology

    topo = wd / "topology.json"
    write_topology(nvswitch(n, gbps=gbps), topo)
    profile = {"format": "loopcoll.profile/1", "topology": str(topo), "communicators": [
        {"name": "world", "ranks": list(range(n)), "collectives": [{"collective": "allgather", "sizes": [size]}]}]}
    write_text_atomic(wd / "profile.json", json.dumps(profile))
    write_text_atomic(wd / "config.json", json.dumps({"alpha": args.alpha, "gamma": args.gamma,
                                                      "cooldown_s": args.cooldown}))
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    cmd = [sys.executable, "-m", "loopcoll", "daemon", "run", "--topology", str(topo), "--profile",
           str(wd / "profile.json"), "--store", str(wd / "store"), "--token-file", str(wd / "token"),
           "--port-file", str(wd / "port"), "--log-file", str(wd / "daemon.jsonl"), "--config",
           str(wd / "config.json"), "--poll-interval-s", str(args.poll)]
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=open(wd / "daemon.err", "w"))  # noqa: SIM115


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def analyse(res: list[dict[str, Any]], log: list[dict[str, Any]], size: int) -> dict[str, Any]:
    """Detection, reaction and algbw phases from the ranks' call logs and the daemon's log."""
    r0 = res[0]
    t_inj, t_clear = r0["t_inject"], r0["t_clear"]
    v1 = min((c[2] for r in res for c in r["calls"] if c[2] is not None), default=None)
    flags = [x for x in log if x.get("event") == "flag"]
    synth = [x for x in log if x.get("event") == "synthesized"]
    pubs = [x for x in log if x.get("event") == "publish" and x.get("t_s") is not None and x.get("version") != v1
            and "collective" in x]
    out: dict[str, Any] = {"initial_version": v1, "t_inject": t_inj, "t_clear": t_clear,
                           "flags": len(flags), "syntheses": len(synth),
                           "false_flags_before_injection": sum(1 for x in flags if t_inj is None or x["t_s"] < t_inj),
                           "versions_seen": sorted({c[2] for r in res for c in r["calls"] if c[2] is not None})}
    if t_inj is not None:
        after = [x for x in flags if x["t_s"] >= t_inj]
        out["detect_ms"] = 1e3 * (after[0]["t_s"] - t_inj) if after else None
        out["detect_calls"] = sum(1 for c in r0["calls"] if t_inj <= c[0] <= after[0]["t_s"]) if after else None
        s_after = [x for x in synth if x["t_s"] >= t_inj]
        out["synth_ms"] = 1e3 * s_after[0]["synth_time_s"] if s_after else None
        p_after = [x for x in pubs if x["t_s"] >= t_inj]
        out["publish_ms"] = 1e3 * (p_after[0]["t_s"] - t_inj) if p_after else None
        firsts = []
        for r in res:
            new = [c[0] for c in r["calls"] if c[0] >= t_inj and c[2] is not None and v1 is not None and c[2] > v1]
            firsts.append(new[0] if new else None)
        out["reaction_ms"] = 1e3 * (max(firsts) - t_inj) if firsts and None not in firsts else None
        t_new = max(firsts) if firsts and None not in firsts else None
    else:
        t_new = None
    calls = r0["calls"]
    t_loop = r0["t_loop"]

    def gbps(lo: float | None, hi: float | None, version_new: bool | None = None) -> float | None:
        if lo is None or hi is None:
            return None
        xs = [size / c[1] / 1e9 for c in calls if lo <= c[0] < hi and
              (version_new is None or (c[2] is not None and v1 is not None and (c[2] > v1) == version_new))]
        return _median(xs)

    end = calls[-1][0] if calls else None
    out["before_GBps"] = gbps(t_loop + 0.5, t_inj)
    out["stale_GBps"] = gbps(t_inj, t_new if t_new else t_clear, version_new=False)
    out["adapted_GBps"] = gbps(t_new, t_clear, version_new=True) if t_new else None
    out["after_clear_GBps"] = gbps(t_clear, end) if t_clear else None
    out["calls"] = len(calls)
    stopped = [x for x in log if x.get("event") == "stopped"]
    out["daemon_samples_received"] = stopped[-1].get("counters", {}).get("samples_received") if stopped else None
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_common(ap)
    gpu_default = "256M / 20 / 6 / 14 s / 20 calls on GPUs"
    ap.add_argument("--size", default=None, help=f"AllGather output bytes ({gpu_default}; 1M on gloo)")
    ap.add_argument("--duration", type=float, default=None, help="loop seconds (20 on GPUs, 8 on gloo)")
    ap.add_argument("--inject-at", type=float, default=None, help="contention starts (s into the loop; 6 / 2.5)")
    ap.add_argument("--clear-at", type=float, default=None, help="contention stops (s into the loop; 14 / 5.5)")
    ap.add_argument("--sync-every", type=int, default=None, help="version agreement every this many calls (20 / 10)")
    ap.add_argument("--calib-calls", type=int, default=None, help="calibration AllGathers (200 / 40)")
    ap.add_argument("--contend-bytes", default=None, help="bytes per contender copy (256M on GPUs, 4M on CPU)")
    ap.add_argument("--alpha", type=float, default=0.012, help="controller EWMA weight (default 0.012, MCCL's)")
    ap.add_argument("--gamma", type=float, default=0.1, help="detector threshold (default 0.1)")
    ap.add_argument("--cooldown", type=float, default=1.0, help="controller cool-down seconds (default 1)")
    ap.add_argument("--poll", type=float, default=0.01, help="daemon poll interval seconds (default 0.01)")
    args = resolve(ap.parse_args(argv))
    gpu = args.backend == "nccl"
    size = parse_size(args.size or ("256M" if gpu else "1M"))
    duration = args.duration or (20.0 if gpu else 8.0)
    inject = args.inject_at if args.inject_at is not None else (6.0 if gpu else 2.5)
    clear = args.clear_at if args.clear_at is not None else (14.0 if gpu else 5.5)
    sync_every = args.sync_every or (20 if gpu else 10)
    calib = args.calib_calls or (200 if gpu else 40)
    contend = parse_size(args.contend_bytes or ("256M" if gpu else "4M"))
    n = args.nprocs
    from msccl_xml import lower
    from synth import named_topology, synthesize

    prog = lower(synthesize("allgather", named_topology(f"nvswitch:{n}")).schedule, inplace=True)
    with tempfile.TemporaryDirectory(prefix="loopcoll-gpu-loop-") as tmp:
        wd = Path(tmp)
        fd = os.open(wd / "token", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_hex(16) + "\n")
        box: dict[str, Any] = {}

        def run() -> None:
            try:
                box["res"] = launch_workers(W.closed_loop, args, prog, str(wd), size, calib, duration, inject, clear,
                                            sync_every, contend)
            except BaseException as exc:  # noqa: BLE001 - re-raised in the main thread
                box["err"] = exc

        th = threading.Thread(target=run, daemon=True)
        th.start()
        daemon = None
        try:
            cal = json.loads(_wait(wd / "calibration.json", args.timeout, th.is_alive))
            gbps = cal["inject_GBps"] * 8  # GB/s -> Gbit/s
            daemon = _daemon(wd, n, size, gbps, args)
            address = _wait(wd / "port", 120, lambda: daemon.poll() is None)
            write_text_atomic(wd / "address", address + "\n")
            th.join(args.timeout)
        finally:
            if daemon is not None:
                daemon.send_signal(signal.SIGTERM)
                try:
                    daemon.wait(30)
                except subprocess.TimeoutExpired:
                    daemon.kill()
        if "err" in box:
            raise box["err"]
        if "res" not in box:
            raise ExecutorError(f"closed loop: workers did not finish within {args.timeout:g} s")
        res = box["res"]
        log = [json.loads(line) for line in (wd / "daemon.jsonl").read_text().splitlines() if line.strip()]
    out = analyse(res, log, res[0]["size_bytes"])
    row = {"ranks": n, "size": fmt_size(res[0]["size_bytes"]), "calibrated_GBps": cal["inject_GBps"], **{
        k: out.get(k) for k in ("detect_ms", "detect_calls", "synth_ms", "publish_ms", "reaction_ms", "before_GBps",
                                "stale_GBps", "adapted_GBps", "after_clear_GBps", "flags", "syntheses",
                                "false_flags_before_injection", "calls", "daemon_samples_received")}}
    row["versions"] = len(out["versions_seen"])
    env = environment(res[0]["env"], args)
    cont_note = (f"Loop {duration:g} s, contention from {inject:g} s to {clear:g} s "
                 f"({'GPU0->GPU1 device copies' if gpu else 'busy loop'} of {fmt_size(contend)}), version agreement "
                 f"every {sync_every} calls, controller alpha={args.alpha:g} gamma={args.gamma:g}. "
                 "detect_ms: contender start -> the daemon's first flag; reaction_ms: -> the last rank's first "
                 "collective on a new version; empty: did not happen. With 2 GPUs there is no other path: a flag "
                 "can only end in the controller's 'no gain' decision (no new version).")
    write_outputs("closed_loop", args, env, command_line("closed_loop.py", argv),
                  [("closed loop (one run)", list(row), [row])], TARGETS,
                  extra={"analysis": out, "calibration": cal, "daemon_log": log[-400:],
                         "swaps": [r["swaps"] for r in res],
                         "samples": [{"sent": r["sent_samples"], "dropped": r["dropped_samples"]} for r in res]},
                  notes=cont_note)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The loop at 128–2048 ranks: telemetry volume vs what the daemon ingests, controller cost, detection, reaction.

    python benchmarks/loop_scale.py [--quick] [--sizes 1x16x8 4x16x8 ...] [--collectives allgather ...]

Per hpn fabric (1x16x8 = 128, 4x16x8 = 512, 8x16x8 = 1024, 16x16x8 = 2048 ranks) and collective
(AllGather, ReduceScatter, AllToAll; S = 64 MiB):

* **schedule**: the synthesized one (``synth.synthesize``, ``--synth-limit-s``) up to ``--synth-max-ranks``
  ranks, the NCCL-like baseline (``runtime.loop.bootstrap.fallback_schedule``) above; deployed as version 1
  (``Controller.deploy``, no bootstrap synthesis).
* **flows/coll**: samples one collective makes the executors emit (``pair`` + ``inject``,
  :mod:`runtime.scenarios.loadgen`); **raw/s** at 10 collectives/s; **agg/s** with source aggregation over
  8 collectives (``loopcoll.telemetry/2``, docs/telemetry.md §5).
* **routing s**: ``ScheduleRouting.build`` of the version (once per version, in a background thread the
  controller starts when the version is deployed or published); **ctl in-proc/s**: records per CPU second of ``Controller.ingest`` + ``poll``
  (grouping, estimator, detector) in this process, one core, after that; **ctl ms/window**: CPU per window.
* **daemon acked/s**: a real daemon (``runtime.serve``) on loopback, fed by ``--senders`` load-generator
  processes (``runtime.scenarios.loadgen.push_windows``: columnar ``aggcols`` batches, docs/telemetry.md §6,
  acknowledged, 5 % noise; ``--relay``: each sender through its own host relay process,
  ``runtime.service.relay``); **daemon 1-core/s**: records per CPU second of the daemon's ingest path (its
  event-loop thread, which reads and decodes the messages, plus its ingest thread, which runs
  ``Controller.ingest``: validation and queueing); **headroom** = daemon 1-core/s ÷ agg/s (target ≥ 2);
  **daemon+poll 1-core/s** and **headroom w/ poll**: the same per CPU second of the whole daemon process,
  its poll thread (grouping, estimator, detector) included (the threads share one GIL); **conns**: connections
  a job needs, one per rank direct or one per host through relays, and how many the daemon answered when one
  per rank connected at once (raw sockets: ``hello``, then idle).
* **RSS**: this process (the daemon and its controller, plus the benchmark's flow tables and the version-1
  schedule it shares with the controller; its own routing is dropped before the controller starts) with every
  connection open, MiB (target ≤ 2048 for the daemon).
* **detect**: collectives from fail2's onset (placed mid-window) to the first flag, aggregated telemetry
  with 5 % noise; **flagged by**: the detector (Algorithm 1) or the periodic recovery check
  (``recovery_check_s``, docs/controller.md §4); **outcome**: ``publish``, ``no_gain``, ``abort`` or
  ``synthesis_failed`` (``publish (budget bound …)``: the re-synthesis ran into ``--reaction-limit-s``,
  ``ControllerConfig.reaction_time_limit_s``, default 3 s, and its incumbent was published; the optimum under
  ``time_limit_s`` follows, not timed here); **synth s**, **publish s**: the wall time of the poll that flagged
  (the warm re-synthesis) and of the poll that published (XML export + store), **resynth s** the
  re-synthesis alone within the first (the manager's ``synthesized`` event); **reaction s** = their sum
  (``--no-reaction`` skips it; ``--no-export`` publishes without XML; ``--time-limit-s`` sets the controller's
  ``time_limit_s``, which a 2048-rank AllToAll needs at about 60 s).

Progress (each phase of a row and its wall time) goes to stderr.

Measured figures depend on the machine's load: the lead re-runs them alone.
"""

from __future__ import annotations

import argparse
import gc
import json
import multiprocessing as mp
import resource
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
from _report import write_results

from runtime import Client, Controller, ControllerConfig, profile_from_dict, serve
from runtime.loop.bootstrap import fallback_schedule
from runtime.loop.estimator import ScheduleRouting
from runtime.scenarios.loadgen import FlowTable, flow_table, push_windows, window_batch
from runtime.service.daemon import DaemonConfig
from synth import Schedule, Topology, load_topology, synthesize

SIZE = 64 << 20
RATE_HZ = 10.0
WINDOW = 8
TOKEN = "loop-scale"
COLUMNS = ("spec", "ranks", "collective", "schedule", "flows/coll", "raw/s", "agg/s", "routing s", "ctl in-proc/s",
           "ctl ms/window", "daemon acked/s", "daemon 1-core/s", "headroom", "daemon+poll 1-core/s",
           "headroom w/ poll", "conns", "RSS MiB", "detect",
           "flagged by", "outcome", "synth s", "resynth s", "publish s", "reaction s")


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _schedule(coll: str, topo: Topology, args: argparse.Namespace) -> tuple[Schedule, str]:
    if topo.nranks <= args.synth_max_ranks:
        res = synthesize(coll, topo, time_limit_s=args.synth_limit_s, chunks=16)
        if res.schedule is not None:
            return res.schedule, "synthesized"
    return fallback_schedule(coll, topo), "baseline"


def _controller(topo: Topology, spec: str, coll: str, store: str, sched: Schedule, export: bool) -> Controller:
    prof = profile_from_dict({"format": "loopcoll.profile/1", "topology": spec, "communicators": [
        {"name": "world", "ranks": list(range(topo.nranks)), "collectives": [{"collective": coll, "sizes": [SIZE]}]}]})
    ctl = Controller(topo, prof, store, config=ControllerConfig(export_xml=export))
    ctl.deploy("world", coll, sched, reason="loop_scale: version 1")
    return ctl


def _in_process(ctl: Controller, table: FlowTable, windows: int) -> tuple[float, float]:
    """Records per CPU second and CPU ms per window of ingest + poll (columnar batches, as a job at scale sends)."""
    rng = np.random.default_rng(1)
    recs = [window_batch(table, seq_first=k * WINDOW, count=WINDOW, t_s=time.time(), period_s=0.1, sigma=0.05,
                         rng=rng) for k in range(windows + 1)]
    ctl.ingest(recs.pop(0))  # the first window builds the version's routing (reported apart) and imports
    ctl.poll()
    c0 = time.process_time()
    for r in recs:
        ctl.ingest(r)
        ctl.poll()
    cpu = max(time.process_time() - c0, 1e-9)
    return sum(len(b) for r in recs for b in r) / cpu, 1e3 * cpu / windows


def _sender(address: str, table: FlowTable, windows: int, seed: int, out: Any) -> None:
    """One load-generator process: ``windows`` windows of its ranks' flows as columnar batches (``aggcols``)."""
    with Client(address, token=TOKEN, timeout_s=120) as client:
        rep = push_windows(client, table, windows=windows, window=WINDOW, seq0=10_000 * WINDOW, seed=seed)
    out.put((rep.records, rep.accepted, rep.wall_s))


def _thread_cpu_s(names: tuple[str, ...]) -> float:
    """CPU seconds (user + system) of this process's threads named ``names`` (/proc/self/task/*/stat)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for t in threading.enumerate():
        if t.name in names and t.native_id is not None:
            fields = Path(f"/proc/self/task/{t.native_id}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def _relays(address: str, n: int, tmp: str) -> tuple[list[subprocess.Popen[bytes]], list[str]]:
    """``n`` host relays (``python -m runtime.service.relay``, real processes on loopback) in front of the daemon."""
    token = Path(tmp) / "token"
    token.write_text(TOKEN + "\n")
    procs, addrs = [], []
    root = Path(__file__).resolve().parent.parent
    for i in range(n):
        port_file = Path(tmp) / f"relay{i}.addr"
        procs.append(subprocess.Popen([sys.executable, "-m", "runtime.service.relay", "--upstream", address,
                                       "--token-file", str(token), "--comms", "world", "--port-file", str(port_file)],
                                      cwd=root, env={**os.environ, "PYTHONPATH": str(root)}))
        deadline = time.monotonic() + 60
        while not port_file.exists() and time.monotonic() < deadline and procs[-1].poll() is None:
            time.sleep(0.05)
        addrs.append(port_file.read_text().strip())
    return procs, addrs


def _daemon(ctl: Controller, store: str, table: FlowTable, args: argparse.Namespace, hosts: int) -> dict[str, Any]:
    """Records/s through a real daemon from ``--senders`` load-generator processes (columnar batches; through one
    host relay process per sender with ``--relay``): acked records per wall second, records per CPU second of
    the daemon's ingest path (its event-loop thread, which decodes messages, and its ingest thread, which runs
    ``Controller.ingest``; one core) and of the whole daemon process (with the poll thread: grouping, estimator,
    detector), RSS, and the connections a job needs with and without relays."""
    ranks = np.unique(table.src)
    parts = [table.of_ranks(chunk.tolist()) for chunk in np.array_split(ranks, args.senders)]
    per = max(2, args.daemon_records * args.senders // max(len(table), 1))  # windows per sender
    n_ranks = int(table.src.max()) + 1
    cfg = DaemonConfig(max_clients=max(64, n_ranks + args.senders + 4), bootstrap=False)
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    relays: list[subprocess.Popen[bytes]] = []
    with serve(ctl, token=TOKEN, store_dir=store, config=cfg, log=lambda r: None) as d, \
            tempfile.TemporaryDirectory() as tmp:
        try:
            targets = [d.address] * args.senders
            if args.relay:
                relays, targets = _relays(d.address, args.senders, tmp)
            base = ctl.status()["counters"]["samples_accepted"]
            ing0, c0, t0 = _thread_cpu_s(_INGEST_THREADS), time.process_time(), time.perf_counter()
            procs = [ctx.Process(target=_sender, args=(a, p, per, i, q)) for i, (a, p) in enumerate(zip(targets, parts))]
            for p in procs:
                p.start()
            got = [q.get(timeout=900) for _ in procs]
            for p in procs:
                p.join()
            if args.relay:  # the relays acknowledge on receipt: wait until the daemon has ingested what they sent
                want = sum(g[1] for g in got)
                deadline = time.monotonic() + 120
                while ctl.status()["counters"]["samples_accepted"] < base + want and time.monotonic() < deadline:
                    time.sleep(0.05)
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            ing = _thread_cpu_s(_INGEST_THREADS) - ing0
        finally:
            for r in relays:
                r.terminate()
                r.wait(timeout=30)
        conns, rss = _connections(d.address, n_ranks) if args.connections else (None, _rss_mib())
    recs = sum(g[1] for g in got)
    held = f"; {conns} held" if conns is not None else ""
    return {"daemon acked/s": recs / max(g[2] for g in got), "daemon 1-core/s": recs / max(ing, 0.01),
            "daemon+poll 1-core/s": recs / max(cpu, 0.01), "RSS MiB": rss, "_wall": wall,  # CPU clocks tick at 10 ms
            "conns": f"{n_ranks} direct, {hosts} via relays{held}" + (" (relayed)" if args.relay else "")}


#: The daemon threads on its ingest path (decode on the event loop, ``Controller.ingest`` on the ingest thread).
_INGEST_THREADS = ("loopcoll-daemon-loop", "loopcoll-daemon-ingest")


def _connections(address: str, n: int) -> tuple[int, float]:
    """Open ``n`` executor connections (raw sockets: ``hello``, then idle, as ranks that only listen for versions)
    to the daemon; returns how many were answered with ``hello`` and the daemon process's RSS with all open."""
    host, port = address.rsplit(":", 1)
    socks: list[socket.socket] = []
    ok = 0
    try:
        for first in range(0, n, 8):  # 8 at a time: the daemon keeps at most 16 connections waiting for a hello
            batch = [socket.create_connection((host, int(port)), timeout=30) for _ in range(min(8, n - first))]
            for r, s in enumerate(batch, start=first):
                s.sendall((json.dumps({"type": "hello", "token": TOKEN, "role": "executor", "rank": r,
                                       "comms": ["world"]}) + "\n").encode())
            for s in batch:
                buf = b""
                while b"\n" not in buf:
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    buf += chunk
                ok += bool(buf) and json.loads(buf.split(b"\n", 1)[0]).get("type") == "hello"
            socks += batch
        return ok, _rss_mib()
    finally:
        for s in socks:
            s.close()


def _detect(topo: Topology, spec: str, coll: str, sched: Schedule, healthy: FlowTable, fail: FlowTable,
            args: argparse.Namespace) -> dict[str, Any]:
    """Collectives from fail2 (onset in the middle of a window; ``fail``: the flows timed on the failed fabric) to
    the flag; the warm re-synthesis and publish."""
    events: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as store:
        prof = profile_from_dict({"format": "loopcoll.profile/1", "topology": spec, "communicators": [
            {"name": "world", "ranks": list(range(topo.nranks)),
             "collectives": [{"collective": coll, "sizes": [SIZE]}]}]})
        cfg = ControllerConfig(export_xml=not args.no_export, reaction_time_limit_s=args.reaction_limit_s,
                               **({} if args.time_limit_s is None else {"time_limit_s": args.time_limit_s}))
        ctl = Controller(topo, prof, store, config=cfg, log=events.append)
        ctl.deploy("world", coll, sched, reason="loop_scale: version 1")
        rng = np.random.default_rng(2)
        t, onset_seq, flagged_at = time.time() + 10.0, 4 * WINDOW + WINDOW // 2, None
        synth_s = publish_s = None
        by = None
        for k in range(40):
            seq = k * WINDOW
            then_from = min(max(onset_seq - seq, 0), WINDOW)
            recs = window_batch(healthy, seq_first=seq, count=WINDOW, t_s=t, period_s=0.1, sigma=0.05, rng=rng,
                                then=fail if then_from < WINDOW else None, then_from=then_from)
            t += WINDOW / RATE_HZ
            ctl.ingest(recs)
            w0 = time.perf_counter()
            pub = ctl.poll(now_s=t)
            wall = time.perf_counter() - w0
            flag = next((e for e in events if e.get("event") == "flag"), None)
            if flagged_at is None and flag is not None:
                flagged_at = seq + WINDOW - onset_seq
                by = "detector" if str(flag.get("reason", "")).startswith("detector") else flag.get("reason", "")[:40]
                synth_s = wall
                if args.no_reaction:
                    break
                t += wall  # the simulated clock lets the job finish at the next poll (its measured duration)
            if pub:
                publish_s = wall
                break
            if flagged_at is not None and any(e.get("event") in ("abort", "no_gain", "synthesis_failed")
                                              for e in events):
                break  # decided without a publication: the row's outcome says which
            if flagged_at is not None and k > 30:
                break
        provisional = ctl.manager.deployed[("world", coll)].provisional
    react = None if synth_s is None or publish_s is None else synth_s + publish_s
    outcome = next((e["event"] for e in events if e.get("event") in ("abort", "no_gain", "synthesis_failed")
                    or (e.get("event") == "publish" and e.get("version", 1) > 1)), None)
    if outcome == "publish" and provisional:
        outcome = "publish (budget bound: the optimum follows)"
    synthesized = next((e for e in events if e.get("event") == "synthesized"), None)
    why = next((e.get("error") or e.get("message") for e in events
                if e.get("event") in ("abort", "no_gain", "synthesis_failed")), None)
    if why:
        print(f"  {outcome}: {why}", file=sys.stderr, flush=True)
    for e in events:
        if e.get("event") in ("synthesized", "no_gain", "reaction_budget_missed", "warm_failed", "xml_deferred",
                              "capped") or e.get("event") == "publish" and e.get("xml_error"):
            print("  " + json.dumps({k: v for k, v in e.items() if k not in ("t_s", "comm")}, default=str)[:400],
                  file=sys.stderr, flush=True)
    return {"detect": flagged_at, "flagged by": by, "outcome": outcome, "synth s": synth_s,
            "resynth s": None if synthesized is None else synthesized["synth_time_s"], "publish s": publish_s,
            "reaction s": react}


def _phase(what: str, t0: float) -> float:
    """Progress on stderr: each phase of a row and its wall time (where a large row spends it)."""
    now = time.perf_counter()
    print(f"  {what}: {now - t0:.1f} s", file=sys.stderr, flush=True)
    return now


def run_case(spec: str, coll: str, args: argparse.Namespace) -> dict[str, Any]:
    t = time.perf_counter()
    topo = load_topology(f"hpn:{spec}")
    sched, kind = _schedule(coll, topo, args)
    t0 = t = _phase(f"hpn:{spec} {coll}: schedule ({kind})", t)
    routing = ScheduleRouting.build(sched, topo)
    routing_s = time.perf_counter() - t0
    table = flow_table(sched, topo, comm="world", version=1, size_bytes=SIZE, routing=routing)
    fail = None if args.no_detect else flow_table(sched, topo, comm="world", version=1, size_bytes=SIZE,
                                                   true=topo.with_failure("fail2"), routing=routing)
    hosts = len(set(routing.host_of.values())) or topo.nranks
    del routing  # the controllers build their own: the RSS figure is theirs, not this script's copy
    gc.collect()
    t = _phase("routing + flow tables", t)
    flows = len(table)
    row: dict[str, Any] = {"spec": f"hpn:{spec}", "ranks": topo.nranks, "collective": coll, "schedule": kind,
                           "flows/coll": flows, "raw/s": flows * RATE_HZ,
                           "agg/s": flows * max(RATE_HZ / WINDOW, 1.0), "routing s": routing_s}
    with tempfile.TemporaryDirectory() as store:
        ctl = _controller(topo, f"hpn:{spec}", coll, store, sched, export=False)
        t = _phase("controller deploy", t)
        row["ctl in-proc/s"], row["ctl ms/window"] = _in_process(ctl, table, args.windows)
        t = _phase("in-process ingest + poll", t)
        row.update({k: v for k, v in _daemon(ctl, store, table, args, hosts).items() if not k.startswith("_")})
        t = _phase("daemon + connections", t)
    row["headroom"] = row["daemon 1-core/s"] / row["agg/s"]
    row["headroom w/ poll"] = row["daemon+poll 1-core/s"] / row["agg/s"]
    if fail is not None:
        row.update(_detect(topo, f"hpn:{spec}", coll, sched, table, fail, args))
        _phase("detection + reaction", t)
    print({k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items()}, flush=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="128 ranks only, small runs")
    ap.add_argument("--sizes", nargs="+", default=["1x16x8", "4x16x8", "8x16x8", "16x16x8"])
    ap.add_argument("--collectives", nargs="+", default=["allgather", "reducescatter", "alltoall"])
    ap.add_argument("--senders", type=int, default=3, help="load-generator processes")
    ap.add_argument("--relay", action="store_true", help="send through one host relay process per sender")
    ap.add_argument("--windows", type=int, default=6, help="windows of records for the in-process figure")
    ap.add_argument("--daemon-records", type=int, default=200_000, help="records each sender pushes (about)")
    ap.add_argument("--synth-max-ranks", type=int, default=128)
    ap.add_argument("--synth-limit-s", type=float, default=60.0)
    ap.add_argument("--no-connections", dest="connections", action="store_false",
                    help="skip opening one connection per rank to the daemon")
    ap.add_argument("--no-detect", action="store_true")
    ap.add_argument("--no-reaction", action="store_true")
    ap.add_argument("--no-export", action="store_true")
    ap.add_argument("--time-limit-s", type=float, default=None,
                    help="the controller's time_limit_s (default: ControllerConfig's, 30 s; a 2048-rank AllToAll "
                         "needs about 60 s)")
    ap.add_argument("--reaction-limit-s", type=float, default=3.0,
                    help="ControllerConfig.reaction_time_limit_s of the detection run (the flag's re-synthesis)")
    ap.add_argument("--out", default="loop_scale")
    args = ap.parse_args()
    if args.quick:
        args.sizes, args.windows, args.daemon_records = ["1x16x8"], 3, 20_000
    cmd = "python benchmarks/loop_scale.py " + " ".join(sys.argv[1:])
    notes = ("Rates in records (samples or aggregates) per second; 10 collectives/s, window 8; daemon figures with "
             "columnar batches (aggcols). Measured under load unless the lead re-ran it alone.")
    rows: list[dict[str, Any]] = []
    for spec in args.sizes:
        for coll in args.collectives:
            rows.append(run_case(spec, coll, args))
            table = write_results(args.out, COLUMNS, rows, cmd.strip(), notes=notes)  # kept if a later row is cut short
    print(table)


if __name__ == "__main__":
    main()

"""The daemon's telemetry ingest path at a given volume: JSON records vs columnar batches, direct vs host relays.

    python benchmarks/telemetry_ingest.py [--ranks 2048] [--flows 537000] [--windows 2] [--senders 2]

A real daemon (``runtime.serve``) on loopback with a controller for one communicator of ``--ranks`` ranks and
no deployed version (so ``poll`` skips the rows as ``unknown_version``: this measures the ingest path alone,
not the estimator), fed by ``--senders`` load-generator processes, each pushing its share of ``--flows``
flows per window (acknowledged ``samples`` messages; the flows are synthetic: ``flows / ranks`` per rank, to
peers spread over the job, with 5 % lognormal timing noise, built by
:func:`runtime.scenarios.loadgen.window_batch`). ``--flows`` defaults to the hpn:16x16x8 AllToAll baseline's
flows per collective (about 537 000, ``benchmarks/loop_scale.py``), so the figure is the ingest side of its
row; ``needed/s`` = flows × 10 / 8 (10 collectives/s, windows of 8).

Per writer (``agg``: one JSON object per record; ``aggcols``: columnar batches of up to 4096 rows, as a relay
forwards them, docs/telemetry.md §6; ``aggcols per rank``: one batch per rank and window, each its own message,
as executors send them without a relay; ``+ relay``: each sender through its own ``runtime.service.relay``
process, which merges them): **ingest 1-core/s** = records per CPU
second of the daemon's event-loop and ingest threads (read, decode, validate, queue), **process 1-core/s** of
the whole daemon process, **headroom** = ingest 1-core/s ÷ needed/s (none when the threads used under 0.2 CPU s: too short to time),
**daemon conns** the connections the daemon accepted, **RSS MiB** of the daemon's process (this one) after the run. Figures depend on the machine's load.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
from _report import write_results
from loop_scale import _INGEST_THREADS, TOKEN, _relays, _rss_mib, _thread_cpu_s

from runtime import Client, Controller, ControllerConfig, profile_from_dict, serve
from runtime.scenarios.loadgen import FlowTable, push_windows
from runtime.service.daemon import DaemonConfig
from synth import load_topology

COLUMNS = ("writer", "ranks", "flows/window", "needed/s", "records", "ingest 1-core/s", "process 1-core/s",
           "headroom", "daemon conns", "RSS MiB")


def synthetic_table(ranks: int, flows: int) -> FlowTable:
    """``flows`` pair flows, ``flows // ranks`` per rank (the rest on the first ranks), to peers spread over the
    job: 16 MiB over 1 ms each (the values do not matter to ingest, only their count)."""
    per, extra = divmod(flows, ranks)
    counts = per + (np.arange(ranks) < extra)
    src = np.repeat(np.arange(ranks), counts)
    j = np.arange(src.size) - np.repeat(np.cumsum(counts) - counts, counts)  # a flow's index within its rank
    dst = (src + 1 + 7 * j) % ranks
    dst = np.where(dst == src, (dst + 1) % ranks, dst)
    n = src.size
    return FlowTable("world", "alltoall", 1, src.astype(np.int64), dst.astype(np.int64),
                     np.full(n, 16 << 20, dtype=np.int64), np.full(n, 1e-3))


def _sender(address: str, table: FlowTable, windows: int, seed: int, writer: str, out: Any) -> None:
    with Client(address, token=TOKEN, timeout_s=300) as client:
        rep = push_windows(client, table, windows=windows, window=8, seed=seed, columnar=writer != "agg",
                           per_rank=writer.startswith("aggcols per rank"))
    out.put((rep.records, rep.accepted, rep.wall_s))


def measure(table: FlowTable, ranks: int, windows: int, senders: int, writer: str) -> dict[str, Any]:
    """One writer's row (module docstring)."""
    spec = "hpn:16x16x8" if ranks == 2048 else f"hpn:{ranks // 128}x16x8"
    topo = load_topology(spec)
    prof = profile_from_dict({"format": "loopcoll.profile/1", "topology": spec, "communicators": [
        {"name": "world", "ranks": list(range(topo.nranks)), "collectives": [{"collective": "alltoall",
                                                                              "sizes": [64 << 20]}]}]})
    parts = [table.of_ranks(c.tolist()) for c in np.array_split(np.arange(ranks), senders)]
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    with tempfile.TemporaryDirectory() as store, tempfile.TemporaryDirectory() as tmp:
        ctl = Controller(topo, prof, store, config=ControllerConfig(export_xml=False))
        with serve(ctl, token=TOKEN, config=DaemonConfig(bootstrap=False, max_clients=senders + 8),
                   log=lambda r: None) as d:
            relays, targets = ([], [d.address] * senders)
            if writer.endswith("relay"):
                relays, targets = _relays(d.address, senders, tmp)
            try:
                ing0, c0 = _thread_cpu_s(_INGEST_THREADS), time.process_time()
                procs = [ctx.Process(target=_sender, args=(a, p, windows, i, writer, q))
                         for i, (a, p) in enumerate(zip(targets, parts))]
                for p in procs:
                    p.start()
                got = [q.get(timeout=900) for _ in procs]
                for p in procs:
                    p.join()
                want = sum(g[1] for g in got)
                deadline = time.monotonic() + 300
                while ctl.status()["counters"]["samples_accepted"] < want and time.monotonic() < deadline:
                    time.sleep(0.05)
                ing, cpu = _thread_cpu_s(_INGEST_THREADS) - ing0, time.process_time() - c0
                conns = d.status()["counters"].get("connections", 0)
            finally:
                for r in relays:
                    r.terminate()
                    r.wait(timeout=30)
        accepted = ctl.status()["counters"]["samples_accepted"]
    needed = len(table) * 10 / 8
    rate = accepted / ing if ing >= _MIN_CPU_S else None  # CPU clocks tick at 10 ms: too short a run is not timed
    return {"writer": writer, "ranks": ranks, "flows/window": len(table), "needed/s": needed, "records": accepted,
            "ingest 1-core/s": rate, "process 1-core/s": accepted / cpu if cpu >= _MIN_CPU_S else None,
            "headroom": None if rate is None else rate / needed, "daemon conns": conns, "RSS MiB": _rss_mib()}


_MIN_CPU_S = 0.2


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=2048)
    ap.add_argument("--flows", type=int, default=537_000)
    ap.add_argument("--windows", type=int, default=2, help="windows each sender pushes")
    ap.add_argument("--senders", type=int, default=2)
    ap.add_argument("--writers", nargs="+", default=["agg", "aggcols", "aggcols + relay"])
    ap.add_argument("--out", default="telemetry_ingest")
    args = ap.parse_args()
    table = synthetic_table(args.ranks, args.flows)
    rows = []
    for w in args.writers:
        rows.append(measure(table, args.ranks, args.windows, args.senders, w))
        print({k: (round(v, 3) if isinstance(v, float) else v) for k, v in rows[-1].items()}, flush=True)
    cmd = "python benchmarks/telemetry_ingest.py " + " ".join(sys.argv[1:])
    print(write_results(args.out, COLUMNS, rows, cmd.strip(), notes=(
        "Synthetic flows (the count of the hpn:16x16x8 AllToAll baseline's, not its schedule's); ingest path only "
        "(no deployed version: the estimator does not run). Measured under load unless re-run alone.")))


if __name__ == "__main__":
    main()

"""The daemon's transport costs with the real controller (not asserted in tests).

    python benchmarks/daemon.py [--repeats 5]

An in-process daemon (:func:`runtime.serve`, real :class:`runtime.Controller` on ``hpn:1x2x4``, one AllGather
of 16 MiB, poll interval 0.05 s) and :class:`runtime.Client` over loopback TCP:

* ``ingest (acked)``: ``Client.push_samples`` of executor-like pair + inject samples (24 per collective), 2000
  per message, each message acknowledged once the controller ingested it: samples per second end to end.
* ``ingest (acked), coll samples``: the same with ``coll`` samples, which the controller validates but never
  folds into link estimates: the transport's own cost.
* ``ingest (fire-and-forget)``: ``Client.send_samples`` then ``flush``: the executors' path (ends when the
  samples are on the socket, so the daemon may still be ingesting).
* ``status round trip``: ``Client.status()`` (controller status + daemon counters).
* ``get``: a 1.5 MiB store file fetched in 512 KiB chunks.
* ``reaction``: 200 collectives of samples (4800) with rank 0's NIC at a quarter of its capacity, pushed in
  acknowledged batches; from sending the first batch to the executor client's ``on_version`` callback with
  the new version (transfer, estimator, detector, re-synthesis, store write, push; the detector fires
  part-way through the samples); ``push`` is the part from the daemon's ``publish`` log record to the
  callback. Every repeat of ``reaction`` uses a fresh store and daemon.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _report import timed, write_results

from runtime import Client, Controller, profile_from_dict, serve
from runtime.formats.store import VersionEntry
from synth import load_topology, read_schedule
from tests.runtime.drill import degraded_samples

SPEC = "hpn:1x2x4"
SIZE_BYTES = 16 << 20
TOKEN = "bench"


def _daemon(store: str, records: list[dict[str, Any]]) -> Any:
    profile = profile_from_dict({"format": "loopcoll.profile/1", "topology": SPEC, "communicators": [
        {"name": "world", "ranks": list(range(8)), "collectives": [{"collective": "allgather", "sizes": [SIZE_BYTES]}]}]})
    controller = Controller(load_topology(SPEC), profile, store)
    return serve(controller, token=TOKEN, store_dir=store, log=records.append)


def _schedule(store: str, entry: VersionEntry) -> Any:
    return read_schedule(os.path.join(store, entry.bands[0].schedule))


def _flat(by_host: dict[int, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    return [s for host in sorted(by_host) for s in by_host[host]]


def transport_rows(repeats: int) -> list[dict[str, Any]]:
    rows = []
    records: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as store, _daemon(store, records) as daemon:
        with Client(daemon.address, token=TOKEN, comms=["world"]) as client:
            entry = client.wait_version("world", "allgather", timeout_s=120)
            assert entry is not None
            healthy = _flat(degraded_samples(_schedule(store, entry), load_topology(SPEC), version=entry.version,
                                             n_collectives=1000, factor=1.0))

            med, times, _ = timed(lambda: client.push_samples(healthy), repeats)
            rows.append({"metric": "ingest (acked)", "median": len(healthy) / med, "unit": "samples/s",
                         "runs": repeats, "detail": f"{len(healthy)} samples per run"})

            coll = [{**x, "kind": "coll", "dst": None} for x in healthy]  # validated, never folded into estimates
            med, times, _ = timed(lambda: client.push_samples(coll), repeats)
            rows.append({"metric": "ingest (acked), coll samples", "median": len(coll) / med, "unit": "samples/s",
                         "runs": repeats, "detail": "wire + validation only: no link estimates"})

            def fire() -> None:
                client.send_samples(healthy)
                assert client.flush(60)

            med, times, _ = timed(fire, repeats)
            rows.append({"metric": "ingest (fire-and-forget)", "median": len(healthy) / med, "unit": "samples/s",
                         "runs": repeats, "detail": f"dropped {client.dropped_samples}"})

            med, times, _ = timed(client.status, 10 * repeats)
            rows.append({"metric": "status round trip", "median": 1e3 * med, "unit": "ms", "runs": 10 * repeats,
                         "detail": ""})

            blob = os.urandom(3 << 19)
            Path(store, "blob.bin").write_bytes(blob)
            med, times, got = timed(lambda: client.get("blob.bin"), repeats)
            assert got == blob
            rows.append({"metric": "get 1.5 MiB", "median": len(blob) / med / 2**20, "unit": "MiB/s",
                         "runs": repeats, "detail": "3 chunks of 512 KiB"})
    return rows


def reaction_once() -> tuple[float, float]:
    records: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as store, _daemon(store, records) as daemon:
        with Client(daemon.address, token=TOKEN, role="executor", rank=0, comms=["world"]) as client:
            v1 = client.wait_version("world", "allgather", timeout_s=120)
            assert v1 is not None
            samples = _flat(degraded_samples(_schedule(store, v1), load_topology(SPEC), version=v1.version,
                                             n_collectives=200))
            arrived: dict[str, float] = {}
            done = threading.Event()

            def on_version(e: VersionEntry) -> None:
                if e.version > v1.version and not done.is_set():
                    arrived["t"] = time.time()
                    done.set()

            client.on_version(on_version)
            t_start = time.time()
            client.push_samples(samples)
            if not done.wait(120):
                raise SystemExit("no new version within 120 s")
        publish = next(r["t_s"] for r in records  # the daemon's record of pushing the new version
                       if r.get("event") == "publish" and r["version"] > v1.version)
    return arrived["t"] - t_start, arrived["t"] - publish


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    rows = transport_rows(args.repeats)
    reactions = [reaction_once() for _ in range(args.repeats)]
    rows.append({"metric": "reaction (first degraded batch sent -> new version at executor)",
                 "median": 1e3 * statistics.median(r[0] for r in reactions), "unit": "ms", "runs": args.repeats,
                 "detail": "4800 samples; estimator, detector, re-synthesis, XML export, push"})
    rows.append({"metric": "push (daemon publish -> executor callback)",
                 "median": 1e3 * statistics.median(r[1] for r in reactions), "unit": "ms", "runs": args.repeats,
                 "detail": ""})
    cmd = "python benchmarks/daemon.py" + ("" if args.repeats == 5 else f" --repeats {args.repeats}")
    table = write_results("daemon", ["metric", "median", "unit", "runs", "detail"], rows, cmd,
                          notes="Loopback TCP on a shared 2-core machine; medians of the runs shown. "
                                "The reaction figure depends on the poll interval (0.05 s) and the controller's "
                                "synthesis time, not only on the transport.")
    print(table)


if __name__ == "__main__":
    main()

"""The controller daemon: serves a :class:`~runtime.Controller` to executors and tools over TCP (wire protocol of
``docs/telemetry.md`` §4).

Design: one **asyncio** event loop on its own thread owns every socket. asyncio rather than selectors plus a
thread per client because the daemon's work per message is small and the client count is moderate: one thread
multiplexes them all, transports give per-connection write-buffer accounting (``pause_writing``) and read
back-pressure (``pause_reading``) for free, and a dropped or garbage-sending client is one callback, not a
thread to reap. Nothing slow runs on the loop:

* ``samples`` batches go to a bounded **ingest queue** served by one ingest thread calling
  ``controller.ingest``. The queue is bounded in message bytes; past its bound the daemon stops reading from
  the clients that push (TCP back-pressure; an executor's :class:`~runtime.service.client.Client` then drops and
  counts in its own bounded queue), so a flood cannot grow the daemon's memory.
* ``controller.poll`` (detector + re-synthesis, possibly seconds) runs on a **poll thread** every
  ``poll_interval_s``; newly published versions are handed to the loop, which pushes them to subscribers.
* ``status`` requests run on a small thread pool (``controller.status`` may wait for a lock ``poll`` holds).

Memory bounds: at most ``max_clients`` authenticated clients (more are refused with an ``error``) plus at most
``max_unauthenticated`` connections still to send their ``hello`` (the oldest makes room for a new one), each
holding at most one message (1 MiB) of unparsed input plus one socket read, at most ``max_pending_requests``
requests in flight (past that the connection is not read, and what was read waits), and at most
``client_write_limit_bytes`` of unsent output (a client that does not read is dropped); the ingest queue holds
at most ``ingest_queue_bytes`` of messages. Time bounds: ``hello_timeout_s`` to authenticate,
``idle_timeout_s`` without a message for an authenticated client (:class:`~runtime.service.client.Client`
pings); failed tokens are rate-limited per host (``runtime.service._guard``). ``docs/controller.md`` §8 lists
them all. Every connection event and decision is one structured
log record (a dict handed to ``log``; the CLI writes JSON lines).

Examples
--------
>>> import tempfile
>>> from runtime import Client, Controller, ControllerConfig, profile_from_dict
>>> from synth import load_topology
>>> profile = profile_from_dict({"format": "loopcoll.profile/1", "topology": "ring:4", "communicators": [
...     {"name": "world", "ranks": [0, 1, 2, 3], "collectives": [{"collective": "allgather", "sizes": [1 << 20]}]}]})
>>> ctl = Controller(load_topology("ring:4"), profile, tempfile.mkdtemp(), config=ControllerConfig(export_xml=False))
>>> with serve(ctl, token="t", log=lambda rec: None) as daemon:
...     with Client(daemon.address, token="t", role="executor", comms=["world"]) as client:
...         entry = client.wait_version("world", "allgather", timeout_s=60)   # bootstrap version, pushed
...         report = client.push_samples([{"kind": "pair"}])                  # the controller validates
...         counters = client.status()["controller"]["counters"]
>>> entry.version, report["rejected"], counters["samples_rejected"]
(1, {'missing_field': 1}, {'missing_field': 1})
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import queue
import sys
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from runtime.errors import WireError
from runtime.formats.identity import StoreLock
from runtime.formats.store import VersionEntry
from runtime.formats.telemetry import IngestReport
from runtime.service._connection import (Connection, band_digests, file_sha256, open_store_file, resolve_store_file,
                                         version_message)
from runtime.service._guard import AuthGuard
from runtime.service.wire import check_token, json_safe

__all__ = ["ControllerLike", "DaemonConfig", "DaemonHandle", "json_log", "resolve_store_file", "serve"]


class ControllerLike(Protocol):
    """What the daemon calls on its controller (:class:`runtime.Controller` has these methods): versions are
    the store's :class:`~runtime.formats.store.VersionEntry`, ingest answers an
    :class:`~runtime.formats.telemetry.IngestReport`."""

    def ingest(self, samples: Iterable[Any]) -> IngestReport: ...
    def poll(self, now_s: float | None = None) -> list[VersionEntry]: ...
    def bootstrap(self) -> list[VersionEntry]: ...
    def latest(self, comm: str | None = None) -> list[VersionEntry]: ...
    def status(self) -> dict[str, Any]: ...
    def prometheus(self) -> str: ...


@dataclass(frozen=True, slots=True)
class DaemonConfig:
    """The daemon's bounds and intervals (``docs/controller.md``, "Limits and timeouts").

    ``max_clients`` bounds authenticated connections; ``max_unauthenticated`` those still to send their
    ``hello`` (each within ``hello_timeout_s``; when that pool is full the oldest is dropped to make room).
    ``idle_timeout_s`` drops an authenticated client that sends nothing (its :class:`Client` pings at a third
    of it; ``None``: never). A host with ``auth_failures_per_window`` wrong tokens within ``auth_window_s`` is
    refused until the window ends.
    """

    poll_interval_s: float = 0.05
    max_clients: int = 64
    ingest_queue_bytes: int = 4 << 20
    client_write_limit_bytes: int = 8 << 20
    max_pending_requests: int = 4
    hello_timeout_s: float = 5.0
    bootstrap: bool = True
    shutdown_grace_s: float = 5.0
    max_unauthenticated: int = 16
    idle_timeout_s: float | None = 60.0
    auth_failures_per_window: int = 10
    auth_window_s: float = 10.0


_LOG_LOCK = threading.Lock()


def json_log(stream: Any = None) -> Callable[[Mapping[str, Any]], None]:
    """A log sink writing each record as one JSON line (keys sorted) to ``stream`` (default stderr)."""

    def write(record: Mapping[str, Any]) -> None:
        line = json.dumps(record, sort_keys=True, separators=(",", ":"), default=str)
        with _LOG_LOCK:
            out = stream if stream is not None else sys.stderr
            out.write(line + "\n")
            out.flush()

    return write


def _entry_dict(entry: VersionEntry) -> dict[str, Any]:
    doc: dict[str, Any] = json_safe(entry.to_dict())
    return doc


def _report_dict(report: IngestReport) -> tuple[int, dict[str, int]]:
    return int(report.accepted), {str(k): int(v) for k, v in dict(report.rejected).items()}


_STOP = object()
_REPEAT_LOG_S = 10.0


class _Daemon:
    """State shared by the loop, ingest, poll and status threads (loop-owned unless noted)."""

    def __init__(self, controller: ControllerLike, token: str, config: DaemonConfig, store_dir: Path | None,
                 refuse_files: tuple[Path, ...], log: Callable[[Mapping[str, Any]], None]) -> None:
        self.controller = controller
        self.token = token.encode("utf-8")
        self.config = config
        self.store_dir = store_dir
        self.refuse_files = refuse_files
        self._log = log
        self.ids = itertools.count(1)
        self.conns: dict[int, Connection] = {}
        self.preauth: dict[int, Connection] = {}  # not yet authenticated, oldest first
        self.paused: dict[int, Connection] = {}  # clients paused for the ingest queue
        self.counters: Counter[str] = Counter()
        self.latest: dict[tuple[str, str], dict[str, Any]] = {}
        self.digests: dict[str, str] = {}  # store path -> sha256 of the files of remembered entries
        self.loop = asyncio.new_event_loop()
        self.auth_guard = AuthGuard(budget=config.auth_failures_per_window, window_s=config.auth_window_s,
                                    loop=self.loop, log=self.log)
        self.stop = threading.Event()
        self.ingest_q: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.q_lock = threading.Lock()
        self.q_bytes = 0  # guarded by q_lock
        self.ingest_totals: Counter[str] = Counter()  # guarded by q_lock
        self.status_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="loopcoll-status")
        self.started_s = time.time()
        self.poll_stats: Counter[str] = Counter()
        self._last_error: str | None = None
        self._last_error_logged = 0.0
        self._error_repeats = 0
        self.last_poll_s: float | None = None
        self.store_lock: StoreLock | None = None

    def log(self, record: Mapping[str, Any]) -> None:
        try:
            self._log({"t_s": round(time.time(), 6), "source": "daemon", **record})
        except Exception:  # a broken log sink must not take the daemon down
            pass

    # --- versions (loop thread) ------------------------------------------------------------------------
    def remember(self, entries: Iterable[VersionEntry]) -> list[dict[str, Any]]:
        fresh = []
        for e in entries:
            doc = _entry_dict(e)
            key = (str(doc["comm"]), str(doc["collective"]))
            old = self.latest.get(key)
            if (old is None or int(doc["version"]) > int(old["version"])) and self.intact(doc):
                self.latest[key] = doc
                self.digests.update(band_digests(doc))
                fresh.append(doc)
        return fresh

    def intact(self, doc: Mapping[str, Any]) -> bool:
        """Whether every file of entry ``doc`` still has its manifest digest (logged and counted if not)."""
        if self.store_dir is None:
            return True
        for path, sha in band_digests(doc).items():
            try:
                with open_store_file(self.store_dir, path, refuse=self.refuse_files)[0] as fh:
                    ok = file_sha256(fh) == sha
            except (OSError, WireError):
                ok = False
            if not ok:
                self.counters["versions_refused"] += 1
                self.log({"event": "version_refused", "comm": doc["comm"], "collective": doc["collective"],
                          "version": doc["version"], "error": f"{path}: missing or not its manifest sha256"})
                return False
        return True

    def publish(self, entries: list[VersionEntry]) -> None:
        for doc in self.remember(entries):
            msg = version_message(doc)
            targets = [c for c in list(self.conns.values()) if c.authed and doc["comm"] in c.comms]
            self.log({"event": "publish", "comm": doc["comm"], "collective": doc["collective"],
                      "version": doc["version"], "clients": len(targets)})
            for conn in targets:
                conn.send(msg)
            self.counters["versions_pushed"] += len(targets)

    # --- ingest ----------------------------------------------------------------------------------------
    def enqueue_samples(self, conn: Connection, msg: dict[str, Any], nbytes: int) -> None:
        with self.q_lock:
            self.q_bytes += nbytes
            over = self.q_bytes > self.config.ingest_queue_bytes
        self.counters["samples_received"] += sum(
            d["n"] if isinstance(d, dict) and d.get("kind") == "aggcols" and type(d.get("n")) is int else 1
            for d in msg["samples"])  # records: a columnar batch counts its rows
        self.ingest_q.put((conn, msg, nbytes))
        if over:
            self.counters["ingest_pauses"] += 1
            self.paused[conn.id] = conn
            conn.pause("ingest")

    def _resume_ingest(self) -> None:
        with self.q_lock:
            if self.q_bytes > self.config.ingest_queue_bytes // 2:
                return
        # Taken out first: a resumed connection handles the messages it had read at once, and one of them may
        # pause it (and list it here) again.
        paused = list(self.paused.values())
        self.paused.clear()
        for conn in paused:
            conn.resume("ingest")

    def ingest_worker(self) -> None:
        while True:
            item = self.ingest_q.get()
            if item is _STOP:
                return
            conn, msg, nbytes = item
            try:
                accepted, rejected = _report_dict(self.controller.ingest(msg["samples"]))
            except Exception as exc:  # the controller promises not to raise; stay up if it does
                accepted, rejected = 0, {"ingest_error": len(msg["samples"])}
                self.log({"event": "ingest_error", "error": repr(exc)[:300]})
            with self.q_lock:
                self.q_bytes -= nbytes
                low = self.q_bytes <= self.config.ingest_queue_bytes // 2
                self.ingest_totals["accepted"] += accepted
                for reason, n in rejected.items():
                    self.ingest_totals[f"rejected_{reason}"] += n
            if low or "id" in msg:
                try:
                    self.loop.call_soon_threadsafe(self._after_ingest, conn, msg.get("id"), accepted, rejected,
                                                   low)
                except RuntimeError:  # loop closed during shutdown
                    return

    def _after_ingest(self, conn: Connection, rid: Any, accepted: int, rejected: dict[str, int], low: bool) -> None:
        if rid is not None:
            conn.send({"type": "samples", "id": rid, "accepted": accepted, "rejected": rejected})
        if low and self.paused:
            self._resume_ingest()

    # --- poll ------------------------------------------------------------------------------------------
    def poll_worker(self) -> None:
        if self.config.bootstrap:
            self._run_poll("bootstrap", self.controller.bootstrap)
        while not self.stop.wait(self.config.poll_interval_s):
            self._run_poll("poll", self.controller.poll)

    def _run_poll(self, what: str, fn: Callable[[], list[VersionEntry]]) -> None:
        t0 = time.perf_counter()
        try:
            entries = list(fn() or [])
        except Exception as exc:  # keep serving: the detector or a synthesis failed this round
            self.poll_stats[f"{what}_errors"] += 1
            error = f"{type(exc).__name__}: {exc}"[:500]
            now = time.monotonic()
            if error != self._last_error or now - self._last_error_logged >= _REPEAT_LOG_S:
                # a persistent failure (a full disk, say) is logged once per _REPEAT_LOG_S, with its count
                self.log({"event": f"{what}_error", "error": error, "repeats": self._error_repeats,
                          "trace": traceback.format_exc(limit=4)[-800:]})
                self._last_error, self._last_error_logged, self._error_repeats = error, now, 0
            else:
                self._error_repeats += 1
            return
        self.poll_stats[what] += 1
        self.last_poll_s = time.time()
        if entries:
            self.log({"event": what, "published": len(entries), "wall_s": round(time.perf_counter() - t0, 6)})
            try:
                self.loop.call_soon_threadsafe(self.publish, entries)
            except RuntimeError:
                pass

    # --- status ----------------------------------------------------------------------------------------
    def status_request(self, conn: Connection, msg: dict[str, Any]) -> None:
        conn.pending += 1
        if conn.pending >= self.config.max_pending_requests:
            conn.pause("requests")
        fut = self.loop.run_in_executor(self.status_pool, self._status_doc, bool(msg["prometheus"]))

        def done(f: asyncio.Future[Any]) -> None:
            conn.pending -= 1
            conn.resume("requests")
            reply_id = {"id": msg["id"]} if "id" in msg else {}
            try:
                doc = f.result()
            except Exception as exc:
                conn.send({"type": "error", "message": f"status failed: {type(exc).__name__}: {exc}"[:500],
                           **reply_id})
                return
            conn.send({"type": "status", **doc, **reply_id})

        fut.add_done_callback(done)

    def counters_doc(self) -> dict[str, Any]:
        with self.q_lock:
            queued = self.q_bytes
            totals = dict(self.ingest_totals)
        return {
            "clients": len(self.conns),
            "uptime_s": round(time.time() - self.started_s, 3),
            "ingest_queue_bytes": queued,
            "ingest_paused_clients": len(self.paused),
            "counters": dict(sorted({**self.counters, **totals, **self.poll_stats}.items())),
            "last_poll_t_s": self.last_poll_s,
            "latest": [{"comm": c, "collective": k, "version": e["version"]}
                       for (c, k), e in sorted(self.latest.items())],
        }

    def _status_doc(self, prometheus: bool) -> dict[str, Any]:
        doc: dict[str, Any] = {"controller": json_safe(self.controller.status()), "daemon": self.counters_doc()}
        if prometheus:
            doc["prometheus"] = self.controller.prometheus() + _daemon_prometheus(doc["daemon"])
        return doc


def _daemon_prometheus(daemon: Mapping[str, Any]) -> str:
    lines = ["# HELP loopcoll_daemon_clients Connected clients.", "# TYPE loopcoll_daemon_clients gauge",
             f"loopcoll_daemon_clients {daemon['clients']}",
             "# HELP loopcoll_daemon_ingest_queue_bytes Estimated bytes of samples waiting for ingest.",
             "# TYPE loopcoll_daemon_ingest_queue_bytes gauge",
             f"loopcoll_daemon_ingest_queue_bytes {daemon['ingest_queue_bytes']}",
             "# HELP loopcoll_daemon_events_total Daemon events by kind (connections, drops, messages, ...).",
             "# TYPE loopcoll_daemon_events_total counter"]
    for name, value in daemon["counters"].items():
        lines.append(f'loopcoll_daemon_events_total{{event="{name}"}} {value}')
    return "\n".join(lines) + "\n"


class DaemonHandle:
    """A running daemon (returned by :func:`serve`): its address, counters, and :meth:`close`."""

    def __init__(self, daemon: _Daemon, server: asyncio.base_events.Server, threads: list[threading.Thread]) -> None:
        self._d = daemon
        self._server = server
        self._threads = threads
        sock = server.sockets[0].getsockname()
        self.host: str = sock[0]
        self.port: int = sock[1]
        self._closed = False

    @property
    def address(self) -> str:
        """``HOST:PORT`` the daemon listens on."""
        return f"{self.host}:{self.port}"

    def status(self) -> dict[str, Any]:
        """The daemon's own counters (thread-safe snapshot)."""
        fut = asyncio.run_coroutine_threadsafe(_call(self._d.counters_doc), self._d.loop)
        doc: dict[str, Any] = fut.result(timeout=10)
        return doc

    def close(self) -> None:
        """Stop accepting, drop every client, stop the threads (waits up to ``shutdown_grace_s`` for a poll)."""
        if self._closed:
            return
        self._closed = True
        d = self._d
        d.stop.set()

        async def shutdown() -> None:
            self._server.close()
            d.auth_guard.close()
            for conn in list(d.conns.values()):
                if conn.transport is not None:
                    conn.closed = True
                    conn.transport.close()
            await self._server.wait_closed()

        try:
            asyncio.run_coroutine_threadsafe(shutdown(), d.loop).result(timeout=10)
        except Exception:
            pass
        d.ingest_q.put(_STOP)
        d.loop.call_soon_threadsafe(d.loop.stop)
        for t in self._threads:
            t.join(timeout=d.config.shutdown_grace_s)
        d.status_pool.shutdown(wait=False, cancel_futures=True)
        if not d.loop.is_running():
            d.loop.close()
        if d.store_lock is not None:
            d.store_lock.release()
        d.log({"event": "stopped", "counters": dict(d.counters)})

    def __enter__(self) -> DaemonHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


async def _call(fn: Callable[[], Any]) -> Any:
    return fn()


def serve(
    controller: ControllerLike,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    token: str,
    store_dir: str | os.PathLike[str] | None = None,
    refuse_files: Iterable[str | os.PathLike[str]] = (),
    config: DaemonConfig = DaemonConfig(),
    poll_interval_s: float | None = None,
    log: Callable[[Mapping[str, Any]], None] | None = None,
) -> DaemonHandle:
    """Start the daemon on ``host:port`` (port 0: any free port) in background threads; returns its handle.

    ``store_dir`` is the store directory ``get`` serves files from (none served when ``None``);
    ``refuse_files`` are never served (the token file). The controller's latest versions are pushed to
    executors right after their ``hello``; ``bootstrap`` then ``poll`` run on the poll thread. Raises
    :class:`WireError` (reason ``listen``) when the address cannot be bound, (reason ``auth``) for a token
    that is empty, not one line or not UTF-8 text, and ``ValueError`` naming a bound that is not positive.
    """
    check_token(token, "daemon")
    for name in ("max_clients", "max_unauthenticated", "max_pending_requests", "auth_failures_per_window",
                 "hello_timeout_s", "auth_window_s", "idle_timeout_s"):
        value = getattr(config, name)
        if not (value is None and name == "idle_timeout_s") and not value > 0:
            raise ValueError(f"DaemonConfig.{name} must be > 0, got {value!r}")
    if poll_interval_s is not None:
        config = DaemonConfig(**{**{f: getattr(config, f) for f in config.__dataclass_fields__},
                                 "poll_interval_s": poll_interval_s})
    lock = None if store_dir is None else StoreLock(store_dir)  # one daemon per store, for its lifetime
    d = _Daemon(controller, token, config, None if store_dir is None else Path(store_dir),
                tuple(Path(p) for p in refuse_files), log or json_log())
    d.store_lock = lock
    d.remember(controller.latest())
    try:
        server = d.loop.run_until_complete(
            d.loop.create_server(lambda: Connection(d), host, port, reuse_address=True, backlog=128))
    except OSError as exc:
        d.loop.close()
        if lock is not None:
            lock.release()
        raise WireError(f"daemon: cannot listen on {host}:{port}: {exc.strerror or exc}", reason="listen") from None
    loop_thread = threading.Thread(target=d.loop.run_forever, name="loopcoll-daemon-loop", daemon=True)
    ingest_thread = threading.Thread(target=d.ingest_worker, name="loopcoll-daemon-ingest", daemon=True)
    poll_thread = threading.Thread(target=d.poll_worker, name="loopcoll-daemon-poll", daemon=True)
    handle = DaemonHandle(d, server, [loop_thread, ingest_thread, poll_thread])
    d.log({"event": "listen", "address": handle.address, "versions": len(d.latest),
           "poll_interval_s": config.poll_interval_s, "max_clients": config.max_clients})
    for t in (loop_thread, ingest_thread, poll_thread):
        t.start()
    return handle

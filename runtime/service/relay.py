"""The host relay: one process per host between its executors and the daemon (docs/controller.md §9).

Local executors connect to the relay exactly as to the daemon (same wire protocol and token check, on
loopback): ``hello``, ``samples``, ``ping``, ``get`` and ``status``. The relay holds **one** upstream
:class:`~runtime.service.client.Client` connection to the daemon, with its own token, and

* merges the columnar ``aggcols`` batches (docs/telemetry.md §6) its executors send: every ``flush_s`` the
  batches received are joined per stream (:func:`~runtime.formats.columnar.merge_batches`; the executors of a
  host close a window together, so one merged batch per stream and window goes up) and queued upstream with
  the other records, which pass through as they are;
* acknowledges a local ``samples`` at once: ``accepted`` counts the rows it took (a batch is checked with
  :func:`~runtime.formats.columnar.parse_batch` without the job's communicators; a bad one is rejected here,
  naming the field); the controller's own verdict on what the relay forwarded is in the relay's counters;
* pushes the schedule versions the daemon sends it (for ``comms``) to the local executors of those
  communicators, and answers ``get``/``status`` by asking the daemon.

Bounds: ``max_clients`` local connections, ``max_buffer_rows`` rows buffered between flushes (past it rows are
dropped and counted), an upstream queue of ``max_upstream_docs`` messages' worth of documents (the client
drops and counts past it), one 1 MiB message per connection. Run it as
``python -m runtime.service.relay --upstream HOST:PORT --token-file T --upstream-token-file U --comms world``.

Examples
--------
>>> RelayConfig().flush_s, RelayConfig().max_clients
(0.1, 64)
"""

from __future__ import annotations

import argparse
import asyncio
import hmac
import signal
import sys
import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtime.errors import TelemetryError, WireError
from runtime.formats.columnar import AggBatch, is_batch, merge_batches, parse_batch
from runtime.formats.store import VersionEntry
from runtime.service.client import Client, read_token
from runtime.service.wire import (CLIENT_TO_DAEMON, PROTOCOL, LineFramer, check_token, decode, encode, json_safe,
                                  request_id)

__all__ = ["RelayConfig", "RelayHandle", "main", "serve_relay"]


@dataclass(frozen=True, slots=True)
class RelayConfig:
    """The relay's interval and bounds (module docstring)."""

    flush_s: float = 0.1
    max_clients: int = 64
    max_buffer_rows: int = 1 << 20
    max_upstream_docs: int = 4096


class _Local(asyncio.Protocol):
    """One local executor's connection."""

    def __init__(self, relay: _Relay) -> None:
        self.r = relay
        self.framer = LineFramer()
        self.transport: asyncio.Transport | None = None
        self.authed = False
        self.comms: frozenset[str] = frozenset()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        if len(self.r.locals) >= self.r.config.max_clients:
            self.fail("relay full")
            return
        self.r.locals.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.r.locals.discard(self)

    def send(self, msg: Mapping[str, Any]) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(encode(msg))

    def fail(self, message: str, rid: Mapping[str, Any] | None = None) -> None:
        self.r.counters["local_refused"] += 1
        self.send({"type": "error", "message": message, "fatal": True, **(rid or {})})
        if self.transport is not None:
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        try:
            lines = self.framer.feed(data)
        except WireError as exc:
            self.fail(str(exc))
            return
        for line in lines:
            try:
                msg = decode(line, CLIENT_TO_DAEMON)
            except WireError as exc:
                self.fail(str(exc), request_id(line))
                return
            self.handle(msg)

    def handle(self, msg: dict[str, Any]) -> None:
        rid = {"id": msg["id"]} if "id" in msg else {}
        if not self.authed:
            if msg["type"] != "hello" or not hmac.compare_digest(msg["token"].encode("utf-8"), self.r.token):
                self.fail("hello refused: wrong token" if msg["type"] == "hello" else "hello expected", rid)
                return
            self.authed, self.comms = True, frozenset(msg["comms"])
            self.send({"type": "hello", "protocol": PROTOCOL, "idle_timeout_s": None, "relay": True, **rid})
            for doc in self.r.latest_for(self.comms):
                self.send(doc)
            return
        kind = msg["type"]
        if kind == "samples":
            accepted, rejected = self.r.take(msg["samples"])
            if rid:
                self.send({"type": "samples", "accepted": accepted, "rejected": rejected, **rid})
        elif kind in ("get", "status"):
            self.r.ask_upstream(self, msg, rid)
        elif kind == "hello":
            self.fail("hello sent twice", rid)


class _Relay:
    """State shared by the relay's loop thread and its flush thread."""

    def __init__(self, upstream: Client, token: str, comms: Sequence[str], config: RelayConfig) -> None:
        self.upstream = upstream
        self.token = token.encode("utf-8")
        self.comms = tuple(comms)
        self.config = config
        self.loop = asyncio.new_event_loop()
        self.locals: set[_Local] = set()
        self.counters: Counter[str] = Counter()
        self.lock = threading.Lock()
        self.batches: list[AggBatch] = []
        self.records: list[Any] = []
        self.rows = 0
        self.versions: dict[tuple[str, str], dict[str, Any]] = {}
        self.stop = threading.Event()
        self.pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="loopcoll-relay-ask")

    def take(self, docs: list[Any]) -> tuple[int, dict[str, int]]:
        """Buffer one local ``samples`` message: its batches checked, its other records as they are."""
        accepted, rejected = 0, Counter[str]()
        batches, records = [], []
        for doc in docs:
            if is_batch(doc):
                try:
                    batches.append(parse_batch(doc))
                except TelemetryError as exc:
                    n = doc.get("n")
                    rejected[exc.reason] += n if type(n) is int and n > 0 else 1
            else:
                records.append(doc)
        rows = sum(len(b) for b in batches) + len(records)
        with self.lock:
            if self.rows + rows > self.config.max_buffer_rows:
                self.counters["rows_dropped"] += rows
                rejected["relay_full"] += rows
            else:
                self.batches += batches
                self.records += records
                self.rows += rows
                accepted = rows
        self.counters["rows_in"] += accepted
        return accepted, dict(sorted(rejected.items()))

    def flush(self) -> int:
        """Send what is buffered upstream (batches merged per stream); returns the documents queued."""
        with self.lock:
            batches, records, self.batches, self.records, self.rows = self.batches, self.records, [], [], 0
        docs = [b.to_dict() for b in merge_batches(batches)] + records
        if docs:
            before = self.upstream.dropped_samples
            self.upstream.send_samples(docs)
            self.counters["docs_up"] += len(docs)
            self.counters["docs_dropped"] += self.upstream.dropped_samples - before
            self.counters["flushes"] += 1
        return len(docs)

    def flush_loop(self) -> None:
        while not self.stop.wait(self.config.flush_s):
            self.flush()
        self.flush()

    def on_version(self, entry: VersionEntry) -> None:
        doc = json_safe(entry.to_dict())
        msg = {"type": "version", "comm": doc["comm"], "collective": doc["collective"], "version": doc["version"],
               "manifest_entry": doc}
        self.loop.call_soon_threadsafe(self._push, msg)

    def _push(self, msg: dict[str, Any]) -> None:
        key = (msg["comm"], msg["collective"])
        old = self.versions.get(key)
        if old is not None and old["version"] >= msg["version"]:
            return
        self.versions[key] = msg
        for conn in list(self.locals):
            if conn.authed and msg["comm"] in conn.comms:
                conn.send(msg)

    def latest_for(self, comms: frozenset[str]) -> list[dict[str, Any]]:
        return [m for k, m in sorted(self.versions.items()) if k[0] in comms]

    def ask_upstream(self, conn: _Local, msg: dict[str, Any], rid: dict[str, Any]) -> None:
        """Forward a ``get``/``status`` to the daemon on a worker thread; its reply goes back with ``rid``."""
        body = {k: v for k, v in msg.items() if k != "id"}

        def ask() -> dict[str, Any]:
            try:
                reply = self.upstream._request_line(encode(body), body["type"])
            except WireError as exc:
                reply = {"type": "error", "message": f"relay: {exc}"}
            reply = {k: v for k, v in reply.items() if k != "id"}
            if body["type"] == "status":
                reply["relay"] = self.status()
            return reply

        def done(fut: Any) -> None:
            self.loop.call_soon_threadsafe(conn.send, {**fut.result(), **rid})

        self.pool.submit(ask).add_done_callback(done)

    def status(self) -> dict[str, Any]:
        return {"clients": len(self.locals), "counters": dict(sorted(self.counters.items())),
                "upstream_connected": self.upstream.connected}


class RelayHandle:
    """A running relay: its local address, counters, :meth:`flush` and :meth:`close`."""

    def __init__(self, relay: _Relay, server: asyncio.base_events.Server, threads: list[threading.Thread]) -> None:
        self._r = relay
        self._server = server
        self._threads = threads
        self.host, self.port = server.sockets[0].getsockname()[:2]

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def status(self) -> dict[str, Any]:
        """The relay's counters (``rows_in``, ``docs_up``, ``flushes``, drops) and its client count."""
        return self._r.status()

    def close(self) -> None:
        """Stop accepting, send what is buffered, close the upstream connection (sending its queue, 1 s)."""
        r = self._r
        if r.stop.is_set():
            return
        r.stop.set()
        for t in self._threads[1:]:
            t.join(timeout=5)

        async def shutdown() -> None:
            self._server.close()
            for conn in list(r.locals):
                if conn.transport is not None:
                    conn.transport.close()

        asyncio.run_coroutine_threadsafe(shutdown(), r.loop).result(timeout=10)
        r.loop.call_soon_threadsafe(r.loop.stop)
        self._threads[0].join(timeout=5)
        r.pool.shutdown(wait=False, cancel_futures=True)
        r.upstream.close()

    def __enter__(self) -> RelayHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def serve_relay(upstream: str, *, token: str, upstream_token: str | None = None, comms: Sequence[str] = (),
                host: str = "127.0.0.1", port: int = 0, config: RelayConfig = RelayConfig()) -> RelayHandle:
    """Connect to the daemon at ``upstream`` (``upstream_token``, default ``token``) as one executor client
    subscribed to ``comms``, and serve local executors on ``host:port`` with ``token``; returns the handle.
    Raises :class:`WireError` when the daemon refuses or the address cannot be bound."""
    check_token(token, "relay")
    client = Client(upstream, token=upstream_token or token, role="executor", comms=comms,
                    max_queued_samples=config.max_upstream_docs)
    r = _Relay(client, token, comms, config)
    try:
        server = r.loop.run_until_complete(r.loop.create_server(lambda: _Local(r), host, port, reuse_address=True))
    except OSError as exc:
        r.loop.close()
        client.close()
        raise WireError(f"relay: cannot listen on {host}:{port}: {exc.strerror or exc}", reason="listen") from None
    threads = [threading.Thread(target=r.loop.run_forever, name="loopcoll-relay-loop", daemon=True),
               threading.Thread(target=r.flush_loop, name="loopcoll-relay-flush", daemon=True)]
    for t in threads:
        t.start()
    client.on_version(r.on_version)
    return RelayHandle(r, server, threads)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m runtime.service.relay``: run a relay until SIGTERM/SIGINT; writes ``HOST:PORT`` to
    ``--port-file`` once listening."""
    ap = argparse.ArgumentParser(prog="python -m runtime.service.relay", description=__doc__.split("\n\n")[0])
    ap.add_argument("--upstream", required=True, help="the daemon's HOST:PORT")
    ap.add_argument("--token-file", required=True, help="the token local executors present")
    ap.add_argument("--upstream-token-file", help="the daemon's token (default: --token-file's)")
    ap.add_argument("--comms", nargs="*", default=[], help="communicators whose versions to forward")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file", help="write HOST:PORT here once listening")
    ap.add_argument("--flush-s", type=float, default=RelayConfig().flush_s)
    args = ap.parse_args(argv)
    token = Path(args.token_file).read_text(encoding="utf-8").split("\n", 1)[0]
    up = (Path(args.upstream_token_file).read_text(encoding="utf-8").split("\n", 1)[0]
          if args.upstream_token_file else token)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    with serve_relay(args.upstream, token=read_token(token), upstream_token=up, comms=args.comms, host=args.host,
                     port=args.port, config=RelayConfig(flush_s=args.flush_s)) as relay:
        if args.port_file:
            tmp = Path(args.port_file + ".tmp")
            tmp.write_text(relay.address + "\n", encoding="utf-8")
            tmp.replace(args.port_file)
        stop.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())

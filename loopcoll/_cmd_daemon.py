"""``loopcoll daemon run|status|push``: the controller daemon and its two tools.

``run`` loads a topology and a job profile, opens (or creates) the schedule store, and serves the controller
over the wire protocol (``docs/telemetry.md`` §4) until SIGTERM or SIGINT; it logs one JSON line per event to
stderr (or ``--log-file``). ``status`` shows a running daemon's versions, link estimates and recent verdicts
(``--json``: the raw status object; ``--prometheus``: the Prometheus text). ``push`` sends a telemetry JSONL
file to a daemon (drills, replays) and prints what the controller accepted and rejected.
The token is ``$LOOPCOLL_TOKEN`` or the file ``--token-file`` (``run`` creates it, mode 0600, when missing).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from loopcoll._common import SPEC_HELP, print_json
from synth.errors import LoopcollError
from synth.fileio import write_text_atomic
from synth.result import Status, format_status, gap_pct
from synth.topologies import load_topology

__all__ = ["register"]


def register(sub: Any) -> None:
    """Add the ``daemon`` subcommand (with ``run``, ``status``, ``push``) to the argparse subparsers ``sub``."""
    p = sub.add_parser("daemon", help="run the controller daemon, query it, or push telemetry to it",
                       description=__doc__.split("\n\n")[1] if __doc__ else None)
    dsub = p.add_subparsers(dest="daemon_command", metavar="ACTION", parser_class=type(p))
    dsub.required = True

    r = dsub.add_parser("run", help="serve the controller until SIGTERM/SIGINT")
    r.add_argument("--topology", metavar="SPEC", help=SPEC_HELP + " (default: the profile's topology)")
    r.add_argument("--profile", metavar="P.json", required=True, help="job profile (loopcoll.profile/1)")
    r.add_argument("--store", metavar="DIR", required=True, help="schedule store directory (created if missing)")
    r.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1, loopback only)")
    r.add_argument("--port", type=int, default=0, help="TCP port (default: 0, any free port)")
    r.add_argument("--token-file", metavar="F", help="shared token file (created with a random token if missing)")
    r.add_argument("--port-file", metavar="F", help="write HOST:PORT here once listening (removed on exit)")
    r.add_argument("--log-file", metavar="F", help="append the JSON log lines here instead of stderr")
    r.add_argument("--poll-interval-s", type=float, default=0.05, metavar="S",
                   help="seconds between controller polls (default: 0.05)")
    r.add_argument("--max-clients", type=int, default=64, help="authenticated clients served at once (default: 64)")
    r.add_argument("--config", metavar="C.json", help="controller settings: a JSON object of ControllerConfig "
                   "fields (alpha, gamma, cooldown_s, time_limit_s, ...; docs/controller.md)")
    r.add_argument("--json", action="store_true", help="print the listening line as a JSON object")
    r.set_defaults(func=_run)

    s = dsub.add_parser("status", help="show a running daemon's versions, link estimates and verdicts")
    _client_args(s)
    s.add_argument("--json", action="store_true", help="print the status as one JSON object")
    s.add_argument("--prometheus", action="store_true", help="print the Prometheus text exposition")
    s.set_defaults(func=_status)

    u = dsub.add_parser("push", help="send a telemetry JSONL file (.jsonl or .jsonl.gz) to a running daemon")
    _client_args(u)
    u.add_argument("file", metavar="FILE.jsonl", help="telemetry samples, one JSON object per line")
    u.add_argument("--batch", type=int, default=2000, help="samples per message (default: 2000)")
    u.add_argument("--json", action="store_true", help="print the totals as one JSON object")
    u.set_defaults(func=_push)


def _client_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--address", required=True, metavar="HOST:PORT", help="the daemon's address")
    p.add_argument("--token-file", metavar="F", help="shared token file (default: $LOOPCOLL_TOKEN)")
    p.add_argument("--timeout-s", type=float, default=10.0, help="connect/request timeout (default: 10)")


def _daemon_token(token_file: str | None) -> str:
    from runtime.service.client import read_token
    from runtime.service.wire import check_token

    env = os.environ.get("LOOPCOLL_TOKEN", "")
    if token_file is None:
        if not env:
            raise LoopcollError("daemon run: no token: set LOOPCOLL_TOKEN or pass --token-file F")
        return check_token(env, "LOOPCOLL_TOKEN")
    path = Path(token_file)
    if not path.exists():
        # Written as one line, read back by read_token exactly (spaces kept, the line break dropped).
        token = check_token(env, "LOOPCOLL_TOKEN") if env else secrets.token_hex(32)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(token + "\n")
        except OSError as exc:
            raise LoopcollError(f"token file {token_file!r}: cannot create: {exc.strerror}") from None
        return token
    if path.stat().st_mode & 0o077:
        print(f"loopcoll: warning: token file {token_file!r} is readable by other users (chmod 600 it)",
              file=sys.stderr)
    return read_token(token_file=path)


def _check_store_dir(store: str) -> Path:
    from runtime.errors import StoreError

    path = Path(store)
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".probe-"):
            pass
    except OSError as exc:
        raise StoreError(f"store directory {store!r} is not writable: {exc.strerror or exc}") from None
    return path


def _controller_config(path: str | None) -> Any:
    import dataclasses

    from runtime import ControllerConfig

    if path is None:
        return ControllerConfig()
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise LoopcollError(f"controller config {path!r}: cannot read: {exc.strerror}") from None
    except ValueError as exc:
        raise LoopcollError(f"controller config {path!r}: not JSON: {str(exc)[:100]}") from None
    if not isinstance(doc, dict):
        raise LoopcollError(f"controller config {path!r}: must be a JSON object of ControllerConfig fields")
    known = {f.name for f in dataclasses.fields(ControllerConfig)}
    unknown = sorted(set(doc) - known)
    if unknown:
        raise LoopcollError(f"controller config {path!r}: unknown field(s) {', '.join(unknown)}; "
                            f"known: {', '.join(sorted(known))}")
    try:
        return ControllerConfig(**doc)
    except (TypeError, ValueError) as exc:
        raise LoopcollError(f"controller config {path!r}: {exc}") from None


def _run(args: argparse.Namespace) -> int:
    from runtime import Controller, load_profile
    from runtime.service.daemon import DaemonConfig, json_log, serve

    if args.poll_interval_s <= 0 or args.max_clients < 1 or not 0 <= args.port < 65536:
        raise LoopcollError("daemon run: --poll-interval-s must be > 0, --max-clients >= 1, 0 <= --port < 65536")
    profile = load_profile(args.profile)
    topology = load_topology(args.topology or profile.topology)
    profile.check_topology(topology)
    store_dir = _check_store_dir(args.store)
    token = _daemon_token(args.token_file)
    log_fh = None
    if args.log_file:
        try:
            log_fh = open(args.log_file, "a", encoding="utf-8")  # noqa: SIM115 (closed in finally)
        except OSError as exc:
            raise LoopcollError(f"log file {args.log_file!r}: cannot open: {exc.strerror}") from None
    log = json_log(log_fh)
    controller = Controller(topology, profile, store_dir, config=_controller_config(args.config),
                            log=lambda rec: log({"source": "controller", **rec}))
    stop = threading.Event()
    handle = serve(controller, args.host, args.port, token=token, store_dir=store_dir,
                   refuse_files=[args.token_file] if args.token_file else [],
                   config=DaemonConfig(poll_interval_s=args.poll_interval_s, max_clients=args.max_clients),
                   log=log)
    port_file = Path(args.port_file) if args.port_file else None
    old = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        if port_file is not None:
            write_text_atomic(port_file, handle.address + "\n")
        info = {"address": handle.address, "store": str(store_dir), "topology": topology.name,
                "versions": len(controller.latest()), "pid": os.getpid()}
        if args.json:
            print_json(info)
        else:
            print(f"loopcoll daemon: listening on {handle.address} (store {store_dir}, "
                  f"{info['versions']} versions, pid {info['pid']})")
        sys.stdout.flush()
        while not stop.wait(0.5):
            pass
    finally:
        handle.close()
        for sig, h in old.items():
            signal.signal(sig, h)
        if port_file is not None:
            port_file.unlink(missing_ok=True)
        if log_fh is not None:
            log_fh.close()
    return 0


def _client(args: argparse.Namespace) -> Any:
    from runtime.service.client import Client, read_token

    token = read_token(token_file=args.token_file) if args.token_file else None
    return Client(args.address, token=token, role="tool", timeout_s=args.timeout_s)


def _status(args: argparse.Namespace) -> int:
    with _client(args) as client:
        doc = client.status(prometheus=args.prometheus)
    if args.prometheus:
        sys.stdout.write(doc["prometheus"])
        return 0
    if args.json:
        print_json(doc)
        return 0
    print(render_status(doc))
    return 0


def _push(args: argparse.Namespace) -> int:
    from runtime.formats.telemetry import iter_jsonl

    if args.batch < 1:
        raise LoopcollError("daemon push: --batch must be >= 1")
    docs: list[Any] = []
    bad = 0
    for line in iter_jsonl(args.file):
        try:
            docs.append(json.loads(line))
        except ValueError:
            bad += 1
    with _client(args) as client:
        totals = client.push_samples(docs, batch_samples=args.batch)
    if bad:
        totals["rejected"]["bad_json"] = totals["rejected"].get("bad_json", 0) + bad
    totals["sent"] = len(docs)
    if args.json:
        print_json(totals)
    else:
        rej = ", ".join(f"{k} {v}" for k, v in sorted(totals["rejected"].items())) or "none"
        print(f"pushed {len(docs)} samples to {args.address}: accepted {totals['accepted']}, rejected: {rej}")
    return 0


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3f}"
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True)[:80]
    return str(value)


def _version_status(v: dict[str, Any]) -> str:
    """A manifest entry's synthesis status for the status text, with its gap when it has one.

    >>> _version_status({"status": "feasible", "algbw_GBps": 99.0, "optimal_algbw_GBps": 100.0})
    '  status feasible (gap 1.00 % vs optimum 100.00 GB/s)'
    """
    word = v.get("status")
    try:
        status = Status(word)
    except ValueError:  # "given" (a deployed schedule) or absent
        return f"  status {word}" if word else ""
    algbw, optimal = float(v.get("algbw_GBps", 0.0)), float(v.get("optimal_algbw_GBps", 0.0))
    return f"  status {format_status(status, gap_pct(algbw, optimal), f'{optimal:.2f} GB/s')}"


def render_status(doc: dict[str, Any], *, max_rows: int = 20) -> str:
    """The human-readable status: daemon line, versions, degraded link estimates, recent verdicts, counters.

    >>> print(render_status({"daemon": {"clients": 1, "uptime_s": 2.0, "counters": {}, "latest": []},
    ...                      "controller": {"versions": [], "links": [
    ...     {"link": "gpu0->tor0.0", "estimate_gbps": 100.0, "nominal_gbps": 400.0, "observations": 9}]}}))
    daemon: 1 clients, up 2.0 s
    versions: none
    link estimates (1 observed, 1 below nominal):
      gpu0->tor0.0  100.000 of 400.000 Gbit/s (25%), 9 observations
    """
    d = doc.get("daemon", {})
    c = doc.get("controller", {})
    out = [f"daemon: {d.get('clients', 0)} clients, up {float(d.get('uptime_s', 0.0)):.1f} s"]
    versions = c.get("versions") or d.get("latest") or []
    out.append("versions:" if versions else "versions: none")
    for v in versions:
        extra = "  ".join(f"{k} {_fmt(v[k])}" for k in ("algbw_GBps", "optimal_algbw_GBps", "reason") if k in v)
        out.append(f"  {v.get('comm')}/{v.get('collective')} v{v.get('version')}  {extra}{_version_status(v)}".rstrip())
    links = [lk for lk in c.get("links", []) if isinstance(lk, dict)]
    if links:
        low = [lk for lk in links if lk.get("estimate_gbps", 0.0) < 0.98 * lk.get("nominal_gbps", 0.0)]
        out.append(f"link estimates ({len(links)} observed, {len(low)} below nominal):")
        for lk in sorted(low, key=lambda x: x["estimate_gbps"] / max(x["nominal_gbps"], 1e-12))[:max_rows]:
            share = lk["estimate_gbps"] / lk["nominal_gbps"] if lk["nominal_gbps"] else 0.0
            out.append(f"  {lk['link']}  {lk['estimate_gbps']:.3f} of {lk['nominal_gbps']:.3f} Gbit/s "
                       f"({share:.0%}), {lk.get('observations', 0)} observations")
    verdicts = [v for v in c.get("verdicts", []) if isinstance(v, dict)]
    if verdicts:
        out.append("recent verdicts (newest last):")
        rows: list[list[Any]] = []  # consecutive repeats of one verdict are shown once, with their count
        for v in verdicts:
            state = "FLAGGED" if v.get("flagged") else "ok"
            line = f"  {v.get('comm')}/{v.get('collective')} v{v.get('version')} {state}: {v.get('message', '')}"
            if rows and rows[-1][0] == line:
                rows[-1][1] += 1
            else:
                rows.append([line, 1])
        out += [line if n == 1 else f"{line} (x{n})" for line, n in rows[-max_rows:]]
    counters = {**(c.get("counters") or {}), **(d.get("counters") or {})}
    if counters:
        out.append("counters: " + ", ".join(f"{k} {_fmt(v)}" for k, v in sorted(counters.items())))
    return "\n".join(out)

"""Smoke-run every ``loopcoll`` subcommand against an installed (non-editable) loopcoll.

``python tests/smoke/cli_smoke.py VENV_PYTHON`` runs :data:`ENTRIES`, in order, with the ``loopcoll``
console script next to ``VENV_PYTHON``, in a fresh temporary directory outside the repository and with
``PYTHONPATH`` removed, so nothing can be imported from the source tree; a preflight first imports every
package of the source tree in that Python and checks that each comes from its ``sys.prefix``. Each entry is
one real command with an expected exit code and a regular expression its stdout + stderr must match; the
``daemon run`` entry runs in the background (loopback, port 0) until the :class:`Stop` entry, which
SIGTERMs it and checks its exit and output. Prints one line per command and a summary; exit status 1 when
anything failed. Only the standard library is used here (the repository's code must not be imported).
``tests/test_packaging.py`` checks that every subcommand path of the CLI parser has an entry here.

Examples
--------
>>> verdict(Entry(("topo", "show", "ring:4"), r"4 GPUs"), 0, "topology ring-4: 4 GPUs")
>>> verdict(Entry(("topo", "show", "ring:4"), r"4 GPUs"), 2, "loopcoll: error: no")
'exit 2, expected 0'
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ENTRIES", "Entry", "Stop", "files", "main", "one_leaf_fabric", "run_smoke", "verdict"]

REPO = Path(__file__).resolve().parents[2]
#: The Inspector test vectors (read only; data, not code).
VECTORS = REPO / "tests" / "vectors" / "inspector"
#: Canned ``nvidia-smi topo -m`` / ``ibstat`` / ``nvidia-smi -L`` outputs for ``topo probe`` (read only).
PROBE_VECTORS = REPO / "tests" / "vectors" / "probe"
#: Seconds one command may run before it counts as failed (and is ended).
COMMAND_TIMEOUT_S = 180.0
#: Seconds the background daemon may take to write its port file, and to exit after SIGTERM.
DAEMON_START_S, DAEMON_STOP_S = 60.0, 20.0
PORT_FILE = "daemon.port"
_SHIPPED = ("loopcoll", "synth", "msccl_xml", "mscclpp_plan", "runtime")


@dataclass(frozen=True)
class Entry:
    """One command: ``loopcoll ARGV`` (``{vectors}``, ``{probe}``, ``{address}`` filled in at run time), its exit
    code and a regex that its stdout + stderr must match. ``background``: started and left running until the next
    :class:`Stop` (once its ``--port-file`` exists); its exit code and output are checked there."""

    argv: tuple[str, ...]
    expect: str
    rc: int = 0
    background: bool = False


@dataclass(frozen=True)
class Stop:
    """SIGTERM the running background entry; it must exit within :data:`DAEMON_STOP_S`."""


def one_leaf_fabric() -> dict[str, object]:
    """2 hosts x 2 GPUs, an NVSwitch per host and every GPU's 400 Gbit/s NIC on one leaf switch: two GPUs of a
    host reach each other over the NVSwitch and over the leaf, so routing matters (``synth.routed`` runs).

    >>> doc = one_leaf_fabric()
    >>> len(doc["nodes"]), len(doc["links"])
    (7, 16)
    """
    nodes: list[dict[str, object]] = [{"id": "leaf", "kind": "switch", "role": "tor"}]
    nodes += [{"id": f"nvs{h}", "kind": "switch", "role": "nvswitch"} for h in range(2)]
    links = []
    for r in range(4):
        gpu, host = f"gpu{r}", r // 2
        nodes.append({"id": gpu, "kind": "gpu", "rank": r, "host": host})
        for peer, gbps, latency_us in ((f"nvs{host}", 2880.0, 0.025), ("leaf", 400.0, 0.5)):
            links += [{"src": gpu, "dst": peer, "gbps": gbps, "latency_us": latency_us},
                      {"src": peer, "dst": gpu, "gbps": gbps, "latency_us": latency_us}]
    return {"name": "one-leaf-2x2", "nodes": nodes, "links": links}


def _sample(src: int) -> dict[str, object]:
    return {"format": "loopcoll.telemetry/1", "t_s": 1.0, "comm": "world", "seq": 1, "version": None, "kind": "coll",
            "src": src, "dst": None, "bytes": 1 << 20, "busy_s": 1e-4, "collective": "allgather", "origin": "probe"}


def files() -> dict[str, str]:
    """The input files the entries read, by name (written into the working directory first)."""
    profile = {"format": "loopcoll.profile/1", "topology": "hpn:1x2x2", "communicators": [
        {"name": "world", "ranks": [0, 1, 2, 3], "collectives": [{"collective": "allgather", "sizes": [1 << 20]}]}]}
    demand = [[0, 1000000, 2000000, 0], [3000000, 0, 0, 1000000], [0, 0, 0, 8000000], [1000000, 1000000, 1000000, 0]]
    return {
        "leaf.json": json.dumps(one_leaf_fabric(), indent=1),
        "demand.json": json.dumps(demand),
        "profile.json": json.dumps(profile),
        # one accepted sample and one from a rank outside the job (rejected, counted)
        "telemetry.jsonl": "".join(json.dumps(_sample(src)) + "\n" for src in (0, 9)),
    }


#: The smoke, in order (later entries read what earlier ones wrote). Small topologies: well under a minute.
ENTRIES: tuple[Entry | Stop, ...] = (
    Entry(("--version",), r"^loopcoll \d+\.\d+\.\d+\S*\s*$"),
    Entry(("topo", "show", "leaf.json"), r"4 GPUs, 3 switches, 16 links"),
    Entry(("topo", "export", "hpn:1x2x2", "--fail", "fail2", "-o", "hpn-fail2.json"), r"wrote hpn-fail2\.json"),
    Entry(("topo", "show", "hpn-fail2.json", "--json"), r'"name": "hpn-1x2x2\+fail2"'),
    Entry(("topo", "probe", "--nvidia-smi-topo", "{probe}/dgx-h100.topo.txt", "--ibstat", "{probe}/dgx-h100.ibstat.txt",
           "--gpu-list", "{probe}/dgx-h100.gpus.txt", "--hosts", "2", "-o", "probed.json"),
          r"wrote probed\.json: probe-2x8, 16 GPUs"),
    Entry(("bound", "allgather", "probed.json"), r"allgather on probe-2x8 \(16 ranks\)"),
    # the routed fabric: every bound and synthesis below goes through synth.routed (route choice on leaf.json)
    Entry(("bound", "allgather", "leaf.json"), r"free-routing optimum [\d.]+ GB/s, routed optimum [\d.]+ GB/s"),
    Entry(("bound", "alltoall", "leaf.json", "--json"), r'"routed_algbw_GBps": [\d.]+'),
    Entry(("bound", "alltoallv", "leaf.json", "--demand", "demand.json"), r"optimal completion time [\d.]+ us"),
    Entry(("synth", "allgather", "leaf.json", "-o", "ag.xml", "--schedule-out", "ag.json"),
          r"routed optimum [\d.]+ GB/s(.|\n)*wrote MSCCL XML to ag\.xml"),
    Entry(("check", "ag.xml", "--topology", "leaf.json"), r"ag\.xml: valid \(allgather, 4 ranks"),
    Entry(("synth", "allgather", "leaf.json", "--fail", "scale:gpu0:leaf:0.5", "--warm-from", "ag.json"),
          r"warm solve"),
    Entry(("synth", "allgather", "leaf.json", "--max-depth", "1", "--json"), r'"max_depth": 1'),
    Entry(("synth", "reducescatter", "leaf.json", "--sizes", "1M,64M", "-o", "rs.xml"),
          r"bands \(profile h200\)(.|\n)*wrote rs\.b0\.xml"),
    Entry(("check", "rs.b0.xml", "--topology", "leaf.json"), r"rs\.b0\.xml: valid \(reducescatter"),
    Entry(("synth", "allreduce", "leaf.json", "--format", "mscclpp", "-o", "ar.plan.json"),
          r"wrote MSCCL\+\+ plan to ar\.plan\.json"),
    Entry(("check", "ar.plan.json"), r"ar\.plan\.json: valid \(allreduce, 4 ranks\)"),
    Entry(("synth", "alltoall", "leaf.json", "--chunks", "2", "-o", "a2a.xml"), r"wrote MSCCL XML to a2a\.xml"),
    Entry(("synth", "alltoallv", "leaf.json", "--demand", "demand.json", "--chunks", "2", "--schedule-out",
           "a2av.json"), r"completion [\d.]+ us(.|\n)*wrote schedule to a2av\.json"),
    Entry(("simulate", "allgather", "leaf.json", "--schedules", "pareto,nccl", "--sizes", "1M,64M"),
          r"Pareto set \(depth"),
    Entry(("simulate", "allgather", "leaf.json", "--schedules", "nccl", "--xml", "ag.xml", "--schedule", "ag.json",
           "--sizes", "1M", "--json"), r'"results"'),
    Entry(("demo", "--topology", "hpn:1x2x2", "--out-dir", "demo", "--quiet"),
          r"checked MSCCL XML and schedules written to demo"),
    Entry(("calibrate", "--inspector", "{vectors}/h200x2_rank0_head.jsonl", "--topology", "nvswitch:2",
           "-o", "cal.json"), r"wrote cal\.json"),
    Entry(("simulate", "allgather", "nvswitch:2", "--schedules", "loopcoll,nccl", "--sizes", "16M", "--profile",
           "cal.json"), r"msccl costs from base profile 'h200'(.|\n)*# loopcoll: allgather, 2 ranks, profile calibrated"),
    Entry(("inspect", "{vectors}/h200x2_rank0_head.jsonl", "--db", "inspect.duckdb"),
          r"added 40 collective(.|\n)*Summary"),
    Entry(("replay", "fail1", "--topology", "hpn:1x2x2", "--duration", "3"), r"collectives in 3 s simulated"),
    Entry(("whatif", "llama405b", "hpn:1x2x8", "--fail", "fail2"), r"re-synthesized\s+[\d.]+"),
    Entry(("run-check", "ag.xml", "--size", "4K", "--iters", "1", "--timeout", "120"), r"4096\s+yes"),
    Entry(("daemon", "run", "--profile", "profile.json", "--store", "store", "--host", "127.0.0.1", "--port", "0",
           "--port-file", PORT_FILE, "--token-file", "token", "--log-file", "daemon.log"),
          r"listening on 127\.0\.0\.1:\d+", background=True),
    Entry(("daemon", "status", "--address", "{address}", "--token-file", "token"), r"daemon: \d+ clients"),
    Entry(("daemon", "push", "--address", "{address}", "--token-file", "token", "telemetry.jsonl"),
          r"accepted 1, rejected: unknown_rank 1"),
    Stop(),
)


def verdict(entry: Entry, rc: int, output: str) -> str | None:
    """Why ``entry`` failed with exit code ``rc`` and ``output`` (stdout + stderr), or None when it passed."""
    if rc != entry.rc:
        return f"exit {rc}, expected {entry.rc}"
    if not re.search(entry.expect, output, re.MULTILINE):
        return f"output does not match {entry.expect!r}"
    return None


def _env(bin_dir: Path) -> dict[str, str]:
    drop = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV", "LOOPCOLL_TOKEN")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}", PYTHONNOUSERSITE="1", MPLBACKEND="Agg",
               OMP_NUM_THREADS="1")
    return env


_PREFLIGHT = """
import importlib, sys
print(sys.prefix)
for name in sys.argv[1:]:
    print(importlib.import_module(name).__file__)
"""


def _packages() -> list[str]:
    """Every package of the source tree under the shipped top-level packages (read from the file system)."""
    inits = [p for top in _SHIPPED for p in (REPO / top).rglob("__init__.py") if "__pycache__" not in p.parts]
    return sorted(".".join(p.parent.relative_to(REPO).parts) for p in inits)


def _preflight(python: str, cwd: Path, env: dict[str, str]) -> str | None:
    """None when every package of the source tree imports, from ``python``'s ``sys.prefix``; else why not."""
    names = _packages()
    done = subprocess.run([python, "-c", _PREFLIGHT, *names], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=COMMAND_TIMEOUT_S)
    if done.returncode != 0:
        return f"importing the packages failed: {done.stderr.strip()[-1500:]}"
    prefix, *paths = done.stdout.splitlines()
    inside = Path(prefix).resolve()
    stray = [f"{n} from {p}" for n, p in zip(names, paths) if not Path(p).resolve().is_relative_to(inside)]
    return f"imported from outside {prefix}: {', '.join(stray)}" if stray else None


def _wait_for(path: Path, proc: subprocess.Popen[str], timeout_s: float) -> str | None:
    deadline = time.monotonic() + timeout_s
    while not (path.exists() and path.read_text().strip()):
        if proc.poll() is not None:
            return f"exited with {proc.returncode} before writing {path.name}"
        if time.monotonic() > deadline:
            return f"did not write {path.name} within {timeout_s:.0f} s"
        time.sleep(0.1)
    return None


def _stop(proc: subprocess.Popen[str]) -> tuple[int, str]:
    """SIGTERM ``proc`` and wait for it (killed after :data:`DAEMON_STOP_S`); its exit code and output."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        out, err = proc.communicate(timeout=DAEMON_STOP_S)
        return proc.returncode, out + err
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        return -9, out + err + f"\n(did not exit within {DAEMON_STOP_S:.0f} s of SIGTERM; killed)"


def _run(cmd: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, str]:
    """Run ``cmd`` to completion (ended after :data:`COMMAND_TIMEOUT_S`); its exit code and stdout + stderr."""
    try:
        done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
        return done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as exc:
        partial = [b.decode(errors="replace") if isinstance(b, bytes) else b or "" for b in (exc.stdout, exc.stderr)]
        return -9, f"timed out after {COMMAND_TIMEOUT_S:.0f} s\n" + "".join(partial)


class _Tally:
    """Counts and prints the outcome of each command."""

    def __init__(self) -> None:
        self.passed = self.failed = 0

    def report(self, why: str | None, seconds: float, what: str, output: str = "") -> None:
        self.passed, self.failed = self.passed + (why is None), self.failed + (why is not None)
        print(f"{'ok  ' if why is None else 'FAIL'} {seconds:6.1f} s  {what}", flush=True)
        if why is not None:
            tail = "".join(f"       | {line}\n" for line in output.splitlines()[-25:])
            print(f"       {why}\n{tail}", end="", flush=True)


def run_smoke(python: str, entries: tuple[Entry | Stop, ...] = ENTRIES) -> tuple[int, int]:
    """Run ``entries`` against the loopcoll installed for ``python``; prints one line each; (passed, failed)."""
    script = Path(python).parent / "loopcoll"
    env = _env(script.parent)
    tally = _Tally()
    background: tuple[Entry, subprocess.Popen[str], float] | None = None
    with tempfile.TemporaryDirectory(prefix="loopcoll-smoke-") as tmp:
        cwd = Path(tmp)
        for name, text in files().items():
            (cwd / name).write_text(text, encoding="utf-8")
        start = time.monotonic()
        if not script.is_file() or cwd.resolve().is_relative_to(REPO):
            where = f"no loopcoll console script at {script}" if not script.is_file() else f"{cwd} is inside {REPO}"
            tally.report(where, 0.0, "preflight")
            return tally.passed, tally.failed
        why = _preflight(python, cwd, env)
        tally.report(why, time.monotonic() - start, f"preflight: {len(_packages())} packages import from the install")
        try:
            for entry in entries:
                start = time.monotonic()
                if isinstance(entry, Stop):
                    if background is None:
                        tally.report("no background command is running", 0.0, "stop")
                        continue
                    (bg, proc, start), background = background, None
                    rc, output = _stop(proc)
                    left = f"{PORT_FILE} left behind" if (cwd / PORT_FILE).exists() else None
                    why = verdict(bg, rc, output) or left
                    tally.report(why, time.monotonic() - start, "stopped: loopcoll " + shlex.join(bg.argv), output)
                    continue
                port_file = cwd / PORT_FILE
                address = port_file.read_text().strip() if port_file.exists() else "NO-DAEMON:0"
                argv = [a.format(vectors=VECTORS, probe=PROBE_VECTORS, address=address) for a in entry.argv]
                what = ("loopcoll " + shlex.join(argv)).replace(str(VECTORS), "{vectors}").replace(str(PROBE_VECTORS),
                                                                                                    "{probe}")
                if entry.background:
                    proc = subprocess.Popen([str(script), *argv], cwd=cwd, env=env, stdout=subprocess.PIPE,
                                            stderr=subprocess.PIPE, text=True)
                    background = (entry, proc, start)
                    why = _wait_for(port_file, proc, DAEMON_START_S)
                    tally.report(why, time.monotonic() - start, f"started: {what}")
                    continue
                rc, output = _run([str(script), *argv], cwd, env)
                tally.report(verdict(entry, rc, output), time.monotonic() - start, what, output)
        finally:
            if background is not None:  # a failure left it running: end it, and count that
                rc, output = _stop(background[1])
                what = "loopcoll " + shlex.join(background[0].argv)
                tally.report("never stopped (no Stop entry)", 0.0, what, output)
    return tally.passed, tally.failed


def main(argv: list[str]) -> int:
    """``cli_smoke.py VENV_PYTHON``: run the smoke; exit 0 when every command passed, else 1."""
    if len(argv) != 1:
        print("usage: python tests/smoke/cli_smoke.py VENV_PYTHON", file=sys.stderr)
        return 2
    start = time.monotonic()
    passed, failed = run_smoke(argv[0])
    print(f"wheel smoke: {passed} of {passed + failed} commands passed in {time.monotonic() - start:.1f} s")
    return 0 if failed == 0 else 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))

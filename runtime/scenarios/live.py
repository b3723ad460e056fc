"""The whole loop, live: a daemon and N executor processes detect an injected slowdown and hot-swap (docs/live.md).

:func:`run_live` starts a :class:`~runtime.Controller` behind the loopcoll daemon (in this process, on
127.0.0.1) for the emulated topology scaled to CPU speeds (:class:`~runtime.executor.throttle.Emulation`),
then N gloo processes. Each runs an :class:`~runtime.executor.Executor` that follows the daemon through a
:class:`~runtime.Client` (versions pushed, samples sent back) and a training-like loop: per step one
AllGather and one AllToAll. The emulation injects the configured faults (``fail2`` by default) at given
steps on every rank at the same collective. Rank 0 reports each window of steps (algbw per collective,
versions, fault) to ``on_event``; the controller's decisions arrive there too. The result holds every
step's timings, every swap and decision, and the timeline figures: algbw before / stale / after, detection
delay, re-synthesis time, swap latency and total reaction time. Every process started here is ended when
:func:`run_live` returns or raises (Ctrl-C included). Needs torch (``pip install loopcoll[runtime]``).

Examples
--------
>>> cfg = LiveConfig(steps=600, faults=((200, 400),))
>>> cfg.fault_seqs()                      # each step is 2 collectives (AllGather, AllToAll), seq from 1
[(401, 801)]
"""

from __future__ import annotations

import math
import os
import queue as queue_mod
import secrets
import statistics
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from runtime.errors import RuntimeStateError
from runtime.executor import Executor
from runtime.executor.launch import free_port
from runtime.executor.throttle import emulation_from_dict
from runtime.formats.profile import profile_from_dict
from runtime.loop.controller import Controller, ControllerConfig
from runtime.scenarios.live_config import COLLECTIVES, LIVE_CONTROLLER, LiveConfig, LiveResult
from runtime.service.client import Client
from runtime.service.daemon import serve

__all__ = ["COLLECTIVES", "LIVE_CONTROLLER", "main_fault", "LiveConfig", "LiveResult", "format_timeline", "plot_live", "run_live"]

# ---------------------------------------------------------------------------------------------- ranks
def _rank_main(rank: int, world: int, init: str, cfg: LiveConfig, address: str, token: str, hosts: list[int],
               q: Any) -> None:
    """One executor process: follow the daemon, run the loop, report to the parent through ``q``."""
    try:
        from datetime import timedelta

        import torch
        import torch.distributed as dist

        torch.set_num_threads(1)
        dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world,
                                timeout=timedelta(seconds=120))
        q.put(("result", rank, _rank_loop(rank, world, cfg, address, token, hosts, q)))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent (KeyboardInterrupt too)
        q.put(("error", rank, f"rank {rank}: {type(exc).__name__}: {exc}\n{traceback.format_exc()[-3000:]}"))
    finally:
        try:
            q.close()
            q.join_thread()
        except Exception:  # noqa: BLE001
            pass
        os._exit(0)


def _rank_loop(rank: int, world: int, cfg: LiveConfig, address: str, token: str, hosts: list[int],
               q: Any) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    client = Client(address, token=token, role="executor", rank=rank, comms=["world"])
    ex = Executor(comm="world", sync_every=cfg.sync_every, control_timeout_s=60, hosts=hosts,
                  emulation=cfg.emulation())
    ex.follow(client)
    deadline = time.monotonic() + 120
    while not all(ex._staged.get(c) for c in COLLECTIVES):  # version 1 of both, fetched and compiled
        if time.monotonic() > deadline:
            raise RuntimeStateError(f"rank {rank}: version 1 not received from the daemon within 120 s")
        time.sleep(0.01)
    ex.sync_versions()
    ag_n = max(world, cfg.allgather_bytes // 4 // world)
    a2a_n = max(1, cfg.alltoall_bytes // 4 // world) * world
    g = torch.Generator().manual_seed(1234 + rank)
    inp = torch.randn(ag_n, generator=g)
    out = torch.empty(ag_n * world)
    a_in = torch.randn(a2a_n, generator=g)
    a_out = torch.empty(a2a_n)
    failures: list[str] = []
    steps: list[tuple[float, float, float, int | None, int | None, bool]] = []
    seq_versions: list[tuple[int, str, int | None]] = []
    last: dict[str, int | None] = {}
    swaps_seen = 0
    swap_wall: list[float] = []
    fault_seqs = cfg.fault_seqs()
    win: list[tuple[float, float]] = []
    for step in range(cfg.steps):
        t_wall = time.time()
        inp.add_(1.0)
        t0 = time.perf_counter()
        ex.all_gather_into_tensor(out, inp)
        t1 = time.perf_counter()
        ex.all_to_all_single(a_out, a_in)
        t2 = time.perf_counter()
        seq = ex.seq - 1
        fault = any(a <= seq and (b is None or seq < b) for a, b in fault_seqs)
        while swaps_seen < len(ex.swaps):
            if ex.swaps[swaps_seen].switched:
                swap_wall.append(t_wall)
            swaps_seen += 1
        for s, coll, v in list(ex.history)[-2:]:
            if last.get(coll, -1) != v:
                last[coll] = v
                seq_versions.append((s, coll, v))
        ag_v, a2a_v = last.get("allgather"), last.get("alltoall")
        if cfg.check_every and step % cfg.check_every == 0:
            ref = torch.empty_like(out)
            dist.all_gather_into_tensor(ref, inp)
            if not torch.equal(ref, out):
                failures.append(f"step {step}: allgather (version {ag_v}) differs from native")
            ref2 = torch.empty_like(a_out)
            dist.all_to_all_single(ref2, a_in)
            if not torch.equal(ref2, a_out):
                failures.append(f"step {step}: alltoall (version {a2a_v}) differs from native")
        if rank == 0:
            steps.append((t_wall, t1 - t0, t2 - t1, ag_v, a2a_v, fault))
            win.append((t1 - t0, t2 - t1))
            if len(win) == cfg.window or step == cfg.steps - 1:
                ag_s = sum(w[0] for w in win)
                a2a_s = sum(w[1] for w in win)
                q.put(("window", 0, {"step": step + 1, "steps": cfg.steps, "t_wall": time.time(),
                                     "allgather_GBps": len(win) * ag_n * world * 4 / ag_s / 1e9,
                                     "alltoall_GBps": len(win) * a2a_n * 4 / a2a_s / 1e9,
                                     "versions": {"allgather": ag_v, "alltoall": a2a_v}, "fault": fault}))
                win = []
    ex.flush()
    client.flush(10)
    swaps = [(r.switch_seq, {c: list(v) for c, v in r.switched.items()}, 0.0) for r in ex.swaps if r.switched]
    swaps = [(s, sw, swap_wall[i] if i < len(swap_wall) else 0.0) for i, (s, sw, _) in enumerate(swaps)]
    res = {"rank": rank, "failures": failures, "swaps": swaps, "seq_versions": seq_versions,
           "refused": dict(ex.refused), "sent_samples": client.sent_samples,
           "dropped_samples": client.dropped_samples, "steps": steps, "ag_bytes": ag_n * world * 4,
           "a2a_bytes": a2a_n * 4}
    client.close()
    return res


# ---------------------------------------------------------------------------------------------- parent
def _profile(cfg: LiveConfig, nranks: int) -> Any:
    return profile_from_dict({"format": "loopcoll.profile/1", "topology": cfg.topology, "communicators": [
        {"name": "world", "ranks": list(range(nranks)), "collectives": [
            {"collective": "allgather", "sizes": [cfg.allgather_bytes]},
            {"collective": "alltoall", "sizes": [cfg.alltoall_bytes]}]}]})


def run_live(cfg: LiveConfig, *, on_event: Callable[[str, dict[str, Any]], None] | None = None,
             store_dir: str | os.PathLike[str] | None = None) -> LiveResult:
    """Run the live loop (see the module docstring); ``on_event(kind, data)`` gets ``window``, ``decision``
    and ``status`` events as they happen (on the calling thread)."""
    import torch.multiprocessing as mp

    emu = emulation_from_dict(cfg.emulation().to_dict())  # validated here, before any process starts
    topo = emu.scaled_topology()
    world = topo.nranks
    hosts = [g.host if g.host is not None else 0 for g in topo.gpus]  # gpus are in rank order
    tmp = None
    if store_dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="loopcoll-live-")
        store_dir = tmp.name
    ctl_log = _EventLog()
    ccfg = ControllerConfig(**cfg.controller)
    ctl = Controller(topo, _profile(cfg, world), store_dir, config=ccfg, log=ctl_log)
    token = secrets.token_hex(16)
    handle = serve(ctl, token=token, store_dir=store_dir, poll_interval_s=cfg.poll_interval_s,
                   log=lambda rec: None)
    ctx = None
    finished = False
    t_start = time.time()
    results: dict[int, dict[str, Any]] = {}
    errors: list[str] = []
    try:
        mpctx = mp.get_context("spawn")
        q = mpctx.Queue()
        init = f"tcp://127.0.0.1:{free_port()}"
        ctx = mp.start_processes(_rank_main, args=(world, init, cfg, handle.address, token, hosts, q),
                                 nprocs=world, join=False, start_method="spawn")
        results, errors = _collect(ctx, q, world, cfg, ctl, ctl_log, on_event)
        finished = not errors
    finally:
        if ctx is not None:  # a moment to leave after a clean run; at once on errors, Ctrl-C or SIGTERM
            _stop_ranks(ctx, finished)
        handle.close()
    wall = time.time() - t_start
    ranks = [results[r] for r in sorted(results)]
    steps = ranks[0]["steps"] if ranks and ranks[0]["rank"] == 0 else []
    fault_wall = _fault_wall(cfg, steps)
    status = "failed" if errors else "ok"
    message = errors[0] if errors else f"{cfg.steps} steps on {world} ranks in {wall:.1f} s"
    events = ctl_log.events
    timeline = _timeline(cfg, ranks, events, fault_wall) if steps else {}
    res = LiveResult(status, message, asdict(cfg), steps, [{k: v for k, v in r.items() if k != "steps"}
                                                           for r in ranks], events, fault_wall, timeline,
                     str(store_dir), wall)
    if tmp is not None:  # a store of our own is removed with the run
        tmp.cleanup()
        res = LiveResult(**{**asdict(res), "store_dir": ""})
    return res


class _EventLog:
    """The controller's log of a live run: its decisions, all of them and those not yet handed on."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.pending: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def __call__(self, rec: dict[str, Any]) -> None:
        if rec.get("event") in ("flag", "synthesized", "publish", "abort", "no_gain", "cooldown",
                                "synthesis_failed", "bootstrap"):
            slim = {k: v for k, v in rec.items() if k != "verdict"}
            if isinstance(rec.get("verdict"), dict):
                slim["max_delta"] = rec["verdict"].get("max_delta")
                slim["deciding"] = rec["verdict"].get("deciding")
            with self.lock:
                self.events.append(slim)
                self.pending.append(slim)

    def drain(self) -> list[dict[str, Any]]:
        """The decisions logged since the last call."""
        with self.lock:
            new, self.pending[:] = list(self.pending), []
        return new


def _collect(ctx: Any, q: Any, world: int, cfg: LiveConfig, ctl: Controller, log: _EventLog,
             on_event: Callable[[str, dict[str, Any]], None] | None) -> tuple[dict[int, dict[str, Any]], list[str]]:
    """Wait for every rank's result (or an error, a dead rank, the timeout), handing windows, decisions and
    the detector's status to ``on_event`` meanwhile: (results by rank, errors)."""
    results: dict[int, dict[str, Any]] = {}
    errors: list[str] = []
    windows: list[dict[str, Any]] = []
    deadline = time.monotonic() + cfg.timeout_s
    last_status = 0.0
    while len(results) + len(errors) < world:
        if time.monotonic() > deadline:
            errors.append(f"live run did not finish within {cfg.timeout_s:g} s")
            break
        try:
            kind, rank, data = q.get(timeout=0.2)
        except queue_mod.Empty:
            dead = [r for r, p in enumerate(ctx.processes) if not p.is_alive() and r not in results]
            if dead and q.empty():
                time.sleep(0.5)
                if q.empty():
                    errors.append(f"rank(s) {dead} exited without a result")
                    break
            kind = None
        if kind == "result":
            results[rank] = data
        elif kind == "error":
            errors.append(data)
        elif kind == "window":
            windows.append(data)
            if on_event:
                on_event("window", data)
        for e in log.drain():
            if on_event:
                on_event("decision", e)
        if on_event and time.monotonic() - last_status > 0.5:
            last_status = time.monotonic()
            on_event("status", _detector_state(ctl))
    return results, errors


def _stop_ranks(ctx: Any, finished: bool) -> None:
    """End every rank process: a moment to leave after a clean run (``finished``), at once otherwise."""
    for p in ctx.processes:
        p.join(2.0 if finished else 0.0)
    for p in ctx.processes:
        if p.is_alive():
            p.kill()
    for p in ctx.processes:
        p.join(5)


def _detector_state(ctl: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with ctl._lock:
        last = dict(ctl._last_verdict)
    for (comm, coll), v in sorted(last.items()):
        dep = ctl.manager.deployed.get((comm, coll))
        out[coll] = {"flagged": v.flagged, "max_delta": v.max_delta,
                     "version": None if dep is None else dep.entry.version}
    return out


def main_fault(cfg: LiveConfig) -> int:
    """Index of the fault the timeline follows: the longest one (open-ended counts as longest), first on ties.

    >>> main_fault(LiveConfig(steps=100, faults=((10, 13), (40, 90))))
    1
    """
    def length(f: tuple[int, int | None]) -> float:
        return math.inf if f[1] is None else f[1] - f[0]

    return max(range(len(cfg.faults)), key=lambda i: (length(cfg.faults[i]), -i))


def _fault_wall(cfg: LiveConfig, steps: Sequence[tuple]) -> list[tuple[float | None, float | None]]:
    """Wall times at which each fault started and ended on rank 0 (the first step with / without it)."""
    out = []
    for a, b in cfg.faults:
        start = steps[a][0] if a < len(steps) else None
        end = steps[b][0] if b is not None and b < len(steps) else None
        out.append((start, end))
    return out


def _bw(rows: Sequence[tuple], col: int, nbytes: int) -> float | None:
    """Median per-step algbw (GB/s) of ``rows`` for column ``col`` (1: allgather, 2: alltoall)."""
    if not rows:
        return None
    return float(statistics.median(nbytes / r[col] / 1e9 for r in rows))


def _timeline(cfg: LiveConfig, ranks: list[dict[str, Any]], events: list[dict[str, Any]],
              fault_wall: list[tuple[float | None, float | None]]) -> dict[str, dict[str, Any]]:
    """Per collective: algbw before / stale / after / cleared and the reaction figures of the first fault."""
    steps = ranks[0]["steps"]
    nbytes = {"allgather": ranks[0]["ag_bytes"], "alltoall": ranks[0]["a2a_bytes"]}
    out: dict[str, dict[str, Any]] = {}
    if not cfg.faults:
        return out
    k = main_fault(cfg)
    a, b = cfg.faults[k]
    b_eff = len(steps) if b is None else min(b, len(steps))
    f0 = fault_wall[k][0]
    for ci, coll in enumerate(COLLECTIVES):
        col, vcol = 1 + ci, 3 + ci
        warm = min(a // 2, max(cfg.window, a // 5))  # skip start-up steps
        v_stale = steps[a][vcol] if a < len(steps) else None
        before = [r for r in steps[warm:a]]
        stale = [r for r in steps[a:b_eff] if r[vcol] == v_stale]
        after = [r for r in steps[a:b_eff] if r[vcol] != v_stale]
        after_clear = steps[b_eff + min(cfg.window, max(0, (len(steps) - b_eff) // 2)):] if b is not None else []
        row: dict[str, Any] = {
            "bytes": nbytes[coll], "stale_version": v_stale,
            "new_version": after[0][vcol] if after else None,
            "before_GBps": _bw(before, col, nbytes[coll]), "stale_GBps": _bw(stale, col, nbytes[coll]),
            "after_GBps": _bw(after, col, nbytes[coll]), "cleared_GBps": _bw(after_clear, col, nbytes[coll]),
            "cleared_version": steps[-1][vcol] if after_clear else None,
            "stale_steps": len(stale),
        }
        flag = next((e for e in events if e.get("event") == "flag" and e.get("collective") == coll
                     and f0 is not None and e["t_s"] >= f0), None)
        pub = next((e for e in events if e.get("event") == "publish" and e.get("collective") == coll
                    and f0 is not None and e["t_s"] >= f0 and e.get("reason", "").startswith("detector")), None)
        synth = next((e for e in events if e.get("event") == "synthesized" and e.get("collective") == coll
                      and flag is not None and e["t_s"] >= flag["t_s"]), None)
        adopt = after[0][0] if after else None
        row["detection_delay_s"] = None if flag is None or f0 is None else flag["t_s"] - f0
        row["resynthesis_s"] = None if synth is None else synth["synth_time_s"]
        row["published_after_s"] = None if pub is None or f0 is None else pub["t_s"] - f0
        row["swap_latency_s"] = None if pub is None or adopt is None else max(0.0, adopt - pub["t_s"])
        row["reaction_s"] = None if adopt is None or f0 is None else adopt - f0
        row["detection_collectives"] = None if flag is None else sum(1 for r in steps[a:b_eff] if r[0] <= flag["t_s"])
        out[coll] = row
    return out


# ---------------------------------------------------------------------------------------------- output
def _f(x: Any, spec: str) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def format_timeline(res: LiveResult) -> str:
    """The end-of-run timeline table: algbw per phase (MB/s, real) and the reaction figures (ms)."""
    lines = [f"{'collective':<10} {'before':>8} {'stale':>8} {'after':>8} {'cleared':>8}  {'versions':<9} "
             f"{'detect ms':>9} {'resynth ms':>10} {'swap ms':>8} {'react ms':>8}"]
    lines.append("-" * len(lines[0]))
    for coll, r in res.timeline.items():
        vers = f"v{r['stale_version']}->{'v' + str(r['new_version']) if r['new_version'] else '-'}"
        ms = [None if r[k] is None else 1e3 * r[k] for k in ("detection_delay_s", "resynthesis_s", "swap_latency_s",
                                                               "reaction_s")]
        lines.append(f"{coll:<10} {_f(_mb(r['before_GBps']), '8.1f')} {_f(_mb(r['stale_GBps']), '8.1f')} "
                     f"{_f(_mb(r['after_GBps']), '8.1f')} {_f(_mb(r['cleared_GBps']), '8.1f')}  {vers:<9} "
                     f"{_f(ms[0], '9.0f')} {_f(ms[1], '10.0f')} {_f(ms[2], '8.0f')} {_f(ms[3], '8.0f')}")
    return "\n".join(lines)


def _mb(gbps: float | None) -> float | None:
    return None if gbps is None else gbps * 1e3


def plot_live(res: LiveResult, path: str | os.PathLike[str]) -> None:
    """algbw per window over time, both collectives, with the fault, flags, publications and swaps marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = res.ranks and res.steps
    if not steps:
        raise RuntimeStateError("plot_live: the run has no steps")
    t0 = steps[0][0]
    w = max(1, int(res.config["window"]) // 2)
    fig, ax = plt.subplots(figsize=(9, 4.2))
    nbytes = {"allgather": res.ranks[0]["ag_bytes"], "alltoall": res.ranks[0]["a2a_bytes"]}
    for ci, coll in enumerate(COLLECTIVES):
        xs, ys = [], []
        for i in range(0, len(steps) - w + 1, w):
            chunk = steps[i:i + w]
            xs.append(chunk[-1][0] - t0)
            busy_s = sum(r[1] if ci == 0 else r[2] for r in chunk)
            ys.append(len(chunk) * nbytes[coll] / busy_s / 1e6)
        ax.plot(xs, ys, label=f"{coll} algbw", color=("tab:blue", "tab:orange")[ci])
    for a, b in res.fault_wall:
        if a is not None:
            ax.axvspan(a - t0, (b if b is not None else steps[-1][0]) - t0, color="red", alpha=0.08,
                       label=f"{res.config['failure']} injected")
    marks = {"flag": ("tab:red", ":"), "publish": ("tab:green", "--")}
    seen = set()
    for e in res.events:
        if e.get("event") in marks and e.get("t_s", 0) >= t0:
            c, ls = marks[e["event"]]
            lab = None if e["event"] in seen else ("detector flag" if e["event"] == "flag" else "new version published")
            seen.add(e["event"])
            ax.axvline(e["t_s"] - t0, color=c, ls=ls, lw=1, label=lab)
    for sw in res.ranks[0]["swaps"][1:]:
        if sw[2]:
            lab = None if "swap" in seen else "all ranks switch"
            seen.add("swap")
            ax.axvline(sw[2] - t0, color="k", ls="-", lw=0.8, alpha=0.6, label=lab)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("algbw (MB/s, emulated links)")
    ax.set_title(f"loopcoll live loop: {res.config['topology']} / {res.config['gbps_scale']:g} on "
                 f"{len(res.ranks)} gloo processes")
    ax.legend(loc="lower left", fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    p = Path(path)
    tmp = p.with_name(f".{p.name}.tmp{os.getpid()}.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    os.replace(tmp, p)

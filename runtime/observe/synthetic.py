"""Seeded synthetic NCCL Inspector logs with injected slow periods and straggler ranks (tests, benchmarks).

The model follows the Inspector's semantics: in each collective every rank arrives with a small random delay,
straggler ranks arrive late (by ``straggler_delay`` × the transfer time, with probability ``straggler_prob``),
and a rank's recorded exec time is the transfer time plus its wait for the last rank — so the last rank shows
the shortest time. Inside a slow period the transfer time of the affected communicator is divided by the
period's factor. Occasional one-off late arrivals of random ranks (``hiccup_prob``) are distractors that a
straggler detector must not flag. Records are dumped on a per-process tick (``dump_interval_s``), as the
plugin's dump thread does; ``fmt`` selects self-contained v4.0 lines or v4.3 ``dump_stats`` markers with bare
bodies. One file per process, ``<host>-pid<pid>.log`` (``.log.gz`` with ``gzip_files``).

>>> import tempfile
>>> t = write_logs(tempfile.mkdtemp(), SyntheticSpec(nranks=4, ncolls=10, stragglers=(1,), seed=0))
>>> len(t.files), t.records, t.stragglers
(4, 80, (1,))
"""

from __future__ import annotations

import gzip
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from runtime.observe.errors import ObserveError

__all__ = ["SyntheticSpec", "SyntheticTruth", "random_spec", "write_logs"]

_TRAFFIC_N = ("AllGather", "ReduceScatter", "AllGatherV")


@dataclass(frozen=True, slots=True)
class SyntheticSpec:
    """What to generate. Times are seconds from the run's start; ``slow_periods`` are ``(start_s, end_s,
    factor)`` with busbw multiplied by ``factor`` (< 1) inside; ``colls`` lists ``(collective, per-rank message
    bytes)`` run once per iteration, every ``iter_s`` seconds."""

    nranks: int = 16
    ncolls: int = 400
    ranks_per_node: int = 8
    colls: tuple[tuple[str, int], ...] = (("AllGather", 8 << 20), ("AllReduce", 32 << 20))
    busbw_gbs: float = 150.0
    iter_s: float = 0.5
    dump_interval_s: float = 0.5
    noise: float = 0.03
    jitter: float = 0.02
    stragglers: tuple[int, ...] = ()
    straggler_delay: float = 0.3
    straggler_prob: float = 0.9
    hiccup_prob: float = 0.02
    slow_periods: tuple[tuple[float, float, float], ...] = ()
    p2p: bool = False
    fmt: str = "v4.0"
    gzip_files: bool = False
    comm_id: str = "0x5eed0c0ffee"
    comm_name: str = "world"
    t0_s: float = 1_800_000_000.0
    seed: int = 0


@dataclass(frozen=True, slots=True)
class SyntheticTruth:
    """The injected truth: absolute slow-period times (Unix s), straggler ranks, files written, records."""

    t0_s: float
    slow_periods: tuple[tuple[float, float, float], ...]
    stragglers: tuple[int, ...]
    files: tuple[str, ...] = field(default=())
    records: int = 0


def _bus_factor(coll: str, n: int) -> float:
    if coll == "AllReduce":
        return 2.0 * (n - 1) / n
    if coll in _TRAFFIC_N:
        return (n - 1) / n
    return 1.0


def write_logs(directory: str | os.PathLike[str], spec: SyntheticSpec) -> SyntheticTruth:
    """Write one Inspector log per rank under ``directory``; returns the injected truth."""
    n = spec.nranks
    if n < 2 or spec.ncolls < 1 or not spec.colls:
        raise ObserveError("synthetic logs need nranks >= 2, ncolls >= 1 and at least one collective")
    if spec.fmt not in ("v4.0", "v4.3"):
        raise ObserveError(f"synthetic logs: fmt must be 'v4.0' or 'v4.3', got {spec.fmt!r}")
    if any(not 0 <= r < n for r in spec.stragglers):
        raise ObserveError(f"synthetic logs: straggler ranks must be in [0, {n})")
    rng = np.random.default_rng(spec.seed)
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    iters, kinds = spec.ncolls, len(spec.colls)
    # Completion-time skeleton: iteration i starts at i*iter_s, its collectives run back to back.
    t_iter = np.arange(iters) * spec.iter_s
    nnodes = -(-n // spec.ranks_per_node)
    slow = np.ones(iters)
    for a, b, f in spec.slow_periods:
        slow[(t_iter >= a) & (t_iter <= b)] = f
    straggler = np.zeros(n, dtype=bool)
    straggler[list(spec.stragglers)] = True
    tick_phase = rng.uniform(0, spec.dump_interval_s, size=n)
    lines: list[list[tuple[float, int, str]]] = [[] for _ in range(n)]
    records = 0
    for k, (coll, msg) in enumerate(spec.colls):
        nfac = n if coll in _TRAFFIC_N else 1
        bus = _bus_factor(coll, n)
        algbw = spec.busbw_gbs / bus if bus > 0 else spec.busbw_gbs
        t_us = msg * nfac / 1e3 / algbw                       # healthy transfer time, µs
        transfer = t_us / slow * np.exp(rng.normal(0.0, spec.noise, size=iters))            # (iters,)
        arrive = rng.exponential(spec.jitter, size=(iters, n)) * transfer[:, None]
        late = straggler[None, :] & (rng.random((iters, n)) < spec.straggler_prob)
        arrive += late * spec.straggler_delay * transfer[:, None]
        hic = rng.random((iters, n)) < spec.hiccup_prob / n
        arrive += hic * rng.uniform(0.2, 1.0, size=(iters, n)) * transfer[:, None]
        exec_us = transfer[:, None] + (arrive.max(axis=1, keepdims=True) - arrive)
        exec_us *= np.exp(rng.normal(0.0, 0.005, size=(iters, n)))
        exec_us = np.maximum(np.rint(exec_us), 1.0)
        algbw_r = msg * nfac / 1e3 / exec_us
        busbw_r = algbw_r * bus
        t_done = t_iter + (k + 1) * spec.iter_s / (kinds + 1)
        dump = (np.ceil((t_done[:, None] - tick_phase[None, :]) / spec.dump_interval_s) * spec.dump_interval_s
                + tick_phase[None, :])
        dump_us = np.rint((spec.t0_s + dump) * 1e6).astype(np.int64)
        for r in range(n):
            lr = lines[r]
            for i in range(iters):
                body = (f'"coll_perf":{{"coll":"{coll}","coll_sn":{i},"coll_msg_size_bytes":{msg},'
                        f'"coll_exec_time_us":{int(exec_us[i, r])},"coll_timing_source":"kernel_gpu",'
                        f'"coll_algobw_gbs":{algbw_r[i, r]:.6f},"coll_busbw_gbs":{busbw_r[i, r]:.6f}}}')
                lr.append((float(dump_us[i, r]), k, body))
        records += iters * n
    if spec.p2p:
        records += _p2p_lines(spec, rng, lines, slow, t_iter, tick_phase)
    files = []
    for r in range(n):
        host, pid = f"node{r // spec.ranks_per_node:03d}", 10000 + r
        header = json.dumps({"id": spec.comm_id, "comm_name": spec.comm_name, "rank": r, "n_ranks": n,
                             "nnodes": nnodes}, separators=(",", ":"))
        text = _log_text(spec, header, host, pid, sorted(lines[r], key=lambda x: (x[0], x[1])))
        name = out / f"{host}-pid{pid}.log{'.gz' if spec.gzip_files else ''}"
        data = "".join(text).encode()
        if spec.gzip_files:
            data = gzip.compress(data, compresslevel=1, mtime=0)
        name.write_bytes(data)
        files.append(str(name))
    periods = tuple((spec.t0_s + a, spec.t0_s + b, f) for a, b, f in spec.slow_periods)
    return SyntheticTruth(spec.t0_s, periods, tuple(sorted(spec.stragglers)), tuple(files), records)


def _p2p_lines(spec: SyntheticSpec, rng: np.random.Generator, lines: list[list[tuple[float, int, str]]],
               slow: npt.NDArray[np.floating[Any]], t_iter: npt.NDArray[np.floating[Any]],
               tick_phase: npt.NDArray[np.floating[Any]]) -> int:
    """Add each rank's ring Send/Recv records (after its collectives) to ``lines``; returns how many."""
    n, iters, kinds = spec.nranks, spec.ncolls, len(spec.colls)
    msg = spec.colls[0][1]
    t_us = msg / 1e3 / spec.busbw_gbs
    for r in range(n):
        tr = t_us / slow * np.exp(rng.normal(0.0, spec.noise, size=iters))
        t_done = t_iter + spec.iter_s * kinds / (kinds + 1)
        dump = np.ceil((t_done - tick_phase[r]) / spec.dump_interval_s) * spec.dump_interval_s + tick_phase[r]
        for i in range(iters):
            for j, (op, peer) in enumerate((("Send", (r + 1) % n), ("Recv", (r - 1) % n))):
                t = max(1, int(round(tr[i])))
                bw = msg / 1e3 / t
                body = (f'"p2p_perf":{{"p2p":"{op}","p2p_sn":{2 * i + j},"p2p_peer":{peer},'
                        f'"p2p_msg_size_bytes":{msg},"p2p_exec_time_us":{t},"p2p_timing_source":"kernel_gpu",'
                        f'"p2p_algobw_gbs":{bw:.6f},"p2p_busbw_gbs":{bw:.6f}}}')
                lines[r].append((float(np.rint((spec.t0_s + dump[i]) * 1e6)), kinds + j, body))
    return 2 * iters * n


def _log_text(spec: SyntheticSpec, header: str, host: str, pid: int,
              recs: list[tuple[float, int, str]]) -> list[str]:
    """One rank's log lines in ``spec.fmt``: v4.0 (header and metadata on every record) or v4.3 (a
    ``dump_stats`` marker per dump, then bare bodies)."""
    text: list[str] = []
    if spec.fmt == "v4.0":
        for j, (ts, _k, body) in enumerate(recs):
            meta = (f'{{"inspector_output_format_version":"v4.0","git_rev":"synthetic","rec_mechanism":'
                    f'"nccl_profiler_interface","dump_timestamp_us":{int(ts) + j % 64},"hostname":"{host}",'
                    f'"pid":{pid}}}')
            text.append(f'{{"header":{header},"metadata":{meta},{body}}}\n')
    else:
        j = 0
        while j < len(recs):
            ts = recs[j][0]
            group = []
            while j < len(recs) and recs[j][0] == ts:
                group.append(recs[j][2])
                j += 1
            meta = (f'{{"inspector_output_format_version":"v4.3","git_rev":"synthetic","rec_mechanism":'
                    f'"nccl_profiler_interface","dump_timestamp_us":{int(ts)},"hostname":"{host}","pid":{pid}}}')
            ncoll = sum(1 for g in group if g.startswith('"coll_perf"'))
            text.append(f'{{"header":{header},"metadata":{meta},"dump_stats":{{"coll_count":{ncoll},'
                        f'"p2p_count":{len(group) - ncoll},"coll_dropped":0,"p2p_dropped":0}}}}\n')
            text.extend(f"{{{g}}}\n" for g in group)
    return text


def random_spec(seed: int, *, nranks: int = 512, ncolls: int = 240, iter_s: float = 0.5, max_periods: int = 3,
                max_stragglers: int = 8, fmt: str = "v4.0") -> SyntheticSpec:
    """A seeded scenario for benchmarks: 1..``max_periods`` non-overlapping slow periods of 8–20 s with busbw
    drops of 20–50 % (at least 6 s apart and away from the ends), and 1..``max_stragglers`` straggler ranks
    late by 20–50 % of the transfer time in 90 % of their collectives.

    >>> s = random_spec(3, nranks=32, ncolls=200)
    >>> 1 <= len(s.slow_periods) <= 3 and 1 <= len(s.stragglers) <= 8
    True
    """
    rng = np.random.default_rng(seed)
    span = ncolls * iter_s
    periods: list[tuple[float, float, float]] = []
    for _ in range(50):
        if len(periods) >= int(rng.integers(1, max_periods + 1)):
            break
        dur = float(rng.uniform(8.0, 20.0))
        a = float(rng.uniform(0.1 * span, 0.9 * span - dur))
        if all(a > q + 6.0 or a + dur < p - 6.0 for p, q, _ in periods):
            periods.append((round(a, 3), round(a + dur, 3), round(float(rng.uniform(0.5, 0.8)), 3)))
    k = int(rng.integers(1, max_stragglers + 1))
    strag = tuple(sorted(int(r) for r in rng.choice(nranks, size=k, replace=False)))
    return SyntheticSpec(nranks=nranks, ncolls=ncolls, iter_s=iter_s, stragglers=strag,
                         straggler_delay=float(rng.uniform(0.2, 0.5)), slow_periods=tuple(sorted(periods)),
                         fmt=fmt, seed=seed)

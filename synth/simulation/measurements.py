"""Readers of measured collective times for calibration: nccl-tests ``*_perf`` stdout
(:func:`parse_nccl_tests`, and :func:`format_nccl_tests` to write one), NCCL Inspector JSONL
(:func:`parse_inspector`) and ``loopcoll.telemetry/1`` JSONL (:func:`parse_telemetry`).

>>> parse_nccl_tests(format_nccl_tests("allreduce", 4, [(1 << 20, 30.0)]))["rows"]
[(1048576, 30.0, 34.95)]
"""

from __future__ import annotations

import gzip
import json
import re
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from synth.collective import COLLECTIVES, Collective
from synth.simulation.observations import HINT_ORDER, CalibrationError

__all__ = ["format_nccl_tests", "parse_inspector", "parse_nccl_tests", "parse_telemetry"]


_NCCL_TESTS_NAMES = {"all_gather": "allgather", "alltoall": "alltoall", "all_reduce": "allreduce",
                     "reduce_scatter": "reducescatter"}


def _num(tok: str) -> float | None:
    try:
        return float(tok)
    except ValueError:
        return None


def parse_nccl_tests(text: str, *, where: str = "nccl-tests output", collective: str | None = None) -> dict[str, Any]:
    """Read an nccl-tests ``*_perf`` stdout: ``{"collective", "nranks", "rows": [(size_B, time_us, algbw_GBps)]}``.

    Uses the out-of-place columns. Accepts the table with or without the ``redop`` / ``root``
    columns (older releases) and with per-iteration columns; ``collective`` comes from the
    ``# Collective test starting: all_gather_perf`` line when not given. ``nranks`` counts the
    ``#  Rank`` device lines (``None`` if there are none).

    >>> t = format_nccl_tests("allgather", 2, [(1048576, 75.0)])
    >>> d = parse_nccl_tests(t); d["collective"], d["nranks"], d["rows"][0][:2]
    ('allgather', 2, (1048576, 75.0))
    """
    coll = collective
    nranks = 0
    rows: list[tuple[int, float, float]] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if not s:
            continue
        if s.startswith("#"):
            m = re.search(r"Collective test starting:\s*(\w+?)_perf", s)
            if m and coll is None:
                coll = _NCCL_TESTS_NAMES.get(m.group(1))
                if coll is None:
                    raise CalibrationError(f"{where}: line {lineno}: unsupported nccl-tests program {m.group(1)}_perf")
            if re.match(r"#\s+Rank\s+\d+\s+Group", s):
                nranks += 1
            continue
        tok = s.split()
        if len(tok) < 7 or not tok[0].isdigit() or not tok[1].isdigit():
            continue
        size = int(tok[0])
        rest = tok[3:]  # after size, count, type
        if rest and _num(rest[0]) is None:  # redop
            rest = rest[1:]
        row = None
        for off in (0, 1):  # with or without a root column
            if len(rest) < off + 3:
                continue
            t, a = _num(rest[off]), _num(rest[off + 1])
            if t is None or a is None or t <= 0:
                continue
            expect = size / 1e9 / (t * 1e-6)
            if abs(a - expect) <= max(0.011, 0.02 * expect):
                row = (size, t, a)
                break
        if row is None:
            raise CalibrationError(f"{where}: line {lineno}: cannot read time and algbw from {s!r}")
        rows.append(row)
    if coll is None:
        raise CalibrationError(f"{where}: no nccl-tests header naming the collective (a '# Collective test starting: "
                               f"<name>_perf' line); pass --collective {HINT_ORDER} (collective= in Python)")
    if not rows:
        raise CalibrationError(f"{where}: no result rows")
    return {"collective": coll, "nranks": nranks or None, "rows": rows}


def format_nccl_tests(collective: str, nranks: int, rows: Sequence[tuple[int, float]], *, version: str = "2.17.1") -> str:
    """An nccl-tests style stdout for ``rows`` of ``(size_B, time_us)`` (same time in place).

    >>> print(format_nccl_tests("alltoall", 2, [(8388608, 83.1)]).splitlines()[-5])
         8388608       1048576     float    none      -1    83.10  100.95   50.47       0    83.10  100.95   50.47       0
    """
    prog = {v: k for k, v in _NCCL_TESTS_NAMES.items()}[collective]
    op = "sum" if collective in ("allreduce", "reducescatter") else "none"
    factor = Collective(collective).busbw_factor(nranks)
    out = [
        f"# nccl-tests version {version} nccl-headers=22809 nccl-library=22809",
        f"# Collective test starting: {prog}_perf",
        f"# nThread 1 nGpus 1 minBytes {rows[0][0]} maxBytes {rows[-1][0]} step: 2(factor) warmup iters: 5 iters: 20 "
        "agg iters: 1 validation: 1 graph: 0",
        "#",
        "# Using devices",
    ]
    out += [f"#  Rank {r:2d} Group  0 Pid {1000 + r:6d} on       node device {r:2d} [0000:{r:02x}:00] NVIDIA H200"
            for r in range(nranks)]
    out += [
        "#",
        "#                                                              out-of-place                       in-place          ",
        "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       ",
    ]
    for size, t in rows:
        a = size / 1e9 / (t * 1e-6)
        cols = f"{_w(t, 7)}  {_w(a, 6)}  {_w(a * factor, 6)}  {0:6d}"
        count = size // 4 if collective == "allreduce" else size // 4 // nranks  # nccl-tests prints the per-rank count
        out.append(f"{size:12d}  {count:12d}  {'float':>8s}  {op:>6s}  {-1:6d}  {cols}  {cols}")
    out += ["# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 0 ", "#",
            f"# Collective test concluded: {prog}_perf", ""]
    return "\n".join(out)


def _w(value: float, width: int) -> str:
    """nccl-tests' number format: 2 decimals, fewer when the field would overflow."""
    for fmt in (".2f", ".1f", ".0f"):
        s = f"{value:{width}{fmt}}"
        if len(s) <= width:
            return s
    return f"{value:{width}.1e}"


_INSPECTOR_NAMES = {"AllGather": "allgather", "ReduceScatter": "reducescatter", "AllReduce": "allreduce",
                    "All2All": "alltoall"}


def _open_text(path: Path) -> Iterable[str]:
    if path.suffix == ".gz":
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            yield from fh
    else:
        with open(path, encoding="utf-8") as fh:
            yield from fh


def parse_inspector(
    paths: Sequence[str | Path], *, window_us: tuple[float, float] | None = None
) -> dict[tuple[str, int], dict[str, Any]]:
    """Median kernel time per (collective, S) over NCCL Inspector ``coll_perf`` records.

    ``S`` follows nccl-tests: message × ranks for AllGather and ReduceScatter, the message for
    AllReduce. ``window_us`` keeps records whose ``dump_timestamp_us`` lies in it. Returns
    ``{(collective, S): {"time_us", "records", "nranks"}}``; unknown lines are skipped.
    """
    times: dict[tuple[str, int], list[float]] = defaultdict(list)
    ranks: dict[tuple[str, int], int] = {}
    for p in paths:
        path = Path(p)
        if not path.is_file():
            raise CalibrationError(f"{path}: no such Inspector log")
        for line in _open_text(path):
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            body = rec.get("coll_perf") if isinstance(rec, dict) else None
            if not isinstance(body, dict):
                continue
            coll = _INSPECTOR_NAMES.get(body.get("coll", ""))
            n = rec.get("header", {}).get("n_ranks")
            if coll is None or not isinstance(n, int):
                continue
            ts = rec.get("metadata", {}).get("dump_timestamp_us")
            if window_us is not None and not (isinstance(ts, (int, float)) and window_us[0] <= ts <= window_us[1]):
                continue
            try:
                msg = int(body["coll_msg_size_bytes"])
                t = float(body["coll_exec_time_us"])
            except (KeyError, TypeError, ValueError):
                continue
            if t <= 0:
                continue
            s = Collective(coll).message_bytes(msg, n)
            times[(coll, s)].append(t)
            ranks[(coll, s)] = n
    if not times:
        raise CalibrationError(f"{', '.join(map(str, paths))}: no usable coll_perf records")
    return {k: {"time_us": statistics.median(v), "records": len(v), "nranks": ranks[k]} for k, v in sorted(times.items())}


def parse_telemetry(paths: Sequence[str | Path]) -> dict[tuple[str, int, bool], dict[str, Any]]:
    """Median ``busy_s`` (as µs) of ``loopcoll.telemetry/1`` ``coll`` samples per (collective, S, native).

    ``native`` is true for samples of a native library collective (``version`` null).
    """
    times: dict[tuple[str, int, bool], list[float]] = defaultdict(list)
    for p in paths:
        path = Path(p)
        if not path.is_file():
            raise CalibrationError(f"{path}: no such telemetry file")
        for line in _open_text(path):
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if not isinstance(rec, dict) or rec.get("format") != "loopcoll.telemetry/1" or rec.get("kind") != "coll":
                continue
            coll, nbytes, busy = rec.get("collective"), rec.get("bytes"), rec.get("busy_s")
            if coll not in COLLECTIVES or not isinstance(nbytes, int) or nbytes <= 0:
                continue
            if not isinstance(busy, (int, float)) or not busy > 0:
                continue
            times[(coll, nbytes, rec.get("version") is None)].append(float(busy) * 1e6)
    if not times:
        raise CalibrationError(f"{', '.join(map(str, paths))}: no usable loopcoll.telemetry/1 coll samples")
    return {k: {"time_us": statistics.median(v), "records": len(v)} for k, v in sorted(times.items())}

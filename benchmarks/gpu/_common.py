"""Shared parts of the ``benchmarks/gpu/`` scripts: arguments, machine description, launching, output files.

Every script runs one process per GPU with ``--backend nccl`` (``torch.multiprocessing`` spawn, one
``torch.cuda.set_device`` per process, eager ``init_process_group("nccl", device_id=...)``, batched P2P only),
or a CPU dry run with ``--backend gloo --device cpu`` and tiny sizes. Results go to ``--out-dir``: default
``$OUT`` when set, else ``benchmarks/results/gpu/`` for NCCL runs and ``benchmarks/results/gpu/cpu-dryrun/``
for gloo runs.

>>> parse_size("64M"), parse_size("1G"), parse_size("4096")
(67108864, 1073741824, 4096)
>>> fmt_size(1 << 30), fmt_size(3 << 19)
('1G', '1.5M')
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks._report import markdown_table  # noqa: E402
from synth.fileio import write_text_atomic  # noqa: E402

__all__ = ["add_common", "environment", "fmt_size", "launch_workers", "out_dir", "parse_size", "resolve",
           "write_outputs"]

_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(text: str) -> int:
    """``"16M"`` -> 16777216 bytes (binary units)."""
    t = text.strip().upper().rstrip("B")
    return int(float(t[:-1]) * _UNITS[t[-1]]) if t and t[-1] in _UNITS else int(t)


def fmt_size(nbytes: int) -> str:
    """Bytes as the shortest binary-unit text (``1G``, ``64M``, ``1.5M``, ``4096``)."""
    for unit in ("G", "M", "K"):
        if nbytes >= _UNITS[unit]:
            return f"{nbytes / _UNITS[unit]:g}{unit}"
    return str(nbytes)


def add_common(ap: argparse.ArgumentParser, *, sizes: Sequence[str] = (), cpu_sizes: Sequence[str] = ()) -> None:
    """The options every GPU script shares."""
    ap.add_argument("--backend", default="nccl", choices=["nccl", "gloo"],
                    help="nccl: one process per GPU (default); gloo: CPU dry run")
    ap.add_argument("--device", default=None, choices=["cuda", "cpu"], help="default: cuda for nccl, cpu for gloo")
    ap.add_argument("--nprocs", type=int, default=None, help="processes (default: every visible GPU; gloo: 2)")
    ap.add_argument("--runs", type=int, default=5, help="timed runs per figure (medians; default 5)")
    ap.add_argument("--out-dir", default=None, help="where the JSON + markdown go (default: $OUT, else "
                    "benchmarks/results/gpu[/cpu-dryrun])")
    ap.add_argument("--timeout", type=float, default=540.0, help="seconds for the whole script (default 540)")
    if sizes:
        ap.add_argument("--sizes", nargs="+", default=None,
                        help=f"sizes S (default {' '.join(sizes)}; gloo: {' '.join(cpu_sizes)})")
    ap.set_defaults(_default_sizes=list(sizes), _cpu_sizes=list(cpu_sizes))


def resolve(args: argparse.Namespace) -> argparse.Namespace:
    """Fill backend-dependent defaults (device, process count, sizes); checks the combination."""
    from runtime.executor import ExecutorError

    if args.device is None:
        args.device = "cuda" if args.backend == "nccl" else "cpu"
    if (args.backend == "nccl") != (args.device == "cuda"):
        raise ExecutorError(f"--backend {args.backend} runs on --device {'cuda' if args.backend == 'nccl' else 'cpu'}")
    if args.nprocs is None:
        args.nprocs = gpu_count() if args.backend == "nccl" else 2
    if args.nprocs < 2:
        raise ExecutorError(f"needs at least 2 processes (GPUs), got {args.nprocs}")
    if args.runs < 1:
        raise ExecutorError("--runs must be >= 1")
    if hasattr(args, "sizes"):
        raw = args.sizes or (args._default_sizes if args.backend == "nccl" else args._cpu_sizes)
        args.size_bytes = [parse_size(s) for s in raw]
    return args


def gpu_count() -> int:
    """Visible GPUs, from ``nvidia-smi -L`` (the parent never initialises CUDA); 0 without one."""
    if os.environ.get("CUDA_VISIBLE_DEVICES") is not None:
        ids = [x for x in os.environ["CUDA_VISIBLE_DEVICES"].split(",") if x.strip()]
        return len(ids)
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return 0
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


def out_dir(args: argparse.Namespace) -> Path:
    """The output directory (created)."""
    if args.out_dir:
        path = Path(args.out_dir)
    elif os.environ.get("OUT"):
        path = Path(os.environ["OUT"])
    else:
        path = ROOT / "benchmarks" / "results" / "gpu" / ("" if args.backend == "nccl" else "cpu-dryrun")
    path.mkdir(parents=True, exist_ok=True)
    return path


def _smi(query: str) -> str | None:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run([smi, f"--query-gpu={query}", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30, check=False).stdout.strip().splitlines()
    except (OSError, subprocess.SubprocessError):
        return None
    return out[0].strip() if out else None


def environment(worker_env: dict[str, Any] | None, args: argparse.Namespace) -> dict[str, Any]:
    """Machine, driver, torch, CUDA and NCCL versions (the GPU figures come from rank 0's process)."""
    import torch

    env: dict[str, Any] = {"hostname": platform.node(), "python": platform.python_version(),
                           "machine": platform.machine(), "cpu_count": os.cpu_count(), "torch": torch.__version__,
                           "backend": args.backend, "device": args.device, "nprocs": args.nprocs,
                           "driver": _smi("driver_version")}
    env.update(worker_env or {})
    return env


def launch_workers(fn: Any, args: argparse.Namespace, *fn_args: Any) -> list[Any]:
    """Run ``fn(rank, world, *fn_args)`` in ``args.nprocs`` processes on the chosen backend."""
    from runtime.executor.launch import launch

    return launch(fn, args.nprocs, *fn_args, backend=args.backend, timeout_s=args.timeout, pg_timeout_s=120.0)


def write_outputs(name: str, args: argparse.Namespace, env: dict[str, Any], command: str,
                  sections: Sequence[tuple[str, Sequence[str], Sequence[dict[str, Any]]]],
                  targets: Sequence[str], extra: dict[str, Any] | None = None, notes: str = "") -> str:
    """Write ``NAME.json`` and ``NAME.md`` to the output directory; return (and print) the markdown."""
    path = out_dir(args)
    doc = {"benchmark": name, "command": command, "environment": env, "runs": args.runs, "targets": list(targets),
           "sections": {title: list(rows) for title, _cols, rows in sections}, "notes": notes, **(extra or {})}
    write_text_atomic(path / f"{name}.json", json.dumps(doc, indent=2, sort_keys=True, default=str) + "\n")
    gpu = env.get("gpu_name") or "CPU"
    md = [f"# {name}", "", f"Produced by `{command}`.", "",
          f"Machine: {env.get('hostname')} ({env.get('nprocs')} x {gpu}); backend {env.get('backend')}; "
          f"driver {env.get('driver')}; torch {env.get('torch')}; CUDA {env.get('cuda')}; NCCL {env.get('nccl')}. "
          f"Medians of {args.runs} runs."]
    if targets:
        md += ["", "Targets (issue #24): " + "; ".join(targets) + "."]
    for title, cols, rows in sections:
        md += ["", f"## {title}", "", markdown_table(cols, rows)]
    if notes:
        md += ["", notes]
    text = "\n".join(md) + "\n"
    write_text_atomic(path / f"{name}.md", text)
    print(text)
    return text


def command_line(script: str, argv: Sequence[str] | None) -> str:
    """The command that reproduces this run."""
    return f"python benchmarks/gpu/{script} " + " ".join(sys.argv[1:] if argv is None else argv)

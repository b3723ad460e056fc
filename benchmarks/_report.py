"""Shared helpers of the benchmark scripts: medians, tables, JSON + markdown output."""

from __future__ import annotations

import json
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

RESULTS = Path(__file__).resolve().parent / "results"
T = TypeVar("T")


def timed(fn: Callable[[], T], repeats: int) -> tuple[float, list[float], T]:
    """Median wall time of ``repeats`` calls, all times, and the last result."""
    times = []
    result: Any = None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), times, result


def markdown_table(columns: Sequence[str], rows: Sequence[dict[str, Any]]) -> str:
    def fmt(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.4g}" if abs(v) < 1e4 else f"{v:.0f}"
        return "" if v is None else str(v)

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(fmt(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def write_results(name: str, columns: Sequence[str], rows: Sequence[dict[str, Any]], command: str, notes: str = "") -> str:
    """Write ``results/NAME.json`` and ``results/NAME.md``; return the markdown table."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    env = {"python": platform.python_version(), "machine": platform.machine(), "processor": platform.processor()}
    doc = {"benchmark": name, "command": command, "environment": env, "rows": list(rows), "notes": notes}
    (RESULTS / f"{name}.json").write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    table = markdown_table(columns, rows)
    md = f"# {name}\n\nProduced by `{command}`.\n\n{table}\n"
    if notes:
        md += f"\n{notes}\n"
    (RESULTS / f"{name}.md").write_text(md)
    return table

"""Regenerate every benchmark result and every documented CLI output, and prove "identical before and after".

Run from the repository root::

    python benchmarks/regenerate.py --list                        # the table: result -> command (quick and full)
    python benchmarks/regenerate.py --against main                # quick variants in REV and in this tree, compared
    python benchmarks/regenerate.py --against HEAD~3 --only bounds,docs/cli.md
    python benchmarks/regenerate.py --full --write --only bounds  # rewrite benchmarks/results/ (full variant only)

``--against REV`` checks REV out as a temporary ``git worktree`` ("before") and copies this working tree,
uncommitted changes included, to a temporary directory ("after"), so that neither run touches the files of
this checkout. Each selected item runs sequentially in both, with ``PYTHONPATH`` at that tree; what it writes
under ``benchmarks/results/``, ``benchmarks/README.md`` and ``docs/cli.md`` (plus the standard output of a
documented command) is kept under ``--out DIR/{before,after}/ITEM/`` and compared after normalisation
(:data:`RULE`, documented in ``benchmarks/README.md``). Exit status 1 when an item differs or fails.

>>> [i.name for i in ITEMS][:3]
['bounds', 'allgather', 'alltoall']
>>> normalise_text("solve 0.123 s, 7 chunks, in 12ms")
'solve <t>, 7 chunks, in <t>'
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS_REL = "benchmarks/results"
WATCHED = (RESULTS_REL, "benchmarks/README.md", "docs/cli.md")  # where items write (tree-relative)
DOCS_WITH_OUTPUT = ("README.md", "docs/*.md")


# -- the table ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Item:
    """One regenerable thing: a benchmark invocation (``results`` it writes) or a documented command.

    ``full`` / ``quick`` are argument lists after ``python`` (several for a multi-process benchmark);
    ``quick`` runs the same code path at small sizes. ``regenerable`` is False (with ``why``) for results
    that need a GPU or many hours.
    """

    name: str
    results: tuple[str, ...]
    full: tuple[tuple[str, ...], ...]
    quick: tuple[tuple[str, ...], ...] = ()
    regenerable: bool = True
    why: str = ""
    kind: str = "benchmark"  # "benchmark" or "doc"
    script: str = ""  # doc items of kind "sh"/"python": the block's text
    always: tuple[str, ...] = ()  # tree-relative files kept even if the item did not rewrite them

    def commands(self, quick: bool) -> tuple[tuple[str, ...], ...]:
        """The argument lists of the chosen variant (quick falls back to full where both are the same)."""
        return (self.quick or self.full) if quick else self.full


def _b(*args: str) -> tuple[str, ...]:
    return ("benchmarks/" + args[0], *args[1:])


def _latency_full(name: str, specs: Sequence[str]) -> tuple[tuple[str, ...], ...]:
    """One ``--raw`` process per case, then ``--merge`` (what results/latency*.json record)."""
    cases = [(s, c) for s in specs for c in ("healthy", "fail1", "fail2", "fail3")]
    raws = [f"/tmp/regen_{name}_{s.replace(':', '_')}_{c}.json" for s, c in cases]
    runs = tuple(_b("latency.py", "--specs", s, "--scenarios", c, "--raw", raw) for (s, c), raw in zip(cases, raws))
    return (*runs, _b("latency.py", "--name", name, "--merge", *raws))


_GPU = "needs GPUs (benchmarks/gpu/, docs/gpu.md) or hours of 8-rank gloo runs; the table only records its command"

ITEMS: tuple[Item, ...] = (
    Item("bounds", ("bounds.json",), (_b("bounds.py", "--repeats", "3"),), (_b("bounds.py", "--quick", "--repeats", "1"),)),
    Item("allgather", ("allgather.json",), (_b("allgather.py"),),
         (_b("allgather.py", "--repeats", "1", "--only", "hpn:1x2x8", "dgx-a100:2"),)),
    Item("alltoall", ("alltoall.json",), (_b("alltoall.py", "--repeats", "5"),),
         (_b("alltoall.py", "--repeats", "1", "--repeats-large", "1", "--sizes", "1x2x8", "--solvers", "highs"),)),
    Item("scale", ("scale.json",), (_b("scale.py", "--profile"),), (_b("scale.py", "--quick"),)),
    Item("alltoallv", ("alltoallv.json",), (_b("alltoallv.py"),),
         (_b("alltoallv.py", "--sizes", "1x2x8", "--skews", "1", "--fails", "none,fail2", "--repeats", "1",
             "--steps", "2"),)),
    Item("simulator_speed", ("simulator_speed.json",), (_b("simulator_speed.py", "--repeats", "3"),),
         (_b("simulator_speed.py", "--quick", "--no-real", "--repeats", "1"),)),
    Item("mccl_fig9", ("mccl_fig9.json",), (_b("mccl_fig9.py"),), (_b("mccl_fig9.py", "--specs", "hpn:1x2x4", "--profiles", "ideal"),)),
    Item("calibration", ("calibration.json",), (_b("calibration.py"),), (_b("calibration.py", "--quick"),)),
    Item("closed_loop", ("closed_loop.json",), (_b("closed_loop.py"),), (_b("closed_loop.py", "--quick"),)),
    Item("noise", ("noise.json",), (_b("noise.py"),), (_b("noise.py", "--quick"),)),
    Item("live_loop", ("live_loop.json",), (_b("live_loop.py", "--runs", "5"),),
         (_b("live_loop.py", "--runs", "1", "--steps", "120", "--fault-at", "40", "--clear-at", "90"),),
         ),
    Item("daemon", ("daemon.json",), (_b("daemon.py"),), (_b("daemon.py", "--repeats", "1"),)),
    Item("publish", ("publish.json",), (_b("publish.py"),), (_b("publish.py", "--quick"),)),
    Item("loop_scale", ("loop_scale.json",), (_b("loop_scale.py", "--sizes", "1x16x8", "4x16x8"),),
         (_b("loop_scale.py", "--quick"),)),  # 1024 and 2048 ranks: the three items below
    Item("loop_scale_large", ("loop_scale_large.json",),
         (_b("loop_scale.py", "--sizes", "8x16x8", "16x16x8", "--collectives", "allgather", "reducescatter",
             "--out", "loop_scale_large"),),
         (_b("loop_scale.py", "--quick", "--out", "loop_scale_large"),)),
    Item("loop_scale_a2a", ("loop_scale_a2a.json",),
         (_b("loop_scale.py", "--sizes", "8x16x8", "--collectives", "alltoall", "--out", "loop_scale_a2a"),),
         (_b("loop_scale.py", "--quick", "--collectives", "alltoall", "--out", "loop_scale_a2a"),)),
    Item("loop_scale_a2a_noxml", ("loop_scale_a2a_noxml.json",),
         (_b("loop_scale.py", "--sizes", "8x16x8", "16x16x8", "--collectives", "alltoall", "--time-limit-s", "90",
             "--no-export", "--out", "loop_scale_a2a_noxml"),),
         (_b("loop_scale.py", "--quick", "--collectives", "alltoall", "--no-export", "--out",
             "loop_scale_a2a_noxml"),)),
    Item("schedule_json", ("schedule_json.json",), (_b("schedule_json.py"),), (_b("schedule_json.py", "--quick"),)),
    Item("executor", ("executor.json",),
         (_b("executor.py", "--nprocs", "4", "8", "--sizes", "1M", "16M", "--iters", "5", "--swaps", "5"),),
         (_b("executor.py", "--nprocs", "4", "--sizes", "1M", "--collectives", "allgather", "--iters", "1",
             "--swaps", "1"),)),
    Item("executor_full4", ("executor_full4.json",),
         (_b("executor.py", "--nprocs", "4", "--full", "--iters", "3", "--swaps", "5", "--out", "executor_full4"),),
         regenerable=False, why=_GPU),
    Item("executor_full8", ("executor_full8.json",),
         (_b("executor.py", "--nprocs", "8", "--sizes", "1M", "4M", "16M", "64M", "--iters", "3", "--swaps", "5",
             "--out", "executor_full8"),), regenerable=False, why=_GPU),
    Item("observe", ("observe.json",), (_b("observe.py", "--seeds", "10"),),
         (_b("observe.py", "--seeds", "1", "--ranks", "32", "--repeats", "1"),)),
    Item("contention", ("contention.json",), (_b("contention.py"),), (_b("contention.py", "--seeds", "1"),)),
    Item("latency", ("latency.json", "latency_pareto.json"), _latency_full("latency", ["hpn:1x4x8"]),
         (_b("latency.py", "--specs", "hpn:1x2x8", "--scenarios", "fail2", "--mb", "1", "16", "--no-between"),)),
    Item("latency_hpn", ("latency_hpn.json", "latency_hpn_pareto.json"),
         _latency_full("latency_hpn", ["hpn:1x16x8", "hpn:2x16x8"]),
         (_b("latency.py", "--name", "latency_hpn", "--specs", "hpn:1x2x8", "--scenarios", "fail1", "--mb", "4",
             "--no-between"),)),
    Item("mscclpp_plans", ("mscclpp_plans.json",), (_b("mscclpp_plans.py"),),
         (_b("mscclpp_plans.py", "--quick", "--repeats", "1"),)),
    Item("rounding", ("rounding.json",), (_b("rounding.py"),),
         (_b("rounding.py", "--fabrics", "random-6-seed1,random-12-seed2"),)),
    Item("routed", ("routed_fabrics.json", "routed_named.json"), (_b("routed.py", "--tree-limit", "90"),),
         (_b("routed.py", "--quick", "--tree-limit", "20"),)),
    Item("routed_speed", ("routed_speed.json",), (_b("routed_speed.py"),),
         (_b("routed_speed.py", "--fabrics", "mi250-1,random-6-seed1", "--repeats", "1"),)),
    Item("training", ("training.json", "training_collectives.json"),
         (_b("training.py", "--skip-solve", "--skip-model-error", "--time-limit", "60"),),
         (_b("training.py", "--gpus", "128", "--skip-solve", "--skip-model-error", "--time-limit", "20"),)),
    Item("training_solve", ("training_solve.json",),
         (_b("training.py", "--skip-iteration", "--skip-model-error", "--gpus", "128", "256", "512", "1024"),
          _b("training.py", "--skip-iteration", "--skip-model-error", "--gpus", "2048", "--solve-merge",
             "--time-limit", "60")),
         (_b("training.py", "--skip-iteration", "--skip-model-error", "--gpus", "128", "--time-limit", "20"),)),
    Item("training_model_error", ("training_model_error.json",),
         (_b("training.py", "--skip-iteration", "--skip-solve", "--error-gpus", "16", "32", "64"),),
         (_b("training.py", "--skip-iteration", "--skip-solve", "--error-gpus", "16"),)),
    Item("docs/cli.md", (), (("-m", "loopcoll._cli_doc"),), kind="doc", always=("docs/cli.md",)),
)


# -- documented commands --------------------------------------------------------------------------------------
_FENCE = re.compile(r"^```(\w*)[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)


def doc_items(root: Path) -> list[Item]:
    """The documented commands with output under ``root``: ``$ loopcoll …`` lines in any fenced block, and
    README's ```sh / ```python blocks directly followed by a ```text block (what tests/test_readme.py runs).

    >>> names = [i.name for i in doc_items(ROOT)]
    >>> any(n.startswith("docs/tour.md:") for n in names) and any(n.startswith("README.md:") for n in names)
    True
    """
    items: list[Item] = []
    paths = sorted({p for pattern in DOCS_WITH_OUTPUT for p in root.glob(pattern)})
    for path in paths:
        rel = path.relative_to(root).as_posix()
        text = path.read_text(encoding="utf-8")
        blocks = list(_FENCE.finditer(text))
        for k, m in enumerate(blocks):
            first = text.count("\n", 0, m.start(2)) + 1
            for n, line in enumerate(m.group(2).splitlines()):
                if line.startswith("$ loopcoll "):
                    argv = ("-m", "loopcoll", *shlex.split(line[len("$ loopcoll "):]))
                    items.append(Item(f"{rel}:{first + n}", (), (argv,), kind="doc"))
            follows = k + 1 < len(blocks) and blocks[k + 1].group(1) == "text" \
                and not text[m.end():blocks[k + 1].start()].strip()
            if rel == "README.md" and m.group(1) in ("sh", "python") and follows:
                items.append(Item(f"{rel}:{first - 1}", (), (), kind=m.group(1), script=m.group(2)))
    return items


def _shell_script(block: str) -> str:
    """The bash script of a README sh block: ``pip install … &&`` prefixes dropped (the package is installed)."""
    lines = ["set -euo pipefail", "trap 'kill $(jobs -p) 2>/dev/null || true' EXIT"]
    for raw in block.splitlines():
        parts = raw.split(" && ")
        while parts and parts[0].lstrip().startswith("pip install"):
            parts.pop(0)
        lines.append(" && ".join(parts))
    return "\n".join(lines) + "\n"


# -- the normalisation rule: what may differ between two runs of the same code -------------------------------
@dataclass(frozen=True)
class Rule:
    """Timing and machine facts, ignored by the comparison; everything else must be equal.

    JSON keys: a key is a timing when it ends in one of ``key_suffixes`` or contains one of ``key_parts``
    (case-insensitive); its value becomes ``"<t>"`` (``null`` stays ``null``). Markdown table columns
    are judged by their header the same way. In text (strings, markdown, standard output) every number
    followed by a time unit (``0.123 s``, ``12ms``, ``+32.94s``, ``3 min``), every ISO date-time and every
    absolute path of a tree or temporary directory is replaced, and so is each match of ``text_res`` (the load
    average, loopback ports, pids, and the daemon's ``poll`` and ``bytes_in`` counters, which count wall-clock
    polls and timestamp bytes). In documented command output, numbers with 3
    or more decimals not followed by a non-time unit are timings too (tests/test_readme.py's convention).
    Items in ``measured_items`` measure every number they report (wall clock on gloo): there only keys, strings
    and shapes are compared. Items in ``rounded_items`` average a number of simulated collectives that depends on
    the measured synthesis time (the timeline advances by it), so equal rows add up in a different order: their
    floats are compared to that many significant digits. Of a file in ``generated_parts`` only the generated
    part is compared (the prose around it may change). JSON must keep its key order and number types. Images
    are not compared (their pixels carry timings);
    files other than JSON, markdown and text are compared byte for byte (XML, schedules).
    """

    key_suffixes: tuple[str, ...] = ("_s", "_ms", "_us", "_ns", "time", "times", "speedup", "per_min", "elapsed")
    #: ``recovered``: closed_loop's ``recovered_GBps`` averages the recovery window, as long as the measured synthesis.
    key_parts: tuple[str, ...] = ("cpu", "rss", "date", "hostname", "wall", "time_ratio", "recovered")
    unit_re: str = r"[+-]?\d+(?:\.\d+)?(?:e[+-]?\d+)?\s?(?:s|ms|us|µs|ns|min|sec|seconds)\b"
    date_re: str = r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?"
    doc_decimals_re: str = r"\d+\.\d{3,}(?!\d|\s*(?:GB|MB|KB|Gbit|x\b|%))"
    text_res: tuple[str, ...] = (r"load average \d+(?:\.\d+)?", r"(?<=127\.0\.0\.1:)\d+", r"(?<=pid )\d+",
                                 r"(?<=poll )\d+", r"(?<=bytes_in )\d+")  # ports, pids, the daemon's timed counters
    skipped_suffixes: tuple[str, ...] = (".png", ".svg", ".pdf")
    measured_items: frozenset[str] = frozenset({"daemon", "executor", "executor_full4", "executor_full8", "live_loop",
                                                "loop_scale", "loop_scale_large", "loop_scale_a2a",
                                                "loop_scale_a2a_noxml"})
    rounded_items: tuple[tuple[str, int], ...] = (("closed_loop", 12), ("noise", 12))
    #: Hand-written files with a generated part: only the part between the markers is compared.
    generated_parts: tuple[tuple[str, str, str], ...] = (
        ("benchmarks/README.md", "<!-- mccl_fig9:begin -->", "<!-- mccl_fig9:end -->"),
        ("docs/cli.md", "<!-- cli:begin", "<!-- cli:end -->"))

    #: Nondeterminism found by this script (item, pattern masked in its text, where and why). An item is
    #: named by its file and a piece of its text (``README.md``, ``--daemon``), not by its line number, so that
    #: an edit above the block does not silently drop the mask.
    known_nondeterminism: tuple[tuple[str, str, str], ...] = (
        ("README.md|examples/executor_training.py --nprocs 2 --daemon", r'(?:\b(?:accepted|samples_accepted|samples_received|messages_samples)|"reduction_phase":) \d+',
         "revisions before Executor.close() waited for a followed client's queue (fixed with issue 29's merge) lost "
         "the last telemetry samples at exit: kept masked so that --against an older revision compares"),
        ("README.md|examples/executor_training.py --nprocs 2 --daemon", r'\d+ observed, \d+ below nominal|\S+ of \S+ Gbit/s \(\d+%\), \d+ observations|'
                          r'max delta \S+ (?:<=|>) gamma \S+; x_min \S+ Gbit/s|\bgroups \d+',
         "since issue 32 the example's AllReduce samples feed the estimator: link levels, observation and group "
         "counts and the verdict's figures are measured timing of loopback gloo transfers"),)

    def masks(self, item: Item) -> list[tuple[str, str]]:
        """The (pattern, reason) pairs of :attr:`known_nondeterminism` that apply to ``item``: those whose key
        is ``FILE|TEXT`` with ``item`` in FILE and its script holding TEXT (or a plain item name).

        >>> readme = [i for i in doc_items(ROOT) if i.name.startswith("README.md:")]
        >>> sum(bool(RULE.masks(i)) for i in readme)
        1
        """
        found = []
        for key, pattern, why in self.known_nondeterminism:
            where, _, needle = key.partition("|")
            if (item.name.rpartition(":")[0] == where and needle in item.script) if needle else item.name == where:
                found.append((pattern, why))
        return found

    def digits(self, item: str) -> int | None:
        """How an item's numbers are compared: None exactly, 0 not at all, else to that many significant digits.

        >>> RULE.digits("bounds"), RULE.digits("daemon"), RULE.digits("closed_loop")
        (None, 0, 12)
        """
        return 0 if item in self.measured_items else dict(self.rounded_items).get(item)

    def is_timing_key(self, key: str) -> bool:
        """``True`` for a key whose value is a measurement.

        >>> RULE.is_timing_key("cold_s"), RULE.is_timing_key("peak_rss_MiB"), RULE.is_timing_key("algbw_GBps")
        (True, True, False)
        """
        low = key.lower()
        return low.endswith(self.key_suffixes) or any(p in low for p in self.key_parts)


RULE = Rule()
_PATHS: list[str] = []  # tree and temporary roots of this run, longest first (replaced by <tree>)


def normalise_text(text: str, doc: bool = False) -> str:
    """``text`` with timings, dates and run directories replaced (see :class:`Rule`)."""
    for p in _PATHS:
        text = text.replace(p, "<tree>")
    text = re.sub(RULE.date_re, "<date>", text)
    text = re.sub(RULE.unit_re, "<t>", text)
    for extra in RULE.text_res:
        text = re.sub(extra, "<t>", text)
    if doc:
        text = re.sub(RULE.doc_decimals_re, "<t>", text)
    return _normalise_tables(text)


def _normalise_tables(text: str) -> str:
    out, header = [], None
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if line.startswith("|") and i + 1 < len(lines) and re.match(r"^\|(\s*:?-+:?\s*\|)+\s*$", lines[i + 1]):
            header = [c.strip().strip("`").replace(" ", "_") for c in line.strip().strip("|").split("|")]
        elif not line.startswith("|"):
            header = None
        elif header and not re.match(r"^\|(\s*:?-+:?\s*\|)+\s*$", line):
            cells = line.strip().strip("|").split("|")
            cells = [" <t> " if j < len(header) and RULE.is_timing_key(header[j]) else c for j, c in enumerate(cells)]
            line = "|" + "|".join(cells) + "|"
        out.append(line)
    return "\n".join(out)


def normalise_json(doc: Any, digits: int | None = None) -> Any:
    """``doc`` with timing values replaced by ``"<t>"``, numbers kept to ``digits`` (see :meth:`Rule.digits`).

    >>> normalise_json({"cold_s": 0.2, "algbw_GBps": 7.5, "warm_s": None, "note": "in 3 s"})
    {'cold_s': '<t>', 'algbw_GBps': 7.5, 'warm_s': None, 'note': 'in <t>'}
    >>> normalise_json([1.23456, 7], digits=3), normalise_json([1.5, True], digits=0)
    ([1.23, 7], ['<n>', True])
    """
    if isinstance(doc, dict):
        return {k: ("<t>" if v is not None and RULE.is_timing_key(str(k)) and not isinstance(v, dict)
                    else normalise_json(v, digits)) for k, v in doc.items()}
    if isinstance(doc, list):
        return [normalise_json(v, digits) for v in doc]
    if isinstance(doc, str):
        return normalise_text(doc)
    if digits == 0 and isinstance(doc, (int, float)) and not isinstance(doc, bool):
        return "<n>"
    if digits and isinstance(doc, float) and math.isfinite(doc):
        return float(f"{doc:.{digits}g}")
    return doc


def first_json_difference(a: Any, b: Any, path: str = "") -> str | None:
    """The path of the first difference between two normalised JSON values, or None.

    >>> first_json_difference({"rows": [{"a": 1}, {"a": 2}]}, {"rows": [{"a": 1}, {"a": 3}]})
    'rows[1].a: 2 != 3'
    """
    if isinstance(a, dict) and isinstance(b, dict):
        if list(a) != list(b):
            return f"{path or '.'}: keys {list(a)} != {list(b)}"
        for k in a:
            d = first_json_difference(a[k], b[k], f"{path}.{k}" if path else str(k))
            if d:
                return d
        return None
    if isinstance(a, list) and isinstance(b, list):
        for i, (x, y) in enumerate(zip(a, b)):
            d = first_json_difference(x, y, f"{path}[{i}]")
            if d:
                return d
        return None if len(a) == len(b) else f"{path}: {len(a)} != {len(b)} entries"
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return None
    if a != b or type(a) is not type(b):
        return f"{path}: {str(a)[:60]} != {str(b)[:60]}"
    return None


def compare_file(rel: str, before: bytes, after: bytes, doc: bool = False, digits: int | None = None,
                 masks: Sequence[str] = ()) -> str | None:
    """None when the two versions of ``rel`` are equal under :data:`RULE`, else the first difference.

    >>> compare_file("a.json", b'{"cold_s": 1, "N": 16}', b'{"cold_s": 2, "N": 32}')
    'a.json: N: 16 != 32'
    """
    for name, begin, end in RULE.generated_parts:
        if rel.endswith(name):
            before, after = (_part(t, begin.encode(), end.encode()) for t in (before, after))
    if rel.endswith(RULE.skipped_suffixes):
        return None
    if rel.endswith(".json"):
        try:
            a, b = json.loads(before), json.loads(after)
        except ValueError:
            pass
        else:
            return _prefix(rel, first_json_difference(normalise_json(a, digits), normalise_json(b, digits)))
    if rel.endswith((".md", ".txt")):
        ta, tb = (normalise_text(t.decode(), doc) for t in (before, after))
        if digits == 0:
            ta, tb = (re.sub(r"[+-]?\d+(?:\.\d+)?(?:e[+-]?\d+)?", "<n>", t) for t in (ta, tb))
        for pattern in masks:
            ta, tb = (re.sub(pattern, "<masked>", t) for t in (ta, tb))
        la, lb = ta.splitlines(), tb.splitlines()
        for n, (x, y) in enumerate(zip(la, lb), 1):
            if x != y:
                return f"{rel}:{n}: {x.strip()[:50]!r} != {y.strip()[:50]!r}"
        return None if len(la) == len(lb) else f"{rel}: {len(la)} != {len(lb)} lines"
    return None if before == after else f"{rel}: bytes differ"


def _part(text: bytes, begin: bytes, end: bytes) -> bytes:
    """The lines from ``begin`` to ``end`` (the whole text when a marker is missing)."""
    i = text.find(begin)
    j = text.find(end, max(i, 0))
    return text if i < 0 or j < 0 else text[i:j + len(end)]


def _prefix(rel: str, diff: str | None) -> str | None:
    return None if diff is None else f"{rel}: {diff}"


# -- running --------------------------------------------------------------------------------------------------
@dataclass
class Run:
    """What one item left in one tree: status, seconds, and its files (item-relative path -> bytes)."""

    status: str  # "ok", "failed (exit N)", "timeout after N s", "not run"
    seconds: float = 0.0
    files: dict[str, bytes] = field(default_factory=dict)


def _snapshot(tree: Path) -> dict[str, tuple[int, int]]:
    snap = {}
    for rel in WATCHED:
        p = tree / rel
        for f in (sorted(p.rglob("*")) if p.is_dir() else [p]):
            if f.is_file():
                st = f.stat()
                snap[f.relative_to(tree).as_posix()] = (st.st_mtime_ns, st.st_size)
    return snap


def _wrappers(bin_dir: Path) -> None:
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name, args in (("loopcoll", '-m loopcoll "$@"'), ("python", '"$@"')):
        (bin_dir / name).write_text(f'#!/bin/sh\nexec "{sys.executable}" {args}\n', encoding="utf-8")
        (bin_dir / name).chmod(0o755)


def _execute(cmd: list[str], cwd: Path, env: dict[str, str], timeout_s: float, stdout: Path, log: Path) -> str:
    """Run ``cmd`` in its own session (killed with all it started when done or past ``timeout_s``)."""
    with stdout.open("ab") as out, log.open("ab") as err:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=err, start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            rc = None
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # the item's own session: whatever it started ends with it
            except ProcessLookupError:
                pass
            proc.wait()
    if rc is None:
        return f"timeout after {timeout_s:g} s"
    return "ok" if rc == 0 else f"failed (exit {rc})"


def run_item(item: Item, tree: Path, quick: bool, timeout_s: float, out: Path) -> Run:
    """Run ``item`` in ``tree`` (sequentially, one process at a time) and collect what it wrote into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    log = out / "log.txt"
    log.write_bytes(b"")
    env = dict(os.environ, PYTHONPATH=str(tree))
    before = _snapshot(tree)
    start = time.perf_counter()
    status = "ok"
    if item.kind in ("sh", "python"):
        cwd = Path(tempfile.mkdtemp(prefix="regen_doc_", dir=out))
        (cwd / "examples").symlink_to(tree / "examples")
        _wrappers(cwd / ".bin")
        env["PATH"] = os.pathsep.join([str(cwd / ".bin"), env.get("PATH", "")])
        cmd = ["bash", "-c", _shell_script(item.script)] if item.kind == "sh" else [sys.executable, "-c", item.script]
        stdout = out / "stdout.txt"
        status = _execute(cmd, cwd, env, timeout_s, stdout, log)
        shutil.rmtree(cwd, ignore_errors=True)
    else:
        for argv in item.commands(quick):
            target = out / "stdout.txt" if item.kind == "doc" else log  # progress on stderr is not compared
            status = _execute([sys.executable, *argv], tree, env, max(1.0, timeout_s - (time.perf_counter() - start)),
                              target, log)
            if status != "ok":
                break
    seconds = time.perf_counter() - start
    files = {f"tree/{rel}": (tree / rel).read_bytes() for rel, stamp in _snapshot(tree).items()
             if before.get(rel) != stamp or rel in item.always}
    if item.kind != "benchmark":
        files["stdout.txt"] = (out / "stdout.txt").read_bytes() if (out / "stdout.txt").exists() else b""
    for rel, data in files.items():
        dest = out / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(data)
    return Run(status, seconds, files)


def compare_runs(item: Item, a: Run, b: Run) -> str:
    """``"identical"`` or ``"differs: …"`` (the first differing key or line) or why nothing was compared."""
    if a.status != "ok" or b.status != "ok":
        return f"not compared: before {a.status}, after {b.status}"
    if sorted(a.files) != sorted(b.files):
        only = sorted(set(a.files) ^ set(b.files))
        return f"differs: files written only on one side: {', '.join(only)[:80]}"
    doc = item.kind != "benchmark"
    for rel in sorted(a.files):
        masks = [pattern for pattern, _ in RULE.masks(item)]
        d = compare_file(rel, a.files[rel], b.files[rel], doc=doc, digits=RULE.digits(item.name), masks=masks)
        if d:
            return f"differs: {d}"
    known = "; ".join(why for _, why in RULE.masks(item))
    return f"identical (masked known nondeterminism: {known})" if known else "identical"


def copy_worktree(src: Path, dest: Path) -> None:
    """Copy the tracked and untracked (not ignored) files of the git checkout ``src`` to ``dest``."""
    names = subprocess.run(["git", "-C", str(src), "ls-files", "-z", "-co", "--exclude-standard"], check=True,
                           capture_output=True).stdout.decode().split("\0")
    for rel in filter(None, names):
        s = src / rel
        if s.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(s, dest / rel)


def select(items: Sequence[Item], only: str | None) -> list[Item]:
    """The items named in ``only`` (comma-separated; a name ending in ``*`` is a prefix), else all of them."""
    if not only:
        return list(items)
    wanted = [w.strip() for w in only.split(",") if w.strip()]
    known = {i.name for i in items}
    unknown = [w for w in wanted if not (w.endswith("*") or w in known)]
    if unknown:
        raise SystemExit(f"regenerate: error: unknown item(s) {', '.join(unknown)} (see --list)")
    return [i for i in items if any(i.name == w or (w.endswith("*") and i.name.startswith(w[:-1])) for w in wanted)]


def _print_list(items: Sequence[Item]) -> None:
    for item in items:
        flag = "" if item.regenerable else f"  [not regenerable here: {item.why}]"
        results = ", ".join(item.results) or "-"
        print(f"{item.name}: results {results}{flag}")
        if item.script:
            print(f"  {item.kind} block: {item.script.splitlines()[0][:90]} …")
        for label, variant in (("full ", item.full), ("quick", item.quick)):
            for argv in variant:
                print(f"  {label} python {shlex.join(argv)}")


def _table(rows: Iterator[tuple[str, str, str, str]] | list[tuple[str, str, str, str]]) -> None:
    rows = list(rows)
    width = max([len("item")] + [len(r[0]) for r in rows])
    print(f"\n{'item':<{width}}  {'before':>10}  {'after':>10}  result")
    for name, a, b, verdict in rows:
        print(f"{name:<{width}}  {a:>10}  {b:>10}  {verdict}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--against", metavar="REV", help="compare with REV (a temporary git worktree)")
    variant = ap.add_mutually_exclusive_group()
    variant.add_argument("--quick", dest="quick", action="store_true", default=True, help="quick variants (default)")
    variant.add_argument("--full", dest="quick", action="store_false", help="the full commands (hours for some)")
    ap.add_argument("--only", metavar="NAME[,NAME]", help="items to run (see --list; 'docs*' = every doc item)")
    ap.add_argument("--list", action="store_true", help="print the table and exit")
    ap.add_argument("--out", metavar="DIR", default=None, help="where both trees' outputs go (default: a temp dir)")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per item and tree (default 600)")
    ap.add_argument("--write", action="store_true", help="run in this checkout, rewriting benchmarks/results/ (--full)")
    args = ap.parse_args(argv)
    items = select([*ITEMS, *doc_items(ROOT)], args.only)
    if args.list:
        _print_list(items)
        return 0
    if args.write and (args.quick or args.against):
        ap.error("--write needs --full and no --against (quick results must not replace the full ones)")
    out = Path(args.out or tempfile.mkdtemp(prefix="regen_out_")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="regen_trees_"))
    trees: dict[str, Path] = {}
    try:
        if args.write:
            trees["after"] = ROOT
        else:
            trees["after"] = work / "after"
            copy_worktree(ROOT, trees["after"])
        if args.against:
            trees["before"] = work / "before"
            subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "--quiet", str(trees["before"]),
                            args.against], check=True)
        _PATHS[:] = sorted({str(p) for p in (*trees.values(), out, work, ROOT, Path(tempfile.gettempdir()))},
                           key=len, reverse=True)
        return _run_all(items, trees, args.quick, args.timeout, out)
    finally:
        if "before" in trees:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(trees["before"])], check=False)
        shutil.rmtree(work, ignore_errors=True)
        print(f"outputs under {out}")


def _run_all(items: Sequence[Item], trees: dict[str, Path], quick: bool, timeout_s: float, out: Path) -> int:
    rows, bad, t0 = [], False, time.perf_counter()
    sides = [s for s in ("before", "after") if s in trees]
    for n, item in enumerate(items, 1):
        if not item.regenerable:
            print(f"[{n}/{len(items)}] {item.name}: skipped ({item.why})", flush=True)
            rows.append((item.name, "-", "-", "skipped: not regenerable here"))
            continue
        runs = {}
        for side in sides:
            print(f"[{n}/{len(items)}] {item.name} ({side}) ...", end=" ", flush=True)
            runs[side] = run_item(item, trees[side], quick, timeout_s, out / side / re.sub(r"[^\w.-]", "_", item.name))
            print(f"{runs[side].status}, {runs[side].seconds:.1f} s", flush=True)
        if len(sides) == 2:
            verdict = compare_runs(item, runs["before"], runs["after"])
        else:
            verdict = "ran" if runs["after"].status == "ok" else runs["after"].status
        bad |= not verdict.startswith(("identical", "ran"))
        cells = [f"{runs[s].seconds:.1f} s" if s in runs else "-" for s in ("before", "after")]
        rows.append((item.name, cells[0], cells[1], verdict))
    _table(rows)
    print(f"\n{len(items)} items in {time.perf_counter() - t0:.0f} s")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())

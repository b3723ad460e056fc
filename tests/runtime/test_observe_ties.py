"""``inspect``'s "arrived last" shares do not depend on the order records were ingested in (issue 28).

Exec times are whole microseconds, so ranks tie for the shortest one; a tie of k ranks gives each 1/k.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from runtime.observe import SyntheticSpec, connect, ingest
from runtime.observe.report import build_report, render_text

NRANKS = 4


def _tied_logs(tmp_path: Path) -> tuple[Path, Path]:
    """The same records twice: ``a`` with rank r's log named r-th, ``b`` with the names reversed, so the
    files are ingested in opposite orders. Every rank has the same exec time (an n-way tie)."""
    from runtime.observe import write_logs

    src = tmp_path / "src"
    write_logs(src, SyntheticSpec(nranks=NRANKS, ncolls=20, seed=4))
    logs = sorted(src.glob("*.log"))
    assert len(logs) == NRANKS
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    for i, log in enumerate(logs):
        text = re.sub(r'"coll_exec_time_us":\d+', '"coll_exec_time_us":500', log.read_text())
        (a / f"log{i}.jsonl").write_text(text)
        (b / f"log{NRANKS - 1 - i}.jsonl").write_text(text)
    return a, b


def _report(directory: Path) -> dict:
    con = connect()
    try:
        ingest(con, [directory])
        doc = build_report(con)
    finally:
        con.close()
    doc.pop("ingest")
    return doc


def test_last_shares_are_independent_of_ingest_order(tmp_path: Path) -> None:
    a, b = _tied_logs(tmp_path)
    doc_a, doc_b = _report(a), _report(b)
    assert render_text(doc_a) == render_text(doc_b)
    assert doc_a == doc_b
    # An n-way tie in every collective: each rank arrived last in 1/n of them.
    shares = [s["last_share"] for s in doc_a["segments"]]
    assert len(shares) == 2 * NRANKS and shares == pytest.approx([1 / NRANKS] * len(shares), abs=1e-12)
    assert [s["last_share"] for s in doc_a["stragglers"]] == pytest.approx([1 / NRANKS] * NRANKS, abs=1e-12)

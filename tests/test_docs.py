"""The docs under docs/ stay true: the CLI reference covers every subcommand and option, the
examples in the format documents load, and the index lists every document."""

from __future__ import annotations

import json
import re
from pathlib import Path

from loopcoll._cli_doc import commands, option_strings
from loopcoll.cli import build_parser
from synth import Schedule
from synth.topologies import topology_from_json

DOCS = Path(__file__).resolve().parent.parent / "docs"


def test_cli_reference_names_every_subcommand_and_option() -> None:
    text = (DOCS / "cli.md").read_text(encoding="utf-8")
    missing = []
    for path, parser in commands(build_parser()):
        heading = f"### `loopcoll {' '.join(path)}`"
        if heading not in text:
            missing.append(heading)
            continue
        section = text.split(heading, 1)[1].split("\n### ", 1)[0]
        missing += [f"{' '.join(path)} {opt}" for opt in option_strings(parser) if f"`{opt}`" not in section]
    assert missing == [], f"docs/cli.md is stale; run `python -m loopcoll._cli_doc`. Missing: {missing}"


def test_topology_doc_example_is_a_valid_topology() -> None:
    text = (DOCS / "topology.md").read_text(encoding="utf-8")
    example = re.search(r"```json\n(.*?)```", text, re.S)
    assert example is not None
    topo = topology_from_json(example.group(1))
    assert topo.nranks == 2 and topo.switches[0].role == "nvswitch"


def test_schedule_doc_example_reads_and_validates() -> None:
    from synth import load_topology

    text = (DOCS / "schedule.md").read_text(encoding="utf-8")
    example = re.search(r"```json\n(.*?)```", text, re.S)
    assert example is not None
    sched = Schedule.from_json(example.group(1))
    sched.validate(load_topology("ring:3"))
    assert json.loads(sched.to_json()) == json.loads(example.group(1))


def test_index_lists_every_document() -> None:
    index = (DOCS / "README.md").read_text(encoding="utf-8")
    for doc in sorted(DOCS.glob("*.md")):
        if doc.name != "README.md":
            assert f"]({doc.name})" in index, f"add docs/{doc.name} to the index table of docs/README.md"

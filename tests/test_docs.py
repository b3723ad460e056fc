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


# -- links ----------------------------------------------------------------------------------------
ROOT = DOCS.parent
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def _prose(markdown: str) -> str:
    """The text outside fenced code blocks and inline code (links in code are not links)."""
    return re.sub(r"`[^`\n]*`", "", re.sub(r"^```.*?^```", "", markdown, flags=re.S | re.M))


def heading_anchors(markdown: str) -> set[str]:
    """GitHub's anchors for the headings: lowercase, punctuation dropped, spaces to hyphens, repeats numbered.

    >>> sorted(heading_anchors("# A tour\\n## 3. The executor on `torch.distributed` (NCCL)\\n## A tour\\n"))
    ['3-the-executor-on-torchdistributed-nccl', 'a-tour', 'a-tour-1']
    """
    fences_dropped = re.sub(r"^```.*?^```", "", markdown, flags=re.S | re.M)
    anchors: set[str] = set()
    for m in re.finditer(r"^#{1,6} +(.+?) *$", fences_dropped, re.M):
        slug = re.sub(r"[^\w\- ]", "", m.group(1).lower()).replace(" ", "-")
        n = 0
        while (slug if n == 0 else f"{slug}-{n}") in anchors:
            n += 1
        anchors.add(slug if n == 0 else f"{slug}-{n}")
    return anchors


def broken_links(path: Path, root: Path = ROOT) -> list[str]:
    """Relative links of a markdown file whose target file (or heading anchor) does not exist."""
    bad = []
    for target in _LINK.findall(_prose(path.read_text(encoding="utf-8"))):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            bad.append(f"{path.relative_to(root)}: {target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in heading_anchors(dest.read_text(encoding="utf-8")):
            bad.append(f"{path.relative_to(root)}: {target} (no such heading)")
    return bad


def test_every_relative_link_resolves() -> None:
    files = [ROOT / "README.md", ROOT / "benchmarks" / "README.md", *sorted(DOCS.glob("*.md"))]
    assert [bad for f in files for bad in broken_links(f)] == []


def test_broken_links_are_caught(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# Top\n[ok](a.md#top) [gone](b.md) [anchor](a.md#nowhere) `[code](x.md)`\n"
                                   "```text\n[in code](y.md)\n```\n![img](img.png) [web](https://x.org/z.md)\n",
                                   encoding="utf-8")
    assert broken_links(tmp_path / "a.md", tmp_path) == [
        "a.md: b.md (no such file)", "a.md: a.md#nowhere (no such heading)", "a.md: img.png (no such file)"]

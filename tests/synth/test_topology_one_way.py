"""A topology file with links whose reverse is missing loads, with a warning naming them (issue 28)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from synth import load_topology
from synth.errors import TopologyWarning
from synth.topologies import named_topology, topology_from_dict, topology_to_dict
from tests.loopcoll._run import run


def _directed_ring(n: int) -> dict:
    """``ring:n`` with only the links gpu i -> gpu i+1 (a valid, one-way fabric)."""
    doc = topology_to_dict(named_topology(f"ring:{n}"))
    doc["links"] = [lk for lk in doc["links"] if lk["dst"] == f"gpu{(int(lk['src'][3:]) + 1) % n}"]
    assert len(doc["links"]) == n
    return doc


def _first(doc: dict, k: int) -> str:
    return ", ".join(f"{lk['src']}->{lk['dst']}" for lk in doc["links"][:k])


def test_one_way_links_warn_naming_the_first_few() -> None:
    doc = _directed_ring(6)
    with pytest.warns(TopologyWarning) as caught:
        topo = topology_from_dict(doc, source="ring6.json")
    assert topo.nranks == 6 and len(caught) == 1
    msg = str(caught[0].message)
    assert msg.startswith(f"ring6.json: 6 link(s) without a reverse link: {_first(doc, 3)} and 3 more; ")
    assert _first(doc, 4).split(", ")[3] not in msg


def test_symmetric_topologies_load_silently(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps(topology_to_dict(named_topology("hpn:1x2x2"))))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_topology(str(path))
        load_topology("dgx-h100:2", ["fail2"])


def test_cli_prints_one_warning_line_unless_quiet(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "ring.json"
    doc = _directed_ring(4)
    path.write_text(json.dumps(doc))
    code, out, err = run(capsys, "bound", "allgather", str(path))
    assert code == 0 and "algbw" in out
    assert err.splitlines() == [err.splitlines()[0]] and err.startswith(
        f"loopcoll: warning: {path}: 4 link(s) without a reverse link: {_first(doc, 3)} and 1 more")
    code, out, err = run(capsys, "synth", "allgather", str(path), "--quiet")
    assert code == 0 and out and err == ""

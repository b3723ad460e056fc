"""JSON I/O of topologies (synth/topologies/io.py): the public file format of docs/topology.md."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings

from synth.errors import LoopcollError, TopologyError
from synth.topologies import (
    Topology,
    load_topology,
    named_topology,
    read_topology,
    topology_from_dict,
    topology_from_json,
    topology_to_dict,
    topology_to_json,
    write_topology,
)
from tests.strategies import random_topologies, topology_doc

NAMED = [
    "hpn:1x2x8",
    "hpn:2x2x2",
    "hpn:1x2x4,nic=200,nvswitch=3600",
    "h200-proto",
    "nvswitch:8",
    "nvswitch:2",
    "ring:2",
    "ring:5",
    "torus:3x3",
    "torus:2x3",
    "dgx-a100:2",
    "dgx-h100:1",
]
WITH_FAILURES = [
    ("hpn:1x2x8", ["fail1"]),
    ("hpn:1x2x8", ["fail2"]),
    ("hpn:1x2x8", ["fail3"]),
    ("hpn:2x2x2", ["fail1", "fail2"]),
    ("dgx-a100:2", ["fail3", "scale:gpu3:nvs0.0:0.25"]),
    ("ring:4", ["scale:gpu0:gpu1:0"]),
]


def _assert_round_trip(topo: Topology) -> None:
    text = topology_to_json(topo)
    back = topology_from_json(text)
    assert back == topo
    assert back.fingerprint == topo.fingerprint
    assert topology_to_json(back) == text


@pytest.mark.parametrize("spec", NAMED)
def test_named_topology_round_trips_exactly(spec: str) -> None:
    _assert_round_trip(named_topology(spec))


@pytest.mark.parametrize(("spec", "failures"), WITH_FAILURES)
def test_failed_topology_round_trips_exactly(spec: str, failures: list[str]) -> None:
    _assert_round_trip(load_topology(spec, failures))


@settings(max_examples=100)
@given(random_topologies(max_gpus=7, max_switches=4))
def test_random_topology_round_trips_exactly(topo: Topology) -> None:
    _assert_round_trip(topo)


@settings(max_examples=25)
@given(random_topologies())
def test_write_then_read_file_round_trips_byte_identical(tmp_path_factory, topo: Topology) -> None:
    path = tmp_path_factory.mktemp("io") / "t.json"
    write_topology(topo, path)
    back = read_topology(path)
    assert back == topo
    assert path.read_text(encoding="utf-8") == topology_to_json(topo)
    write_topology(back, path)
    assert path.read_text(encoding="utf-8") == topology_to_json(topo)


def test_to_json_is_sorted_two_space_indented_with_trailing_newline() -> None:
    text = topology_to_json(named_topology("ring:3"))
    assert text.endswith("}\n") and not text.endswith("\n\n")
    assert text == json.dumps(json.loads(text), indent=2, sort_keys=True) + "\n"


def test_to_dict_has_exactly_the_spec_fields() -> None:
    doc = topology_to_dict(named_topology("nvswitch:2"))
    assert set(doc) == {"name", "nodes", "links", "meta"}
    assert doc["nodes"][0] == {"id": "nvs0.0", "kind": "switch", "role": "nvswitch"}
    assert doc["nodes"][1] == {"id": "gpu0", "kind": "gpu", "rank": 0, "host": 0}
    assert doc["links"][0] == {"src": "gpu0", "dst": "nvs0.0", "gbps": 2880.0, "latency_us": 0.025}
    assert doc["meta"] == {"family": "nvswitch"}


def test_spec_example_document_is_accepted() -> None:
    # The example of docs/topology.md, completed to a valid topology (a second GPU).
    text = """{
      "name": "hpn-1x2x8",
      "nodes": [
        {"id": "gpu0",   "kind": "gpu",    "rank": 0, "host": 0},
        {"id": "gpu1",   "kind": "gpu",    "rank": 1, "host": 0},
        {"id": "nvs0.0", "kind": "switch"}
      ],
      "links": [
        {"src": "gpu0", "dst": "nvs0.0", "gbps": 2880.0, "latency_us": 0.025},
        {"src": "nvs0.0", "dst": "gpu0", "gbps": 2880.0, "latency_us": 0.025},
        {"src": "gpu1", "dst": "nvs0.0", "gbps": 2880, "latency_us": 0},
        {"src": "nvs0.0", "dst": "gpu1", "gbps": 2880, "latency_us": 0}
      ],
      "meta": {}
    }"""
    topo = topology_from_json(text)
    assert topo.nranks == 2
    # Integer numbers are read as floats.
    assert topo.link("gpu1", "nvs0.0").gbps == 2880.0 and isinstance(topo.link("gpu1", "nvs0.0").gbps, float)


def test_meta_is_optional_and_preserved() -> None:
    doc = topology_doc()
    del doc["meta"]
    assert dict(topology_from_dict(doc).meta) == {}
    doc["meta"] = {"b": [1, {"c": None}], "a": "x"}
    topo = topology_from_dict(doc)
    assert topology_to_dict(topo)["meta"] == {"b": [1, {"c": None}], "a": "x"}
    assert topology_from_json(topology_to_json(topo)) == topo


def test_host_is_optional() -> None:
    doc = topology_doc()
    for node in doc["nodes"]:
        node.pop("host", None)
    topo = topology_from_dict(doc)
    assert all(g.host is None for g in topo.gpus)
    assert all("host" not in n for n in topology_to_dict(topo)["nodes"])


def test_from_dict_does_not_modify_its_argument() -> None:
    doc = topology_doc()
    before = json.dumps(doc, sort_keys=True)
    topology_from_dict(doc)
    assert json.dumps(doc, sort_keys=True) == before


def test_from_json_names_the_source_in_malformed_json_error() -> None:
    with pytest.raises(TopologyError, match=r"^my\.json: malformed JSON at line 1 column 2"):
        topology_from_json("{x", source="my.json")


def test_read_topology_names_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.json"
    with pytest.raises(TopologyError, match=r"nope\.json: cannot read topology file"):
        read_topology(missing)


def test_read_topology_names_file_with_malformed_json(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text('{\n  "name": "x",\n  "nodes": [}\n', encoding="utf-8")
    with pytest.raises(TopologyError, match=r"broken\.json: malformed JSON at line 3 column 13"):
        read_topology(path)


def test_read_topology_rejects_non_utf8_file(tmp_path: Path) -> None:
    path = tmp_path / "latin.json"
    path.write_bytes(b'{"name": "\xff"}')
    with pytest.raises(TopologyError, match=r"latin\.json: cannot read topology file"):
        read_topology(path)


def test_write_topology_to_missing_directory_raises_naming_the_path(tmp_path: Path) -> None:
    target = tmp_path / "no" / "such" / "dir.json"
    with pytest.raises(LoopcollError, match=r"dir\.json: cannot write"):
        write_topology(named_topology("ring:3"), target)


def test_write_topology_leaves_no_temporary_files(tmp_path: Path) -> None:
    write_topology(named_topology("ring:3"), tmp_path / "t.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.json"]


# -- load_topology: named spec or file ------------------------------------------------------------


def test_load_topology_reads_a_file_by_str_and_pathlike(tmp_path: Path) -> None:
    topo = named_topology("torus:2x3")
    path = tmp_path / "t.json"
    write_topology(topo, path)
    assert load_topology(path) == topo
    assert load_topology(str(path)) == topo


def test_load_topology_reads_file_without_json_suffix(tmp_path: Path) -> None:
    topo = named_topology("ring:3")
    path = tmp_path / "topo.txt"
    write_topology(topo, path)
    assert load_topology(str(path)) == topo


def test_load_topology_treats_missing_json_path_as_file(tmp_path: Path) -> None:
    with pytest.raises(TopologyError, match=r"missing\.json: cannot read topology file"):
        load_topology(str(tmp_path / "missing.json"))


def test_load_topology_applies_failures_to_a_file(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    write_topology(named_topology("hpn:1x2x4"), path)
    assert load_topology(path, ["fail2"]) == load_topology("hpn:1x2x4", ["fail2"])


def test_load_topology_rejects_non_string_spec() -> None:
    with pytest.raises(TopologyError, match=r"named spec or a JSON path, got 42"):
        load_topology(42)  # type: ignore[arg-type]

"""`loopcoll simulate` on a user's plain JSON copy of a named fabric reports the same NCCL-like baseline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loopcoll.cli import main
from synth.topologies import named_topology, topology_to_dict


def _plain_copy(spec: str, path: Path) -> None:
    doc = topology_to_dict(named_topology(spec))
    ids = {n["id"]: f"n{i:03d}x" for i, n in enumerate(reversed(doc["nodes"]))}
    for n in doc["nodes"]:
        n["id"] = ids[n["id"]]
        n.pop("role", None)
    for lk in doc["links"]:
        lk["src"], lk["dst"] = ids[lk["src"]], ids[lk["dst"]]
    del doc["meta"]
    path.write_text(json.dumps(doc), encoding="utf-8")


@pytest.mark.parametrize("collective", ["allgather", "alltoall"])
def test_plain_file_gets_the_named_baseline(tmp_path: Path, capsys: pytest.CaptureFixture[str], collective: str) -> None:
    plain = tmp_path / "fabric.json"
    _plain_copy("hpn:1x2x8", plain)
    docs = []
    for spec in ("hpn:1x2x8", str(plain)):
        argv = ["simulate", collective, spec, "--fail", "fail2", "--schedules", "nccl", "--sizes", "512M", "--json"]
        assert main(argv) == 0
        docs.append(json.loads(capsys.readouterr().out))
    named, copy = docs
    assert named["results"][0]["algbw_GBps"] == pytest.approx(copy["results"][0]["algbw_GBps"], rel=1e-12)
    expected = "rail-ring" if collective == "allgather" else "rail-direct-pxn"
    assert named["nccl_baseline"] == copy["nccl_baseline"] == expected


def test_text_output_names_the_baseline(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "allgather", "ring:4", "--schedules", "nccl", "--sizes", "1M", "--quiet"]) == 0
    assert "NCCL-like baseline generic-ring" in capsys.readouterr().out

"""`loopcoll simulate` and `topo show`: the NCCL-like baseline on named and user fabrics, why it was chosen,
and the nccl-tests-like table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loopcoll.cli import main
from synth.topologies import named_topology, topology_to_dict
from tests.nic_fabrics import leaf_fabric, shared_nic_fabric


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


# -- issue #28: the baseline on fabrics that are not rail-optimised, its reason, the nccl-tests table --


def _write(doc: dict[str, object], path: Path) -> str:
    path.write_text(json.dumps(doc), encoding="utf-8")
    return str(path)


def _simulate_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, object]:
    assert main(["simulate", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)  # type: ignore[no-any-return]


@pytest.mark.parametrize("collective", ["allgather", "alltoall"])
def test_single_leaf_fabric_simulates_like_dgx_h100(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], collective: str
) -> None:
    leaf = _write(leaf_fabric(2, 8)[0], tmp_path / "leaf.json")
    args = ("--schedules", "nccl", "--sizes", "256M")
    ours = _simulate_json(capsys, collective, leaf, *args)
    ref = _simulate_json(capsys, collective, "dgx-h100:2", *args)
    got, want = ours["results"][0], ref["results"][0]  # type: ignore[index]
    assert got["algbw_GBps"] == pytest.approx(want["algbw_GBps"], rel=0.10)
    assert got["bandwidth_term_algbw_GBps"] == pytest.approx(want["bandwidth_term_algbw_GBps"], rel=0.10)
    assert ours["nccl_baseline"] == ("nic-ring" if collective == "allgather" else "nic-direct-pxn")
    assert str(ours["nccl_baseline_reason"]).endswith("; 8 NICs per host, all on one network "
                                                      "(not rail-optimised: NICs paired across hosts by network and position)")
    assert main(["simulate", collective, leaf, *args, "--quiet"]) == 0
    text = capsys.readouterr().out
    if collective == "allgather":
        assert "nccl = NCCL-like baseline nic-ring: NIC rings, 8 channels (one per NIC); 8 NICs per host" in text


def test_generic_fallback_says_why(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc, _ = leaf_fabric(2, 8)
    gone = {"g12", "g13", "g14", "g15"}
    doc["nodes"] = [n for n in doc["nodes"] if n["id"] not in gone]
    doc["links"] = [lk for lk in doc["links"] if not {lk["src"], lk["dst"]} & gone]
    path = _write(doc, tmp_path / "uneven.json")
    assert main(["simulate", "allgather", path, "--schedules", "nccl", "--sizes", "1M", "--quiet"]) == 0
    assert ("nccl = NCCL-like baseline generic-ring: generic ring, 2 channels; hosts have different GPU counts (4, 8)"
            in capsys.readouterr().out)
    assert main(["topo", "show", path]) == 0
    assert "  NCCL-like baseline: generic ring (2 channels), direct AllToAll relayed through GPUs: hosts have " \
           "different GPU counts (4, 8)" in capsys.readouterr().out.splitlines()


def test_topo_show_names_the_baseline(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(shared_nic_fabric(2, 8, 2)[0], tmp_path / "shared.json")
    assert main(["topo", "show", path]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if "NCCL-like baseline" in ln)
    assert line == ("  NCCL-like baseline: NIC rings (one channel per NIC), direct AllToAll with PXN: 2 NICs per host "
                    "for 8 GPUs, all on one network (not rail-optimised: NICs paired across hosts by network and position)")
    assert main(["topo", "show", "dgx-h100:2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["nccl_baseline"] == {
        "kind": "rail", "reason": "8 NICs per host, one rail network per NIC"}


TABLE_HEAD = ["#       size         count      type      time   algbw   busbw",
              "#        (B)    (elements)                (us)  (GB/s)  (GB/s)"]


@pytest.mark.parametrize(("collective", "factor"), [("allgather", 3 / 4), ("alltoall", 3 / 4), ("allreduce", 6 / 4)])
def test_simulate_prints_an_nccl_tests_table_per_schedule(
    capsys: pytest.CaptureFixture[str], collective: str, factor: float
) -> None:
    argv = ["simulate", collective, "hpn:1x2x2", "--schedules", "nccl,loopcoll", "--sizes", "1M,64M"]
    doc = _simulate_json(capsys, *argv[1:])
    rows = doc["results"]
    assert len(rows) == 4  # type: ignore[arg-type]
    for r in rows:  # type: ignore[union-attr]
        assert (r["count"], r["type"]) == (r["nbytes"] // 4, "float")
        assert r["busbw_GBps"] == pytest.approx(r["algbw_GBps"] * factor, rel=1e-12)
        assert r["time_us"] == pytest.approx(r["nbytes"] / r["algbw_GBps"] / 1e3, rel=1e-9)
    assert main([*argv, "--quiet"]) == 0
    lines = capsys.readouterr().out.splitlines()
    for name in ("nccl", "loopcoll"):
        at = lines.index(f"# {name}: {collective}, 4 ranks, profile ideal")
        assert lines[at + 1: at + 3] == TABLE_HEAD
        for line, r in zip(lines[at + 3: at + 5], [r for r in rows if r["schedule"] == name]):  # type: ignore[union-attr]
            size, count, kind, time_us, algbw, busbw = line.split()
            assert (int(size), int(count), kind) == (r["nbytes"], r["nbytes"] // 4, "float")
            assert (time_us, algbw, busbw) == (f"{r['time_us']:.2f}", f"{r['algbw_GBps']:.2f}", f"{r['busbw_GBps']:.2f}")
            assert float(busbw) == pytest.approx(float(algbw) * factor, abs=0.011)

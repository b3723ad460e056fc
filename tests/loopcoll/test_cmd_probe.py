"""``loopcoll topo probe`` (loopcoll/_probe.py) on the canned tool outputs of tests/vectors/probe."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from synth.topologies import dgx_h100, read_topology, topology_from_json, topology_to_json
from synth.topologies.probe import HostProbe, parse_ibstat, parse_topo_matrix, probe_topology
from tests.loopcoll._run import run

ROOT = Path(__file__).resolve().parents[2]
V = ROOT / "tests" / "vectors" / "probe"
DGX = ["--nvidia-smi-topo", str(V / "dgx-h100.topo.txt"), "--ibstat", str(V / "dgx-h100.ibstat.txt"),
       "--gpu-list", str(V / "dgx-h100.gpus.txt")]


def test_probe_dgx_h100_two_hosts_matches_the_named_spec(capsys, tmp_path: Path) -> None:
    out = tmp_path / "topo.json"
    code, stdout, err = run(capsys, "topo", "probe", *DGX, "--hosts", "2", "-o", str(out))
    assert (code, err) == (0, "")
    assert read_topology(out).fingerprint == dgx_h100(2).fingerprint
    assert "topology probe-2x8" in stdout and "  hosts: 2" in stdout
    assert "NICs (every host): mlx5_0 400 Gbit/s <- GPU 0; mlx5_3 400 Gbit/s <- GPU 1;" in stdout
    assert "note: NVLink 200 Gbit/s per link (H100, each direction)" in stdout
    assert stdout.endswith(f"wrote {out}: probe-2x8, 16 GPUs, 64 links\n")
    code, probed, _ = run(capsys, "bound", "allgather", str(out), "--json")
    code2, named, _ = run(capsys, "bound", "allgather", "dgx-h100:2", "--json")
    assert code == code2 == 0
    assert json.loads(probed)["algbw_GBps"] == json.loads(named)["algbw_GBps"]


def test_probed_topology_is_accepted_by_synth(capsys, tmp_path: Path) -> None:
    out = tmp_path / "a100.json"
    code, _, _ = run(capsys, "topo", "probe", "--nvidia-smi-topo", str(V / "a100-2nic.topo.txt"), "--ibv-devinfo",
                     str(V / "a100-2nic.ibv_devinfo.txt"), "--gpu-list", str(V / "a100-2nic.gpus.csv"), "-o", str(out))
    assert code == 0
    code, stdout, _ = run(capsys, "synth", "allgather", str(out))
    assert code == 0 and "allgather on probe-1x8 (8 ranks" in stdout


def test_per_host_files_from_a_hostfile(capsys, tmp_path: Path) -> None:
    for h, ibstat in (("n01", "dgx-h100.ibstat.txt"), ("n02", "nic-down.ibstat.txt")):
        shutil.copy(V / "dgx-h100.topo.txt", tmp_path / f"{h}.topo.txt")
        shutil.copy(V / ibstat, tmp_path / f"{h}.ibstat.txt")
    (tmp_path / "hosts").write_text("# two nodes\nn01 slots=8\nn02\n")
    out = tmp_path / "t.json"
    code, stdout, err = run(capsys, "topo", "probe", "--nvidia-smi-topo", str(tmp_path / "{host}.topo.txt"),
                            "--ibstat", str(tmp_path / "{host}.ibstat.txt"), "--nvlink-gbps", "200",
                            "--hostfile", str(tmp_path / "hosts"), "-o", str(out))
    assert code == 0
    assert err == f"loopcoll: warning: mlx5_3: no active port in {tmp_path / 'n02.ibstat.txt'} (port 1 Down); left out\n"
    assert "NICs (host 0): mlx5_0 400 Gbit/s <- GPU 0; mlx5_3" in stdout and "NICs (host 1): mlx5_0 400" in stdout
    topo = read_topology(out)
    assert topo.meta["probe"]["hosts"] == ["n01", "n02"] and "mlx5_3" not in topo.meta["probe"]["nics"][1]
    assert topo.link("gpu1", "tor0.1").gbps == 400.0 and not topo.has_link("gpu9", "tor0.1")


def test_stdin_in_and_json_out(capsys, monkeypatch) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO((V / "pcie-l40s.topo.txt").read_text()))
    code, stdout, err = run(capsys, "topo", "probe", "--nvidia-smi-topo", "-", "--nic-gbps", "100", "-o", "-")
    assert code == 0
    topo = topology_from_json(stdout)
    assert topo.nranks == 8 and topo.link("nic0.0", "tor0.0").gbps == 100.0
    assert "topology probe-1x8" in err and "note: PCIe 252 Gbit/s per x16 link (Gen4; GPU model unknown)" in err


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["--nvidia-smi-topo", str(V / "no-legend.topo.txt")], "no-legend.topo.txt: no 'Legend:' block"),
        (["--nvidia-smi-topo", str(V / "ragged.topo.txt")], "ragged.topo.txt:4: row GPU2 has 22 cells"),
        (["--nvidia-smi-topo", "-", "--ibstat", "-"], "--nvidia-smi-topo and --ibstat both read stdin"),
        (["--nvidia-smi-topo", "{host}.txt"], "'{host}' needs --hostfile"),
        (["--nvidia-smi-topo", str(V / "missing.txt")], "--nvidia-smi-topo " + str(V / "missing.txt") + ": cannot read"),
        ([*DGX, "--ibv-devinfo", "x"], "argument --ibv-devinfo: not allowed with argument --ibstat"),
        ([*DGX, "--hosts", "0"], "argument --hosts: must be an integer >= 1, got '0'"),
        ([*DGX, "--nic-gbps", "inf"], "argument --nic-gbps: must be a finite number of Gbit/s > 0"),
        ([*DGX, "--hosts", "2", "--fabric", "none"], "fabric 'none' joins no hosts"),
    ],
)
def test_bad_input_is_one_error_line(capsys, monkeypatch, tmp_path: Path, argv: list[str], match: str) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    code, stdout, err = run(capsys, "topo", "probe", *argv, "-o", str(tmp_path / "t.json"))
    assert code == 2 and stdout == ""
    assert err.startswith("loopcoll: error: ") and match in err and "Traceback" not in err
    assert not (tmp_path / "t.json").exists()


SCRIPT = """
import sys
from synth.topologies import topology_to_json
from synth.topologies.probe import HostProbe, parse_ibstat, parse_topo_matrix, probe_topology
topo, ib = (open(p).read() for p in sys.argv[1:3])
host = HostProbe("h", parse_topo_matrix(topo, source="t"), parse_ibstat(ib, source="i"), "i")
sys.stdout.write(topology_to_json(probe_topology([host, host]).topology))
"""


def test_output_bytes_do_not_depend_on_the_hash_seed() -> None:
    # The PCIe tree groups devices through sets: its output must still be the same bytes.
    files = [str(V / "pcie-l40s.topo.txt"), str(V / "pcie-l40s.ibstat.txt")]
    seed = "977" if os.environ.get("PYTHONHASHSEED") != "977" else "978"  # not this process's seed
    other = subprocess.run([sys.executable, "-c", SCRIPT, *files], cwd=ROOT, capture_output=True, timeout=120,
                           env={**os.environ, "PYTHONHASHSEED": seed}, check=True).stdout.decode()
    host = HostProbe("h", parse_topo_matrix(Path(files[0]).read_text(), source="t"),
                     parse_ibstat(Path(files[1]).read_text(), source="i"), "i")
    assert topology_to_json(probe_topology([host, host]).topology) == other and '"pcie1.6"' in other

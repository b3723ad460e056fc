"""``loopcoll synth --max-depth`` / ``--sizes`` and ``simulate --schedules pareto``."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from loopcoll.cli import main


@dataclass
class _Run:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def _cli(capsys):  # noqa: PT004 - returns the runner
    def run(*args: str) -> _Run:
        try:
            rc = main(list(args))
        except SystemExit as exc:  # argparse usage errors
            rc = int(exc.code or 0)
        out, err = capsys.readouterr()
        return _Run(rc, out, err)

    return run


def test_max_depth_json(_cli, tmp_path) -> None:
    xml = tmp_path / "d2.xml"
    p = _cli("synth", "allgather", "hpn:1x2x4", "--fail", "fail2", "--max-depth", "2", "--json", "-o", str(xml))
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["depth"] <= 2 and doc["max_depth"] == 2
    assert doc["algbw_GBps"] <= doc["lp_algbw_GBps"] * (1 + 1e-9) <= doc["depth_bound_algbw_GBps"] * (1 + 1e-6)
    assert xml.exists()


def test_sizes_writes_one_file_per_band_and_publishes(_cli, tmp_path) -> None:
    out = tmp_path / "ag.xml"
    store = tmp_path / "store"
    p = _cli("synth", "allgather", "hpn:1x2x4", "--fail", "fail2", "--sizes", "64K,1G", "--depths", "2,3,inf",
             "--chunks", "4", "-o", str(out), "--store", str(store), "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert [b["min_bytes"] for b in doc["bands"]][0] == 0 and doc["bands"][-1]["max_bytes"] is None
    assert len(doc["written"]) == len(doc["bands"]) >= 1
    for i, b in enumerate(doc["bands"]):
        text = (tmp_path / f"ag.b{i}.xml").read_text()
        assert f'minBytes="{b["min_bytes"]}"' in text
        assert f'maxBytes="{0 if b["max_bytes"] is None else b["max_bytes"]}"' in text
    assert doc["store_version"] == 1
    assert (store / "manifest.json").exists()


def test_sizes_time_limit_bounds_the_band_choice(_cli) -> None:
    """--time-limit covers the band choice too: every band says how it was decided; a limit spent
    before the band choice begins decides every size on the estimate."""
    p = _cli("synth", "allgather", "hpn:1x4x8", "--fail", "fail2", "--sizes", "1M,16M,256M", "--depths", "2,inf",
             "--time-limit", "2", "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    methods = [b["method"] for b in doc["bands"]]
    assert methods and set(methods) <= {"simulated", "estimated", "simulated+estimated"}
    p = _cli("synth", "allgather", "hpn:1x2x4", "--fail", "fail2", "--sizes", "64K,1G", "--depths", "2,inf",
             "--time-limit", "1e-9")
    assert p.returncode == 0, p.stderr
    assert "the time limit left no time to simulate" in p.stdout


def test_bad_arguments_one_line_exit_2(_cli) -> None:
    for args in (["--max-depth", "0"], ["--sizes", "1M", "--depths", "x"], ["--sizes", "0"]):
        p = _cli("synth", "allgather", "ring:4", *args)
        assert p.returncode == 2, (args, p.stderr)
        assert p.stderr.startswith("loopcoll: error:") and p.stderr.count("\n") == 1, p.stderr
    p = _cli("synth", "alltoall", "ring:4", "--max-depth", "2")
    assert p.returncode == 2


def test_simulate_shows_the_pareto_set(_cli) -> None:
    p = _cli("simulate", "allgather", "hpn:1x2x2", "--fail", "fail2", "--schedules", "pareto,nccl", "--sizes", "1M,1G",
             "--profile", "h200", "--quiet")
    assert p.returncode == 0, p.stderr
    assert "Pareto set" in p.stdout and "D<=2" in p.stdout and "fastest per size" in p.stdout


def test_sizes_caps_the_unbounded_point_to_what_simulator_and_runtime_take(_cli, tmp_path, monkeypatch) -> None:
    # ForestColl's uncapped optimum after fail2 needs 293 chunks per source; with the simulator's cap
    # lowered to 1e5 slice transfers it no longer fits (as on 256 GPUs with the real cap), and
    # choosing the bands used to fail on it.
    from msccl_xml import check, read
    from synth import load_topology, synthesize
    from synth.errors import ScheduleError
    from synth.simulation import simulate, simulator

    monkeypatch.setattr(simulator, "MAX_SLICE_TRANSFERS", 100_000)
    topo = load_topology("hpn:1x2x8", ["fail2"])
    exact = synthesize("allgather", topo)
    assert exact.schedule is not None and exact.schedule.nchunks == 293
    with pytest.raises(ScheduleError, match="above the simulator"):
        simulate(exact.schedule, topo, 64 << 20, slices_per_chunk=4)
    out = tmp_path / "ag.xml"
    p = _cli("synth", "allgather", "hpn:1x2x8", "--fail", "fail2", "--sizes", "1M,64M", "--depths", "2,inf",
             "-o", str(out), "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["unbounded_chunk_cap"] == 100_000 // (4 * 16 * 15)
    inf = next(pt for pt in doc["pareto"] if pt["max_depth"] is None)
    assert inf["nchunks"] <= doc["unbounded_chunk_cap"]
    assert inf["algbw_GBps"] >= 0.999 * exact.algbw_GBps
    for path in doc["written"]:
        assert check(read(path)).valid
    p = _cli("simulate", "allgather", "hpn:1x2x8", "--fail", "fail2", "--schedules", "pareto", "--sizes", "1M,64M",
             "--quiet")
    assert p.returncode == 0, p.stderr
    assert "D=inf" in p.stdout


def test_sizes_bands_for_msccl_legacy_tile_every_size_with_exclusive_ends(_cli, tmp_path) -> None:
    # microsoft/msccl selects minBytes <= nBytes < maxBytes, and maxBytes="0" selects nothing there.
    p = _cli("synth", "allgather", "hpn:1x2x4", "--fail", "fail2", "--sizes", "64K,1G", "--depths", "2,3,inf",
             "--chunks", "4", "--runtime", "msccl-legacy", "-o", str(tmp_path / "ag.xml"), "--json")
    assert p.returncode == 0, p.stderr
    bands = []
    for path in json.loads(p.stdout)["written"]:
        text = Path(path).read_text()
        bands.append(tuple(int(re.search(rf'{a}="([0-9]+)"', text).group(1)) for a in ("minBytes", "maxBytes")))
    assert len(bands) >= 2 and all(hi > lo for lo, hi in bands)
    edges = [lo for lo, _ in bands[1:]]
    for s in (0, 1, *edges, *(e - 1 for e in edges), 1 << 40):
        assert sum(lo <= s < hi for lo, hi in bands) == 1, (s, bands)

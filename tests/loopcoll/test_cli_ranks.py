"""``--ranks`` / ``--relay`` on bound, synth and simulate: the communicator of those global ranks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loopcoll.cli import main
from synth import optimal_bound, read_schedule
from synth.topologies import load_topology


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("relay", [False, True])
def test_bound_on_ranks_equals_the_library_bound(capsys: pytest.CaptureFixture[str], relay: bool) -> None:
    code, out, _ = run(capsys, "bound", "allgather", "hpn:1x2x8", "--ranks", "0,8,1,9", "--json",
                       *(["--relay"] if relay else []))
    assert code == 0
    doc = json.loads(out)
    expected = optimal_bound("allgather", load_topology("hpn:1x2x8"), ranks=[0, 8, 1, 9], relay=relay)
    assert doc["nranks"] == 4 and doc["algbw_GBps"] == expected.algbw_GBps


def test_synth_on_ranks_writes_a_schedule_of_those_ranks(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    sched_path = tmp_path / "s.json"
    code, out, _ = run(capsys, "synth", "alltoall", "hpn:1x2x8", "--fail", "fail2", "--ranks", "0,2,4,6,8",
                       "--schedule-out", str(sched_path), "-o", str(tmp_path / "s.xml"), "--json")
    assert code == 0
    assert json.loads(out)["nranks"] == 5 and json.loads(out)["global_ranks"] == [0, 2, 4, 6, 8]
    sched = read_schedule(sched_path)
    assert sched.nranks == 5 and sched.meta["global_ranks"] == [0, 2, 4, 6, 8]
    sched.validate(load_topology("hpn:1x2x8", ["fail2"]).communicator([0, 2, 4, 6, 8]))
    assert (tmp_path / "s.xml").read_text().count("<gpu ") == 5


def test_simulate_on_ranks(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "simulate", "allgather", "hpn:1x2x8", "--fail", "fail2", "--ranks", "0,1,8,9",
                       "--sizes", "64M", "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["nranks"] == 4
    bound = optimal_bound("allgather", load_topology("hpn:1x2x8", ["fail2"]), ranks=[0, 1, 8, 9]).algbw_GBps
    assert doc["optimal_algbw_GBps"] == bound
    assert {r["schedule"] for r in doc["results"]} == {"loopcoll", "nccl", "static"}
    assert all(0 < r["algbw_GBps"] <= bound * (1 + 1e-9) for r in doc["results"])


@pytest.mark.parametrize(
    ("argv", "culprit"),
    [
        (["bound", "allgather", "ring:8", "--ranks", "0,4"], "relay=True"),
        (["bound", "allgather", "ring:8", "--ranks", "0,9"], "rank 9 is not a rank"),
        (["bound", "allgather", "ring:8", "--relay"], "--relay needs --ranks"),
        (["bound", "allgather", "ring:8", "--ranks", "0,x"], "comma-separated integers"),
    ],
)
def test_bad_ranks_are_one_error_line(capsys: pytest.CaptureFixture[str], argv: list[str], culprit: str) -> None:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own errors
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert culprit in err and err.count("\n") == 1 and "Traceback" not in err

"""Closed-loop timeline and ``loopcoll replay``: the loop reacts to a failure and ignores microbursts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loopcoll.cli import main
from runtime.errors import ProfileError
from runtime.scenarios.timeline import format_table, plot_timeline, run_timeline, scenario_from_dict

TOPO = "hpn:1x2x4"


def _doc(events: list, duration_s: float = 0.06, **over: object) -> dict:
    doc = {"format": "loopcoll.scenario/1", "topology": TOPO, "duration_s": duration_s,
           "workload": [{"comm": "world", "collective": "alltoall", "size_bytes": 4 << 20}], "events": events,
           "controller": {"cooldown_s": 0.01}, "charge_synth_s": 0.002}
    doc.update(over)
    return doc


@pytest.fixture(scope="module")
def fail2() -> object:
    return run_timeline(scenario_from_dict(_doc([{"start_s": 0.01, "end_s": 0.04, "failure": "fail2"}])))


def test_failure_is_detected_resynthesized_and_adapted(fail2: object) -> None:
    (c,) = fail2.changes
    assert c.detected_s is not None and 0 < c.detection_delay_s < 0.02
    assert c.detection_collectives >= 2 and c.detection_samples > c.detection_collectives
    assert c.version_before == 1 and c.version_after == 2
    assert c.reaction_s >= c.detection_delay_s + 0.002 - 1e-12  # the (charged) synthesis time delays the swap
    assert c.algbw_stale_GBps < 0.5 * c.algbw_before_GBps
    assert c.speedup > 2.0
    assert fail2.false_positives == 0
    warm = [d for d in fail2.decisions if d["event"] == "synthesized"]
    # warm from the in-memory SynthResult: the certified repair, or warm column generation from its state
    assert warm and warm[0]["warm_mode"] in ("repair", "state")
    assert all(r["version"] == 1 for r in fail2.rows if r["t_s"] < c.detected_s)


def test_output_forms(fail2: object, tmp_path: Path) -> None:
    text = format_table(fail2)
    assert "detection delay" in text and "re-synthesis wall time is charged to the simulated clock" in text
    doc = json.loads(json.dumps(fail2.to_dict()))
    assert doc["format"] == "loopcoll.timeline/1" and doc["changes"][0]["version_after"] == 2
    plot_timeline(fail2, tmp_path / "t.png")
    assert (tmp_path / "t.png").read_bytes()[:4] == b"\x89PNG"


def test_microbursts_cause_no_resynthesis() -> None:
    bursts = [{"start_s": 0.01 + 0.01 * k, "end_s": 0.0105 + 0.01 * k, "link": "gpu0->tor0.0", "factor": 0.5,
               "transient": True} for k in range(3)]
    res = run_timeline(scenario_from_dict(_doc(bursts, duration_s=0.05)))
    assert res.syntheses == 1 and res.publications == 0 and res.false_positives == 0  # bootstrap only
    assert any(r["changes"] for r in res.rows)  # the bursts did hit collectives


@pytest.mark.parametrize("change, culprit", [
    ({"format": "other"}, "format must be 'loopcoll.scenario/1'"),
    ({"workload": []}, "workload must be a non-empty list"),
    ({"events": [{"start_s": 1.0, "end_s": 0.5, "failure": "fail2"}]}, r"events\[0\]: end_s must be > start_s"),
    ({"events": [{"start_s": 0.0}]}, r"events\[0\]: needs a 'failure' or a 'link'"),
    ({"controller": {"gama": 0.1}}, "unknown knob 'gama'"),
    ({"bogus": 1}, "unknown field 'bogus'"),
])
def test_bad_scenarios_name_the_culprit(change: dict, culprit: str) -> None:
    with pytest.raises(ProfileError, match=culprit):
        scenario_from_dict({**_doc([]), **change})


def test_cli_replay_json_and_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "s.json"
    path.write_text(json.dumps(_doc([], duration_s=0.01)))
    assert main(["replay", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["publications"] == 0 and doc["collectives"] > 0
    path.write_text(json.dumps(_doc([], workload=[{"collective": "alltoall", "size_bytes": 0}])))
    assert main(["replay", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "workload[0]: size_bytes must be an integer >= 1" in err
    assert main(["replay", str(tmp_path / "missing.json")]) == 2
    assert "cannot read scenario" in capsys.readouterr().err


def test_a_communicator_subset_is_detected_and_adapted() -> None:
    doc = _doc([{"start_s": 0.004, "failure": "fail2"}], duration_s=0.03,
               workload=[{"comm": "pair_of_rails", "ranks": [0, 1, 4, 5], "collective": "alltoall",
                          "size_bytes": 4 << 20}])
    res = run_timeline(scenario_from_dict(doc))
    (c,) = res.changes
    assert c.detected_s is not None and c.version_after == 2 and c.speedup > 1.5, format_table(res)
    assert res.false_positives == 0


def test_no_gain_keeps_the_version() -> None:
    """fail1 on one host: gpu0's only NVLink binds every schedule; re-synthesis cannot help."""
    doc = _doc([{"start_s": 0.004, "failure": "fail1"}], duration_s=0.02,
               workload=[{"comm": "host0", "ranks": [0, 1, 2, 3], "collective": "allgather", "size_bytes": 16 << 20}])
    res = run_timeline(scenario_from_dict(doc))
    assert res.changes[0].detected_s is not None and res.publications == 0
    assert [d["event"] for d in res.decisions if d["event"] in ("no_gain", "publish")] == ["publish", "no_gain"]


def test_progress_is_reported_and_quiet_silences_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    calls: list[tuple[float, str]] = []
    res = run_timeline(scenario_from_dict(_doc([], duration_s=0.01)), progress=lambda f, what: calls.append((f, what)))
    assert calls[0] == (0.0, "bootstrap: synthesizing the first versions")
    fractions = [f for f, _ in calls]
    assert fractions == sorted(fractions) and 0 <= fractions[-1] < 1
    assert len(calls) >= 3 and res.collectives > 0 and "of 10 ms simulated" in calls[-1][1]
    path = tmp_path / "s.json"
    path.write_text(json.dumps(_doc([], duration_s=0.01)))
    assert main(["replay", str(path), "--quiet"]) == 0
    assert capsys.readouterr().err == ""

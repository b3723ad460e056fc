"""The controller's opt-in contention gate: sustained degradations still adapt, microbursts never flag."""

from __future__ import annotations

import pytest

from runtime.errors import ProfileError
from runtime.scenarios.timeline import run_timeline, scenario_from_dict
from tests.runtime.test_timeline import _doc

GATED = {"cooldown_s": 0.01, "contention_gate": {}}


def test_gate_delays_but_keeps_adaptation() -> None:
    fail = [{"start_s": 0.01, "end_s": 0.04, "failure": "fail2"}]
    plain = run_timeline(scenario_from_dict(_doc(fail)))
    gated = run_timeline(scenario_from_dict(_doc(fail, controller=GATED)))
    (p,), (g,) = plain.changes, gated.changes
    assert g.version_after == 2 and g.detected_s is not None
    assert g.detection_collectives > p.detection_collectives  # SPRT needs >= 3 elevated polls
    states = [d["state"] for d in gated.decisions if d.get("event") == "contention"]
    assert states and states[0] == "sustained"


def test_gate_removes_false_flags_of_microbursts() -> None:
    bursts = [{"start_s": 0.01 + 0.01 * k, "end_s": 0.013 + 0.01 * k, "link": "gpu0->tor0.0", "factor": 0.3,
               "transient": True} for k in range(3)]
    plain = run_timeline(scenario_from_dict(_doc(bursts, duration_s=0.05)))
    gated = run_timeline(scenario_from_dict(_doc(bursts, duration_s=0.05, controller=GATED)))
    assert plain.false_positives > 0  # the bare detector flags the bursts (its cool-down / no-gain stop them)
    assert gated.false_positives == 0 and gated.publications == 0


def test_bad_gate_config_is_a_profile_error(tmp_path) -> None:
    from runtime import Controller, ControllerConfig
    from synth import load_topology
    from tests.runtime.test_controller import _profile

    with pytest.raises(ProfileError, match="unknown gate keys"):
        Controller(load_topology("hpn:1x2x4"), _profile(), tmp_path / "s", config=ControllerConfig(contention_gate={"alpah": 0.1}))

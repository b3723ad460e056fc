"""Failure scenarios of the MCCL paper, Sec. 6.1 (synth/topologies/failures.py).

Each scenario must change exactly the links docs/topology.md names, in both directions, and
nothing else.
"""

from __future__ import annotations

import pytest

from synth.errors import TopologyError
from synth.topologies import FAILURES, Topology, apply_failure, apply_failures, load_topology, named_topology

Diff = dict[tuple[str, str], tuple[float, float]]


def _diff(before: Topology, after: Topology) -> Diff:
    """Links whose (gbps, latency_us) changed, mapped to the new values; nodes must not change."""
    assert after.nodes == before.nodes
    assert [lk.key for lk in after.links] == [lk.key for lk in before.links]
    return {
        lk.key: (lk.gbps, lk.latency_us)
        for lk in after.links
        if (lk.gbps, lk.latency_us) != (before.link(*lk.key).gbps, before.link(*lk.key).latency_us)
    }


RAIL_SPECS = ["hpn:1x2x8", "hpn:2x2x2", "dgx-a100:2", "h200-proto", "hpn:1x1x2"]


@pytest.mark.parametrize("spec", RAIL_SPECS)
def test_fail1_drops_rank0_nvlink_both_directions_to_800(spec: str) -> None:
    base = named_topology(spec)
    lat = base.link("gpu0", "nvs0.0").latency_us
    after = apply_failure(base, "fail1")
    assert _diff(base, after) == {("gpu0", "nvs0.0"): (800.0, lat), ("nvs0.0", "gpu0"): (800.0, lat)}
    assert after.name == f"{base.name}+fail1"


@pytest.mark.parametrize("spec", RAIL_SPECS)
def test_fail2_drops_rank0_nic_both_directions_to_50(spec: str) -> None:
    base = named_topology(spec)
    after = apply_failure(base, "fail2")
    assert _diff(base, after) == {("gpu0", "tor0.0"): (50.0, 0.5), ("tor0.0", "gpu0"): (50.0, 0.5)}
    assert after.name == f"{base.name}+fail2"


@pytest.mark.parametrize("spec", RAIL_SPECS)
def test_fail3_moves_rank0_to_a_backup_gpu(spec: str) -> None:
    base = named_topology(spec)
    after = apply_failure(base, "fail3")
    nvs_lat = base.link("gpu0", "nvs0.0").latency_us + 1.0
    expected: Diff = {
        ("gpu0", "nvs0.0"): (50.0, nvs_lat),
        ("nvs0.0", "gpu0"): (50.0, nvs_lat),
        ("gpu0", "tor0.0"): (100.0, 1.5),
        ("tor0.0", "gpu0"): (100.0, 1.5),
    }
    assert _diff(base, after) == expected
    assert after.name == f"{base.name}+fail3"


def test_fail3_adds_latency_to_every_link_of_rank0_including_unchanged_capacity() -> None:
    # A GPU with a third link (a direct cable) gains latency there too, keeping its capacity.
    base = named_topology("hpn:1x2x2")
    extra = [*base.links]
    from synth.topologies import Link

    extra += [Link("gpu0", "gpu3", 10.0, 0.2), Link("gpu3", "gpu0", 10.0, 0.2)]
    base = base.with_links(extra)
    diff = _diff(base, apply_failure(base, "fail3"))
    assert diff[("gpu0", "gpu3")] == (10.0, 1.2) and diff[("gpu3", "gpu0")] == (10.0, 1.2)
    assert {k for k in diff if "gpu0" not in k} == set()


@pytest.mark.parametrize(("scenario", "factor"), [("scale:gpu3:nvs0.1:0.5", 0.5), ("scale:nvs0.1:gpu3:2", 2.0),
                                                  ("scale:gpu3:nvs0.1:0", 0.0), ("scale:gpu3:nvs0.1:1e-3", 1e-3)])
def test_scale_multiplies_both_directions(scenario: str, factor: float) -> None:
    base = named_topology("hpn:1x2x2")
    after = apply_failure(base, scenario)
    gbps = 2880.0 * factor
    assert _diff(base, after) == {("gpu3", "nvs0.1"): (gbps, 0.025), ("nvs0.1", "gpu3"): (gbps, 0.025)}
    assert after.name == f"hpn-1x2x2+{scenario}"


def test_scale_on_one_way_link_changes_only_that_link() -> None:
    base = named_topology("ring:3").with_links(
        [lk for lk in named_topology("ring:3").links if lk.key != ("gpu1", "gpu0")]
    )
    after = apply_failure(base, "scale:gpu0:gpu1:0.5")
    assert _diff(base, after) == {("gpu0", "gpu1"): (200.0, 0.5)}


def test_scale_by_one_changes_nothing_but_the_name() -> None:
    base = named_topology("ring:4")
    after = apply_failure(base, "scale:gpu0:gpu1:1")
    assert _diff(base, after) == {} and after.fingerprint == base.fingerprint


def test_failures_combine_in_order() -> None:
    base = named_topology("hpn:1x2x8")
    both = apply_failures(base, ["fail1", "fail2"])
    assert both.name == "hpn-1x2x8+fail1+fail2"
    assert _diff(base, both) == {**_diff(base, apply_failure(base, "fail1")), **_diff(base, apply_failure(base, "fail2"))}
    assert apply_failure(base, "fail1+fail2") == both
    assert load_topology("hpn:1x2x8", ["fail1", "fail2"]) == both
    assert base.with_failure("fail1").with_failure("fail2") == both


def test_fail3_after_fail1_stacks_latency_once_and_overrides_capacity() -> None:
    base = named_topology("hpn:1x2x4")
    after = apply_failures(base, ["fail1", "fail3"])
    assert after.link("gpu0", "nvs0.0").gbps == 50.0
    assert after.link("gpu0", "nvs0.0").latency_us == pytest.approx(1.025)
    twice = apply_failures(base, ["fail3", "fail3"])
    assert twice.link("gpu0", "tor0.0").latency_us == pytest.approx(2.5)  # each application adds 1 us


def test_scale_then_fail2_composes() -> None:
    base = named_topology("hpn:1x2x4")
    after = apply_failures(base, ["scale:gpu5:tor0.1:0.5", "fail2"])
    assert set(_diff(base, after)) == {("gpu5", "tor0.1"), ("tor0.1", "gpu5"), ("gpu0", "tor0.0"), ("tor0.0", "gpu0")}


def test_failures_never_modify_the_input() -> None:
    base = named_topology("hpn:1x2x4")
    snapshot = base.links
    apply_failures(base, ["fail1", "fail2", "fail3", "scale:gpu1:nvs0.0:0.1"])
    assert base.links == snapshot


def test_failures_list_names_every_scenario() -> None:
    assert FAILURES == ("fail1", "fail2", "fail3", "scale:SRC:DST:F")


@pytest.mark.parametrize(
    ("spec", "scenario", "match"),
    [
        ("hpn:1x2x8", "fail4", r"unknown failure scenario 'fail4'; known: fail1, fail2, fail3, scale:SRC:DST:F"),
        ("hpn:1x2x8", "FAIL1", r"unknown failure scenario 'FAIL1'"),
        ("hpn:1x2x8", "", r"failure scenario must be a non-empty string, got ''"),
        ("ring:4", "fail1", r"failure 'fail1' needs rank 0 \(gpu0\) to be cabled to an NVSwitch .*'ring-4'"),
        ("ring:4", "fail2", r"failure 'fail2' needs rank 0 \(gpu0\) to be cabled to a NIC/ToR .*'ring-4'"),
        ("ring:4", "fail3", r"failure 'fail3' needs rank 0 \(gpu0\)"),
        ("nvswitch:4", "fail2", r"failure 'fail2' needs rank 0 \(gpu0\) to be cabled to a NIC/ToR .*'nvswitch-4'"),
        ("nvswitch:4", "fail3", r"failure 'fail3' needs rank 0 \(gpu0\) to be cabled to a NIC/ToR"),
        ("torus:3x3", "fail1", r"'torus-3x3'"),
        ("hpn:1x2x8", "scale:gpu0:nvs0.0:-1", r"scale factor for gpu0->nvs0\.0 must be finite and >= 0, got -1\.0"),
        ("hpn:1x2x8", "scale:gpu0:nvs0.0:-0.001", r"scale factor for gpu0->nvs0\.0 .* got -0\.001"),
        ("hpn:1x2x8", "scale:gpu0:nvs0.0:nan", r"scale factor for gpu0->nvs0\.0 .* got nan"),
        ("hpn:1x2x8", "scale:gpu0:nvs0.0:inf", r"scale factor for gpu0->nvs0\.0 .* got inf"),
        ("hpn:1x2x8", "scale:gpu0:nvs0.0:half", r"failure 'scale:gpu0:nvs0\.0:half': factor 'half' is not a number"),
        ("hpn:1x2x8", "scale:gpu0:nvs0.0", r"failure 'scale:gpu0:nvs0\.0': expected scale:SRC:DST:F"),
        ("hpn:1x2x8", "scale:gpu0:nvs0.0:1:2", r"expected scale:SRC:DST:F"),
        ("hpn:1x2x8", "scale:gpu0:nvs0.1:0.5", r"has no link gpu0->nvs0\.1"),
        ("hpn:1x2x8", "scale:ghost:nvs0.0:0.5", r"has no link ghost->nvs0\.0"),
        ("ring:2", "scale:gpu0:gpu1:0", r"gpu 'gpu1' \(rank 1\).*cannot reach"),
        ("hpn:1x2x8", "fail1+fail9", r"unknown failure scenario 'fail9'"),
    ],
)
def test_bad_failure_is_rejected_naming_it(spec: str, scenario: str, match: str) -> None:
    with pytest.raises(TopologyError, match=match):
        apply_failure(named_topology(spec), scenario)
    with pytest.raises(TopologyError, match=match):
        load_topology(spec, [scenario])


def test_fail1_applies_to_nvswitch_only_topology() -> None:
    base = named_topology("nvswitch:4")
    assert set(_diff(base, apply_failure(base, "fail1"))) == {("gpu0", "nvs0.0"), ("nvs0.0", "gpu0")}

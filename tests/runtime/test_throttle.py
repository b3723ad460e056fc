"""Fault injection (runtime.executor.throttle): configuration, emulated rates, pacing arithmetic. No processes."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.executor.throttle import (EMULATION_ENV, Emulation, EmulationError, Fault, Throttle, emulation_from_dict,
                                       emulation_from_env)


def _doc(**kw):
    return {"format": "loopcoll.emulation/1", "topology": "hpn:1x2x2", **kw}


def test_scaled_topology_and_rates() -> None:
    emu = emulation_from_dict(_doc(gbps_scale=1000))
    topo = emu.scaled_topology()
    assert topo.link("gpu0", "tor0.0").gbps == pytest.approx(0.4)
    th = Throttle(emu, rank=0, world=4)
    th.begin(1, 0.0)
    assert th.rate_Bps(2) == pytest.approx(0.4e9 / 8)          # NIC path
    assert th.rate_Bps(1) == pytest.approx(2.88e9 / 8)         # NVLink path
    assert th.rate_Bps(3) == float("inf")                       # no switch-only path: not paced


def test_fail2_only_on_its_links_and_only_while_active() -> None:
    emu = emulation_from_dict(_doc(faults=[{"failure": "fail2", "start_seq": 5, "end_seq": 9}]))
    th0, th2, th1 = Throttle(emu, rank=0), Throttle(emu, rank=2), Throttle(emu, rank=1)
    for seq, on in ((4, False), (5, True), (8, True), (9, False)):
        for th in (th0, th2, th1):
            th.begin(seq, 0.0)
        f = 1 / 8 if on else 1.0
        assert th0.rate_Bps(2) == pytest.approx(f * 0.4e9 / 8)   # gpu0 -> tor0.0 -> gpu2
        assert th2.rate_Bps(0) == pytest.approx(f * 0.4e9 / 8)   # tor0.0 -> gpu0 too
        assert th1.rate_Bps(3) == pytest.approx(0.4e9 / 8)       # another rail: untouched
        assert th0.rate_Bps(1) == pytest.approx(2.88e9 / 8)      # NVLink untouched


def test_rank_pair_link_and_time_faults() -> None:
    emu = emulation_from_dict(_doc(faults=[{"rank": 1, "factor": 0.5, "start_s": 10.0},
                                           {"pair": [0, 1], "factor": 0.25},
                                           {"link": ["gpu3", "tor0.1"], "factor": 0.1, "end_s": 5.0}]))
    th1, th0, th3 = Throttle(emu, rank=1), Throttle(emu, rank=0), Throttle(emu, rank=3)
    for th in (th1, th0, th3):
        th.begin(1, 0.0)
    assert th1.rate_Bps(0) == pytest.approx(2.88e9 / 8)         # rank fault not yet (start_s 10)
    assert th0.rate_Bps(1) == pytest.approx(0.25 * 2.88e9 / 8)  # pair fault
    assert th0.rate_Bps(2) == pytest.approx(0.4e9 / 8)
    assert th3.rate_Bps(1) == pytest.approx(0.1 * 0.4e9 / 8)    # link fault until 5 s
    for th in (th1, th0, th3):
        th.begin(2, 12.0)
    assert th1.rate_Bps(0) == pytest.approx(0.5 * 2.88e9 / 8) and th1.rate_Bps(3) == pytest.approx(0.5 * 0.4e9 / 8)
    assert th3.rate_Bps(1) == pytest.approx(0.4e9 / 8)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([1, 2]), st.integers(1, 10_000_000)), min_size=1, max_size=12),
       st.floats(0.0, 100.0))
def test_pacing_is_a_depth0_bucket_per_link(sends, now) -> None:
    """Back-to-back sends on one path: release times are cumulative bytes / rate; other paths are independent."""
    th = Throttle(Emulation("hpn:1x2x2", 1000.0), rank=0)
    th.begin(1, 0.0)
    rel = th.release_times(sends, now=now)
    for peer in (1, 2):
        total = 0
        for (p, b), r in zip(sends, rel):
            if p == peer:
                total += b
                assert r == pytest.approx(now + total / th.rate_Bps(peer), rel=1e-9, abs=1e-8)
    later = th.release_times([(2, 1000)], now=max(rel) + 1.0)    # an idle link starts afresh (no burst credit)
    assert later[0] == pytest.approx(max(rel) + 1.0 + 1000 / th.rate_Bps(2))


@pytest.mark.parametrize("doc, word", [
    ({"format": "x"}, "format"),
    (_doc(topology=""), "topology"),
    (_doc(gbps_scale=0), "gbps_scale"),
    (_doc(faults=[{"failure": "fail2", "link": ["gpu0", "tor0.0"]}]), "exactly one"),
    (_doc(faults=[{"rank": 9}]), "rank 9"),
    (_doc(faults=[{"link": ["gpu0", "gpu1"]}]), "gpu0"),
    (_doc(faults=[{"failure": "fail9"}]), "fail9"),
    (_doc(faults=[{"rank": 1, "factor": 1.5}]), "factor"),
    (_doc(faults=[{"rank": 1, "start_seq": -1}]), "start_seq"),
    (_doc(extra=1), "extra"),
])
def test_bad_documents_name_the_culprit(doc, word) -> None:
    with pytest.raises(EmulationError, match=word):
        emulation_from_dict(doc)


def test_environment_variable(tmp_path) -> None:
    assert emulation_from_env({}) is None
    emu = Emulation("hpn:1x2x2", 500.0, (Fault(failure="fail2", start_seq=3),))
    assert emulation_from_env({EMULATION_ENV: emu.to_json()}) == emu
    p = tmp_path / "emu.json"
    p.write_text(json.dumps(emu.to_dict()))
    assert emulation_from_env({EMULATION_ENV: f"@{p}"}) == emu
    with pytest.raises(EmulationError, match="not JSON"):
        emulation_from_env({EMULATION_ENV: "{"})
    with pytest.raises(EmulationError, match="ranks"):
        Throttle(emu, rank=0, world=8)

"""Size-aware selection: bands cover every size, each picks the least predicted time, and the
published version carries one MSCCL XML per band with its <algo> size range."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synth import load_topology
from synth.errors import SolverError
from synth.latency.pareto import pareto_set
from synth.latency.select import bands_from_sizes, choose_bands, predict_time_s


@settings(max_examples=50)
@given(sizes=st.lists(st.integers(1, 1 << 40), min_size=1, max_size=8))
def test_bands_partition_the_sizes(sizes) -> None:
    bands = bands_from_sizes(sizes)
    assert bands[0][0] == 0 and bands[-1][1] is None
    for (lo, hi), (lo2, _) in zip(bands, bands[1:]):
        assert hi is not None and hi + 1 == lo2 and lo <= hi
    reps = sorted(set(sizes))
    for (lo, hi), s in zip(bands, reps):  # each representative size lies in its own band
        assert lo <= s and (hi is None or s <= hi)


def test_bands_reject_nonpositive() -> None:
    with pytest.raises(SolverError):
        bands_from_sizes([0, 5])


@pytest.fixture(scope="module")
def fail2():
    topo = load_topology("hpn:1x2x4", ["fail2"])
    return topo, pareto_set("allgather", topo, depths=(2, 3, None), chunks=4, unbounded_chunks=4)


def test_choice_is_the_least_predicted_time(fail2) -> None:
    topo, pts = fail2
    sizes = [1 << 16, 1 << 22, 1 << 30]
    bands = choose_bands(pts, topo, sizes, "h200")
    assert bands[0].min_bytes == 0 and bands[-1].max_bytes is None
    for b in bands:
        assert b.predicted_s[b.point] == min(b.predicted_s)
        assert b.predicted_s[b.point] == predict_time_s(pts[b.point], topo, b.size_bytes, "h200")
    # small messages favour shallow trees, the largest the fastest bandwidth term
    assert pts[bands[0].point].depth <= pts[bands[-1].point].depth
    assert pts[bands[-1].point].algbw_GBps == max(p.algbw_GBps for p in pts)
    assert all(a.point != b.point for a, b in zip(bands, bands[1:]))  # neighbours merged


def test_store_publishes_one_xml_per_band(fail2, tmp_path) -> None:
    from msccl_xml import read
    from runtime.formats.store import VersionStore

    topo, pts = fail2
    bands = choose_bands(pts, topo, [1 << 16, 1 << 30], "h200")
    store = VersionStore(tmp_path)
    entry = store.publish("world", "allgather", [(b.min_bytes, b.max_bytes, pts[b.point].result) for b in bands],
                          reason="test", topology=topo)
    assert len(entry.bands) == len(bands)
    for i, (band, b) in enumerate(zip(entry.bands, bands)):
        assert band.xml is not None, band.xml_error
        prog = read(store.path(band.xml))
        assert prog.min_bytes == b.min_bytes
        assert prog.max_bytes == (0 if b.max_bytes is None else b.max_bytes)
        assert store.load_schedule(entry, i) == pts[b.point].schedule
        assert entry.band_for(b.size_bytes) == i
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert len(manifest["versions"][0]["bands"]) == len(bands)


def test_executor_plans_pick_the_band_by_size(fail2, tmp_path) -> None:
    """The executor stages every band's XML as a plan and runs the first (by min_bytes) that accepts the size."""
    from runtime.executor import compile_program, load_programs
    from runtime.formats.store import VersionStore

    topo, pts = fail2
    sizes = [1 << 16, 1 << 30]
    bands = choose_bands(pts, topo, sizes, "h200")
    assert len(bands) == 2  # shallow trees for 64 KB, the deepest (fastest bandwidth term) for 1 GB
    store = VersionStore(tmp_path)
    entry = store.publish("world", "allgather", [(b.min_bytes, b.max_bytes, pts[b.point].result) for b in bands],
                          reason="test", topology=topo)
    plans = sorted((compile_program(load_programs(str(store.path(b.xml)))[0]) for b in entry.bands),
                   key=lambda p: p.min_bytes)
    for nbytes in [1, *sizes, 1 << 40]:
        chosen = next(p for p in plans if p.accepts(nbytes))
        i = entry.band_for(nbytes)
        assert chosen.min_bytes == entry.bands[i].min_bytes
        assert sum(p.accepts(nbytes) for p in plans) == 1


def test_time_limit_decides_the_rest_on_the_estimate(fail2) -> None:
    """Issue 31: `synth --sizes` at 128 GPUs spent minutes in band-choice simulations with no limit.
    Past the limit a size is decided on the α–β estimate, and the band says so."""
    topo, pts = fail2
    sizes = [1 << 16, 1 << 22, 1 << 30]
    simulated = choose_bands(pts, topo, sizes, "h200")
    estimated = choose_bands(pts, topo, sizes, "h200", time_limit_s=1e-9)
    assert {b.method for b in simulated} == {"simulated"}
    assert {b.method for b in estimated} == {"estimated"}
    # the estimate tracks the calibrated simulator on this fabric, so the choice is the same
    assert [(b.min_bytes, b.point) for b in estimated] == [(b.min_bytes, b.point) for b in simulated]
    for b in estimated:
        for (s, times) in b.evaluated:
            for p, t in zip(pts, times):
                assert t == pytest.approx(predict_time_s(p, topo, s, "h200"), rel=0.1)
    with pytest.raises(SolverError, match="time_limit_s"):
        choose_bands(pts, topo, sizes, "h200", time_limit_s=0)

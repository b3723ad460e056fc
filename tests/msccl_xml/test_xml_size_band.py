"""The ``<algo minBytes maxBytes>`` size band as each runtime reads it (lowering, export, checker)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from loopcoll.cli import main
from msccl_xml import check, export, lower, parse, write
from synth.errors import XmlError
from synth.topologies import load_topology

from tests.msccl_xml._msccl_helpers import ring_allgather, ring_schedule

# Sizes a band "for every size" must cover: 0, small, the old default cap 2^27 and beyond.
SIZES = (0, 1, 4095, 1 << 27, (1 << 27) + 1, 1 << 40, (1 << 59) - 1)


def _legacy_selects(min_bytes: int, max_bytes: int, nbytes: int) -> bool:
    # microsoft/msccl's test, as docs/gpu.md states it.
    return min_bytes <= nbytes < max_bytes


def test_legacy_export_writes_a_band_that_covers_every_size(tmp_path) -> None:
    topo = load_topology("ring:4")
    path = tmp_path / "ag.xml"
    export(ring_schedule(topo, "allgather"), topo, str(path), runtime="msccl-legacy")
    p = parse(path.read_text())
    assert p.min_bytes == 0 and p.max_bytes != 0
    assert all(_legacy_selects(p.min_bytes, p.max_bytes, s) for s in SIZES)
    assert check(p, runtime="msccl-legacy").valid


def test_legacy_band_edges_are_exclusive_and_tile() -> None:
    sched = ring_schedule(load_topology("ring:4"), "allgather")
    lo = lower(sched, runtime="msccl-legacy", min_bytes=0, max_bytes=65535)
    hi = lower(sched, runtime="msccl-legacy", min_bytes=65536, max_bytes=0)
    bands = [(p.min_bytes, p.max_bytes) for p in (lo, hi)]
    for s in (*SIZES, 65535, 65536):
        assert sum(_legacy_selects(a, b, s) for a, b in bands) == 1, s


def test_default_runtime_band_is_written_unchanged() -> None:
    sched = ring_schedule(load_topology("ring:4"), "allgather")
    assert 'minBytes="0" maxBytes="0"' in write(lower(sched))
    assert 'minBytes="1024" maxBytes="65535"' in write(lower(sched, min_bytes=1024, max_bytes=65535))


def test_a_band_beyond_the_parse_width_is_refused() -> None:
    sched = ring_schedule(load_topology("ring:4"), "allgather")
    with pytest.raises(XmlError, match=r"beyond the largest maxBytes 576460752303423488 msccl-legacy parses"):
        lower(sched, runtime="msccl-legacy", max_bytes=1 << 59)


def test_legacy_check_rejects_max_bytes_zero_naming_the_attribute() -> None:
    p = ring_allgather()
    assert (p.min_bytes, p.max_bytes) == (0, 0) and check(p).valid
    errors = check(p, runtime="msccl-legacy").errors
    assert len(errors) == 1 and errors[0].startswith('algo: maxBytes="0" selects no size on msccl-legacy')


def test_legacy_check_rejects_an_empty_band_the_executor_accepts() -> None:
    p = replace(ring_allgather(), min_bytes=4096, max_bytes=4096)
    assert check(p).valid  # inclusive there: exactly 4096 bytes
    assert check(p, runtime="msccl-legacy").errors == (
        "algo: maxBytes 4096 <= minBytes 4096: never selected (msccl-legacy tests minBytes <= nBytes < maxBytes)",)


def test_legacy_missing_max_bytes_warns_of_the_128_MiB_cap() -> None:
    r = check(replace(ring_allgather(), max_bytes=None), runtime="msccl-legacy")
    assert r.valid and any("only below 134217728 bytes" in w for w in r.warnings)


def test_cli_check_fails_a_max_bytes_zero_file_for_legacy(tmp_path, capsys) -> None:
    path = tmp_path / "ag.xml"
    path.write_text(write(ring_allgather()))
    assert main(["check", str(path)]) == 0
    assert main(["check", str(path), "--runtime", "msccl-legacy"]) != 0
    assert 'maxBytes="0" selects no size on msccl-legacy' in capsys.readouterr().out

"""Telemetry samples: validation with counted reasons, JSONL round trips, the bounded store."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.errors import TelemetryError
from runtime.formats.telemetry import FORMAT, SampleStore, parse_sample, read_jsonl, validate_samples, write_jsonl


def _obj(**over: object) -> dict:
    base = {"format": FORMAT, "t_s": 5.0, "comm": "dp0", "seq": 17, "version": 3, "kind": "pair", "src": 0,
            "dst": 1, "bytes": 3145728, "busy_s": 0.002, "collective": "allgather", "origin": "executor"}
    base.update(over)
    return base


@pytest.mark.parametrize(("over", "reason"), [
    ({"bytes": -1}, "negative_bytes"),
    ({"busy_s": 0}, "nonpositive_busy"),
    ({"busy_s": -1.0}, "nonpositive_busy"),
    ({"busy_s": float("nan")}, "range"),
    ({"kind": "link"}, "unknown_kind"),
    ({"origin": "nccl"}, "unknown_origin"),
    ({"format": "loopcoll.telemetry/2"}, "format"),
    ({"src": "0"}, "type"),
    ({"src": True}, "type"),
    ({"bytes": 1.5}, "type"),
    ({"dst": None}, "dst"),
    ({"dst": 0}, "dst"),
    ({"src": 9}, "unknown_rank"),
    ({"comm": "tp7"}, "unknown_comm"),
    ({"kind": "demand", "extra": {"send_bytes": [1, -2]}}, "type"),
    ({"collective": "allgatherv2"}, "type"),
    ({"incarnation": 7}, "type"),
    ({"incarnation": ""}, "type"),
    ({"incarnation": "x" * 257}, "type"),
])
def test_each_bad_field_is_rejected_with_its_reason(over: dict, reason: str) -> None:
    with pytest.raises(TelemetryError) as info:
        parse_sample(_obj(**over), comms={"dp0": [0, 1, 2, 3]}, nranks=8)
    assert info.value.reason == reason


def test_missing_field_and_bad_json() -> None:
    obj = _obj()
    del obj["busy_s"]
    with pytest.raises(TelemetryError, match="busy_s") as info:
        parse_sample(obj)
    assert info.value.reason == "missing_field"
    with pytest.raises(TelemetryError) as info:
        parse_sample("{not json")
    assert info.value.reason == "bad_json"
    with pytest.raises(TelemetryError) as info:
        parse_sample("[" * 100_000)
    assert info.value.reason in {"bad_json", "too_large"}


def test_validate_counts_reasons_and_keeps_good_samples() -> None:
    objs = [_obj(seq=i) for i in range(5)] + [_obj(bytes=-1), _obj(busy_s=0), _obj(busy_s=0), "garbage", 42]
    ok, report = validate_samples(objs)
    assert [s.seq for s in ok] == [0, 1, 2, 3, 4]
    assert report.accepted == 5 and report.rejected_total == 5
    assert dict(report.rejected) == {"bad_json": 1, "negative_bytes": 1, "nonpositive_busy": 2, "type": 1}
    assert report.first_error is not None and report.first_error.startswith("sample 5:")


_samples = st.builds(
    lambda t, seq, ver, kind, src, nbytes, busy: parse_sample(
        _obj(t_s=t, seq=seq, version=ver, kind=kind, src=src, dst=None if kind != "pair" else src + 1, bytes=nbytes,
             busy_s=busy)),
    st.floats(0, 2e9, allow_nan=False), st.none() | st.integers(0, 2**40), st.none() | st.integers(0, 2**31),
    st.sampled_from(["pair", "inject", "coll"]), st.integers(0, 4095), st.integers(0, 2**50),
    st.floats(1e-9, 1e6, allow_nan=False))


@settings(max_examples=60, deadline=None)
@given(st.lists(_samples, max_size=20))
def test_jsonl_round_trip(tmp_path_factory: pytest.TempPathFactory, samples: list) -> None:
    path = tmp_path_factory.mktemp("t") / "s.jsonl"
    assert write_jsonl(path, samples) == len(samples)
    back, report = read_jsonl(path)
    assert back == samples and report.rejected_total == 0
    assert path.read_text() == "".join(s.to_json() + "\n" for s in samples)


def test_gzip_with_truncated_tail_and_bad_line(tmp_path: Path) -> None:
    good = [parse_sample(_obj(seq=i)) for i in range(3)]
    text = "".join(s.to_json() + "\n" for s in good) + "{\"format\": \"loopcoll.tel"
    raw = gzip.compress(text.encode())
    path = tmp_path / "s.jsonl.gz"
    path.write_bytes(raw[:-6])  # cut the gzip trailer too
    back, report = read_jsonl(path)
    assert back == good[: len(back)] and len(back) >= 2
    assert report.accepted == len(back)


def test_store_is_bounded_per_comm_and_in_comms() -> None:
    store = SampleStore(max_per_comm=3, max_comms=2)
    store.add(parse_sample(_obj(comm=c, seq=i)) for c in ("a", "b", "c") for i in range(5))
    assert len(store) == 6
    assert [s.seq for s in store.recent("a")] == [2, 3, 4]
    assert store.recent("c") == []
    assert store.dropped == 2 * 2 + 5
    assert [s.seq for s in store.recent(since_t_s=4.0, kind="pair")] == [2, 3, 4, 2, 3, 4]
    with pytest.raises(TelemetryError):
        SampleStore(max_per_comm=0)


def test_sample_json_is_sorted_and_compact() -> None:
    s = parse_sample(_obj(extra={"coll_sn": 4}))
    line = s.to_json()
    assert json.loads(line)["extra"] == {"coll_sn": 4}
    assert list(json.loads(line)) == sorted(json.loads(line))
    assert " " not in line


def test_incarnation_is_optional_and_round_trips() -> None:
    old = parse_sample(_obj())
    assert old.incarnation is None and "incarnation" not in old.to_dict()  # older samples: the same JSON as before
    new = parse_sample(_obj(incarnation="9f1c2a7e5d3b4c60"))
    assert new.incarnation == "9f1c2a7e5d3b4c60" and parse_sample(new.to_json()) == new
    assert new != old  # part of the sample's identity: one collective of another run

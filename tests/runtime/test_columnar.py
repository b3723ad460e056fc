"""Columnar aggregate batches (``loopcoll.telemetry/2`` kind ``aggcols``, docs/telemetry.md §6): records ↔ batch
round trips, strict rejection of hostile batches, and the controller folding a batch exactly as the same records."""

from __future__ import annotations

import base64
import json
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime import Client, Controller, ControllerConfig, profile_from_dict, serve
from runtime.errors import TelemetryError
from runtime.formats.aggregate import AggRecord, parse_record
from runtime.formats.columnar import (MAX_BATCH_ROWS, AggBatch, batches_from_records, check_batch, merge_batches,
                                      parse_batch, validate_telemetry)
from runtime.loop.bootstrap import fallback_schedule
from runtime.scenarios.loadgen import flow_table, window_batch
from runtime.service.daemon import DaemonConfig
from synth import load_topology

_pos = st.floats(min_value=1e-9, max_value=1e12, allow_nan=False, allow_infinity=False)


@st.composite
def records(draw: st.DrawFn) -> AggRecord:
    src = draw(st.integers(0, 63))
    inject = draw(st.booleans())
    dst = None if inject else draw(st.integers(0, 63).filter(lambda d: d != src))
    q = sorted(draw(st.lists(st.floats(0.0, 1e12, allow_nan=False), min_size=3, max_size=3)))
    seq_first = draw(st.integers(0, 1 << 40))
    t_first = draw(st.floats(-1e9, 1e9, allow_nan=False))
    return AggRecord(t_first + draw(st.floats(0.0, 1e3)), t_first, "world", "alltoall", draw(st.integers(1, 5)),
                     "inject" if inject else "pair", src, dst, seq_first, seq_first + draw(st.integers(0, 64)),
                     draw(st.integers(1, 64)), draw(st.integers(0, 1 << 50)), draw(_pos), q[0], q[1], q[2],
                     "executor", draw(st.sampled_from([None, "inc-a"])))


@settings(max_examples=60, deadline=None)
@given(st.lists(records(), max_size=40))
def test_records_to_batches_and_back_are_the_same_records(recs: list[AggRecord]) -> None:
    batches = batches_from_records(recs)
    wire = [json.loads(json.dumps(b.to_dict())) for b in batches]  # through JSON text, as on the wire
    back = [r for w in wire for r in parse_batch(w, comms={"world": range(64)}, nranks=64).records()]
    key = (lambda r: (r.version, r.incarnation or ""))
    assert sorted(back, key=key) == sorted(recs, key=key)  # each stream's rows in input order (sort is stable)
    assert all(parse_record(r.to_dict()) == r for r in back)  # every row is a valid /2 record
    assert sum(len(b) for b in merge_batches(batches)) == len(recs)


@settings(max_examples=30, deadline=None)
@given(st.lists(records(), min_size=1, max_size=20), st.lists(records(), min_size=1, max_size=20))
def test_merging_keeps_every_row_of_each_stream_in_order(a: list[AggRecord], b: list[AggRecord]) -> None:
    merged = merge_batches(batches_from_records(a) + batches_from_records(b))
    rows = [r for m in merged for r in m.records()]
    for key in {(r.version, r.incarnation) for r in a + b}:
        want = [r for r in a + b if (r.version, r.incarnation) == key]
        assert [r for r in rows if (r.version, r.incarnation) == key] == want
    assert len({m.key for m in merged}) == len(merged)


def test_shared_columns_travel_as_one_number_and_ranks_as_int32() -> None:
    recs = [AggRecord(2.0, 1.0, "world", "allgather", 1, "pair", s, s + 1, 0, 7, 8, 800 + s, 0.008, 9e4, 1e5, 1.1e5,
                      "executor") for s in range(3)]
    cols = batches_from_records(recs)[0].to_dict()["columns"]
    assert cols["seq_last"] == 7 and cols["t_s"] == 2.0 and cols["count"] == 8 and isinstance(cols["bytes"], str)
    assert len(base64.b64decode(cols["src"])) == 3 * 4 and len(base64.b64decode(cols["bytes"])) == 3 * 8
    big = AggRecord(2.0, 1.0, "world", "allgather", 1, "pair", 0, 1 << 31, 0, 7, 8, 8, 0.008, 9e4, 1e5, 1.1e5,
                    "executor")
    with pytest.raises(TelemetryError, match="'dst' does not fit int32"):
        batches_from_records([big])


def test_batches_split_at_the_row_bound_and_fit_one_wire_message() -> None:
    r = AggRecord(1.0, 0.5, "world", "alltoall", 1, "pair", 0, 1, 0, 7, 8, 8 << 20, 0.01, 1e8, 1e9, 1.1e9,
                  "executor")
    batches = batches_from_records([r] * (MAX_BATCH_ROWS + 5))
    assert [len(b) for b in batches] == [MAX_BATCH_ROWS, 5]
    assert len(json.dumps(batches[0].to_dict())) < (1 << 20) - 4096
    assert not batches[0].cols["src"].flags.writeable


def _good() -> dict:
    recs = [AggRecord(2.0, 1.0, "world", "allgather", 1, "pair", s, (s + 1) % 4, 0, 7, 8, 800, 0.008, 9e4, 1e5,
                      1.1e5, "executor") for s in range(4)]
    recs.append(AggRecord(2.0, 1.0, "world", "allgather", 1, "inject", 2, None, 0, 7, 8, 800, 0.008, 9e4, 1e5,
                          1.1e5, "executor"))
    (b,) = batches_from_records(recs)
    return b.to_dict()


def _with(col: str, values: list) -> dict:
    d = _good()
    d["columns"] = {**d["columns"], col: values}
    return d


def _b64(values: list, dtype: str) -> str:
    return base64.b64encode(np.asarray(values, dtype=dtype).tobytes()).decode()


@pytest.mark.parametrize("doc, reason, names", [
    (_with("busy_s", [0.008, 0.008, float("nan"), 0.008, 0.008]), "range", "'busy_s'"),
    (_with("busy_s", _b64([0.008, 0.008, float("inf"), 0.008, 0.008], "<f8")), "range", "'busy_s'"),
    (_with("bytes", [800, -1, 800, 800, 800]), "negative_bytes", "'bytes'"),
    (_with("busy_s", [0.008, 0.0, 0.008, 0.008, 0.008]), "nonpositive_busy", "'busy_s'"),
    (_with("count", [8, 8, 0, 8, 8]), "count", "'count'"),
    (_with("seq_first", [0, 0, 0, 0, 9]), "seq_range", "'seq_last'"),
    (_with("rate_p90_Bps", [1.1e5, 1.1e5, 1.1e5, 1.1e5, 9.9e4]), "quantiles", "'rate_p90_Bps'"),
    (_with("dst", [1, 2, 2, 0, -1]), "dst", "'dst'"),
    (_with("dst", [1, 2, 3, 0, -2]), "dst", "'dst'"),
    (_with("dst", [1, 2, 3, 9, -1]), "unknown_rank", "'dst'"),
    (_with("src", [0, 1, 2, -3, 2]), "unknown_rank", "'src'"),
    (_with("src", [0, 1, 2, 3]), "length", "'src'"),
    (_with("src", _b64([0, 1, 2, 3], "<i8")), "length", "'src'"),
    (_with("src", "not*base64"), "type", "'src'"),
    (_with("src", [0, 1, 2.5, 3, 2]), "type", "'src'"),
    (_with("src", [0, 1, True, 3, 2]), "type", "'src'"),
    (_with("src", [0, 1, 1 << 70, 3, 2]), "type", "'src'"),
    (_with("busy_s", [0.008, "x", 0.008, 0.008, 0.008]), "type", "'busy_s'"),
    (_with("extra", [1, 2, 3, 4, 5]), "type", "'extra'"),
    (_with("src", True), "type", "'src'"),
    (_with("count", 1.5), "type", "'count'"),
    (_with("bytes", 1 << 70), "type", "'bytes'"),
    (_with("busy_s", float("nan")), "range", "'busy_s'"),
    (_with("count", 0), "count", "'count'"),
    (_with("src", _b64([0, 1, 2, 3, 2], "<i4")[:-4]), "length", "'src'"),
    (_with("src", _b64([0, 1, 2, 3, 2], "<i4")[:-1]), "type", "'src'"),
    ({**_good(), "n": MAX_BATCH_ROWS + 1}, "length", "n must be"),
    ({**_good(), "n": -1}, "type", "n must be"),
    ({**_good(), "comm": "other"}, "unknown_comm", "communicator"),
    ({**_good(), "phase": "allgather"}, "type", "phase"),
    ({k: v for k, v in _good().items() if k != "version"}, "missing_field", "'version'"),
    ({**_good(), "columns": {k: v for k, v in _good()["columns"].items() if k != "rate_p50_Bps"}},
     "missing_field", "'rate_p50_Bps'"),
])
def test_hostile_batches_are_rejected_whole_naming_the_field(doc: dict, reason: str, names: str) -> None:
    with pytest.raises(TelemetryError) as exc:
        parse_batch(doc, comms={"world": range(4)}, nranks=4)
    assert exc.value.reason == reason and names in str(exc.value)
    recs, batches, rep = validate_telemetry([doc, _good()], comms={"world": range(4)}, nranks=4)
    assert recs == [] and len(batches) == 1 and rep.accepted == 5 and sum(rep.rejected.values()) >= 1
    assert rep.first_error is not None and rep.first_error.startswith("batch 0:")


@pytest.mark.parametrize("column, values, reason", [
    ("busy_s", [0.008, 0.008, float("nan"), 0.008, 0.008], "range"),
    ("bytes", [800, -1, 800, 800, 800], "negative_bytes"),
    ("dst", [1, 2, 2, 0, -1], "dst"),
    ("src", [0, 1, 2, 9, 2], "unknown_rank"),
    ("src", [0, 1, 2, 1 << 40, 2], "range"),  # fits int64 in memory, not int32 on the wire
    ("src", [0.0, 1.0, 2.0, 3.0, 2.0], "type"),
    ("busy_s", [0.008, 0.008, 0.008, 0.008], "length"),
    ("rate_p90_Bps", [1.1e5, 1.1e5, 1.1e5, 1.1e5, 9.9e4], "quantiles"),
])
def test_batch_objects_in_process_are_held_to_the_wire_rules(column: str, values: list, reason: str) -> None:
    good = parse_batch(_good())
    cols = {**good.cols, column: np.array(values)}
    bad = AggBatch(good.comm, good.collective, good.version, good.origin, good.incarnation, good.phase, cols)
    with pytest.raises(TelemetryError) as exc:
        check_batch(bad, comms={"world": range(4)}, nranks=4)
    assert exc.value.reason == reason and repr(column) in str(exc.value)
    recs, batches, rep = validate_telemetry([bad, good], comms={"world": range(4)}, nranks=4)
    assert [len(b) for b in batches] == [5] and rep.accepted == 5 and rep.rejected[reason] >= 1
    writable = AggBatch(good.comm, good.collective, good.version, good.origin, None, None,
                        {k: np.array(v) for k, v in good.cols.items()})
    held = check_batch(writable)
    writable.cols["busy_s"][0] = -1.0  # the caller's arrays stay its own: the controller holds a copy
    assert held.cols["busy_s"][0] > 0 and not held.cols["busy_s"].flags.writeable


def test_mixed_streams_of_samples_records_and_batches_are_validated_together() -> None:
    good = _good()
    rec = parse_batch(good).records()[0]
    recs, batches, rep = validate_telemetry([json.dumps(good), rec.to_dict(), "{broken", AggBatch(**{
        f: getattr(parse_batch(good), f) for f in ("comm", "collective", "version", "origin", "incarnation", "phase",
                                                   "cols")})])
    assert recs == [rec] and [len(b) for b in batches] == [5, 5]
    assert rep.accepted == 11 and dict(rep.rejected) == {"bad_json": 1}


SPEC = "hpn:1x2x8"


def _controller(store: str, coll: str = "alltoall") -> tuple[Controller, object]:
    topo = load_topology(SPEC)
    prof = profile_from_dict({"format": "loopcoll.profile/1", "topology": SPEC, "communicators": [
        {"name": "world", "ranks": list(range(topo.nranks)), "collectives": [{"collective": coll,
                                                                              "sizes": [1 << 24]}]}]})
    ctl = Controller(topo, prof, store, config=ControllerConfig(export_xml=False))
    sched = fallback_schedule(coll, topo)
    ctl.deploy("world", coll, sched, reason="test: version 1")
    return ctl, sched


@pytest.mark.parametrize("coll", ["alltoall", "allgather"])
def test_a_batch_folds_into_the_estimator_exactly_as_its_records(coll: str) -> None:
    """Noisy (5 % lognormal + 1 % outliers at 3x) healthy windows, then fail2 from mid-window: the columnar and the
    per-record paths give the same link estimates, flags and counters."""
    topo = load_topology(SPEC)
    figures = []
    for path in ("records", "wire", "objects", "shuffled"):
        with tempfile.TemporaryDirectory() as store:
            ctl, sched = _controller(store, coll)
            healthy = flow_table(sched, topo, comm="world", version=1, size_bytes=1 << 24)
            fail = flow_table(sched, topo, comm="world", version=1, size_bytes=1 << 24,
                              true=topo.with_failure("fail2"))
            rng = np.random.default_rng(7)
            t = 100.0
            for k in range(10):
                then_from = min(max(36 - 8 * k, 0), 8)
                out = rng.random(len(healthy)) < 0.01  # 1 % of flows slowed 3x in this window's draw
                slow = healthy.__class__(healthy.comm, healthy.collective, healthy.version, healthy.src, healthy.dst,
                                         healthy.bytes, np.where(out, 3 * healthy.busy_s, healthy.busy_s))
                batches = window_batch(slow, seq_first=8 * k, count=8, t_s=t, period_s=0.1, sigma=0.05, rng=rng,
                                       then=fail if then_from < 8 else None, then_from=then_from)
                docs = _as(path, batches, np.random.default_rng(100 + k))
                rep = ctl.ingest(docs)
                assert rep.accepted == len(healthy) + (path == "shuffled") and not rep.rejected
                ctl.poll(now_s=t)
                t += 0.8
            st = ctl.status()
            figures.append(([(e["link"], e["estimate_gbps"], e["observations"]) for e in st["links"]],
                            st["counters"]["groups"], st["counters"]["samples_skipped"], ctl.samples_since_publish))
    skipped = figures[3][2].pop("duplicate_sample")  # the shuffled path resent one row per window: skipped
    assert skipped == 10 and figures[0] == figures[1] == figures[2] == figures[3]
    assert figures[0][1] == 10


def _as(path: str, batches: list[AggBatch], rng: np.random.Generator) -> list:
    """A window's batches as ``path`` sends them: per-flow records, wire objects, the objects themselves, or the
    rows of each batch in a random order with the window's first row sent again at its end (a duplicate)."""
    if path == "records":
        return [r.to_dict() for b in batches for r in b.records()]
    if path == "wire":
        return [b.to_dict() for b in batches]
    if path == "objects":
        return list(batches)
    out = []
    for i, b in enumerate(batches):
        order = rng.permutation(len(b))
        cols = {k: v[order] for k, v in b.cols.items()}
        if i == len(batches) - 1:
            cols = {k: np.r_[v, batches[0].cols[k][:1]] for k, v in cols.items()}
        out.append(AggBatch(b.comm, b.collective, b.version, b.origin, b.incarnation, b.phase, cols))
    return out


def test_a_daemon_takes_batches_and_a_hostile_one_leaves_the_connection_up() -> None:
    with tempfile.TemporaryDirectory() as store:
        ctl, sched = _controller(store)
        table = flow_table(sched, load_topology(SPEC), comm="world", version=1, size_bytes=1 << 24)
        with serve(ctl, token="t", store_dir=store, config=DaemonConfig(bootstrap=False), log=lambda r: None) as d, \
                Client(d.address, token="t") as client:
            (batch,) = window_batch(table, seq_first=0, count=8, t_s=5.0, period_s=0.1, sigma=0.05,
                                    rng=np.random.default_rng(0))
            bad = batch.to_dict()
            bad["columns"] = {**bad["columns"], "rate_p50_Bps": _b64([float("nan")] * len(batch), "<f8")}  # NaN in base64
            assert client.push_samples([bad]) == {"accepted": 0, "rejected": {"range": len(batch)}}
            assert client.push_samples([batch.to_dict()]) == {"accepted": len(batch), "rejected": {}}
            counters = client.status()["controller"]["counters"]
    assert counters["samples_accepted"] == len(batch) and counters["samples_rejected"] == {"range": len(batch)}


def test_the_executors_sink_sends_one_batch_per_window_holding_its_records() -> None:
    from runtime.executor.sinks import AggregatingSink, MemorySink
    from runtime.formats.telemetry import Sample

    plain, cols = MemorySink(), MemorySink()
    sinks = [AggregatingSink(plain, window=4), AggregatingSink(cols, window=4, columnar=True)]
    rng = np.random.default_rng(3)
    for seq in range(8):
        samples = [Sample(seq / 10, "world", seq, 1, "pair", 0, d, 4096, float(1e-5 * rng.lognormal(0, 0.05)),
                          "alltoall", "executor") for d in (1, 2, 3)]
        samples.append(Sample(seq / 10, "world", seq, 1, "coll", 0, None, 4096, 1e-4, "alltoall", "executor"))
        for sink in sinks:
            sink(samples)
    batches = [b for b in cols.samples if isinstance(b, AggBatch)]
    assert [len(b) for b in batches] == [3, 3]  # one batch per window, a row per flow
    assert [r for b in batches for r in b.records()] == [r for r in plain.samples if isinstance(r, AggRecord)]
    assert sum(1 for s in cols.samples if isinstance(s, Sample)) == 8  # coll samples pass through
    assert json.loads(batches[0].to_json())["kind"] == "aggcols"


def test_the_documented_example_batch_validates() -> None:
    import re

    text = (Path(__file__).resolve().parents[2] / "docs" / "telemetry.md").read_text(encoding="utf-8")
    block = re.search(r"## 6\..*?```json\n(.*?)```", text, re.S)
    assert block is not None
    batch = parse_batch(json.loads(block.group(1)), comms={"world": range(8)}, nranks=8)
    flows = [(r.flow, r.src, r.dst, r.count) for r in batch.records()]
    assert flows == [("pair", 0, 1, 8), ("inject", 0, None, 8)]


def test_incomplete_and_duplicate_windows_are_grouped_as_their_records() -> None:
    """Window 0 lacks rank 3 (closed when rank 3 reports window 1), window 1 arrives twice (duplicates skipped),
    window 2 lacks rank 5 and stays held: the same groups, skips and estimates on both paths."""
    topo = load_topology(SPEC)
    figures = []
    for columnar in (False, True):
        with tempfile.TemporaryDirectory() as store:
            ctl, sched = _controller(store)
            table = flow_table(sched, topo, comm="world", version=1, size_bytes=1 << 24)
            rng = np.random.default_rng(11)
            sends = [(0, table.of_ranks([r for r in range(16) if r != 3])), (1, table),
                     (2, table.of_ranks([r for r in range(16) if r != 5]))]
            for k, part in sends:
                batches = window_batch(part, seq_first=8 * k, count=8, t_s=50.0 + k, period_s=0.1, sigma=0.05,
                                       rng=rng)
                batches = batches * 2 if k == 1 else batches  # window 1 sent twice before a poll
                ctl.ingest([b.to_dict() for b in batches] if columnar else
                           [r.to_dict() for b in batches for r in b.records()])
                ctl.poll(now_s=50.0 + k)
            st = ctl.status()
            figures.append(([(e["link"], e["estimate_gbps"], e["observations"]) for e in st["links"]],
                            st["counters"]["groups"], st["counters"]["samples_skipped"],
                            st["counters"]["samples_pending"]))
    assert figures[0] == figures[1]
    assert figures[1][1] == 2 and figures[1][2].get("duplicate_sample") == len(table)
    assert figures[1][3] == len(table.of_ranks([r for r in range(16) if r != 5]))


def test_held_rows_are_bounded_oldest_folded_first(monkeypatch: pytest.MonkeyPatch) -> None:
    import runtime.loop.colgroups as colgroups

    topo = load_topology(SPEC)
    with tempfile.TemporaryDirectory() as store:
        ctl, sched = _controller(store)
        part = flow_table(sched, topo, comm="world", version=1, size_bytes=1 << 24).of_ranks(range(15))  # 15 never reports
        monkeypatch.setattr(colgroups, "MAX_HELD_ROWS", len(part) + 1)
        rng = np.random.default_rng(5)
        for k in range(3):
            ctl.ingest([b.to_dict() for b in window_batch(part, seq_first=8 * k, count=8, t_s=9.0 + k, period_s=0.1,
                                                           sigma=0.05, rng=rng)])
            ctl.poll(now_s=9.0 + k)
        counters = ctl.status()["counters"]
    assert counters["groups"] == 2 and counters["samples_pending"] == len(part)  # only the newest window held


def test_ranks_are_checked_against_a_communicator_with_gaps() -> None:
    sparse = {"world": [0, 1, 2, 3, 7]}
    assert len(parse_batch(_good(), comms=sparse)) == 5
    with pytest.raises(TelemetryError, match="column 'dst' must be a rank of communicator 'world' \\(row 3: 5\\)"):
        parse_batch(_with("dst", [1, 2, 3, 5, -1]), comms=sparse)
    with pytest.raises(TelemetryError, match="column 'src'"):
        parse_batch(_with("src", [0, 1, 2, 4, 2]), comms=sparse)

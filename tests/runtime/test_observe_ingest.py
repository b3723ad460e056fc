"""Ingestion of Inspector and telemetry JSONL into DuckDB: formats, incremental re-ingest, tolerance."""

from __future__ import annotations

import gzip
import importlib
import json
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.observe import ObserveError, SyntheticSpec, connect, ingest, write_logs
from runtime.formats.telemetry import parse_sample, write_jsonl

ingest_mod = importlib.import_module("runtime.observe.ingest")

HEADER = {"id": "0xabc", "comm_name": "dp", "rank": 0, "n_ranks": 2, "nnodes": 1}
META = {"inspector_output_format_version": "v4.0", "git_rev": "x", "rec_mechanism": "nccl_profiler_interface",
        "dump_timestamp_us": 1_800_000_000_000_000, "hostname": "h", "pid": 7}


def coll_line(sn: int, *, rank: int = 0, exec_us: float = 100, coll: str = "AllGather", msg: int = 1 << 20,
              n_ranks: int = 2, busbw: object = 5.0, algbw: object = 10.0, ts: int | None = None) -> str:
    h = dict(HEADER, rank=rank, n_ranks=n_ranks)
    m = dict(META) if ts is None else dict(META, dump_timestamp_us=ts)
    return json.dumps({"header": h, "metadata": m, "coll_perf": {
        "coll": coll, "coll_sn": sn, "coll_msg_size_bytes": msg, "coll_exec_time_us": exec_us,
        "coll_timing_source": "kernel_gpu", "coll_algobw_gbs": algbw, "coll_busbw_gbs": busbw}})


def rows(con, sql="SELECT comm_id, rank, coll, coll_sn, exec_time_us, busbw_gbs FROM coll ORDER BY ALL"):
    return con.execute(sql).fetchall()


def test_v40_and_v43_give_the_same_records(tmp_path):
    spec = SyntheticSpec(nranks=4, ncolls=30, p2p=True, seed=5)
    write_logs(tmp_path / "a", spec)
    write_logs(tmp_path / "b", SyntheticSpec(**{**{k: getattr(spec, k) for k in spec.__slots__}, "fmt": "v4.3"}))
    ca, cb = connect(), connect()
    sa, sb = ingest(ca, [tmp_path / "a"]), ingest(cb, [tmp_path / "b"])
    assert sa.records == sb.records and sa.records["coll"] == 4 * 30 * 2 and sa.records["p2p"] == 4 * 30 * 2
    assert sb.ignored["marker"] > 0 and not sb.rejected
    assert rows(ca) == rows(cb)
    q = "SELECT rank, p2p, peer, p2p_sn, exec_time_us FROM p2p ORDER BY ALL"
    assert rows(ca, q) == rows(cb, q)
    assert {r[0] for r in rows(cb, "SELECT DISTINCT format_version FROM coll")} == {"v4.3"}


def test_v43_markers_carry_across_batches_and_runs(tmp_path, monkeypatch):
    spec = SyntheticSpec(nranks=2, ncolls=40, fmt="v4.3", seed=2)
    write_logs(tmp_path, spec)
    ref = connect()
    ingest(ref, [tmp_path])
    monkeypatch.setattr(ingest_mod, "BATCH_BYTES", 700)  # a batch ends every few lines
    small = connect()
    s = ingest(small, [tmp_path])
    assert not s.rejected and rows(small) == rows(ref)
    # Appending bodies without a new marker: they belong to the last marker of the earlier run.
    f = sorted(tmp_path.glob("*.log"))[0]
    last = [ln for ln in f.read_text().splitlines() if ln.startswith('{"coll_perf"')][-1]
    with open(f, "a") as fh:
        fh.write(last.replace('"coll_sn":39', '"coll_sn":99') + "\n")
    s2 = ingest(small, [tmp_path])
    assert s2.records["coll"] == 1 and s2.files_skipped == 1
    assert small.execute("SELECT comm_id, rank FROM coll WHERE coll_sn = 99").fetchall() == [("0x5eed0c0ffee", 0)]


def test_gzip_and_plain_are_equal(tmp_path):
    write_logs(tmp_path / "p", SyntheticSpec(nranks=3, ncolls=25, seed=1))
    write_logs(tmp_path / "g", SyntheticSpec(nranks=3, ncolls=25, seed=1, gzip_files=True))
    cp, cg = connect(), connect()
    ingest(cp, [tmp_path / "p"])
    ingest(cg, [str(tmp_path / "g" / "*.log.gz")])  # a glob
    assert rows(cp) == rows(cg) and len(rows(cp)) == 3 * 25 * 2


def test_incremental_growth_partial_lines_and_replacement(tmp_path):
    f = tmp_path / "h-pid7.log"
    f.write_text("".join(coll_line(i) + "\n" for i in range(5)) + coll_line(5)[:40])
    db = tmp_path / "o.duckdb"
    con = connect(db)
    s1 = ingest(con, [f])
    assert s1.records["coll"] == 5 and s1.rejected == {"truncated_tail": 1}
    con.close()
    con = connect(db)  # a file database survives reopening
    assert ingest(con, [f]).records["coll"] == 0          # the partial line is still partial
    with open(f, "a") as fh:                              # the writer finishes the line and adds one
        fh.write(coll_line(5)[40:] + "\n" + coll_line(6) + "\n")
    s3 = ingest(con, [f])
    assert s3.records["coll"] == 2 and not s3.rejected
    assert ingest(con, [f]).files_skipped == 1
    assert [r[0] for r in con.execute("SELECT coll_sn FROM coll ORDER BY line_no").fetchall()] == list(range(7))
    f.write_text(coll_line(42) + "\n")                    # rewritten: the old rows go
    s5 = ingest(con, [f])
    assert s5.files_replaced == 1
    assert con.execute("SELECT coll_sn FROM coll").fetchall() == [(42,)]


def test_bad_records_are_counted_and_skipped(tmp_path):
    lines = [
        coll_line(0),
        "{not json",
        "[1, 2]",
        json.dumps({"header": HEADER, "metadata": META, "coll_perf": {"coll": "AllGather"}}),   # fields missing
        coll_line(1, exec_us=-5),                                                                # range
        coll_line(2, rank=3),                                                                    # rank >= n_ranks
        json.dumps({"coll_perf": json.loads(coll_line(3))["coll_perf"]}),                        # no marker before
        json.dumps({"header": HEADER, "metadata": META, "proxy_trace": {"peer": 1}}),           # ignored
        json.dumps({"header": HEADER, "metadata": META, "something": 1}),
        "",
        coll_line(4, exec_us=5663.0),                                                            # float time is fine
    ]
    f = tmp_path / "x.log"
    f.write_text("\n".join(lines) + "\n")
    con = connect()
    s = ingest(con, [f])
    assert s.records["coll"] == 2
    assert dict(s.rejected) == {"bad_field": 1, "bad_json": 2, "no_header": 1, "range": 2, "unknown_body": 1}
    assert dict(s.ignored) == {"proxy_trace": 1}
    assert s.first_error is not None and "line 2" in s.first_error
    got = dict(con.execute("SELECT reason, count FROM ingest_errors").fetchall())
    assert got == dict(s.rejected)


def test_truncated_gzip_stream_keeps_complete_lines(tmp_path):
    data = gzip.compress("".join(coll_line(i) + "\n" for i in range(200)).encode())
    f = tmp_path / "t.log.gz"
    f.write_bytes(data[: len(data) * 2 // 3])
    s = ingest(connect(), [f])
    assert 0 < s.records["coll"] < 200
    assert s.rejected["truncated_gzip"] == 1


@settings(max_examples=25)
@given(st.lists(st.tuples(st.booleans(), st.floats(0.05, 0.95)), min_size=1, max_size=40))
def test_property_corrupted_lines_never_abort(tmp_path_factory, plan):
    """Random lines cut short (as by a crash mid-write) are rejected one by one; the rest are all kept."""
    d = tmp_path_factory.mktemp("c")
    out = []
    for i, (cut, frac) in enumerate(plan):
        line = coll_line(i)
        out.append(line[: max(1, int(len(line) * frac))] if cut else line)
    (d / "c.log").write_text("\n".join(out) + "\n")
    con = connect()
    s = ingest(con, [d])
    good = sum(1 for cut, _ in plan if not cut)
    assert s.records["coll"] == good
    assert s.rejected_total == len(plan) - good
    assert sorted(r[0] for r in con.execute("SELECT coll_sn FROM coll").fetchall()) == \
        [i for i, (cut, _) in enumerate(plan) if not cut]


@pytest.mark.parametrize("coll,msg,n,t_us,algbw,busbw", [
    # The NCCL Inspector README examples (they recompute exactly with the plugin's formulas).
    ("AllReduce", 17179869184, 8, 61974, 277.210914, 485.119099),
    ("ReduceScatter", 65536, 32, 110, 19.065018, 18.469236),
    ("ReduceScatter", 2147483648, 8, 41057, 418.439467, 366.134533),
])
def test_missing_bandwidths_are_recomputed_with_the_inspector_formulas(tmp_path, coll, msg, n, t_us, algbw, busbw):
    f = tmp_path / "g.log"
    f.write_text(coll_line(0, coll=coll, msg=msg, n_ranks=n, exec_us=t_us, algbw="nan", busbw="nan") + "\n"
                 + coll_line(1, coll=coll, msg=msg, n_ranks=n, exec_us=t_us, algbw=algbw, busbw=busbw) + "\n")
    con = connect()
    ingest(con, [f])
    (a0, b0), (a1, b1) = con.execute("SELECT algbw_gbs, busbw_gbs FROM coll ORDER BY coll_sn").fetchall()
    assert a0 == pytest.approx(algbw, abs=1e-6) and b0 == pytest.approx(busbw, abs=1e-6)
    assert (a1, b1) == (algbw, busbw)


def test_telemetry_files_use_the_runtime_validation(tmp_path):
    s1 = parse_sample({"format": "loopcoll.telemetry/1", "t_s": 5.0, "comm": "dp0", "seq": 3, "version": 1,
                       "kind": "pair", "src": 0, "dst": 1, "bytes": 4096, "busy_s": 0.001,
                       "collective": "allgather", "origin": "executor", "extra": {"k": 1}})
    f = tmp_path / "t.jsonl"
    write_jsonl(f, [s1, s1])
    with open(f, "a") as fh:
        fh.write(json.dumps(dict(s1.to_dict(), busy_s=0)) + "\n{oops\n")
    con = connect()
    s = ingest(con, [f])
    assert s.records["telemetry"] == 2 and dict(s.rejected) == {"bad_json": 1, "nonpositive_busy": 1}
    assert con.execute("SELECT src, dst, bytes, extra FROM telemetry").fetchall() == [(0, 1, 4096, '{"k": 1}')] * 2
    assert ingest(con, [f]).records["telemetry"] == 0


def test_missing_inputs_and_missing_duckdb_are_clear_errors(tmp_path, monkeypatch):
    with pytest.raises(ObserveError, match="no such file"):
        ingest(connect(), [tmp_path / "nope*.log"])
    monkeypatch.setitem(sys.modules, "duckdb", None)
    with pytest.raises(ObserveError, match=r"pip install 'loopcoll\[observe\]'"):
        connect()


def test_directory_discovery_ignores_other_files(tmp_path):
    write_logs(tmp_path / "sub", SyntheticSpec(nranks=2, ncolls=3))
    (tmp_path / "ground_truth.json").write_text("{}")
    (tmp_path / "notes.txt").write_text("x")
    s = ingest(connect(), [tmp_path])
    assert s.files_read == 2 and not s.rejected


def test_schema_version_mismatch_is_refused(tmp_path):
    db = tmp_path / "o.duckdb"
    con = connect(db)
    con.execute("UPDATE meta SET value = '999' WHERE key = 'schema_version'")
    con.close()
    with pytest.raises(ObserveError, match="schema version 999"):
        connect(db)


def test_repo_vectors_are_present():
    d = Path(__file__).resolve().parents[1] / "vectors" / "inspector" / "h200x2_contention"
    assert sorted(p.name for p in d.glob("*.log.gz")) == ["vm-pid1023.log.gz", "vm-pid1024.log.gz"]

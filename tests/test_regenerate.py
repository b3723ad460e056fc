"""benchmarks/regenerate.py: its table covers every result, and its normalisation ignores timings only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import regenerate as rg

ROOT = Path(__file__).resolve().parent.parent


def test_every_result_has_a_command() -> None:
    listed = [r for item in rg.ITEMS for r in item.results]
    on_disk = sorted(p.name for p in (ROOT / "benchmarks" / "results").glob("*.json"))
    missing = sorted(set(on_disk) - set(listed))
    assert missing == [], f"add these results to benchmarks/regenerate.py's ITEMS: {missing}"
    assert sorted(set(listed) - set(on_disk)) == [], "ITEMS names results that do not exist"
    assert len(listed) == len(set(listed)), "a result is claimed by two items"


def test_table_commands_name_existing_scripts_and_gpu_results_are_marked() -> None:
    names = [i.name for i in rg.ITEMS]
    assert len(names) == len(set(names))
    for item in rg.ITEMS:
        for argv in (*item.full, *item.quick):
            if argv[0] != "-m":
                assert (ROOT / argv[0]).is_file(), f"{item.name}: no script {argv[0]}"
        assert item.full, item.name
        assert item.regenerable or item.why, item.name
        if item.regenerable and item.kind == "benchmark":
            assert item.quick, f"{item.name}: a regenerable benchmark needs a quick variant"
    assert {i.name for i in rg.ITEMS if not i.regenerable} == {"executor_full4", "executor_full8"}


def test_doc_items_find_documented_commands() -> None:
    docs = rg.doc_items(ROOT)
    tour = [i for i in docs if i.name.startswith("docs/tour.md:")]
    assert tour and all(i.full[0][:2] == ("-m", "loopcoll") for i in tour)
    assert ("-m", "loopcoll", "bound", "alltoall", "hpn:1x2x8", "--fail", "fail2") in [i.full[0] for i in tour]
    readme = [i for i in docs if i.name.startswith("README.md:")]
    assert {i.kind for i in readme} == {"sh", "python"}


def test_doc_items_of_a_small_tree(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("x\n\n```\n$ loopcoll topo show ring:4 --json\n{}\n```\n", encoding="utf-8")
    (tmp_path / "README.md").write_text("```sh\nloopcoll demo\n```\n\n```text\nout\n```\n\n```sh\nls\n```\n",
                                        encoding="utf-8")
    items = rg.doc_items(tmp_path)
    assert [(i.name, i.kind) for i in items] == [("README.md:1", "sh"), ("docs/a.md:4", "doc")]
    assert items[1].full == (("-m", "loopcoll", "topo", "show", "ring:4", "--json"),)
    assert "pip install" not in rg._shell_script("pip install -e . && loopcoll demo\n")


def test_timing_keys_are_ignored_and_figures_are_not() -> None:
    a = {"rows": [{"cold_s": 0.21, "peak_rss_MiB": 88, "speedup": 3.1, "algbw_GBps": 437.3, "status": "optimal"}]}
    b = json.loads(json.dumps(a))
    b["rows"][0].update(cold_s=0.5, peak_rss_MiB=91, speedup=1.2)
    assert rg.first_json_difference(rg.normalise_json(a), rg.normalise_json(b)) is None
    b["rows"][0]["algbw_GBps"] = 437.4
    assert rg.first_json_difference(rg.normalise_json(a), rg.normalise_json(b)) == "rows[0].algbw_GBps: 437.3 != 437.4"


def test_key_order_and_null_timings_count() -> None:
    assert rg.first_json_difference(rg.normalise_json({"a": 1, "b_s": 2}), rg.normalise_json({"b_s": 2, "a": 1}))
    assert rg.first_json_difference(rg.normalise_json({"warm_s": None}), rg.normalise_json({"warm_s": 0.1}))


def test_measured_benchmarks_compare_shape_only() -> None:
    a, b = {"rows": [{"native_GBps": 1.0, "correct": True}]}, {"rows": [{"native_GBps": 2.0, "correct": True}]}
    assert rg.first_json_difference(rg.normalise_json(a, 0), rg.normalise_json(b, 0)) is None
    b["rows"][0]["correct"] = False
    assert rg.first_json_difference(rg.normalise_json(a, 0), rg.normalise_json(b, 0)) is not None


def test_text_timings_tables_and_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rg, "_PATHS", ["/tmp/regen_trees_x/after"])
    assert rg.normalise_text("wrote /tmp/regen_trees_x/after/benchmarks/results/x.json in 1.5 s") == \
        "wrote <tree>/benchmarks/results/x.json in <t>"
    assert rg.normalise_text("+32.94s controller at 2026-11-29T16:57:25.403Z") == "<t> controller at <date>"
    md = "| topology | cold_s | algbw |\n|---|---|---|\n| ring:4 | 0.1 | 50 |\n"
    other = md.replace("0.1", "0.3")
    assert rg.normalise_text(md) == rg.normalise_text(other)
    assert rg.normalise_text(md) != rg.normalise_text(md.replace("| 50 |", "| 51 |"))
    # Documented command output: 3+ decimals are timings unless a bandwidth unit follows.
    assert rg.normalise_text("0.031 repair 390.667 GB/s 7.33x", doc=True) == "<t> repair 390.667 GB/s 7.33x"


def test_compare_runs_names_the_first_difference() -> None:
    item = rg.ITEMS[0]
    doc = b'{"rows": [{"N": 16, "median_s": 0.1}]}'
    same = rg.Run("ok", 1.0, {"tree/benchmarks/results/bounds.json": doc})
    slower = rg.Run("ok", 2.0, {"tree/benchmarks/results/bounds.json": doc.replace(b"0.1", b"0.9")})
    assert rg.compare_runs(item, same, slower) == "identical"
    other = rg.Run("ok", 1.0, {"tree/benchmarks/results/bounds.json": doc.replace(b"16", b"32")})
    assert rg.compare_runs(item, same, other).startswith("differs: tree/benchmarks/results/bounds.json: rows[0].N")
    assert rg.compare_runs(item, same, rg.Run("ok", 1.0, {})).startswith("differs: files written only on one side")
    assert rg.compare_runs(item, same, rg.Run("timeout after 5 s")).startswith("not compared")
    assert rg.compare_file("x.png", b"a", b"b") is None and rg.compare_file("x.xml", b"a", b"b") is not None


def test_select_and_write_guard() -> None:
    assert [i.name for i in rg.select(rg.ITEMS, "bounds,docs*")] == ["bounds", "docs/cli.md"]
    with pytest.raises(SystemExit, match="unknown item"):
        rg.select(rg.ITEMS, "nope")
    with pytest.raises(SystemExit):
        rg.main(["--write", "--only", "bounds"])  # --write with the quick variant is refused


def test_timing_lists_nan_and_number_types() -> None:
    assert rg.normalise_json({"times": [0.1, 0.2]}) == {"times": "<t>"}
    assert rg.first_json_difference(float("nan"), float("nan")) is None
    assert rg.first_json_difference({"chunks": 1}, {"chunks": 1.0}) is not None


def test_module_doctests() -> None:
    import doctest

    assert doctest.testmod(rg).failed == 0  # benchmarks/ is outside pytest's doctest paths


def test_spaced_headers_load_average_and_measured_markdown() -> None:
    md = "| topology | cold s | warm mode |\n|---|---|---|\n| hpn:1x2x8 | 0.018 | repair |\n"
    assert rg.compare_file("a.md", md.encode(), md.replace("0.018", "0.016").encode()) is None
    assert rg.compare_file("a.md", md.encode(), md.replace("repair", "state").encode()) is not None
    assert rg.normalise_text("load average 4.5 when") == "<t> when"
    measured = "| metric | median |\n|---|---|\n| ingest | 9405 |\n"
    other = measured.replace("9405", "11336").encode()
    assert rg.compare_file("d.md", measured.encode(), other) is not None
    assert rg.compare_file("d.md", measured.encode(), other, digits=0) is None
    assert rg.normalise_json({"stale_GBps": 119.40590877005936}, 12) == rg.normalise_json({"stale_GBps": 119.40590877005928}, 12)


def test_only_the_generated_part_of_a_hand_written_file_counts() -> None:
    readme = "# Benchmarks\n{prose}\n<!-- mccl_fig9:begin -->\n| a | b |\n|---|---|\n| 1 | {cell} |\n<!-- mccl_fig9:end -->\n"
    before = readme.format(prose="old", cell=2).encode()
    assert rg.compare_file("tree/benchmarks/README.md", before, readme.format(prose="new", cell=2).encode()) is None
    assert rg.compare_file("tree/benchmarks/README.md", before, readme.format(prose="old", cell=3).encode())


def test_known_nondeterminism_is_masked_and_named() -> None:
    item = next(i for i in rg.doc_items(ROOT) if "--nprocs 2 --daemon" in i.script)
    assert rg.RULE.masks(item)  # keyed by the block's text: an edit above it does not drop the mask
    line = 'counters: accepted {n}, bootstrap 1, samples_skipped {{"reduction_phase": {n}}}, syntheses {s}\n'
    runs = [rg.Run("ok", 1.0, {"stdout.txt": line.format(n=n, s=s).encode()}) for n, s in ((120, 1), (116, 1), (120, 2))]
    assert rg.compare_runs(item, runs[0], runs[1]).startswith("identical (masked known nondeterminism: ")
    assert rg.compare_runs(item, runs[0], runs[2]).startswith("differs")
    # since issue 32 the example's AllReduce samples feed the estimator: its measured link levels are masked
    est = ("link estimates (4 observed, 4 below nominal):\n  gpu0->nvs0.0  {x} of 2880.000 Gbit/s ({p}%), {n} observations\n"
           "  world/allreduce v1 ok: max delta {d} <= gamma 0.1; x_min {x} Gbit/s per chunk on gpu0->nvs0.0\n"
           "counters: groups {n}, syntheses {s}\n")
    runs = [rg.Run("ok", 1.0, {"stdout.txt": est.format(x=x, p=p, n=n, d=d, s=s).encode()})
            for x, p, n, d, s in (("1981.017", 69, 31, "0.0000", 1), ("2005.056", 70, 30, "0.0012", 1),
                                  ("2005.056", 70, 30, "0.0012", 2))]
    assert rg.compare_runs(item, runs[0], runs[1]).startswith("identical (masked known nondeterminism: ")
    assert rg.compare_runs(item, runs[0], runs[2]).startswith("differs")  # a second synthesis is not masked
    assert rg.compare_file("e.md", b"| a |\n|---|\n| 5 |\n", b"| a |\n|---|\n| -5 |\n", digits=0) is None

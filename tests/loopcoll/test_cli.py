"""The ``loopcoll`` CLI (loopcoll/cli.py, _cmd_topo.py, _cmd_bound.py), called as ``main([...])``.

Contract: results on stdout; every bad input exits 2 with exactly one ``loopcoll: error: ...``
line on stderr naming the culprit, and never a traceback.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from loopcoll.cli import build_parser
from synth import optimal_bound
from synth.topologies import Topology, load_topology, read_topology, topology_to_json, write_topology
from tests.loopcoll._run import run
from tests.strategies import BAD_TOPOLOGY_CASES, random_topologies

ROOT = Path(__file__).resolve().parents[2]


def assert_one_error_line(code: int, out: str, err: str, match: str) -> None:
    assert code == 2
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("loopcoll: error: ")
    assert re.search(match, lines[0]), lines[0]
    assert "Traceback" not in err


# -- help ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "usage"),
    [
        (["--help"], "usage: loopcoll "),
        (["-h"], "usage: loopcoll "),
        (["topo", "--help"], "usage: loopcoll topo "),
        (["topo", "show", "--help"], "usage: loopcoll topo show "),
        (["topo", "export", "--help"], "usage: loopcoll topo export "),
        (["bound", "--help"], "usage: loopcoll bound "),
    ],
)
def test_help_exits_zero_on_every_command(capsys, argv: list[str], usage: str) -> None:
    code, out, err = run(capsys, *argv)
    assert code == 0 and err == ""
    assert out.startswith(usage)


def test_help_mentions_named_specs_and_failures(capsys) -> None:
    _, out, _ = run(capsys, "bound", "--help")
    assert "hpn:SxHxN" in out and "fail3" in out and "alltoall" in out


def test_parser_has_topo_and_bound() -> None:
    parser = build_parser()
    assert "topo" in parser.format_help() and "bound" in parser.format_help()


# -- bound ---------------------------------------------------------------------------------------


BOUND_KEYS = {"collective", "topology", "nranks", "algbw_GBps", "busbw_GBps", "bottleneck", "status", "message",
              "routed_algbw_GBps", "routing_gap_pct"}


@pytest.mark.parametrize(
    ("collective", "spec", "algbw"),
    [
        ("allgather", "hpn:1x2x8", 437.0 + 1 / 3),
        ("alltoall", "hpn:1x2x8", 100.0),
        ("allgather", "ring:8", 8 * 100 / 7),
        ("allgather", "nvswitch:8", 8 * 360 / 7),
        ("reducescatter", "ring:4", 4 * 100 / 3),
        ("allreduce", "ring:4", 2 * 100 / 3),
    ],
)
def test_bound_json(capsys, collective: str, spec: str, algbw: float) -> None:
    code, out, err = run(capsys, "bound", collective, spec, "--json")
    assert code == 0 and err == ""
    assert out.count("\n") == 1
    doc = json.loads(out)
    assert set(doc) == BOUND_KEYS
    assert abs(doc["algbw_GBps"] - algbw) / algbw < 1e-6
    n = doc["nranks"]
    factor = 2 if collective == "allreduce" else 1
    assert doc["busbw_GBps"] == pytest.approx(doc["algbw_GBps"] * factor * (n - 1) / n)
    assert doc["collective"] == collective
    assert doc["status"] == "optimal" and doc["message"]
    topo = load_topology(spec)
    assert doc["topology"] == topo.name and n == topo.nranks
    assert doc["bottleneck"] and all(topo.has_link(a, b) for a, b in doc["bottleneck"])
    assert doc == json.loads(json.dumps(optimal_bound(collective, topo, routed=True).to_json_dict()))
    assert doc["routed_algbw_GBps"] == doc["algbw_GBps"] and doc["routing_gap_pct"] == 0.0  # one path per pair


def test_bound_json_keys_are_sorted(capsys) -> None:
    _, out, _ = run(capsys, "bound", "allgather", "ring:4", "--json")
    assert list(json.loads(out)) == sorted(BOUND_KEYS)


def test_bound_text_output(capsys) -> None:
    code, out, err = run(capsys, "bound", "allgather", "hpn:1x2x8")
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0] == "allgather on hpn-1x2x8 (16 ranks): algbw 437.333 GB/s, busbw 410.000 GB/s"
    assert lines[1] == "  bottleneck: nvs0.1->gpu9, tor0.1->gpu9"  # ties broken deterministically


def test_bound_text_truncates_long_bottleneck(capsys) -> None:
    _, out, _ = run(capsys, "bound", "allgather", "dgx-a100:4")
    # The host cut: 8 NIC links into the missing host; 12 or fewer are all shown.
    assert out.splitlines()[1].count("->") == 8 and "more)" not in out
    # AllReduce: the host cut in both directions, 16 links: 12 shown and a count of the rest.
    _, out, _ = run(capsys, "bound", "allreduce", "dgx-a100:4")
    shown = out.splitlines()[1]
    assert shown.startswith("  bottleneck: gpu0->tor0.0, gpu1->tor0.1, ")
    assert shown.count("->") == 12
    assert shown.endswith(", tor0.3->gpu3 (+4 more)")


def test_bound_with_failures(capsys) -> None:
    _, out, _ = run(capsys, "bound", "allgather", "hpn:1x2x8", "--fail", "fail1", "--fail", "fail2", "--json")
    doc = json.loads(out)
    assert doc["topology"] == "hpn-1x2x8+fail1+fail2"
    expected = optimal_bound("allgather", load_topology("hpn:1x2x8", ["fail1", "fail2"])).algbw_GBps
    assert doc["algbw_GBps"] == expected


def test_bound_reads_a_topology_file(capsys, tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    write_topology(load_topology("torus:3x3"), path)
    _, out, _ = run(capsys, "bound", "allgather", str(path), "--json")
    assert json.loads(out)["algbw_GBps"] == pytest.approx(225.0)


# -- topo show / export --------------------------------------------------------------------------


def test_topo_show_summary(capsys) -> None:
    code, out, err = run(capsys, "topo", "show", "hpn:1x2x8", "--fail", "fail2")
    assert code == 0 and err == ""
    topo = load_topology("hpn:1x2x8", ["fail2"])
    assert out.splitlines()[0] == f"topology hpn-1x2x8+fail2  (fingerprint {topo.fingerprint})"
    assert "16 GPUs, 10 switches, 64 links (64 up)" in out
    assert "hosts: 2" in out
    assert re.search(r"^\s+2880 Gbit/s\s+0\.025 us\s+x32$", out, re.M)
    assert re.search(r"^\s+50 Gbit/s\s+0\.5 us\s+x2$", out, re.M)


def test_topo_show_lists_down_links(capsys) -> None:
    _, out, _ = run(capsys, "topo", "show", "ring:4", "--fail", "scale:gpu0:gpu1:0")
    assert "(6 up)" in out
    assert out.splitlines()[-1] == "  down: gpu0->gpu1, gpu1->gpu0"


def test_topo_show_json_holds_the_file_format_and_the_baseline(capsys) -> None:
    _, out, _ = run(capsys, "topo", "show", "torus:2x3", "--json")
    doc = json.loads(out)
    topo = load_topology("torus:2x3")
    assert json.dumps(doc["topology"], indent=2, sort_keys=True) + "\n" == topology_to_json(topo)
    assert (doc["name"], doc["fingerprint"], doc["nranks"]) == (topo.name, topo.fingerprint, 6)
    assert doc["nccl_baseline"] == {"kind": "generic", "reason": "no network switches: the GPUs are joined by direct links"}


EXPORTS = [
    ("hpn:1x2x8", []),
    ("hpn:2x2x2", []),
    ("hpn:1x2x4,nic=200,nvswitch=3600", []),
    ("h200-proto", []),
    ("nvswitch:8", []),
    ("ring:5", []),
    ("torus:3x3", []),
    ("dgx-a100:2", []),
    ("dgx-h100:2", []),
    ("hpn:1x2x8", ["fail1"]),
    ("hpn:1x2x8", ["fail2"]),
    ("hpn:1x2x8", ["fail3"]),
    ("h200-proto", ["fail1", "fail2", "scale:gpu5:nvs0.1:0.5"]),
]


@pytest.mark.parametrize(("spec", "failures"), EXPORTS)
def test_export_rereads_equal_and_reexports_byte_identical(capsys, tmp_path: Path, spec: str, failures: list[str]) -> None:
    first = tmp_path / "first.json"
    fails = [arg for f in failures for arg in ("--fail", f)]
    code, out, err = run(capsys, "topo", "export", spec, *fails, "-o", str(first))
    assert code == 0 and err == ""
    topo = load_topology(spec, failures)
    assert out == f"wrote {first}: {topo.name}, {topo.nranks} GPUs, {len(topo.links)} links\n"
    assert read_topology(first) == topo
    second = tmp_path / "second.json"
    assert run(capsys, "topo", "export", str(first), "--output", str(second))[0] == 0
    assert second.read_bytes() == first.read_bytes()
    assert first.read_text(encoding="utf-8") == topology_to_json(topo)


@settings(max_examples=20, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(topo=random_topologies())
def test_export_of_random_topology_file_is_byte_identical(capsys, tmp_path_factory, topo: Topology) -> None:
    d = tmp_path_factory.mktemp("cli")
    src, dst = d / "in.json", d / "out.json"
    write_topology(topo, src)
    assert run(capsys, "topo", "export", str(src), "-o", str(dst))[0] == 0
    assert dst.read_bytes() == src.read_bytes()
    assert read_topology(dst) == topo


def test_export_overwrites_existing_file(capsys, tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text("old", encoding="utf-8")
    assert run(capsys, "topo", "export", "ring:3", "-o", str(path))[0] == 0
    assert read_topology(path) == load_topology("ring:3")


# -- bad input: exit 2, one line, the culprit named ------------------------------------------------


@pytest.mark.parametrize(("text", "match"), [pytest.param(t, m, id=c) for c, t, m in BAD_TOPOLOGY_CASES])
def test_bad_topology_file_exits_2_naming_culprit(capsys, tmp_path: Path, text: str, match: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(text, encoding="utf-8")
    assert_one_error_line(*run(capsys, "topo", "show", str(path)), match)
    assert_one_error_line(*run(capsys, "bound", "allgather", str(path), "--json"), match)
    out = tmp_path / "out.json"
    assert_one_error_line(*run(capsys, "topo", "export", str(path), "-o", str(out)), match)
    assert not out.exists()


BAD_ARGS = [
    # named specs
    (["topo", "show", "rnig:4"], r"unknown topology spec 'rnig:4' \(did you mean 'ring'\?\)"),
    (["bound", "allgather", "hpm:1x2x8"], r"unknown topology spec 'hpm:1x2x8' \(did you mean 'hpn'\?\)"),
    (["topo", "show", "hpn:1x2"], r"named spec 'hpn:1x2': expected 3 integer\(s\)"),
    (["topo", "show", "ring:1"], r"ring GPU count N must be an integer >= 2, got 1"),
    (["topo", "show", "torus:3"], r"named spec 'torus:3'"),
    (["topo", "show", "hpn:1x2x8,nicc=200"], r"unknown option 'nicc' \(did you mean 'nic'\?\)"),
    (["topo", "show", "hpn:1x2x8,nic=-1"], r"hpn option nic \(Gbit/s\) must be a finite number > 0, got -1\.0"),
    (["topo", "show", "ring:4,nic=1"], r"takes no options"),
    (["topo", "show", ""], r"named spec must be a non-empty string"),
    # failures
    (["topo", "show", "hpn:1x2x8", "--fail", "fail9"], r"unknown failure scenario 'fail9'"),
    (["topo", "show", "ring:4", "--fail", "fail2"], r"failure 'fail2' needs rank 0 \(gpu0\) .*'ring-4'"),
    (["bound", "allgather", "ring:4", "--fail", "fail1"], r"failure 'fail1' needs rank 0 \(gpu0\) .*NVSwitch"),
    (["topo", "show", "ring:4", "--fail", "scale:gpu0:gpu1:-2"], r"scale factor for gpu0->gpu1 .* got -2\.0"),
    (["topo", "show", "ring:4", "--fail", "scale:gpu0:gpu2:2"], r"has no link gpu0->gpu2"),
    (["topo", "show", "ring:4", "--fail", "scale:gpu0:gpu1"], r"expected scale:SRC:DST:F"),
    (["topo", "show", "ring:2", "--fail", "scale:gpu0:gpu1:0"], r"gpu 'gpu1' \(rank 1\).*cannot reach"),
    # files
    (["topo", "show", "does-not-exist.json"], r"does-not-exist\.json: cannot read topology file"),
    (["topo", "export", "ring:3", "-o", "/nonexistent-dir/x.json"], r"/nonexistent-dir/x\.json: cannot write"),
    # usage errors (argparse)
    (["bound", "allgathr", "ring:4"], r"bound: argument collective: invalid choice: 'allgathr'"),
    (["bound"], r"bound: the following arguments are required: collective, SPEC"),
    (["topo", "export", "ring:4"], r"topo export: the following arguments are required: -o/--output"),
    (["topo"], r"topo: the following arguments are required: ACTION"),
    (["topo", "draw", "ring:4"], r"topo: argument ACTION: invalid choice: 'draw'"),
    (["frobnicate"], r"argument COMMAND: invalid choice: 'frobnicate'"),
    ([], r"the following arguments are required: COMMAND"),
    (["bound", "allgather", "ring:4", "--jsn"], r"unrecognized arguments: --jsn"),
]


@pytest.mark.parametrize(("argv", "match"), BAD_ARGS)
def test_bad_arguments_exit_2_with_one_error_line(capsys, argv: list[str], match: str) -> None:
    assert_one_error_line(*run(capsys, *argv), match)


def test_single_gpu_file_bound_exits_2(capsys, tmp_path: Path) -> None:
    path = tmp_path / "solo.json"
    path.write_text('{"name": "solo", "nodes": [{"id": "g", "kind": "gpu", "rank": 0}], "links": []}')
    assert run(capsys, "topo", "show", str(path))[0] == 0
    for collective in ("allgather", "alltoall"):
        assert_one_error_line(*run(capsys, "bound", collective, str(path)), r"needs at least 2 GPUs; topology 'solo'")


def test_real_process_reports_bad_input_without_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"name": "x", "nodes": [], "links": [], "colour": 1}', encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "loopcoll", "bound", "alltoall", str(bad)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.splitlines() == [
        f"loopcoll: error: {bad}: unknown top-level key(s) ['colour'] (allowed: ['links', 'meta', 'name', 'nodes', 'routes'])"
    ]

"""The distribution (issue 28): the built wheel holds every package and data file, ``loopcoll --version``, and
the installed-wheel smoke (tests/smoke/cli_smoke.py, run by .ci/run) covers every CLI subcommand.

The wheel is built once per module from a clean copy of the tree (about 3 s); the rest is in-process.
"""

from __future__ import annotations

import argparse
import re
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import loopcoll
from loopcoll._cli_doc import _subparsers, commands
from loopcoll.cli import build_parser, main, package_version
from synth.routing import has_route_choice
from synth.topologies import read_topology
from tests.smoke.cli_smoke import ENTRIES, Entry, files, run_smoke, verdict
from tests.smoke.wheel_build import NOT_SHIPPED, REPO, SHIPPED, build_wheel, source_files


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[zipfile.ZipFile]:
    path = build_wheel(tmp_path_factory.mktemp("dist"))
    with zipfile.ZipFile(path) as zf:
        yield zf


def _dist_info(zf: zipfile.ZipFile, name: str) -> str:
    (member,) = [n for n in zf.namelist() if re.fullmatch(r"loopcoll-[^/]+\.dist-info/" + name, n)]
    return zf.read(member).decode("utf-8")


def test_wheel_holds_every_package_and_data_file(wheel: zipfile.ZipFile) -> None:
    # every module of every package (synth.routed, synth.latency, ...) and every data file read at run time
    missing = sorted(set(source_files()) - set(wheel.namelist()))
    assert not missing, (f"{len(missing)} file(s) under the shipped packages are not in the wheel (a directory "
                         f"without __init__.py, or a data file not in [tool.setuptools.package-data]): {missing[:20]}")


def test_wheel_ships_nothing_else(wheel: zipfile.ZipFile) -> None:
    tops = {n.split("/", 1)[0] for n in wheel.namelist()}
    assert {t for t in tops if not t.endswith(".dist-info")} == set(SHIPPED)


def test_every_top_level_package_is_shipped_or_excluded() -> None:
    # a new top-level package must be added to pyproject's packages.find include and to SHIPPED (or excluded)
    packages = {p.parent.name for p in REPO.glob("*/__init__.py")}
    assert packages - set(SHIPPED) - set(NOT_SHIPPED) == set()
    assert set(SHIPPED) <= packages


def test_wheel_metadata_version_and_console_script(wheel: zipfile.ZipFile) -> None:
    meta = _dist_info(wheel, "METADATA")
    version = re.search(r"^Version: (\S+)$", meta, re.MULTILINE)
    assert version is not None and version.group(1) == loopcoll.__version__
    assert re.search(r"^loopcoll = loopcoll\.cli:main$", _dist_info(wheel, "entry_points.txt"), re.MULTILINE)


def test_version_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    assert out == f"loopcoll {package_version()}\n"
    assert re.fullmatch(r"loopcoll \d+\.\d+\.\d+\S*\n", out)


def _path(parser: argparse.ArgumentParser, argv: tuple[str, ...]) -> tuple[str, ...]:
    """The subcommand path that ``argv`` runs (``("synth", "allgather")``)."""
    path = []
    for arg in argv:
        children = _subparsers(parser)
        if arg not in children:
            break
        parser = children[arg]
        path.append(arg)
    return tuple(path)


def test_every_subcommand_has_a_smoke_entry() -> None:
    parser = build_parser()
    covered = {_path(parser, e.argv) for e in ENTRIES if isinstance(e, Entry)}
    paths = [p for p, _ in commands(parser)]
    missing = [" ".join(p) for p in paths if not any(c[: len(p)] == p for c in covered)]
    assert not missing, f"subcommands without an entry in tests/smoke/cli_smoke.py ENTRIES: {missing}"


def test_smoke_entries_parse() -> None:
    # each entry's argv is accepted by the real parser (placeholders filled in), so CI fails on behaviour only
    for e in ENTRIES:
        if isinstance(e, Entry) and e.argv[0] != "--version":
            argv = [a.format(vectors="/v", probe="/p", address="127.0.0.1:1") for a in e.argv]
            try:
                build_parser().parse_args(argv)
            except SystemExit as exc:
                pytest.fail(f"smoke entry {argv} does not parse (exit {exc.code})")


def test_smoke_fabric_has_route_choice(tmp_path: Path) -> None:
    path = tmp_path / "leaf.json"
    path.write_text(files()["leaf.json"])
    assert has_route_choice(read_topology(path))


def test_smoke_verdict() -> None:
    e = Entry(("check", "x.xml"), r"valid \(allgather", rc=0)
    assert verdict(e, 0, "x.xml: valid (allgather, 4 ranks)") is None
    assert verdict(e, 1, "x.xml: valid (allgather, 4 ranks)") == "exit 1, expected 0"
    assert "does not match" in (verdict(e, 0, "x.xml: invalid") or "")


def test_smoke_runner_flags_source_imports_and_failures(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A "venv" whose loopcoll script runs the source tree: the preflight must refuse it, a wrong output fail.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    python = bin_dir / "python"  # a wrapper, not a symlink: a venv's python moved by a symlink loses its packages
    python.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    python.chmod(0o755)
    shim = bin_dir / "loopcoll"
    shim.write_text(f'#!/bin/sh\nPYTHONPATH={REPO} exec {sys.executable} -m loopcoll "$@"\n')
    shim.chmod(0o755)
    entries = (Entry(("--version",), r"^loopcoll \d"), Entry(("topo", "show", "ring:4"), r"no such text"))
    assert run_smoke(str(bin_dir / "python"), entries) == (1, 2)
    out = capsys.readouterr().out
    assert "FAIL" in out.splitlines()[0] and "imported from outside" in out
    assert "output does not match 'no such text'" in out

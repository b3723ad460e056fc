"""Static checks of the package layering and of the repository's self-containedness.

* Layers: ``loopcoll → runtime → msccl_xml → synth``. A package imports only packages below it
  (``synth`` none of the others); nothing but tests imports ``loopcoll``; ``benchmarks`` and
  ``examples`` stand on top of the libraries (not on the CLI package).
* No package, benchmark or example imports another top-level package's private module or name
  (a dotted component starting with ``_``); its own privates are fine.
* Imports are found with :mod:`ast` everywhere in a file, inside functions too, including
  ``importlib.import_module("...")`` with a literal name.
* README.md, docs/, every docstring and comment, and every string of the packages point to no document outside
  the repository (``spec/…``, ``reference/…``, ``../shared``).
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCANNED = ("synth", "msccl_xml", "mscclpp_plan", "runtime", "loopcoll", "benchmarks", "examples")

#: Which of our top-level packages each scanned directory may import.
ALLOWED: dict[str, frozenset[str]] = {
    "synth": frozenset({"synth"}),
    "msccl_xml": frozenset({"msccl_xml", "synth"}),
    "mscclpp_plan": frozenset({"mscclpp_plan", "msccl_xml", "synth"}),  # beside runtime: neither imports the other
    "runtime": frozenset({"runtime", "msccl_xml", "synth"}),
    "loopcoll": frozenset({"loopcoll", "runtime", "mscclpp_plan", "msccl_xml", "synth"}),
    "benchmarks": frozenset({"benchmarks", "runtime", "mscclpp_plan", "msccl_xml", "synth"}),
    "examples": frozenset({"examples", "runtime", "msccl_xml", "synth"}),
}
OURS = frozenset(ALLOWED)


@dataclass(frozen=True)
class Import:
    path: Path
    line: int
    module: str  # absolute dotted module
    names: tuple[str, ...]  # names imported from it ("from m import a, b"); () for "import m"


def python_files() -> list[Path]:
    return sorted(p for d in SCANNED if (ROOT / d).is_dir() for p in (ROOT / d).rglob("*.py"))


def _package_of(path: Path) -> list[str]:
    return list(path.relative_to(ROOT).with_suffix("").parts[:-1])


def imports_of(path: Path) -> list[Import]:
    """Every import statement (at any depth) and literal ``importlib.import_module`` call."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[Import] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [Import(path, node.lineno, alias.name, ()) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = _package_of(path)[: len(_package_of(path)) - (node.level - 1)]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            found.append(Import(path, node.lineno, module, tuple(a.name for a in node.names)))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, (ast.Attribute, ast.Name))
            and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id) == "import_module"
            and node.args
        ):
            arg = node.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                found.append(Import(path, node.lineno, arg.value, ()))
            elif isinstance(arg, ast.JoinedStr) and arg.values and isinstance(arg.values[0], ast.Constant):
                found.append(Import(path, node.lineno, str(arg.values[0].value).rstrip("."), ()))
    return found


def violations(path: Path) -> list[str]:
    home = path.relative_to(ROOT).parts[0]
    out: list[str] = []
    for imp in imports_of(path):
        top = imp.module.split(".")[0]
        if top not in OURS:
            continue
        where = f"{imp.path.relative_to(ROOT)}:{imp.line}"
        if top not in ALLOWED[home]:
            out.append(f"{where}: {home} must not import {imp.module} (layers: loopcoll → runtime → msccl_xml → synth)")
        if top != home:
            private = [p for p in imp.module.split(".") if p.startswith("_")]
            private += [n for n in imp.names if n.startswith("_")]
            if private:
                what = ", ".join(private)
                out.append(f"{where}: imports {imp.module} {list(imp.names) or ''} — private {what} of package {top}")
    return out


def test_the_scan_sees_every_package_and_nested_imports() -> None:
    files = python_files()
    assert {p.relative_to(ROOT).parts[0] for p in files} >= {"synth", "msccl_xml", "loopcoll", "benchmarks"}
    cli = imports_of(ROOT / "loopcoll" / "cli.py")
    assert any(i.module == "loopcoll._cmd_synth" for i in cli)  # imported inside main()'s finally


def test_checker_flags_what_it_should(tmp_path: Path) -> None:
    # The checker itself: a fake synth module importing upwards and a private module elsewhere.
    fake = ROOT / "synth" / "_layers_probe_tmp.py"
    fake.write_text(
        "def f():\n    import msccl_xml\n    from loopcoll import cli\n"
        "    from msccl_xml._matching import x\n    from . import _types\n",
        encoding="utf-8",
    )
    try:
        found = violations(fake)
    finally:
        fake.unlink()
    assert len([v for v in found if "must not import" in v]) == 3
    assert len([v for v in found if "private _matching" in v]) == 1
    assert not any("_types" in v for v in found)  # own package's private: fine


@pytest.mark.parametrize("path", python_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_respect_layers_and_privacy(path: Path) -> None:
    assert violations(path) == []


# -- pointers outside the repository -------------------------------------------------------------
_OUTSIDE = re.compile(
    r"(?<![\w.])(spec/|reference/|\.\./shared)"
    r"|(?<![\w/])shared/(spec|reference|msccl_examples|seeds)"
    r"|\b(reference|STYLE|ARCHITECTURE) ?(§|\.md)"
)


def _docstrings_and_comments(path: Path, *, strings: bool = False) -> list[tuple[int, str]]:
    """Comments and docstrings of a file; with ``strings``, every string literal (help texts)."""
    text = path.read_text(encoding="utf-8")
    out: list[tuple[int, str]] = []
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT:
            out.append((tok.start[0], tok.string))
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                line = node.body[0].lineno if node.body else 1
                out.append((line, doc))
        if strings and isinstance(node, ast.Constant) and isinstance(node.value, str):
            out.append((node.lineno, node.value))
    return out


def _all_python() -> list[Path]:
    return sorted(p for p in ROOT.rglob("*.py") if not any(part.startswith(".") for part in p.relative_to(ROOT).parts))


def test_no_pointer_outside_the_repository() -> None:
    bad: list[str] = []
    texts = [(ROOT / "README.md", 1, (ROOT / "README.md").read_text(encoding="utf-8"))]
    texts += [(p, 1, p.read_text(encoding="utf-8")) for p in sorted((ROOT / "docs").rglob("*.md"))]
    for p in _all_python():
        if p.resolve() == Path(__file__).resolve():
            continue  # this file's own patterns and examples
        in_package = p.relative_to(ROOT).parts[0] in SCANNED
        texts += [(p, line, s) for line, s in _docstrings_and_comments(p, strings=in_package)]
    for path, line, text in texts:
        for m in _OUTSIDE.finditer(text):
            bad.append(f"{path.relative_to(ROOT)}:{line + text[: m.start()].count(chr(10))}: {m.group(0)!r}")
    assert bad == []


def test_pointer_pattern_catches_the_forms_we_had() -> None:
    for text in ("see spec/topology.md", "reference/alltoall_cg.md §2", "in ../shared/msccl_examples",
                 "[x](../shared/spec/topology.md)", "shared/spec/", "(reference §4)", "STYLE §10", "ARCHITECTURE.md"):
        assert _OUTSIDE.search(text), text
    for text in ("docs/topology.md", "a named spec", "tests/vectors/msccl/MANIFEST.md", "MCCL §4.2", "a reference ring"):
        assert not _OUTSIDE.search(text), text

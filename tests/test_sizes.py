"""Size limits of the libraries (issue 29): no module over 500 lines, no long public function without a reason.

* A module's size is its file's physical lines.
* A function's size runs from its ``def`` line to its last line (:mod:`ast` ``lineno``..``end_lineno``);
  public means its name does not start with ``_`` (methods included, nested functions too).
* A public function over :data:`MAX_FUNCTION_LINES` lines passes only if a paragraph of its docstring starts
  with :data:`REASON_MARKER` (``Long because …``) and says why it is kept whole (say, a tight algorithmic
  kernel that splitting would make harder to follow).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LIBRARIES = ("synth", "msccl_xml", "mscclpp_plan", "runtime", "loopcoll")
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80
#: How a docstring paragraph that justifies a long public function starts.
REASON_MARKER = "Long because"

#: Findings that other engineers are removing while this test lands (issue 29, one owner each): to be burned
#: down, never extended. An entry that no longer occurs is simply ignored, so the merges stay independent.
PENDING: frozenset[str] = frozenset()


def library_files(root: Path = ROOT) -> list[Path]:
    return sorted(p for d in LIBRARIES if (root / d).is_dir() for p in (root / d).rglob("*.py"))


def has_reason(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Whether a paragraph of ``fn``'s docstring starts with :data:`REASON_MARKER`."""
    doc = ast.get_docstring(fn) or ""
    return any(par.strip().startswith(REASON_MARKER) for par in doc.split("\n\n"))


def size_findings(path: Path, root: Path = ROOT) -> list[str]:
    """``module: <path>`` if the file is over the limit; ``function: <path> <name>`` for each public function
    over the limit whose docstring gives no reason."""
    rel = path.relative_to(root).as_posix()
    text = path.read_text(encoding="utf-8")
    found = [f"module: {rel}"] if len(text.splitlines()) > MAX_MODULE_LINES else []
    for node in ast.walk(ast.parse(text, filename=str(path))):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or node.name.startswith("_"):
            continue
        length = (node.end_lineno or node.lineno) - node.lineno + 1
        if length > MAX_FUNCTION_LINES and not has_reason(node):
            found.append(f"function: {rel} {node.name}")
    return found


def test_the_scan_sees_every_library() -> None:
    assert {p.relative_to(ROOT).parts[0] for p in library_files()} == set(LIBRARIES)


def test_checker_flags_what_it_should(tmp_path: Path) -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))  # def line + 80 = 81 lines
    reason = f'    """Do it.\n\n    {REASON_MARKER} it is one kernel.\n    """\n'
    source = (
        f"def long_public():\n{body}\n"
        f"def _long_private():\n{body}\n"
        f"def long_with_reason():\n{reason}{body}\n"
        f"class C:\n    def method(self):\n{''.join('    ' + line for line in body.splitlines(True))}"
    )
    lib = tmp_path / "synth"
    lib.mkdir()
    (lib / "m.py").write_text(source, encoding="utf-8")
    (lib / "big.py").write_text("x = 1\n" * MAX_MODULE_LINES, encoding="utf-8")  # exactly at the limit: fine
    assert size_findings(lib / "big.py", tmp_path) == []
    assert sorted(size_findings(lib / "m.py", tmp_path)) == [
        "function: synth/m.py long_public", "function: synth/m.py method",
    ]
    (lib / "big.py").write_text("x = 1\n" * (MAX_MODULE_LINES + 1), encoding="utf-8")
    assert size_findings(lib / "big.py", tmp_path) == ["module: synth/big.py"]


@pytest.mark.parametrize("path", library_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_module_and_public_function_sizes(path: Path) -> None:
    new = [f for f in size_findings(path) if f not in PENDING]
    assert new == [], (
        f"split the module by responsibility (≤ {MAX_MODULE_LINES} lines) or the function into named helpers "
        f"(≤ {MAX_FUNCTION_LINES} lines), or give a docstring paragraph starting {REASON_MARKER!r}"
    )


def test_pending_entries_are_well_formed() -> None:
    assert all(p.split(": ", 1)[0] in {"module", "function"} for p in PENDING)

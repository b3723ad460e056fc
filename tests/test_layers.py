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

import networkx as nx
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
    local: bool = False  # inside a function (a lazy import)
    prefix: bool = False  # ``import_module(f"pkg.{name}")``: any module under ``module``


def python_files() -> list[Path]:
    return sorted(p for d in SCANNED if (ROOT / d).is_dir() for p in (ROOT / d).rglob("*.py"))


def _package_of(path: Path) -> list[str]:
    return list(path.relative_to(ROOT).with_suffix("").parts[:-1])


def _in_functions(tree: ast.AST) -> set[int]:
    """``id`` of every node nested in a function body (at any depth)."""
    inside: set[int] = set()
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            inside.update(id(node) for node in ast.walk(fn) if node is not fn)
    return inside


def imports_of(path: Path) -> list[Import]:
    """Every import statement (at any depth, ``TYPE_CHECKING`` blocks included) and literal
    ``importlib.import_module`` call; ``local`` marks those inside a function."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    nested = _in_functions(tree)
    found: list[Import] = []
    for node in ast.walk(tree):
        local = id(node) in nested
        if isinstance(node, ast.Import):
            found += [Import(path, node.lineno, alias.name, (), local) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = _package_of(path)[: len(_package_of(path)) - (node.level - 1)]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            found.append(Import(path, node.lineno, module, tuple(a.name for a in node.names), local))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, (ast.Attribute, ast.Name))
            and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id) == "import_module"
            and node.args
        ):
            arg = node.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                found.append(Import(path, node.lineno, arg.value, (), local))
            elif isinstance(arg, ast.JoinedStr) and arg.values and isinstance(arg.values[0], ast.Constant):
                head = str(arg.values[0].value)
                names = _loop_values(tree, arg.values[1]) if len(arg.values) == 2 else None
                if names is None:  # unknown names: any module under the prefix
                    found.append(Import(path, node.lineno, head.rstrip("."), (), local, prefix=True))
                else:
                    found += [Import(path, node.lineno, head + n, (), local) for n in names]
    return found


def _loop_values(tree: ast.Module, value: ast.expr) -> tuple[str, ...] | None:
    """For ``f"pkg.{name}"`` inside ``for name in NAMES`` with ``NAMES`` a module-level tuple of strings:
    those strings (``loopcoll.cli`` imports its command modules so); otherwise None."""
    if not (isinstance(value, ast.FormattedValue) and isinstance(value.value, ast.Name)):
        return None
    consts: dict[str, tuple[str, ...]] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                v = ast.literal_eval(node.value)
            except ValueError:
                continue
            if isinstance(v, tuple) and all(isinstance(x, str) for x in v):
                consts[node.targets[0].id] = v
    for node in ast.walk(tree):
        if (isinstance(node, ast.For) and isinstance(node.target, ast.Name) and node.target.id == value.value.id
                and isinstance(node.iter, ast.Name) and node.iter.id in consts):
            return consts[node.iter.id]
    return None


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
    assert any(i.module == "loopcoll._cmd_synth" for i in cli)  # import_module(f"loopcoll.{name}") over _COMMANDS
    daemon = imports_of(ROOT / "loopcoll" / "_cmd_daemon.py")
    assert any(i.module == "runtime.service.daemon" and i.local for i in daemon)  # inside the handler
    assert not any(i.local for i in daemon if i.module == "synth.errors")


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


# -- the module graph: wings, cycles, lazy imports, privates ----------------------------------------
#: The libraries whose function-local imports are checked (benchmarks and examples are scripts that nothing
#: imports: their lazy imports keep ``--help`` fast and spawned workers self-contained).
LIBRARIES = ("synth", "msccl_xml", "mscclpp_plan", "runtime", "loopcoll")

#: The wings of ``runtime`` and which sibling wings each may import (what its ``__init__`` docstring says).
#: ``errors`` is the runtime's one shared module; ``runtime/__init__.py`` (the facade) may import any wing.
WINGS: dict[str, frozenset[str]] = {
    "errors": frozenset(),
    "formats": frozenset({"errors"}),
    "contention": frozenset({"errors"}),
    "loop": frozenset({"formats", "contention", "errors"}),
    "service": frozenset({"formats", "errors"}),
    "executor": frozenset({"formats", "errors"}),
    "observe": frozenset({"formats", "errors"}),
    "scenarios": frozenset({"loop", "service", "executor", "formats", "errors"}),
}
#: Old import paths kept as thin re-exports (docs and examples showed ``from runtime.client import …`` and
#: ``from runtime.live import …``): each may import only the wing its module moved to.
SHIMS: dict[str, str] = {"runtime.client": "service", "runtime.live": "scenarios"}

#: Function-local imports of our own modules that are deliberate: (importer prefix, imported prefix) -> why.
#: Every ``loopcoll`` command module is imported when the parser is built, so what a command imports at
#: module level loads on every ``loopcoll`` start; these keep heavy modules off that path.
LAZY_IMPORTS: dict[tuple[str, str], str] = {
    ("loopcoll", "runtime"): "the runtime half (~0.4 s, torch/DuckDB behind it): only daemon, replay, demo "
                             "--live, run-check, inspect and synth --store load it",
    ("loopcoll", "synth.simulation"): "the flow simulator and cost models: only simulate, demo, calibrate, "
                                      "synth --sizes",
    ("loopcoll", "synth.latency"): "depth-bounded synthesis (~0.26 s): only synth --sizes/--max-depth, "
                                   "simulate --kinds pareto",
    ("loopcoll", "loopcoll._latency"): "imports synth.latency at module level (see above)",
    ("loopcoll", "synth.alltoall_cg"): "AllToAll column generation (~0.3 s): only alltoallv bound",
    ("loopcoll", "mscclpp_plan"): "MSCCL++ plans (~0.1 s): only -o *.json and check of a plan",
    ("loopcoll.cli", "loopcoll"): "build_parser imports the command modules by name (_COMMANDS), so that a "
                                  "broken one fails naming itself",
    ("synth.solvers", "synth.solvers.ortools"): "OR-Tools (~0.35 s) loads only for callers who ask for that backend",
    # ``import synth`` (~0.4 s) loads synthesize() and optimal_bound() but not the synthesizer families
    # (forestcoll_warm ~0.02 s, alltoall_cg ~0.05 s, routed ~0.015 s after it: ~20% more): each loads on the
    # first call that needs it, so a bound, a named topology or an XML export pays for none of them.
    ("synth.synthesis", "synth.forestcoll_warm"): "a synthesizer family: loads on the first synthesize() of it",
    ("synth.synthesis", "synth.alltoall_cg"): "a synthesizer family: loads on the first synthesize() of it",
    ("synth.synthesis", "synth.routed"): "a synthesizer family: loads on the first synthesize() of it",
    ("synth.bounds", "synth.alltoall_cg"): "column generation: only AllToAll bounds beyond COMPACT_LP_MAX_RANKS",
    ("synth.bounds", "synth.routed"): "the routed LPs: only routed bounds on fabrics with route choice",
}

def module_name(path: Path, root: Path = ROOT) -> str:
    """``runtime/loop/manager.py`` -> ``runtime.loop.manager``; a package's ``__init__.py`` -> the package."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules(packages: tuple[str, ...], root: Path) -> dict[str, Path]:
    return {module_name(p, root): p for d in packages if (root / d).is_dir() for p in sorted((root / d).rglob("*.py"))}


def _targets(imp: Import, modules: dict[str, Path]) -> list[str]:
    """The modules of ours an import loads (``from pkg import sub`` is the submodule ``pkg.sub``)."""
    if imp.prefix:
        return sorted(m for m in modules if m.startswith(imp.module + "."))
    wanted = [f"{imp.module}.{n}" for n in imp.names if f"{imp.module}.{n}" in modules] or [imp.module]
    if len(wanted) < len(imp.names) and imp.module not in wanted:
        wanted.append(imp.module)  # some names are attributes of the module itself
    out = []
    for w in wanted:
        while w and w not in modules:
            w = w.rpartition(".")[0]
        if w:
            out.append(w)
    return out


def module_graph(packages: tuple[str, ...] = SCANNED, root: Path = ROOT) -> nx.DiGraph:
    """Importer -> imported module, for every import at any depth; each edge keeps its imports."""
    modules = _modules(packages, root)
    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    for name, path in modules.items():
        for imp in imports_of(path):
            for target in _targets(imp, modules):
                if target != name:
                    graph.add_edge(name, target)
                    graph.edges[name, target].setdefault("imports", []).append(imp)
    return graph


def cycle_findings(graph: nx.DiGraph) -> set[str]:
    """``cycle: a -> b -> a`` for every simple cycle, starting at its smallest module."""
    out = set()
    for cycle in nx.simple_cycles(graph):
        i = cycle.index(min(cycle))
        ring = cycle[i:] + cycle[:i]
        out.add("cycle: " + " -> ".join([*ring, ring[0]]))
    return out


def _under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def lazy_findings(graph: nx.DiGraph, libraries: tuple[str, ...] = LIBRARIES) -> set[str]:
    """``lazy: a imports b`` for a function-local import of our module b in a library module a."""
    out = set()
    for a, b, data in graph.edges(data=True):
        if a.split(".")[0] not in libraries or not any(i.local for i in data["imports"]):
            continue
        if not any(_under(a, pa) and _under(b, pb) for pa, pb in LAZY_IMPORTS):
            out.add(f"lazy: {a} imports {b}")
    return out


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_findings(packages: tuple[str, ...] = SCANNED, root: Path = ROOT) -> set[str]:
    """``private: a imports x`` where x is a private module or name (``_x``, not dunder) from outside the
    package that holds it: a sibling module's private name is fine, another subpackage's is not."""
    modules = _modules(packages, root)
    out = set()
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for imp in imports_of(path):
            if imp.module.split(".")[0] not in OURS:
                continue
            owners = []  # (package holding the private thing, what is imported)
            parts = imp.module.split(".")
            cut = next((i for i, p in enumerate(parts) if _private(p)), None)
            if cut is not None:
                owners.append((".".join(parts[:cut]), imp.module))
            for n in filter(_private, imp.names):
                if f"{imp.module}.{n}" in modules:  # a private submodule
                    owners.append((imp.module, f"{imp.module}.{n}"))
                else:  # a private name of a module: it belongs to the module's package
                    is_package = imp.module in modules and modules[imp.module].name == "__init__.py"
                    owners.append((imp.module if is_package else imp.module.rpartition(".")[0], f"{imp.module}.{n}"))
            out.update(f"private: {name} imports {what}" for owner, what in owners if not _under(package, owner))
    return out


def wing_of(module: str) -> str | None:
    """The runtime wing a module belongs to (``runtime.loop.manager`` -> ``loop``); ``runtime`` -> ``facade``."""
    parts = module.split(".")
    if module == "runtime":
        return "facade"
    if module in SHIMS:
        return "shim"
    if len(parts) >= 2 and parts[1] in WINGS:
        return parts[1]
    return None


def test_every_runtime_module_sits_in_a_wing() -> None:
    loose = sorted(m for m in _modules(("runtime",), ROOT) if wing_of(m) is None)
    assert loose == [], f"runtime modules outside the wings {sorted(WINGS)}: {loose}"


def test_runtime_wings_import_only_the_wings_they_may() -> None:
    graph = module_graph(("runtime",))
    bad = []
    for a, b in graph.edges:
        wa, wb = wing_of(a), wing_of(b)
        if wa == "facade" or wa == wb:
            continue
        allowed = {SHIMS[a]} if wa == "shim" else WINGS.get(wa or "", frozenset())
        if wb not in allowed:
            bad.append(f"{a} ({wa}) imports {b} ({wb}); {wa} may import {sorted(allowed)}")
    assert bad == []


@pytest.mark.parametrize("wing", sorted(set(WINGS) - {"errors"}))
def test_each_wing_docstring_says_what_it_may_import(wing: str) -> None:
    doc = ast.get_docstring(ast.parse((ROOT / "runtime" / wing / "__init__.py").read_text(encoding="utf-8"))) or ""
    missing = [w for w in sorted(WINGS[wing]) if f"runtime.{w}" not in doc]
    assert doc and missing == [], f"runtime/{wing}/__init__.py's docstring does not name {missing}"


def test_no_import_cycles() -> None:
    found = sorted(cycle_findings(module_graph()))
    assert found == [], "import cycles (imports inside functions count): put the shared piece below both"


def test_no_function_local_imports_of_our_modules() -> None:
    found = sorted(lazy_findings(module_graph()))
    assert found == [], "import at module level, or add to LAZY_IMPORTS with the reason"


def test_no_private_imports_across_subpackages() -> None:
    found = sorted(private_findings())
    assert found == [], "make the piece public (its module and name without _) or move it into the importer's package"


def test_every_lazy_import_reason_is_still_used() -> None:
    # An entry whose import became module-level (or went away) would silently allow a new lazy one.
    graph = module_graph()
    local = [(a, b) for a, b, data in graph.edges(data=True) if any(i.local for i in data["imports"])]
    unused = [pair for pair in LAZY_IMPORTS if not any(_under(a, pair[0]) and _under(b, pair[1]) for a, b in local)]
    assert unused == [], f"LAZY_IMPORTS entries no import needs any more: {unused}"


def test_every_subpackage_says_what_it_owns() -> None:
    # Every package __init__ of the libraries has a docstring (for synth's wings: what it owns and may import).
    bare = [str(p.relative_to(ROOT)) for d in LIBRARIES for p in sorted((ROOT / d).rglob("__init__.py"))
            if not ast.get_docstring(ast.parse(p.read_text(encoding="utf-8")))]
    assert bare == []


def test_graph_checks_flag_what_they_should(tmp_path: Path) -> None:
    # A tiny tree: a cycle hidden by a function-local import, a TYPE_CHECKING cycle, privates across packages.
    files = {
        "runtime/__init__.py": "",
        "runtime/loop/__init__.py": "",
        "runtime/loop/a.py": "from runtime.loop import b\nfrom runtime.loop.b import _helper\n",
        "runtime/loop/b.py": "def f():\n    from runtime.loop.a import x\n",
        "runtime/service/__init__.py": "",
        "runtime/service/_conn.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                    "    from runtime.service.d import _D\n",
        "runtime/service/d.py": "from runtime.service._conn import C\nfrom runtime.loop.b import _helper\n"
                                "from runtime.loop import __doc__\n",
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text, encoding="utf-8")
    graph = module_graph(("runtime",), tmp_path)
    assert cycle_findings(graph) == {"cycle: runtime.loop.a -> runtime.loop.b -> runtime.loop.a",
                                     "cycle: runtime.service._conn -> runtime.service.d -> runtime.service._conn"}
    assert lazy_findings(graph) == {"lazy: runtime.loop.b imports runtime.loop.a"}
    # a sibling's private name and the own package's private module are fine; another subpackage's are not
    assert private_findings(("runtime",), tmp_path) == {"private: runtime.service.d imports runtime.loop.b._helper"}


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

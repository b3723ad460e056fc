"""Build loopcoll's wheel from a clean copy of the source tree, for the packaging test and ``.ci/run``.

The copy matters: setuptools reuses ``build/lib`` across builds, so a wheel built in place can still hold a
package that the current configuration no longer ships, and a check on it would pass where a fresh
machine's install is broken. Only the standard library is used here, so CI can run this file with any
Python that has pip and setuptools: ``python tests/smoke/wheel_build.py OUT_DIR`` prints the wheel's path.

Examples
--------
>>> SHIPPED
('loopcoll', 'synth', 'msccl_xml', 'mscclpp_plan', 'runtime')
>>> "synth/simulation/profiles/h200.json" in source_files() and "synth/routed/__init__.py" in source_files()
True
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = ["NOT_SHIPPED", "REPO", "SHIPPED", "build_wheel", "source_files"]

#: The repository root.
REPO = Path(__file__).resolve().parents[2]
#: The top-level packages the distribution ships (pyproject.toml's ``[tool.setuptools.packages.find]``).
SHIPPED = ("loopcoll", "synth", "msccl_xml", "mscclpp_plan", "runtime")
#: Top-level directories of the repository that are deliberately not shipped.
NOT_SHIPPED = ("tests", "benchmarks", "examples")
_ROOT_FILES = ("pyproject.toml", "README.md")
_JUNK = ("__pycache__", "*.pyc", "*.egg-info", "build", "dist")
#: Seconds a wheel build may take before it is ended.
BUILD_TIMEOUT_S = 300.0


def _is_junk(path: Path) -> bool:
    return any(part == "__pycache__" or part.endswith((".pyc", ".egg-info")) for part in path.parts)


def source_files(root: Path = REPO) -> list[str]:
    """Every file under the shipped packages, as its path inside the wheel (sorted): what the wheel must hold.

    Python modules and data files alike (``py.typed``, cost profiles, ...): a file under a shipped package
    is there because the code imports or reads it.
    """
    out = []
    for top in SHIPPED:
        for p in (root / top).rglob("*"):
            rel = p.relative_to(root)
            if p.is_file() and not _is_junk(rel):
                out.append(rel.as_posix())
    return sorted(out)


def build_wheel(out_dir: Path, root: Path = REPO, python: str = sys.executable) -> Path:
    """Build the wheel of the tree at ``root`` into ``out_dir`` from a fresh copy; returns the wheel's path.

    Uses ``python``'s own setuptools (``pip wheel --no-build-isolation``: nothing is downloaded).
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    before = set(out_dir.glob("loopcoll-*.whl"))
    with tempfile.TemporaryDirectory(prefix="loopcoll-wheel-src-") as tmp:
        src = Path(tmp) / "src"
        src.mkdir()
        for name in _ROOT_FILES:
            shutil.copy2(root / name, src / name)
        for top in (*SHIPPED, *NOT_SHIPPED):
            if (root / top).is_dir():
                shutil.copytree(root / top, src / top, ignore=shutil.ignore_patterns(*_JUNK))
        cmd = [python, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out_dir), str(src)]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
        if done.returncode != 0:
            raise RuntimeError(f"wheel build failed (exit {done.returncode}): {(done.stdout + done.stderr)[-2000:]}")
    new = sorted(set(out_dir.glob("loopcoll-*.whl")) - before) or sorted(out_dir.glob("loopcoll-*.whl"))
    if len(new) != 1:
        raise RuntimeError(f"expected one loopcoll wheel in {out_dir}, found {[p.name for p in new]}")
    return new[0]


def main(argv: list[str]) -> int:
    """``wheel_build.py OUT_DIR``: build the wheel into OUT_DIR and print its path."""
    if len(argv) != 1:
        print("usage: python tests/smoke/wheel_build.py OUT_DIR", file=sys.stderr)
        return 2
    print(build_wheel(Path(argv[0]).resolve()))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))

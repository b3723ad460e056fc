"""The ``loopcoll`` command: a thin layer that parses, calls the library and prints.

Every subcommand lives in a ``_cmd_*`` module exposing ``register(subparsers)``; its handler
returns the exit code. A :class:`~synth.errors.LoopcollError` becomes one
``loopcoll: error: ...`` line on stderr and exit code 2; anything else is a bug and keeps its
traceback. A :class:`~synth.errors.TopologyWarning` (a topology that is valid but probably
not what was meant) prints one ``loopcoll: warning: ...`` line on stderr, none with ``--quiet``.
A reader that closes the pipe early (``loopcoll inspect --json | head``) ends the
command quietly with exit code 141 (128 + SIGPIPE, as a shell reports a command killed by it).

Examples
--------
>>> main(["bound", "allgather", "ring:4"])  # doctest: +NORMALIZE_WHITESPACE
allgather on ring-4 (4 ranks): algbw 133.333 GB/s, busbw 100.000 GB/s
  bottleneck: gpu0->gpu3, gpu2->gpu3
  free-routing optimum 133.333 GB/s, routed optimum 133.333 GB/s (every hop on its pair's route): the executor loses 0.00%
0
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
import warnings
from collections.abc import Callable, Sequence

from loopcoll import __version__
from loopcoll._log import reset_progress
from synth.errors import LoopcollError, TopologyWarning

__all__ = ["build_parser", "main", "package_version"]

_COMMANDS = ("_cmd_topo", "_cmd_bound", "_cmd_synth", "_cmd_check", "_cmd_simulate", "_cmd_demo", "_cmd_daemon",
             "_cmd_inspect", "_cmd_calibrate", "_cmd_run_check", "_cmd_replay",
             "_cmd_whatif")


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors as one ``loopcoll: error: ...`` line and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        # Same prefix as a LoopcollError, so scripts need to match one form; the subcommand is kept.
        where = self.prog.partition(" ")[2]
        self.exit(2, f"loopcoll: error: {one_line(where + ': ' if where else '')}{one_line(message)}\n")


#: Longest error message the CLI prints (one line; the rest is cut with a note).
MAX_ERROR_CHARS = 1000


def one_line(message: str) -> str:
    """``message`` on one line, at most :data:`MAX_ERROR_CHARS` characters.

    >>> one_line("a" + chr(10) + "b"), len(one_line("x" * 5000)) <= MAX_ERROR_CHARS + 30
    ('a b', True)
    """
    flat = " ".join(str(message).splitlines())
    if len(flat) <= MAX_ERROR_CHARS:
        return flat
    return f"{flat[:MAX_ERROR_CHARS]}… ({len(flat)} characters)"


class _Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C so that every cleanup (temporary files) runs."""


def _on_sigterm(signum: int, frame: object) -> None:
    raise _Terminated()


def package_version(distribution: str = "loopcoll") -> str:
    """The installed ``distribution``'s version; ``loopcoll.__version__`` when it is not installed (a source tree).

    ``loopcoll.__version__`` is the one place the version is written: pyproject.toml reads it from there.

    >>> import loopcoll
    >>> package_version("no-such-distribution") == loopcoll.__version__
    True
    """
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return __version__


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser (every installed subcommand)."""
    parser = _Parser(
        prog="loopcoll",
        description="Closed-loop collective synthesis: optimal bounds, schedules and MSCCL XML for "
        "healthy and degraded GPU fabrics.",
    )
    parser.add_argument("--version", action="version", version=f"loopcoll {package_version()}",
                        help="print 'loopcoll X.Y.Z' and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for name in _COMMANDS:
        # A subcommand that cannot be imported is a broken install: fail loudly, never hide it.
        # (Subcommands that need optional packages such as torch import them inside their handlers.)
        try:
            module = importlib.import_module(f"loopcoll.{name}")
        except ImportError as exc:
            raise ImportError(f"loopcoll: subcommand module loopcoll.{name} cannot be imported: {exc}") from exc
        module.register(sub)
    return parser


#: Exit code when stdout's reader went away (128 + SIGPIPE, what a shell shows for ``yes | head``).
EXIT_BROKEN_PIPE = 141


def _silence_stdout() -> None:
    """Point stdout's file descriptor at the null device, so the interpreter's final flush of what
    is still buffered cannot raise a second BrokenPipeError (the recipe of Python's ``signal`` docs)."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # an in-process capture without a descriptor
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


def _warning_printer(fallback: Callable[..., None]) -> Callable[..., None]:
    """A ``warnings.showwarning`` printing loopcoll's own warnings as ``loopcoll: warning: ...`` and
    handing every other warning to ``fallback``."""

    def show(message: Warning | str, category: type[Warning], filename: str, lineno: int,
             file: object = None, line: str | None = None) -> None:
        if issubclass(category, TopologyWarning):
            print(f"loopcoll: warning: {one_line(str(message))}", file=sys.stderr)
        else:
            fallback(message, category, filename, lineno, file, line)

    return show


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI on ``argv`` (default ``sys.argv[1:]``); returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    previous = signal.getsignal(signal.SIGTERM)
    try:
        signal.signal(signal.SIGTERM, _on_sigterm)
    except ValueError:  # not the main thread (an embedding application): leave SIGTERM alone
        previous = None
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _warning_printer(warnings.showwarning)
            warnings.simplefilter("ignore" if getattr(args, "quiet", False) else "default", TopologyWarning)
            code = int(args.func(args))
        sys.stdout.flush()  # inside the try: a reader gone by now is a broken pipe like any other
        return code
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except LoopcollError as exc:
        print(f"loopcoll: error: {one_line(str(exc))}", file=sys.stderr)
        return 2
    except MemoryError:
        print("loopcoll: error: out of memory (see docs/limits.md)", file=sys.stderr)
        return 2
    except _Terminated:
        print("loopcoll: terminated", file=sys.stderr)
        return 143
    except KeyboardInterrupt:
        print("loopcoll: interrupted", file=sys.stderr)
        return 130
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        reset_progress()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

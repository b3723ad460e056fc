"""Check an MSCCL program against a runtime's rules and its collective's postcondition.

:func:`check` runs, in order: the structural and limit rules, static
FIFO matching of sends and receives per (sender, receiver, channel) with equal ``cnt``, and a
symbolic execution (:mod:`msccl_xml._simulate`) that finds deadlocks, data races between
threadblocks, out-of-bounds accesses and postcondition failures of allgather, reducescatter,
alltoall and allreduce, in every mode the header enables (in place, out of place).

Examples
--------
>>> from msccl_xml.program import BufferKind, Gpu, Program, Protocol, Step, StepType, Threadblock
>>> o = BufferKind.OUTPUT
>>> def tb(send, recv, t, off):
...     return Threadblock(0, send, recv, 0, (Step(0, t, o, off, o, off, 1),))
>>> p = Program(name="ag2", proto=Protocol.SIMPLE, nchannels=1, nchunksperloop=2, ngpus=2,
...             coll="allgather", inplace=1, outofplace=0, min_bytes=0, max_bytes=0,
...             gpus=(Gpu(0, 0, 2, 0, (tb(1, -1, StepType.SEND, 0), Threadblock(1, -1, 1, 0,
...                   (Step(0, StepType.RECV, o, 1, o, 1, 1),)))),
...                   Gpu(1, 0, 2, 0, (tb(0, -1, StepType.SEND, 1), Threadblock(1, -1, 0, 0,
...                   (Step(0, StepType.RECV, o, 0, o, 0, 1),))))))
>>> check(p).valid
True
>>> broken = check(p, runtime="rccl")  # same rules there
>>> broken.errors
()
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from enum import Enum

from synth.errors import XmlError, expect_type

from ._layout import POSTCONDITION_COLLS, canonical_coll, layout_for
from ._matching import match_problems
from ._simulate import simulate
from ._structure import structural_problems
from .limits import runtime_limits, size_problems
from .lint import lint_text
from .parser import parse, read
from .program import Program

__all__ = ["CheckResult", "CheckStatus", "check", "check_file", "check_text"]

_MAX_ERRORS = 100


class CheckStatus(Enum):
    """Closed set of verdicts."""

    VALID = "valid"  # no rule broken, the postcondition holds in every enabled mode
    INVALID = "invalid"  # at least one error


@dataclass(frozen=True, slots=True)
class CheckResult:
    """The verdict on one program.

    ``status``, ``message``, ``success`` and ``valid`` are derived from ``errors``, so they cannot
    disagree with it.

    Attributes
    ----------
    errors
        Violations, each naming its place (``gpu G tb T step S: ...``), at most 100 plus a count.
    warnings
        Legal but suspicious constructs (unused ``hasdep``, more threadblocks than SMs, ...).
    collective
        The program's ``coll`` as written.
    nranks
        The program's ``ngpus``.
    runtime
        The runtime whose rules were applied.
    """

    errors: tuple[str, ...]
    warnings: tuple[str, ...]
    collective: str
    nranks: int
    runtime: str

    @property
    def status(self) -> CheckStatus:
        """``VALID`` when ``errors`` is empty, else ``INVALID``."""
        return CheckStatus.INVALID if self.errors else CheckStatus.VALID

    @property
    def success(self) -> bool:
        """True when the program is valid."""
        return not self.errors

    @property
    def valid(self) -> bool:
        """Same as :attr:`success` (the checker's own word)."""
        return not self.errors

    @property
    def message(self) -> str:
        """One line: the verdict, and the first error when there is one."""
        return verdict_message(f"{self.collective} on {self.nranks} ranks for {self.runtime}",
                               self.errors, self.warnings)


def verdict_message(where: str, errors: tuple[str, ...], warnings: tuple[str, ...]) -> str:
    """A checker's one-line verdict on ``where``: valid (with a warning count) or the first error.

    >>> verdict_message("plan x", (), ("w",))
    'valid plan x (1 warnings)'
    >>> verdict_message("plan x", ("e1", "e2"), ())
    'invalid plan x: 2 error(s); first: e1'
    """
    expect_type(where, str, "where", XmlError)
    expect_type(errors, (tuple, list), "errors", XmlError)
    expect_type(warnings, (tuple, list), "warnings", XmlError)
    if not errors:
        return f"valid {where}" + (f" ({len(warnings)} warnings)" if warnings else "")
    return f"invalid {where}: {len(errors)} error(s); first: {errors[0]}"


def check(
    program: Program,
    *,
    runtime: str = "msccl-executor-nccl",
    fifo_depth: int | None = None,
) -> CheckResult:
    """Check ``program`` for ``runtime``.

    Parameters
    ----------
    program
        The program.
    runtime
        ``"msccl-executor-nccl"`` (default), ``"rccl"`` or ``"msccl-legacy"``: selects the limits,
        the accepted ``coll`` names and step types, and the required header attributes.
    fifo_depth
        If given, at most this many unreceived messages per (sender, receiver, channel) before a
        send blocks; ``None`` (default) models sends as buffered.

    Returns
    -------
    CheckResult

    Raises
    ------
    XmlError
        If ``runtime`` is unknown or ``fifo_depth < 1``.

    Notes
    -----
    The symbolic execution is linear in the number of steps times the number of threadblocks
    (vector clocks); the largest shipped files take well under a second.

    Examples
    --------
    >>> from msccl_xml.program import Program, Protocol
    >>> r = check(Program(name="x", proto=Protocol.LL, nchannels=1, nchunksperloop=2, ngpus=2,
    ...                   coll="custom", inplace=1, outofplace=0, min_bytes=0, max_bytes=0,
    ...                   gpus=()))
    >>> r.valid, r.errors[0][:30]
    (False, "algo: coll 'custom' is not acc")
    """
    expect_type(program, Program, "program", XmlError)
    limits = runtime_limits(runtime)
    if fifo_depth is not None and fifo_depth < 1:
        raise XmlError(f"fifo_depth must be >= 1 or None, got {fifo_depth!r}")
    errors, warnings = structural_problems(program, limits)
    errors.extend(match_problems(program))
    oversize = size_problems(program, limits)
    if oversize:
        # Symbolic execution allocates per declared chunk; beyond the runtime's limits it is
        # skipped (the program cannot run anyway), so a tiny file cannot exhaust memory.
        errors.extend(m for m in oversize if m not in errors)
        return _result(program, runtime, errors, warnings)
    modes = _modes(program)
    if not modes:
        modes = [False]
    for inplace in modes:
        layout, problem = layout_for(program, inplace)
        if problem:
            errors.append(problem)
        sim_errors, sim_warnings = simulate(program, layout, fifo_depth=fifo_depth)
        errors.extend(sim_errors)
        warnings.extend(sim_warnings)
    if canonical_coll(program.coll) not in POSTCONDITION_COLLS:
        warnings.append(f"algo: no postcondition is checked for coll {program.coll!r}")
    return _result(program, runtime, errors, warnings)


def check_text(
    text: str, *, runtime: str = "msccl-executor-nccl", source: str = "<string>"
) -> CheckResult:
    """Parse, lint and check MSCCL XML ``text``.

    Lexical problems the runtime reader would trip on (:func:`msccl_xml.lint.lint_text`) are
    errors too, prefixed with ``source``.

    Raises
    ------
    XmlError
        If the text cannot be parsed (see :func:`msccl_xml.parser.parse`).

    Examples
    --------
    >>> check_text('<?xml version="1.0"?><algo proto="LL" nchannels="1" nchunksperloop="1" '
    ...            'ngpus="1" coll="allreduce" inplace="1" outofplace="0" minBytes="0" '
    ...            'maxBytes="0"><gpu id="0" i_chunks="1" o_chunks="0" s_chunks="0"/></algo>',
    ...            source="a.xml").errors[0][:39]
    'a.xml: line 1: XML declaration or proce'
    """
    expect_type(text, str, "text", XmlError)
    program = parse(text, source=source)
    lexical = [f"{source}: {p}" for p in lint_text(text)]
    result = check(program, runtime=runtime)
    return _result(program, runtime, lexical + list(result.errors), list(result.warnings))


def check_file(
    path: str | os.PathLike[str], *, runtime: str = "msccl-executor-nccl"
) -> CheckResult:
    """Read, lint and check the MSCCL XML file at ``path`` (see :func:`check_text`).

    Raises
    ------
    XmlError
        If the file cannot be read or parsed.

    Examples
    --------
    >>> check_file("/nonexistent.xml")
    Traceback (most recent call last):
    ...
    synth.errors.XmlError: /nonexistent.xml: cannot read: No such file or directory
    """
    expect_type(path, (str, os.PathLike), "path", XmlError)
    name = os.fspath(path)
    read(name)  # raises XmlError for unreadable files with a uniform message
    with open(name, encoding="utf-8") as fh:
        text = fh.read()
    return check_text(text, runtime=runtime, source=name)


def _modes(program: Program) -> list[bool]:
    if program.outofplace is None:  # old format: inplace is an exact match
        return [program.inplace == 1]
    modes = []
    if program.inplace == 1:
        modes.append(True)
    if program.outofplace == 1:
        modes.append(False)
    return modes


def _result(
    program: Program, runtime: str, errors: list[str], warnings: list[str]
) -> CheckResult:
    unique = list(dict.fromkeys(errors))
    if len(unique) > _MAX_ERRORS:
        unique = unique[:_MAX_ERRORS] + [f"... and {len(unique) - _MAX_ERRORS} more errors"]
    return CheckResult(
        errors=tuple(unique),
        warnings=tuple(dict.fromkeys(warnings)),
        collective=program.coll,
        nranks=program.ngpus,
        runtime=runtime,
    )

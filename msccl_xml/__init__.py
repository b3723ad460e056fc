"""MSCCL XML: program model, writer, parser, checker, algbw, lowering from a Schedule and back.

Examples
--------
>>> from msccl_xml import check, parse, write
>>> text = ('<algo name="noop" proto="Simple" nchannels="1" nchunksperloop="2" ngpus="2" '
...         'coll="allreduce" inplace="1" outofplace="0" minBytes="0" maxBytes="0"/>')
>>> p = parse(text)
>>> parse(write(p)) == p
True
>>> check(p).valid   # no <gpu> elements, nothing reduced
False
"""

from __future__ import annotations

from .algbw import program_algbw_GBps, program_link_loads, switch_path
from ._export import export, render_xml
from .checker import CheckResult, CheckStatus, check, check_file, check_text, verdict_message
from .limits import RUNTIMES, RuntimeLimits, runtime_limits
from .lint import lint_text
from .lowering import lower
from .parser import parse, read
from .program import BufferKind, Gpu, Program, Protocol, Step, StepType, Threadblock, nop
from .to_schedule import program_to_schedule
from .writer import write

__all__ = [
    "RUNTIMES",
    "BufferKind",
    "CheckResult",
    "CheckStatus",
    "Gpu",
    "Program",
    "Protocol",
    "RuntimeLimits",
    "Step",
    "StepType",
    "Threadblock",
    "check",
    "check_file",
    "check_text",
    "export",
    "lint_text",
    "lower",
    "nop",
    "parse",
    "program_algbw_GBps",
    "program_link_loads",
    "program_to_schedule",
    "read",
    "render_xml",
    "runtime_limits",
    "switch_path",
    "verdict_message",
    "write",
]

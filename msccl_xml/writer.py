"""Write a :class:`~msccl_xml.program.Program` as the exact text the MSCCL runtimes read.

The form is msccl-tools' (lxml ``ET.indent(space="  ")`` then ``ET.tostring``): no XML
declaration, one start tag per line, two spaces of indentation per level, attributes in schema
order separated by one space, values in double quotes, integers as plain
decimals, ``LF`` line ends including one after ``</algo>``. Elements without children are
self-closing. The output depends only on the program, byte for byte.

Examples
--------
>>> from msccl_xml.program import BufferKind, Gpu, Program, Protocol, Step, StepType, Threadblock
>>> o = BufferKind.OUTPUT
>>> tb = Threadblock(id=0, send=1, recv=-1, chan=0,
...                  steps=(Step(0, StepType.SEND, o, 0, o, 0, 1),))
>>> p = Program(name="ag", proto=Protocol.SIMPLE, nchannels=1, nchunksperloop=2, ngpus=2,
...             coll="allgather", inplace=1, outofplace=0, min_bytes=0, max_bytes=0,
...             gpus=(Gpu(0, 0, 2, 0, (tb,)),))
>>> print(write(p), end="")
<algo name="ag" proto="Simple" nchannels="1" nchunksperloop="2" ngpus="2" coll="allgather" inplace="1" outofplace="0" minBytes="0" maxBytes="0">
  <gpu id="0" i_chunks="0" o_chunks="2" s_chunks="0">
    <tb id="0" send="1" recv="-1" chan="0">
      <step s="0" type="s" srcbuf="o" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>
    </tb>
  </gpu>
</algo>
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from synth.errors import XmlError, expect_type

from .program import Attrs, Gpu, Program, Step, Threadblock

__all__ = ["ALGO_ATTRS", "GPU_ATTRS", "STEP_ATTRS", "TB_ATTRS", "write"]

ALGO_ATTRS = (
    "name",
    "proto",
    "nchannels",
    "nchunksperloop",
    "ngpus",
    "coll",
    "inplace",
    "outofplace",
    "minBytes",
    "maxBytes",
)
GPU_ATTRS = ("id", "i_chunks", "o_chunks", "s_chunks")
TB_ATTRS = ("id", "send", "recv", "chan")
STEP_ATTRS = ("s", "type", "srcbuf", "srcoff", "dstbuf", "dstoff", "cnt", "depid", "deps", "hasdep")

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*\Z")
# Characters that would need an entity (which the runtime does not decode) or break its reader.
_BAD_VALUE_CHARS = re.compile(r"[\"'<>&\t\r\n]")


def write(program: Program) -> str:
    r"""Serialise ``program`` to MSCCL XML text.

    Parameters
    ----------
    program
        The program; every ``Step.s`` must equal its position in its threadblock.

    Returns
    -------
    str
        The document, ending with a newline (as msccl-tools' examples print it).

    Raises
    ------
    XmlError
        If a step's ``s`` is not its position (the kernel rebuilds step indices from document
        order), a value is not an ``int`` where one is required, a string value contains a
        character the runtime's reader cannot take (quotes, ``<``, ``>``, ``&``, tab, newline), or
        an extra attribute has an invalid or reserved name.

    Examples
    --------
    >>> from msccl_xml.program import Program, Protocol
    >>> write(Program(name=None, proto=Protocol.LL, nchannels=1, nchunksperloop=1, ngpus=1,
    ...               coll="allreduce", inplace=1, outofplace=0, min_bytes=0, max_bytes=0,
    ...               gpus=()))
    '<algo proto="LL" nchannels="1" nchunksperloop="1" ngpus="1" coll="allreduce" inplace="1" outofplace="0" minBytes="0" maxBytes="0"/>\n'
    """
    expect_type(program, Program, "program", XmlError)
    lines: list[str] = []
    algo = _algo_attrs(program)
    if not program.gpus:
        return _tag("algo", algo, program.extra, "<algo>", close=True) + "\n"
    lines.append(_tag("algo", algo, program.extra, "<algo>", close=False))
    for gpu in program.gpus:
        _write_gpu(gpu, lines)
    lines.append("</algo>")
    return "\n".join(lines) + "\n"


def _algo_attrs(p: Program) -> list[tuple[str, str]]:
    where = "<algo>"
    pairs: list[tuple[str, str]] = []
    if p.name is not None:
        pairs.append(("name", _str(p.name, where, "name")))
    pairs.append(("proto", p.proto.value))
    pairs.append(("nchannels", _int(p.nchannels, where, "nchannels")))
    pairs.append(("nchunksperloop", _int(p.nchunksperloop, where, "nchunksperloop")))
    pairs.append(("ngpus", _int(p.ngpus, where, "ngpus")))
    pairs.append(("coll", _str(p.coll, where, "coll")))
    pairs.append(("inplace", _int(p.inplace, where, "inplace")))
    if p.outofplace is not None:
        pairs.append(("outofplace", _int(p.outofplace, where, "outofplace")))
    if p.min_bytes is not None:
        pairs.append(("minBytes", _int(p.min_bytes, where, "minBytes")))
    if p.max_bytes is not None:
        pairs.append(("maxBytes", _int(p.max_bytes, where, "maxBytes")))
    return pairs


def _write_gpu(gpu: Gpu, lines: list[str]) -> None:
    where = f"gpu {gpu.id}"
    attrs = [(k, _int(getattr(gpu, k), where, k)) for k in GPU_ATTRS]
    if not gpu.threadblocks:
        lines.append("  " + _tag("gpu", attrs, gpu.extra, where, close=True))
        return
    lines.append("  " + _tag("gpu", attrs, gpu.extra, where, close=False))
    for tb in gpu.threadblocks:
        _write_tb(gpu.id, tb, lines)
    lines.append("  </gpu>")


def _write_tb(rank: int, tb: Threadblock, lines: list[str]) -> None:
    where = f"gpu {rank} tb {tb.id}"
    attrs = [(k, _int(getattr(tb, k), where, k)) for k in TB_ATTRS]
    if not tb.steps:
        lines.append("    " + _tag("tb", attrs, tb.extra, where, close=True))
        return
    lines.append("    " + _tag("tb", attrs, tb.extra, where, close=False))
    for position, step in enumerate(tb.steps):
        ints = (step.s, step.srcoff, step.dstoff, step.cnt, step.depid, step.deps, step.hasdep)
        if step.s == position and not step.extra and all(type(v) is int for v in ints):
            # what _step writes for such a step, without building its messages' context
            lines.append(f'      <step s="{position}" type="{step.type.value}" srcbuf="{step.srcbuf.value}" '
                         f'srcoff="{step.srcoff}" dstbuf="{step.dstbuf.value}" dstoff="{step.dstoff}" '
                         f'cnt="{step.cnt}" depid="{step.depid}" deps="{step.deps}" hasdep="{step.hasdep}"/>')
        else:
            lines.append("      " + _step(step, position, f"{where} step {position}"))
    lines.append("    </tb>")


def _step(step: Step, position: int, where: str) -> str:
    if step.s != position:
        raise XmlError(
            f"{where}: s must equal the step's position {position} in its threadblock, "
            f"got {step.s!r}"
        )
    attrs = [
        ("s", _int(step.s, where, "s")),
        ("type", step.type.value),
        ("srcbuf", step.srcbuf.value),
        ("srcoff", _int(step.srcoff, where, "srcoff")),
        ("dstbuf", step.dstbuf.value),
        ("dstoff", _int(step.dstoff, where, "dstoff")),
        ("cnt", _int(step.cnt, where, "cnt")),
        ("depid", _int(step.depid, where, "depid")),
        ("deps", _int(step.deps, where, "deps")),
        ("hasdep", _int(step.hasdep, where, "hasdep")),
    ]
    return _tag("step", attrs, step.extra, where, close=True)


def _tag(
    name: str, attrs: Sequence[tuple[str, str]], extra: Attrs, where: str, *, close: bool
) -> str:
    known = {k for k, _ in attrs}
    parts = [f'{k}="{v}"' for k, v in attrs]
    for key, value in extra:
        if not _NAME.match(key) or key in known:
            raise XmlError(f"{where}: invalid or reserved extra attribute name {key!r}")
        known.add(key)
        parts.append(f'{key}="{_str(value, where, key)}"')
    return f"<{name} {' '.join(parts)}{'/>' if close else '>'}"


def _int(value: object, where: str, attr: str) -> str:
    if type(value) is not int:  # bool is an int subclass but would print as True/False
        raise XmlError(f"{where}: {attr} must be an int, got {value!r}")
    return str(value)


def _str(value: object, where: str, attr: str) -> str:
    if not isinstance(value, str) or _BAD_VALUE_CHARS.search(value):
        raise XmlError(
            f"{where}: {attr} must be a string without quotes, <, >, &, tabs or newlines, "
            f"got {value!r}"
        )
    return value

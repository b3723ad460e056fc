"""Read MSCCL XML text into a :class:`~msccl_xml.program.Program`.

The parser accepts standard XML (via :mod:`xml.etree.ElementTree`): comments, any attribute
order, ``<step></step>`` as well as ``<step/>``, unknown attributes (kept in ``extra``) and unknown
elements (dropped). Runtime-specific lexical rules (no XML declaration, no tabs, one line per start
tag, ...) are not enforced here but reported by :func:`msccl_xml.lint.lint_text`. Every error is
an :class:`~synth.errors.XmlError` naming the source and line.

Examples
--------
>>> p = parse('<algo name="a" proto="LL" nchannels="1" nchunksperloop="1" ngpus="1" '
...           'coll="allreduce" inplace="1" outofplace="0" minBytes="0" maxBytes="0">'
...           '<gpu id="0" i_chunks="1" o_chunks="0" s_chunks="0"/></algo>')
>>> p.ngpus, p.gpus[0].i_chunks
(1, 1)
"""

from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable
from typing import TypeVar, cast

from synth.errors import XmlError, short_repr

from .program import BufferKind, Gpu, Program, Protocol, Step, StepType, Threadblock
from .writer import ALGO_ATTRS, GPU_ATTRS, STEP_ATTRS, TB_ATTRS

__all__ = ["parse", "read"]

_INT = re.compile(r"[+-]?[0-9]+\Z")
#: Longest integer attribute read (the runtimes' fields are 32-bit; this keeps int() cheap).
MAX_INT_DIGITS = 18
# Document-order scan of start tags, skipping the constructs that may contain '<'.
_MARKUP = re.compile(
    r"<!--.*?-->|<!\[CDATA\[.*?\]\]>|<\?.*?\?>|<![A-Za-z][^>]*>|</[^>]*>|<([A-Za-z_:][-\w.:]*)",
    re.DOTALL,
)
_E = TypeVar("_E")
#: Members of the enums read per step, by XML token (a dict lookup instead of the Enum call).
_MEMBERS: dict[object, dict[str, object]] = {e: {m.value: m for m in e} for e in (StepType, BufferKind)}


class _Ctx:
    """Where each element starts, for error messages (found on the first error)."""

    __slots__ = ("source", "text", "root", "_lines")

    def __init__(self, source: str, text: str, root: ET.Element) -> None:
        self.source, self.text, self.root = source, text, root
        self._lines: dict[int, int] | None = None

    @property
    def lines(self) -> dict[int, int]:
        """The line each element starts on, by ``id`` of the element."""
        if self._lines is None:
            starts: list[int] = []
            line, pos = 1, 0
            for m in _MARKUP.finditer(self.text):
                line += self.text.count("\n", pos, m.start())
                pos = m.start()
                if m.group(1) is not None:
                    starts.append(line)
            self._lines = {id(el): ln for el, ln in zip(self.root.iter(), starts, strict=False)}
        return self._lines

    def error(self, el: ET.Element, message: str) -> XmlError:
        line = self.lines.get(id(el))
        where = f"{self.source}:{line}" if line is not None else self.source
        return XmlError(f"{where}: <{el.tag}> {message}")

    def int_attr(self, el: ET.Element, key: str) -> int:
        raw = el.get(key)
        if raw is not None and len(raw) <= MAX_INT_DIGITS and raw.isascii() and (
                raw.isdigit() or (raw[:1] == "-" and raw[1:].isdigit())):
            return int(raw)  # plain decimal: what the writer writes
        raw = self.str_attr(el, key)
        if not _INT.match(raw.strip()):
            raise self.error(el, f"attribute {short_repr(key)} must be a decimal integer, got {short_repr(raw)}")
        if len(raw.strip().lstrip("+-")) > MAX_INT_DIGITS:
            raise self.error(el, f"attribute {short_repr(key)} = {short_repr(raw)} is out of range "
                                 f"(at most {MAX_INT_DIGITS} digits; the runtimes read 32-bit integers)")
        return int(raw)

    def str_attr(self, el: ET.Element, key: str) -> str:
        raw = el.get(key)
        if raw is None:
            raise self.error(el, f"is missing required attribute {short_repr(key)}")
        return raw

    def enum_attr(self, el: ET.Element, key: str, conv: Callable[[str], _E]) -> _E:
        known = _MEMBERS.get(conv)
        if known is not None:
            member = known.get(el.get(key))  # type: ignore[arg-type]
            if member is not None:
                return cast(_E, member)
        raw = self.str_attr(el, key)
        try:
            return conv(raw)
        except ValueError:
            raise self.error(el, f"attribute {short_repr(key)} has unknown value {short_repr(raw)}") from None


def parse(text: str, *, source: str = "<string>") -> Program:
    """Parse MSCCL XML ``text`` (one ``<algo>`` element).

    Parameters
    ----------
    text
        The document.
    source
        Name used in error messages (a file path).

    Returns
    -------
    Program
        The program; attributes outside the schema are kept, in document order, in ``extra``.

    Raises
    ------
    XmlError
        ``"SOURCE:LINE: ..."`` if the text is not well-formed XML, the root is not ``<algo>``, a
        required attribute is missing (``outofplace``, ``minBytes``, ``maxBytes`` and ``name``
        may be absent, as in the old format), an integer attribute is not a decimal integer, or
        ``proto``, ``type``, ``srcbuf`` or ``dstbuf`` has an unknown value.

    Examples
    --------
    >>> parse("<algo/>", source="x.xml")
    Traceback (most recent call last):
    ...
    synth.errors.XmlError: x.xml:1: <algo> is missing required attribute 'proto'
    """
    if not isinstance(text, str):
        raise XmlError(f"{source}: text (the MSCCL XML) must be a str, got {type(text).__name__}")
    if not isinstance(source, str):
        raise XmlError(f"source must be a str, got {type(source).__name__}")
    try:
        root = ET.fromstring(text)
    except RecursionError:
        raise XmlError(f"{source}: XML nested too deeply") from None
    except ET.ParseError as exc:
        line, col = exc.position
        raise XmlError(f"{source}:{line}:{col}: not well-formed XML: {exc}") from exc
    ctx = _Ctx(source, text, root)
    if root.tag != "algo":
        raise ctx.error(root, "is not an MSCCL algorithm: the root element must be <algo>")
    return _algo(ctx, root)


def read(path: str | os.PathLike[str]) -> Program:
    """Read and parse the MSCCL XML file at ``path``.

    Raises
    ------
    XmlError
        If the file cannot be read or decoded as UTF-8, or :func:`parse` fails; the message
        starts with the path.

    Examples
    --------
    >>> read("/nonexistent.xml")
    Traceback (most recent call last):
    ...
    synth.errors.XmlError: /nonexistent.xml: cannot read: No such file or directory
    """
    if not isinstance(path, (str, os.PathLike)):
        raise XmlError(f"path must be a str or os.PathLike, got {type(path).__name__}")
    name = os.fspath(path)
    if not isinstance(name, str):
        raise XmlError(f"path must name a file as str, got {type(name).__name__}")
    try:
        with open(name, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise XmlError(f"{name}: cannot read: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise XmlError(f"{name}: cannot read: not UTF-8 ({exc.reason})") from exc
    return parse(text, source=name)


def _extra(el: ET.Element, known: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    return tuple((k, v) for k, v in el.attrib.items() if k not in known)


def _optional_int(ctx: _Ctx, el: ET.Element, key: str) -> int | None:
    return None if el.get(key) is None else ctx.int_attr(el, key)


def _algo(ctx: _Ctx, el: ET.Element) -> Program:
    gpus = tuple(_gpu(ctx, child) for child in el if child.tag == "gpu")
    return Program(
        name=el.get("name"),
        proto=ctx.enum_attr(el, "proto", Protocol),
        nchannels=ctx.int_attr(el, "nchannels"),
        nchunksperloop=ctx.int_attr(el, "nchunksperloop"),
        ngpus=ctx.int_attr(el, "ngpus"),
        coll=ctx.str_attr(el, "coll"),
        inplace=ctx.int_attr(el, "inplace"),
        outofplace=_optional_int(ctx, el, "outofplace"),
        min_bytes=_optional_int(ctx, el, "minBytes"),
        max_bytes=_optional_int(ctx, el, "maxBytes"),
        gpus=gpus,
        extra=_extra(el, ALGO_ATTRS),
    )


def _gpu(ctx: _Ctx, el: ET.Element) -> Gpu:
    return Gpu(
        id=ctx.int_attr(el, "id"),
        i_chunks=ctx.int_attr(el, "i_chunks"),
        o_chunks=ctx.int_attr(el, "o_chunks"),
        s_chunks=ctx.int_attr(el, "s_chunks"),
        threadblocks=tuple(_tb(ctx, child) for child in el if child.tag == "tb"),
        extra=_extra(el, GPU_ATTRS),
    )


def _tb(ctx: _Ctx, el: ET.Element) -> Threadblock:
    return Threadblock(
        id=ctx.int_attr(el, "id"),
        send=ctx.int_attr(el, "send"),
        recv=ctx.int_attr(el, "recv"),
        chan=ctx.int_attr(el, "chan"),
        steps=tuple(_step(ctx, child) for child in el if child.tag == "step"),
        extra=_extra(el, TB_ATTRS),
    )


#: The integer attributes of a step, and the form the writer gives them together (comma-joined).
_STEP_INTS = ("s", "srcoff", "dstoff", "cnt", "depid", "deps", "hasdep")
_PLAIN_INTS = re.compile(r"-?[0-9]{1,%d}(?:,-?[0-9]{1,%d}){%d}\Z" % (MAX_INT_DIGITS, MAX_INT_DIGITS, len(_STEP_INTS) - 1))
_TYPES = _MEMBERS[StepType]
_BUFS = _MEMBERS[BufferKind]


def _step(ctx: _Ctx, el: ET.Element) -> Step:
    """One ``<step>``; a step as the writer writes it (its ten attributes, plain decimals, known
    tokens) is read in one pass, anything else attribute by attribute (naming what is wrong)."""
    a = el.attrib
    if len(a) == len(STEP_ATTRS):
        try:
            ints = [a[k] for k in _STEP_INTS]
            kind, sbuf, dbuf = _TYPES.get(a["type"]), _BUFS.get(a["srcbuf"]), _BUFS.get(a["dstbuf"])
        except KeyError:
            kind = None
        if kind is not None and sbuf is not None and dbuf is not None and _PLAIN_INTS.match(",".join(ints)):
            s, srcoff, dstoff, cnt, depid, deps, hasdep = map(int, ints)
            return Step(s=s, type=cast(StepType, kind), srcbuf=cast(BufferKind, sbuf), srcoff=srcoff,
                        dstbuf=cast(BufferKind, dbuf), dstoff=dstoff, cnt=cnt, depid=depid, deps=deps,
                        hasdep=hasdep)
    return Step(
        s=ctx.int_attr(el, "s"),
        type=ctx.enum_attr(el, "type", StepType),
        srcbuf=ctx.enum_attr(el, "srcbuf", BufferKind),
        srcoff=ctx.int_attr(el, "srcoff"),
        dstbuf=ctx.enum_attr(el, "dstbuf", BufferKind),
        dstoff=ctx.int_attr(el, "dstoff"),
        cnt=ctx.int_attr(el, "cnt"),
        depid=ctx.int_attr(el, "depid"),
        deps=ctx.int_attr(el, "deps"),
        hasdep=ctx.int_attr(el, "hasdep"),
        extra=_extra(el, STEP_ATTRS),
    )

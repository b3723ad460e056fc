"""Lexical rules of the runtimes' hand-written XML reader (msccl-executor-nccl's ``msccl_parser.cc``).

Standard XML allows things ``msccl_parser.cc`` does not: an XML declaration, tabs, start tags over
several lines, single quotes, entities, leading zeros (read by ``strtol(.., 0)`` as octal).
:func:`lint_text` reports each such place by line; an empty tuple means the text is readable by the
runtimes.

Examples
--------
>>> lint_text('<?xml version="1.0"?>\\n<algo a="1"/>\\n')
('line 1: XML declaration or processing instruction: the runtime reader fails with "expected >, got \\'?\\'"',)
>>> lint_text('<algo ngpus="08"/>')
('line 1: <algo> attribute ngpus="08" has a leading zero or sign: strtol(.., 0) reads it differently',)
"""

from __future__ import annotations

import re

from synth.errors import XmlError, expect_type

__all__ = ["lint_text"]

_MAX_ATTRS = 16
_MAX_VALUE_LEN = 254
_TOKEN = re.compile(r"<!--.*?-->|<\?.*?\?>|<![^>]*>|</[^>]*>|<[^>]*>", re.DOTALL)
_STRICT_TAG = re.compile(r'<([A-Za-z_][\w.-]*)((?: [A-Za-z_][\w.:-]*="[^"]*")*) ?/?>\Z')
_ATTR = re.compile(r' ([A-Za-z_][\w.:-]*)="([^"]*)"')
_BAD_INT = re.compile(r"[+-]?0[0-9xX]|\+|\s")
_INT_ATTRS = frozenset(
    {
        "nchannels", "nchunksperloop", "ngpus", "inplace", "outofplace", "minBytes", "maxBytes",
        "id", "i_chunks", "o_chunks", "s_chunks", "send", "recv", "chan",
        "s", "srcoff", "dstoff", "cnt", "depid", "deps", "hasdep",
    }
)  # fmt: skip


def lint_text(text: str) -> tuple[str, ...]:
    """Places where ``text`` breaks the runtime reader's lexical rules.

    Parameters
    ----------
    text
        An MSCCL XML document.

    Returns
    -------
    tuple of str
        ``"line N: problem"`` messages in document order; empty if none.

    Notes
    -----
    Checks: BOM, XML declaration or processing instruction, tab characters, start tags spread over
    several lines, attribute syntax other than ``key="value"`` separated by single spaces (single
    quotes included), more than 16 attributes, values of 255 characters or more, entities in values
    (never decoded), and integer attributes with a sign, leading zero or blanks. Linear in the text.

    Examples
    --------
    >>> lint_text('<algo>\\n\\t<gpu id="0"/>\\n</algo>\\n')
    ('line 2: tab character: the runtime reader skips only spaces and newlines',)
    """
    expect_type(text, str, "text", XmlError)
    problems: list[str] = []
    if text.startswith("\ufeff"):
        problems.append("line 1: byte order mark: the runtime reader expects '<'")
    for number, text_line in enumerate(text.split("\n"), start=1):
        if "\t" in text_line:
            problems.append(
                f"line {number}: tab character: the runtime reader skips only spaces and newlines"
            )
    line, pos = 1, 0
    for m in _TOKEN.finditer(text):
        line += text.count("\n", pos, m.start())
        pos = m.start()
        token = m.group(0)
        if token.startswith("<?"):
            problems.append(
                f"line {line}: XML declaration or processing instruction: the runtime reader "
                "fails with \"expected >, got '?'\""
            )
        elif token.startswith(("<!--", "</")):
            continue
        elif token.startswith("<!"):
            problems.append(f"line {line}: markup declaration {token[:20]!r} is not supported")
        else:
            problems.extend(f"line {line}: {p}" for p in _lint_tag(token))
    return tuple(problems)


def _lint_tag(token: str) -> list[str]:
    if "\n" in token or "\r" in token:
        return ["start tag spans several lines: the runtime reader needs one tag per line"]
    m = _STRICT_TAG.match(token)
    if m is None:
        return [
            f"start tag {token[:40]!r} is not of the form <name key=\"value\" ...>: the runtime "
            "reader needs double quotes and single spaces"
        ]
    name = m.group(1)
    attrs = _ATTR.findall(m.group(2))
    problems = []
    if len(attrs) > _MAX_ATTRS:
        problems.append(f"<{name}> has {len(attrs)} attributes, the runtime keeps only 16")
    for key, value in attrs:
        if len(value) > _MAX_VALUE_LEN:
            problems.append(f"<{name}> attribute {key} is longer than 254 characters")
        if "&" in value:
            problems.append(f"<{name}> attribute {key} uses an entity, which is never decoded")
        if key in _INT_ATTRS and _BAD_INT.match(value) and value != "0":
            problems.append(
                f'<{name}> attribute {key}="{value}" has a leading zero or sign: '
                "strtol(.., 0) reads it differently"
            )
    return problems

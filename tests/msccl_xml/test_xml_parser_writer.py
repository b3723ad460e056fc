"""Tests of msccl_xml.parser, msccl_xml.writer and msccl_xml.lint."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from msccl_xml import StepType, lint_text, parse, read, write
from synth.errors import XmlError

from tests.msccl_xml._msccl_helpers import ring_allgather, replace_step

HEADER = ('<algo name="a" proto="Simple" nchannels="1" nchunksperloop="2" ngpus="2" '
          'coll="allgather" inplace="1" outofplace="0" minBytes="0" maxBytes="0">')


def test_writer_emits_the_msccl_tools_text_form() -> None:
    text = write(ring_allgather(2))
    assert text == (
        HEADER + "\n"
        '  <gpu id="0" i_chunks="0" o_chunks="2" s_chunks="0">\n'
        '    <tb id="0" send="1" recv="1" chan="0">\n'
        '      <step s="0" type="s" srcbuf="o" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>\n'
        '      <step s="1" type="r" srcbuf="o" srcoff="1" dstbuf="o" dstoff="1" cnt="1" depid="-1" deps="-1" hasdep="0"/>\n'
        "    </tb>\n"
        "  </gpu>\n"
        '  <gpu id="1" i_chunks="0" o_chunks="2" s_chunks="0">\n'
        '    <tb id="0" send="0" recv="0" chan="0">\n'
        '      <step s="0" type="s" srcbuf="o" srcoff="1" dstbuf="o" dstoff="1" cnt="1" depid="-1" deps="-1" hasdep="0"/>\n'
        '      <step s="1" type="r" srcbuf="o" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>\n'
        "    </tb>\n"
        "  </gpu>\n"
        "</algo>\n"
    ).replace(' name="a" ', ' name="allgather_ring" ')
    assert lint_text(text) == ()


def test_writer_refuses_steps_out_of_document_order() -> None:
    with pytest.raises(XmlError, match=r"gpu 1 tb 0 step 1: s must equal the step's position 1"):
        write(replace_step(ring_allgather(), 1, 0, 1, s=4))


def test_writer_refuses_values_the_runtime_cannot_read() -> None:
    with pytest.raises(XmlError, match=r"<algo>: name must be a string without quotes"):
        write(replace(ring_allgather(), name='a"b'))
    with pytest.raises(XmlError, match=r"invalid or reserved extra attribute name 'coll'"):
        write(replace(ring_allgather(), extra=(("coll", "x"),)))
    with pytest.raises(XmlError, match=r"gpu 0 tb 0 step 0: cnt must be an int, got True"):
        write(replace_step(ring_allgather(), 0, 0, 0, cnt=True))


def test_parser_accepts_standard_xml_variants() -> None:
    text = (
        "<!-- licence -->\n" + HEADER.replace('name="a" ', "") .replace('coll="allgather"', 'coll="allgather" redop="nop"')
        + '<gpu s_chunks="0" o_chunks="2" i_chunks="0" id="0">'
        '<tb id="0" send="1" recv="-1" chan="0"><step s="0" type="s" srcbuf="o" srcoff="0" '
        'dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0" extra="x"></step></tb>'
        '<copy i_off="0" o_off="0"/></gpu></algo>'
    )
    p = parse(text)
    assert p.name is None
    assert p.extra == (("redop", "nop"),)
    assert p.gpus[0].threadblocks[0].steps[0].extra == (("extra", "x"),)
    assert parse(write(p)) == p


def test_parser_keeps_the_old_format() -> None:
    old = HEADER.replace(' outofplace="0" minBytes="0" maxBytes="0"', "") + "</algo>"
    p = parse(old)
    assert (p.outofplace, p.min_bytes, p.max_bytes) == (None, None, None)
    assert parse(write(p)) == p
    assert "outofplace" not in write(p)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("<algo", r"^x\.xml:1:0: not well-formed XML: unclosed token"),
        ("<gpu/>", r"^x\.xml:1: <gpu> is not an MSCCL algorithm"),
        (HEADER + "\n<gpu id='0'/></algo>", r"^x\.xml:2: <gpu> is missing required attribute 'i_chunks'"),
        (HEADER.replace('ngpus="2"', 'ngpus="two"') + "</algo>",
         r"^x\.xml:1: <algo> attribute 'ngpus' must be a decimal integer, got 'two'"),
        (HEADER.replace('"Simple"', '"simple"') + "</algo>",
         r"^x\.xml:1: <algo> attribute 'proto' has unknown value 'simple'"),
    ],
)
def test_parse_errors_name_file_and_line(text: str, message: str) -> None:
    with pytest.raises(XmlError, match=message):
        parse(text, source="x.xml")


def test_parse_error_for_an_unknown_step_type_names_its_line() -> None:
    text = write(ring_allgather()).replace('type="rcs"', 'type="xyz"', 1)
    with pytest.raises(XmlError, match=r"^f:5: <step> attribute 'type' has unknown value 'xyz'"):
        parse(text, source="f")


def test_read_reports_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(XmlError, match=r"cannot read: No such file"):
        read(tmp_path / "missing.xml")
    bad = tmp_path / "bad.xml"
    bad.write_bytes(b"\xff\xfe<algo/>")
    with pytest.raises(XmlError, match=r"bad\.xml: cannot read: not UTF-8"):
        read(bad)


def test_lint_flags_every_runtime_reader_hazard() -> None:
    text = ('<?xml version="1.0"?>\n<algo a=\'1\'>\n\t<gpu\n id="0"/>\n'
            '<tb id="1"  send="2"/><step cnt="+1" name="&amp;"/>\n</algo>')
    problems = lint_text(text)
    assert problems[0].startswith("line 3: tab character")
    assert any(p.startswith("line 1: XML declaration") for p in problems)
    assert any(p.startswith("line 2: start tag \"<algo a='1'>\" is not of the form") for p in problems)
    assert any(p.startswith("line 3: start tag spans several lines") for p in problems)
    assert any(p.startswith("line 5: start tag '<tb id=\"1\"  send=\"2\"/>'") for p in problems)
    assert any('cnt="+1" has a leading zero or sign' in p for p in problems)
    assert any("uses an entity" in p for p in problems)


def test_writer_output_does_not_depend_on_the_hash_seed() -> None:
    code = (
        "import sys; sys.path[:0] = [%r, %r]\n"
        "from _msccl_helpers import random_schedule\n"
        "import random\n"
        "from msccl_xml import lower, write\n"
        "from synth.topologies import load_topology\n"
        "t = load_topology('nvswitch:5')\n"
        "for c in ('allgather', 'allreduce', 'alltoall'):\n"
        "    sys.stdout.write(write(lower(random_schedule(t, c, 2, random.Random(3)))))\n"
    ) % (str(Path(__file__).resolve().parents[2]), str(Path(__file__).resolve().parent))
    outs = []
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        outs.append(subprocess.run([sys.executable, "-c", code], env=env, check=True,
                                   capture_output=True, text=True).stdout)
    assert outs[0] == outs[1] and outs[0].count("<algo ") == 3


def test_step_type_tokens_are_the_xml_tokens() -> None:
    assert [t.value for t in StepType] == ["s", "r", "rcs", "rrs", "rrc", "rrcs", "cpy", "re", "nop", "ra"]


@given(st.lists(st.sampled_from(["", "0", "+", "00", " "]), min_size=7, max_size=7),
       st.sampled_from(["", 'extra="1" ']))
@settings(max_examples=60, deadline=None)
def test_step_read_in_one_pass_or_attribute_by_attribute_alike(pads: list[str], extra: str) -> None:
    """Steps as the writer writes them take the one-pass read; padded integers (``+1``, ``01``,
    `` 1``) and unknown attributes take the per-attribute one; both give what the per-attribute
    read gives: the same steps, with ``extra`` kept."""
    text = write(ring_allgather(3))
    ints = ("s", "srcoff", "dstoff", "cnt", "depid", "deps", "hasdep")

    def pad(m: re.Match[str]) -> str:
        key, val = m.group(1), m.group(2)
        p = pads[ints.index(key)]
        return f'{key}="{val if val.startswith("-") else p + val}"'

    odd = re.sub(r'\b(s|srcoff|dstoff|cnt|depid|deps|hasdep)="(-?[0-9]+)"', pad, text)
    odd = odd.replace("<step ", f"<step {extra}")
    # a pad changes the text only where its attribute has a non-negative value (deps is -1 throughout a ring)
    padded = any(p and re.search(rf'\b{key}="[0-9]', text) for key, p in zip(ints, pads))
    assert (odd == text) == (not padded and not extra)
    want, got = parse(text), parse(odd)
    assert [[[replace(s, extra=()) for s in tb.steps] for tb in g.threadblocks] for g in got.gpus] == \
        [[list(tb.steps) for tb in g.threadblocks] for g in want.gpus]
    assert all(s.extra == ((("extra", "1"),) if extra else ()) for g in got.gpus for tb in g.threadblocks
               for s in tb.steps)

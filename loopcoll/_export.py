"""Schedule → checked MSCCL XML on disk (atomic)."""

from __future__ import annotations

from synth._atomic import write_text_atomic
from synth.errors import XmlError
from synth.schedule import Schedule
from synth.topologies.model import Topology

__all__ = ["export_xml"]


def export_xml(sched: Schedule, topo: Topology, path: str, *, runtime: str, protocol: str) -> str:
    """Lower, write, re-parse and check; write the file only when the program checks valid."""
    from msccl_xml import check, lower, parse, write

    program = lower(sched, protocol=protocol, runtime=runtime)
    text = write(program)
    verdict = check(parse(text), runtime=runtime)
    if not verdict.valid:
        raise XmlError(f"lowered program for {sched.collective} on {topo.name} fails its check: {verdict.errors[0]}")
    write_text_atomic(path, text)
    return text

"""Schedule → checked MSCCL XML text (:func:`render_xml`), and on disk atomically (``msccl_xml.export``)."""

from __future__ import annotations

import math
import os

from synth.errors import XmlError, expect_type
from synth.fileio import write_text_atomic
from synth.schedule import Schedule
from synth.topologies.model import Topology

from .algbw import program_algbw_GBps, switch_path
from .checker import check
from .lowering import lower
from .parser import parse
from .writer import write

__all__ = ["export", "render_xml"]


def export(
    sched: Schedule, topo: Topology, path: str, *, runtime: str = "msccl-executor-nccl", protocol: str = "Simple",
    min_bytes: int = 0, max_bytes: int = 0,
) -> str:
    """Lower, check (:func:`render_xml`) and write the XML to ``path`` atomically; returns the text.

    The file is written only when the program checks valid.

    Raises
    ------
    XmlError
        As :func:`render_xml`, or if ``path`` is not a path or cannot be written.
    """
    expect_type(sched, Schedule, "sched", XmlError)
    expect_type(topo, Topology, "topo", XmlError)
    expect_type(path, (str, os.PathLike), "path", XmlError)
    text = render_xml(sched, topo, runtime=runtime, protocol=protocol, min_bytes=min_bytes, max_bytes=max_bytes)
    write_text_atomic(path, text)
    return text


def render_xml(
    sched: Schedule, topo: Topology, *, runtime: str = "msccl-executor-nccl", protocol: str = "Simple",
    min_bytes: int = 0, max_bytes: int = 0,
) -> str:
    """The checked MSCCL XML text of ``sched``: lower, write, re-parse and check; nothing is written.

    The XML names peers, not physical paths: the executor sends every transfer along its pair's
    route (:func:`synth.routing.pair_route`, also :func:`msccl_xml.switch_path`). Schedules of
    :func:`synth.synthesize` (default ``routing="auto"``) always follow the routes; a schedule whose
    hops take other paths (a ``routing="free"`` one on a fabric with several switch-only paths per
    pair) would run slower than its own algbw claims, so it is refused with the first such hop.

    ``min_bytes`` / ``max_bytes`` become the ``<algo>`` selection range (both inclusive, ``0``:
    unlimited), for one file per size band, written as ``runtime`` reads it
    (:func:`msccl_xml.limits.band_attrs`: exclusive upper end and ``2**59`` for msccl-legacy).

    Raises
    ------
    XmlError
        If lowering fails (:class:`~synth.errors.RuntimeLimitError` for a runtime limit), the
        re-parsed program is invalid, or its algbw on ``topo`` differs from the schedule's (naming
        the first hop whose path differs from the runtime's).

    Examples
    --------
    >>> from synth import load_topology, synthesize
    >>> topo = load_topology("ring:4")
    >>> render_xml(synthesize("allgather", topo).schedule, topo).startswith("<algo name=")
    True
    """
    expect_type(sched, Schedule, "sched", XmlError)
    expect_type(topo, Topology, "topo", XmlError)
    program = lower(sched, protocol=protocol, runtime=runtime, verify=False, min_bytes=min_bytes,
                    max_bytes=max_bytes)  # checked below, once
    text = write(program)
    parsed = parse(text)
    verdict = check(parsed, runtime=runtime)
    if not verdict.valid:
        raise XmlError(f"lowered program for {sched.collective} on {topo.name} fails its check: {verdict.errors[0]}")
    xml_GBps, sched_GBps = program_algbw_GBps(parsed, topo), sched.algbw_GBps(topo)
    if not math.isclose(xml_GBps, sched_GBps, rel_tol=1e-12):
        raise XmlError(
            f"lowered program for {sched.collective} on {topo.name} runs at {xml_GBps:.6g} GB/s, not the "
            f"schedule's {sched_GBps:.6g} GB/s: {_path_mismatch(sched, topo)}"
        )
    return text


def _path_mismatch(sched: Schedule, topo: Topology) -> str:
    for i, route in enumerate(sched.routes):
        for hop in route.hops:
            runtime_path = switch_path(topo, topo.gpu_id(hop.src), topo.gpu_id(hop.dst))
            if hop.path != runtime_path:
                return (
                    f"route {i} hop {hop.src}->{hop.dst} takes {'->'.join(hop.path)}, but MSCCL XML names "
                    f"only the peer and the transfer runs along {'->'.join(runtime_path)} (synthesize with "
                    "routing='auto' or 'routed': every hop on its pair's route)"
                )
    return "the hops follow the runtime's paths, so the bandwidth models disagree (a bug in loopcoll)"

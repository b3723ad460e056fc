"""The scenario format (``loopcoll.scenario/1``, documented in ``docs/controller.md`` §7): capacity changes,
the scenario a timeline runs, validation of a scenario document, reading a file, and the built-in presets.

>>> sc = scenario_from_dict(preset_scenario("fail1", topology="hpn:1x2x4"))
>>> sc.duration_s, [c.label for c in sc.changes]
(70.0, ['fail1', 'burst gpu0->tor0.0x0.5', 'burst gpu1->nvs0.0x0.3'])
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from runtime.errors import ProfileError
from runtime.loop.controller import ControllerConfig
from synth import Topology, load_topology

__all__ = ["SCENARIO_FORMAT", "Change", "Scenario", "ScenarioError", "load_scenario", "preset_scenario",
           "scenario_from_dict"]

SCENARIO_FORMAT = "loopcoll.scenario/1"


class ScenarioError(ProfileError):
    """A scenario file is malformed (a :class:`ProfileError`: bad input naming the culprit)."""


@dataclass(frozen=True, slots=True)
class Change:
    """A capacity change active on ``[start_s, end_s)``: a named failure or a link scaled by ``factor``."""

    start_s: float
    end_s: float | None
    failure: str | None = None
    link: tuple[str, str] | None = None
    factor: float = 1.0
    transient: bool = False

    @property
    def label(self) -> str:
        what = self.failure or f"{self.link[0]}->{self.link[1]}x{self.factor:g}"  # type: ignore[index]
        return ("burst " if self.transient else "") + what

    def active(self, t_s: float) -> bool:
        return self.start_s <= t_s and (self.end_s is None or t_s < self.end_s)

    def apply(self, topo: Topology) -> Topology:
        if self.failure is not None:
            return topo.with_failure(self.failure)
        assert self.link is not None
        return topo.scaled(self.link[0], self.link[1], self.factor)


@dataclass(frozen=True, slots=True)
class Scenario:
    """A timeline to run: topology, workload (run round-robin), capacity changes, controller knobs."""

    topology: str
    duration_s: float
    workload: tuple[tuple[str, str, int], ...]  # (comm, collective, S bytes)
    changes: tuple[Change, ...] = ()
    gap_s: float = 0.0
    swap_s: float = 0.0
    controller: Mapping[str, Any] = field(default_factory=dict)
    slices_per_chunk: int = 4
    rtol: float = 0.001
    fast_forward: bool = True
    charge_synth_s: float | None = None
    ranks: Mapping[str, tuple[int, ...]] = field(default_factory=dict)  # communicator -> its global ranks


def _num(doc: Mapping[str, Any], key: str, where: str, default: float | None = None, *, minimum: float = 0.0) -> float:
    v = doc.get(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < minimum:
        raise ScenarioError(f"{where}: {key} must be a number >= {minimum:g}, got {v!r}")
    return float(v)


def scenario_from_dict(doc: Any, *, topology: str | None = None) -> Scenario:
    """Validate a scenario document; errors name the field (``scenario: events[1]: end_s …``)."""
    if not isinstance(doc, Mapping):
        raise ScenarioError("scenario: must be a JSON object")
    if doc.get("format") != SCENARIO_FORMAT:
        raise ScenarioError(f"scenario: format must be {SCENARIO_FORMAT!r}, got {str(doc.get('format'))[:60]!r}")
    known = {"format", "topology", "duration_s", "workload", "events", "gap_s", "swap_s", "controller", "sim",
             "fast_forward", "description", "charge_synth_s"}
    extra = sorted(set(doc) - known)
    if extra:
        raise ScenarioError(f"scenario: unknown field {extra[0]!r} (known: {', '.join(sorted(known))})")
    topo = topology or doc.get("topology")
    if not isinstance(topo, str) or not topo:
        raise ScenarioError("scenario: topology must be a named spec or a file path")
    duration = _num(doc, "duration_s", "scenario")
    work = doc.get("workload")
    if not isinstance(work, list) or not work:
        raise ScenarioError("scenario: workload must be a non-empty list")
    workload = []
    ranks: dict[str, tuple[int, ...]] = {}
    for i, w in enumerate(work):
        if not isinstance(w, Mapping) or not isinstance(w.get("collective"), str):
            raise ScenarioError(f"scenario: workload[{i}] must be an object with a collective")
        size = w.get("size_bytes")
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ScenarioError(f"scenario: workload[{i}]: size_bytes must be an integer >= 1, got {size!r}")
        comm_name = str(w.get("comm", "world"))
        workload.append((comm_name, w["collective"], size))
        if w.get("ranks") is not None:
            r = w["ranks"]
            if not isinstance(r, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in r):
                raise ScenarioError(f"scenario: workload[{i}]: ranks must be a list of global ranks")
            if ranks.setdefault(comm_name, tuple(r)) != tuple(r):
                raise ScenarioError(f"scenario: workload[{i}]: communicator {comm_name!r} given two rank lists")
    changes = []
    for i, e in enumerate(doc.get("events", [])):
        where = f"scenario: events[{i}]"
        if not isinstance(e, Mapping):
            raise ScenarioError(f"{where}: must be an object")
        start = _num(e, "start_s", where)
        end = None if e.get("end_s") is None else _num(e, "end_s", where)
        if end is not None and end <= start:
            raise ScenarioError(f"{where}: end_s must be > start_s, got {end!r} <= {start!r}")
        transient = e.get("transient", False)
        if not isinstance(transient, bool):
            raise ScenarioError(f"{where}: transient must be true or false")
        if "failure" in e:
            if not isinstance(e["failure"], str):
                raise ScenarioError(f"{where}: failure must be a scenario name such as 'fail2'")
            changes.append(Change(start, end, failure=e["failure"], transient=transient))
        elif "link" in e:
            link = e["link"]
            if not isinstance(link, str) or "->" not in link:
                raise ScenarioError(f"{where}: link must read 'SRC->DST', got {str(link)[:60]!r}")
            a, b = link.split("->", 1)
            changes.append(Change(start, end, link=(a, b), factor=_num(e, "factor", where), transient=transient))
        else:
            raise ScenarioError(f"{where}: needs a 'failure' or a 'link' with a 'factor'")
    ctl = doc.get("controller", {})
    names = {f.name for f in fields(ControllerConfig)}
    if not isinstance(ctl, Mapping) or set(ctl) - names:
        bad = sorted(set(ctl) - names) if isinstance(ctl, Mapping) else ["<not an object>"]
        raise ScenarioError(f"scenario: controller: unknown knob {bad[0]!r}")
    sim = doc.get("sim", {})
    if not isinstance(sim, Mapping):
        raise ScenarioError("scenario: sim must be an object")
    spc = sim.get("slices_per_chunk", 4)
    if isinstance(spc, bool) or not isinstance(spc, int) or spc < 1:
        raise ScenarioError(f"scenario: sim: slices_per_chunk must be an integer >= 1, got {spc!r}")
    return Scenario(topo, duration, tuple(workload), tuple(changes), _num(doc, "gap_s", "scenario", 0.0),
                    _num(doc, "swap_s", "scenario", 0.0), dict(ctl), spc, _num(sim, "rtol", "scenario: sim", 0.001),
                    bool(doc.get("fast_forward", True)),
                    None if doc.get("charge_synth_s") is None else _num(doc, "charge_synth_s", "scenario"), ranks)


def load_scenario(path: str | os.PathLike[str], *, topology: str | None = None) -> Scenario:
    """Read a scenario file (``loopcoll.scenario/1``)."""
    p = Path(path)
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ScenarioError(f"{p}: cannot read scenario: {exc.strerror or exc}") from exc
    except ValueError as exc:
        raise ScenarioError(f"{p}: not valid JSON: {str(exc)[:120]}") from None
    try:
        return scenario_from_dict(doc, topology=topology)
    except ScenarioError as exc:
        raise ScenarioError(f"{p}: {exc}") from None



def preset_scenario(name: str, *, topology: str = "hpn:1x2x8", collective: str = "allgather",
                    size_per_rank_bytes: int = 16 << 20) -> dict[str, Any]:
    """A built-in scenario document: ``fail1``/``fail2``/``fail3`` at 2 s cleared at 60 s, with two
    microbursts, or ``transient`` (microbursts only); 70 s of simulated time.

    >>> preset_scenario("fail2")["events"][0]
    {'start_s': 2.0, 'end_s': 60.0, 'failure': 'fail2'}
    """
    nranks = load_topology(topology).nranks
    # S: the AllGather output, the ReduceScatter input (per rank x ranks); the AllToAll/AllReduce buffer
    size = size_per_rank_bytes * nranks if collective in ("allgather", "reducescatter") else size_per_rank_bytes
    bursts = [{"start_s": 1.0, "end_s": 1.002, "link": "gpu0->tor0.0", "factor": 0.5, "transient": True},
              {"start_s": 30.0, "end_s": 30.002, "link": "gpu1->nvs0.0", "factor": 0.3, "transient": True}]
    if name == "transient":
        events: list[dict[str, Any]] = bursts
    elif name in ("fail1", "fail2", "fail3"):
        events = [{"start_s": 2.0, "end_s": 60.0, "failure": name}, *bursts]
    else:
        raise ScenarioError(f"unknown preset scenario {name!r}; known: fail1, fail2, fail3, transient")
    return {"format": SCENARIO_FORMAT, "topology": topology, "duration_s": 70.0,
            "workload": [{"comm": "world", "collective": collective, "size_bytes": size}], "events": events}

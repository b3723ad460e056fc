"""The controller's re-synthesis is warm like a direct ``synthesize(..., warm_from=previous)`` (issue 32 item 5)."""

from __future__ import annotations

import tempfile

from runtime import Controller, ControllerConfig, profile_from_dict
from synth import load_topology, synthesize
from synth.figures import TreeFigures
from tests.runtime.drill import degraded_samples

SPEC = "hpn:1x2x8"


def _adapted(**cfg: object) -> tuple[Controller, list[dict[str, object]]]:
    topo = load_topology(SPEC)
    prof = profile_from_dict({"format": "loopcoll.profile/1", "topology": SPEC, "communicators": [
        {"name": "world", "ranks": list(range(16)), "collectives": [{"collective": "allgather", "sizes": [1 << 24]}]}]})
    events: list[dict[str, object]] = []
    ctl = Controller(topo, prof, tempfile.mkdtemp(), config=ControllerConfig(**cfg),  # type: ignore[arg-type]
                     clock=lambda: 0.0, log=events.append)
    (v1,) = ctl.bootstrap()
    sched = ctl.deployed_schedule("world", "allgather")
    assert sched is not None
    for batch in degraded_samples(sched[1], topo, version=v1.version, n_collectives=30, factor=0.125).values():
        ctl.ingest(batch)
    (v2,) = ctl.poll()
    assert v2.version == 2
    return ctl, events


def test_controller_resynthesis_is_warm_like_a_direct_call() -> None:
    topo = load_topology(SPEC)
    cold = synthesize("allgather", topo, chunks=16)
    direct = synthesize("allgather", topo.with_failure("fail2"), chunks=16, warm_from=cold)
    ctl, _ = _adapted(export_xml=False)
    res = ctl.manager.deployed[("world", "allgather")].result
    assert res is not None and isinstance(res.figures, TreeFigures) and isinstance(direct.figures, TreeFigures)
    assert direct.figures.warm is not None
    assert res.figures.warm is not None  # the warm start ran (None: cold)
    assert res.figures.warm_accept == direct.figures.warm_accept
    assert (res.figures.reused_edges_frac or 0.0) > 0.5

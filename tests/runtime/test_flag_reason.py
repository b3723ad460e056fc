"""The controller's flag reason names the degraded link apart from the bottleneck cut (issue 28)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from runtime import Controller, ControllerConfig, profile_from_dict
from synth import load_topology
from tests.runtime.drill import degraded_samples

TOPO = "hpn:1x2x4"


def test_reason_names_the_degraded_link_and_the_cut_separately(tmp_path: Path) -> None:
    topo = load_topology(TOPO)
    profile = profile_from_dict({"format": "loopcoll.profile/1", "topology": TOPO, "communicators": [
        {"name": "world", "ranks": list(range(8)), "collectives": [{"collective": "allgather", "sizes": [1 << 24]}]}]})
    logs: list[dict[str, Any]] = []
    ctl = Controller(topo, profile, tmp_path, config=ControllerConfig(export_xml=False, cooldown_s=0.0),
                     log=logs.append)
    ctl.bootstrap()
    _, sched = ctl.deployed_schedule("world", "allgather")
    by_host = degraded_samples(sched, topo, version=1, n_collectives=400)  # gpu0's NIC link degrades
    ctl.ingest([s for host in sorted(by_host) for s in by_host[host]])
    (published,) = ctl.poll()
    (flag,) = [r for r in logs if r["event"] == "flag"]
    assert published.reason == flag["reason"]
    m = re.fullmatch(r"detector: bottleneck cut \{(.+)\} off its slack by more than gamma 0\.1; "
                     r"degraded links: (.+)", flag["reason"])
    assert m, flag["reason"]
    cut, degraded = m.group(1).split(", "), m.group(2)
    assert cut == flag["verdict"]["deciding"][:4]
    nominal = topo.link("gpu0", "tor0.0").gbps
    first = re.match(r"gpu0->tor0\.0 \(estimated ([0-9.]+) of ([0-9.]+) Gbit/s\)", degraded)
    assert first, degraded  # lowest estimate share first (ties by name): the faulty link
    assert float(first.group(1)) < 0.9 * nominal and float(first.group(2)) == nominal
    assert "gpu0->tor0.0" not in cut  # the cut is where the schedule feels the fault, named as such

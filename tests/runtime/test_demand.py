"""runtime.loop.demand: demand samples → traffic matrix → AllToAllv versions (also through the Controller)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from runtime import Controller, ControllerConfig, profile_from_dict
from runtime.loop.demand import AllToAllvPlanner, DemandEstimator, matrix_shift
from synth import load_topology
from synth.alltoallv_schedule import AllToAllvSchedule


def _demand_sample(src: int, sends: list[int], comm: str = "ep", t_s: float = 1.0) -> dict[str, Any]:
    return {"format": "loopcoll.telemetry/1", "t_s": t_s, "comm": comm, "seq": 1, "version": None,
            "kind": "demand", "src": src, "dst": None, "bytes": sum(sends), "busy_s": 1e-3,
            "collective": "alltoallv", "origin": "executor", "extra": {"send_bytes": sends}}


def test_estimator_ewma_global_and_local_indexing() -> None:
    est = DemandEstimator({"ep": (4, 5, 6, 7)}, alpha=0.5, nranks=8)
    assert est.observe_row("ep", 5, [0, 0, 0, 0, 10, 99, 30, 40])  # indexed by global rank
    assert est.matrix("ep")[1].tolist() == [10.0, 0.0, 30.0, 40.0]  # own entry ignored
    assert est.observe_row("ep", 5, [30, 0, 10, 0])  # indexed by communicator-local rank
    assert est.matrix("ep")[1].tolist() == [20.0, 0.0, 20.0, 20.0]
    assert not est.observe_row("ep", 1, [0, 0, 0, 0]) and est.skipped["unknown_rank"] == 1
    assert not est.observe_row("ep", 4, [1, 2, 3]) and est.skipped["send_bytes_length"] == 1
    assert est.matrix("nope") is None


def test_planner_versions_record_their_matrix_and_reuse_the_pool(tmp_path: Path) -> None:
    topo = load_topology("hpn:1x2x4")
    rng = np.random.default_rng(0)
    m = rng.integers(1, 10**7, (8, 8)).astype(float)
    np.fill_diagonal(m, 0)
    plan = AllToAllvPlanner(topo, {"ep": tuple(range(8))}, directory=tmp_path, threshold=0.05)
    v1 = plan.update("ep", m, now_s=1.0)
    assert v1 is not None and v1.version == 1 and not v1.warm
    assert plan.update("ep", m * 1.02, now_s=2.0) is None  # 2 % < 5 %
    m2 = m.copy()
    m2[:, 3] *= 4  # expert on rank 3 turns hot
    v2 = plan.update("ep", m2, now_s=3.0)
    assert v2 is not None and v2.version == 2 and v2.warm and v2.shift == pytest.approx(matrix_shift(m, m2))
    sched = AllToAllvSchedule.from_json((tmp_path / v2.schedule_file).read_text())
    sched.validate(topo)
    assert np.array(sched.demand_bytes).tolist() == m2.tolist()
    manifest = json.loads((tmp_path / "alltoallv" / "manifest.json").read_text())
    assert [v["version"] for v in manifest["versions"]] == [1, 2]
    assert manifest["versions"][1]["matrix_sha256"] == v2.matrix_sha256 != v1.matrix_sha256


def test_controller_turns_demand_samples_into_alltoallv_versions(tmp_path: Path) -> None:
    profile = profile_from_dict({"format": "loopcoll.profile/1", "topology": "hpn:1x2x4", "communicators": [
        {"name": "ep", "ranks": [0, 1, 2, 3, 4, 5, 6, 7],
         "collectives": [{"collective": "alltoallv", "sizes": [1 << 24]}]}]})
    logs: list[dict[str, Any]] = []
    ctl = Controller(load_topology("hpn:1x2x4"), profile, tmp_path, config=ControllerConfig(export_xml=False),
                     clock=lambda: 5.0, log=logs.append)
    ctl.bootstrap()
    rows = [[0 if d == s else (s + 1) * 1000 * (10 if d == 6 else 1) for d in range(8)] for s in range(8)]
    rep = ctl.ingest([_demand_sample(s, rows[s]) for s in range(8)])
    assert rep.accepted == 8
    ctl.poll()
    v = ctl.alltoallv.deployed("ep")
    assert v is not None and v.version == 1 and v.total_bytes == float(np.sum(rows))
    assert any(r["event"] == "alltoallv_publish" for r in logs)
    assert ctl.alltoallv.matrix_of("ep").tolist() == [[float(x) for x in r] for r in rows]
    ctl.poll()  # the same matrix: no new version
    assert ctl.alltoallv.deployed("ep").version == 1

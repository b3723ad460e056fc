"""runtime.executor.alltoallv and Executor.all_to_all_single with split sizes: an AllToAllv schedule on gloo processes."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from runtime.executor.alltoallv import chunk_bounds  # noqa: E402
from runtime.executor.launch import launch  # noqa: E402
from synth import load_topology  # noqa: E402
from synth.alltoall_cg import synthesize_alltoallv  # noqa: E402
from tests.runtime import alltoallv_workers as W  # noqa: E402


def test_chunk_bounds_cover_the_block() -> None:
    for b in (0, 1, 7, 10, 11):
        for k in (1, 3, 10):
            cuts = chunk_bounds(b, k)
            assert cuts[0] == 0 and cuts[-1] == b and len(cuts) == k + 1
            assert max(np.diff(cuts)) - min(np.diff(cuts)) <= 1


def test_schedule_runs_split_sizes_like_native() -> None:
    topo = load_topology("hpn:1x2x2", ["fail2"])  # rank 0's NIC degraded: blocks get relayed
    rng = np.random.default_rng(5)
    demand = rng.integers(1, 100, (4, 4)) * 1_000_000
    np.fill_diagonal(demand, 0)
    res = synthesize_alltoallv(topo, demand, nchunks=3)
    sched = res.schedule
    assert sched is not None and any(len(r.hops) > 1 for r in sched.routes)  # relays are exercised
    cases = [rng.integers(0, 50, (4, 4)).tolist() for _ in range(3)]  # sizes unlike the demand, zeros too
    cases.append([[0] * 4 for _ in range(4)])
    zero_demand = demand.copy()
    zero_demand[1, 2] = 0  # a schedule without a route for block 1->2: that call falls back to native
    sched0 = synthesize_alltoallv(topo, zero_demand, nchunks=3).schedule
    assert sched0 is not None
    one = [[5] * 4 for _ in range(4)]
    got = launch(W.run_cases, 4, [(sched.to_json(), cases), (sched0.to_json(), [one])], timeout_s=180)
    expect = ["schedule:True"] * len(cases) + ["native:True", "executor:alltoallv:True:True"]
    assert all(r == expect for r in got), got

"""Compact arc-flow LP for the AllToAllv completion time: the oracle for small topologies.

Per source s, an arc flow ``f[s, e] ≥ 0`` (bytes of s's data on link e) with conservation at
every node (a GPU v ≠ s keeps ``demand[s][v]`` and may relay the rest, switches keep nothing),
and ``Σ_s f[s, e] ≤ c_e · T`` per live link; minimise T. Source aggregation is exact for
multicommodity flow with a common source. Its size is N·|E| columns, so it serves small cases
and tests; :func:`synth.alltoall_cg.alltoallv_lp_bound` computes the same optimum by column
generation at any size.

Examples
--------
>>> from synth.topologies import named_topology
>>> round(alltoallv_compact_time_s(named_topology("ring:3"), [[0, 5e9, 5e9], [0, 0, 0], [0, 0, 0]]), 6)
0.1
"""

from __future__ import annotations

from typing import Any

import numpy as np

from synth.alltoallv_schedule import check_demand
from synth.errors import ScheduleError, SolverError
from synth.result import Status
from synth.solvers import lp_backend
from synth.topologies.capacity import refuse_adjusted
from synth.topologies.model import Topology

__all__ = ["alltoallv_compact_time_s"]


def alltoallv_compact_time_s(topology: Topology, demand: Any, *, solver: str = "highs") -> float:
    """Minimum bandwidth-term completion time (s) of an AllToAllv of ``demand`` bytes on ``topology``."""
    refuse_adjusted(topology, "AllToAllv")
    try:
        d = np.array(check_demand(demand, topology.nranks), dtype=np.float64)
    except ScheduleError as exc:
        raise SolverError(str(exc)) from None
    if not (d > 0).any():
        return 0.0
    unit = float(d[d > 0].mean())
    d = d / unit
    nodes = [nd.id for nd in topology.nodes]
    index = {v: i for i, v in enumerate(nodes)}
    live = [lk for lk in topology.links if lk.gbps > 0]
    caps = np.array([float(topology.exact_capacity(*lk.key)) / 8.0 for lk in live])  # GB/s
    tail = np.array([index[lk.src] for lk in live], dtype=np.int64)
    head = np.array([index[lk.dst] for lk in live], dtype=np.int64)
    nv, ne = len(nodes), len(live)
    sources = [s for s in range(topology.nranks) if d[s].sum() > 0]
    gpu = np.array([index[topology.gpu_id(r)] for r in range(topology.nranks)], dtype=np.int64)
    lp = lp_backend(solver)
    # Rows: conservation (source-major, nv per source), then capacity (ne).
    rhs = np.zeros(len(sources) * nv)
    for i, s in enumerate(sources):
        rhs[i * nv + gpu] = d[s]
        rhs[i * nv + gpu[s]] = -d[s].sum()
    lp.add_rows(np.r_[rhs, np.full(ne, -np.inf)], np.r_[rhs, np.zeros(ne)])
    scale = float(caps.mean())
    # Column T, then f[s, e]: +1 at (s, head), -1 at (s, tail), +1 at capacity row e.
    lp.add_cols(np.ones(1), np.zeros(1), np.full(1, np.inf), np.zeros(1, np.int64),
                len(sources) * nv + np.arange(ne, dtype=np.int64), -caps / scale)
    k = len(sources) * ne
    src_i = np.repeat(np.arange(len(sources)), ne)
    e = np.tile(np.arange(ne), len(sources))
    index_arr = np.stack([src_i * nv + head[e], src_i * nv + tail[e], len(sources) * nv + e], axis=1).reshape(-1)
    value = np.tile(np.array([1.0, -1.0, 1.0]), k)
    lp.add_cols(np.zeros(k), np.zeros(k), np.full(k, np.inf), 3 * np.arange(k, dtype=np.int64), index_arr, value)
    sol = lp.solve(method="auto")
    if sol.status is not Status.OPTIMAL:
        raise SolverError(f"compact AllToAllv LP on {topology.name!r} ended with {sol.native}")
    return float(sol.objective) / scale * unit / 1e9

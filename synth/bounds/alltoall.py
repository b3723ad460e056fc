"""Optimal AllToAll rate: maximum concurrent multicommodity flow, one aggregate commodity per source.

Every ordered GPU pair (s, d) has demand 1; GPUs may relay, switches forward. Flows of all
destinations of one source are aggregated (``f[s, e]``), which is exact for the LP (a flow of one
source decomposes into paths to each destination). The LP

    max z  s.t.  inflow_s(v) − outflow_s(v) = z·[v ≠ s is a GPU] − (N−1)·z·[v = s]   ∀ s, v
                 Σ_s f[s, e] ≤ c_e                                                  ∀ e

is solved with HiGHS; algbw* = N·z* (nccl-tests: per-rank buffer over time). The saturated links
reported are those whose capacity row has a nonzero dual (a bottleneck the optimum depends on).

Examples
--------
>>> from synth.topologies import named_topology
>>> r = alltoall_rate_GBps(named_topology("nvswitch:4"))
>>> round(r.rate_GBps, 6)
120.0
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import highspy
import numpy as np
from scipy.sparse import coo_matrix

from synth.errors import SolverError
from synth.kernels.highs import quiet_highs
from synth.topologies.model import Topology

__all__ = ["ConcurrentFlow", "alltoall_rate_GBps"]


@dataclass(frozen=True, slots=True)
class ConcurrentFlow:
    """Optimal per-pair rate (GB/s) and the links whose capacity bounds it."""

    rate_GBps: float  # noqa: N815
    saturated: tuple[tuple[str, str], ...]
    solve_time_s: float
    optimal: bool = True  # False: stopped at the time limit, ``rate_GBps`` is inf (no bound proven)


def alltoall_rate_GBps(
    topo: Topology, *, time_limit_s: float | None = None, solver: str = "ipm"
) -> ConcurrentFlow:  # noqa: N802
    """Solve the aggregated max-concurrent-flow LP on HiGHS (see the module docstring)."""
    nodes = [n.id for n in topo.nodes]
    index = {v: i for i, v in enumerate(nodes)}
    live = topo.live_links
    gpus = [index[g.id] for g in topo.gpus]
    is_gpu = np.zeros(len(nodes), dtype=bool)
    is_gpu[gpus] = True
    n, nv, ne = len(gpus), len(nodes), len(live)
    tails = np.array([index[lk.src] for lk in live])
    heads = np.array([index[lk.dst] for lk in live])
    caps = np.array([float(topo.exact_capacity(*lk.key)) / 8.0 for lk in live])  # as rounded (capacity.py)
    # A power of two (exact in floats) brings the largest capacity to 64…128 GB/s: HiGHS's absolute
    # tolerances (1e-7) and its infinity (1e20) then mean the same on every fabric's scale.
    unit = 2.0 ** (math.frexp(float(caps.max()))[1] - 7) if ne else 1.0
    caps = caps / unit

    # Columns: f[k, e] at k*ne + e for source number k, then z last.
    nz = n * ne
    rows, cols, vals = [], [], []
    e_idx = np.arange(ne)
    for k in range(n):
        base_row = k * nv
        col = k * ne + e_idx
        rows += [base_row + heads, base_row + tails]
        cols += [col, col]
        vals += [np.ones(ne), -np.ones(ne)]
        # z's coefficient: inflow − outflow − demand(v)·z = 0.
        demand = is_gpu.astype(float)
        demand[gpus[k]] = -(n - 1)
        rows.append(base_row + np.arange(nv))
        cols.append(np.full(nv, nz))
        vals.append(-demand)
    cap_row0 = n * nv
    rows.append(cap_row0 + np.tile(e_idx, n))
    cols.append(np.arange(nz))
    vals.append(np.ones(nz))
    a = coo_matrix(
        (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(n * nv + ne, nz + 1)
    ).tocsc()

    lp = highspy.HighsLp()
    lp.num_col_ = nz + 1
    lp.num_row_ = n * nv + ne
    lp.sense_ = highspy.ObjSense.kMaximize
    lp.col_cost_ = np.r_[np.zeros(nz), 1.0]
    lp.col_lower_ = np.zeros(nz + 1)
    lp.col_upper_ = np.full(nz + 1, highspy.kHighsInf)
    lp.row_lower_ = np.r_[np.zeros(n * nv), np.full(ne, -highspy.kHighsInf)]
    lp.row_upper_ = np.r_[np.zeros(n * nv), caps]
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = a.indptr
    lp.a_matrix_.index_ = a.indices
    lp.a_matrix_.value_ = a.data
    options: dict[str, object] = {"solver": solver}
    if time_limit_s is not None:
        options["time_limit"] = float(time_limit_s)
    h = quiet_highs(**options)
    h.passModel(lp)
    h.run()
    status = h.getModelStatus()
    if status == highspy.HighsModelStatus.kTimeLimit:
        return ConcurrentFlow(math.inf, (), float(h.getRunTime()), optimal=False)
    if status != highspy.HighsModelStatus.kOptimal:
        raise SolverError(f"AllToAll bound LP on {topo.name!r} ended with HiGHS status {h.modelStatusToString(status)!r}")
    sol = h.getSolution()
    z = float(sol.col_value[nz]) * unit
    duals = np.asarray(sol.row_dual[cap_row0:])
    scale = max(1e-12, float(np.abs(duals).max()))
    saturated = tuple(sorted(live[e].key for e in range(ne) if abs(duals[e]) > 1e-7 * scale))
    return ConcurrentFlow(z, saturated, float(h.getRunTime()))

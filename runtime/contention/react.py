"""REACT congestion detection from flow completion times: steady vs erratic congestion.

Over a batch of ``B`` epochs of one recurring collective, each *flow* ``f`` (one transfer
``src → dst`` of the pattern, keyed by ``(route, hop)``) has a throughput vector ``b_f`` (bytes /
FCT per epoch). With ``k_f`` the flow's degree in the pattern graph (the larger of its source's
out-degree and its destination's in-degree) and ``F(k)`` the flows of degree ``k``:

* **steady** congestion: ``p90(b_f) < mean(b_{F(k_f)}) · (1 − δ1)`` — slow in (nearly) every epoch
  compared with flows of the same degree (δ1 = 0.2);
* **erratic** congestion: ``std(b_f) / mean(b_f) > δ2`` — slow in a subset of epochs (δ2 = 0.15).

Congested nodes are ranked by the number of congested flows they send or receive; a node is
*steady congested* when every flow it takes part in is steady congested.

Examples
--------
Four flows, two epochs; flow (0, 0) is slow in both epochs, flow (1, 0) in one:

>>> flows = {(0, 0): (0, 1, 100.0), (1, 0): (1, 2, 100.0), (2, 0): (2, 3, 100.0), (3, 0): (3, 0, 100.0)}
>>> fct = {(0, 0): [4.0, 4.0], (1, 0): [1.0, 3.0], (2, 0): [1.0, 1.0], (3, 0): [1.0, 1.0]}
>>> rep = detect_congestion(flows, fct)
>>> rep.steady, rep.erratic, rep.nodes[:2]
(((0, 0),), ((1, 0),), ((1, 2), (0, 1)))
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from runtime.errors import TelemetryError

if TYPE_CHECKING:
    from synth.simulation import TransferTimes

__all__ = ["CongestionReport", "detect_congestion", "flows_from_transfers"]

FlowKey = tuple[int, int]


@dataclass(frozen=True, slots=True)
class CongestionReport:
    """Steady and erratic flows (sorted), ``nodes`` as ``(rank, congested flows)`` most first, and
    ``steady_nodes`` (every flow of the node steady congested)."""

    steady: tuple[FlowKey, ...]
    erratic: tuple[FlowKey, ...]
    nodes: tuple[tuple[int, int], ...]
    steady_nodes: tuple[int, ...]
    epochs: int
    message: str

    @property
    def congested_ranks(self) -> tuple[int, ...]:
        """Ranks with at least one congested flow, most congested first."""
        return tuple(r for r, _ in self.nodes)

    def to_dict(self) -> dict[str, Any]:
        return {"steady": [list(f) for f in self.steady], "erratic": [list(f) for f in self.erratic],
                "nodes": [list(n) for n in self.nodes], "steady_nodes": list(self.steady_nodes), "epochs": self.epochs}


def detect_congestion(flows: Mapping[FlowKey, tuple[int, int, float]], fct_s: Mapping[FlowKey, Sequence[float]], *,
                      delta1: float = 0.2, delta2: float = 0.15) -> CongestionReport:
    """Classify flows from their FCTs (``flows``: key → ``(src, dst, bytes)``; ``fct_s``: key → one FCT per epoch)."""
    for name, v in (("delta1", delta1), ("delta2", delta2)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not 0 < v < 1:
            raise TelemetryError(f"react: `{name}` must be a number in (0, 1), got {v!r}")
    keys = sorted(flows)
    if not keys:
        raise TelemetryError("react: no flows")
    if sorted(fct_s) != keys:
        raise TelemetryError("react: FCTs must be given for exactly the pattern's flows")
    epochs = {len(fct_s[k]) for k in keys}
    if len(epochs) != 1 or min(epochs) < 1:
        raise TelemetryError(f"react: every flow needs the same number (>= 1) of epochs, got {sorted(epochs)}")
    b = {}
    for k in keys:
        t = np.asarray(fct_s[k], dtype=float)
        if not np.all(np.isfinite(t)) or np.any(t <= 0):
            raise TelemetryError(f"react: flow {k}: FCTs must be finite and > 0")
        b[k] = flows[k][2] / t
    out_deg: dict[int, int] = {}
    in_deg: dict[int, int] = {}
    for k in keys:
        s, d, _ = flows[k]
        out_deg[s] = out_deg.get(s, 0) + 1
        in_deg[d] = in_deg.get(d, 0) + 1
    degree = {k: max(out_deg[flows[k][0]], in_deg[flows[k][1]]) for k in keys}
    by_degree: dict[int, list[float]] = {}
    for k in keys:
        by_degree.setdefault(degree[k], []).extend(b[k].tolist())
    mean_k = {d: float(np.mean(v)) for d, v in by_degree.items()}
    steady = tuple(k for k in keys if float(np.percentile(b[k], 90)) < mean_k[degree[k]] * (1 - delta1))
    erratic = tuple(k for k in keys if k not in set(steady) and float(np.std(b[k]) / np.mean(b[k])) > delta2)
    count: dict[int, int] = {}
    members: dict[int, list[FlowKey]] = {}
    for k in keys:
        for r in flows[k][:2]:
            members.setdefault(r, []).append(k)
    for k in steady + erratic:
        for r in set(flows[k][:2]):
            count[r] = count.get(r, 0) + 1
    nodes = tuple(sorted(count.items(), key=lambda e: (-e[1], e[0])))
    steady_set = set(steady)
    steady_nodes = tuple(sorted(r for r, fs in members.items() if all(f in steady_set for f in fs)))
    msg = (f"{len(steady)} steady, {len(erratic)} erratic of {len(keys)} flows over {min(epochs)} epochs; "
           f"congested ranks {[r for r, _ in nodes]}")
    return CongestionReport(steady, erratic, nodes, steady_nodes, min(epochs), msg)


def flows_from_transfers(epochs: Sequence[TransferTimes]) -> tuple[dict[FlowKey, tuple[int, int, float]], dict[FlowKey, list[float]]]:
    """``(flows, fct_s)`` for :func:`detect_congestion` from per-epoch simulated (or measured) transfers.

    >>> from synth.baselines import nccl_ring
    >>> from synth.simulation import simulate_transfers
    >>> from synth.topologies import named_topology
    >>> topo = named_topology("ring:4")
    >>> tt = simulate_transfers(nccl_ring("allgather", topo, nchannels=1), topo, 1 << 20)
    >>> flows, fct = flows_from_transfers([tt, tt])
    >>> len(flows) == len(tt.transfers), detect_congestion(flows, fct).steady
    (True, ())
    """
    if not epochs:
        raise TelemetryError("react: no epochs")
    flows: dict[FlowKey, tuple[int, int, float]] = {}
    fct: dict[FlowKey, list[float]] = {}
    for e, tt in enumerate(epochs):
        keys = sorted((t.route, t.hop) for t in tt.transfers)
        if e and keys != sorted(flows):
            raise TelemetryError(f"react: epoch {e} has a different set of flows (not the same pattern)")
        for t in tt.transfers:
            flows[(t.route, t.hop)] = (t.src, t.dst, t.bytes)
            fct.setdefault((t.route, t.hop), []).append(t.end_s - t.start_s)
    return flows, fct

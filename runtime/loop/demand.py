"""AllToAllv on the controller: ``demand`` samples → traffic-matrix estimate → versioned schedules.

:class:`DemandEstimator` folds ``demand`` telemetry samples (``extra.send_bytes``: the bytes that
``src`` sends to each rank in one AllToAllv) into a per-communicator matrix, one row per sending
rank, smoothed by an EWMA(α). :class:`AllToAllvPlanner` keeps the versions of each
(communicator, ``alltoallv``): when the estimate has moved by more than ``threshold`` (relative L1
distance to the matrix the deployed version was made for) it re-synthesizes warm from the previous
result (:func:`synth.alltoall_cg.synthesize_alltoallv`) and publishes a new version that records
its matrix. With a directory, each version is written as
``alltoallv/<comm>/v<N>.json`` (the AllToAllv schedule JSON, demand matrix included) and
``alltoallv/manifest.json`` lists the versions (files first, manifest atomically last).

``send_bytes`` is indexed by global rank (length = the topology's ranks) or, equivalently for a
communicator, by communicator-local rank (length = its size); other lengths are skipped.

Examples
--------
>>> from synth import load_topology
>>> est = DemandEstimator({"ep": (0, 1, 2, 3)}, alpha=1.0)
>>> est.observe_row("ep", 0, [0, 10, 20, 30])
True
>>> est.matrix("ep")[0].tolist()
[0.0, 10.0, 20.0, 30.0]
>>> plan = AllToAllvPlanner(load_topology("nvswitch:4"), {"ep": (0, 1, 2, 3)}, threshold=0.1)
>>> v = plan.update("ep", est.matrix("ep"), now_s=1.0); v.version, v.shift
(1, 1.0)
>>> plan.update("ep", est.matrix("ep") * 1.05, now_s=2.0) is None  # a 5 % shift stays below 10 %
True
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from synth import LoopcollError, Topology
from synth.alltoall_cg import AllToAllvResult, synthesize_alltoallv
from synth.fileio import write_text_atomic

__all__ = ["AllToAllvPlanner", "AllToAllvVersion", "DemandEstimator", "matrix_shift"]

FloatArray = npt.NDArray[np.float64]
MANIFEST_FORMAT = "loopcoll.alltoallv-store/1"


def matrix_shift(old: FloatArray | None, new: FloatArray) -> float:
    """Relative L1 distance ``Σ|new − old| / Σ old`` (1.0 when there is no old matrix or it is 0).

    >>> matrix_shift(np.array([[0, 10.], [10, 0]]), np.array([[0, 11.], [9, 0]]))
    0.1
    """
    if old is None:
        return 1.0
    base = float(np.abs(old).sum())
    if base <= 0:
        return 0.0 if float(np.abs(new).sum()) <= 0 else 1.0
    return float(np.abs(np.asarray(new, dtype=np.float64) - old).sum()) / base


class DemandEstimator:
    """EWMA traffic matrix per communicator (communicator-local ranks, bytes per AllToAllv)."""

    def __init__(self, comms: Mapping[str, Sequence[int]], *, alpha: float = 0.5, nranks: int | None = None) -> None:
        if not 0 < alpha <= 1:
            raise LoopcollError(f"DemandEstimator: alpha must be in (0, 1], got {alpha!r}")
        self.alpha = alpha
        self.nranks = nranks
        self._ranks = {c: tuple(r) for c, r in comms.items()}
        self._local = {c: {g: i for i, g in enumerate(r)} for c, r in self._ranks.items()}
        self._m: dict[str, FloatArray] = {}
        self._seen: dict[str, np.ndarray] = {}
        self.samples = 0
        self.skipped: dict[str, int] = {}
        self._lock = threading.Lock()

    def _skip(self, reason: str) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1

    def observe_row(self, comm: str, src: int, send_bytes: Sequence[int]) -> bool:
        """Fold one rank's split sizes in (``src`` a global rank); False when skipped."""
        ranks = self._ranks.get(comm)
        if ranks is None:
            self._skip("unknown_comm")
            return False
        local = self._local[comm].get(src)
        if local is None:
            self._skip("unknown_rank")
            return False
        k = len(ranks)
        if self.nranks is not None and len(send_bytes) == self.nranks and self.nranks != k:
            row = np.array([send_bytes[g] for g in ranks], dtype=np.float64)
        elif len(send_bytes) == k:
            row = np.asarray(send_bytes, dtype=np.float64)
        elif self.nranks is None and len(send_bytes) > max(ranks):
            row = np.array([send_bytes[g] for g in ranks], dtype=np.float64)
        else:
            self._skip("send_bytes_length")
            return False
        row[local] = 0.0
        with self._lock:
            m = self._m.setdefault(comm, np.zeros((k, k)))
            seen = self._seen.setdefault(comm, np.zeros(k, dtype=bool))
            m[local] = row if not seen[local] else (1 - self.alpha) * m[local] + self.alpha * row
            seen[local] = True
            self.samples += 1
        return True

    def observe(self, samples: Iterable[Any]) -> int:
        """Fold in the ``demand`` samples among ``samples`` (:class:`runtime.formats.telemetry.Sample`); returns
        how many were used."""
        used = 0
        for s in samples:
            if getattr(s, "kind", None) != "demand":
                continue
            sends = (getattr(s, "extra", None) or {}).get("send_bytes")
            if isinstance(sends, list) and self.observe_row(s.comm, s.src, sends):
                used += 1
        return used

    def matrix(self, comm: str) -> FloatArray | None:
        """A copy of the current estimate of ``comm`` (rows never reported are 0), or None."""
        with self._lock:
            m = self._m.get(comm)
            return None if m is None else m.copy()

    def comms(self) -> list[str]:
        """Communicators with an estimate."""
        with self._lock:
            return sorted(self._m)


@dataclass(frozen=True, slots=True)
class AllToAllvVersion:
    """One published AllToAllv version of a communicator, with the matrix it was made for."""

    comm: str
    version: int
    created_t_s: float
    shift: float
    matrix_sha256: str
    total_bytes: float
    completion_time_s: float
    optimal_time_s: float
    gap_pct: float
    synth_time_s: float
    warm: bool
    cg_iterations: int
    lp_pivots: int
    schedule_file: str | None

    def to_dict(self) -> dict[str, Any]:
        """JSON-able fields."""
        return asdict(self)


def _sha(m: FloatArray) -> str:
    return hashlib.sha256(np.ascontiguousarray(m, dtype=np.float64).tobytes()).hexdigest()


class AllToAllvPlanner:
    """Versions per (communicator, ``alltoallv``), re-synthesized warm as the matrix shifts.

    ``topology`` is the full topology or a callable returning the current (e.g. measured) one;
    each communicator's schedule runs on ``topology.communicator(ranks)``.
    """

    def __init__(self, topology: Topology | Callable[[], Topology], comms: Mapping[str, Sequence[int]], *,
                 directory: str | os.PathLike[str] | None = None, threshold: float = 0.05, nchunks: int = 16,
                 solver: str = "highs", log: Callable[[dict[str, Any]], None] | None = None) -> None:
        if not threshold >= 0:
            raise LoopcollError(f"AllToAllvPlanner: threshold must be >= 0, got {threshold!r}")
        self._topology = topology
        self._ranks = {c: tuple(r) for c, r in comms.items()}
        self.directory = None if directory is None else Path(directory)
        self.threshold = threshold
        self.nchunks = nchunks
        self.solver = solver
        self._log = log
        self.versions: dict[str, list[AllToAllvVersion]] = {}
        self.results: dict[str, AllToAllvResult] = {}
        self._matrix: dict[str, FloatArray] = {}

    def _topo(self, comm: str) -> Topology:
        topo = self._topology() if callable(self._topology) else self._topology
        ranks = self._ranks[comm]
        if tuple(ranks) == tuple(range(topo.nranks)):
            return topo
        return topo.communicator(ranks)

    def deployed(self, comm: str) -> AllToAllvVersion | None:
        """The newest version of ``comm``, or None."""
        vs = self.versions.get(comm)
        return vs[-1] if vs else None

    def matrix_of(self, comm: str) -> FloatArray | None:
        """The matrix the deployed version of ``comm`` was made for."""
        m = self._matrix.get(comm)
        return None if m is None else m.copy()

    def update(self, comm: str, matrix: FloatArray, *, now_s: float | None = None) -> AllToAllvVersion | None:
        """Publish a new version when ``matrix`` moved more than ``threshold`` from the deployed
        version's matrix (or there is none); returns it, else None."""
        if comm not in self._ranks:
            raise LoopcollError(f"AllToAllvPlanner: unknown communicator {comm!r}")
        m = np.asarray(matrix, dtype=np.float64)
        if not (m > 0).any():
            return None
        shift = matrix_shift(self._matrix.get(comm), m)
        if comm in self._matrix and shift <= self.threshold:
            return None
        topo = self._topo(comm)
        prev = self.results.get(comm)
        t0 = time.perf_counter()
        res = synthesize_alltoallv(topo, m, nchunks=self.nchunks, solver=self.solver, warm_start=prev)
        took = time.perf_counter() - t0
        if res.schedule is None:
            if self._log is not None:
                self._log({"event": "alltoallv_failed", "comm": comm, "message": res.message})
            return None
        version = len(self.versions.get(comm, [])) + 1
        rel = None
        if self.directory is not None:
            rel = f"alltoallv/{comm}/v{version}.json"
            path = self.directory / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(path, res.schedule.to_json())
        entry = AllToAllvVersion(comm, version, time.time() if now_s is None else float(now_s), shift, _sha(m),
                                 float(m.sum()), res.completion_time_s, res.optimal_time_s, res.gap_pct, took,
                                 res.warm, 0 if res.figures is None else res.figures.cg_iterations,
                                 0 if res.figures is None else res.figures.lp_pivots,
                                 rel)
        self.versions.setdefault(comm, []).append(entry)
        self.results[comm] = res
        self._matrix[comm] = m.copy()
        if self.directory is not None:
            self._write_manifest()
        if self._log is not None:
            self._log({"event": "alltoallv_publish", **entry.to_dict()})
        return entry

    def poll(self, estimator: DemandEstimator, *, now_s: float | None = None) -> list[AllToAllvVersion]:
        """:meth:`update` every communicator with an estimate; returns the versions published."""
        out = []
        for comm in estimator.comms():
            if comm not in self._ranks:
                continue
            m = estimator.matrix(comm)
            if m is not None:
                v = self.update(comm, m, now_s=now_s)
                if v is not None:
                    out.append(v)
        return out

    def _write_manifest(self) -> None:
        assert self.directory is not None
        doc = {"format": MANIFEST_FORMAT,
               "versions": [v.to_dict() for c in sorted(self.versions) for v in self.versions[c]]}
        write_text_atomic(self.directory / "alltoallv" / "manifest.json", json.dumps(doc, sort_keys=True, indent=1) + "\n")

"""AllToAllv schedules: per-pair demand in bytes, each block split into ``nchunks`` equal chunks on paths.

An :class:`AllToAllvSchedule` records the demand matrix it was made for (``demand_bytes[s][d]``
bytes from rank s to rank d; the diagonal is a local copy and always 0) and PATH routes from
:mod:`synth.schedule`: a route moves ``chunks`` of the ``nchunks`` equal chunks of block (s, d),
so a chunk of block (s, d) is ``demand_bytes[s][d] / nchunks`` bytes. A block of 0 bytes has no
route. The bandwidth-term completion time is ``max_a bytes_a / c_a`` over physical links a.

Examples
--------
>>> from synth.topologies import named_topology
>>> from synth.schedule import Hop, Route, RouteKind
>>> topo = named_topology("ring:2")
>>> r01 = Route(RouteKind.PATH, 0, 1, (Hop(0, 1, ("gpu0", "gpu1")),), dest=1)
>>> s = AllToAllvSchedule(2, 1, ((0, 5e9), (0, 0)), (r01,))
>>> s.validate(topo)
>>> s.completion_time_s(topo)  # 5 GB over 50 GB/s
0.1
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from synth.errors import ScheduleError
from synth.schedule import Hop, Route, RouteKind
from synth.topologies.model import Topology

__all__ = ["ALLTOALLV_FORMAT", "AllToAllvSchedule", "check_demand", "read_demand"]

ALLTOALLV_FORMAT = "loopcoll-alltoallv/1"


def check_demand(demand: Any, nranks: int | None = None, *, what: str = "demand") -> tuple[tuple[float, ...], ...]:
    """A square matrix of finite bytes ≥ 0 as a tuple of float rows (diagonal set to 0).

    Accepts nested sequences or a numpy array; raises :class:`ScheduleError` naming the culprit.

    >>> check_demand([[7, 1], [2, 0]])
    ((0.0, 1.0), (2.0, 0.0))
    """
    if isinstance(demand, np.ndarray) and demand.dtype.kind in "iuf":
        arr = demand.astype(np.float64)
        if arr.ndim != 2 or arr.shape[0] != arr.shape[1] or arr.shape[0] < 2:
            raise ScheduleError(f"{what} must be a square matrix with at least 2 rows, got shape {arr.shape}")
        if nranks is not None and arr.shape[0] != nranks:
            raise ScheduleError(f"{what} is {arr.shape[0]}x{arr.shape[0]} but the topology has {nranks} ranks")
        bad = ~(np.isfinite(arr) & (arr >= 0))
        if bad.any():
            s, d = np.argwhere(bad)[0]
            raise ScheduleError(f"{what}[{s}][{d}] must be finite and >= 0 bytes, got {arr[s, d]!r}")
        np.fill_diagonal(arr, 0.0)
        return tuple(map(tuple, arr.tolist()))
    try:
        rows = [list(r) for r in demand]
    except TypeError:
        raise ScheduleError(f"{what} must be a square matrix of bytes, got {type(demand).__name__}") from None
    n = len(rows)
    if n < 2 or any(len(r) != n for r in rows):
        raise ScheduleError(f"{what} must be a square matrix with at least 2 rows, got row lengths "
                            f"{[len(r) for r in rows][:8]}")
    if nranks is not None and n != nranks:
        raise ScheduleError(f"{what} is {n}x{n} but the topology has {nranks} ranks")
    out = []
    for s, row in enumerate(rows):
        vals = []
        for d, v in enumerate(row):
            if isinstance(v, bool):
                raise ScheduleError(f"{what}[{s}][{d}] must be a number of bytes, got {v!r}")
            try:
                x = float(v)
            except (TypeError, ValueError):
                raise ScheduleError(f"{what}[{s}][{d}] must be a number of bytes, got {v!r}") from None
            if not (x >= 0.0) or x == float("inf"):
                raise ScheduleError(f"{what}[{s}][{d}] must be finite and >= 0 bytes, got {v!r}")
            vals.append(0.0 if s == d else x)
        out.append(tuple(vals))
    return tuple(out)


def read_demand(path: str | Path, nranks: int | None = None) -> tuple[tuple[float, ...], ...]:
    """A demand matrix from ``.npy`` (a 2-D numeric array) or JSON (a list of rows, or an object
    with ``"demand_bytes"``); raises :class:`ScheduleError` naming the file.

    >>> import tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "m.json")
    >>> _ = open(p, "w").write('{"demand_bytes": [[0, 3], [1, 0]]}')
    >>> read_demand(p)
    ((0.0, 3.0), (1.0, 0.0))
    """
    p = Path(path)
    what = f"demand file {str(p)!r}"
    try:
        if p.suffix.lower() == ".npy":
            arr = np.load(p, allow_pickle=False)
            if arr.dtype.kind not in "iuf":
                raise ScheduleError(f"{what}: holds a {arr.dtype} array, not numbers")
            return check_demand(arr, nranks, what=what)
        doc = json.loads(p.read_text())
    except OSError as exc:
        raise ScheduleError(f"{what}: cannot read: {exc.strerror or exc}") from None
    except (ValueError, RecursionError) as exc:
        raise ScheduleError(f"{what}: unreadable: {str(exc)[:200]}") from None
    if isinstance(doc, dict):
        if "demand_bytes" not in doc:
            raise ScheduleError(f"{what}: a JSON object needs a 'demand_bytes' matrix")
        doc = doc["demand_bytes"]
    if not isinstance(doc, list):
        raise ScheduleError(f"{what}: expected a list of rows")
    return check_demand(doc, nranks, what=what)


def _freeze(meta: Mapping[str, Any] | None) -> Mapping[str, Any]:
    try:
        return MappingProxyType(json.loads(json.dumps(dict(meta or {}), sort_keys=True, allow_nan=False)))
    except (TypeError, ValueError) as exc:
        raise ScheduleError(f"schedule meta must be JSON-serialisable: {exc}") from exc


@dataclass(frozen=True, eq=False)
class AllToAllvSchedule:
    """An AllToAllv schedule for one demand matrix (see the module docstring)."""

    nranks: int
    nchunks: int
    demand_bytes: tuple[tuple[float, ...], ...]
    routes: tuple[Route, ...]
    topology_fingerprint: str | None = None
    meta: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        if isinstance(self.nranks, bool) or not isinstance(self.nranks, int) or self.nranks < 2:
            raise ScheduleError(f"alltoallv schedule nranks must be an integer >= 2, got {self.nranks!r}")
        if isinstance(self.nchunks, bool) or not isinstance(self.nchunks, int) or self.nchunks < 1:
            raise ScheduleError(f"alltoallv schedule nchunks must be an integer >= 1, got {self.nchunks!r}")
        d = self.demand_bytes
        if not (isinstance(d, tuple) and len(d) == self.nranks and all(type(r) is tuple for r in d)
                and all(len(r) == self.nranks for r in d)):
            d = check_demand(d, self.nranks, what="demand_bytes")
        else:
            d = check_demand(np.array(d, dtype=np.float64) if all(type(x) is float for r in d for x in r) else d,
                             self.nranks, what="demand_bytes")
        object.__setattr__(self, "demand_bytes", d)
        object.__setattr__(self, "routes", tuple(self.routes))
        if not isinstance(self.meta, MappingProxyType):
            object.__setattr__(self, "meta", _freeze(self.meta))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, AllToAllvSchedule):
            return NotImplemented
        return (self.nranks, self.nchunks, self.demand_bytes, self.routes, self.topology_fingerprint,
                dict(self.meta)) == (other.nranks, other.nchunks, other.demand_bytes, other.routes,
                                     other.topology_fingerprint, dict(other.meta))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"AllToAllvSchedule(nranks={self.nranks}, nchunks={self.nchunks}, {len(self.routes)} routes)"

    @property
    def total_bytes(self) -> float:
        """Bytes moved between distinct ranks (the sum of the demand matrix)."""
        return float(sum(map(sum, self.demand_bytes)))

    # -- loads and timing ---------------------------------------------------------------------
    def link_bytes(self) -> dict[tuple[str, str], Fraction]:
        """Exact bytes crossing each physical link (links with no load are absent)."""
        loads: dict[tuple[str, str], Fraction] = defaultdict(Fraction)
        for r in self.routes:
            assert r.dest is not None
            size = Fraction(self.demand_bytes[r.root][r.dest]) * r.chunks / self.nchunks
            for hop in r.hops:
                for key in hop.links:
                    loads[key] += size
        return dict(sorted(loads.items()))

    def completion_time_s(self, topo: Topology) -> float:
        """Bandwidth-term completion time ``max_a bytes_a / c_a`` (exact, then rounded to float)."""
        worst = Fraction(0)
        for key, nbytes in self.link_bytes().items():
            if not topo.has_link(*key):
                raise ScheduleError(f"alltoallv schedule uses link {key[0]}->{key[1]}, absent from {topo.name!r}")
            gbps = topo.exact_capacity(*key)
            if gbps == 0:
                raise ScheduleError(f"alltoallv schedule uses link {key[0]}->{key[1]}, which is down (0 Gbit/s)")
            worst = max(worst, nbytes * 8 / (gbps * 10**9))
        return float(worst)

    # -- validation ---------------------------------------------------------------------------
    def validate(self, topo: Topology) -> None:
        """Prove every block with demand arrives whole: exactly ``nchunks`` chunks over PATH routes
        from its source to its destination on live links, GPU-simple; no route for an empty block.
        """
        if topo.nranks != self.nranks:
            raise ScheduleError(f"alltoallv schedule has {self.nranks} ranks, topology {topo.name!r} has {topo.nranks}")
        got: dict[tuple[int, int], int] = defaultdict(int)
        for i, r in enumerate(self.routes):
            if r.kind is not RouteKind.PATH or r.dest is None:
                raise ScheduleError(f"alltoallv route {i} must be a PATH route with a dest")
            s, d = r.root, r.dest
            if not (0 <= s < self.nranks and 0 <= d < self.nranks) or s == d:
                raise ScheduleError(f"alltoallv route {i}: bad source/destination {s}->{d}")
            if isinstance(r.chunks, bool) or not isinstance(r.chunks, int) or r.chunks < 1:
                raise ScheduleError(f"alltoallv route {i} ({s}->{d}) carries {r.chunks!r} chunks; need >= 1")
            if self.demand_bytes[s][d] == 0:
                raise ScheduleError(f"alltoallv route {i} moves block {s}->{d}, whose demand is 0 bytes")
            if not r.hops or r.hops[0].src != s or r.hops[-1].dst != d:
                raise ScheduleError(f"alltoallv route {i} ({s}->{d}) does not run from {s} to {d}")
            seen = {s}
            for a, b in zip(r.hops[:-1], r.hops[1:]):
                if a.dst != b.src:
                    raise ScheduleError(f"alltoallv route {i} ({s}->{d}) is not contiguous at rank {a.dst}")
            for h in r.hops:
                if h.dst in seen:
                    raise ScheduleError(f"alltoallv route {i} ({s}->{d}) visits rank {h.dst} twice")
                seen.add(h.dst)
                self._check_hop(topo, h, i)
            got[(s, d)] += r.chunks
        for s in range(self.nranks):
            for d in range(self.nranks):
                if s != d and self.demand_bytes[s][d] > 0 and got.get((s, d), 0) != self.nchunks:
                    raise ScheduleError(f"alltoallv block {s}->{d} ({self.demand_bytes[s][d]:g} bytes) gets "
                                        f"{got.get((s, d), 0)} chunks, needs {self.nchunks}")

    @staticmethod
    def _check_hop(topo: Topology, h: Hop, i: int) -> None:
        if len(h.path) < 2 or h.path[0] != topo.gpu_id(h.src) or h.path[-1] != topo.gpu_id(h.dst):
            raise ScheduleError(f"alltoallv route {i}: hop {h.src}->{h.dst} path {h.path} does not join their GPUs")
        for node in h.path[1:-1]:
            if topo.node(node).is_gpu:
                raise ScheduleError(f"alltoallv route {i}: hop {h.src}->{h.dst} passes GPU {node} inside a hop")
        for key in h.links:
            if not topo.has_link(*key) or topo.exact_capacity(*key) == 0:
                raise ScheduleError(f"alltoallv route {i}: link {key[0]}->{key[1]} absent or down on {topo.name!r}")

    # -- JSON ---------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "format": ALLTOALLV_FORMAT,
            "collective": "alltoallv",
            "nranks": self.nranks,
            "nchunks": self.nchunks,
            "demand_bytes": [list(r) for r in self.demand_bytes],
            "routes": [{"root": r.root, "dest": r.dest, "chunks": r.chunks,
                        "hops": [{"src": h.src, "dst": h.dst, "path": list(h.path)} for h in r.hops]}
                       for r in self.routes],
            "topology_fingerprint": self.topology_fingerprint,
            "meta": dict(self.meta),
        }

    def to_json(self) -> str:
        """Deterministic JSON text; :meth:`from_json` reads it back to an equal schedule."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":")) + "\n"

    @classmethod
    def from_json(cls, text: str, *, source: str = "<string>") -> AllToAllvSchedule:
        """Read :meth:`to_json` text back; raises :class:`ScheduleError` naming ``source``."""
        try:
            doc = json.loads(text)
        except (json.JSONDecodeError, ValueError, RecursionError) as exc:
            raise ScheduleError(f"{source}: unreadable alltoallv schedule JSON: {str(exc)[:200]}") from None
        if not isinstance(doc, dict) or doc.get("format") != ALLTOALLV_FORMAT:
            raise ScheduleError(f"{source}: not a {ALLTOALLV_FORMAT} document")
        try:
            routes = tuple(
                Route(RouteKind.PATH, int(r["root"]), int(r["chunks"]),
                      tuple(Hop(int(h["src"]), int(h["dst"]), tuple(str(x) for x in h["path"])) for h in r["hops"]),
                      dest=int(r["dest"]))
                for r in _seq(doc["routes"]))
            return cls(int(doc["nranks"]), int(doc["nchunks"]), check_demand(doc["demand_bytes"]), routes,
                       doc.get("topology_fingerprint"), doc.get("meta") or {})
        except (KeyError, TypeError, ValueError) as exc:
            raise ScheduleError(f"{source}: malformed alltoallv schedule: {exc!r}") from None


def _seq(x: Any) -> Sequence[Any]:
    if not isinstance(x, list):
        raise TypeError("routes must be a list")
    return x

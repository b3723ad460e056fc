"""Fault injection: emulate a topology's link speeds on gloo ranks and slow chosen links down (docs/live.md).

An :class:`Emulation` maps an emulated topology (``hpn:1x2x2``, ``hpn:1x2x4``, ...) onto the ranks of a
communicator (rank ``r`` plays the GPU of rank ``r``) with every capacity divided by ``gbps_scale``
(``1000``: a 400 Gbit/s NIC becomes 0.4 Gbit/s = 50 MB/s, well below what loopback TCP moves, so the
emulated links, not the CPU, set the pace). A :class:`Throttle` in each executor process paces its sends:
every link a send crosses (the pair's switch path, ``msccl_xml.switch_path``) is a **token bucket of depth 0**
(a pacer): a message of ``b`` bytes on link ``a`` finishes ``b / rate_a`` after the link is free, and the
message is posted once every link on its path has finished it. A link crossed by the sends of ``k`` ranks is
split evenly, ``rate_a = capacity_a / k`` per sender (exact when ``k = 1``, as for every link of
``hpn:1x2x2``; a static share otherwise).

:class:`Fault` s change capacities while active (from a collective ``start_seq`` or a time ``start_s`` on,
until ``end_seq`` / ``end_s``): a named failure of the topology (``fail2``: rank 0's NIC at 1/8), a link
(and its reverse) times ``factor``, a rank's injection (the links leaving its GPU) times ``factor``, or one
ordered pair at ``factor`` of its path's speed. Faults are off unless configured: by the ``emulation``
argument of :class:`~runtime.executor.Executor`, or the environment variable ``LOOPCOLL_EMULATION`` (a JSON
object in the format below, or ``@path`` of a file holding one).

Examples
--------
>>> emu = emulation_from_dict({"format": "loopcoll.emulation/1", "topology": "hpn:1x2x2", "gbps_scale": 1000,
...     "faults": [{"failure": "fail2", "start_seq": 10, "end_seq": 20}]})
>>> th = Throttle(emu, rank=0)
>>> th.begin(seq=1, t_s=0.0), th.rate_Bps(2)          # gpu0 -> tor0.0 -> gpu2 at 400 Gbit/s / 1000
((), 50000000.0)
>>> [f.label for f in th.begin(seq=10, t_s=0.0)], th.rate_Bps(2)   # fail2: rank 0's NIC at 50 Gbit/s
(['fail2'], 6250000.0)
>>> th.release_times([(2, 500_000)], now=100.0)       # 0.5 MB at 6.25 MB/s: posted 80 ms later
[100.08]
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from msccl_xml import switch_path
from synth import Link, LoopcollError, Topology, load_topology

from .errors import ExecutorError

__all__ = ["EMULATION_ENV", "EMULATION_FORMAT", "Emulation", "Fault", "Throttle", "emulation_from_dict",
           "emulation_from_env"]

EMULATION_FORMAT = "loopcoll.emulation/1"
EMULATION_ENV = "LOOPCOLL_EMULATION"
LinkKey = tuple[str, str]


class EmulationError(ExecutorError):
    """An emulation configuration is malformed (names the culprit)."""


@dataclass(frozen=True)
class Fault:
    """A capacity change while active: ``[start_seq, end_seq)`` collectives and/or ``[start_s, end_s)`` seconds.

    Exactly one of ``failure`` (a named failure scenario of the topology), ``link`` (``(src, dst)`` node
    ids; its reverse too), ``rank`` (the links leaving that rank's GPU) or ``pair`` (``(src, dst)`` ranks)
    says what; ``factor`` the fraction of speed kept (not used with ``failure``). Times are seconds since
    the throttle started (per process); collective numbers are the executor's ``seq`` (the same on every
    rank), so a fault bounded by ``start_seq``/``end_seq`` starts and ends at the same collective everywhere.
    """

    failure: str | None = None
    link: LinkKey | None = None
    rank: int | None = None
    pair: tuple[int, int] | None = None
    factor: float = 1.0
    start_seq: int | None = None
    end_seq: int | None = None
    start_s: float | None = None
    end_s: float | None = None

    def active(self, seq: int, t_s: float) -> bool:
        """Whether the fault applies to collective ``seq`` started ``t_s`` seconds after the throttle's start."""
        if self.start_seq is not None and seq < self.start_seq:
            return False
        if self.end_seq is not None and seq >= self.end_seq:
            return False
        if self.start_s is not None and t_s < self.start_s:
            return False
        return not (self.end_s is not None and t_s >= self.end_s)

    @property
    def label(self) -> str:
        """A short name: ``fail2``, ``gpu0->tor0.0 x0.1``, ``rank 3 x0.5``, ``pair 0->2 x0.2``."""
        if self.failure is not None:
            return self.failure
        if self.link is not None:
            return f"{self.link[0]}->{self.link[1]} x{self.factor:g}"
        if self.rank is not None:
            return f"rank {self.rank} x{self.factor:g}"
        assert self.pair is not None
        return f"pair {self.pair[0]}->{self.pair[1]} x{self.factor:g}"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k in ("failure", "link", "rank", "pair", "start_seq", "end_seq", "start_s", "end_s"):
            v = getattr(self, k)
            if v is not None:
                out[k] = list(v) if isinstance(v, tuple) else v
        if self.failure is None:
            out["factor"] = self.factor
        return out


@dataclass(frozen=True)
class Emulation:
    """An emulated topology on the ranks, its speed scale and the faults to inject (``loopcoll.emulation/1``)."""

    topology: str
    gbps_scale: float = 1000.0
    faults: tuple[Fault, ...] = ()
    _topo: Any = field(default=None, compare=False, repr=False)

    def nominal(self) -> Topology:
        """The emulated topology at its nameplate speeds."""
        if self._topo is None:
            object.__setattr__(self, "_topo", load_topology(self.topology))
        return self._topo  # type: ignore[no-any-return]

    def scaled_topology(self) -> Topology:
        """The topology the ranks actually run at: every capacity divided by ``gbps_scale``.

        This is the topology to give the controller: telemetry measures real bytes per second.
        """
        nom = self.nominal()
        links = [Link(lk.src, lk.dst, lk.gbps / self.gbps_scale, lk.latency_us) for lk in nom.links]
        return nom.with_links(links, name=f"{nom.name}/{self.gbps_scale:g}")

    def to_dict(self) -> dict[str, Any]:
        return {"format": EMULATION_FORMAT, "topology": self.topology, "gbps_scale": self.gbps_scale,
                "faults": [f.to_dict() for f in self.faults]}

    def to_json(self) -> str:
        """The configuration as one JSON line (for ``LOOPCOLL_EMULATION``)."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))


def _pair(v: Any, where: str, kind: type) -> tuple[Any, Any]:
    if not isinstance(v, (list, tuple)) or len(v) != 2 or not all(isinstance(x, kind) and not isinstance(x, bool)
                                                                  for x in v):
        raise EmulationError(f"{where}: expected a list of two {kind.__name__}s, got {v!r}"[:300])
    return (v[0], v[1])


def emulation_from_dict(doc: Any) -> Emulation:
    """Validate a ``loopcoll.emulation/1`` document; raises :class:`EmulationError` naming the culprit."""
    if not isinstance(doc, Mapping) or doc.get("format") != EMULATION_FORMAT:
        raise EmulationError(f"emulation: expected an object with format {EMULATION_FORMAT!r}")
    unknown = set(doc) - {"format", "topology", "gbps_scale", "faults"}
    if unknown:
        raise EmulationError(f"emulation: unknown key(s) {sorted(unknown)}")
    topo = doc.get("topology")
    if not isinstance(topo, str) or not topo:
        raise EmulationError("emulation.topology: expected a topology spec such as 'hpn:1x2x2'")
    scale = doc.get("gbps_scale", 1000.0)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale) or scale <= 0:
        raise EmulationError(f"emulation.gbps_scale: expected a number > 0, got {scale!r}")
    raw = doc.get("faults", [])
    if not isinstance(raw, list):
        raise EmulationError("emulation.faults: expected a list")
    faults = []
    for i, f in enumerate(raw):
        where = f"emulation.faults[{i}]"
        if not isinstance(f, Mapping):
            raise EmulationError(f"{where}: expected an object")
        bad = set(f) - {"failure", "link", "rank", "pair", "factor", "start_seq", "end_seq", "start_s", "end_s"}
        if bad:
            raise EmulationError(f"{where}: unknown key(s) {sorted(bad)}")
        what = [k for k in ("failure", "link", "rank", "pair") if f.get(k) is not None]
        if len(what) != 1:
            raise EmulationError(f"{where}: give exactly one of failure, link, rank, pair")
        factor = f.get("factor", 1.0)
        if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not 0 < factor <= 1:
            raise EmulationError(f"{where}.factor: expected a number in (0, 1], got {factor!r}")
        kw: dict[str, Any] = {"factor": float(factor)}
        for k in ("start_seq", "end_seq"):
            v = f.get(k)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
                raise EmulationError(f"{where}.{k}: expected an integer >= 0, got {v!r}")
            kw[k] = v
        for k in ("start_s", "end_s"):
            v = f.get(k)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)):
                raise EmulationError(f"{where}.{k}: expected a number of seconds, got {v!r}")
            kw[k] = None if v is None else float(v)
        if what[0] == "failure":
            if not isinstance(f["failure"], str):
                raise EmulationError(f"{where}.failure: expected a failure name such as 'fail2'")
            kw["failure"] = f["failure"]
        elif what[0] == "link":
            kw["link"] = _pair(f["link"], f"{where}.link", str)
        elif what[0] == "pair":
            kw["pair"] = _pair(f["pair"], f"{where}.pair", int)
        else:
            r = f["rank"]
            if isinstance(r, bool) or not isinstance(r, int) or r < 0:
                raise EmulationError(f"{where}.rank: expected a rank, got {r!r}")
            kw["rank"] = r
        faults.append(Fault(**kw))
    emu = Emulation(topo, float(scale), tuple(faults))
    try:
        nom = emu.nominal()
        for i, f in enumerate(faults):
            if f.failure is not None:
                nom.with_failure(f.failure)
            if f.link is not None:
                nom.link(*f.link)
            for r in ([f.rank] if f.rank is not None else list(f.pair) if f.pair is not None else []):
                if not 0 <= r < nom.nranks:
                    raise EmulationError(f"emulation.faults[{i}]: rank {r} not in {nom.name} ({nom.nranks} ranks)")
    except EmulationError:
        raise
    except LoopcollError as exc:
        raise EmulationError(f"emulation: {exc}") from None
    return emu


def emulation_from_env(environ: Mapping[str, str] | None = None) -> Emulation | None:
    """The emulation in ``$LOOPCOLL_EMULATION`` (JSON, or ``@path``); ``None`` when unset or empty."""
    text = (os.environ if environ is None else environ).get(EMULATION_ENV, "").strip()
    if not text:
        return None
    if text.startswith("@"):
        try:
            with open(text[1:], encoding="utf-8") as fh:
                text = fh.read(1 << 20)
        except OSError as exc:
            raise EmulationError(f"{EMULATION_ENV}: cannot read {text[1:]!r}: {exc.strerror}") from None
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise EmulationError(f"{EMULATION_ENV}: not JSON: {exc}") from None
    return emulation_from_dict(doc)


class Throttle:
    """Paces one rank's sends to the emulated link speeds (depth-0 token buckets; see the module docstring).

    Not thread-safe: the executor calls it from its collective thread only.
    """

    def __init__(self, emulation: Emulation, rank: int, *, world: int | None = None, clock: Any = None) -> None:
        import time

        self.emulation = emulation
        self.rank = rank
        self._clock = clock or time.perf_counter
        self._t0 = self._clock()
        nom = emulation.scaled_topology()
        if world is not None and world != nom.nranks:
            raise EmulationError(f"emulation: {emulation.topology} has {nom.nranks} ranks, the communicator {world}")
        if not 0 <= rank < nom.nranks:
            raise EmulationError(f"emulation: rank {rank} not in {emulation.topology}")
        self._nom = nom
        self._cap: dict[LinkKey, float] = {lk.key: lk.gbps * 1e9 / 8 for lk in nom.links}
        paths: dict[tuple[int, int], tuple[LinkKey, ...]] = {}
        for u in range(nom.nranks):
            for v in range(nom.nranks):
                if u == v:
                    continue
                try:
                    p = switch_path(nom, nom.gpu_id(u), nom.gpu_id(v))
                except LoopcollError:
                    continue
                paths[(u, v)] = tuple(zip(p[:-1], p[1:]))
        senders: dict[LinkKey, set[int]] = {}
        for (u, _v), keys in paths.items():
            for a in keys:
                senders.setdefault(a, set()).add(u)
        self._share = {a: len(s) for a, s in senders.items()}
        self._paths = {v: keys for (u, v), keys in paths.items() if u == rank}
        self._free: dict[Any, float] = {}
        self._factor: dict[LinkKey, float] = {}
        self._pair_factor: dict[int, float] = {}
        self.active: tuple[Fault, ...] = ()
        self._failure_factors: dict[str, dict[LinkKey, float]] = {}
        for f in emulation.faults:
            if f.failure is not None and f.failure not in self._failure_factors:
                healthy = emulation.nominal()  # failures are defined at nameplate speeds (fail2: 50 Gbit/s)
                deg = healthy.with_failure(f.failure)
                self._failure_factors[f.failure] = {
                    lk.key: (deg.link(*lk.key).gbps / lk.gbps if lk.gbps > 0 else 1.0) for lk in healthy.links
                    if deg.link(*lk.key).gbps != lk.gbps}

    def elapsed_s(self) -> float:
        """Seconds since this throttle started (the clock of time-bounded faults)."""
        return float(self._clock() - self._t0)

    def begin(self, seq: int, t_s: float | None = None) -> tuple[Fault, ...]:
        """Set the faults active for collective ``seq`` (``t_s``: seconds since start, default now)."""
        t = self.elapsed_s() if t_s is None else t_s
        active = tuple(f for f in self.emulation.faults if f.active(seq, t))
        if active != self.active:
            self.active = active
            self._factor = {}
            self._pair_factor = {}
            for f in active:
                if f.failure is not None:
                    for k, x in self._failure_factors[f.failure].items():
                        self._factor[k] = self._factor.get(k, 1.0) * x
                elif f.link is not None:
                    for k in (f.link, (f.link[1], f.link[0])):
                        if k in self._cap:
                            self._factor[k] = self._factor.get(k, 1.0) * f.factor
                elif f.rank is not None:
                    src = self._nom.gpu_id(f.rank)
                    for k in self._cap:
                        if k[0] == src:
                            self._factor[k] = self._factor.get(k, 1.0) * f.factor
                elif f.pair is not None and f.pair[0] == self.rank:
                    self._pair_factor[f.pair[1]] = self._pair_factor.get(f.pair[1], 1.0) * f.factor
        return active

    def _rate(self, a: LinkKey) -> float:
        return self._cap[a] * self._factor.get(a, 1.0) / self._share.get(a, 1)

    def rate_Bps(self, peer: int) -> float:
        """This rank's current emulated bytes/s to ``peer`` (its path's slowest link; inf: not emulated)."""
        keys = self._paths.get(peer)
        if not keys:
            return math.inf
        return min(self._rate(a) for a in keys) * self._pair_factor.get(peer, 1.0)

    def release_times(self, sends: Sequence[tuple[int, int]], now: float | None = None) -> list[float]:
        """Clock times at which to post each ``(peer, nbytes)`` send (in order; links are used in this order)."""
        t = self._clock() if now is None else now
        out = []
        for peer, nbytes in sends:
            keys = self._paths.get(peer)
            if not keys or nbytes <= 0:
                out.append(t)
                continue
            done = t
            for a in keys:
                start = max(t, self._free.get(a, t))
                fin = start + nbytes / self._rate(a)
                self._free[a] = fin
                done = max(done, fin)
            pf = self._pair_factor.get(peer)
            if pf is not None:
                rate = min(self._rate(a) for a in keys) * pf
                start = max(t, self._free.get(("pair", peer), t))
                fin = start + nbytes / rate
                self._free[("pair", peer)] = fin
                done = max(done, fin)
            out.append(round(done, 9))
        return out

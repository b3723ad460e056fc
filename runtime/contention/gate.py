"""Contention signal ρ and a sequential gate: SUSTAINED vs TRANSIENT vs CLEAR.

Formulas (Gaussian, known σ; a higher mean is contention):

* **EWMA / EWVar baseline.** ``m_t = a x_t + (1 − a) m_{t−1}`` (initialised with the first x),
  ``v_t = (1 − a)(v_{t−1} + a (x_t − m_{t−1})²)``.
* **Contention ratio.** ``ρ = x / μ0`` with ``μ0`` the healthy baseline of the same (key, size bucket):
  one threshold fits every link and size.
* **Wald SPRT** for H0: μ0 against H1: μ1, ``λ_i = (μ1 − μ0)/σ² · (x_i − (μ0 + μ1)/2)``,
  ``Λ_n = Σ λ_i``; accept H1 at ``Λ_n ≥ A = ln((1 − β)/α)``, H0 at ``Λ_n ≤ B = ln(β/(1 − α))``.
  With ``D = (μ1 − μ0)²/(2σ²)``: ``E0[N] ≈ ((1 − α)B + αA)/(−D)``, ``E1[N] ≈ (βB + (1 − β)A)/D``.
* **Page's CUSUM** with the same λ: ``S_t = max(0, S_{t−1} + λ_t)``, alarm at ``S_t ≥ h``.

The gate (:class:`ContentionGate`) runs one SPRT per key on ρ with ``μ0 = 1``, ``μ1 = 1 + effect``
and ``σ`` the learnt relative noise. Each ``λ_i`` is capped at ``max_llr`` (default ``A / 3``): one
huge sample (a microburst) can move the statistic by at most a third of the way, so an elevated
episode needs at least three samples to be called SUSTAINED; a 1–2-sample spike ends in H0 and is
reported TRANSIENT. Samples never enter the baseline while elevated.

Examples
--------
>>> s = Sprt(mu0=100.0, mu1=80.0, sigma=10.0, alpha=0.01, beta=0.01)
>>> round(s.upper, 3), round(s.drift, 3)
(4.595, 2.0)
>>> [s.update(x) for x in (79.0, 81.0, 78.0)]
[None, None, 'h1']
>>> g = ContentionGate(warmup=5)
>>> for lat in (100, 101, 99, 100, 100):
...     _ = g.observe("ring", lat)
>>> [g.observe("ring", 300.0).state.value for _ in range(3)]
['pending', 'pending', 'sustained']
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import numpy as np

from runtime.errors import ProfileError

__all__ = ["ContentionGate", "ContentionState", "ContentionVerdict", "Cusum", "EwStats", "GateConfig", "Sprt",
           "cusum_monte_carlo", "sprt_monte_carlo", "wald_expected_n"]


def _num(name: str, value: Any, lo: float, hi: float, *, open_lo: bool = True, open_hi: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ProfileError(f"contention: `{name}` must be a finite number, got {value!r}")
    if (value <= lo if open_lo else value < lo) or (value >= hi if open_hi else value > hi):
        raise ProfileError(f"contention: `{name}` must lie in {'(' if open_lo else '['}{lo}, {hi}{')' if open_hi else ']'}, "
                           f"got {value!r}")
    return float(value)


@dataclass(slots=True)
class EwStats:
    """Exponentially weighted mean and variance (river's ``EWMean``/``EWVar`` recursion).

    >>> e = EwStats(0.3)
    >>> for x in (10, 20, 30):
    ...     e.update(x)
    >>> round(e.mean, 1)
    18.1
    """

    alpha: float
    mean: float = 0.0
    var: float = 0.0
    count: int = 0

    def update(self, x: float) -> None:
        if self.count == 0:
            self.mean, self.var = float(x), 0.0
        else:
            d = float(x) - self.mean
            self.mean += self.alpha * d
            self.var = (1.0 - self.alpha) * (self.var + self.alpha * d * d)
        self.count += 1

    @property
    def std(self) -> float:
        return math.sqrt(max(self.var, 0.0))


def _thresholds(alpha: float, beta: float) -> tuple[float, float]:
    return math.log((1.0 - beta) / alpha), math.log(beta / (1.0 - alpha))


def wald_expected_n(mu0: float, mu1: float, sigma: float, alpha: float, beta: float) -> tuple[float, float]:
    """Wald's approximations ``(E0[N], E1[N])`` (no overshoot).

    >>> [round(v, 2) for v in wald_expected_n(100, 80, 10, 0.01, 0.01)]
    [2.25, 2.25]
    """
    a, b = _thresholds(alpha, beta)
    d = (mu1 - mu0) ** 2 / (2.0 * sigma ** 2)
    return ((1 - alpha) * b + alpha * a) / -d, (beta * b + (1 - beta) * a) / d


@dataclass(slots=True)
class Sprt:
    """Wald's SPRT, Gaussian with known σ; ``update`` returns ``"h1"``, ``"h0"`` or ``None`` (continue).

    A decision restarts the test at ``Λ = 0``. ``max_llr`` (optional) caps every ``λ_i`` from above
    (evidence for H1 per sample is bounded, evidence for H0 is not: a healthy sample ends a spike).
    """

    mu0: float
    mu1: float
    sigma: float
    alpha: float = 0.01
    beta: float = 0.01
    max_llr: float | None = None
    llr: float = 0.0
    n: int = 0
    upper: float = field(init=False)
    lower: float = field(init=False)

    def __post_init__(self) -> None:
        _num("alpha", self.alpha, 0.0, 0.5)
        _num("beta", self.beta, 0.0, 0.5)
        _num("sigma", self.sigma, 0.0, math.inf)
        if self.mu0 == self.mu1:
            raise ProfileError("contention: SPRT needs mu1 != mu0")
        self.upper, self.lower = _thresholds(self.alpha, self.beta)

    @property
    def drift(self) -> float:
        """``D = (μ1 − μ0)² / (2σ²)``, the mean |λ| per sample."""
        return (self.mu1 - self.mu0) ** 2 / (2.0 * self.sigma ** 2)

    def llr_of(self, x: float) -> float:
        lam = (self.mu1 - self.mu0) / self.sigma ** 2 * (x - (self.mu0 + self.mu1) / 2.0)
        if self.max_llr is not None:
            lam = min(self.max_llr, lam)
        return lam

    def update(self, x: float, *, evidence: bool = True) -> str | None:
        """Fold in ``x``; ``evidence=False`` counts it only towards H0 (its λ capped at 0)."""
        lam = self.llr_of(x)
        self.llr += lam if evidence else min(lam, 0.0)
        self.n += 1
        if self.llr >= self.upper:
            self.reset()
            return "h1"
        if self.llr <= self.lower:
            self.reset()
            return "h0"
        return None

    def reset(self) -> None:
        self.llr, self.n = 0.0, 0


@dataclass(slots=True)
class Cusum:
    """Page's CUSUM with the SPRT's λ: ``S = max(0, S + λ)``, alarm (returns True, restarts) at ``S ≥ h``.

    >>> c = Cusum(mu0=100.0, mu1=80.0, sigma=10.0, h=4.6)
    >>> [c.update(x) for x in (80.0, 80.0, 80.0)]
    [False, False, True]
    """

    mu0: float
    mu1: float
    sigma: float
    h: float
    stat: float = 0.0

    def update(self, x: float) -> bool:
        lam = (self.mu1 - self.mu0) / self.sigma ** 2 * (x - (self.mu0 + self.mu1) / 2.0)
        self.stat = max(0.0, self.stat + lam)
        if self.stat >= self.h:
            self.stat = 0.0
            return True
        return False


def sprt_monte_carlo(mu0: float, mu1: float, sigma: float, alpha: float, beta: float, *, true_mu: float,
                     trials: int = 20_000, seed: int = 0, max_n: int = 10_000) -> tuple[float, float]:
    """Vectorised Monte Carlo of :class:`Sprt`: ``(P(accept H1), mean sample number)`` when data ~ N(true_mu, σ).

    >>> p, n = sprt_monte_carlo(100, 80, 10, 0.01, 0.01, true_mu=80, trials=2000)
    >>> p > 0.98 and 2.5 < n < 4.0
    True
    """
    a, b = _thresholds(alpha, beta)
    rng = np.random.default_rng(seed)
    k = (mu1 - mu0) / sigma ** 2
    llr = np.zeros(trials)
    n = np.zeros(trials, dtype=np.int64)
    h1 = np.zeros(trials, dtype=bool)
    active = np.arange(trials)
    for step in range(1, max_n + 1):
        x = rng.normal(true_mu, sigma, active.size)
        llr[active] += k * (x - (mu0 + mu1) / 2.0)
        up, low = llr[active] >= a, llr[active] <= b
        done = up | low
        h1[active[up]] = True
        n[active[done]] = step
        active = active[~done]
        if active.size == 0:
            break
    return float(h1.mean()), float(n.mean())


def cusum_monte_carlo(mu0: float, mu1: float, sigma: float, h: float, *, true_mu: float, runs: int = 20_000,
                      seed: int = 0, max_n: int = 1_000_000) -> float:
    """Mean run length of :class:`Cusum` from ``S = 0`` to its first alarm when data ~ N(true_mu, σ).

    ``true_mu = mu0``: ARL0 (mean time to a false alarm); ``true_mu = mu1``: detection delay.

    >>> 2.5 < cusum_monte_carlo(100, 80, 10, 4.6, true_mu=80, runs=2000) < 3.5
    True
    """
    rng = np.random.default_rng(seed)
    k = (mu1 - mu0) / sigma ** 2
    s = np.zeros(runs)
    length = np.zeros(runs, dtype=np.int64)
    active = np.arange(runs)
    for step in range(1, max_n + 1):
        x = rng.normal(true_mu, sigma, active.size)
        s[active] = np.maximum(0.0, s[active] + k * (x - (mu0 + mu1) / 2.0))
        done = s[active] >= h
        length[active[done]] = step
        active = active[~done]
        if active.size == 0:
            break
    length[active] = max_n
    return float(length.mean())


class ContentionState(str, Enum):
    """The gate's verdict for one key after one sample."""

    WARMUP = "warmup"  # learning the healthy baseline
    CLEAR = "clear"  # healthy (H0 accepted without an elevated episode, or no test running)
    PENDING = "pending"  # elevated samples, no decision yet
    TRANSIENT = "transient"  # an elevated episode ended in H0: a spike, do not act
    SUSTAINED = "sustained"  # H1 accepted: act (unless cooling down)
    COOLDOWN = "cooldown"  # H1 accepted within the cool-down after a reconfiguration: hold


@dataclass(frozen=True, slots=True)
class GateConfig:
    """Parameters of :class:`ContentionGate`.

    ``effect``: the smallest latency increase worth acting on (H1: ρ = 1 + effect); ``alpha``/``beta``:
    the SPRT's error rates per test; ``warmup``: samples per key that only train the baseline;
    ``ew_alpha``: EWMA/EWVar weight; ``min_sigma``: floor on the relative noise σ/μ0;
    ``max_llr``: clip per sample (``None``: ``A / 3``); ``cooldown``: samples after
    :meth:`ContentionGate.reconfigured` during which H1 is reported COOLDOWN; ``elevated``: ρ above
    ``1 + elevated · effect`` marks a sample as part of an episode; ``elevated_sigmas``: it must also lie
    more than that many learnt σ above 1 (only elevated samples move the SPRT towards H1).
    """

    effect: float = 0.2
    alpha: float = 0.01
    beta: float = 0.01
    warmup: int = 8
    ew_alpha: float = 0.1
    min_sigma: float = 0.02
    max_llr: float | None = None
    cooldown: int = 3
    elevated: float = 0.5
    elevated_sigmas: float = 4.0

    def __post_init__(self) -> None:
        _num("effect", self.effect, 0.0, math.inf)
        _num("alpha", self.alpha, 0.0, 0.5)
        _num("beta", self.beta, 0.0, 0.5)
        _num("ew_alpha", self.ew_alpha, 0.0, 1.0, open_hi=False)
        _num("min_sigma", self.min_sigma, 0.0, math.inf)
        _num("elevated", self.elevated, 0.0, 1.0, open_hi=False)
        _num("elevated_sigmas", self.elevated_sigmas, 0.0, math.inf, open_lo=False)
        if self.max_llr is not None:
            _num("max_llr", self.max_llr, 0.0, math.inf)
        for name in ("warmup", "cooldown"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < (2 if name == "warmup" else 0):
                raise ProfileError(f"contention: `{name}` must be an integer >= {2 if name == 'warmup' else 0}, got {v!r}")

    @classmethod
    def from_dict(cls, doc: Any) -> GateConfig:
        if not isinstance(doc, dict):
            raise ProfileError(f"contention: gate config must be an object, got {type(doc).__name__}")
        unknown = sorted(set(doc) - set(cls.__dataclass_fields__))
        if unknown:
            raise ProfileError(f"contention: unknown gate keys {unknown}")
        return cls(**doc)


@dataclass(frozen=True, slots=True)
class ContentionVerdict:
    """One sample's outcome for ``key``: state, ρ, the SPRT statistic, samples in the current test."""

    key: str
    state: ContentionState
    rho: float
    llr: float
    n: int
    baseline: float

    @property
    def act(self) -> bool:
        """True for SUSTAINED only: the controller may reconfigure."""
        return self.state is ContentionState.SUSTAINED


@dataclass(slots=True)
class _Track:
    stats: EwStats
    sprt: Sprt | None = None
    episode: int = 0  # elevated samples since the test (re)started
    cooldown: int = 0
    mu0: float = 0.0
    sigma: float = 0.0


class ContentionGate:
    """Per-key (link, pair or collective × size bucket) ρ tracking with an SPRT gate.

    ``observe(key, x)`` takes a latency (or FCT, or 1/throughput): higher is worse. The first
    ``warmup`` samples learn μ0 and σ by EWMA/EWVar; afterwards each sample's ρ = x/μ0 feeds the
    SPRT; samples the SPRT accepts as healthy (H0, no elevated episode) keep training the baseline.
    """

    def __init__(self, config: GateConfig | None = None, **overrides: Any) -> None:
        base = config or GateConfig()
        self.config = GateConfig(**{**{f: getattr(base, f) for f in GateConfig.__dataclass_fields__}, **overrides})
        self._tracks: dict[str, _Track] = {}
        self.counts: dict[str, int] = {s.value: 0 for s in ContentionState}

    def _sprt(self, track: _Track) -> Sprt:
        cfg = self.config
        sigma = max(cfg.min_sigma, track.stats.std / track.stats.mean if track.stats.mean > 0 else cfg.min_sigma)
        upper = math.log((1.0 - cfg.beta) / cfg.alpha)
        clip = cfg.max_llr if cfg.max_llr is not None else upper / 3.0
        track.mu0, track.sigma = track.stats.mean, sigma
        return Sprt(1.0, 1.0 + cfg.effect, sigma, cfg.alpha, cfg.beta, max_llr=clip)

    def observe(self, key: str, x: float) -> ContentionVerdict:
        """Fold in one measurement ``x > 0`` for ``key``; returns the verdict."""
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or x <= 0:
            raise ProfileError(f"contention: sample for {key!r} must be a finite number > 0, got {x!r}")
        cfg = self.config
        track = self._tracks.get(key)
        if track is None:
            track = self._tracks[key] = _Track(EwStats(cfg.ew_alpha))
        if track.sprt is None:
            track.stats.update(x)
            if track.stats.count >= cfg.warmup:
                track.sprt = self._sprt(track)
            return self._emit(key, ContentionState.WARMUP, x / track.stats.mean, track)
        rho = x / track.mu0
        # elevated: above 1 + elevated·effect and above the noise (elevated_sigmas σ); a sample that
        # is not elevated is evidence only for H0, so noise next to a 1–2-sample burst cannot complete it
        elevated = rho > 1.0 + max(cfg.elevated * cfg.effect, cfg.elevated_sigmas * track.sigma)
        if elevated:
            track.episode += 1
        decision = track.sprt.update(rho, evidence=elevated)
        if track.cooldown > 0:
            track.cooldown -= 1
        if decision == "h1":
            track.episode = 0
            state = ContentionState.COOLDOWN if track.cooldown > 0 else ContentionState.SUSTAINED
        elif decision == "h0":
            state = ContentionState.TRANSIENT if track.episode > 0 else ContentionState.CLEAR
            track.episode = 0
            if state is ContentionState.CLEAR:
                track.stats.update(x)
                track.sprt = self._sprt(track)
        else:
            state = ContentionState.PENDING if track.episode > 0 else ContentionState.CLEAR
            if state is ContentionState.CLEAR and track.sprt.llr <= 0:
                track.stats.update(x)
        return self._emit(key, state, rho, track)

    def _emit(self, key: str, state: ContentionState, rho: float, track: _Track) -> ContentionVerdict:
        self.counts[state.value] += 1
        sp = track.sprt
        return ContentionVerdict(key, state, float(rho), sp.llr if sp else 0.0, sp.n if sp else 0,
                                 track.mu0 if sp else track.stats.mean)

    def reconfigured(self, key: str | None = None, *, relearn: bool = True) -> None:
        """A reconfiguration happened (for ``key``, or all): start the cool-down and, with ``relearn``,
        learn the new configuration's baseline afresh (its healthy latency differs)."""
        keys = [key] if key is not None else sorted(self._tracks)
        for k in keys:
            track = self._tracks.get(k)
            if track is None:
                continue
            if relearn:
                self._tracks[k] = _Track(EwStats(self.config.ew_alpha), cooldown=self.config.cooldown)
            else:
                track.cooldown = self.config.cooldown
                if track.sprt is not None:
                    track.sprt.reset()

    def baseline(self, key: str) -> float | None:
        """μ0 for ``key`` (None before any sample)."""
        track = self._tracks.get(key)
        if track is None:
            return None
        return track.mu0 if track.sprt is not None else track.stats.mean

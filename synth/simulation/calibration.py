"""Fit a :class:`~synth.simulation.costmodel.CostProfile` to measured collective times.

Measurements become :class:`Observation` s (collective, topology spec, executor kind, schedule
shape, ``S`` in bytes, time in µs). Each observation is simulated with the schedule of its shape
(``ring``: :func:`synth.baselines.nccl_ring`, ``tree``: :func:`tree_schedule`, ``direct``:
:func:`synth.baselines.nccl_direct_alltoall` or :func:`direct_allgather`) under a candidate
profile, and :func:`fit_profile` minimises the (weighted) log time ratios with
:func:`scipy.optimize.least_squares`, one executor kind at a time (kinds share no parameter).

Which parameters are fitted: ``launch_us`` always; ``hop_us`` only when the executor's
observations span at least two schedule depths (otherwise launch and per-hop costs are
confounded, and ``hop_us`` keeps the base profile's value); the efficiency of every link class
the observations cross. Anything listed in ``fixed`` keeps the base value. The result records each
parameter as ``fitted`` or ``prior`` (with its bounds: :class:`FittedParam`), every point's in-sample
and leave-one-out error (one Gauss–Newton step per point by default, or refits), and
:meth:`Calibration.implausible` says why a fit should not be trusted (a parameter at a bound,
errors past limits).

Readers: :func:`parse_nccl_tests` (``*_perf`` stdout tables), :func:`parse_inspector` (NCCL
Inspector JSONL, ``coll_perf`` records) and :func:`parse_telemetry` (``loopcoll.telemetry/1``
``coll`` samples). :func:`format_nccl_tests` writes nccl-tests-style tables (for round trips).

>>> from synth.simulation.costmodel import CostProfile, ExecutorCost
>>> true = CostProfile("t", {"msccl": ExecutorCost(12.0, 2.0, {"nvlink": 0.8})})
>>> obs = synthetic_observations(true, "nvswitch:4", "allgather", ("ring", "direct"), [2**20, 2**26])
>>> fit = fit_profile(obs, name="t", loo=False)
>>> round(fit.profile.cost("msccl").launch_us, 3), round(fit.profile.cost("msccl").hop_us, 3)
(12.0, 2.0)
"""

from __future__ import annotations

import gzip
import json
import math
import re
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np

from synth.baselines import nccl_direct_alltoall, nccl_ring
from synth.collective import COLLECTIVES, TREE_COLLECTIVES, Collective
from synth.errors import LoopcollError
from synth.latency.depth import schedule_depth
from synth.routing import pair_route
from synth.schedule import Hop, Route, RouteKind, Schedule
from synth.simulation.costmodel import (
    EXECUTORS,
    IDEAL,
    CostProfile,
    ExecutorCost,
    link_classes,
)
from synth.simulation.simulator import auto_slices, simulate
from synth.topologies import load_topology

if TYPE_CHECKING:
    from synth.topologies.model import Topology

__all__ = [
    "SHAPES",
    "Calibration",
    "FittedParam",
    "LOO_MODES",
    "Observation",
    "PointFit",
    "Progress",
    "default_executor",
    "direct_allgather",
    "fit_profile",
    "format_nccl_tests",
    "parse_inspector",
    "parse_nccl_tests",
    "parse_telemetry",
    "predict_us",
    "reference_schedule",
    "synthetic_observations",
    "tree_schedule",
]

SHAPES = ("ring", "tree", "direct")
#: The order calibrate's messages list the collectives in (its ``--collective`` shows the same).
_HINT_ORDER = "|".join(c.value for c in (Collective.ALLGATHER, Collective.ALLTOALL, Collective.ALLREDUCE,
                                          Collective.REDUCESCATTER))


class CalibrationError(LoopcollError):
    """Measurements cannot be read or fitted."""


@dataclass(frozen=True, slots=True)
class Observation:
    """One measured collective: ``time_us`` for ``S = nbytes`` (nccl-tests convention).

    ``timing`` is ``wall`` (host-timed, launch included) or ``kernel`` (GPU kernel time, as the
    NCCL Inspector reports it); ``source`` names where the number came from.
    """

    collective: str
    topology: str
    executor: str
    shape: str
    nbytes: int
    time_us: float
    source: str = ""
    timing: str = "wall"
    weight: float = 1.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.weight) and self.weight > 0):
            raise CalibrationError(f"{self.source or 'observation'}: weight must be > 0, got {self.weight!r}")
        if self.collective not in COLLECTIVES:
            raise CalibrationError(f"{self.source or 'observation'}: unknown collective {self.collective!r}")
        if self.executor not in EXECUTORS:
            raise CalibrationError(f"{self.source or 'observation'}: unknown executor {self.executor!r}; choose from {', '.join(EXECUTORS)}")
        if self.shape not in SHAPES:
            raise CalibrationError(f"{self.source or 'observation'}: unknown schedule shape {self.shape!r}; choose from {', '.join(SHAPES)}")
        if not (self.nbytes > 0 and math.isfinite(self.time_us) and self.time_us > 0):
            raise CalibrationError(f"{self.source or 'observation'}: size and time must be > 0, got {self.nbytes!r} B, {self.time_us!r} us")

    def to_dict(self) -> dict[str, Any]:
        return {"collective": self.collective, "topology": self.topology, "executor": self.executor, "shape": self.shape,
                "nbytes": self.nbytes, "time_us": self.time_us, "source": self.source, "timing": self.timing, "weight": self.weight}


@dataclass(frozen=True, slots=True)
class PointFit:
    """One observation beside the fitted model: in-sample and leave-one-out relative algbw errors."""

    observation: Observation
    model_us: float
    error: float  # model algbw / measured algbw − 1
    loo_model_us: float | None
    loo_error: float | None


@dataclass(frozen=True, slots=True)
class Calibration:
    """A fitted profile, the status of each parameter and the per-point errors."""

    profile: CostProfile
    points: tuple[PointFit, ...]
    status: Mapping[str, str]  # "executor.param" -> "fitted" | "prior"
    message: str
    cost: float = 0.0  # final sum of squared log residuals
    notes: tuple[str, ...] = field(default=())
    params: tuple[FittedParam, ...] = field(default=())

    @property
    def median_error(self) -> float:
        """Median of the points' absolute in-sample errors (model algbw / measured − 1)."""
        return float(statistics.median(abs(p.error) for p in self.points))

    @property
    def worst_error(self) -> float:
        """Largest absolute in-sample error."""
        return max(abs(p.error) for p in self.points)

    def implausible(self, *, max_median_error: float = 0.15, max_worst_error: float = 0.5) -> list[str]:
        """Why the fit cannot be trusted (empty when it can): parameters at a bound, errors past the limits.

        A launch or hop cost of exactly zero is shown as at its bound but accepted (the data show no
        such cost); an efficiency at either bound or a cost at its upper bound is not.
        """
        why = []
        for p in self.params:
            side = p.at_bound
            if side and not (side == "lower" and p.lower == 0.0):
                limit = p.upper if side == "upper" else p.lower
                pct = f" = {100 * limit:.0f}% of capacity" if ".efficiency." in p.name else ""
                why.append(f"{p.name} sits at its {side} bound {limit:g}{pct}")
        if self.median_error > max_median_error:
            why.append(f"median error {100 * self.median_error:.1f}% exceeds {100 * max_median_error:g}%")
        if self.worst_error > max_worst_error:
            why.append(f"worst error {100 * self.worst_error:.1f}% exceeds {100 * max_worst_error:g}%")
        return why


# -- reference schedules ---------------------------------------------------------------------------

def _hop(topo: Topology, a: int, b: int) -> Hop:
    path = pair_route(topo, topo.gpu_id(a), topo.gpu_id(b))
    if path is None:
        raise CalibrationError(f"rank {a} cannot reach rank {b} through switches on {topo.name!r}")
    return Hop(a, b, path)


def direct_allgather(topo: Topology) -> Schedule:
    """Each rank sends its block straight to every other rank (depth 1; torch batched P2P).

    >>> from synth.topologies import named_topology
    >>> direct_allgather(named_topology("nvswitch:4")).meta["synthesizer"]
    'direct'
    """
    n = topo.nranks
    routes = tuple(Route(RouteKind.OUT_TREE, r, 1, tuple(_hop(topo, r, d) for d in range(n) if d != r)) for r in range(n))
    return Schedule(Collective.ALLGATHER, n, 1, routes, meta={"synthesizer": "direct"})


def tree_schedule(collective: str, topo: Topology) -> Schedule:
    """Binary trees, one per root over the ranks rotated to start at it (depth ⌈log2 N⌉-ish).

    AllGather: an out-tree per root; ReduceScatter: an in-tree per root; AllReduce: both.

    >>> from synth.topologies import named_topology
    >>> s = tree_schedule("allgather", named_topology("nvswitch:8"))
    >>> s.validate(named_topology("nvswitch:8")); schedule_depth(s)
    3
    """
    if collective not in TREE_COLLECTIVES:
        raise CalibrationError(f"tree schedules exist for allgather, reducescatter, allreduce, not {collective!r}")
    kind = Collective(collective)
    n = topo.nranks
    routes: list[Route] = []
    for root in range(n):
        order = [(root + i) % n for i in range(n)]
        down = tuple(_hop(topo, order[(i - 1) // 2], order[i]) for i in range(1, n))  # parent before child
        if kind.in_trees:
            up = tuple(_hop(topo, h.dst, h.src) for h in reversed(down))  # children before parents
            routes.append(Route(RouteKind.IN_TREE, root, 1, up))
        if kind.out_trees:
            routes.append(Route(RouteKind.OUT_TREE, root, 1, down))
    return Schedule(kind, n, 1, tuple(routes), meta={"synthesizer": "nccl-tree"})


@lru_cache(maxsize=256)
def _topology(spec: str) -> Topology:
    """``SPEC`` or ``SPEC@FAILURE`` (a failure scenario of :mod:`synth.topologies`, ``+``-joined)."""
    base, _, failure = spec.partition("@")
    return load_topology(base, [failure] if failure else [])


@lru_cache(maxsize=256)
def reference_schedule(collective: str, spec: str, shape: str) -> Schedule:
    """The schedule a measurement of ``shape`` is simulated with (cached per input)."""
    topo = _topology(spec)
    if shape == "ring":
        if collective == "alltoall":
            raise CalibrationError("alltoall has no ring schedule here; use shape 'direct'")
        return nccl_ring(collective, topo)
    if shape == "tree":
        return tree_schedule(collective, topo)
    if collective == "alltoall":
        return nccl_direct_alltoall(topo)
    if collective == "allgather":
        return direct_allgather(topo)
    raise CalibrationError(f"no direct schedule for {collective!r}; use shape 'ring' or 'tree'")


def default_executor(collective: str, shape: str) -> str:
    """NCCL's kernel for a measured native collective: ``nccl_ring``, ``nccl_tree`` or ``nccl_p2p``.

    >>> default_executor("alltoall", "direct"), default_executor("allgather", "ring")
    ('nccl_p2p', 'nccl_ring')
    """
    return {"ring": "nccl_ring", "tree": "nccl_tree", "direct": "nccl_p2p"}[shape]


def predict_us(obs: Observation, profile: CostProfile) -> float:
    """The simulated time of ``obs`` under ``profile`` (exact mode, auto slices), in µs."""
    sched = reference_schedule(obs.collective, obs.topology, obs.shape)
    topo = _topology(obs.topology)
    res = simulate(sched, topo, obs.nbytes, slices_per_chunk=auto_slices(sched, obs.nbytes), rtol=0.0, check=False,
                   profile=profile, executor=obs.executor)
    return res.time_s * 1e6


def synthetic_observations(
    profile: CostProfile, spec: str, collective: str, shapes: Sequence[str], sizes: Sequence[int], executor: str = "msccl"
) -> list[Observation]:
    """What ``profile`` predicts for ``shapes`` × ``sizes`` (round-trip tests and examples)."""
    out = []
    for shape in shapes:
        coll = "alltoall" if shape == "direct" and collective == "alltoall" else collective
        for s in sizes:
            probe = Observation(coll, spec, executor, shape, int(s), 1.0, "synthetic")
            out.append(Observation(coll, spec, executor, shape, int(s), predict_us(probe, profile), f"synthetic {shape}"))
    return out


# -- fitting ---------------------------------------------------------------------------------------

_DEFAULT_HOP_US = 0.0
_DEFAULT_EFF = 1.0


def _classes(obs: Observation) -> set[str]:
    sched = reference_schedule(obs.collective, obs.topology, obs.shape)
    topo = _topology(obs.topology)
    classes = dict(zip((lk.key for lk in topo.links), link_classes(topo)))
    return {classes[(a, b)] for r in sched.routes for h in r.hops for a, b in zip(h.path, h.path[1:])}


@dataclass(frozen=True, slots=True)
class FittedParam:
    """One parameter of a fit: its value, the bounds the optimiser kept it in, and its status.

    ``at_bound`` is ``"lower"`` or ``"upper"`` when a fitted value sits on a bound (the optimiser
    wanted to go past it: the model cannot explain the data there), else ``""``.

    >>> FittedParam("msccl.efficiency.net", 4.0, 0.02, 4.0, "fitted").at_bound
    'upper'
    """

    name: str  # "executor.param"
    value: float
    lower: float
    upper: float
    status: str  # "fitted" | "prior"

    @property
    def at_bound(self) -> str:
        if self.status != "fitted":
            return ""
        tol = 1e-6 * max(1.0, abs(self.upper))
        if self.value >= self.upper - tol:
            return "upper"
        if self.value <= self.lower + 1e-6 * max(1.0, abs(self.lower)):
            return "lower"
        return ""


@dataclass(frozen=True, slots=True)
class _Space:
    """The free parameters of one executor's fit and how a vector of them becomes an :class:`ExecutorCost`."""

    kind: str
    names: tuple[str, ...]
    guess: tuple[float, ...]
    lower: tuple[float, ...]
    upper: tuple[float, ...]
    classes: tuple[str, ...]
    base: ExecutorCost | None
    launch0: float
    hop0: float

    def build(self, x: Sequence[float] | np.ndarray) -> ExecutorCost:
        v = dict(zip(self.names, x))
        eff = dict(self.base.efficiency) if self.base is not None else {}
        for c in self.classes:
            eff[c] = v.get(f"efficiency.{c}", eff.get(c, _DEFAULT_EFF))
        return ExecutorCost(max(0.0, v.get("launch_us", self.launch0)), max(0.0, v.get("hop_us", self.hop0)), eff)


def _space(kind: str, obs: Sequence[Observation], base: ExecutorCost | None, fixed: set[str]) -> _Space:
    classes = sorted(set().union(*(_classes(o) for o in obs)))
    depths = {schedule_depth(reference_schedule(o.collective, o.topology, o.shape)) for o in obs}
    start_launch = 0.5 * min(o.time_us for o in obs)
    free: list[tuple[str, float, tuple[float, float]]] = []
    if "launch_us" not in fixed:
        free.append(("launch_us", start_launch, _LAUNCH_BOUNDS))
    if "hop_us" not in fixed and len(depths) >= 2:
        free.append(("hop_us", 1.0, _HOP_BOUNDS))
    free += [(f"efficiency.{c}", 0.8, _EFF_BOUNDS) for c in classes if f"efficiency.{c}" not in fixed]
    return _Space(kind, tuple(f[0] for f in free), tuple(f[1] for f in free), tuple(f[2][0] for f in free),
                  tuple(f[2][1] for f in free), tuple(classes), base,
                  base.launch_us if base is not None else start_launch, base.hop_us if base is not None else _DEFAULT_HOP_US)


@dataclass(frozen=True, slots=True)
class _ExecutorFit:
    space: _Space
    cost: ExecutorCost
    params: tuple[FittedParam, ...]
    sum_sq: float
    x: np.ndarray  # the fitted vector (order of space.names)
    resid: np.ndarray  # weighted log residuals at x, one per observation
    jac: np.ndarray  # their Jacobian at x (finite differences)


Progress = Callable[[float, str], None]
"""A progress callback: ``(fraction done in [0, 1], what is happening)``."""

LOO_MODES = ("step", "refit", "off")
_LAUNCH_BOUNDS = (0.0, 1e6)
_HOP_BOUNDS = (0.0, 1e5)
_EFF_BOUNDS = (0.02, 4.0)
_DIFF_STEP = 1e-6  # relative finite-difference step of the Jacobian


def _fit_executor(
    space: _Space, obs: Sequence[Observation], *, start: np.ndarray | None = None,
    tick: Callable[[int], None] | None = None,
) -> _ExecutorFit:
    """Least squares over ``space``'s free parameters; ``start`` warm-starts them (a fit on a superset)."""
    from scipy.optimize import least_squares

    meas = np.log([o.time_us for o in obs])
    weights = np.array([o.weight for o in obs])
    li = space.names.index("launch_us") if "launch_us" in space.names else None
    flows: dict[tuple[float, ...], np.ndarray] = {}

    def flow_us(x: np.ndarray) -> np.ndarray:
        """Every point's simulated time without the launch cost when it is fitted (it only adds), else with it."""
        key = tuple(float(v) for j, v in enumerate(x) if j != li)
        got = flows.get(key)
        if got is None:
            xx = np.array(x, dtype=float)
            if li is not None:
                xx[li] = 0.0
            prof = CostProfile("fit", {space.kind: space.build(xx)})
            got = flows[key] = np.array([predict_us(o, prof) for o in obs])
            if tick is not None:
                tick(len(flows))
        return got

    def resid(x: np.ndarray) -> np.ndarray:
        return weights * (np.log(flow_us(x) + (max(0.0, x[li]) if li is not None else 0.0)) - meas)

    def jac(x: np.ndarray) -> np.ndarray:
        """Analytic in ``launch_us`` (no simulation), forward differences (as scipy's ``2-point``) in the rest."""
        r0 = resid(x)
        out = np.empty((len(obs), len(x)))
        for j in range(len(x)):
            if j == li:
                out[:, j] = weights / (flow_us(x) + max(0.0, x[li]))
                continue
            h = _DIFF_STEP * (1.0 if x[j] >= 0 else -1.0) * max(1.0, abs(x[j]))
            if x[j] + h > space.upper[j]:
                h = -h
            xj = np.array(x, dtype=float)
            xj[j] += h
            out[:, j] = (resid(xj) - r0) / (xj[j] - x[j])
        return out

    if space.names:
        x0 = np.clip(space.guess if start is None else start, space.lower, space.upper)
        sol = least_squares(resid, x0, jac=jac, bounds=(space.lower, space.upper), x_scale="jac", xtol=1e-12,
                            ftol=1e-12, gtol=1e-12, max_nfev=400)
        x, r, jacobian, cost = sol.x, sol.fun, sol.jac, float(2 * sol.cost)
    else:
        x, jacobian = np.zeros(0), np.zeros((len(obs), 0))
        r = resid(x)
        cost = float(r @ r)
    fitted = space.build(x)
    values = {"launch_us": fitted.launch_us, "hop_us": fitted.hop_us,
              **{f"efficiency.{c}": fitted.efficiency[c] for c in space.classes}}
    bounds = {"launch_us": _LAUNCH_BOUNDS, "hop_us": _HOP_BOUNDS, **{f"efficiency.{c}": _EFF_BOUNDS for c in space.classes}}
    params = tuple(FittedParam(f"{space.kind}.{p}", values[p], *bounds[p], "fitted" if p in space.names else "prior")
                   for p in values)
    return _ExecutorFit(space, fitted, params, cost, np.asarray(x, dtype=float), np.asarray(r), np.asarray(jacobian))


def _loo_step(fit: _ExecutorFit, i: int) -> ExecutorCost:
    """The fit without observation ``i``, by one Gauss–Newton step from the full fit (its residuals and Jacobian).

    Exact for a model linear in its parameters; here it needs no simulation at all. The step is
    kept inside the bounds.
    """
    keep = np.arange(len(fit.resid)) != i
    step = np.linalg.lstsq(fit.jac[keep], -fit.resid[keep], rcond=None)[0]
    return fit.space.build(np.clip(fit.x + step, fit.space.lower, fit.space.upper))


def fit_profile(
    observations: Iterable[Observation],
    *,
    name: str,
    base: CostProfile = IDEAL,
    fixed: Mapping[str, Iterable[str]] | None = None,
    loo: bool | str = True,
    description: str = "",
    progress: Progress | None = None,
) -> Calibration:
    """Fit the executors the observations use; other executors are copied from ``base``.

    ``fixed`` maps an executor kind to parameter names (``launch_us``, ``hop_us``,
    ``efficiency.<class>``) that keep ``base``'s values. ``loo`` (leave-one-out) predicts every
    point by a fit without it, when its executor has more points than fitted parameters:
    ``"step"`` (or ``True``) takes one Gauss–Newton step from the full fit with its Jacobian
    (no simulation per fold: seconds), ``"refit"`` refits without the point, starting from the
    full fit (a few evaluations of every other point per fold: slow on large fabrics), ``"off"``
    (or ``False``) skips it. ``progress`` is called now and then with the fraction done and a
    phrase. Executors copied from ``base`` are listed in the profile's ``inherited`` (kind → the
    profile they came from).
    """
    mode = ("step" if loo else "off") if isinstance(loo, bool) else loo
    if mode not in LOO_MODES:
        raise CalibrationError(f"leave-one-out mode {loo!r}: choose from {', '.join(LOO_MODES)}")
    obs = list(observations)
    if not obs:
        raise CalibrationError("no measurements to fit")
    groups: dict[str, list[Observation]] = defaultdict(list)
    for o in obs:
        groups[o.executor].append(o)
    for kind, group in groups.items():
        if len({o.timing for o in group}) > 1:
            raise CalibrationError(
                f"executor {kind!r}: measurements mix host-timed (wall) and kernel times (e.g. Inspector); their "
                "launch costs differ, so fit them separately"
            )
    fixed_sets = {k: set(v) for k, v in (fixed or {}).items()}
    total_units = len(groups) + (len(obs) if mode != "off" else 0)
    done = [0]

    def tick_for(what: str) -> Callable[[int], None]:
        def tick(evaluations: int) -> None:
            if progress is not None:
                progress(done[0] / total_units, f"{what}, {evaluations} evaluations")
        return tick

    executors = dict(base.executors)
    inherited = {k: base.inherited.get(k, base.name) for k in base.executors if k not in groups}
    fits: dict[str, _ExecutorFit] = {}
    for i, kind in enumerate(sorted(groups), 1):
        space = _space(kind, groups[kind], base.executors.get(kind), fixed_sets.get(kind, set()))
        fits[kind] = _fit_executor(space, groups[kind], tick=tick_for(f"fitting {kind} ({i}/{len(groups)})"))
        executors[kind] = fits[kind].cost
        done[0] += 1
    status = {p.name: p.status for f in fits.values() for p in f.params}
    total = sum(f.sum_sq for f in fits.values())
    profile = CostProfile(name, executors, description)
    points = []
    for j, o in enumerate(obs, 1):
        model = predict_us(o, profile)
        loo_us = None
        group, fit = groups[o.executor], fits[o.executor]
        if mode != "off" and len(group) - 1 >= max(len(fit.x), 1):
            k = next(n for n, g in enumerate(group) if g is o)
            if mode == "step":
                fold = _loo_step(fit, k)
            else:
                fold = _fit_executor(fit.space, group[:k] + group[k + 1:], start=fit.x,
                                     tick=tick_for(f"leave-one-out {j}/{len(obs)}")).cost
            loo_us = predict_us(o, CostProfile("loo", {o.executor: fold}))
        points.append(PointFit(o, model, o.time_us / model - 1.0, loo_us, None if loo_us is None else o.time_us / loo_us - 1.0))
        if mode != "off":
            done[0] += 1
            if progress is not None:
                progress(done[0] / total_units, f"leave-one-out ({mode}) {j}/{len(obs)}")
    worst = max(abs(p.error) for p in points)
    msg = f"fitted {len(groups)} executor kind(s) on {len(obs)} point(s); worst in-sample algbw error {100 * worst:.2f}%"
    params = tuple(p for kind in sorted(fits) for p in fits[kind].params)
    fit_doc = {
        "status": dict(sorted(status.items())),
        "sum_sq_log_residuals": total,
        "leave_one_out": mode,
        "parameters": {p.name: {"value": p.value, "lower": p.lower, "upper": p.upper, "status": p.status,
                                "at_bound": p.at_bound or None} for p in params},
        "points": [
            {**p.observation.to_dict(), "model_us": p.model_us, "error": p.error, "loo_model_us": p.loo_model_us,
             "loo_error": p.loo_error}
            for p in points
        ],
    }
    profile = CostProfile(name, executors, description, fit_doc, base.name, inherited)
    return Calibration(profile, tuple(points), MappingProxyType(dict(sorted(status.items()))), msg, total,
                       params=params)


# -- readers ---------------------------------------------------------------------------------------

_NCCL_TESTS_NAMES = {"all_gather": "allgather", "alltoall": "alltoall", "all_reduce": "allreduce",
                     "reduce_scatter": "reducescatter"}


def _num(tok: str) -> float | None:
    try:
        return float(tok)
    except ValueError:
        return None


def parse_nccl_tests(text: str, *, where: str = "nccl-tests output", collective: str | None = None) -> dict[str, Any]:
    """Read an nccl-tests ``*_perf`` stdout: ``{"collective", "nranks", "rows": [(size_B, time_us, algbw_GBps)]}``.

    Uses the out-of-place columns. Accepts the table with or without the ``redop`` / ``root``
    columns (older releases) and with per-iteration columns; ``collective`` comes from the
    ``# Collective test starting: all_gather_perf`` line when not given. ``nranks`` counts the
    ``#  Rank`` device lines (``None`` if there are none).

    >>> t = format_nccl_tests("allgather", 2, [(1048576, 75.0)])
    >>> d = parse_nccl_tests(t); d["collective"], d["nranks"], d["rows"][0][:2]
    ('allgather', 2, (1048576, 75.0))
    """
    coll = collective
    nranks = 0
    rows: list[tuple[int, float, float]] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if not s:
            continue
        if s.startswith("#"):
            m = re.search(r"Collective test starting:\s*(\w+?)_perf", s)
            if m and coll is None:
                coll = _NCCL_TESTS_NAMES.get(m.group(1))
                if coll is None:
                    raise CalibrationError(f"{where}: line {lineno}: unsupported nccl-tests program {m.group(1)}_perf")
            if re.match(r"#\s+Rank\s+\d+\s+Group", s):
                nranks += 1
            continue
        tok = s.split()
        if len(tok) < 7 or not tok[0].isdigit() or not tok[1].isdigit():
            continue
        size = int(tok[0])
        rest = tok[3:]  # after size, count, type
        if rest and _num(rest[0]) is None:  # redop
            rest = rest[1:]
        row = None
        for off in (0, 1):  # with or without a root column
            if len(rest) < off + 3:
                continue
            t, a = _num(rest[off]), _num(rest[off + 1])
            if t is None or a is None or t <= 0:
                continue
            expect = size / 1e9 / (t * 1e-6)
            if abs(a - expect) <= max(0.011, 0.02 * expect):
                row = (size, t, a)
                break
        if row is None:
            raise CalibrationError(f"{where}: line {lineno}: cannot read time and algbw from {s!r}")
        rows.append(row)
    if coll is None:
        raise CalibrationError(f"{where}: no nccl-tests header naming the collective (a '# Collective test starting: "
                               f"<name>_perf' line); pass --collective {_HINT_ORDER} (collective= in Python)")
    if not rows:
        raise CalibrationError(f"{where}: no result rows")
    return {"collective": coll, "nranks": nranks or None, "rows": rows}


def format_nccl_tests(collective: str, nranks: int, rows: Sequence[tuple[int, float]], *, version: str = "2.17.1") -> str:
    """An nccl-tests style stdout for ``rows`` of ``(size_B, time_us)`` (same time in place).

    >>> print(format_nccl_tests("alltoall", 2, [(8388608, 83.1)]).splitlines()[-5])
         8388608       1048576     float    none      -1    83.10  100.95   50.47       0    83.10  100.95   50.47       0
    """
    prog = {v: k for k, v in _NCCL_TESTS_NAMES.items()}[collective]
    op = "sum" if collective in ("allreduce", "reducescatter") else "none"
    factor = Collective(collective).busbw_factor(nranks)
    out = [
        f"# nccl-tests version {version} nccl-headers=22809 nccl-library=22809",
        f"# Collective test starting: {prog}_perf",
        f"# nThread 1 nGpus 1 minBytes {rows[0][0]} maxBytes {rows[-1][0]} step: 2(factor) warmup iters: 5 iters: 20 "
        "agg iters: 1 validation: 1 graph: 0",
        "#",
        "# Using devices",
    ]
    out += [f"#  Rank {r:2d} Group  0 Pid {1000 + r:6d} on       node device {r:2d} [0000:{r:02x}:00] NVIDIA H200"
            for r in range(nranks)]
    out += [
        "#",
        "#                                                              out-of-place                       in-place          ",
        "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       ",
    ]
    for size, t in rows:
        a = size / 1e9 / (t * 1e-6)
        cols = f"{_w(t, 7)}  {_w(a, 6)}  {_w(a * factor, 6)}  {0:6d}"
        count = size // 4 if collective == "allreduce" else size // 4 // nranks  # nccl-tests prints the per-rank count
        out.append(f"{size:12d}  {count:12d}  {'float':>8s}  {op:>6s}  {-1:6d}  {cols}  {cols}")
    out += ["# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 0 ", "#",
            f"# Collective test concluded: {prog}_perf", ""]
    return "\n".join(out)


def _w(value: float, width: int) -> str:
    """nccl-tests' number format: 2 decimals, fewer when the field would overflow."""
    for fmt in (".2f", ".1f", ".0f"):
        s = f"{value:{width}{fmt}}"
        if len(s) <= width:
            return s
    return f"{value:{width}.1e}"


_INSPECTOR_NAMES = {"AllGather": "allgather", "ReduceScatter": "reducescatter", "AllReduce": "allreduce",
                    "All2All": "alltoall"}


def _open_text(path: Path) -> Iterable[str]:
    if path.suffix == ".gz":
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            yield from fh
    else:
        with open(path, encoding="utf-8") as fh:
            yield from fh


def parse_inspector(
    paths: Sequence[str | Path], *, window_us: tuple[float, float] | None = None
) -> dict[tuple[str, int], dict[str, Any]]:
    """Median kernel time per (collective, S) over NCCL Inspector ``coll_perf`` records.

    ``S`` follows nccl-tests: message × ranks for AllGather and ReduceScatter, the message for
    AllReduce. ``window_us`` keeps records whose ``dump_timestamp_us`` lies in it. Returns
    ``{(collective, S): {"time_us", "records", "nranks"}}``; unknown lines are skipped.
    """
    times: dict[tuple[str, int], list[float]] = defaultdict(list)
    ranks: dict[tuple[str, int], int] = {}
    for p in paths:
        path = Path(p)
        if not path.is_file():
            raise CalibrationError(f"{path}: no such Inspector log")
        for line in _open_text(path):
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            body = rec.get("coll_perf") if isinstance(rec, dict) else None
            if not isinstance(body, dict):
                continue
            coll = _INSPECTOR_NAMES.get(body.get("coll", ""))
            n = rec.get("header", {}).get("n_ranks")
            if coll is None or not isinstance(n, int):
                continue
            ts = rec.get("metadata", {}).get("dump_timestamp_us")
            if window_us is not None and not (isinstance(ts, (int, float)) and window_us[0] <= ts <= window_us[1]):
                continue
            try:
                msg = int(body["coll_msg_size_bytes"])
                t = float(body["coll_exec_time_us"])
            except (KeyError, TypeError, ValueError):
                continue
            if t <= 0:
                continue
            s = Collective(coll).message_bytes(msg, n)
            times[(coll, s)].append(t)
            ranks[(coll, s)] = n
    if not times:
        raise CalibrationError(f"{', '.join(map(str, paths))}: no usable coll_perf records")
    return {k: {"time_us": statistics.median(v), "records": len(v), "nranks": ranks[k]} for k, v in sorted(times.items())}


def parse_telemetry(paths: Sequence[str | Path]) -> dict[tuple[str, int, bool], dict[str, Any]]:
    """Median ``busy_s`` (as µs) of ``loopcoll.telemetry/1`` ``coll`` samples per (collective, S, native).

    ``native`` is true for samples of a native library collective (``version`` null).
    """
    times: dict[tuple[str, int, bool], list[float]] = defaultdict(list)
    for p in paths:
        path = Path(p)
        if not path.is_file():
            raise CalibrationError(f"{path}: no such telemetry file")
        for line in _open_text(path):
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if not isinstance(rec, dict) or rec.get("format") != "loopcoll.telemetry/1" or rec.get("kind") != "coll":
                continue
            coll, nbytes, busy = rec.get("collective"), rec.get("bytes"), rec.get("busy_s")
            if coll not in COLLECTIVES or not isinstance(nbytes, int) or nbytes <= 0:
                continue
            if not isinstance(busy, (int, float)) or not busy > 0:
                continue
            times[(coll, nbytes, rec.get("version") is None)].append(float(busy) * 1e6)
    if not times:
        raise CalibrationError(f"{', '.join(map(str, paths))}: no usable loopcoll.telemetry/1 coll samples")
    return {k: {"time_us": statistics.median(v), "records": len(v)} for k, v in sorted(times.items())}

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

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np

from synth.baselines import nccl_direct_alltoall, nccl_ring
from synth.collective import TREE_COLLECTIVES, Collective
from synth.latency.depth import schedule_depth
from synth.routing import pair_route
from synth.schedule import Hop, Route, RouteKind, Schedule
from synth.simulation.costmodel import (
    IDEAL,
    CostProfile,
    ExecutorCost,
    link_classes,
)
from synth.simulation.measurements import format_nccl_tests, parse_inspector, parse_nccl_tests, parse_telemetry
from synth.simulation.observations import (
    SHAPES,
    Calibration,
    CalibrationError,
    FittedParam,
    Observation,
    PointFit,
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
        sol = _solve(least_squares, resid, jac, x0, space)
        for j in _stuck_at_bound(sol.x, space, float(2 * sol.cost)):
            # A parameter on its bound with residuals left is often a local minimum (a small per-hop
            # cost traded for a larger launch cost): start again with it off the bound, keep the better.
            x1 = np.array(sol.x, dtype=float)
            x1[j] = min(max(10.0 * space.guess[j], space.lower[j]), space.upper[j])
            again = _solve(least_squares, resid, jac, x1, space)
            if again.cost < sol.cost:
                sol = again
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


def _solve(least_squares: Callable[..., Any], resid: Callable[[np.ndarray], np.ndarray],
           jac: Callable[[np.ndarray], np.ndarray], x0: np.ndarray, space: _Space) -> Any:
    """One bounded least-squares run of :func:`_fit_executor` from ``x0``."""
    return least_squares(resid, x0, jac=jac, bounds=(space.lower, space.upper), x_scale="jac", xtol=1e-12,
                         ftol=1e-12, gtol=1e-12, max_nfev=400)


def _stuck_at_bound(x: np.ndarray, space: _Space, sum_sq: float) -> list[int]:
    """Free parameters (not the launch cost, which only adds) sitting on a bound of a fit with residuals left."""
    if sum_sq <= 1e-12:
        return []
    out = []
    for j, name in enumerate(space.names):
        if name == "launch_us" or space.guess[j] <= 0:
            continue
        lo, hi = space.lower[j], space.upper[j]
        if x[j] <= lo + 1e-9 * max(1.0, abs(lo)) or x[j] >= hi - 1e-9 * max(1.0, abs(hi)):
            out.append(j)
    return out


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
    groups = _by_executor(obs)
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
    fit_doc = _fit_document(status, total, mode, params, points)
    profile = CostProfile(name, executors, description, fit_doc, base.name, inherited)
    return Calibration(profile, tuple(points), MappingProxyType(dict(sorted(status.items()))), msg, total,
                       params=params)


def _by_executor(obs: Sequence[Observation]) -> dict[str, list[Observation]]:
    """The observations per executor kind; one kind's must not mix host-timed and kernel times."""
    groups: dict[str, list[Observation]] = defaultdict(list)
    for o in obs:
        groups[o.executor].append(o)
    for kind, group in groups.items():
        if len({o.timing for o in group}) > 1:
            raise CalibrationError(
                f"executor {kind!r}: measurements mix host-timed (wall) and kernel times (e.g. Inspector); their "
                "launch costs differ, so fit them separately"
            )
    return groups


def _fit_document(status: Mapping[str, str], total: float, mode: str, params: Sequence[FittedParam],
                  points: Sequence[PointFit]) -> dict[str, object]:
    """The ``fit`` record a fitted profile carries: parameter statuses and values, every point's errors."""
    return {
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

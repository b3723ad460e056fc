"""Typed figures of a synthesis, one frozen record per family (the ``figures`` of a result).

Each synthesizer family reports its own figures: ForestColl trees (:class:`TreeFigures`, and
:class:`ReductionFigures` for AllReduce's two phases), AllToAll column generation
(:class:`AllToAllFigures`), routed synthesis (:class:`RoutedTreeFigures`,
:class:`RoutedAllToAllFigures`, both with a :class:`RoutingFigures`), depth-bounded trees
(:class:`DepthFigures`) and AllToAllv (:class:`AllToAllvFigures`). Read them as attributes;
``to_dict()`` is for serialisation only: it gives the figures as the flat JSON object loopcoll has
always written (same keys, same order, same values; a figure that does not apply is left out).

Units are in the names: ``_s`` seconds of wall time, ``_GBps`` 10^9 byte/s; ``gap`` is a fraction,
``_pct`` a percentage.

Examples
--------
>>> from synth import load_topology, synthesize
>>> figs = synthesize("alltoall", load_topology("hpn:1x2x2"), chunks=2).figures
>>> isinstance(figs, AllToAllFigures), figs.max_steps, figs.warm_mode, figs.binding_limit
(True, 2, 'cold', None)
>>> list(figs.to_dict())[:3]
['lp_algbw_GBps', 'lp_bound_algbw_GBps', 'gap']
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TypeAlias

__all__ = ["AllToAllFigures", "AllToAllvFigures", "DepthFigures", "DepthLpFigures", "Figures", "PackFigures",
           "ReductionFigures", "RoutedAllToAllFigures", "RoutedTreeFigures", "RoutingFigures", "SplitFigures",
           "TreeFigures", "WarmTreeFigures", "binding_limit_of", "routing_of", "warm_mode_of"]

#: What ``to_dict()`` returns: a JSON-able object, keys in their documented order.
FigureDict: TypeAlias = dict[str, object]
#: One K tried by the AllToAll chunk choice: (K, loss, method).
Tried: TypeAlias = tuple[tuple[int, float, str], ...]


def _tried(tried: Tried) -> list[list[object]]:
    return [list(t) for t in tried]


def _set(**figures: object) -> FigureDict:
    """The figures that apply (not ``None``), in the order given."""
    return {key: value for key, value in figures.items() if value is not None}


@dataclass(frozen=True, slots=True, kw_only=True)
class SplitFigures:
    """Phase 2 of ForestColl (switch splitting-off): max-flows, probes, bulk splits, the tier used."""

    maxflows: int
    probes: int
    switches_same_incident: int  # switches whose incident capacities equal the warm hint's
    bulk: int
    mode: str  # "optimistic", "hinted" or "checked"

    def to_dict(self) -> FigureDict:
        """The figures under their JSON keys (``split_maxflows``, ...)."""
        return {"split_maxflows": self.maxflows, "split_probes": self.probes,
                "switches_same_incident": self.switches_same_incident, "split_bulk": self.bulk,
                "split_mode": self.mode}


@dataclass(frozen=True, slots=True, kw_only=True)
class PackFigures:
    """Phase 3 of ForestColl (tree packing): max-flows run, edges decided without one, classes."""

    maxflows: int
    skipped: int
    tree_classes: int

    def to_dict(self) -> FigureDict:
        """The figures under their JSON keys (``pack_maxflows``, ``pack_skipped``, ``tree_classes``)."""
        return {"pack_maxflows": self.maxflows, "pack_skipped": self.skipped, "tree_classes": self.tree_classes}


@dataclass(frozen=True, slots=True, kw_only=True)
class WarmTreeFigures:
    """A ForestColl warm start's attempt to keep the previous trees.

    ``accept`` is the attempt that passed (``repair``, ``partial``, ``all``, ``none``), with the
    fraction of the kept plan's edges reused and the tree units kept; all three ``None`` when no
    kept set passed (then the trees were packed from scratch, guided by the old ones).
    """

    check_maxflows: int | None  # None when no check ran
    accept: str | None
    reused_edges_frac: float | None
    reused_tree_units: int | None

    def to_dict(self) -> FigureDict:
        """The figures under their JSON keys (``warm_check_maxflows``, ``warm_accept``, ...)."""
        out = _set(warm_check_maxflows=self.check_maxflows)
        if self.accept is not None:
            out.update(warm_accept=self.accept, reused_edges_frac=self.reused_edges_frac,
                       reused_tree_units=self.reused_tree_units)
        return out


@dataclass(frozen=True, slots=True, kw_only=True)
class TreeFigures:
    """One direction of ForestColl (AllGather's out-trees, ReduceScatter's in-trees).

    ``reused_edges_frac`` (warm starts only) is the fraction of all tree edges that the previous
    schedule had too; ``bound_attained`` is set only where a non-Eulerian switch made ForestColl
    solve on the rebalanced topology, saying whether it still reached the cut bound.
    """

    phase1_maxflows: int
    fixed_k_maxflows: int | None  # only when max_chunks forced a fixed-k search
    phase1_s: float
    phase2_s: float
    split: SplitFigures
    logical_arcs: int
    warm: WarmTreeFigures | None  # None when cold
    packing: PackFigures | None  # None when every tree was kept from the warm start
    phase3_s: float
    mapback_s: float
    k: int
    trees: int
    kept_tree_units: int
    reused_edges_frac: float | None = None
    bound_attained: bool | None = None

    @property
    def warm_accept(self) -> str | None:
        """The warm-start attempt that kept old trees, or ``None`` (cold, or none kept)."""
        return None if self.warm is None else self.warm.accept

    def to_dict(self) -> FigureDict:
        """The figures as one flat JSON object (``phase1_maxflows``, ..., ``kept_tree_units``)."""
        out = _set(phase1_maxflows=self.phase1_maxflows, fixed_k_maxflows=self.fixed_k_maxflows)
        out.update(phase1_s=self.phase1_s, phase2_s=self.phase2_s, **self.split.to_dict(),
                   logical_arcs=self.logical_arcs)
        out.update({} if self.warm is None else self.warm.to_dict())
        out.update({} if self.packing is None else self.packing.to_dict())
        out.update(phase3_s=self.phase3_s, mapback_s=self.mapback_s, k=self.k, trees=self.trees,
                   kept_tree_units=self.kept_tree_units)
        # The whole schedule's share of reused edges replaces the attempt's, in its place.
        out.update(_set(reused_edges_frac=self.reused_edges_frac, bound_attained=self.bound_attained))
        return out


@dataclass(frozen=True, slots=True, kw_only=True)
class ReductionFigures:
    """ForestColl AllReduce: its ReduceScatter and AllGather phases and their common ``k``."""

    reducescatter: TreeFigures
    allgather: TreeFigures
    k: int
    trees: int

    def to_dict(self) -> FigureDict:
        """``{"reducescatter": {...}, "allgather": {...}, "k": ..., "trees": ...}``."""
        return {"reducescatter": self.reducescatter.to_dict(), "allgather": self.allgather.to_dict(),
                "k": self.k, "trees": self.trees}


@dataclass(frozen=True, slots=True, kw_only=True)
class AllToAllFigures:
    """AllToAll by column generation (:func:`synth.alltoall_cg.synthesize_alltoall`).

    ``gap`` is the rounding gap as a fraction of ``lp_algbw_GBps`` (against the proven bound
    ``lp_bound_algbw_GBps`` after a time limit); ``warm_mode`` says how the run started (``cold``,
    ``state``, ``schedule``, ``pool-paths``, ``repair``); ``repaired_blocks`` is set by the local
    repair only; ``binding_limit`` names the limit that keeps the loss above 0.1 %;
    ``rounding_tried`` is every (K, loss, method) of the chunk choice (``None`` after a time limit).
    """

    lp_algbw_GBps: float  # noqa: N815
    lp_bound_algbw_GBps: float  # noqa: N815
    gap: float
    cg_iterations: int
    lp_pivots: int
    columns: int
    paths: int
    max_steps: int
    hop_diameter: int
    warm_mode: str
    trees_dropped: int
    repaired_blocks: int | None
    dive_steps: int
    dive_backtracks: int
    dive_columns_added: int
    dive_lp_solves: int
    dived: bool
    setup_time_s: float
    cg_time_s: float
    lp_time_s: float
    pricing_time_s: float
    rounding_time_s: float
    schedule_time_s: float
    nchunks: int
    binding_limit: str | None
    rounding_tried: Tried | None

    def to_dict(self) -> FigureDict:
        """The figures as one flat JSON object, in the order above."""
        out: FigureDict = {
            "lp_algbw_GBps": self.lp_algbw_GBps, "lp_bound_algbw_GBps": self.lp_bound_algbw_GBps, "gap": self.gap,
            "cg_iterations": self.cg_iterations, "lp_pivots": self.lp_pivots, "columns": self.columns,
            "paths": self.paths, "max_steps": self.max_steps, "hop_diameter": self.hop_diameter,
            "warm_mode": self.warm_mode, "trees_dropped": self.trees_dropped,
        }
        out.update(_set(repaired_blocks=self.repaired_blocks))
        out.update(dive_steps=self.dive_steps, dive_backtracks=self.dive_backtracks,
                   dive_columns_added=self.dive_columns_added, dive_lp_solves=self.dive_lp_solves, dived=self.dived,
                   setup_time_s=self.setup_time_s, cg_time_s=self.cg_time_s, lp_time_s=self.lp_time_s,
                   pricing_time_s=self.pricing_time_s, rounding_time_s=self.rounding_time_s,
                   schedule_time_s=self.schedule_time_s, nchunks=self.nchunks, binding_limit=self.binding_limit)
        if self.rounding_tried is not None:
            out["rounding_tried"] = _tried(self.rounding_tried)
        return out


@dataclass(frozen=True, slots=True, kw_only=True)
class RoutingFigures:
    """A routed result's optimum and what the executor loses against free routing.

    ``routed_optimal_algbw_GBps`` is the routed optimum, or while ``routed_optimum_proven`` is false
    the best proven upper bound on it. ``free_optimal_algbw_GBps`` and ``routing_gap_pct`` are set by
    :func:`synth.synthesize` (``None`` straight from :mod:`synth.routed`).
    """

    routed_optimal_algbw_GBps: float  # noqa: N815
    routed_optimum_proven: bool
    routed_bound_algbw_GBps: float  # noqa: N815
    free_optimal_algbw_GBps: float | None = None  # noqa: N815
    routing_gap_pct: float | None = None

    def head(self) -> FigureDict:
        """The keys a routed result's JSON object starts with."""
        return {"routing": "routed", "routed_optimal_algbw_GBps": self.routed_optimal_algbw_GBps,
                "routed_optimum_proven": self.routed_optimum_proven,
                "routed_bound_algbw_GBps": self.routed_bound_algbw_GBps}

    def tail(self) -> FigureDict:
        """The keys it ends with (only those set)."""
        return _set(free_optimal_algbw_GBps=self.free_optimal_algbw_GBps, routing_gap_pct=self.routing_gap_pct)


@dataclass(frozen=True, slots=True, kw_only=True)
class RoutedTreeFigures:
    """Routed AllGather / ReduceScatter / AllReduce (:func:`synth.routed.trees.synthesize_routed_trees`)."""

    routing: RoutingFigures
    lp_rounds: tuple[int, ...]  # cutting-plane rounds per phase
    cg_rounds: tuple[int, ...]  # column-generation rounds per phase (empty when it did not run)
    seeded_trees: int
    lp_s: float
    k: int
    trees: int
    binding_limit: str | None

    def to_dict(self) -> FigureDict:
        """The figures as one flat JSON object (``routing``, ..., ``routing_gap_pct``)."""
        return {**self.routing.head(), "lp_rounds": list(self.lp_rounds), "cg_rounds": list(self.cg_rounds),
                "seeded_trees": self.seeded_trees, "lp_s": self.lp_s, "k": self.k, "trees": self.trees,
                "binding_limit": self.binding_limit, **self.routing.tail()}


@dataclass(frozen=True, slots=True, kw_only=True)
class RoutedAllToAllFigures:
    """Routed AllToAll (:func:`synth.routed.alltoall.synthesize_routed_alltoall`)."""

    routing: RoutingFigures
    lp_algbw_GBps: float  # noqa: N815
    lp_rounds: int
    lp_columns: int
    seeded_columns: int
    lp_s: float
    nchunks: int
    binding_limit: str | None
    rounding_tried: Tried
    gap: float

    def to_dict(self) -> FigureDict:
        """The figures as one flat JSON object (``routing``, ..., ``routing_gap_pct``)."""
        return {**self.routing.head(), "lp_algbw_GBps": self.lp_algbw_GBps, "lp_rounds": self.lp_rounds,
                "lp_columns": self.lp_columns, "seeded_columns": self.seeded_columns, "lp_s": self.lp_s,
                "nchunks": self.nchunks, "binding_limit": self.binding_limit,
                "rounding_tried": _tried(self.rounding_tried), "gap": self.gap, **self.routing.tail()}


@dataclass(frozen=True, slots=True, kw_only=True)
class DepthLpFigures:
    """The depth-bounded LP and its rounding (a finite ``max_depth``)."""

    k: int
    trees: int
    rounding_bound_algbw_GBps: float  # noqa: N815 - the a-priori guarantee of the rounding
    rounding_gap_pct: float
    iterations: int
    columns: int
    columns_dropped: int


@dataclass(frozen=True, slots=True, kw_only=True)
class DepthFigures:
    """Depth-bounded trees (:func:`synth.latency.synthesize_depth_bounded`).

    With a finite ``max_depth``, ``lp`` holds the LP's figures; with ``max_depth=None`` the run is
    the unbounded synthesizer's, whose figures are ``inner`` (``None`` when it reported none).
    """

    depth: int
    max_depth: int | None
    lp_algbw_GBps: float  # noqa: N815
    depth_bound_algbw_GBps: float  # noqa: N815
    unbounded_optimal_algbw_GBps: float  # noqa: N815
    lp_gap_pct: float
    lp: DepthLpFigures | None = None
    inner: Figures | None = None

    def to_dict(self) -> FigureDict:
        """The figures as one flat JSON object (the unbounded run's first, where there is one)."""
        if self.lp is None:
            return {**({} if self.inner is None else self.inner.to_dict()), "depth": self.depth,
                    "max_depth": self.max_depth, "lp_algbw_GBps": self.lp_algbw_GBps,
                    "depth_bound_algbw_GBps": self.depth_bound_algbw_GBps,
                    "unbounded_optimal_algbw_GBps": self.unbounded_optimal_algbw_GBps, "lp_gap_pct": self.lp_gap_pct}
        lp = self.lp
        return {"depth": self.depth, "max_depth": self.max_depth, "k": lp.k, "trees": lp.trees,
                "lp_algbw_GBps": self.lp_algbw_GBps, "depth_bound_algbw_GBps": self.depth_bound_algbw_GBps,
                "unbounded_optimal_algbw_GBps": self.unbounded_optimal_algbw_GBps,
                "rounding_bound_algbw_GBps": lp.rounding_bound_algbw_GBps, "lp_gap_pct": self.lp_gap_pct,
                "rounding_gap_pct": lp.rounding_gap_pct, "iterations": lp.iterations, "columns": lp.columns,
                "columns_dropped": lp.columns_dropped}


@dataclass(frozen=True, slots=True, kw_only=True)
class AllToAllvFigures:
    """AllToAllv by column generation (:func:`synth.alltoall_cg.synthesize_alltoallv`).

    Times of the schedule (``lp_completion_s``, ``lower_bound_s``, the two remainder roundings'
    ``*_completion_s``) are bandwidth-term completion times; the ``*_time_s`` are wall time.
    """

    lp_completion_s: float
    lower_bound_s: float
    gap: float
    cg_iterations: int
    lp_pivots: int
    columns: int
    paths: int
    max_steps: int | None  # None: no step bound
    warm_mode: str
    largest_remainder_completion_s: float
    greedy_remainder_completion_s: float
    moves: int
    setup_time_s: float
    cg_time_s: float
    lp_solve_time_s: float
    pricing_time_s: float
    rounding_time_s: float
    schedule_time_s: float

    def to_dict(self) -> FigureDict:
        """The figures as one flat JSON object, in the order above."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


#: The figures a :class:`~synth.result.SynthResult` can carry.
Figures: TypeAlias = (
    TreeFigures | ReductionFigures | AllToAllFigures | RoutedTreeFigures | RoutedAllToAllFigures | DepthFigures
)


def routing_of(figures: Figures | None) -> RoutingFigures | None:
    """A routed result's routing figures (through a depth-bounded run's unbounded one), else ``None``.

    >>> routing_of(None) is None
    True
    """
    if isinstance(figures, DepthFigures):
        return routing_of(figures.inner)
    if isinstance(figures, RoutedTreeFigures | RoutedAllToAllFigures):
        return figures.routing
    return None


def binding_limit_of(figures: Figures | None) -> str | None:
    """The limit that keeps an AllToAll or routed rounding's loss above 0.1 % (``None`` when none
    does, and for ForestColl and depth-bounded trees, which report none).

    >>> binding_limit_of(None) is None
    True
    """
    if isinstance(figures, AllToAllFigures | RoutedTreeFigures | RoutedAllToAllFigures):
        return figures.binding_limit
    return None


def warm_mode_of(figures: Figures | AllToAllvFigures | None) -> str | None:
    """How an AllToAll(v) column generation started (``warm_mode``); ``None`` for other families.

    >>> warm_mode_of(None) is None
    True
    """
    if isinstance(figures, AllToAllFigures | AllToAllvFigures):
        return figures.warm_mode
    return None

"""synth/figures.py: typed, frozen figure records instead of a ``stats`` dict; ``to_dict()`` keeps
the JSON keys loopcoll wrote before them (issue 29); options that do not apply raise."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from loopcoll.cli import main
from msccl_xml import CheckResult
from synth import (
    AllToAllFigures,
    AllToAllvFigures,
    Bound,
    DepthFigures,
    ReductionFigures,
    RoutedAllToAllFigures,
    RoutedTreeFigures,
    SolverError,
    SynthResult,
    TreeFigures,
    load_topology,
    synthesize,
)
from synth.alltoall_cg import (
    AllToAllBound,
    AllToAllvBound,
    AllToAllvResult,
    synthesize_alltoall,
    synthesize_alltoallv,
)
from synth.latency import synthesize_depth_bounded
from synth.simulation import SimResult
from synth.topologies import Topology, topology_from_dict
from tests.nic_fabrics import shared_nic_fabric

# The figures' JSON keys, in order, as main wrote them before the records (``stats``, commit 54191b3).
TREE_KEYS = ["phase1_maxflows", "phase1_s", "phase2_s", "split_maxflows", "split_probes", "switches_same_incident",
             "split_bulk", "split_mode", "logical_arcs", "pack_maxflows", "pack_skipped", "tree_classes", "phase3_s",
             "mapback_s", "k", "trees", "kept_tree_units"]
WARM_TREE_KEYS = TREE_KEYS[:9] + ["warm_accept", "reused_edges_frac", "reused_tree_units"] + TREE_KEYS[12:]
ALLTOALL_KEYS = ["lp_algbw_GBps", "lp_bound_algbw_GBps", "gap", "cg_iterations", "lp_pivots", "columns", "paths",
                 "max_steps", "hop_diameter", "warm_mode", "trees_dropped", "dive_steps", "dive_backtracks",
                 "dive_columns_added", "dive_lp_solves", "dived", "setup_time_s", "cg_time_s", "lp_time_s",
                 "pricing_time_s", "rounding_time_s", "schedule_time_s", "nchunks", "binding_limit", "rounding_tried"]
ROUTED_TREE_KEYS = ["routing", "routed_optimal_algbw_GBps", "routed_optimum_proven", "routed_bound_algbw_GBps",
                    "lp_rounds", "cg_rounds", "seeded_trees", "lp_s", "k", "trees", "binding_limit",
                    "free_optimal_algbw_GBps", "routing_gap_pct"]
ROUTED_ALLTOALL_KEYS = ["routing", "routed_optimal_algbw_GBps", "routed_optimum_proven", "routed_bound_algbw_GBps",
                        "lp_algbw_GBps", "lp_rounds", "lp_columns", "seeded_columns", "lp_s", "nchunks",
                        "binding_limit", "rounding_tried", "gap", "free_optimal_algbw_GBps", "routing_gap_pct"]
DEPTH_KEYS = ["depth", "max_depth", "k", "trees", "lp_algbw_GBps", "depth_bound_algbw_GBps",
              "unbounded_optimal_algbw_GBps", "rounding_bound_algbw_GBps", "lp_gap_pct", "rounding_gap_pct",
              "iterations", "columns", "columns_dropped"]
DEPTH_UNBOUNDED_KEYS = ["depth", "max_depth", "lp_algbw_GBps", "depth_bound_algbw_GBps",
                        "unbounded_optimal_algbw_GBps", "lp_gap_pct"]
ALLTOALLV_KEYS = ["lp_completion_s", "lower_bound_s", "gap", "cg_iterations", "lp_pivots", "columns", "paths",
                  "max_steps", "warm_mode", "largest_remainder_completion_s", "greedy_remainder_completion_s", "moves",
                  "setup_time_s", "cg_time_s", "lp_solve_time_s", "pricing_time_s", "rounding_time_s",
                  "schedule_time_s"]

# `loopcoll synth --json` keys on main (54191b3), for the three cases of the issue.
CLI_KEYS = {
    ("allgather", "nvswitch:4"): ["algbw_GBps", "collective", "gap_pct", "nchunks", "nranks", "optimal_algbw_GBps",
                                  "routing", "solve_time_s", "status", "topology", "warm"],
    ("alltoall", "hpn:1x2x8"): ["algbw_GBps", "binding_limit", "collective", "gap", "gap_pct", "lp_algbw_GBps",
                                "nchunks", "nranks", "optimal_algbw_GBps", "routing", "solve_time_s", "status",
                                "topology", "warm"],
    ("allgather", "shared"): ["algbw_GBps", "binding_limit", "collective", "free_optimal_algbw_GBps", "gap_pct",
                              "nchunks", "nranks", "optimal_algbw_GBps", "routed_optimal_algbw_GBps", "routing",
                              "routing_gap_pct", "solve_time_s", "status", "topology", "warm"],
}


def _shared() -> Topology:
    return topology_from_dict(shared_nic_fabric(2, 4, 2)[0])


def test_no_public_result_has_a_stats_attribute() -> None:
    for cls in (SynthResult, AllToAllvResult, Bound, SimResult, CheckResult, AllToAllBound, AllToAllvBound):
        assert "stats" not in {f.name for f in dataclasses.fields(cls)} and not hasattr(cls, "stats"), cls
    res = synthesize("allgather", load_topology("ring:4"))
    assert not hasattr(res, "stats") and isinstance(res.figures, TreeFigures)


def test_results_are_built_by_keyword_only() -> None:
    with pytest.raises(TypeError):
        SynthResult(None, "ok", None, 1.0, 1.0, 0.0, 0.1)  # type: ignore[misc]
    with pytest.raises(TypeError):
        AllToAllvResult(None, "ok", None, 0.0, 0.0, 0.0, 0.1)  # type: ignore[misc]


def test_figures_are_frozen_all_the_way_down() -> None:
    figs = synthesize("allreduce", load_topology("ring:4")).figures
    assert isinstance(figs, ReductionFigures) and isinstance(figs.allgather, TreeFigures)
    with pytest.raises(dataclasses.FrozenInstanceError):
        figs.k = 0  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        figs.allgather.split.mode = "x"  # type: ignore[misc]


def _keys(figures: object) -> list[str]:
    assert figures is not None
    return list(figures.to_dict())  # type: ignore[attr-defined]


def test_tree_figures_keep_their_json_keys_cold_and_warm() -> None:
    cold = synthesize("allgather", load_topology("hpn:1x2x4"), routing="free")
    assert isinstance(cold.figures, TreeFigures) and _keys(cold.figures) == TREE_KEYS
    warm = synthesize("allgather", load_topology("hpn:1x2x4", ["fail1"]), warm_from=cold, routing="free")
    assert isinstance(warm.figures, TreeFigures) and _keys(warm.figures) == WARM_TREE_KEYS
    doc = warm.figures.to_dict()
    assert doc["warm_accept"] == warm.figures.warm_accept and doc["k"] == warm.figures.k == warm.schedule.nchunks
    assert doc["reused_edges_frac"] == warm.figures.reused_edges_frac and 0 < doc["reused_edges_frac"] <= 1
    capped = synthesize("allgather", load_topology("hpn:1x2x4"), chunks=1, routing="free")
    assert _keys(capped.figures) == TREE_KEYS[:1] + ["fixed_k_maxflows"] + TREE_KEYS[1:]
    ar = synthesize("allreduce", load_topology("ring:4")).figures
    assert isinstance(ar, ReductionFigures)
    doc = ar.to_dict()
    assert list(doc) == ["reducescatter", "allgather", "k", "trees"] and list(doc["allgather"]) == TREE_KEYS


def test_alltoall_figures_keep_their_json_keys_and_values() -> None:
    topo = load_topology("hpn:1x2x8")
    cold = synthesize("alltoall", topo)
    assert isinstance(cold.figures, AllToAllFigures) and _keys(cold.figures) == ALLTOALL_KEYS
    doc = cold.figures.to_dict()
    assert doc["gap"] == cold.figures.gap == cold.gap_pct / 100 and doc["max_steps"] == cold.figures.max_steps
    assert doc["rounding_tried"] == [list(t) for t in cold.figures.rounding_tried or ()]
    json.dumps(doc)  # JSON-able
    repaired = synthesize_alltoall(load_topology("hpn:1x2x8", ["fail2"]), warm_start=synthesize_alltoall(topo))
    assert isinstance(repaired.figures, AllToAllFigures) and repaired.figures.warm_mode == "repair"
    assert _keys(repaired.figures) == ALLTOALL_KEYS[:11] + ["repaired_blocks"] + ALLTOALL_KEYS[11:]


def test_routed_figures_keep_their_json_keys() -> None:
    topo = _shared()
    trees = synthesize("allgather", topo)
    assert isinstance(trees.figures, RoutedTreeFigures) and _keys(trees.figures) == ROUTED_TREE_KEYS
    routing = trees.figures.routing
    assert routing.free_optimal_algbw_GBps is not None and routing.routing_gap_pct == 0.0
    a2a = synthesize("alltoall", topo)
    assert isinstance(a2a.figures, RoutedAllToAllFigures) and _keys(a2a.figures) == ROUTED_ALLTOALL_KEYS
    assert a2a.figures.to_dict()["gap"] == a2a.figures.gap


def test_depth_and_alltoallv_figures_keep_their_json_keys() -> None:
    topo = load_topology("hpn:1x2x4")
    bounded = synthesize_depth_bounded("allgather", topo, 2)
    assert isinstance(bounded.figures, DepthFigures) and _keys(bounded.figures) == DEPTH_KEYS
    unbounded = synthesize_depth_bounded("allgather", topo, None)
    assert isinstance(unbounded.figures, DepthFigures) and isinstance(unbounded.figures.inner, TreeFigures)
    assert _keys(unbounded.figures) == TREE_KEYS + DEPTH_UNBOUNDED_KEYS
    demand = [[0 if i == j else 1000 * (1 + i + j) for j in range(4)] for i in range(4)]
    v = synthesize_alltoallv(load_topology("nvswitch:4"), demand)
    assert isinstance(v.figures, AllToAllvFigures) and _keys(v.figures) == ALLTOALLV_KEYS
    assert synthesize_alltoallv(load_topology("nvswitch:4"), [[0] * 4 for _ in range(4)]).figures is None


@pytest.mark.parametrize(("collective", "spec"), list(CLI_KEYS))
def test_synth_json_keys_are_unchanged(capsys: pytest.CaptureFixture[str], tmp_path: Path, collective: str,
                                       spec: str) -> None:
    arg = spec
    if spec == "shared":  # a routed fabric, as a user's topology file
        arg = str(tmp_path / "shared.json")
        Path(arg).write_text(json.dumps(shared_nic_fabric(2, 4, 2)[0]))
    assert main(["synth", collective, arg, "--json"]) == 0
    assert sorted(json.loads(capsys.readouterr().out)) == CLI_KEYS[(collective, spec)]


@pytest.mark.parametrize("collective", ["allgather", "reducescatter", "allreduce"])
def test_options_that_do_not_apply_to_a_tree_collective_raise(collective: str) -> None:
    topo = load_topology("nvswitch:4")
    with pytest.raises(SolverError, match=rf"max_steps=3 does not apply to {collective}"):
        synthesize(collective, topo, max_steps=3)  # type: ignore[call-overload]
    with pytest.raises(SolverError, match=rf"solver='ortools' does not apply to {collective} with free routing"):
        synthesize(collective, topo, solver="ortools")  # type: ignore[call-overload]
    assert synthesize(collective, topo, solver="highs").success  # type: ignore[call-overload]


def test_solver_applies_to_routed_trees_and_alltoall() -> None:
    assert synthesize("allgather", _shared(), solver="ortools").success
    assert synthesize("alltoall", load_topology("nvswitch:4"), solver="ortools", max_steps=1).success


def test_alltoallv_is_never_routed() -> None:
    with pytest.raises(SolverError, match="routing='routed' does not apply to alltoallv"):
        synthesize("alltoallv", load_topology("nvswitch:4"), demand=[[0, 1], [1, 0]], ranks=[0, 1], routing="routed")

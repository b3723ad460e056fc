"""The curated public API: ``synth.__all__`` and ``synth.topologies.__all__`` are pinned.

Adding or removing a public name is an API change; update the lists here on purpose.
"""

from __future__ import annotations

import importlib

import pytest

SYNTH_ALL = [
    "AllToAllFigures",
    "AllToAllvFigures",
    "Bound",
    "COLLECTIVES",
    "Collective",
    "CutLink",
    "DepthFigures",
    "Figures",
    "Hop",
    "Link",
    "LoopcollError",
    "Node",
    "NodeKind",
    "ReductionFigures",
    "Route",
    "RouteKind",
    "RoutedAllToAllFigures",
    "RoutedTreeFigures",
    "RoutingFigures",
    "Schedule",
    "ScheduleError",
    "SolverError",
    "Status",
    "SynthResult",
    "Topology",
    "TopologyError",
    "TreeFigures",
    "XmlError",
    "busbw_GBps",
    "load_topology",
    "named_topology",
    "optimal_bound",
    "read_schedule",
    "synthesize",
    "write_schedule",
]

TOPOLOGIES_ALL = [
    "FAILURES",
    "Link",
    "NAMED_SPECS",
    "NETWORK_ROLES",
    "NicLayout",
    "Node",
    "NodeKind",
    "ROLES",
    "RailLayout",
    "Topology",
    "apply_failure",
    "apply_failures",
    "communicator",
    "communicator_meta",
    "dgx_a100",
    "dgx_h100",
    "exact_gbps",
    "global_ranks",
    "hpn",
    "infer_role",
    "load_topology",
    "named_topology",
    "nic_layout",
    "nvswitch",
    "rail_layout",
    "read_topology",
    "ring",
    "switch_roles",
    "topology_from_dict",
    "topology_from_json",
    "topology_to_dict",
    "topology_to_json",
    "torus",
    "write_topology",
]


@pytest.mark.parametrize(("module", "expected"), [("synth", SYNTH_ALL), ("synth.topologies", TOPOLOGIES_ALL)])
def test_all_is_pinned(module: str, expected: list[str]) -> None:
    mod = importlib.import_module(module)
    assert sorted(mod.__all__) == expected
    assert len(set(mod.__all__)) == len(mod.__all__)


@pytest.mark.parametrize("module", ["synth", "synth.topologies", "loopcoll"])
def test_every_public_name_resolves(module: str) -> None:
    mod = importlib.import_module(module)
    missing = [name for name in mod.__all__ if not hasattr(mod, name)]
    assert missing == []


def test_star_import_gives_exactly_all() -> None:
    namespace: dict[str, object] = {}
    exec("from synth import *", namespace)  # noqa: S102 - the point is to test star-import
    assert sorted(k for k in namespace if not k.startswith("__")) == SYNTH_ALL


def test_loopcoll_reexports_synth_public_api() -> None:
    import loopcoll
    import synth

    assert set(synth.__all__) <= set(loopcoll.__all__)
    for name in synth.__all__:
        assert getattr(loopcoll, name) is getattr(synth, name)
    assert isinstance(loopcoll.__version__, str) and loopcoll.__version__


def test_shared_names_are_the_same_objects() -> None:
    import synth
    import synth.topologies as topologies

    for name in set(SYNTH_ALL) & set(TOPOLOGIES_ALL):
        assert getattr(synth, name) is getattr(topologies, name)


def test_public_errors_form_one_family() -> None:
    import synth

    for name in ("TopologyError", "ScheduleError", "SolverError", "XmlError"):
        assert issubclass(getattr(synth, name), synth.LoopcollError)
    assert synth.COLLECTIVES == ("allgather", "reducescatter", "allreduce", "alltoall")


def test_synth_imports_nothing_from_higher_layers() -> None:
    # Dependencies point one way: loopcoll -> runtime -> msccl_xml -> synth.
    import subprocess
    import sys

    code = "import sys, synth, synth.topologies; print(sorted({m.split('.')[0] for m in sys.modules}))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120).stdout
    for higher in ("loopcoll", "runtime", "msccl_xml", "torch"):
        assert f"'{higher}'" not in out

"""Every validation rule of docs/topology.md, fed as bad input; the error must name the culprit.

The catalogue of bad documents lives in :data:`tests.strategies.BAD_TOPOLOGY_CASES`, shared with
the CLI tests (which check the same inputs exit 2 with one ``loopcoll: error:`` line).
"""

from __future__ import annotations

import math

import pytest

from synth.errors import LoopcollError, TopologyError
from synth.topologies import Link, Node, NodeKind, Topology, read_topology, topology_from_json
from tests.strategies import BAD_TOPOLOGY_CASES

CASES = [pytest.param(text, match, id=case) for case, text, match in BAD_TOPOLOGY_CASES]


@pytest.mark.parametrize(("text", "match"), CASES)
def test_topology_from_json_rejects_bad_input_naming_culprit(text: str, match: str) -> None:
    with pytest.raises(TopologyError, match=match):
        topology_from_json(text)


@pytest.mark.parametrize(("text", "match"), CASES)
def test_read_topology_rejects_bad_file_naming_culprit(tmp_path, text: str, match: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(TopologyError, match=match):
        read_topology(path)


def test_topology_error_is_a_loopcoll_error() -> None:
    assert issubclass(TopologyError, LoopcollError)


# -- the same rules through the Python constructor --------------------------------------------------


def _gpus(n: int) -> list[Node]:
    return [Node(f"gpu{r}", NodeKind.GPU, r) for r in range(n)]


def _ring_links(n: int, gbps: float = 10.0) -> list[Link]:
    return [Link(f"gpu{r}", f"gpu{(r + d) % n}", gbps, 0.0) for r in range(n) for d in (1, n - 1)][: 2 * n]


def test_create_accepts_minimal_two_gpu_topology() -> None:
    topo = Topology.create("pair", _gpus(2), [Link("gpu0", "gpu1", 1.0, 0.0), Link("gpu1", "gpu0", 1.0, 0.0)])
    assert topo.nranks == 2


@pytest.mark.parametrize(
    ("gbps", "match"),
    [(-1.0, r"gpu0->gpu1: gbps .* got -1\.0"), (math.nan, r"gpu0->gpu1: gbps .* got nan"),
     (math.inf, r"gpu0->gpu1: gbps .* got inf"), ("5", r"gpu0->gpu1: gbps .* got '5'"),
     (True, r"gpu0->gpu1: gbps .* got True")],
)
def test_create_rejects_bad_capacity(gbps: object, match: str) -> None:
    links = [Link("gpu0", "gpu1", gbps, 0.0), Link("gpu1", "gpu0", 1.0, 0.0)]  # type: ignore[arg-type]
    with pytest.raises(TopologyError, match=match):
        Topology.create("pair", _gpus(2), links)


@pytest.mark.parametrize("latency", [-1e-9, math.nan, math.inf, None])
def test_create_rejects_bad_latency(latency: object) -> None:
    links = [Link("gpu0", "gpu1", 1.0, 0.0), Link("gpu1", "gpu0", 1.0, latency)]  # type: ignore[arg-type]
    with pytest.raises(TopologyError, match=r"link gpu1->gpu0: latency_us must be finite and >= 0"):
        Topology.create("pair", _gpus(2), links)


def test_create_accepts_zero_capacity_and_zero_latency_links() -> None:
    links = [Link("gpu0", "gpu1", 1.0, 0.0), Link("gpu1", "gpu0", 1.0, 0.0), Link("sw", "gpu0", 0.0, 0.0)]
    topo = Topology.create("pair", [*_gpus(2), Node("sw", NodeKind.SWITCH)], links)
    assert [lk.key for lk in topo.live_links] == [("gpu0", "gpu1"), ("gpu1", "gpu0")]


def test_create_rejects_gpus_joined_only_through_a_down_link() -> None:
    # gpu0 -> gpu1 is live but the only way back is down: not strongly connected over live links.
    links = [Link("gpu0", "gpu1", 1.0, 0.0), Link("gpu1", "gpu0", 0.0, 0.0)]
    with pytest.raises(TopologyError, match=r"gpu 'gpu1' \(rank 1\) and gpu 'gpu0' \(rank 0\) cannot reach"):
        Topology.create("pair", _gpus(2), links)


def test_create_accepts_gpus_reaching_each_other_through_switches_and_relays() -> None:
    # gpu0 -> sw -> gpu1 -> gpu2 -> gpu0: every GPU reaches every other, through a switch and GPU relays.
    nodes = [*_gpus(3), Node("sw", NodeKind.SWITCH)]
    links = [Link("gpu0", "sw", 1.0, 0.0), Link("sw", "gpu1", 1.0, 0.0), Link("gpu1", "gpu2", 1.0, 0.0),
             Link("gpu2", "gpu0", 1.0, 0.0)]
    assert Topology.create("cycle", nodes, links).nranks == 3


def test_create_ignores_unreachable_switch() -> None:
    nodes = [*_gpus(2), Node("lonely", NodeKind.SWITCH)]
    topo = Topology.create("pair", nodes, [Link("gpu0", "gpu1", 1.0, 0.0), Link("gpu1", "gpu0", 1.0, 0.0)])
    assert [s.id for s in topo.switches] == ["lonely"]


def test_create_rejects_non_enum_kind() -> None:
    with pytest.raises(TopologyError, match=r"node 'gpu1': kind must be 'gpu' or 'switch', got 'gpu'"):
        Topology.create("pair", [Node("gpu0", NodeKind.GPU, 0), Node("gpu1", "gpu", 1)], [])  # type: ignore[arg-type]


def test_create_rejects_duplicate_rank_naming_both_nodes() -> None:
    with pytest.raises(TopologyError, match=r"node 'b': rank 0 already used by node 'a'"):
        Topology.create("dup", [Node("a", NodeKind.GPU, 0), Node("b", NodeKind.GPU, 0)], [])


def test_create_reports_the_first_rule_broken_nodes_before_links() -> None:
    # Both a duplicate node and an unknown link end: node rules are checked first.
    nodes = [Node("gpu0", NodeKind.GPU, 0), Node("gpu0", NodeKind.SWITCH)]
    with pytest.raises(TopologyError, match=r"duplicate node id 'gpu0'"):
        Topology.create("x", nodes, [Link("gpu0", "ghost", 1.0, 0.0)])


def test_create_accepts_ring_built_from_helpers() -> None:
    assert Topology.create("ring", _gpus(5), _ring_links(5)).nranks == 5

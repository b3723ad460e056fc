"""The schedule IR (synth/schedule/: parts.py, model.py, validate.py, decode.py, io.py).

Schedules here are built by hand from textbook algorithms (unidirectional and bidirectional rings,
direct AllToAll on one NVSwitch), so their loads and algbw have closed forms.
"""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synth import optimal_bound
from synth.errors import ScheduleError
from synth.schedule import SCHEDULE_FORMAT, CutLink, Hop, Route, RouteKind, Schedule
from synth.schedule.io import read_schedule, write_schedule
from synth.topologies import Topology, named_topology

OUT, IN, PATH = RouteKind.OUT_TREE, RouteKind.IN_TREE, RouteKind.PATH


def direct(a: int, b: int) -> Hop:
    return Hop(a, b, (f"gpu{a}", f"gpu{b}"))


def via(a: int, b: int, *switches: str) -> Hop:
    return Hop(a, b, (f"gpu{a}", *switches, f"gpu{b}"))


def ring_allgather(n: int, *, bidirectional: bool) -> Schedule:
    """Ring AllGather on ring:n: one chunk per direction, each travelling n-1 hops."""
    routes = []
    for root in range(n):
        for step in (1, -1) if bidirectional else (1,):
            hops = tuple(direct((root + step * i) % n, (root + step * (i + 1)) % n) for i in range(n - 1))
            routes.append(Route(OUT, root, 1, hops))
    return Schedule("allgather", n, 2 if bidirectional else 1, tuple(routes))


def star_alltoall(n: int) -> Schedule:
    """Direct AllToAll on nvswitch:n: every block straight through the switch."""
    routes = tuple(Route(PATH, s, 1, (via(s, d, "nvs0.0"),), dest=d) for s in range(n) for d in range(n) if s != d)
    return Schedule("alltoall", n, 1, routes)


def star_allreduce(n: int) -> Schedule:
    """Reduce-then-broadcast of every rank's share through the switch of nvswitch:n."""
    routes = []
    for root in range(n):
        others = [r for r in range(n) if r != root]
        routes.append(Route(IN, root, 1, tuple(via(r, root, "nvs0.0") for r in others)))
        routes.append(Route(OUT, root, 1, tuple(via(root, r, "nvs0.0") for r in others)))
    return Schedule("allreduce", n, 1, tuple(routes))


# -- loads and algbw --------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [3, 4, 5, 8])
def test_bidirectional_ring_allgather_reaches_closed_form_and_bound(n: int) -> None:
    topo = named_topology(f"ring:{n}")
    sched = ring_allgather(n, bidirectional=True)
    sched.validate(topo)
    loads = sched.link_loads()
    assert set(loads) == {lk.key for lk in topo.links} and set(loads.values()) == {n - 1}
    assert sched.rate_GBps(topo) == Fraction(2 * 50, n - 1)
    assert sched.algbw_GBps(topo) == pytest.approx(n * 2 * 50 / (n - 1), rel=1e-12)
    assert sched.algbw_GBps(topo) == pytest.approx(optimal_bound("allgather", topo).algbw_GBps, rel=1e-12)
    assert sched.busbw_GBps(topo) == pytest.approx(sched.algbw_GBps(topo) * (n - 1) / n)


def test_unidirectional_ring_allgather_on_ring4() -> None:
    topo = named_topology("ring:4")
    sched = ring_allgather(4, bidirectional=False)
    sched.validate(topo)
    assert sched.link_loads() == {("gpu0", "gpu1"): 3, ("gpu1", "gpu2"): 3, ("gpu2", "gpu3"): 3, ("gpu3", "gpu0"): 3}
    assert sched.rate_GBps(topo) == Fraction(50, 3)
    assert sched.algbw_GBps(topo) == pytest.approx(4 * 50 / 3)
    assert sched.time_s(topo, 1e9) == pytest.approx(1e9 / (4 * 50 / 3 * 1e9))


@pytest.mark.parametrize("n", [2, 3, 4, 8])
def test_direct_alltoall_on_nvswitch_reaches_the_bound(n: int) -> None:
    topo = named_topology(f"nvswitch:{n}")
    sched = star_alltoall(n)
    sched.validate(topo)
    assert set(sched.link_loads().values()) == {n - 1}
    assert sched.algbw_GBps(topo) == pytest.approx(n * 360 / (n - 1), rel=1e-12)
    assert sched.algbw_GBps(topo) == pytest.approx(optimal_bound("alltoall", topo).algbw_GBps, rel=1e-6)


def test_star_allreduce_on_nvswitch3_reaches_the_bound_and_doubles_busbw() -> None:
    topo = named_topology("nvswitch:3")
    sched = star_allreduce(3)
    sched.validate(topo)
    assert set(sched.link_loads().values()) == {4}  # 2 in-tree + 2 out-tree chunks per GPU link
    assert sched.algbw_GBps(topo) == pytest.approx(270.0)
    assert sched.algbw_GBps(topo) == pytest.approx(optimal_bound("allreduce", topo).algbw_GBps)
    assert sched.busbw_GBps(topo) == pytest.approx(270.0 * 2 * 2 / 3)


def test_reducescatter_from_in_trees() -> None:
    topo = named_topology("nvswitch:3")
    routes = tuple(r for r in star_allreduce(3).routes if r.kind is IN)
    sched = Schedule("reducescatter", 3, 1, routes)
    sched.validate(topo)
    assert sched.algbw_GBps(topo) == pytest.approx(optimal_bound("reducescatter", topo).algbw_GBps)


def test_link_loads_weight_by_route_chunks_and_omit_unused_links() -> None:
    sched = Schedule("allgather", 2, 3, (Route(OUT, 0, 3, (direct(0, 1),)), Route(OUT, 1, 3, (direct(1, 0),))))
    assert sched.link_loads() == {("gpu0", "gpu1"): 3, ("gpu1", "gpu0"): 3}
    topo = named_topology("ring:3")
    partial = Schedule("allgather", 3, 1, ring_allgather(3, bidirectional=False).routes)
    assert ("gpu1", "gpu0") not in partial.link_loads()
    assert partial.algbw_GBps(topo) == pytest.approx(75.0)


def test_rate_errors_name_the_link() -> None:
    sched = ring_allgather(4, bidirectional=False)
    with pytest.raises(ScheduleError, match=r"schedule uses link gpu0->gpu1, absent from topology 'nvswitch-4'"):
        sched.algbw_GBps(named_topology("nvswitch:4"))
    down = named_topology("ring:4").scaled("gpu1", "gpu2", 0.0)
    with pytest.raises(ScheduleError, match=r"schedule uses link gpu1->gpu2, which is down"):
        sched.algbw_GBps(down)
    empty = Schedule("allgather", 2, 1, (Route(OUT, 0, 1, ()),))
    with pytest.raises(ScheduleError, match=r"schedule moves no data"):
        empty.rate_GBps(named_topology("ring:2"))


# -- bottleneck cut and base slacks ---------------------------------------------------------------


def test_slacks_and_bottleneck_for_with_one_fast_link() -> None:
    topo = named_topology("ring:4").scaled("gpu0", "gpu1", 2.0)
    sched = ring_allgather(4, bidirectional=False)
    slacks = sched.slacks(topo)
    assert slacks[("gpu0", "gpu1")] == pytest.approx(0.5)
    assert all(slacks[k] == pytest.approx(0.0) for k in slacks if k != ("gpu0", "gpu1"))
    saturated = sched.bottleneck_for(topo)
    assert [(c.src, c.dst) for c in saturated] == [("gpu1", "gpu2"), ("gpu2", "gpu3"), ("gpu3", "gpu0")]
    assert all(c.base_slack == pytest.approx(0.0) for c in saturated)
    given_cut = sched.bottleneck_for(topo, [("gpu1", "gpu0"), ("gpu0", "gpu1"), ("gpu0", "gpu1")])
    assert given_cut == (CutLink("gpu0", "gpu1", pytest.approx(0.5)), CutLink("gpu1", "gpu0", 1.0))


def test_with_bottleneck_stamps_cut_and_fingerprint() -> None:
    topo = named_topology("ring:4")
    sched = ring_allgather(4, bidirectional=True).with_bottleneck(topo)
    assert sched.topology_fingerprint == topo.fingerprint
    assert len(sched.bottleneck) == 8 and all(c.base_slack == pytest.approx(0.0) for c in sched.bottleneck)
    assert ring_allgather(4, bidirectional=True).bottleneck == ()  # the original is unchanged


# -- validate() ---------------------------------------------------------------------------------------


def _ag(routes: list[Route], n: int = 4, nchunks: int = 1) -> Schedule:
    return Schedule("allgather", n, nchunks, tuple(routes))


def _good_ag_routes(n: int = 4) -> list[Route]:
    return list(ring_allgather(n, bidirectional=False).routes)


def _replace_route(i: int, route: Route, n: int = 4) -> list[Route]:
    routes = _good_ag_routes(n)
    routes[i] = route
    return routes


RING4 = named_topology("ring:4")
NVS4 = named_topology("nvswitch:4")


@pytest.mark.parametrize(
    ("sched", "topo", "match"),
    [
        # out-tree missing a rank
        (_ag(_replace_route(0, Route(OUT, 0, 1, (direct(0, 1), direct(1, 2))))), RING4,
         r"route 0 \(out_tree, root 0\): out-tree from rank 0 misses rank\(s\) \[3\]"),
        # a rank receiving twice
        (_ag(_replace_route(1, Route(OUT, 1, 1, (direct(1, 2), direct(2, 3), direct(1, 0), direct(3, 0))))), RING4,
         r"route 1 \(out_tree, root 1\): rank 0 receives the data twice \(hop 3->0\)"),
        # the root receiving its own data
        (_ag(_replace_route(2, Route(OUT, 2, 1, (direct(2, 3), direct(3, 0), direct(0, 1), direct(1, 2))))), RING4,
         r"route 2 .*rank 2 receives the data twice"),
        # a hop leaving a rank before it holds the data
        (_ag(_replace_route(0, Route(OUT, 0, 1, (direct(1, 2), direct(0, 1), direct(2, 3))))), RING4,
         r"route 0 .*hop 1->2 leaves rank 1 before it holds the data"),
        # a hop path through a GPU
        (_ag(_replace_route(0, Route(OUT, 0, 1, (Hop(0, 2, ("gpu0", "gpu1", "gpu2")), direct(0, 1), direct(2, 3))))),
         RING4, r"route 0 .*hop 0->2 passes through gpu 'gpu1'; relays must be separate hops"),
        # a hop path over a missing link
        (_ag(_replace_route(0, Route(OUT, 0, 1, (Hop(0, 2, ("gpu0", "gpu2")), direct(0, 1), direct(2, 3))))),
         RING4, r"route 0 .*hop 0->2 uses link gpu0->gpu2, absent from 'ring-4'"),
        # a hop path over a down link
        (_ag(_good_ag_routes()), RING4.scaled("gpu2", "gpu3", 0.0),
         r"hop 2->3 uses link gpu2->gpu3, which is down \(0 Gbit/s\)"),
        # a hop path through an unknown node
        (_ag(_replace_route(0, Route(OUT, 0, 1, (Hop(0, 1, ("gpu0", "nvs9", "gpu1")), direct(1, 2), direct(2, 3))))),
         RING4, r"route 0 .*hop 0->1 passes through unknown node 'nvs9'"),
        # a hop path not starting/ending at its GPUs
        (_ag(_replace_route(0, Route(OUT, 0, 1, (Hop(0, 1, ("gpu1", "gpu0")), direct(1, 2), direct(2, 3))))),
         RING4, r"hop 0->1 path gpu1->gpu0 must run from gpu0 to gpu1"),
        (_ag(_replace_route(0, Route(OUT, 0, 1, (Hop(0, 1, ("gpu0",)), direct(1, 2), direct(2, 3))))),
         RING4, r"hop 0->1 has a physical path of 1 node\(s\)"),
        # chunk totals
        (_ag(_good_ag_routes(), nchunks=2), RING4, r"out-tree of rank 0 carries 1 chunk\(s\), expected nchunks=2"),
        (_ag([*_good_ag_routes(), _good_ag_routes()[2]]), RING4,
         r"out-tree of rank 2 carries 2 chunk\(s\), expected nchunks=1"),
        (_ag(_good_ag_routes()[1:]), RING4, r"out-tree of rank 0 carries 0 chunk\(s\)"),
        (_ag(_replace_route(3, Route(OUT, 3, 0, _good_ag_routes()[3].hops))), RING4,
         r"route 3 .*chunks must be an integer >= 1, got 0"),
        # ranks out of range, wrong size
        (_ag(_replace_route(3, Route(OUT, 3, 1, (direct(3, 4),)))), RING4, r"route 3 .*rank 4 out of range 0\.\.3"),
        (ring_allgather(3, bidirectional=False), RING4, r"schedule is for 3 ranks but topology 'ring-4' has 4"),
        (Schedule("allgather", 4, 1, ()), RING4, r"schedule has no routes"),
        # wrong route kind for the collective
        (Schedule("allgather", 4, 1, star_alltoall(4).routes), NVS4,
         r"route 0 \(path, root 0\): path routes do not belong in a schedule of collective 'allgather'"),
        (Schedule("alltoall", 4, 1, tuple(_good_ag_routes())), RING4, r"route 0 .*out_tree routes do not belong in a schedule of collective 'alltoall'"),
        (Schedule("reducescatter", 4, 1, star_allreduce(4).routes), NVS4,
         r"route 1 \(out_tree, root 0\): out_tree routes do not belong in a schedule of collective 'reducescatter'"),
        # AllReduce needs both trees
        (Schedule("allreduce", 4, 1, tuple(r for r in star_allreduce(4).routes if r.kind is OUT)), NVS4,
         r"in-tree of rank 0 carries 0 chunk\(s\)"),
    ],
)
def test_validate_rejects_broken_schedule_naming_culprit(sched: Schedule, topo: Topology, match: str) -> None:
    with pytest.raises(ScheduleError, match=match):
        sched.validate(topo)


def _in_tree(root: int, hops: list[Hop]) -> Schedule:
    routes = [r for r in star_allreduce(4).routes if r.kind is IN and r.root != root]
    return Schedule("reducescatter", 4, 1, (*routes, Route(IN, root, 1, tuple(hops))))


@pytest.mark.parametrize(
    ("hops", "match"),
    [
        # double contribution
        ([via(1, 0, "nvs0.0"), via(2, 0, "nvs0.0"), via(3, 0, "nvs0.0"), via(1, 0, "nvs0.0")],
         r"root 0\): rank 1 contributes twice \(hop 1->0\)"),
        # a contribution missing
        ([via(1, 0, "nvs0.0"), via(2, 0, "nvs0.0")], r"in-tree into rank 0 misses the contribution of rank\(s\) \[3\]"),
        # root sending its partial sum away
        ([via(1, 0, "nvs0.0"), via(2, 0, "nvs0.0"), via(3, 0, "nvs0.0"), via(0, 1, "nvs0.0")],
         r"root rank 0 sends its partial sum away \(hop 0->1\)"),
        # receiving after having sent (order: leaves first)
        ([via(1, 2, "nvs0.0"), via(3, 1, "nvs0.0"), via(2, 0, "nvs0.0")],
         r"rank 1 receives after it already sent \(hop 3->1\)"),
    ],
)
def test_validate_rejects_broken_in_tree(hops: list[Hop], match: str) -> None:
    with pytest.raises(ScheduleError, match=match):
        _in_tree(0, hops).validate(NVS4)


def test_validate_accepts_relayed_in_tree() -> None:
    # 3 -> 1 -> 0 and 2 -> 0: a chain through a relay, leaves first.
    _in_tree(0, [via(3, 1, "nvs0.0"), via(1, 0, "nvs0.0"), via(2, 0, "nvs0.0")]).validate(NVS4)


def _alltoall_with(route: Route) -> Schedule:
    routes = [r for r in star_alltoall(4).routes if (r.root, r.dest) != (route.root, route.dest)]
    return Schedule("alltoall", 4, 1, (*routes, route))


@pytest.mark.parametrize(
    ("route", "match"),
    [
        # path not reaching its destination
        (Route(PATH, 0, 1, (via(0, 1, "nvs0.0"),), dest=2), r"path from rank 0 ends at rank 1, not 2"),
        (Route(PATH, 0, 1, (), dest=2), r"path from rank 0 ends at rank 0, not 2"),
        # a hop that does not continue the path
        (Route(PATH, 0, 1, (via(0, 1, "nvs0.0"), via(3, 2, "nvs0.0")), dest=2),
         r"hop 3->2 does not continue the path at rank 1"),
        # revisiting a rank
        (Route(PATH, 0, 1, (via(0, 1, "nvs0.0"), via(1, 0, "nvs0.0"), via(0, 2, "nvs0.0")), dest=2),
         r"path revisits rank 0"),
        # no destination / destination = source
        (Route(PATH, 0, 1, (via(0, 2, "nvs0.0"),)), r"a path route needs a destination other than its source, got None"),
    ],
)
def test_validate_rejects_broken_path(route: Route, match: str) -> None:
    with pytest.raises(ScheduleError, match=match):
        _alltoall_with(route).validate(NVS4)


def test_validate_accepts_relayed_alltoall_path_and_counts_blocks() -> None:
    relayed = Route(PATH, 0, 1, (via(0, 1, "nvs0.0"), via(1, 2, "nvs0.0")), dest=2)
    _alltoall_with(relayed).validate(NVS4)
    missing = Schedule("alltoall", 4, 1, tuple(r for r in star_alltoall(4).routes if (r.root, r.dest) != (3, 1)))
    with pytest.raises(ScheduleError, match=r"block 3->1 carries 0 chunk\(s\), expected nchunks=1"):
        missing.validate(NVS4)


def test_split_chunks_over_several_routes_validate() -> None:
    # Two routes of one chunk each for every source of a 2-chunk schedule.
    sched = ring_allgather(5, bidirectional=True)
    assert sched.nchunks == 2 and len(sched.routes) == 10
    sched.validate(named_topology("ring:5"))


# -- construction errors --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"collective": "broadcast"}, r"unknown collective 'broadcast'; known: allgather, reducescatter"),
        ({"nranks": 1}, r"nranks must be an integer >= 2, got 1"),
        ({"nranks": True}, r"nranks must be an integer >= 2, got True"),
        ({"nchunks": 0}, r"nchunks must be an integer >= 1, got 0"),
        ({"nchunks": 1.0}, r"nchunks must be an integer >= 1, got 1\.0"),
        ({"meta": {"x": float("nan")}}, r"schedule meta must be JSON-serialisable"),
        ({"meta": {"x": object()}}, r"schedule meta must be JSON-serialisable"),
    ],
)
def test_schedule_constructor_rejects_bad_fields(kwargs: dict, match: str) -> None:
    args = {"collective": "allgather", "nranks": 2, "nchunks": 1, "routes": ()}
    with pytest.raises(ScheduleError, match=match):
        Schedule(**{**args, **kwargs})


def test_schedule_meta_is_frozen_and_with_meta_copies() -> None:
    sched = ring_allgather(3, bidirectional=False).with_meta(synthesizer="ring", solve_time_s=0.5)
    assert dict(sched.meta) == {"synthesizer": "ring", "solve_time_s": 0.5}
    with pytest.raises(TypeError):
        sched.meta["x"] = 1  # type: ignore[index]
    assert dict(sched.with_meta(solve_time_s=1.0).meta)["solve_time_s"] == 1.0
    assert dict(sched.meta)["solve_time_s"] == 0.5


def test_schedules_are_unhashable_but_comparable() -> None:
    a, b = ring_allgather(3, bidirectional=False), ring_allgather(3, bidirectional=False)
    assert a == b and a != ring_allgather(3, bidirectional=True)
    assert (a == "x") is False
    with pytest.raises(TypeError):
        hash(a)


# -- JSON --------------------------------------------------------------------------------------------


def _rich() -> Schedule:
    topo = named_topology("ring:4")
    sched = ring_allgather(4, bidirectional=True).with_bottleneck(topo, [("gpu0", "gpu1")])
    return sched.with_meta(synthesizer="hand", bound={"algbw_GBps": 133.33333333333334}, note=None, ks=[1, 2])


@pytest.mark.parametrize("make", [_rich, lambda: star_alltoall(4), lambda: star_allreduce(3)])
def test_json_round_trip_is_exact(make) -> None:
    sched = make()
    text = sched.to_json()
    back = Schedule.from_json(text)
    assert back == sched
    assert back.to_json() == text
    assert json.loads(text)["format"] == SCHEDULE_FORMAT
    assert text.endswith("\n") and "\n" not in text[:-1]


def test_write_and_read_schedule_file(tmp_path: Path) -> None:
    sched = _rich()
    path = tmp_path / "s.json"
    write_schedule(sched, str(path))
    assert read_schedule(str(path)) == sched
    assert path.read_text(encoding="utf-8") == sched.to_json()


def test_read_schedule_names_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ScheduleError, match=r"gone\.json: cannot read schedule file"):
        read_schedule(str(tmp_path / "gone.json"))


def _doc() -> dict:
    """The old ``/1`` form (hops spelt out per route); the compact form's errors: test_schedule_compact.py."""
    return star_alltoall(3).to_dict(legacy=True)


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda d: d.update(format="other/1"), r"not a loopcoll schedule \(format 'other/1', expected 'loopcoll-schedule/2' or 'loopcoll-schedule/1'\)"),
        (lambda d: d.pop("format"), r"not a loopcoll schedule \(format None"),
        (lambda d: d.update(routes={}), r"'routes' must be a list"),
        (lambda d: d["routes"][1].update(kind="tree"), r"routes\[1\]: unknown route kind 'tree'"),
        (lambda d: d["routes"][2].update(chunks="1"), r"routes\[2\]\.chunks must be an integer, got '1'"),
        (lambda d: d["routes"][2].update(root=None), r"routes\[2\]\.root must be an integer, got None"),
        (lambda d: d["routes"][0].update(dest=1.5), r"routes\[0\]\.dest must be an integer, got 1\.5"),
        (lambda d: d["routes"][0]["hops"][0].update(src=True), r"routes\[0\]\.hops\[0\]\.src must be an integer, got True"),
        (lambda d: d["routes"][0]["hops"][0].update(path="gpu0"), r"routes\[0\]\.hops\[0\] must be an object with a 'path' list"),
        (lambda d: d["routes"][0]["hops"][0].update(path=["gpu0", 1]), r"routes\[0\]\.hops\[0\]\.path must hold node id strings"),
        (lambda d: d["routes"].append(3), r"routes\[6\] must be an object"),
        (lambda d: d.update(nranks="3"), r"nranks must be an integer, got '3'"),
        (lambda d: d.update(collective="gather"), r"unknown collective 'gather'"),
        (lambda d: d.update(meta=[]), r"'meta' must be an object"),
        (lambda d: d.update(bottleneck=[1]), r"bottleneck entries must be objects"),
    ],
)
def test_from_dict_rejects_bad_document_naming_field(mutate, match: str) -> None:
    doc = _doc()
    mutate(doc)
    with pytest.raises(ScheduleError, match=match):
        Schedule.from_dict(doc, source="s.json")


def test_from_json_reports_line_and_column() -> None:
    with pytest.raises(ScheduleError, match=r"^x\.json: malformed JSON at line 2 column 1"):
        Schedule.from_json('{"format": 1,\n}', source="x.json")
    with pytest.raises(ScheduleError, match=r"a schedule must be a JSON object"):
        Schedule.from_json("[]")


_ranks = st.integers(0, 7)
_hops = st.lists(st.builds(Hop, _ranks, _ranks, st.lists(st.sampled_from(["gpu0", "gpu1", "nvs0.0", "tor0.1"]),
                                                        max_size=4).map(tuple)), max_size=4).map(tuple)
_routes = st.builds(Route, st.sampled_from(list(RouteKind)), _ranks, st.integers(1, 10), _hops,
                    st.one_of(st.none(), _ranks))
_json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-10, 10), st.floats(allow_nan=False, allow_infinity=False),
                       st.text(max_size=5))
_meta = st.dictionaries(st.text(max_size=5), st.recursive(_json_leaf, lambda c: st.lists(c, max_size=3), max_leaves=5),
                        max_size=4)


@settings(max_examples=100)
@given(
    collective=st.sampled_from(["allgather", "reducescatter", "allreduce", "alltoall"]),
    nranks=st.integers(2, 8),
    nchunks=st.integers(1, 12),
    routes=st.lists(_routes, max_size=5),
    cut=st.lists(st.builds(CutLink, st.sampled_from(["gpu0", "nvs0.0"]), st.sampled_from(["gpu1", "tor0.0"]),
                           st.floats(0, 1)), max_size=3),
    fingerprint=st.one_of(st.none(), st.text("0123456789abcdef", min_size=16, max_size=16)),
    meta=_meta,
)
def test_any_schedule_round_trips_exactly(collective, nranks, nchunks, routes, cut, fingerprint, meta) -> None:
    sched = Schedule(collective, nranks, nchunks, tuple(routes), tuple(cut), fingerprint, meta)
    back = Schedule.from_json(sched.to_json())
    assert back == sched
    assert back.to_json() == sched.to_json()
    assert Schedule.from_json(json.dumps(sched.to_dict(legacy=True))) == sched  # the old form still reads

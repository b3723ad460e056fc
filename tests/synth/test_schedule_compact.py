"""The compact schedule JSON (``loopcoll-schedule/2``: synth/schedule/encode.py, decode.py) and the old ``/1``.

Ring schedules are the NCCL-like baselines and hand-built rings; trees are synthesized; hostile
documents are mutations of a real document, each naming the field it breaks.
"""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synth import synthesize
from synth.errors import ScheduleError
from synth.schedule import Hop, Route, RouteKind, Schedule
from synth.schedule.parts import LEGACY_SCHEDULE_FORMAT, SCHEDULE_FORMAT
from synth.topologies import named_topology

OUT, IN = RouteKind.OUT_TREE, RouteKind.IN_TREE


def ring(n: int, *, channels: int = 1, copies: bool = False, kind: RouteKind = OUT) -> Schedule:
    """A ring AllGather (ReduceScatter with ``kind=IN``) of ``channels`` identical channels; routes share
    hop objects unless ``copies``."""
    shared = [Hop(i, (i + 1) % n, (f"gpu{i}", f"gpu{(i + 1) % n}")) for i in range(n)]

    def hop(i: int) -> Hop:
        h = shared[i % n]
        return Hop(h.src, h.dst, tuple(h.path)) if copies else h

    routes = []
    for _ in range(channels):
        for root in range(n):
            hops = tuple(hop(root + k) for k in range(n - 1))
            routes.append(Route(kind, root if kind is OUT else (root + n - 1) % n, 1, hops))
    coll = "allgather" if kind is OUT else "reducescatter"
    return Schedule(coll, n, channels, tuple(routes), meta={"synthesizer": "hand-ring"})


def test_ring_routes_are_windows_and_size_is_linear_in_routes() -> None:
    sched = ring(16, channels=2)
    sched.validate(named_topology("ring:16"))
    doc = sched.to_dict()
    assert doc["format"] == SCHEDULE_FORMAT
    assert len(doc["hops"]) == 16 and doc["cycles"] == [list(range(16))]
    assert all("window" in r and "hops" not in r for r in doc["routes"])
    # the cycle is closed at route 1, so it starts at hop 1->2; route 0 is the window from its last position
    assert doc["hops"][0]["src"] == 1 and [r["window"] for r in doc["routes"][:3]] == [[0, 15, 15], [0, 0, 15], [0, 1, 15]]
    # size: O(distinct hops + routes), against O(routes × hops) for the old form
    small, big = len(ring(8).to_json()), len(ring(32).to_json())
    assert big < 5 * small
    assert len(json.dumps(ring(32).to_dict(legacy=True))) > 10 * big


def test_reading_shares_one_hop_object_per_distinct_hop() -> None:
    for text in (ring(6, channels=2).to_json(), json.dumps(ring(6, channels=2, copies=True).to_dict(legacy=True))):
        back = Schedule.from_json(text)
        objects = {id(h) for r in back.routes for h in r.hops}
        assert len(objects) == 6
        assert back == ring(6, channels=2)


def test_equal_schedules_give_equal_bytes_whether_or_not_hops_are_shared() -> None:
    shared, copied = ring(7, channels=3), ring(7, channels=3, copies=True)
    assert shared == copied
    assert shared.to_json() == copied.to_json()
    assert Schedule.from_json(copied.to_json()).to_json() == shared.to_json()


@pytest.mark.parametrize("kind", [OUT, IN])
def test_old_format_files_still_load(kind: RouteKind) -> None:
    sched = ring(5, kind=kind)
    legacy = sched.to_dict(legacy=True)
    assert legacy["format"] == LEGACY_SCHEDULE_FORMAT and "cycles" not in legacy
    assert isinstance(legacy["routes"][0]["hops"][0], dict)
    back = Schedule.from_json(json.dumps(legacy))
    assert back == sched
    back.validate(named_topology("ring:5"))
    assert back.to_json() == sched.to_json()


@pytest.mark.parametrize(("spec", "failures"), [("ring:6", []), ("hpn:1x2x4", []), ("hpn:1x2x4", ["fail2"])])
@pytest.mark.parametrize("collective", ["allgather", "reducescatter", "allreduce", "alltoall"])
def test_synthesized_schedules_round_trip(spec: str, failures: list[str], collective: str) -> None:
    from synth import load_topology

    topo = load_topology(spec, failures)
    sched = synthesize(collective, topo, time_limit_s=30).schedule
    assert sched is not None
    text = sched.to_json()
    back = Schedule.from_json(text)
    assert back == sched and back.to_json() == text
    back.validate(topo)
    assert back.algbw_GBps(topo) == sched.algbw_GBps(topo)
    assert Schedule.from_json(json.dumps(sched.to_dict(legacy=True))) == sched


def test_baseline_rings_round_trip_as_windows() -> None:
    from runtime.loop.bootstrap import fallback_schedule
    from synth import load_topology

    topo = load_topology("hpn:1x2x8")
    for coll in ("allgather", "reducescatter", "allreduce"):
        sched = fallback_schedule(coll, topo)
        doc = sched.to_dict()
        assert doc["cycles"] and sum("window" in r for r in doc["routes"]) == len(sched.routes)
        back = Schedule.from_json(sched.to_json())
        assert back == sched
        back.validate(topo)


_n = st.integers(2, 6)


@st.composite
def ring_like(draw: st.DrawFn) -> Schedule:
    """Ring channels (some reversed, some of copied hops) mixed with arbitrary routes."""
    n = draw(_n)
    routes: list[Route] = []
    for _ in range(draw(st.integers(0, 3))):
        order = draw(st.permutations(range(n)))
        cyc = [Hop(order[i], order[(i + 1) % n], (f"gpu{order[i]}", "sw", f"gpu{order[(i + 1) % n]}")) for i in range(n)]
        copies = draw(st.booleans())
        kind = draw(st.sampled_from([OUT, IN]))
        for p in draw(st.lists(st.integers(0, n - 1), max_size=n)):
            hops = tuple(Hop(h.src, h.dst, h.path) if copies else h for h in (cyc + cyc)[p:p + n - 1])
            root = hops[0].src if kind is OUT else hops[-1].dst
            routes.append(Route(kind, root, draw(st.integers(1, 3)), hops))
    ranks = st.integers(0, n - 1)
    extra = st.builds(Route, st.sampled_from(list(RouteKind)), ranks, st.integers(1, 4),
                      st.lists(st.builds(Hop, ranks, ranks, st.lists(st.sampled_from(["gpu0", "gpu1", "sw"]), max_size=3)
                                         .map(tuple)), max_size=4).map(tuple), st.one_of(st.none(), ranks))
    routes += draw(st.lists(extra, max_size=3))
    order = draw(st.permutations(range(len(routes))))
    return Schedule(draw(st.sampled_from(["allgather", "reducescatter", "allreduce", "alltoall"])), n,
                    draw(st.integers(1, 4)), tuple(routes[i] for i in order))


@settings(max_examples=150, deadline=None)
@given(ring_like())
def test_any_ring_like_schedule_round_trips_in_both_forms(sched: Schedule) -> None:
    text = sched.to_json()
    back = Schedule.from_json(text)
    assert back == sched
    assert back.to_json() == text
    assert Schedule.from_json(json.dumps(sched.to_dict(legacy=True))) == sched
    doc = json.loads(text)
    assert len(doc["hops"]) == len({h for r in sched.routes for h in r.hops})


def _doc() -> dict:
    doc = ring(4).to_dict()
    doc["routes"].append({"kind": "out_tree", "root": 0, "chunks": 1, "hops": [0, 1, 2]})
    return doc


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda d: d.pop("hops"), r"'hops' must be a list \(the hop table\)"),
        (lambda d: d.update(hops={}), r"'hops' must be a list"),
        (lambda d: d["hops"][1].update(src="1"), r"hops\[1\]\.src must be an integer, got '1'"),
        (lambda d: d["hops"][2].update(path="gpu2"), r"hops\[2\] must be an object with a 'path' list"),
        (lambda d: d.update(cycles=7), r"'cycles' must be a list"),
        (lambda d: d["cycles"].append([]), r"cycles\[1\] is empty"),
        (lambda d: d["cycles"][0].__setitem__(2, 4), r"cycles\[0\]\[2\] = 4 is out of range: the hop table has 4 entries"),
        (lambda d: d["cycles"][0].__setitem__(0, -1), r"cycles\[0\]\[0\] = -1 is out of range"),
        (lambda d: d["cycles"][0].__setitem__(1, True), r"cycles\[0\]\[1\] must be an integer hop index, got True"),
        (lambda d: d["routes"][4]["hops"].__setitem__(1, 9), r"routes\[4\]\.hops\[1\] = 9 is out of range"),
        (lambda d: d["routes"][4]["hops"].__setitem__(0, "0"), r"routes\[4\]\.hops\[0\] must be an integer hop index, got '0'"),
        (lambda d: d["routes"][4].update(hops=3), r"routes\[4\]\.hops must be a list of hop indices, got 3"),
        (lambda d: d["routes"][1].update(window=[1, 0, 3]), r"routes\[1\]\.window\[0\] = 1 is out of range: there are 1 cycles"),
        (lambda d: d["routes"][1].update(window=[0, 4, 3]), r"routes\[1\]\.window\[1\] = 4 is out of range: cycles\[0\] has 4 hops"),
        (lambda d: d["routes"][1].update(window=[0, -1, 3]), r"routes\[1\]\.window\[1\] = -1 is out of range"),
        (lambda d: d["routes"][1].update(window=[0, 1, 5]), r"routes\[1\]\.window\[2\] = 5 runs past the cycle: cycles\[0\] has 4 hops"),
        (lambda d: d["routes"][1].update(window=[0, 1, 0]), r"routes\[1\]\.window\[2\] = 0 runs past the cycle"),
        (lambda d: d["routes"][2].update(window=[0, 1]), r"routes\[2\]\.window must be \[cycle, start, length\] integers"),
        (lambda d: d["routes"][2].update(window=[0, 1.0, 3]), r"routes\[2\]\.window must be \[cycle, start, length\] integers"),
        (lambda d: d["routes"][3].update(hops=[0]), r"routes\[3\] has both 'window' and 'hops'"),
        (lambda d: d["routes"][0].update(chunks=None), r"routes\[0\]\.chunks must be an integer, got None"),
        (lambda d: d.update(format="loopcoll-schedule/3"), r"format 'loopcoll-schedule/3', expected 'loopcoll-schedule/2' or"),
    ],
)
def test_hostile_compact_documents_name_the_field(mutate, match: str) -> None:
    doc = _doc()
    Schedule.from_dict(copy.deepcopy(doc))  # the unmutated document reads
    mutate(doc)
    with pytest.raises(ScheduleError, match=r"^h\.json: .*" + match):
        Schedule.from_dict(doc, source="h.json")


def test_a_wrapping_window_reads_the_cycle_round() -> None:
    doc = ring(4).to_dict()
    back = Schedule.from_dict(doc)
    assert [(h.src, h.dst) for h in back.routes[3].hops] == [(3, 0), (0, 1), (1, 2)]
    assert back.routes[3].hops[1] is back.routes[0].hops[0]  # the same hop object, from the table


def test_window_hops_over_a_missing_link_are_still_refused() -> None:
    """Every route of a ring is a window; the cycle's paths are checked once, so a bad path is found."""
    bad = ring(4)
    assert '"gpu1","gpu2"' in bad.to_json()
    sched = Schedule.from_json(bad.to_json().replace('"gpu1","gpu2"', '"gpu1","nowhere","gpu2"'))
    with pytest.raises(ScheduleError, match=r"hop 1->2 passes through unknown node 'nowhere'"):
        sched.validate(named_topology("ring:4"))

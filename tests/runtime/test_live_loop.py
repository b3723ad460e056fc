"""The whole loop, live: a real daemon and 4 gloo executor processes, an injected fail2, a hot-swap.

One run (module fixture) on hpn:1x2x2 scaled to CPU speeds: a transient fail2 of 3 steps early (must not
swap), then a persistent fail2 (must be detected, re-synthesized, and adopted by all ranks at the same
collective), then cleared. Outputs are compared with the native collectives every few steps throughout.
No timing assertions: speeds belong to benchmarks/live_loop.py.
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from runtime.scenarios.live import COLLECTIVES, LiveConfig, run_live  # noqa: E402
from runtime.formats.store import VersionStore  # noqa: E402

TRANSIENT = (40, 43)
FAULT = (130, 250)


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    store = tmp_path_factory.mktemp("live-store")
    cfg = LiveConfig(steps=300, faults=(TRANSIENT, FAULT), window=50, check_every=3, timeout_s=300,
                     allgather_bytes=1 << 20, alltoall_bytes=1 << 20)
    res = run_live(cfg, store_dir=store)
    assert res.status == "ok", res.message
    return res, store


def test_every_rank_ran_clean(live) -> None:
    res, _ = live
    assert len(res.ranks) == 4
    for r in res.ranks:
        assert r["failures"] == [], r["failures"][:3]      # equal to the native collectives throughout
        assert r["refused"] == {}
        assert r["sent_samples"] > 0


def test_transient_fault_does_not_swap(live) -> None:
    res, _ = live
    t_fault = res.fault_wall[1][0]
    assert t_fault is not None
    assert [e for e in res.events if e["event"] == "publish" and e["version"] > 1 and e["t_s"] < t_fault] == []
    assert {(r[3], r[4]) for r in res.steps[:FAULT[0]]} == {(1, 1)}


def test_persistent_fault_swaps_on_all_ranks_at_the_same_collective(live) -> None:
    res, _ = live
    swaps = [r["swaps"] for r in res.ranks]
    assert all([s[:2] for s in sw] == [s[:2] for s in swaps[0]] for sw in swaps)   # same seq, same versions
    first_seq = 2 * FAULT[0] + 1
    for coll in COLLECTIVES:
        later = [s for s in swaps[0] if coll in s[1] and s[0] > first_seq]
        assert later, f"{coll}: no version adopted after the fault"
        assert later[0][1][coll][0] == 1                                             # from the stale version 1
        assert res.timeline[coll]["new_version"] is not None
        pubs = [e for e in res.events if e["event"] == "publish" and e["collective"] == coll
                and e["t_s"] >= res.fault_wall[1][0]]
        assert pubs and pubs[0]["version"] == later[0][1][coll][1]
    # every rank ran the same version at every collective
    per_rank = [r["seq_versions"] for r in res.ranks]
    assert all(v == per_rank[0] for v in per_rank)


def test_new_schedule_moves_less_over_the_throttled_pair(live) -> None:
    res, store = live
    vs = VersionStore(store)
    entries = {(e.collective, e.version): e for e in vs.entries()}
    throttled = [("gpu0", "tor0.0"), ("tor0.0", "gpu0")]           # fail2: rank 0's NIC, both directions

    def share(coll: str, version: int) -> float:
        s = vs.load_schedule(entries[(coll, version)])
        loads = s.link_loads()
        return sum(loads.get(k, 0) for k in throttled) / s.nchunks   # sources' data per collective on the pair

    for coll in COLLECTIVES:
        tl = res.timeline[coll]
        assert share(coll, tl["new_version"]) < share(coll, tl["stale_version"]), coll


def test_timeline_table_and_plot(live, tmp_path) -> None:
    from runtime.scenarios.live import format_timeline, plot_live

    res, _ = live
    table = format_timeline(res)
    assert all(c in table for c in COLLECTIVES) and "v1->v" in table
    plot_live(res, tmp_path / "live.png")
    assert (tmp_path / "live.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_refuses_bad_options_before_starting_anything(capsys) -> None:
    from loopcoll.cli import main

    assert main(["demo", "--live", "--steps", "10"]) == 2
    assert main(["demo", "--live", "--steps", "300", "--fault-at", "200", "--clear-at", "100"]) == 2
    assert main(["demo", "--live", "--fail", "fail9"]) == 2
    err = capsys.readouterr().err
    assert err.count("loopcoll: error:") == 3 and "Traceback" not in err

"""Link estimator on flow-simulator data where the true capacities are known."""

from __future__ import annotations

import pytest

from runtime.loop.estimator import LinkEstimator, ScheduleRouting
from runtime.scenarios.timeline import _samples
from synth import Hop, Link, Node, NodeKind, Route, RouteKind, Schedule, Topology, load_topology, synthesize
from synth.simulation import simulate_transfers


def _measurements(sched: Schedule, true: Topology, nbytes: int, host: dict) -> list:
    tt = simulate_transfers(sched, true, nbytes, slices_per_chunk=4, rtol=1e-3, check=False)
    return [(s["kind"], s["src"], s["dst"], float(s["bytes"]), s["busy_s"])
            for s in _samples(tt, 0.0, "w", sched.collective, 0, 1, list(range(sched.nranks)), host)]


def _star(down_gbps: float) -> Topology:
    """gpu0, gpu1 -> sw -> gpu2; the link sw->gpu2 is shared."""
    nodes = [Node(f"gpu{r}", NodeKind.GPU, r, r) for r in range(3)] + [Node("sw", NodeKind.SWITCH)]
    links = [Link("gpu0", "sw", 400.0, 0.0), Link("gpu1", "sw", 400.0, 0.0), Link("sw", "gpu2", down_gbps, 0.0),
             Link("sw", "gpu0", 400.0, 0.0), Link("sw", "gpu1", 400.0, 0.0), Link("gpu2", "sw", 400.0, 0.0)]
    return Topology.create("star", nodes, links)


def test_implied_capacity_of_a_link_shared_3_to_1() -> None:
    """Pairs 0->2 (3 chunks) and 1->2 (1 chunk) share sw->gpu2 (n_a = 4): each implies M_a exactly."""
    nominal, true = _star(400.0), _star(40.0)
    routes = (Route(RouteKind.PATH, 0, 3, (Hop(0, 2, ("gpu0", "sw", "gpu2")),), dest=2),
              Route(RouteKind.PATH, 1, 1, (Hop(1, 2, ("gpu1", "sw", "gpu2")),), dest=2))
    sched = Schedule("alltoall", 3, 4, routes)
    routing = ScheduleRouting.build(sched, nominal)
    assert routing.link_chunks[("sw", "gpu2")] == 4 and routing.pair_chunks[(0, 2)] == 3
    tt = simulate_transfers(sched, true, 12_000_000, slices_per_chunk=1, rtol=0.0, check=False)
    rate = {(x.src, x.dst): 8 * x.bytes / (x.end_s - x.start_s) / 1e9 for x in tt.transfers}
    assert rate[(0, 2)] == pytest.approx(30.0) and rate[(1, 2)] == pytest.approx(10.0)  # 3:1 of 40
    est = LinkEstimator(nominal, alpha=1.0)
    obs = est.observe_group(routing, [("pair", u, v, x.bytes, x.end_s - x.start_s)
                                      for (u, v), x in zip(rate, tt.transfers)], t_s=0.0)
    assert obs[("sw", "gpu2")] == pytest.approx(40.0)
    # the senders' own links are implicated too (only slow pairs cross them): lower bounds 30 and 10
    assert obs[("gpu0", "sw")] == pytest.approx(30.0) and obs[("gpu1", "sw")] == pytest.approx(10.0)


@pytest.mark.parametrize("collective", ["allgather", "alltoall"])
def test_healthy_fabric_keeps_nominal_estimates(collective: str) -> None:
    topo = load_topology("hpn:1x2x4")
    sched = synthesize(collective, topo, chunks=8 if collective == "allgather" else None).schedule
    host = {g.rank: g.host for g in topo.gpus}
    est = LinkEstimator(topo, alpha=1.0)
    nbytes = (16 << 20) * (8 if collective == "allgather" else 1)
    obs = est.observe_group(ScheduleRouting.build(sched, topo), _measurements(sched, topo, nbytes, host), t_s=0.0)
    assert obs and all(v == topo.link(*k).gbps for k, v in obs.items())
    assert est.measured_topology() is topo


@pytest.mark.parametrize("collective", ["allgather", "alltoall"])
def test_fail2_is_measured_on_the_degraded_link(collective: str) -> None:
    """fail2 sets gpu0<->tor0.0 to 50 Gbit/s; tor0.0 joins only gpu0 and gpu4 on hpn:1x2x4, so the rail's
    links at gpu4 carry exactly the same pairs and cannot be told apart (docs/controller.md section 2)."""
    topo = load_topology("hpn:1x2x4")
    true = topo.with_failure("fail2")
    sched = synthesize(collective, topo, chunks=8 if collective == "allgather" else None).schedule
    host = {g.rank: g.host for g in topo.gpus}
    est = LinkEstimator(topo, alpha=1.0)
    nbytes = (16 << 20) * (8 if collective == "allgather" else 1)
    obs = est.observe_group(ScheduleRouting.build(sched, topo), _measurements(sched, true, nbytes, host), t_s=0.0)
    assert obs[("gpu0", "tor0.0")] == pytest.approx(50.0, rel=0.05)
    assert obs[("tor0.0", "gpu0")] == pytest.approx(50.0, rel=0.05)
    ambiguous = {("gpu0", "tor0.0"), ("tor0.0", "gpu0"), ("gpu4", "tor0.0"), ("tor0.0", "gpu4")}
    for key, value in obs.items():
        # never optimistic about the truth, and nothing outside the rail is lowered
        assert value <= true.link(*key).gbps * 1.05 or value == topo.link(*key).gbps
        if key not in ambiguous:
            assert value == topo.link(*key).gbps, key


def test_ewma_alpha_tau_and_measured_topology() -> None:
    topo = load_topology("ring:4")
    est = LinkEstimator(topo, alpha=0.5)
    est.update(("gpu0", "gpu1"), 100.0, 0.0)
    assert est.estimate_gbps(("gpu0", "gpu1")) == 0.5 * 400.0 + 0.5 * 100.0
    est.update(("gpu0", "gpu1"), 1e9, 1.0)  # clipped to nominal
    assert est.estimate_gbps(("gpu0", "gpu1")) == 0.5 * 250.0 + 0.5 * 400.0
    m = est.measured_topology()
    assert m.link("gpu0", "gpu1").gbps == 325.0 and m.link("gpu1", "gpu2").gbps == 400.0
    tau = LinkEstimator(topo, tau_s=1.0)
    tau.update(("gpu0", "gpu1"), 0.0, 0.0)      # first observation: alpha
    tau.update(("gpu0", "gpu1"), 0.0, 100.0)    # long gap: weight 1 - exp(-100) ~ 1
    assert tau.estimate_gbps(("gpu0", "gpu1")) == pytest.approx(0.0, abs=1e-9)
    for _ in range(8):
        est.update(("gpu1", "gpu2"), 200.0, 2.0)
    assert est.recent_gbps(("gpu1", "gpu2")) == 200.0
    assert est.measured_topology(recent=True).link("gpu1", "gpu2").gbps == 200.0
    assert est.rebase(est.measured_topology(recent=True)) == [("gpu1", "gpu2")]
    assert est.estimate_gbps(("gpu1", "gpu2")) == 200.0
    with pytest.raises(ValueError, match="alpha"):
        LinkEstimator(topo, alpha=0.0)

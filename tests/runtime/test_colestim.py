"""The columnar fold (runtime/loop/colestim.py) against the per-row estimator it replaces on the hot path.

Both estimators get the same noisy windows (lognormal busy-time noise 5 % and 10 %, 1 % outliers at 3×, fail2
from collective 20 on, rows in a shuffled arrival order, some windows aggregated over 4 collectives) and must
make exactly the same observations, pacing decisions and estimates.
"""

from __future__ import annotations

import random
import tempfile
from dataclasses import replace

import numpy as np
import pytest

from runtime.loop.colestim import ColumnFold
from runtime.loop.estimator import LinkEstimator, ScheduleRouting
from runtime.scenarios.loadgen import flow_table, window_batch
from runtime.scenarios.noise import TimingNoise
from runtime.scenarios.timeline import _samples
from synth import load_topology, synthesize
from synth.simulation import simulate_transfers
from tests.runtime.test_columnar import SPEC, _controller


def _arrays(meas: list) -> tuple[np.ndarray, ...]:
    src = np.array([m[1] for m in meas], dtype=np.int64)
    dst = np.array([-1 if m[2] is None else m[2] for m in meas], dtype=np.int64)
    return src, dst, np.array([m[3] for m in meas], dtype=np.float64), np.array([m[4] for m in meas])


@pytest.mark.parametrize("collective,spec", [("allgather", "hpn:1x2x8"), ("alltoall", "hpn:1x2x4")])
@pytest.mark.parametrize("sigma", [0.05, 0.10])
def test_columnar_fold_equals_the_per_row_fold_on_noisy_windows(collective: str, spec: str, sigma: float) -> None:
    topo = load_topology(spec)
    sched = synthesize(collective, topo).schedule
    nbytes = 16 << 20 if collective == "alltoall" else 16 << 24
    healthy_tt, fail2_tt = (simulate_transfers(sched, t, nbytes, slices_per_chunk=4, check=False)
                            for t in (topo, topo.with_failure("fail2")))
    routing = ScheduleRouting.build(sched, topo)
    host = {g.rank: g.host for g in topo.gpus if g.rank is not None}
    ref, est = LinkEstimator(topo, alpha=0.05), LinkEstimator(topo, alpha=0.05)
    fold = ColumnFold(est)
    noise, order = TimingNoise(sigma, 0.01, seed=7), random.Random(3)
    slow_windows = 0
    for seq in range(60):
        tt = healthy_tt if seq < 20 else fail2_tt
        rows = noise.apply(_samples(tt, 0.0, "world", collective, seq, 1, list(range(topo.nranks)), host))
        meas = [(r["kind"], r["src"], r["dst"], float(r["bytes"]), r["busy_s"]) for r in rows]
        order.shuffle(meas)
        count = 4 if seq % 5 == 4 else 1
        want = ref.observe_group(routing, meas, t_s=0.01 * seq, count=count)
        got = fold.observe(routing, *_arrays(meas), t_s=0.01 * seq, count=count)
        assert list(got) == list(want) and got == want, seq
        slow_windows += any(v < ref.nominal_gbps(a) for a, v in want.items())
    assert slow_windows >= 30  # fail2 was seen, so the slow/paced paths ran
    assert est.snapshot() == ref.snapshot()
    assert est.measured_topology() == ref.measured_topology()
    assert est.measured_topology(recent=True) == ref.measured_topology(recent=True)
    assert est.estimate_gbps(("gpu0", "tor0.0")) < 0.8 * 400  # the failed link is found by both


def test_rows_the_routing_lacks_or_empty_are_skipped() -> None:
    topo = load_topology("hpn:1x2x4")
    routing = ScheduleRouting.build(synthesize("allgather", topo).schedule, topo)
    est = LinkEstimator(topo, alpha=1.0)
    fold = ColumnFold(est)
    src, dst = np.array([0, 0, 0, 3]), np.array([4, 4, 99, 1])
    got = fold.observe(routing, src, dst, np.array([0.0, 30e9 / 8, 1e9, 1e9]), np.array([1.0, 1.0, 1.0, 0.0]),
                       t_s=0.0)
    assert got == est.__class__(topo, alpha=1.0).observe_group(routing, [("pair", 0, 4, 30e9 / 8, 1.0)], t_s=0.0)
    assert got[("gpu0", "tor0.0")] == pytest.approx(30.0) and est.groups == 1


def test_a_window_arriving_in_pieces_over_polls_groups_as_its_records() -> None:
    """One window sent in 5 shuffled pieces over 5 polls, with rows repeated inside a piece and across pieces
    (duplicates dropped on arrival, lacking flows counted down per rank): the same groups, skips, pending rows
    and estimates as its records, and it folds only once complete."""
    topo = load_topology(SPEC)
    figures = []
    for columnar in (False, True):
        with tempfile.TemporaryDirectory() as store:
            ctl, sched = _controller(store)
            table = flow_table(sched, topo, comm="world", version=1, size_bytes=1 << 24)
            rng, pick = np.random.default_rng(5), np.random.default_rng(6)
            groups = []
            for k in range(2):
                (batch,) = window_batch(table, seq_first=8 * k, count=8, t_s=50.0 + k, period_s=0.1, sigma=0.05,
                                        rng=rng)
                order = pick.permutation(len(batch))
                for piece in np.array_split(order, 5):
                    rows = np.concatenate([piece, piece[:3], order[:2]])  # repeats inside and across pieces
                    part = replace(batch, cols={c: v[rows] for c, v in batch.cols.items()})
                    ctl.ingest([part.to_dict()] if columnar else [r.to_dict() for r in part.records()])
                    ctl.poll(now_s=50.0 + k)
                    groups.append(ctl.status()["counters"]["groups"])
            st = ctl.status()
            figures.append(([(e["link"], e["estimate_gbps"], e["observations"]) for e in st["links"]], groups,
                            st["counters"]["samples_skipped"], st["counters"]["samples_pending"]))
    assert figures[0] == figures[1]
    assert figures[1][1] == [0, 0, 0, 0, 1, 1, 1, 1, 1, 2]  # each window folds once its last piece is in
    assert figures[1][2].get("duplicate_sample", 0) > 0

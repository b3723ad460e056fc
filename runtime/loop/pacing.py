"""Relay pacing under noise: which slow measurements only relay at their input's pace.

:class:`Pacing` is the link estimator's memory for that decision (``docs/controller.md`` §2,
"Noise"): per running routing, each slow measurement's feeder ratios over its current slow run; and
the timing jitter learnt from the measurements that are not slow. On noise-free telemetry a run's
median is the current ratio and the learnt jitter is 0, so the decision is the one-collective rule.

Examples
--------
>>> from types import SimpleNamespace
>>> routing = SimpleNamespace(upstream={(1, 2): frozenset({(0, 1)})})  # 1 relays to 2 what 0 sends it
>>> rows = [("pair", 0, 1, 50.0, {}, 50.0), ("pair", 1, 2, 50.0, {}, 50.0)]  # (kind, src, dst, rate, links, per chunk)
>>> p = Pacing(tolerance=0.1, window=16)
>>> sorted(p.paced(routing, rows, [True, True], {(0, 1): 50.0, (1, 2): 50.0}))  # both slow: 1->2 waits for 0->1
[('pair', 1, 2)]
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["Pacing"]

_PACE_ROUTINGS = 16  # routings whose pacing runs are kept (one per running version)
_NOISE_WINDOW = 32  # collectives over which the timing jitter is learnt


@dataclass(slots=True)
class _PaceState:
    """Pacing memory of one routing: per slow measurement, its feeders' per-chunk rate ratios over
    its current slow run; per measurement, its last not-slow rate (the jitter is learnt from them)."""

    routing: Any  # a runtime.loop.estimator.ScheduleRouting, kept alive so that its id is not reused
    runs: dict[tuple[Any, ...], dict[tuple[Any, ...], deque[float]]] = field(default_factory=dict)
    last_rate: dict[tuple[Any, ...], float] = field(default_factory=dict)
    last_cols: np.ndarray | None = None  # the columnar path's last not-slow rate per flow (NaN: none yet)


class Pacing:
    """Pacing decisions for the estimator's collectives (not thread-safe by itself).

    ``tolerance``: a slow relay is paced when its feeder's per-chunk rate is at most ``1 + tolerance``
    times its own (median over the slow run, widened by the noise); ``window``: at most that many
    collectives of a slow run are kept.
    """

    def __init__(self, tolerance: float, window: int) -> None:
        self.tolerance = float(tolerance)
        self.window = max(1, int(window))
        self._memory: dict[int, _PaceState] = {}
        self._noise: deque[float] = deque(maxlen=_NOISE_WINDOW)  # per collective: median |Δ log rate|

    def paced(self, routing: Any, rows: Sequence[tuple[Any, ...]], verdicts: Sequence[bool],
              rates: Mapping[tuple[int, int], float],
              prior: Mapping[tuple[int, int], float] | None = None, count: int = 1) -> set[tuple[Any, ...]]:
        """Slow measurements explained by a slow feeder upstream of them (pacing), cycles resolved.

        Edge m → f when a feeder pair f of m (slow or not) runs at a per-chunk rate at most
        ``1 + tolerance`` times m's: m relays at its input's pace. The ratio compared is the
        **median over m's current slow run** (its consecutive slow collectives of this routing, at
        most ``window`` of them): one pair of independently noisy samples decides nothing, and
        on noise-free telemetry the median is the current ratio. An AllReduce's AllGather phase is fed by
        its ReduceScatter too (``routing.before``, per-chunk rates in ``prior``). Aggregated windows
        (``count`` > 1, docs/telemetry.md §5) are medians over ``count`` collectives already: the ratio compared
        is the current window's alone (a window straddling a change must not poison the next one's). Measurements
        that pace each other in a cycle (a ring slowed as a whole) form one strongly connected component; a component
        with an edge leaving it is paced by something upstream, one without (a sink) holds the cause
        and is kept as evidence.
        """
        learnt = self._learn_noise(self._state(routing), rows, verdicts)
        return self.paced_slow(routing, [r for r, v in zip(rows, verdicts) if v], rates, prior, count, learnt)

    def learn_columns(self, routing: Any, flow: np.ndarray, rate: np.ndarray, nflows: int) -> float:
        """:meth:`paced`'s jitter learning for the columnar path: ``flow`` (indices < ``nflows`` into the
        routing's flow table) and ``rate`` of the measurements that are *not* slow; returns the learnt spread.

        The same figures as the per-row rule, with each flow's last not-slow rate held in an array (the
        per-row and the columnar path keep separate last rates; a job's executors use one writer)."""
        st = self._state(routing)
        last = st.last_cols
        if last is None or last.size != nflows:
            last = st.last_cols = np.full(nflows, np.nan)
        prev = last[flow]
        seen = ~np.isnan(prev)
        if seen.any():
            self._noise.append(_array_median(np.abs(np.log(rate[seen] / prev[seen]))))
        last[flow] = rate
        return 1.4826 * _median(self._noise) if self._noise else 0.0

    def paced_slow(self, routing: Any, slow_rows: Sequence[tuple[Any, ...]], rates: Mapping[tuple[int, int], float],
                   prior: Mapping[tuple[int, int], float] | None, count: int, learnt: float) -> set[tuple[Any, ...]]:
        """:meth:`paced`'s decision given only the slow rows and the learnt jitter (:meth:`learn_columns`)."""
        import networkx as nx

        st = self._state(routing)
        runs = st.runs
        g = nx.DiGraph()
        slow_nodes = set()
        for kind, src, dst, _rate, _links, pc in slow_rows:
            node = (kind, src, dst)
            slow_nodes.add(node)
            g.add_node(node)
            if kind == "pair" and dst is not None:
                feeders: Iterable[tuple[int, int]] = routing.upstream.get((src, dst), ())
            else:
                feeders = {f for (u, _v), ups in routing.upstream.items() if u == src for f in ups}
            run = runs.setdefault(node, {})
            keep = self.window if count == 1 else 1
            for f in sorted(feeders):
                if ("pair", *f) != node:
                    self._history(run, ("pair", *f), keep).append(rates.get(f, math.inf) / pc)
            for f in sorted(self._before(routing, kind, src, dst)) if prior else ():
                assert prior is not None
                self._history(run, ("before", *f), keep).append(prior.get(f, math.inf) / pc)
        for node in [n for n in runs if n not in slow_nodes]:
            del runs[node]  # its slow run ended
        spread = max(learnt, _pooled_log_spread(h for run in runs.values() for h in run.values()))
        for node in sorted(slow_nodes, key=repr):
            for f, hist in sorted(runs[node].items()):
                # the median's standard error (1.2533 σ / √n) three times over widens the tolerance
                limit = (1.0 + self.tolerance) * math.exp(3.0 * 1.2533 * spread / math.sqrt(len(hist)))
                if _median(hist) <= limit:
                    g.add_edge(node, f)
        if g.number_of_edges() == 0:
            return set()
        cond = nx.condensation(g)
        members = cond.graph["mapping"]
        return {n for n in g.nodes if cond.out_degree(members[n]) > 0}

    @staticmethod
    def _history(run: dict[Any, deque[float]], key: Any, keep: int) -> deque[float]:
        """The ratio history of feeder ``key`` in a slow run, holding at most ``keep`` values (1 for windows)."""
        hist = run.get(key)
        if hist is None or hist.maxlen != keep:
            hist = run[key] = deque(maxlen=keep)
        return hist

    @staticmethod
    def _before(routing: Any, kind: str, src: int, dst: int | None) -> set[tuple[int, int]]:
        """The pairs of the phase before that feed a measurement (``routing.before``, empty but for an AllReduce's
        AllGather phase)."""
        before = routing.before
        if kind == "pair" and dst is not None:
            return set(before.get((src, dst), ()))
        return {f for (u, _v), ups in before.items() if u == src for f in ups}

    def _state(self, routing: Any) -> _PaceState:
        """The pacing memory of ``routing`` (the last ``_PACE_ROUTINGS`` routings seen keep theirs)."""
        st = self._memory.pop(id(routing), None)
        if st is None or st.routing is not routing:
            st = _PaceState(routing)
        self._memory[id(routing)] = st  # most recent last
        while len(self._memory) > _PACE_ROUTINGS:
            del self._memory[next(iter(self._memory))]
        return st

    def _learn_noise(self, st: _PaceState, rows: Sequence[tuple[Any, ...]], verdicts: Sequence[bool]) -> float:
        """Fold this collective's timing jitter in; returns the learnt spread of a log rate *ratio*.

        For each measurement that is not slow now, ``|Δ log rate|`` since its previous not-slow
        collective of the same routing; the collective's value is their median, the spread
        1.4826 × the median of the last ``_NOISE_WINDOW`` values (the ratio of two samples has √2
        times one sample's σ, which cancels against the difference's √2). A rate that steps once
        (a change of capacity) moves one collective's value only; noise-free telemetry learns 0.
        """
        devs = []
        for (kind, src, dst, rate, _links, _pc), is_slow in zip(rows, verdicts):
            node = (kind, src, dst)
            if is_slow:
                continue
            prev = st.last_rate.get(node)
            if prev is not None:
                devs.append(abs(math.log(rate / prev)))
            st.last_rate[node] = rate
        if devs:
            self._noise.append(_median(devs))
        return 1.4826 * _median(self._noise) if self._noise else 0.0


def _median(xs: Iterable[float]) -> float:
    """The median (mean of the middle two for an even count; infinities allowed).

    >>> _median([3.0, 1.0, 2.0]), _median([1.0, math.inf])
    (2.0, inf)
    """
    v = sorted(xs)
    k = len(v) // 2
    return v[k] if len(v) % 2 else (v[k - 1] + v[k]) / 2.0


def _array_median(x: np.ndarray) -> float:
    """:func:`_median` of a non-empty float array, the same figure without sorting it all.

    >>> _array_median(np.array([3.0, 1.0, 2.0, 4.0]))
    2.5
    """
    k = x.size // 2
    if x.size % 2:
        return float(np.partition(x, k)[k])
    part = np.partition(x, (k - 1, k))
    return (float(part[k - 1]) + float(part[k])) / 2.0


def _pooled_log_spread(hists: Iterable[Sequence[float]]) -> float:
    """Robust σ of log ratios pooled over histories: 1.4826 × the median absolute deviation of each
    finite entry from its own history's median (0 on noise-free telemetry, where a history is constant).

    >>> _pooled_log_spread([[1.0, 1.0], [2.0]]), round(_pooled_log_spread([[1.0, math.e, 1 / math.e]]), 4)
    (0.0, 1.4826)
    """
    devs = []
    for h in hists:
        if len(h) < 2:
            continue
        med = _median(h)
        if not math.isfinite(med):
            continue
        devs += [abs(math.log(x / med)) for x in h if math.isfinite(x) and x > 0]
    return 1.4826 * _median(devs) if devs else 0.0

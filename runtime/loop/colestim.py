"""The link estimator's fold of one collective window given as arrays (the columnar path, docs/telemetry.md §6).

:meth:`ColumnFold.observe` makes exactly the observations
:meth:`~runtime.loop.estimator.LinkEstimator.observe_group` makes from the same measurements (docs/controller.md
§2), with numpy over the window's rows instead of a Python loop per flow: each row is matched to its flow in a
per-routing table (sorted flow codes ``src · 2³² + dst + 1``, ``dst`` = −1 for ``inject``), its verdict (slow or
not) is one comparison against its expected rate, the jitter is learnt from the not-slow rows' arrays
(:meth:`~runtime.loop.pacing.Pacing.learn_columns`), and the per-link fold runs over the flow→link incidence
(per flow, its links and its chunks on each, in CSR form). Only the slow rows reach the pacing decision as
tuples; on healthy traffic there are none. The EWMA is updated per observed link in one loop
(:meth:`~runtime.loop.estimator.LinkEstimator.update_many`).

Examples
--------
>>> import numpy as np
>>> from synth import load_topology, synthesize
>>> topo = load_topology("hpn:1x2x4")
>>> routing = ScheduleRouting.build(synthesize("allgather", topo).schedule, topo)
>>> est = LinkEstimator(topo, alpha=1.0)
>>> obs = ColumnFold(est).observe(routing, np.array([0]), np.array([4]), np.array([30e9 / 8]), np.array([1.0]),
...                               t_s=0.0)
>>> est.estimate_gbps(("gpu0", "tor0.0")), est.estimate_gbps(("gpu1", "tor0.1"))
(30.0, 400.0)
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from itertools import chain

import numpy as np

from runtime.loop.estimator import LinkEstimator, LinkKey, ScheduleRouting

__all__ = ["ColumnFold", "FlowTable"]

_SHIFT = np.int64(1 << 32)
_TABLES = 16  # routings whose tables are kept (one per running version)


@dataclass(frozen=True, slots=True)
class FlowTable:
    """One routing's flows as arrays: ``codes`` sorted; per flow its ``expected`` rate (Gbit/s, proportional
    share on the nominal topology), its chunk count ``chunks`` (the most on any of its links) and its links
    ``link[ptr[i]:ptr[i+1]]`` with its chunks ``nchunks`` on each; per link (sorted by key) its key, ``load``
    (``n_a``) and nominal capacity."""

    codes: np.ndarray
    expected: np.ndarray
    chunks: np.ndarray
    ptr: np.ndarray
    link: np.ndarray
    nchunks: np.ndarray
    link_keys: tuple[LinkKey, ...]
    load: np.ndarray
    nominal: np.ndarray

    @classmethod
    def build(cls, routing: ScheduleRouting, estimator: LinkEstimator) -> FlowTable:
        """The table of ``routing`` against ``estimator``'s nominal capacities (the same expected rates as the
        per-row path's: ``min_a nominal_a · n / n_a`` in the same float operations)."""
        pairs = [(p, keys) for p, keys in routing.pair_links.items() if keys]
        injects = [(u, links) for u, links in routing.inject_links.items() if links]
        codes = np.array([u * (1 << 32) + v + 1 for (u, v), _k in pairs] + [u * (1 << 32) for u, _l in injects],
                         dtype=np.int64)
        lens = np.array([len(k) for _p, k in pairs] + [len(links) for _u, links in injects], dtype=np.int64)
        flat = list(chain.from_iterable(k for _p, k in pairs)) + list(chain.from_iterable(l for _u, l in injects))
        link_keys = tuple(sorted(set(flat)))
        index = {a: i for i, a in enumerate(link_keys)}
        link = np.fromiter(map(index.__getitem__, flat), dtype=np.int64, count=len(flat))
        per_pair = np.array([routing.pair_chunks[p] for p, _k in pairs], dtype=np.int64)
        nch = np.concatenate([np.repeat(per_pair, lens[:len(pairs)]),
                              np.fromiter(chain.from_iterable(l.values() for _u, l in injects), dtype=np.int64)])
        order = np.argsort(codes, kind="stable")
        ptr = np.r_[0, np.cumsum(lens)]
        table = cls(codes, np.zeros(0), np.zeros(0, dtype=np.int64), ptr, link, nch, link_keys,
                    np.array([routing.link_chunks[a] for a in link_keys], dtype=np.int64),
                    np.array([estimator.nominal_gbps(a) for a in link_keys], dtype=np.float64))
        ent, _owner = table.entries(order)  # the incidence in code order
        link, nch, ptr = link[ent], nch[ent], np.r_[0, np.cumsum(lens[order])]
        if not link.size:
            return cls(codes[order], np.zeros(0), np.zeros(0, dtype=np.int64), ptr, link, nch, link_keys,
                       table.load, table.nominal)
        share = table.nominal[link] * nch / table.load[link]  # nominal_a · n / n_a, as the per-row path
        return cls(codes[order], np.minimum.reduceat(share, ptr[:-1]), np.maximum.reduceat(nch, ptr[:-1]), ptr,
                   link, nch, link_keys, table.load, table.nominal)

    def entries(self, flows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The incidence entries of ``flows`` (indices into ``link``/``nchunks``) and, per entry, its position in
        ``flows``."""
        lo, hi = self.ptr[flows], self.ptr[flows + 1]
        lens = hi - lo
        owner = np.repeat(np.arange(flows.size, dtype=np.int64), lens)
        return np.repeat(lo - (np.cumsum(lens) - lens), lens) + np.arange(owner.size, dtype=np.int64), owner


class _PairRates(Mapping[tuple[int, int], float]):
    """Per-chunk rates of a window's ``pair`` rows as a read-only mapping ``(src, dst) → rate`` (sorted lazily:
    it is read only when some slow row has feeders, or by an AllReduce's AllGather phase)."""

    def __init__(self, codes: np.ndarray, rates: np.ndarray) -> None:
        self._codes, self._rates, self._sorted = codes, rates, False

    def _sort(self) -> None:
        if not self._sorted:
            order = np.argsort(self._codes, kind="stable")
            self._codes, self._rates, self._sorted = self._codes[order], self._rates[order], True

    def __getitem__(self, pair: tuple[int, int]) -> float:
        self._sort()
        code = pair[0] * (1 << 32) + pair[1] + 1
        i = int(np.searchsorted(self._codes, code))
        if i < self._codes.size and int(self._codes[i]) == code:
            return float(self._rates[i])
        raise KeyError(pair)

    def __iter__(self) -> Iterator[tuple[int, int]]:
        self._sort()
        return iter([(c >> 32, (c & 0xFFFFFFFF) - 1) for c in self._codes.tolist()])

    def __len__(self) -> int:
        return int(self._codes.size)


class ColumnFold:
    """Folds columnar windows into ``estimator`` (its pacing memory and EWMA); not thread-safe by itself."""

    def __init__(self, estimator: LinkEstimator) -> None:
        self.estimator = estimator
        self._tables: dict[int, tuple[ScheduleRouting, FlowTable]] = {}
        self._lock = threading.Lock()

    def table(self, routing: ScheduleRouting) -> FlowTable:
        """The flow table of ``routing`` (built once per routing)."""
        with self._lock:  # the controller's routing thread builds tables ahead of the poll
            cached = self._tables.get(id(routing))
            if cached is not None and cached[0] is routing:
                return cached[1]
            table = FlowTable.build(routing, self.estimator)
            self._tables[id(routing)] = (routing, table)
            while len(self._tables) > _TABLES:
                del self._tables[next(iter(self._tables))]
            return table

    def observe(self, routing: ScheduleRouting, src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray,
                busy_s: np.ndarray, *, t_s: float, count: int = 1) -> dict[LinkKey, float]:
        """:meth:`~runtime.loop.estimator.LinkEstimator.observe_group` of the measurements
        ``(pair or inject, src, dst or None for dst < 0, nbytes, busy_s)`` given as arrays (one row per flow)."""
        est, tab = self.estimator, self.table(routing)
        codes = src.astype(np.int64) * _SHIFT + (dst.astype(np.int64) + 1)
        pos = np.minimum(np.searchsorted(tab.codes, codes), max(tab.codes.size - 1, 0))
        ok = (busy_s > 0) & (nbytes > 0)
        if tab.codes.size:
            ok &= tab.codes[pos] == codes
        else:
            ok[:] = False
        flow, codes = pos[ok], codes[ok]
        rate = 8.0 * nbytes[ok].astype(np.float64) / busy_s[ok] / 1e9
        pc = rate / tab.chunks[flow]
        slow = rate < (1.0 - est.slow_tolerance) * tab.expected[flow]
        is_pair = dst[ok] >= 0
        per_chunk = _PairRates(codes[is_pair], pc[is_pair])
        prior = est.phase_prior(routing, per_chunk)
        learnt = est.pacing.learn_columns(routing, flow[~slow], rate[~slow], tab.codes.size)
        slow_at = np.flatnonzero(slow)
        slow_rows = [("pair", c >> 32, (c & 0xFFFFFFFF) - 1, r, None, p) if c & 0xFFFFFFFF else
                     ("inject", c >> 32, None, r, None, p)
                     for c, r, p in zip(codes[slow_at].tolist(), rate[slow_at].tolist(), pc[slow_at].tolist())]
        paced = est.pacing.paced_slow(routing, slow_rows, per_chunk, prior, count, learnt)  # also ends slow runs
        evidence = slow_at[[row[:3] not in paced for row in slow_rows]] if paced else slow_at
        nlinks = len(tab.link_keys)
        healthy = np.zeros(nlinks, dtype=bool)
        ent, _owner = tab.entries(flow[~slow])
        healthy[tab.link[ent]] = True
        implied = np.zeros(nlinks, dtype=np.float64)
        implicated = np.zeros(nlinks, dtype=bool)
        ent, owner = tab.entries(flow[evidence])
        links = tab.link[ent]
        np.maximum.at(implied, links, rate[evidence][owner] * tab.load[links] / tab.nchunks[ent])
        implicated[links] = True
        observed = np.flatnonzero(healthy | implicated)
        values = np.where(healthy[observed], tab.nominal[observed], implied[observed])
        out = {tab.link_keys[i]: v for i, v in zip(observed.tolist(), values.tolist())}
        est.update_many(list(out), list(out.values()), t_s, count)
        est.groups += 1
        return out

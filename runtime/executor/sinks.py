"""Telemetry sinks: where an :class:`~runtime.executor.Executor` sends each collective's samples.

A sink is any callable taking a list of :class:`runtime.formats.telemetry.Sample`. It runs on the training
thread right after a collective, so it must be cheap; exceptions are logged once and swallowed.

>>> from runtime.formats.telemetry import Sample
>>> mem = MemorySink()
>>> mem([Sample(1.0, "dp0", 1, 1, "pair", 0, 1, 64, 1e-5, "allgather", "executor")])
>>> len(mem.samples)
1
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from runtime.formats.aggregate import AggRecord, WindowAggregator
from runtime.formats.columnar import batches_from_records
from runtime.formats.telemetry import Sample

__all__ = ["AggregatingSink", "JsonlSink", "MemorySink", "client_sink"]


class MemorySink:
    """Keeps every sample in :attr:`samples` (tests, benchmarks)."""

    def __init__(self) -> None:
        self.samples: list[Sample | AggRecord] = []

    def __call__(self, samples: Sequence[Sample | AggRecord]) -> None:
        self.samples.extend(samples)


class AggregatingSink:
    """Folds each collective's ``pair``/``inject`` samples over a window of collectives into
    ``loopcoll.telemetry/2`` aggregates (:class:`runtime.formats.aggregate.WindowAggregator`, docs/telemetry.md §5)
    and hands them, with the samples it does not fold, to ``inner``; :meth:`flush` closes the open windows
    (:meth:`runtime.executor.Executor.flush` and ``close`` call it). ``columnar``: the windows closed together
    go out as :class:`~runtime.formats.columnar.AggBatch` (kind ``aggcols``, docs/telemetry.md §6), one per
    stream, instead of one record per flow.

    >>> mem = MemorySink()
    >>> sink = AggregatingSink(mem, window=2)
    >>> for seq in (0, 1):
    ...     sink([Sample(seq / 10, "dp0", seq, 1, "pair", 0, 1, 64, 1e-5, "allgather", "executor")])
    >>> [(r.count, r.bytes) for r in mem.samples]
    [(2, 128)]
    """

    def __init__(self, inner: Any, *, window: int = 8, max_window_s: float = 1.0, columnar: bool = False) -> None:
        self.inner = inner
        self.aggregator = WindowAggregator(window, max_window_s)
        self.columnar = columnar
        self._lock = threading.Lock()

    def __call__(self, samples: Sequence[Sample]) -> None:
        with self._lock:
            out = self.aggregator.add(samples)
        if out:
            self.inner(self._shaped(out))

    def _shaped(self, out: Sequence[Sample | AggRecord]) -> list[Any]:
        if not self.columnar:
            return list(out)
        recs = [r for r in out if isinstance(r, AggRecord)]
        return [s for s in out if not isinstance(s, AggRecord)] + list(batches_from_records(recs))

    def flush(self) -> None:
        """Send every open window now (a partial window carries the collectives it holds)."""
        with self._lock:
            out: list[Sample | AggRecord] = list(self.aggregator.flush())
        if out:
            self.inner(self._shaped(out))


class JsonlSink:
    """Appends samples (and ``/2`` aggregates) as JSON lines to ``path``; flushed every ``flush_every`` calls.

    An append-only log (readable with :func:`runtime.formats.telemetry.read_jsonl` while it grows): lines are
    written whole, so a reader sees complete lines only after a flush.
    """

    def __init__(self, path: str | Path, *, flush_every: int = 64) -> None:
        self.path = Path(path)
        self._fh = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()
        self._calls = 0
        self._flush_every = flush_every
        self._lock = threading.Lock()

    def __call__(self, samples: Sequence[Sample | AggRecord]) -> None:
        with self._lock:
            self._fh.write("".join(s.to_json() + "\n" for s in samples))
            self._calls += 1
            if self._calls % self._flush_every == 0:
                self._fh.flush()

    def close(self) -> None:
        """Flush and close the file."""
        with self._lock:
            if not self._fh.closed:
                self._fh.flush()
                self._fh.close()

    def __enter__(self) -> JsonlSink:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def client_sink(client: Any) -> Any:
    """A sink forwarding samples to the controller daemon through ``runtime.service.client.Client.send_samples``."""

    def send(samples: list[Sample]) -> None:
        client.send_samples(samples)

    return send

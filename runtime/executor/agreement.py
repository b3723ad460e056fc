"""The executor's version agreement: what a staged version and a swap are, the store keys that name
the ranks missing an agreement, and the choice of what to switch to.

>>> newest_common([(0, 5, {"allgather": [1, 2]}), (1, 5, {"allgather": [2, 3]})], {"allgather": 1})
{'allgather': (1, 2)}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .errors import SwapTimeoutError
from .plan import Plan

__all__ = ["StagedVersion", "SwapReport", "agreement_key", "default_store", "gather_arrivals", "missing_ranks",
           "newest_common"]


@dataclass(frozen=True)
class StagedVersion:
    """A version ready to switch to: per collective, its plans (size bands) and the staging time."""

    version: int
    plans: dict[str, tuple[Plan, ...]]
    staging_s: float


@dataclass(frozen=True)
class SwapReport:
    """Outcome of one agreement: the switch point and what switched (collective -> (old, new) version)."""

    sync_index: int
    switch_seq: int
    switched: dict[str, tuple[int | None, int]]
    agreement_s: float


def default_store(dist: Any) -> Any:
    """The default process group's ``torch.distributed.Store``, or None: the agreement uses it only to
    name the ranks that miss an agreement (best-effort).

    torch (2.13) has no public accessor for it; ``distributed_c10d._get_default_store`` is the one call
    that returns the store ``init_process_group`` made (a new ``TCPStore`` would need the rendezvous
    address, and ``env://`` is only one of the init methods). Pass ``store=`` to :class:`Executor` to
    avoid it; any failure here means "no store", as before.
    """
    try:
        return dist.distributed_c10d._get_default_store()
    except Exception:  # noqa: BLE001 - naming ranks is best-effort without a store
        return None


def agreement_key(store: Any, comm: str, peers: Sequence[int], global_rank: int) -> str:
    """The store-key prefix of one executor's agreement arrivals: ``loopcoll/executor/COMM/PEERS#N/arrived/``.

    ``N`` numbers this rank's executors of the communicator in order (the members make them in the same
    order, so they agree on it); it is counted in ``store``, the object the keys live in (not in
    process-wide state). Without a store nothing is written, so ``N`` is 1.

    >>> import torch.distributed as dist
    >>> s = dist.HashStore()
    >>> agreement_key(s, "dp0", [0, 1], 0), agreement_key(s, "dp0", [0, 1], 0), agreement_key(None, "dp0", [0, 1], 0)
    ('loopcoll/executor/dp0/0-1#1/arrived/', 'loopcoll/executor/dp0/0-1#2/arrived/', 'loopcoll/executor/dp0/0-1#1/arrived/')
    """
    base = f"loopcoll/executor/{comm}/{'-'.join(map(str, peers))}"
    number = 1
    if store is not None:
        try:
            number = int(store.add(f"{base}/made/{global_rank}", 1))
        except Exception:  # noqa: BLE001 - best-effort like every use of the store here
            number = 1
    return f"{base}#{number}/arrived/"


def gather_arrivals(dist: Any, group: Any, payload: Any, *, store: Any, key: str, rank: int, size: int,
                    sync_index: int, what: str, timeout_s: float) -> list[Any]:
    """Every rank's ``payload`` (``dist.all_gather_object`` on the gloo ``group``), after recording this
    rank's arrival in ``store`` (best-effort).

    Raises
    ------
    SwapTimeoutError
        If the gather fails, naming the ranks whose arrival the store lacks (``what`` starts the message).
    """
    if store is not None:
        try:
            store.set(key + str(rank), str(sync_index))
        except Exception:  # noqa: BLE001
            pass
    gathered: list[Any] = [None] * size
    try:
        dist.all_gather_object(gathered, payload, group=group)
    except Exception as exc:  # noqa: BLE001 - gloo raises RuntimeError/DistBackendError
        missing = missing_ranks(store, key, size, sync_index)
        if missing is None:
            who = "the store that names missing ranks is unreachable (rank 0 hosts the default store)"
        elif missing:
            who = f"rank(s) {missing} did not reach it"
        else:
            who = "all ranks had arrived; one failed during it"
        raise SwapTimeoutError(f"{what} failed within {timeout_s:g} s: {who} ({str(exc).splitlines()[0][:200]})",
                               ranks=missing or ()) from exc
    return gathered


def missing_ranks(store: Any, key: str, size: int, sync_index: int) -> list[int] | None:
    """Ranks whose arrival at agreement ``sync_index`` is not in ``store`` under ``key``; None when the
    store cannot be read (or there is none)."""
    if store is None:
        return None
    missing = []
    try:
        for r in range(size):
            if not store.check([key + str(r)]) or int(store.get(key + str(r))) < sync_index:
                missing.append(r)
    except Exception:  # noqa: BLE001 - e.g. the store's host rank died
        return None
    return missing


def newest_common(gathered: Sequence[tuple[int, int, Mapping[str, Sequence[int]]]],
                  active: Mapping[str, int | None]) -> dict[str, tuple[int | None, int]]:
    """Per collective, ``(active, new)`` where ``new`` is the highest version every rank has staged and
    newer than the active one; collectives with none are left out (sorted by name)."""
    switched: dict[str, tuple[int | None, int]] = {}
    colls: set[str] = set().union(*(p[2].keys() for p in gathered))
    for coll in sorted(colls):
        common = set.intersection(*(set(p[2].get(coll, ())) for p in gathered))
        cur = active.get(coll)
        newer = [v for v in common if cur is None or v > cur]
        if newer:
            switched[coll] = (cur, max(newer))
    return switched

"""The executor's version agreement: what a staged version and a swap are, the store keys that name
the ranks missing an agreement, and the choice of what to switch to.

A staged version is identified by ``Ident = (version, epoch, digest)``: a pushed one by its manifest
entry (the store's epoch and the version's digest), one staged locally by epoch ``""`` and the digest
of its programs (:func:`runtime.executor.sources.local_digest`). :func:`choose` picks (docs/executor.md,
"Guarantees"):

* a candidate is an identity staged on *every* rank (same version, epoch and digest);
* it supersedes the active one when it is of the same epoch and a higher version, or of another epoch
  (a daemon restarted on a store whose manifest is gone numbers from 1 under a new epoch: newest pushed
  wins); among several, the highest ``(version, epoch, digest)``;
* a (version, epoch) that every rank staged but under different digests is never a candidate; the
  ranks whose digest differs from the lowest rank's are reported.

>>> a, b = (2, "e1", "d"), (1, "e2", "x")
>>> choose([{"ag": [a, b]}, {"ag": [a, b]}], {"ag": (2, "e1", "d")})
({'ag': (1, 'e2', 'x')}, {})
>>> choose([{"ag": [(3, "e1", "d")]}, {"ag": [(3, "e1", "z")]}], {})
({}, {'ag': (1,)})
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from runtime.formats.identity import supersedes

from .errors import SwapTimeoutError
from .plan import Plan

__all__ = ["Ident", "StagedVersion", "SwapReport", "add_staged", "agreement_key", "choose", "default_store",
           "gather_arrivals", "keep_from", "missing_ranks", "take"]

#: A staged version's identity: (version, store epoch, digest).
Ident = tuple[int, str, str]


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
    #: Per collective: ranks that staged a version under another digest than the lowest rank (not switched).
    disagreed: dict[str, tuple[int, ...]] = field(default_factory=dict)


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


def add_staged(staged: dict[Ident, Any], ident: Ident, plans: Any) -> None:
    """Stage ``plans`` as ``ident`` in one collective's ``staged``, dropping those of other epochs (a push of
    a new epoch supersedes the old epoch's versions not yet switched to)."""
    for other in [i for i in staged if i[1] != ident[1]]:
        del staged[other]
    staged[ident] = plans


def keep_from(staged: dict[Ident, Any], ident: Ident) -> Any:
    """The plans of ``ident`` after dropping what it supersedes from ``staged`` (other epochs, lower versions).

    >>> s = {(1, "a", "x"): "p1", (2, "a", "y"): "p2", (5, "b", "z"): "p5"}
    >>> keep_from(s, (2, "a", "y")), sorted(s)
    ('p2', [(2, 'a', 'y')])
    """
    for old in [i for i in staged if i[1] != ident[1] or i[0] < ident[0]]:
        del staged[old]
    return staged[ident]


def take(staged: dict[str, dict[Ident, Any]], chosen: Mapping[str, Ident], lock: Any) -> dict[str, Any]:
    """Per collective of ``chosen``, its plans, after dropping what each supersedes (:func:`keep_from`)."""
    with lock:
        return {coll: keep_from(staged[coll], ident) for coll, ident in chosen.items()}


def choose(staged: Sequence[Mapping[str, Sequence[Ident]]], active: Mapping[str, Ident],
           warn: Callable[[str], Any] | None = None) -> tuple[dict[str, Ident], dict[str, tuple[int, ...]]]:
    """Per collective, the identity to switch to, and the ranks that staged another digest of a version
    (each such collective also told to ``warn``)."""
    chosen: dict[str, Ident] = {}
    disagree: dict[str, tuple[int, ...]] = {}
    for coll in sorted(set().union(*(s.keys() for s in staged))):
        per_rank = [set(s.get(coll, ())) for s in staged]
        common = set.intersection(*per_rank)
        held, epoch = active.get(coll, (None, None, None))[:2]
        newer = [i for i in common if supersedes(i[0], i[1], held, epoch)]
        if newer:
            chosen[coll] = max(newer)
        numbers = set.intersection(*({i[:2] for i in r} for r in per_rank))
        for num in sorted(numbers):
            digests = [sorted(i[2] for i in r if i[:2] == num) for r in per_rank]
            odd = tuple(r for r, d in enumerate(digests) if d != digests[0])
            if odd and not any(i[:2] == num for i in common):
                disagree[coll] = tuple(sorted(set(disagree.get(coll, ())) | set(odd)))
    for coll, ranks in disagree.items():
        if warn is not None:
            warn(f"{coll}: rank(s) {list(ranks)} staged a version under another digest; not switching")
    return chosen, disagree

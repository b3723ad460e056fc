"""The executor's incarnation id: one random id per executor start, agreed by the ranks of one job run.

Every telemetry sample carries it (``docs/telemetry.md`` §1), so the controller tells a restarted job's
collectives (whose ``seq`` starts again at 1) from the old run's. The ranks agree on it through the store of
the version agreement: each draws 64 random bits and offers them with ``compare_set`` on one key; the first
offer wins and every rank reads it back. A fresh job run has a fresh store (or, on a store that outlives
runs, a fresh agreement key: its instance number is counted in that store), hence a fresh id.
"""

from __future__ import annotations

import secrets
from typing import Any

__all__ = ["incarnation_id"]


def incarnation_id(store: Any, key: str, size: int) -> str | None:
    """The incarnation id (16 hex digits) the ranks sharing ``key`` in ``store`` agree on.

    ``key`` is the executor's agreement prefix (:func:`runtime.executor.agreement.agreement_key`); the id lives
    at ``key + "incarnation"``. One rank (``size == 1``) needs no agreement. Without a usable store the ranks
    cannot agree, and the id is None: samples then carry none (the controller's grouping without it is in
    ``docs/controller.md`` §1).

    >>> import torch.distributed as dist
    >>> s = dist.HashStore()
    >>> a, b = incarnation_id(s, "k/", 2), incarnation_id(s, "k/", 2)
    >>> a == b, len(a), incarnation_id(None, "k/", 2), incarnation_id(s, "k2/", 2) != a
    (True, 16, None, True)
    """
    mine = secrets.token_hex(8)
    if size == 1:
        return mine
    if store is None:
        return None
    try:
        won = store.compare_set(key + "incarnation", "", mine)
        text = won.decode("ascii") if isinstance(won, bytes) else str(won)
    except Exception:  # noqa: BLE001 - best-effort like every use of the agreement's store
        return None
    return text if len(text) == 16 and all(c in "0123456789abcdef" for c in text) else None

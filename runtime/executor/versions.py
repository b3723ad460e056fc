"""Which staged version the ranks switch to: agreement on ``(version, epoch, digest)``, not the number alone.

A staged version is identified by ``Ident = (version, epoch, digest)``: a pushed one by its manifest
entry (the store's epoch and the version's digest), one staged locally by epoch ``""`` and the sha256 of
its programs' XML. The rule (docs/executor.md, "Guarantees"):

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

from collections.abc import Iterable, Mapping, Sequence

from msccl_xml import Program, write
from runtime.formats.identity import sha256_hex, supersedes, version_digest

__all__ = ["Ident", "choose", "local_digest"]

Ident = tuple[int, str, str]


def local_digest(programs: Iterable[Program]) -> str:
    """The digest of locally staged programs: over their size bands and the sha256 of their XML."""
    return version_digest((p.min_bytes or 0, p.max_bytes or None, sha256_hex(write(p).encode())) for p in programs)


def choose(staged: Sequence[Mapping[str, Sequence[Ident]]],
           active: Mapping[str, Ident]) -> tuple[dict[str, Ident], dict[str, tuple[int, ...]]]:
    """Per collective, the identity to switch to, and the ranks that staged another digest of a version."""
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
    return chosen, disagree

"""The job profile (format ``loopcoll.profile/1``): which communicators run which collectives at which sizes.

A communicator is a named set of **global** ranks (global rank r is the topology's GPU with rank r). Its
schedules are synthesized over its own ranks: other GPUs do not relay unless ``relay`` is true.
``docs/telemetry.md`` documents the format.

Examples
--------
>>> p = profile_from_dict({"format": "loopcoll.profile/1", "topology": "hpn:1x2x4",
...     "communicators": [{"name": "world", "ranks": [0, 1, 2, 3, 4, 5, 6, 7],
...                        "collectives": [{"collective": "allgather", "sizes": [16777216]}]}]})
>>> p.communicator("world").ranks[:3], p.communicator("world").collectives[0].sizes_bytes
((0, 1, 2), (16777216,))
>>> profile_from_dict(profile_to_dict(p)) == p
True
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtime.errors import ProfileError
from runtime.formats.store import _NAME_OK
from synth import COLLECTIVES, Topology
from synth.fileio import write_text_atomic

__all__ = [
    "PROFILE_FORMAT",
    "PROFILE_COLLECTIVES",
    "CollectiveSpec",
    "Communicator",
    "JobProfile",
    "load_profile",
    "profile_from_dict",
    "profile_to_dict",
    "write_profile",
]

PROFILE_FORMAT = "loopcoll.profile/1"
#: Collectives a profile may name (AllToAllv's schedules depend on a measured demand matrix).
PROFILE_COLLECTIVES: tuple[str, ...] = (*COLLECTIVES, "alltoallv")
_MAX_COMMS = 4096
_MAX_PROFILE_BYTES = 16 << 20


@dataclass(frozen=True, slots=True)
class CollectiveSpec:
    """One collective a communicator runs, with the sizes S (bytes, nccl-tests convention) it runs at."""

    collective: str
    sizes_bytes: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Communicator:
    """A named group of global ranks and the collectives it runs."""

    name: str
    ranks: tuple[int, ...]
    collectives: tuple[CollectiveSpec, ...]
    relay: bool = False

    def local_rank(self, global_rank: int) -> int:
        """The communicator-local rank of ``global_rank``.

        >>> Communicator("c", (4, 6), ()).local_rank(6)
        1
        """
        try:
            return self.ranks.index(global_rank)
        except ValueError:
            raise ProfileError(f"communicator {self.name!r}: rank {global_rank} is not a member") from None

    def collective(self, name: str) -> CollectiveSpec | None:
        """The spec of collective ``name`` on this communicator, or ``None``."""
        return next((c for c in self.collectives if c.collective == name), None)


@dataclass(frozen=True, slots=True)
class JobProfile:
    """A job's communicators over one topology (spec string or file path)."""

    topology: str
    communicators: tuple[Communicator, ...]

    def communicator(self, name: str) -> Communicator:
        """The communicator called ``name`` (:class:`ProfileError` if there is none)."""
        for c in self.communicators:
            if c.name == name:
                return c
        raise ProfileError(f"profile: unknown communicator {name!r}")

    def comm_ranks(self) -> dict[str, tuple[int, ...]]:
        """Communicator name → its global ranks (what telemetry validation takes)."""
        return {c.name: c.ranks for c in self.communicators}

    def check_topology(self, topology: Topology) -> None:
        """Raise :class:`ProfileError` naming the first rank the topology does not have."""
        n = topology.nranks
        for c in self.communicators:
            bad = [r for r in c.ranks if r >= n]
            if bad:
                raise ProfileError(f"communicator {c.name!r}: rank {bad[0]} is not a GPU of {topology.name} "
                                   f"({n} ranks)")


def _int_list(value: Any, where: str, *, minimum: int) -> tuple[int, ...]:
    if not isinstance(value, list) or not value:
        raise ProfileError(f"{where}: must be a non-empty list of integers")
    out = []
    for v in value:
        if isinstance(v, bool) or not isinstance(v, int) or v < minimum or v > (1 << 62):
            raise ProfileError(f"{where}: {str(v)[:40]!r} is not an integer >= {minimum}")
        out.append(v)
    return tuple(out)


def profile_from_dict(data: Mapping[str, Any]) -> JobProfile:
    """Validate a profile object; errors name the communicator and field."""
    if not isinstance(data, Mapping):
        raise ProfileError(f"profile: must be a JSON object, got {type(data).__name__}")
    if data.get("format") != PROFILE_FORMAT:
        raise ProfileError(f"profile: format must be {PROFILE_FORMAT!r}, got {str(data.get('format'))[:60]!r}")
    topology = data.get("topology")
    if not isinstance(topology, str) or not topology:
        raise ProfileError("profile: topology must be a spec string or a file path")
    comms_raw = data.get("communicators")
    if not isinstance(comms_raw, list) or not comms_raw:
        raise ProfileError("profile: communicators must be a non-empty list")
    if len(comms_raw) > _MAX_COMMS:
        raise ProfileError(f"profile: at most {_MAX_COMMS} communicators, got {len(comms_raw)}")
    comms: list[Communicator] = []
    seen: set[str] = set()
    for i, c in enumerate(comms_raw):
        if not isinstance(c, Mapping):
            raise ProfileError(f"profile: communicator {i} must be an object")
        name = c.get("name")
        if not isinstance(name, str) or not name or len(name) > 256:
            raise ProfileError(f"profile: communicator {i}: name must be a non-empty string")
        if not _NAME_OK.fullmatch(name):  # it names the communicator's directory in the store
            raise ProfileError(f"profile: communicator {i}: name {name[:60]!r} cannot name a store directory "
                               "(letters, digits, '.', '_', '-', starting with a letter or digit; at most 128 "
                               "characters)")
        if name in seen:
            raise ProfileError(f"profile: communicator {name!r} is defined twice")
        seen.add(name)
        ranks = _int_list(c.get("ranks"), f"communicator {name!r}: ranks", minimum=0)
        if len(set(ranks)) != len(ranks):
            raise ProfileError(f"communicator {name!r}: ranks repeat a rank")
        relay = c.get("relay", False)
        if not isinstance(relay, bool):
            raise ProfileError(f"communicator {name!r}: relay must be true or false")
        colls_raw = c.get("collectives", [])
        if not isinstance(colls_raw, list):
            raise ProfileError(f"communicator {name!r}: collectives must be a list")
        colls: list[CollectiveSpec] = []
        for cs in colls_raw:
            if not isinstance(cs, Mapping) or cs.get("collective") not in PROFILE_COLLECTIVES:
                got = cs.get("collective") if isinstance(cs, Mapping) else cs
                raise ProfileError(f"communicator {name!r}: collective must be one of "
                                   f"{', '.join(PROFILE_COLLECTIVES)}, got {str(got)[:40]!r}")
            if any(x.collective == cs["collective"] for x in colls):
                raise ProfileError(f"communicator {name!r}: collective {cs['collective']!r} listed twice")
            sizes = _int_list(cs.get("sizes"), f"communicator {name!r}: {cs['collective']} sizes", minimum=1)
            colls.append(CollectiveSpec(cs["collective"], tuple(sorted(set(sizes)))))
        comms.append(Communicator(name, ranks, tuple(colls), relay))
    return JobProfile(topology, tuple(comms))


def profile_to_dict(profile: JobProfile) -> dict[str, Any]:
    """The JSON object of a profile (round-trips through :func:`profile_from_dict`)."""
    return {
        "format": PROFILE_FORMAT,
        "topology": profile.topology,
        "communicators": [
            {"name": c.name, "ranks": list(c.ranks), "relay": c.relay,
             "collectives": [{"collective": s.collective, "sizes": list(s.sizes_bytes)} for s in c.collectives]}
            for c in profile.communicators
        ],
    }


def load_profile(path: str | os.PathLike[str]) -> JobProfile:
    """Read and validate a profile file; a relative ``topology`` file path is taken relative to it."""
    p = Path(path)
    try:
        if p.stat().st_size > _MAX_PROFILE_BYTES:
            raise ProfileError(f"{p}: larger than {_MAX_PROFILE_BYTES} bytes")
        data = json.loads(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ProfileError(f"{p}: cannot read profile: {exc.strerror or exc}") from exc
    except (ValueError, RecursionError) as exc:
        raise ProfileError(f"{p}: not valid JSON: {str(exc)[:120]}") from None
    try:
        prof = profile_from_dict(data)
    except ProfileError as exc:
        raise ProfileError(f"{p}: {exc}") from None
    topo = Path(prof.topology)
    if not topo.is_absolute() and (p.parent / topo).is_file():
        prof = JobProfile(str(p.parent / topo), prof.communicators)
    return prof


def write_profile(path: str | os.PathLike[str], profile: JobProfile) -> None:
    """Write a profile atomically, keys sorted (byte-deterministic)."""
    write_text_atomic(path, json.dumps(profile_to_dict(profile), indent=2, sort_keys=True) + "\n")

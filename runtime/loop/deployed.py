"""The schedule manager's records: the deployed version of a key, a finished job, the counters.

>>> ManagerCounters().publications
0
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from runtime.formats.store import VersionEntry
from runtime.loop.detector import Verdict
from synth import CutLink, Schedule, SynthResult, Topology

__all__ = ["Deployed", "Job", "ManagerCounters"]


@dataclass
class Deployed:
    """The deployed version of one (comm, collective) and the manager's memory about it."""

    entry: VersionEntry
    schedule: Schedule
    result: SynthResult | None
    cut: tuple[CutLink, ...]
    swapped_t_s: float
    last_recovery_check_t_s: float = -math.inf
    deferred_logged: bool = False
    samples_since: int = 0
    provisional: bool = False  # a bootstrap version 1 made within its budget; the optimum is still due


@dataclass
class Job:
    """A finished synthesis waiting for its ready time (its measured duration after it started)."""

    key: tuple[str, str]
    reason: str
    verdict: Verdict | None
    result: SynthResult
    topology: Topology
    started_t_s: float
    ready_t_s: float
    trigger_samples: int
    provisional: bool = False  # cut short by the reaction budget: the optimum is due once it is published


@dataclass
class ManagerCounters:
    syntheses: int = 0
    publications: int = 0
    aborts: int = 0
    no_gain: int = 0
    deferred_cooldown: int = 0
    failures: int = 0
    gated: int = 0  # flagged verdicts the contention gate held back (not SUSTAINED)

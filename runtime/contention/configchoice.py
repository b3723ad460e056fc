"""Configuration choice under contention: a table learnt online, with bounded exploration.

Policy (documented in docs/contention.md)
-----------------------------------------
* **Context** = (collective, size bucket, contention bucket). The contention bucket is the gate's
  ρ rounded on a log grid (:func:`contention_bucket`: 1, 1.25, 1.6, 2, 2.5, …), so "50 %" and "80 %"
  contention on the bottleneck are different contexts and a known context is reused when it recurs.
* **Table.** Per (context, candidate) an EWMA of the measured time per call.
* **Exploit.** The candidate with the lowest measured time in the context.
* **Explore.** A candidate with no measurement in the context is tried only if its *prior* (a
  prediction, e.g. the flow simulator on the measured topology, or ``None`` = unknown) is below the
  best measured time, and only while the **exploration budget** holds: the extra time spent on
  explorations so far (explored time − the best time known then) plus the worst case of this one
  (its prior, or ``max_slowdown ×`` the best if no prior) stays within ``budget × `` the total time of
  all calls. So exploration costs at most ``budget`` of the run as long as no candidate is slower
  than its assumed worst case; one that is overshoots by that one call's excess, and no further
  exploration happens until the budget is restored. Explorations start after ``warm_calls`` calls.

Examples
--------
>>> ch = ConfigChooser(["ring", "tree"], budget=0.1, warm_calls=2)
>>> ctx = ("allreduce", 26, contention_bucket(2.0))
>>> for _ in range(20):
...     c = ch.choose(ctx, prior_s={"ring": 1.0, "tree": 0.8})
...     ch.record(ctx, c, {"ring": 1.0, "tree": 0.7}[c.name])
>>> ch.choose(ctx, prior_s={"ring": 1.0, "tree": 0.8}).name, ch.explore_fraction <= 0.1
('tree', True)
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

from runtime.errors import ProfileError

__all__ = ["Choice", "ConfigChooser", "contention_bucket"]


def contention_bucket(rho: float, *, per_octave: int = 3) -> float:
    """ρ snapped to a log grid (``per_octave`` steps per doubling); ρ ≤ 1.1 is 1.0.

    >>> [contention_bucket(r) for r in (1.05, 1.9, 2.0, 5.0)]
    [1.0, 2.0, 2.0, 5.04]
    """
    if not isinstance(rho, (int, float)) or not math.isfinite(rho) or rho <= 0:
        raise ProfileError(f"contention bucket: rho must be a finite number > 0, got {rho!r}")
    if rho <= 1.1:
        return 1.0
    return round(2 ** (round(math.log2(rho) * per_octave) / per_octave), 2)


@dataclass(frozen=True, slots=True)
class Choice:
    """The candidate to run, whether it is an exploration, and why."""

    name: str
    explore: bool
    reason: str


class ConfigChooser:
    """Online table of measured times per (context, candidate) with a bounded exploration budget."""

    def __init__(self, candidates: Sequence[str], *, budget: float = 0.05, ew_alpha: float = 0.3,
                 max_slowdown: float = 3.0, warm_calls: int = 5) -> None:
        if not candidates or len(set(candidates)) != len(candidates) or not all(isinstance(c, str) for c in candidates):
            raise ProfileError(f"config chooser: candidates must be distinct names, got {candidates!r}")
        for name, v, lo in (("budget", budget, 0.0), ("ew_alpha", ew_alpha, 0.0), ("max_slowdown", max_slowdown, 1.0)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < lo:
                raise ProfileError(f"config chooser: `{name}` must be a number >= {lo}, got {v!r}")
        self.candidates = tuple(candidates)
        self.budget = float(budget)
        self.ew_alpha = float(ew_alpha)
        self.max_slowdown = float(max_slowdown)
        self.warm_calls = int(warm_calls)
        self.table: dict[tuple[Hashable, str], float] = {}
        self.total_s = 0.0
        self.explore_excess_s = 0.0
        self.calls = 0
        self.explorations = 0

    @property
    def explore_fraction(self) -> float:
        """Extra time spent exploring / total time (the budget bounds it)."""
        return self.explore_excess_s / self.total_s if self.total_s > 0 else 0.0

    def best(self, context: Hashable) -> tuple[str, float] | None:
        """The fastest measured candidate in ``context`` and its time, or None."""
        known = [(self.table[(context, c)], i, c) for i, c in enumerate(self.candidates) if (context, c) in self.table]
        if not known:
            return None
        t, _, c = min(known)
        return c, t

    def choose(self, context: Hashable, *, prior_s: Mapping[str, float] | None = None,
               current: str | None = None) -> Choice:
        """What to run next in ``context`` (``current``: the running candidate, the default before any data)."""
        best = self.best(context)
        prior = dict(prior_s or {})
        if best is None:
            # nothing measured here: run the best prior (or the current/first candidate) — not an exploration
            pick = min(self.candidates, key=lambda c: (prior.get(c, math.inf), c != current, self.candidates.index(c)))
            return Choice(pick, False, "no measurement in this context: best prior" if prior else "no measurement: default")
        bname, bt = best
        untried = [c for c in self.candidates if (context, c) not in self.table]
        untried.sort(key=lambda c: (prior.get(c, math.inf), self.candidates.index(c)))
        for c in untried:
            p = prior.get(c)
            if p is not None and p >= bt:
                continue
            worst = max(0.0, (p if p is not None else self.max_slowdown * bt) - bt)
            if self.calls >= self.warm_calls and self.explore_excess_s + worst <= self.budget * (self.total_s + bt):
                return Choice(c, True, f"explore: prior {p if p is not None else 'unknown'} vs best {bname} {bt:.4g}s")
        return Choice(bname, False, f"exploit: {bname} {bt:.4g}s")

    def record(self, context: Hashable, choice: Choice | str, time_s: float) -> None:
        """Fold in one measured call of ``choice`` in ``context``."""
        name = choice.name if isinstance(choice, Choice) else choice
        if name not in self.candidates:
            raise ProfileError(f"config chooser: unknown candidate {name!r}")
        if isinstance(time_s, bool) or not isinstance(time_s, (int, float)) or not math.isfinite(time_s) or time_s <= 0:
            raise ProfileError(f"config chooser: time must be a finite number > 0, got {time_s!r}")
        if isinstance(choice, Choice) and choice.explore:
            best = self.best(context)
            self.explorations += 1
            if best is not None:
                self.explore_excess_s += max(0.0, time_s - best[1])
        key = (context, name)
        old = self.table.get(key)
        self.table[key] = float(time_s) if old is None else old + self.ew_alpha * (float(time_s) - old)
        self.total_s += float(time_s)
        self.calls += 1

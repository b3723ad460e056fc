"""The calibration's records: a measured :class:`Observation`, and a fit's result (:class:`Calibration` with
its :class:`PointFit` per observation and :class:`FittedParam` per parameter).

>>> o = Observation("allgather", "nvswitch:4", "msccl", "ring", 2**20, 40.0)
>>> o.to_dict()["shape"], o.weight
('ring', 1.0)
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from synth.collective import COLLECTIVES, Collective
from synth.errors import LoopcollError
from synth.simulation.costmodel import EXECUTORS, CostProfile

__all__ = ["HINT_ORDER", "SHAPES", "Calibration", "CalibrationError", "FittedParam", "Observation", "PointFit"]

SHAPES = ("ring", "tree", "direct")
#: The order calibrate's messages list the collectives in (its ``--collective`` shows the same).
HINT_ORDER = "|".join(c.value for c in (Collective.ALLGATHER, Collective.ALLTOALL, Collective.ALLREDUCE,
                                         Collective.REDUCESCATTER))


class CalibrationError(LoopcollError):
    """Measurements cannot be read or fitted."""


@dataclass(frozen=True, slots=True)
class Observation:
    """One measured collective: ``time_us`` for ``S = nbytes`` (nccl-tests convention).

    ``timing`` is ``wall`` (host-timed, launch included) or ``kernel`` (GPU kernel time, as the
    NCCL Inspector reports it); ``source`` names where the number came from.
    """

    collective: str
    topology: str
    executor: str
    shape: str
    nbytes: int
    time_us: float
    source: str = ""
    timing: str = "wall"
    weight: float = 1.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.weight) and self.weight > 0):
            raise CalibrationError(f"{self.source or 'observation'}: weight must be > 0, got {self.weight!r}")
        if self.collective not in COLLECTIVES:
            raise CalibrationError(f"{self.source or 'observation'}: unknown collective {self.collective!r}")
        if self.executor not in EXECUTORS:
            raise CalibrationError(f"{self.source or 'observation'}: unknown executor {self.executor!r}; choose from {', '.join(EXECUTORS)}")
        if self.shape not in SHAPES:
            raise CalibrationError(f"{self.source or 'observation'}: unknown schedule shape {self.shape!r}; choose from {', '.join(SHAPES)}")
        if not (self.nbytes > 0 and math.isfinite(self.time_us) and self.time_us > 0):
            raise CalibrationError(f"{self.source or 'observation'}: size and time must be > 0, got {self.nbytes!r} B, {self.time_us!r} us")

    def to_dict(self) -> dict[str, Any]:
        return {"collective": self.collective, "topology": self.topology, "executor": self.executor, "shape": self.shape,
                "nbytes": self.nbytes, "time_us": self.time_us, "source": self.source, "timing": self.timing, "weight": self.weight}


@dataclass(frozen=True, slots=True)
class PointFit:
    """One observation beside the fitted model: in-sample and leave-one-out relative algbw errors."""

    observation: Observation
    model_us: float
    error: float  # model algbw / measured algbw − 1
    loo_model_us: float | None
    loo_error: float | None


@dataclass(frozen=True, slots=True)
class Calibration:
    """A fitted profile, the status of each parameter and the per-point errors."""

    profile: CostProfile
    points: tuple[PointFit, ...]
    status: Mapping[str, str]  # "executor.param" -> "fitted" | "prior"
    message: str
    cost: float = 0.0  # final sum of squared log residuals
    notes: tuple[str, ...] = field(default=())
    params: tuple[FittedParam, ...] = field(default=())

    @property
    def median_error(self) -> float:
        """Median of the points' absolute in-sample errors (model algbw / measured − 1)."""
        return float(statistics.median(abs(p.error) for p in self.points))

    @property
    def worst_error(self) -> float:
        """Largest absolute in-sample error."""
        return max(abs(p.error) for p in self.points)

    def implausible(self, *, max_median_error: float = 0.15, max_worst_error: float = 0.5) -> list[str]:
        """Why the fit cannot be trusted (empty when it can): parameters at a bound, errors past the limits.

        A launch or hop cost of exactly zero is shown as at its bound but accepted (the data show no
        such cost); an efficiency at either bound or a cost at its upper bound is not.
        """
        why = []
        for p in self.params:
            side = p.at_bound
            if side and not (side == "lower" and p.lower == 0.0):
                limit = p.upper if side == "upper" else p.lower
                pct = f" = {100 * limit:.0f}% of capacity" if ".efficiency." in p.name else ""
                why.append(f"{p.name} sits at its {side} bound {limit:g}{pct}")
        if self.median_error > max_median_error:
            why.append(f"median error {100 * self.median_error:.1f}% exceeds {100 * max_median_error:g}%")
        if self.worst_error > max_worst_error:
            why.append(f"worst error {100 * self.worst_error:.1f}% exceeds {100 * max_worst_error:g}%")
        return why


@dataclass(frozen=True, slots=True)
class FittedParam:
    """One parameter of a fit: its value, the bounds the optimiser kept it in, and its status.

    ``at_bound`` is ``"lower"`` or ``"upper"`` when a fitted value sits on a bound (the optimiser
    wanted to go past it: the model cannot explain the data there), else ``""``.

    >>> FittedParam("msccl.efficiency.net", 4.0, 0.02, 4.0, "fitted").at_bound
    'upper'
    """

    name: str  # "executor.param"
    value: float
    lower: float
    upper: float
    status: str  # "fitted" | "prior"

    @property
    def at_bound(self) -> str:
        if self.status != "fitted":
            return ""
        tol = 1e-6 * max(1.0, abs(self.upper))
        if self.value >= self.upper - tol:
            return "upper"
        if self.value <= self.lower + 1e-6 * max(1.0, abs(self.lower)):
            return "lower"
        return ""

"""The small LP interface the column-generation synthesizers drive, whatever the backend.

A backend holds one *minimisation* LP that grows by rows and columns, keeps its basis between
solves (warm start), and reports row duals in HiGHS's sign convention (``c − Aᵀy`` is the
reduced cost, so a ``≤`` row has a dual ``≤ 0``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np
import numpy.typing as npt

from synth.result import Status

__all__ = ["LpBackend", "LpMethod", "LpSolution"]

LpMethod = Literal["primal", "dual", "auto"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class LpSolution:
    """Outcome of one solve: loopcoll status, native status name, values and duals."""

    status: Status
    native: str
    objective: float
    col_values: FloatArray
    row_duals: FloatArray
    iterations: int

    @property
    def has_solution(self) -> bool:
        """True when values and duals are usable (optimal, or a feasible point at a limit)."""
        return self.status is Status.OPTIMAL


class LpBackend(Protocol):
    """One growing minimisation LP (see the module docstring)."""

    name: str

    @property
    def num_rows(self) -> int: ...

    @property
    def num_cols(self) -> int: ...

    def add_rows(self, lower: FloatArray, upper: FloatArray) -> None:
        """Append empty rows ``lower ≤ a·x ≤ upper`` (use ±inf for one-sided rows)."""

    def add_cols(
        self,
        cost: FloatArray,
        lower: FloatArray,
        upper: FloatArray,
        starts: IntArray,
        index: IntArray,
        value: FloatArray,
    ) -> None:
        """Append columns given in compressed-column form (``starts`` has one entry per column)."""

    def set_coeff(self, row: int, col: int, value: float) -> None:
        """Set one matrix coefficient."""

    def set_col_bounds(self, cols: IntArray, lower: FloatArray, upper: FloatArray) -> None:
        """Change the bounds of some columns."""

    def solve(self, *, method: LpMethod = "auto", time_limit_s: float | None = None) -> LpSolution:
        """Solve from the current basis; never raises for a solver-side failure (see ``status``)."""

    def basis(self) -> object | None:
        """An opaque copy of the current basis, or ``None`` when the backend cannot export one."""

    def set_basis(self, basis: object | None) -> None:
        """Install a basis from :meth:`basis` of an LP of the same shape (``None``: do nothing)."""

    def start_basis(self, basic_cols: IntArray, basic_rows: IntArray) -> bool:
        """Hint a starting basis: these columns and row slacks basic, other columns at their lower
        bound, other rows at their finite bound (lower first). The caller makes it square and
        nonsingular. Returns whether the backend took it (it may ignore hints)."""

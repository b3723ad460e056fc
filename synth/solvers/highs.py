"""HiGHS (highspy) implementation of :class:`~synth.solvers._base.LpBackend`.

Primal simplex (``simplex_strategy=4``) re-solves a column-generation master from its basis far
faster than the default dual simplex once columns have been added; dual simplex is right after a
capacity change, when the old basis stays dual feasible.

Examples
--------
>>> import numpy as np
>>> lp = HighsBackend()
>>> lp.add_rows(np.array([-np.inf]), np.array([4.0]))
>>> lp.add_cols(np.array([-1.0, -2.0]), np.zeros(2), np.full(2, np.inf),
...             np.array([0, 1]), np.array([0, 0]), np.array([1.0, 1.0]))
>>> sol = lp.solve(method="primal")
>>> sol.status.value, sol.objective, sol.row_duals.tolist()
('optimal', -8.0, [-2.0])
"""

from __future__ import annotations

from typing import Any

import highspy
import numpy as np

from synth.result import Status
from synth.solvers._base import FloatArray, IntArray, LpMethod, LpSolution
from synth.kernels.highs import quiet_highs
from synth.solvers._status import status_from_highs

__all__ = ["HighsBackend"]

_STRATEGY = {"primal": 4, "dual": 1, "auto": 1}


def _finite(a: FloatArray) -> FloatArray:
    # highspy.kHighsInf is IEEE infinity; clip anything beyond it (HiGHS treats >= 1e20 as infinite).
    return np.clip(np.asarray(a, dtype=np.float64), -highspy.kHighsInf, highspy.kHighsInf)


class HighsBackend:
    """A growing minimisation LP held in one silent ``Highs`` object (never prints)."""

    name = "highs"

    def __init__(self, *, threads: int | None = None) -> None:
        # Tight dual tolerance: column generation prices against these duals, and a column the
        # LP deems optimal within a loose tolerance would be priced in again and again.
        options: dict[str, Any] = {"presolve": "off", "dual_feasibility_tolerance": 1e-9}
        if threads is not None:
            options["threads"] = int(threads)
        self._h = quiet_highs(**options)
        self._rows = 0
        self._cols = 0
        self._row_lower_finite: list[np.ndarray] = []

    @property
    def num_rows(self) -> int:
        return self._rows

    @property
    def num_cols(self) -> int:
        return self._cols

    def add_rows(self, lower: FloatArray, upper: FloatArray) -> None:
        n = len(lower)
        empty = np.zeros(n, dtype=np.int32)
        self._h.addRows(n, _finite(lower), _finite(upper), 0, empty, np.zeros(0, np.int32), np.zeros(0))
        self._rows += n
        self._row_lower_finite.append(np.asarray(lower, dtype=np.float64) > -highspy.kHighsInf)

    def add_cols(
        self,
        cost: FloatArray,
        lower: FloatArray,
        upper: FloatArray,
        starts: IntArray,
        index: IntArray,
        value: FloatArray,
    ) -> None:
        n = len(cost)
        if n == 0:
            return
        self._h.addCols(
            n,
            np.asarray(cost, np.float64),
            _finite(np.asarray(lower, np.float64)),
            _finite(np.asarray(upper, np.float64)),
            len(index),
            np.asarray(starts, np.int32),
            np.asarray(index, np.int32),
            np.asarray(value, np.float64),
        )
        self._cols += n

    def set_coeff(self, row: int, col: int, value: float) -> None:
        self._h.changeCoeff(int(row), int(col), float(value))

    def set_col_bounds(self, cols: IntArray, lower: FloatArray, upper: FloatArray) -> None:
        if len(cols) == 0:
            return
        self._h.changeColsBounds(
            len(cols), np.asarray(cols, np.int32), _finite(np.asarray(lower, np.float64)),
            _finite(np.asarray(upper, np.float64))
        )

    def solve(self, *, method: LpMethod = "auto", time_limit_s: float | None = None) -> LpSolution:
        h = self._h
        h.setOptionValue("simplex_strategy", _STRATEGY[method])
        # HiGHS compares its limit with the object's accumulated run time.
        limit = highspy.kHighsInf if time_limit_s is None else h.getRunTime() + max(0.0, float(time_limit_s))
        h.setOptionValue("time_limit", float(limit))
        h.run()
        native_status = h.getModelStatus()
        native = str(native_status).rsplit(".", 1)[-1]
        status = status_from_highs(native)
        info = h.getInfo()
        iterations = int(info.simplex_iteration_count)
        if status is Status.OPTIMAL:
            sol = h.getSolution()
            return LpSolution(status, native, float(info.objective_function_value),
                              np.asarray(sol.col_value, dtype=np.float64),
                              np.asarray(sol.row_dual, dtype=np.float64), iterations)
        return LpSolution(status, native, float("nan"), np.zeros(self._cols), np.zeros(self._rows), iterations)

    def basis(self) -> object | None:
        if self._h.getBasis().valid:
            return self._h.getBasis()
        return None

    def set_basis(self, basis: object | None) -> None:
        if basis is not None:
            self._h.setBasis(basis)

    def start_basis(self, basic_cols: IntArray, basic_rows: IntArray) -> bool:
        st = highspy.HighsBasisStatus
        lut = (st.kLower, st.kBasic, st.kUpper)
        cols = np.zeros(self._cols, dtype=np.int64)
        cols[np.asarray(basic_cols, dtype=np.int64)] = 1
        finite = np.concatenate(self._row_lower_finite) if self._row_lower_finite else np.zeros(0, bool)
        rows = np.where(finite, 0, 2)
        rows[np.asarray(basic_rows, dtype=np.int64)] = 1
        basis = highspy.HighsBasis()
        basis.col_status = [lut[v] for v in cols.tolist()]
        basis.row_status = [lut[v] for v in rows.tolist()]
        basis.valid = True
        return self._h.setBasis(basis) == highspy.HighsStatus.kOk

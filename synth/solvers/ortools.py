"""OR-Tools (MathOpt, GLOP) implementation of :class:`~synth.solvers._base.LpBackend`.

The model is kept in a MathOpt ``Model`` and solved through one ``IncrementalSolver`` so that
GLOP re-solves from its previous basis after columns are added or bounds change. Coefficients are
set one by one from Python, so this backend is meant for small and medium instances; HiGHS is the
fast path at scale.

Examples
--------
>>> import numpy as np
>>> lp = OrtoolsBackend()
>>> lp.add_rows(np.array([-np.inf]), np.array([4.0]))
>>> lp.add_cols(np.array([-1.0, -2.0]), np.zeros(2), np.full(2, np.inf),
...             np.array([0, 1]), np.array([0, 0]), np.array([1.0, 1.0]))
>>> sol = lp.solve(method="primal")
>>> sol.status.value, sol.objective, sol.row_duals.tolist()
('optimal', -8.0, [-2.0])
"""

from __future__ import annotations

import datetime
from typing import Any

import numpy as np
from ortools.math_opt.python import mathopt

from synth.result import Status
from synth.solvers._base import FloatArray, IntArray, LpMethod, LpSolution
from synth.solvers._status import status_from_mathopt

__all__ = ["OrtoolsBackend"]

_ALGORITHM = {
    "primal": mathopt.LPAlgorithm.PRIMAL_SIMPLEX,
    "dual": mathopt.LPAlgorithm.DUAL_SIMPLEX,
    "auto": None,
}


class OrtoolsBackend:
    """A growing minimisation LP solved incrementally by GLOP through MathOpt."""

    name = "ortools"

    def __init__(self) -> None:
        self._model = mathopt.Model(name="loopcoll")
        self._model.objective.is_maximize = False
        self._rows: list[Any] = []
        self._vars: list[Any] = []
        self._solver: Any = None

    @property
    def num_rows(self) -> int:
        return len(self._rows)

    @property
    def num_cols(self) -> int:
        return len(self._vars)

    def add_rows(self, lower: FloatArray, upper: FloatArray) -> None:
        for lo, hi in zip(np.asarray(lower, float).tolist(), np.asarray(upper, float).tolist()):
            self._rows.append(self._model.add_linear_constraint(lb=lo, ub=hi))

    def add_cols(
        self,
        cost: FloatArray,
        lower: FloatArray,
        upper: FloatArray,
        starts: IntArray,
        index: IntArray,
        value: FloatArray,
    ) -> None:
        starts_l = [int(v) for v in starts] + [len(index)]
        index_l = np.asarray(index).tolist()
        value_l = np.asarray(value, float).tolist()
        objective = self._model.objective
        for j, (c, lo, hi) in enumerate(zip(np.asarray(cost, float).tolist(), np.asarray(lower, float).tolist(),
                                            np.asarray(upper, float).tolist())):
            var = self._model.add_variable(lb=lo, ub=hi)
            if c != 0.0:
                objective.set_linear_coefficient(var, c)
            for k in range(starts_l[j], starts_l[j + 1]):
                self._rows[index_l[k]].set_coefficient(var, value_l[k])
            self._vars.append(var)

    def set_coeff(self, row: int, col: int, value: float) -> None:
        self._rows[int(row)].set_coefficient(self._vars[int(col)], float(value))

    def set_col_bounds(self, cols: IntArray, lower: FloatArray, upper: FloatArray) -> None:
        for j, lo, hi in zip(np.asarray(cols).tolist(), np.asarray(lower, float).tolist(),
                             np.asarray(upper, float).tolist()):
            var = self._vars[j]
            var.lower_bound = lo
            var.upper_bound = hi

    def solve(self, *, method: LpMethod = "auto", time_limit_s: float | None = None) -> LpSolution:
        if self._solver is None:
            self._solver = mathopt.IncrementalSolver(self._model, mathopt.SolverType.GLOP)
        params = mathopt.SolveParameters(lp_algorithm=_ALGORITHM[method])
        if time_limit_s is not None:
            params.time_limit = datetime.timedelta(seconds=max(0.0, float(time_limit_s)))
        try:
            res = self._solver.solve(params=params)
        except Exception as exc:  # noqa: BLE001 - every native failure becomes FAILED, never a crash
            return LpSolution(Status.FAILED, f"{type(exc).__name__}: {exc}", float("nan"),
                              np.zeros(self.num_cols), np.zeros(self.num_rows), 0)
        reason = res.termination.reason.name
        limit = res.termination.limit.name if res.termination.limit is not None else "UNDETERMINED"
        native = reason if limit == "UNDETERMINED" else f"{reason}/{limit}"
        status = status_from_mathopt(reason, limit)
        iterations = int(res.solve_stats.simplex_iterations)
        if status is Status.OPTIMAL:
            values = np.asarray(res.variable_values(self._vars), dtype=np.float64)
            duals = np.asarray(res.dual_values(self._rows), dtype=np.float64)
            return LpSolution(status, native, float(res.objective_value()), values, duals, iterations)
        return LpSolution(status, native, float("nan"), np.zeros(self.num_cols), np.zeros(self.num_rows), iterations)

    def basis(self) -> object | None:
        return None  # MathOpt bases are tied to one model's variables; the column pool is the warm state

    def set_basis(self, basis: object | None) -> None:
        return None

    def start_basis(self, basic_cols: IntArray, basic_rows: IntArray) -> bool:
        return False  # GLOP through MathOpt takes no basis hint; it starts from its own

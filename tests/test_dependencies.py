"""highspy and OR-Tools load and work in one process (highspy 1.15.x and ortools 9.15 clash)."""

from __future__ import annotations

from importlib.metadata import version

import numpy as np


def test_highspy_and_ortools_work_in_one_process() -> None:
    import highspy
    from ortools.graph.python import max_flow
    from ortools.linear_solver import pywraplp

    major, minor = (int(p) for p in version("highspy").split(".")[:2])
    assert (major, minor) >= (1, 16), "highspy >= 1.16 is required beside ortools"

    smf = max_flow.SimpleMaxFlow()
    smf.add_arcs_with_capacity(np.array([0, 0, 1]), np.array([1, 2, 2]), np.array([3, 2, 5]))
    assert smf.solve(0, 2) == smf.OPTIMAL and smf.optimal_flow() == 5

    h = highspy._Highs()
    h.setOptionValue("output_flag", False)
    inf = highspy.kHighsInf
    # max x + y  s.t.  x + 2y <= 4,  3x + y <= 6
    h.addVars(2, np.zeros(2), np.full(2, inf))
    h.changeColsCost(2, np.array([0, 1], dtype=np.int32), np.array([-1.0, -1.0]))
    h.addRows(2, np.full(2, -inf), np.array([4.0, 6.0]), 4, np.array([0, 2], dtype=np.int32),
              np.array([0, 1, 0, 1], dtype=np.int32), np.array([1.0, 2.0, 3.0, 1.0]))
    h.run()
    assert abs(h.getInfo().objective_function_value + 2.8) < 1e-9

    glop = pywraplp.Solver.CreateSolver("GLOP")
    x = glop.NumVar(0, glop.infinity(), "x")
    glop.Add(2 * x <= 3)
    glop.Maximize(x)
    assert glop.Solve() == pywraplp.Solver.OPTIMAL and abs(x.solution_value() - 1.5) < 1e-9

"""LP and max-flow solver backends (HiGHS, OR-Tools) behind one small interface.

:func:`lp_backend` makes an empty :class:`LpBackend` by name; an unknown name raises
:class:`~synth.errors.SolverError` naming it and the allowed set.

Examples
--------
>>> lp_backend("highs").name
'highs'
>>> lp_backend("cplex")
Traceback (most recent call last):
...
synth.errors.SolverError: unknown LP solver 'cplex'; allowed: highs, ortools
"""

from __future__ import annotations

from synth.errors import SolverError
from synth.solvers._base import LpBackend, LpMethod, LpSolution
from synth.solvers._status import status_from_highs, status_from_mathopt
from synth.solvers.highs import HighsBackend

__all__ = ["LP_SOLVERS", "LpBackend", "LpMethod", "LpSolution", "lp_backend", "status_from_highs",
           "status_from_mathopt"]

LP_SOLVERS: tuple[str, ...] = ("highs", "ortools")


def lp_backend(name: str) -> LpBackend:
    """A fresh, empty minimisation LP on backend ``name`` (``"highs"`` or ``"ortools"``)."""
    if name == "highs":
        return HighsBackend()
    if name == "ortools":
        # Imported lazily: only callers who ask for OR-Tools pay for loading it.
        from synth.solvers.ortools import OrtoolsBackend

        return OrtoolsBackend()
    raise SolverError(f"unknown LP solver {name!r}; allowed: {', '.join(LP_SOLVERS)}")

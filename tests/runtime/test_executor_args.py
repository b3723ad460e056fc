"""Executor arguments refused before any process-group call (issue 32 cleanup)."""

from __future__ import annotations

import pytest

from runtime.executor.errors import ExecutorError
from runtime.executor.executor import Executor


@pytest.mark.parametrize("bad", [0, 0.0, -1.0, float("nan")])
def test_collective_timeout_must_be_positive(bad: float) -> None:
    # on main 0 fell back to control_timeout_s through `or`, and nan bounded nothing
    with pytest.raises(ExecutorError, match="collective_timeout_s"):
        Executor(collective_timeout_s=bad)

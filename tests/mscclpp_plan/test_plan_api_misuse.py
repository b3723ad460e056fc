"""Every public function of ``mscclpp_plan`` called with wrong-typed arguments raises only a
``LoopcollError`` naming the argument (or Python's own ``TypeError`` for a bad call shape)."""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Callable
from typing import Any

import pytest

import mscclpp_plan
from mscclpp_plan import Plan, PlanGpu
from synth import load_topology, synthesize
from synth.errors import LoopcollError

WRONG: tuple[Any, ...] = (None, "x", "ring:4", 1.5, -1, 10**30, True, object(), [], {}, b"\x00")
FUNCS = sorted((n, getattr(mscclpp_plan, n)) for n in mscclpp_plan.__all__ if inspect.isfunction(getattr(mscclpp_plan, n)))


def _calls(fn: Callable[..., Any]) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
    sig = inspect.signature(fn)
    required = [p for p in sig.parameters.values() if p.default is p.empty and p.kind is p.POSITIONAL_OR_KEYWORD]
    keyword = [p for p in sig.parameters.values() if p.kind is p.KEYWORD_ONLY]
    topo = load_topology("ring:4")
    good = {"plan": Plan("p", "allreduce", "Simple", False, (PlanGpu(0, 1, 1, 0, ()),) * 4),
            "topology": topo, "topo": topo, "schedule": synthesize("allgather", topo).schedule,
            "sched": synthesize("allgather", topo).schedule}  # fmt: skip
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = [((w,) * len(required), {}) for w in WRONG]
    for i in range(len(required)):
        for w in WRONG:
            calls.append((tuple(w if j == i else good.get(q.name, "x") for j, q in enumerate(required)), {}))
    for p in keyword:
        for w in WRONG[:8]:
            calls.append((tuple(good.get(q.name, "x") for q in required), {p.name: w}))
    return calls


@pytest.mark.parametrize(("name", "fn"), FUNCS, ids=[n for n, _ in FUNCS])
def test_wrong_types_raise_only_loopcoll_errors(
    name: str, fn: Callable[..., Any], tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _calls(fn)
    monkeypatch.chdir(tmp_path)  # string arguments double as file names for write_file / export
    for args, kwargs in calls:
        try:
            fn(*args, **kwargs)
        except LoopcollError as exc:
            assert str(exc)
        except Exception as exc:  # noqa: BLE001 - the point of the test
            shown = ", ".join(itertools.chain((repr(a)[:30] for a in args), (f"{k}={v!r}" for k, v in kwargs.items())))
            pytest.fail(f"{name}({shown}) raised {type(exc).__name__}: {str(exc)[:200]}")


def test_messages_name_the_argument() -> None:
    with pytest.raises(LoopcollError, match="plan must be a Plan, got str"):
        mscclpp_plan.check("plan.json")  # type: ignore[arg-type]
    with pytest.raises(LoopcollError, match="text must be a str"):
        mscclpp_plan.parse(None)  # type: ignore[arg-type]
    with pytest.raises(LoopcollError, match="malformed field"):
        mscclpp_plan.check(Plan("p", "allreduce", "Simple", False, ("not a gpu",)))  # type: ignore[arg-type]

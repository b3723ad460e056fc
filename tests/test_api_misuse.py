"""Every public function of ``synth``, ``msccl_xml`` and ``loopcoll`` (and every public method of
their main objects) called with wrong-typed arguments: only a ``LoopcollError`` may escape, or a
``TypeError`` from Python's own signature binding (missing or extra arguments).

Runtime in CI: about 5 s.
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Callable
from typing import Any

import pytest

import loopcoll
import msccl_xml
import synth
from synth.errors import LoopcollError

WRONG: tuple[Any, ...] = (None, "x", "ring:4", 1.5, -1, 10**30, True, object(), [], {}, b"\x00", float("nan"))


def _callables(module: Any) -> list[tuple[str, Callable[..., Any]]]:
    out = []
    for name in module.__all__:
        obj = getattr(module, name)
        if inspect.isfunction(obj) or inspect.isbuiltin(obj):
            out.append((f"{module.__name__}.{name}", obj))
    return out


def _instances() -> list[tuple[str, Any]]:
    topo = synth.load_topology("ring:4")
    sched = synth.synthesize("allgather", topo).schedule
    program = msccl_xml.lower(sched)
    return [("Topology", topo), ("Schedule", sched), ("Program", program)]


def _methods() -> list[tuple[str, Callable[..., Any]]]:
    out = []
    for cname, obj in _instances():
        for name, member in inspect.getmembers(obj):
            if name.startswith("_") or not callable(member) or inspect.isclass(member):
                continue
            out.append((f"{cname}.{name}", member))
    return out


TARGETS = sorted(set(_callables(synth) + _callables(msccl_xml) + _callables(loopcoll)) | set(_methods()),
                 key=lambda t: t[0])
SKIP = {"loopcoll.main"}  # takes argv: covered by the CLI tests (it exits 2 on bad input)


def _arg_lists(fn: Callable[..., Any]) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return [((w,), {}) for w in WRONG]
    params = [p for p in sig.parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p for p in params if p.default is p.empty]
    keyword = [p for p in sig.parameters.values() if p.kind is p.KEYWORD_ONLY]
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
    n = max(1, len(required))
    for w in WRONG:
        calls.append(((w,) * n, {}))
    # One wrong argument at a time, the others valid-looking defaults from a small menu.
    menu = {"collective": "allgather", "topo": synth.load_topology("ring:4"), "topology": synth.load_topology("ring:4")}
    for i in range(len(required)):
        for w in WRONG:
            args = tuple(w if j == i else menu.get(q.name, "allgather") for j, q in enumerate(required))
            calls.append((args, {}))
    for p in keyword:
        for w in WRONG[:8]:
            args = tuple(menu.get(q.name, "allgather") for q in required)
            calls.append((args, {p.name: w}))
    return calls


@pytest.mark.parametrize("name,fn", [t for t in TARGETS if t[0] not in SKIP], ids=[t[0] for t in TARGETS
                                                                                  if t[0] not in SKIP])
def test_wrong_types_raise_only_loopcoll_errors(name: str, fn: Callable[..., Any]) -> None:
    for args, kwargs in _arg_lists(fn):
        try:
            inspect.signature(fn).bind(*args, **kwargs)
        except TypeError:
            continue  # Python's own signature binding: allowed
        except ValueError:
            pass
        try:
            fn(*args, **kwargs)
        except LoopcollError as exc:
            assert str(exc), f"{name}: empty message"
        except Exception as exc:  # noqa: BLE001 - the point of the test
            shown = ", ".join(itertools.chain((repr(a)[:30] for a in args), (f"{k}={v!r}" for k, v in kwargs.items())))
            pytest.fail(f"{name}({shown}) raised {type(exc).__name__}: {str(exc)[:200]}")


def test_issue_examples_name_the_argument() -> None:
    with pytest.raises(LoopcollError, match="topo"):
        synth.optimal_bound("allgather", "ring:4")  # type: ignore[arg-type]
    with pytest.raises(LoopcollError, match="text"):
        msccl_xml.parse(None)  # type: ignore[arg-type]
    with pytest.raises(LoopcollError, match="factor"):
        synth.load_topology("ring:4").scaled("gpu0", "gpu1", "0.5")  # type: ignore[arg-type]
    with pytest.raises(LoopcollError, match="failures"):
        synth.load_topology("ring:4", failures="fail2")  # type: ignore[arg-type]

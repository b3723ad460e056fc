"""Shared helpers of the mscclpp_plan tests: vendored vectors, plan surgery."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from mscclpp_plan import Op, Plan

VECTORS = Path(__file__).resolve().parents[1] / "vectors" / "mscclpp"


def vector_files() -> list[Path]:
    """The vendored MSCCL++ example plans (a missing directory is an error, not a skip)."""
    assert VECTORS.is_dir(), f"vendored MSCCL++ vectors missing at {VECTORS}"
    return sorted(VECTORS.glob("*.json"))


def with_ops(plan: Plan, rank: int, tb: int, ops: list[Op]) -> Plan:
    """``plan`` with threadblock ``tb`` of ``rank`` running ``ops``."""
    g = plan.gpus[rank]
    tbs = list(g.threadblocks)
    tbs[tb] = replace(tbs[tb], ops=tuple(ops))
    gpus = list(plan.gpus)
    gpus[rank] = replace(g, threadblocks=tuple(tbs))
    return replace(plan, gpus=tuple(gpus))


def drop_op(plan: Plan, rank: int, tb: int, k: int) -> Plan:
    ops = list(plan.gpus[rank].threadblocks[tb].ops)
    del ops[k]
    return with_ops(plan, rank, tb, ops)


def first_op(plan: Plan, name: str) -> tuple[int, int, int]:
    """(rank, tb, index) of the first op called ``name``."""
    for r, g in enumerate(plan.gpus):
        for t, tb in enumerate(g.threadblocks):
            for k, op in enumerate(tb.ops):
                if op.name == name:
                    return r, t, k
    raise AssertionError(f"no {name} op")

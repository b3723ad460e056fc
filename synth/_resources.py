"""How much memory a solve may use, and the check that refuses one estimated to need more.

The budget is the least of: ``LOOPCOLL_MAX_MEMORY_GB`` (if set), the kernel's ``MemAvailable``,
and what the address-space limit (``RLIMIT_AS``) leaves above the process's current size; 8 GiB
when none of them is known. A solver estimates its peak before allocating and calls
:func:`require_memory`, which raises :class:`~synth.errors.SolverError` naming the estimate, the
budget and where it came from, instead of being OOM-killed.

Examples
--------
>>> memory_budget_bytes() > 0
True
>>> require_memory(10**18, "a demo solve", "use fewer ranks")
Traceback (most recent call last):
...
synth.errors.SolverError: a demo solve needs about 1e+09 GB, above the ...
"""

from __future__ import annotations

import os
import resource

from synth.errors import SolverError

__all__ = ["MEMORY_ENV", "memory_budget", "memory_budget_bytes", "require_memory"]

MEMORY_ENV = "LOOPCOLL_MAX_MEMORY_GB"
_DEFAULT = 8 << 30


def _meminfo_kb(path: str, key: str) -> int | None:
    try:
        with open(path, encoding="ascii") as fh:
            for line in fh:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def memory_budget() -> tuple[int, str]:
    """(bytes this process may still allocate, which limit set it)."""
    limits: list[tuple[int, str]] = []
    env = os.environ.get(MEMORY_ENV)
    if env:
        try:
            limits.append((int(float(env) * 2**30), f"{MEMORY_ENV}={env}"))
        except ValueError:
            raise SolverError(f"{MEMORY_ENV} must be a number of GB, got {env[:40]!r}") from None
    avail = _meminfo_kb("/proc/meminfo", "MemAvailable")
    if avail is not None:
        limits.append((avail * 1024, "MemAvailable"))
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        used = (_meminfo_kb("/proc/self/status", "VmSize") or 0) * 1024
        limits.append((max(0, soft - used), "RLIMIT_AS"))
    return min(limits) if limits else (_DEFAULT, "default")


def memory_budget_bytes() -> int:
    """Bytes this process may still allocate (see the module docstring)."""
    return memory_budget()[0]


def require_memory(estimate_bytes: float, what: str, hint: str) -> None:
    """Raise :class:`SolverError` when ``estimate_bytes`` exceeds the budget."""
    budget, source = memory_budget()
    if estimate_bytes > budget:
        raise SolverError(
            f"{what} needs about {estimate_bytes / 1e9:.3g} GB, above the {budget / 1e9:.3g} GB this process may "
            f"use ({source}; set {MEMORY_ENV} to change): {hint}"
        )

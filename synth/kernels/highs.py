"""A HiGHS instance that prints nothing.

``highspy.Highs()`` prints a copyright banner on stdout when it is created, before any option
can be set; that would corrupt ``--json`` output. The underlying ``_Highs`` class has the same
API without the banner (and without the Python callbacks loopcoll does not use).
"""

from __future__ import annotations

from typing import Any

import highspy

__all__ = ["quiet_highs"]


def quiet_highs(**options: Any) -> Any:
    """A fresh, silent ``Highs`` object with the given options set.

    >>> h = quiet_highs(time_limit=5.0)
    >>> h.getOptionValue("output_flag")[-1]  # highspy >= 1.16 returns (status, value)
    False
    """
    h = highspy._Highs()  # type: ignore[attr-defined]  # noqa: SLF001 - see the module docstring
    h.setOptionValue("output_flag", False)
    for key, value in sorted(options.items()):
        h.setOptionValue(key, value)
    return h

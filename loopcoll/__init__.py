"""loopcoll: closed-loop collective-communication synthesis.

The face of the project: the ``loopcoll`` CLI (:mod:`loopcoll.cli`) and the public API
re-exported from :mod:`synth` (and, as they land, :mod:`msccl_xml` and :mod:`runtime`).

Examples
--------
>>> import loopcoll
>>> round(loopcoll.optimal_bound("allgather", loopcoll.load_topology("dgx-a100:2")).algbw_GBps, 3)
346.667
"""

from __future__ import annotations

from synth import *  # noqa: F403
from synth import __all__ as _synth_all

__all__ = list(_synth_all)
__version__ = "0.1.0"

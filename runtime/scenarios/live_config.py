"""What a live run runs and what it measured: :class:`LiveConfig` and :class:`LiveResult` of
:func:`runtime.scenarios.live.run_live`, and the live loop's controller settings.

>>> LiveConfig(faults=((10, None),)).fault_seqs()
[(21, None)]
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from runtime.executor.throttle import Emulation, Fault

__all__ = ["COLLECTIVES", "LIVE_CONTROLLER", "LiveConfig", "LiveResult"]

COLLECTIVES = ("allgather", "alltoall")
#: Controller settings of the live loop (docs/live.md §3): CPU timing jitter on a shared machine reaches tens of
#: percent, so a measurement counts as slow only below half its expected speed (fail2 is 1/8); at most 8 chunks
#: per source keep schedules made for noisy measured capacities small enough to lower to MSCCL XML.
LIVE_CONTROLLER: dict[str, Any] = {"slow_tolerance": 0.5, "pace_tolerance": 0.5, "snap": 0.15, "chunks": 8,
                                   "recovery_check_s": 2.0}


@dataclass(frozen=True)
class LiveConfig:
    """What :func:`run_live` runs.

    ``faults``: ``(start_step, end_step or None)`` intervals of ``failure`` (a named failure of
    ``topology``); ``allgather_bytes`` is the AllGather output size, ``alltoall_bytes`` the AllToAll buffer
    (float32 elements); ``window`` steps per live-view line; ``check_every``: compare both outputs with the
    native torch.distributed collectives every this many steps (0: never); ``sync_every``: collectives
    between version agreements; ``controller``: :class:`~runtime.ControllerConfig` overrides.
    """

    topology: str = "hpn:1x2x2"
    gbps_scale: float = 1000.0
    steps: int = 3000
    allgather_bytes: int = 1 << 20
    alltoall_bytes: int = 1 << 20
    failure: str = "fail2"
    faults: tuple[tuple[int, int | None], ...] = ((1000, 2000),)
    window: int = 50
    check_every: int = 0
    sync_every: int = 10
    poll_interval_s: float = 0.05
    timeout_s: float = 600.0
    controller: dict[str, Any] = field(default_factory=lambda: dict(LIVE_CONTROLLER))

    def fault_seqs(self) -> list[tuple[int, int | None]]:
        """The faults as executor collective numbers (step ``k`` runs collectives ``2k+1`` and ``2k+2``)."""
        return [(2 * a + 1, None if b is None else 2 * b + 1) for a, b in self.faults]

    def emulation(self) -> Any:
        """The :class:`~runtime.executor.throttle.Emulation` every rank runs under."""
        return Emulation(self.topology, self.gbps_scale,
                         tuple(Fault(failure=self.failure, start_seq=a, end_seq=b) for a, b in self.fault_seqs()))


@dataclass(frozen=True)
class LiveResult:
    """What a live run measured: ``status`` ``ok`` or ``failed`` (``message`` says why), and the figures.

    ``steps``: rank 0's per-step rows ``(t_wall, allgather_s, alltoall_s, allgather_version,
    alltoall_version, fault)``; ``ranks``: each rank's swaps ``(switch_seq, {coll: [old, new]}, t_wall)``,
    versions per seq change, correctness failures; ``events``: the controller's decisions; ``timeline``:
    per collective figures (:func:`format_timeline`).
    """

    status: str
    message: str
    config: dict[str, Any]
    steps: list[tuple[float, float, float, int | None, int | None, bool]]
    ranks: list[dict[str, Any]]
    events: list[dict[str, Any]]
    fault_wall: list[tuple[float | None, float | None]]
    timeline: dict[str, dict[str, Any]]
    store_dir: str
    wall_s: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

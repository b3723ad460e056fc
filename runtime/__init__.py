"""Runtime half of loopcoll: telemetry, job profiles, the controller, its daemon and the executor.

The code sits in wings, each saying in its ``__init__`` what it owns and which wings it may import:
:mod:`runtime.formats` (telemetry, profiles, store), :mod:`runtime.loop` (estimator, detector, manager,
controller), :mod:`runtime.contention`, :mod:`runtime.service` (wire, daemon, client),
:mod:`runtime.executor`, :mod:`runtime.observe` and :mod:`runtime.scenarios` (timeline, live loop); this
module re-exports the public API. torch is an optional extra: nothing here imports it at module level.

Examples
--------
>>> from runtime import parse_sample
>>> parse_sample({"format": "loopcoll.telemetry/1", "t_s": 0.0, "comm": "c", "kind": "coll", "src": 0,
...               "bytes": 1, "busy_s": 1.0, "origin": "probe"}).kind
'coll'
"""

from __future__ import annotations

from runtime.errors import ProfileError, RuntimeStateError, StoreError, TelemetryError, WireError
from runtime.formats.profile import CollectiveSpec, Communicator, JobProfile, load_profile, profile_from_dict
from runtime.formats.store import Band, VersionEntry, VersionStore
from runtime.formats.telemetry import (
    IngestReport,
    Sample,
    SampleStore,
    parse_sample,
    read_jsonl,
    validate_samples,
    write_jsonl,
)
from runtime.loop.controller import Controller, ControllerConfig
from runtime.loop.detector import Verdict, detect, verdict_for_schedule
from runtime.loop.estimator import LinkEstimator, ScheduleRouting
from runtime.service.client import Client
from runtime.service.daemon import DaemonConfig, DaemonHandle, serve

__all__ = [
    "Band",
    "Client",
    "CollectiveSpec",
    "Communicator",
    "Controller",
    "ControllerConfig",
    "DaemonConfig",
    "DaemonHandle",
    "IngestReport",
    "JobProfile",
    "LinkEstimator",
    "ProfileError",
    "RuntimeStateError",
    "Sample",
    "SampleStore",
    "ScheduleRouting",
    "StoreError",
    "TelemetryError",
    "Verdict",
    "VersionEntry",
    "VersionStore",
    "WireError",
    "detect",
    "load_profile",
    "parse_sample",
    "profile_from_dict",
    "read_jsonl",
    "serve",
    "validate_samples",
    "verdict_for_schedule",
    "write_jsonl",
]

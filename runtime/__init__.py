"""Runtime half of loopcoll: telemetry, job profiles, and (as they land) the controller and executor.

torch is an optional extra: nothing here imports it at module level.

Examples
--------
>>> from runtime import parse_sample
>>> parse_sample({"format": "loopcoll.telemetry/1", "t_s": 0.0, "comm": "c", "kind": "coll", "src": 0,
...               "bytes": 1, "busy_s": 1.0, "origin": "probe"}).kind
'coll'
"""

from __future__ import annotations

from runtime.errors import ProfileError, RuntimeStateError, StoreError, TelemetryError
from runtime.profile import CollectiveSpec, Communicator, JobProfile, load_profile, profile_from_dict
from runtime.telemetry import IngestReport, Sample, SampleStore, parse_sample, read_jsonl, validate_samples, write_jsonl

__all__ = [
    "CollectiveSpec",
    "Communicator",
    "IngestReport",
    "JobProfile",
    "ProfileError",
    "RuntimeStateError",
    "Sample",
    "SampleStore",
    "StoreError",
    "TelemetryError",
    "load_profile",
    "parse_sample",
    "profile_from_dict",
    "read_jsonl",
    "validate_samples",
    "write_jsonl",
]

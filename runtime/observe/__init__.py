"""Observability: NCCL Inspector logs and loopcoll telemetry in DuckDB, analyses, reports and plots.

DuckDB is an optional extra (``pip install 'loopcoll[observe]'``), imported only when a database is opened.
``docs/observe.md`` documents the schema, the views and the statistics. Of the runtime it may import
:mod:`runtime.formats` (samples and profiles for the bridge to the controller) and :mod:`runtime.errors`.

>>> con = connect()
>>> ingest(con, []).accepted
0
"""

from __future__ import annotations

from runtime.observe.analyze import (
    PhaseRow,
    SegmentRow,
    SlowPeriod,
    StragglerRow,
    cusum_segments,
    nodes,
    phases,
    query,
    segments,
    select_window,
    slow_periods,
    stragglers,
    summary,
    timeline,
)
from runtime.observe.db import SCHEMA_VERSION, connect
from runtime.observe.errors import ObserveError
from runtime.observe.ingest import IngestSummary, discover, ingest
from runtime.observe.synthetic import SyntheticSpec, SyntheticTruth, write_logs

__all__ = [
    "SCHEMA_VERSION",
    "IngestSummary",
    "ObserveError",
    "PhaseRow",
    "SegmentRow",
    "SlowPeriod",
    "StragglerRow",
    "SyntheticSpec",
    "SyntheticTruth",
    "connect",
    "cusum_segments",
    "discover",
    "ingest",
    "nodes",
    "phases",
    "query",
    "segments",
    "select_window",
    "slow_periods",
    "stragglers",
    "summary",
    "timeline",
    "write_logs",
]

"""Public file helpers other layers share: atomic writes (nothing is ever left half-written).

Examples
--------
>>> import tempfile, pathlib
>>> p = pathlib.Path(tempfile.mkdtemp()) / "a.txt"
>>> write_text_atomic(p, "ok"); p.read_text()
'ok'
"""

from __future__ import annotations

from synth._atomic import write_bytes_atomic, write_text_atomic

__all__ = ["write_bytes_atomic", "write_text_atomic"]

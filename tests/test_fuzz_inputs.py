"""Hypothesis fuzz over topology JSON, spec strings, failure strings and MSCCL XML attributes,
in a subprocess under an address-space limit (``tests/fuzz_worker.py``; cap 2 GiB, 10 s per input).

``LOOPCOLL_FUZZ_EXAMPLES`` sets examples per property (default 25: about 10 s in CI; 300 is a
thorough local run).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_input_loads_or_gives_one_loopcoll_error_within_the_caps() -> None:
    examples = os.environ.get("LOOPCOLL_FUZZ_EXAMPLES", "25")
    proc = subprocess.run([sys.executable, str(ROOT / "tests" / "fuzz_worker.py"), examples], cwd=ROOT,
                          capture_output=True, text=True, timeout=900, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    assert proc.stdout.split() == [w for p in ("topology_json", "raw_json", "deep_json", "spec_string",
                                               "failure_strings", "xml_attributes", "explicit_cases")
                                   for w in ("ok", p)]

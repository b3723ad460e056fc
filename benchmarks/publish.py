"""Publishing at the speed of synthesis: a version's deploy + store publish time, split by phase.

Run ``python benchmarks/publish.py [--quick] [--specs SPEC ...] [--collectives C ...]``; prints a table and
writes ``benchmarks/results/publish.json`` and ``.md``. Per (hpn fabric, collective, healthy or fail2):

* ``synth_s``: cold synthesis (:func:`synth.synthesize`);
* ``fit_s``: :func:`msccl_xml.deploy.fit` to msccl-executor-nccl as the controller's manager calls it (with
  re-synthesis when the program is over a limit: ``capped`` is the chunk cap it chose, e.g. the 128-GPU
  AllGather after fail2, whose 293 chunks exceed the int16 chunk offsets), re-synthesis included;
* ``lower_s``, ``write_s``, ``parse_s``, ``check_s``, ``algbw_s``: the phases of
  :func:`msccl_xml.render_xml` on the fitted schedule (lower, XML text, parse it back, symbolic check of the
  parsed program, algbw against the schedule's), and ``export_s`` their sum;
* ``publish_s``: :meth:`runtime.formats.store.VersionStore.publish` of the fitted version (files, digests,
  manifest).

AllToAll above ``--alltoall-max-gpus`` (default 256) is skipped; its export grows with N^2 chunks per rank.
Times are medians over ``--repeats`` (default 1) and CPU-bound: run it alone.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks._report import timed, write_results  # noqa: E402
from msccl_xml import check, lower, parse, program_algbw_GBps, write  # noqa: E402
from msccl_xml.deploy import fit  # noqa: E402
from msccl_xml.targets import MscclTarget  # noqa: E402
from runtime.formats.store import VersionStore  # noqa: E402
from synth import load_topology, synthesize  # noqa: E402
from synth.result import SynthResult  # noqa: E402
from synth.schedule import Schedule  # noqa: E402
from synth.topologies.model import Topology  # noqa: E402

FULL = ["hpn:1x2x8", "hpn:1x16x8", "hpn:2x16x8", "hpn:8x16x8"]
QUICK = ["hpn:1x2x8", "hpn:1x4x8"]
COLLECTIVES = ["allgather", "reducescatter", "alltoall"]
SCENARIOS = ["healthy", "fail2"]
COLUMNS = ["topology", "collective", "scenario", "N", "k", "capped", "xml_MiB", "synth_s", "fit_s", "lower_s",
           "write_s", "parse_s", "check_s", "algbw_s", "export_s", "publish_s", "note"]


def _timed(fn: Any, repeats: int) -> tuple[float, Any]:
    median_s, _, out = timed(fn, repeats)
    return median_s, out


def phases(sched: Schedule, topo: Topology, repeats: int) -> dict[str, float]:
    """The phases of :func:`msccl_xml.render_xml` on ``sched`` (seconds) and the XML size (MiB)."""
    lower_s, program = _timed(lambda: lower(sched, verify=False), repeats)
    write_s, text = _timed(lambda: write(program), repeats)
    parse_s, parsed = _timed(lambda: parse(text), repeats)
    check_s, verdict = _timed(lambda: check(parsed), repeats)
    assert verdict.valid, verdict.message
    algbw_s, xml_GBps = _timed(lambda: program_algbw_GBps(parsed, topo), repeats)
    assert math.isclose(xml_GBps, sched.algbw_GBps(topo), rel_tol=1e-12)
    return {"lower_s": lower_s, "write_s": write_s, "parse_s": parse_s, "check_s": check_s, "algbw_s": algbw_s,
            "export_s": lower_s + write_s + parse_s + check_s + algbw_s, "xml_MiB": len(text.encode()) / 2**20}


def run_case(spec: str, collective: str, scenario: str, repeats: int) -> dict[str, Any]:
    """One row: synthesis, fit, export phases and store publish of one case."""
    topo = load_topology(spec, [] if scenario == "healthy" else [scenario])
    synth_s, result = _timed(lambda: synthesize(collective, topo), 1)
    row: dict[str, Any] = {"topology": spec, "collective": collective, "scenario": scenario, "N": topo.nranks,
                           "synth_s": round(synth_s, 4)}
    if not isinstance(result, SynthResult) or result.schedule is None:
        return {**row, "note": f"no schedule: {result.status.value}"}

    def again(cap: int) -> SynthResult:
        capped: SynthResult = synthesize(collective, topo, chunks=cap)
        return capped

    fit_s, version = _timed(lambda: fit(result, topo, MscclTarget(), resynthesize=again, strict=False), 1)
    sched = version.schedule
    row.update(k=sched.nchunks, capped=version.capped_chunks, fit_s=round(fit_s, 4))
    if version.bands[0].program is None:
        return {**row, "note": f"not deployable: {version.bands[0].error}"[:200]}
    row.update({key: round(v, 4) for key, v in phases(sched, topo, repeats).items()})
    with tempfile.TemporaryDirectory() as tmp:
        store = VersionStore(tmp)
        row["publish_s"] = round(_timed(lambda: store.publish("world", collective, version, reason="bench",
                                                               topology=topo), 1)[0], 4)
    row["note"] = version.note or ""
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK)}")
    ap.add_argument("--specs", nargs="+", help=f"hpn fabrics (default {' '.join(FULL)})")
    ap.add_argument("--collectives", nargs="+", default=COLLECTIVES, choices=COLLECTIVES)
    ap.add_argument("--scenarios", nargs="+", default=SCENARIOS)
    ap.add_argument("--alltoall-max-gpus", type=int, default=256, help="skip AllToAll above this many GPUs")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--out", default="publish", help="results name (benchmarks/results/NAME.json)")
    args = ap.parse_args(argv)
    specs = args.specs or (QUICK if args.quick else FULL)
    rows = []
    for spec in specs:
        for coll in args.collectives:
            for scen in args.scenarios:
                if coll == "alltoall" and load_topology(spec).nranks > args.alltoall_max_gpus:
                    continue
                rows.append(run_case(spec, coll, scen, args.repeats))
                print(" | ".join(str(rows[-1].get(c, "")) for c in COLUMNS), flush=True)
    command = "python benchmarks/publish.py" + (" " + " ".join(argv if argv is not None else sys.argv[1:])).rstrip()
    notes = ("Seconds, wall clock, one process; export_s = lower + write + parse + check + algbw of render_xml; "
             "fit_s includes any re-synthesis with capped chunks; publish_s writes the fitted version to a store.")
    print(write_results(args.out, COLUMNS, rows, command, notes))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

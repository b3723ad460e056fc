"""``loopcoll check FILE.xml|PLAN.json|SCHED.json|DIR [--topology SPEC] [--runtime R] [--json]``.

Checks MSCCL XML files, MSCCL++ JSON execution plans and loopcoll schedule JSONs (told apart by
content; a directory: every ``*.xml`` and ``*.json`` in it, sorted) and prints one line, or with
``--json`` one JSON object, per file. A schedule JSON (``synth --schedule-out``) is proved on the
fabric given by ``--topology``, which it needs. Exit status 0 when every file is valid, 1 when any is invalid; in a directory an
unreadable file is reported as invalid (``unreadable: …``) and the rest are still checked; a single
unreadable FILE raises :class:`~synth.errors.XmlError` or :class:`~mscclpp_plan.PlanError` (exit 2).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from loopcoll._schedule_file import file_head, schedule_format
from msccl_xml import RUNTIMES, check_file, program_algbw_GBps, read
from synth.alltoallv_schedule import ALLTOALLV_FORMAT, AllToAllvSchedule
from synth.errors import LoopcollError, ScheduleError, XmlError
from synth.schedule import Schedule
from synth.topologies import load_topology

__all__ = ["register", "run"]


def register(sub: Any) -> None:
    """Add the ``check`` subcommand to the argparse subparsers ``sub``."""
    p = sub.add_parser(
        "check",
        help="check MSCCL XML files or MSCCL++ plans against a runtime's rules and their collective",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
    )
    p.add_argument("path", metavar="FILE.xml|PLAN.json|SCHED.json|DIR",
                   help="an MSCCL XML file, an MSCCL++ plan, a loopcoll schedule JSON, or a directory of them")
    p.add_argument(
        "--topology",
        metavar="SPEC",
        help="named topology or JSON file; adds the program's bandwidth-term algbw (GB/s); "
        "needed to check a schedule JSON",
    )
    p.add_argument(
        "--fail",
        metavar="F",
        action="append",
        default=[],
        help="apply a failure scenario to --topology first; repeatable",
    )
    p.add_argument(
        "--runtime",
        default="msccl-executor-nccl",
        choices=sorted(RUNTIMES),
        help="runtime whose limits apply (default: msccl-executor-nccl)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object per file")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Check the file or directory in ``args.path``; return the exit status."""
    path = Path(args.path)
    if path.is_dir():
        files = sorted(p for p in (*path.glob("*.xml"), *path.glob("*.json")) if p.is_file())
        if not files:
            raise XmlError(f"{path}: no *.xml or *.json files in this directory")
    elif path.exists():
        files = [path]
    else:
        raise XmlError(f"{path}: no such file or directory")
    topology = None
    if args.fail and args.topology is None:
        raise XmlError("--fail needs --topology")
    if args.topology is not None:
        topology = load_topology(args.topology, args.fail)
    all_valid = True
    for file in files:
        try:
            report = _report(file, args.runtime, topology)
        except LoopcollError as exc:
            if not path.is_dir():
                raise
            # A directory: report the unreadable file and go on with the rest.
            report = {"valid": False, "collective": None, "nranks": None, "errors": [f"unreadable: {exc}"]}
        if path.is_dir():
            report["file"] = str(file)
        all_valid &= bool(report["valid"])
        if args.json:
            print(json.dumps(report, sort_keys=True))
        else:
            _print_text(file, report)
    return 0 if all_valid else 1


def _is_plan(file: Path) -> bool:
    """MSCCL++ plans are JSON objects; MSCCL programs are XML."""
    return file_head(file).startswith(b"{")


def _plan_report(file: Path, topology: Any) -> dict[str, Any]:
    from mscclpp_plan import check, plan_algbw_GBps
    from mscclpp_plan import read as read_plan

    plan = read_plan(file)
    result = check(plan)
    report: dict[str, Any] = {
        "valid": result.valid,
        "collective": result.collective,
        "nranks": result.nranks,
        "errors": list(result.errors),
        "format": "mscclpp",
    }
    if topology is not None:
        report["algbw_GBps"] = None
        if result.valid:
            try:
                report["algbw_GBps"] = plan_algbw_GBps(plan, topology)
            except LoopcollError as exc:
                report["valid"] = False
                report["errors"].append(f"topology: {exc}")
    return report


def _schedule_report(file: Path, fmt: str, topology: Any) -> dict[str, Any]:
    """Prove a loopcoll schedule JSON on ``topology`` (its postcondition, every link live) and rate it."""
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ScheduleError(f"{file}: cannot read schedule file: {exc}") from exc
    sched: Schedule | AllToAllvSchedule
    if fmt == ALLTOALLV_FORMAT:
        sched = AllToAllvSchedule.from_json(text, source=str(file))
        collective = "alltoallv"
    else:
        sched = Schedule.from_json(text, source=str(file))
        collective = sched.collective
    if topology is None:
        raise ScheduleError(
            f"{file}: a loopcoll schedule JSON ({fmt}: {collective}, {sched.nranks} ranks), not an MSCCL XML "
            "file or MSCCL++ plan; pass --topology SPEC to prove it on that fabric and rate it, "
            "or check the XML that `loopcoll synth ... -o F.xml` writes"
        )
    report: dict[str, Any] = {"valid": True, "collective": collective, "nranks": sched.nranks, "errors": [],
                              "format": fmt, "algbw_GBps": None}
    try:
        sched.validate(topology)
    except ScheduleError as exc:
        report["valid"] = False
        report["errors"].append(f"topology: {exc}")
        return report
    if isinstance(sched, AllToAllvSchedule):
        report["completion_time_us"] = sched.completion_time_s(topology) * 1e6
    else:
        report["algbw_GBps"] = sched.algbw_GBps(topology)
    return report


def _report(file: Path, runtime: str, topology: Any) -> dict[str, Any]:
    fmt = schedule_format(file)
    if fmt is not None:
        return _schedule_report(file, fmt, topology)
    if _is_plan(file):
        return _plan_report(file, topology)
    result = check_file(file, runtime=runtime)
    report: dict[str, Any] = {
        "valid": result.valid,
        "collective": result.collective,
        "nranks": result.nranks,
        "errors": list(result.errors),
    }
    if topology is not None:
        report["algbw_GBps"] = None
        if result.valid:
            try:
                report["algbw_GBps"] = program_algbw_GBps(read(file), topology)
            except LoopcollError as exc:
                report["valid"] = False
                report["errors"].append(f"topology: {exc}")
    return report


def _print_text(file: Path, report: dict[str, Any]) -> None:
    what = "unreadable" if report["nranks"] is None else f"{report['collective']}, {report['nranks']} ranks"
    if report.get("algbw_GBps") is not None:
        what += f", algbw {report['algbw_GBps']:.2f} GB/s"
    if report.get("completion_time_us") is not None:
        what += f", bandwidth-term time {report['completion_time_us']:.2f} us"
    if report["valid"]:
        print(f"{file}: valid ({what})")
        return
    print(f"{file}: INVALID ({what}): {len(report['errors'])} error(s)")
    for err in report["errors"]:
        print(f"  {err}")

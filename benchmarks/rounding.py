"""Rounding loss (issue 31): schedule vs the LP optimum it is held to, per fabric, collective and routing.

Fabrics: those of the issue's table, built from their descriptions (:mod:`synth.routed.fabrics` and
the named specs, degraded with :meth:`~synth.topologies.Topology.scaled`), and random irregular
fabrics (:func:`synth.routed.fabrics.random_fabric`). Per (fabric, collective, routing): the optimum
the schedule is held to (routed optimum for ``routed``, free LP optimum for ``free``), the
schedule's algbw, the loss, status, chunks per block / root, the binding limit where the loss stays
above 0.1 %, the algbw of the exported MSCCL XML (:func:`msccl_xml.program_algbw_GBps`, lowered in
memory) and the synthesis wall time. ``routed`` runs only where some GPU pair has a route choice
(elsewhere it equals ``free``). Defaults throughout: ``chunks=None`` (the automatic choice, docs/exactness.md).

Usage::

    python benchmarks/rounding.py                      # every fabric (minutes on 2 shared cores)
    python benchmarks/rounding.py --fabrics mi250-1 --collectives alltoall --name rounding_smoke
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, cast

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._report import write_results  # noqa: E402
from msccl_xml import parse, program_algbw_GBps, render_xml  # noqa: E402
from synth import Collective, synthesize  # noqa: E402
from synth.errors import RuntimeLimitError, XmlError  # noqa: E402
from synth.figures import binding_limit_of  # noqa: E402
from synth.routed.fabrics import forestcoll_dgx_a100, mi250_like, random_fabric  # noqa: E402
from synth.routing import has_route_choice  # noqa: E402
from synth.topologies import Topology, named_topology  # noqa: E402

COLUMNS = ("fabric", "gpus", "collective", "routing", "status", "optimum_GBps", "algbw_GBps", "loss_pct",
           "chunks", "binding_limit", "xml_algbw_GBps", "xml_note", "time_s")


def _halved_nvlink(topo: Topology) -> Topology:
    for link in topo.links:
        if link.dst.startswith("nvs") and link.src.startswith("gpu"):
            topo = topo.scaled(link.src, link.dst, 0.5)
    return topo


FABRICS: dict[str, Callable[[], Topology]] = {
    "mi250-1": lambda: mi250_like(1),
    "mi250-1-xgmi-quarter": lambda: mi250_like(1).scaled("gpu0", "gpu1", 0.25),
    "mi250-2": lambda: mi250_like(2),
    "mi250-4": lambda: mi250_like(4),
    "a100-two-ib-2x8": lambda: forestcoll_dgx_a100(2),
    "a100-two-ib-2x8-nvlink-half": lambda: _halved_nvlink(forestcoll_dgx_a100(2)),
    "rail-2x8-nic-30pct": lambda: named_topology("hpn:1x2x8").scaled("gpu0", "tor0.0", 0.3),
    "random-8g-3sw": lambda: random_fabric(8, 8, hosts=1),
    "random-6g-3sw": lambda: random_fabric(6, 6, hosts=1),
    "random-16": lambda: random_fabric(16, 16),
    "random-16-1host": lambda: random_fabric(3, 16, hosts=1),
    "random-32": lambda: random_fabric(32, 32),
}
FABRICS.update({f"random-{n}-seed{s}": partial(random_fabric, s, n) for s in (1, 2) for n in (6, 12)})


def _xml_algbw(topo: Topology, result: Any) -> tuple[float | None, str]:
    """The exported XML's algbw (``export`` checks the executor's limits), or None and why: over a
    limit, or a free-routing hop that the executor would route otherwise."""
    try:
        text = render_xml(result.schedule, topo)
    except XmlError as exc:
        return None, "runtime limit" if isinstance(exc, RuntimeLimitError) else "hop off its route"
    return program_algbw_GBps(parse(text), topo), ""


def _row(name: str, topo: Topology, coll: Collective, routing: str) -> dict[str, Any]:
    t0 = time.perf_counter()
    r = synthesize(coll, topo, routing=routing)
    elapsed = time.perf_counter() - t0
    assert r.schedule is not None, r.message
    xml, why = _xml_algbw(topo, r)
    return {
        "fabric": name, "gpus": topo.nranks, "collective": coll, "routing": routing, "status": r.status.value,
        "optimum_GBps": r.optimal_algbw_GBps, "algbw_GBps": r.algbw_GBps, "loss_pct": r.gap_pct,
        "chunks": r.schedule.nchunks, "binding_limit": binding_limit_of(r.figures),
        "xml_algbw_GBps": xml, "xml_note": why, "time_s": elapsed,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--fabrics", default=",".join(FABRICS), help="comma-separated names (default: all)")
    parser.add_argument("--collectives", default="alltoall,allgather", help="default alltoall,allgather")
    parser.add_argument("--name", default="rounding", help="results/NAME.json and .md (default rounding)")
    args = parser.parse_args()
    names = args.fabrics.split(",")
    unknown = [f for f in names if f not in FABRICS]
    if unknown:
        parser.error(f"unknown fabric(s) {unknown}; known: {', '.join(FABRICS)}")
    rows = []
    for name in names:
        topo = FABRICS[name]()
        routings = ("routed", "free") if has_route_choice(topo) else ("free",)
        for coll in args.collectives.split(","):
            for routing in routings:
                row = _row(name, topo, cast(Collective, coll), routing)
                print(row, flush=True)
                rows.append(row)
    command = "python benchmarks/rounding.py " + " ".join(sys.argv[1:])
    notes = ("loss_pct is against the optimum the schedule is held to (routed optimum for routed, LP optimum for "
             "free); binding_limit names the limit that keeps it above 0.1 %; xml_algbw_GBps is the exported "
             "XML's algbw under the executor's routing (none for a free schedule whose hop the executor routes "
             "otherwise, or over a runtime limit).")
    print(write_results(args.name, COLUMNS, rows, command.strip(), notes))


if __name__ == "__main__":
    main()

"""Builders for the named topology specs of docs/topology.md.

Each builder is callable from Python with keyword options; :func:`named_topology` parses a spec
string such as ``"hpn:1x2x8,nic=200"`` and calls the matching builder.

Examples
--------
>>> named_topology("hpn:1x2x8").nranks
16
>>> hpn(1, 2, 4, nic_gbps=200.0, nvswitch_gbps=3600.0).link("gpu0", "tor0.0").gbps
200.0
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable

from synth.errors import TopologyError, short_repr
from synth.topologies.model import Link, Node, NodeKind, Topology

__all__ = ["NAMED_SPECS", "dgx_a100", "dgx_h100", "hpn", "named_topology", "nvswitch", "ring", "torus"]

#: Largest GPU (or host) count a named spec may describe: builds stay well under a second per
#: thousand GPUs and the exact algorithms' integers within their budget (docs/exactness.md).
MAX_NAMED_GPUS = 16384

NVSWITCH_LATENCY_US = 0.025
NIC_LATENCY_US = 0.5
DIRECT_LATENCY_US = 0.5


def _gpu(rank: int, host: int | None) -> Node:
    return Node(f"gpu{rank}", NodeKind.GPU, rank, host)


def _switch(node_id: str, role: str) -> Node:
    return Node(node_id, NodeKind.SWITCH, role=role)


def _cable(a: str, b: str, gbps: float, latency_us: float) -> tuple[Link, Link]:
    return Link(a, b, float(gbps), latency_us), Link(b, a, float(gbps), latency_us)


def positive_value(value: float, what: str) -> float:
    """``value`` as a float; :class:`TopologyError` naming ``what`` unless it is a finite number > 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise TopologyError(f"{what} must be a finite number > 0, got {value!r}")
    return float(value)


def _count(value: int, what: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise TopologyError(f"{what} must be an integer >= {minimum}, got {value!r}")
    return value


def _rail_fabric(
    name: str,
    segments: int,
    hosts: int,
    gpus_per_host: int,
    nvswitch_gbps: float,
    nic_gbps: float,
    meta: dict[str, object],
) -> Topology:
    nodes: list[Node] = []
    links: list[Link] = []
    for s in range(segments):
        for h in range(hosts):
            host = s * hosts + h
            nvs = f"nvs{s}.{h}"
            nodes.append(_switch(nvs, "nvswitch"))
            for i in range(gpus_per_host):
                rank = host * gpus_per_host + i
                nodes.append(_gpu(rank, host))
                links.extend(_cable(f"gpu{rank}", nvs, nvswitch_gbps, NVSWITCH_LATENCY_US))
                links.extend(_cable(f"gpu{rank}", f"tor{s}.{i}", nic_gbps, NIC_LATENCY_US))
    for s in range(segments):
        nodes.extend(_switch(f"tor{s}.{i}", "tor") for i in range(gpus_per_host))
    if segments > 1:
        nodes.extend(_switch(f"agg{i}", "spine") for i in range(gpus_per_host))
        for s in range(segments):
            for i in range(gpus_per_host):
                links.extend(_cable(f"tor{s}.{i}", f"agg{i}", hosts * nic_gbps, NIC_LATENCY_US))
    return Topology.create(name, nodes, links, meta)


def hpn(
    segments: int,
    hosts: int,
    gpus_per_host: int,
    *,
    nic_gbps: float = 400.0,
    nvswitch_gbps: float = 2880.0,
    name: str | None = None,
) -> Topology:
    """Rail-optimised HPN: S segments × H hosts × N GPUs, one NVSwitch per host, one NIC per GPU.

    >>> t = hpn(2, 2, 2)
    >>> t.nranks, t.link("tor0.1", "agg1").gbps
    (8, 800.0)
    """
    segments = _count(segments, "hpn segments S")
    hosts = _count(hosts, "hpn hosts per segment H")
    gpus_per_host = _count(gpus_per_host, "hpn GPUs per host N")
    if segments * hosts * gpus_per_host < 2:
        raise TopologyError("hpn needs at least 2 GPUs in all (S*H*N >= 2)")
    nic_gbps = positive_value(nic_gbps, "hpn option nic (Gbit/s)")
    nvswitch_gbps = positive_value(nvswitch_gbps, "hpn option nvswitch (Gbit/s)")
    default = f"hpn-{segments}x{hosts}x{gpus_per_host}"
    if nic_gbps != 400.0:
        default += f",nic={nic_gbps:g}"
    if nvswitch_gbps != 2880.0:
        default += f",nvswitch={nvswitch_gbps:g}"
    meta = {"family": "hpn", "segments": segments, "hosts_per_segment": hosts, "gpus_per_host": gpus_per_host}
    return _rail_fabric(name or default, segments, hosts, gpus_per_host, nvswitch_gbps, nic_gbps, meta)


def _dgx(hosts: int, nvswitch_gbps: float, nic_gbps: float, family: str) -> Topology:
    hosts = _count(hosts, f"{family} hosts H")
    meta = {"family": family, "segments": 1, "hosts_per_segment": hosts, "gpus_per_host": 8}
    return _rail_fabric(f"{family}-{hosts}", 1, hosts, 8, nvswitch_gbps, nic_gbps, meta)


def dgx_a100(hosts: int) -> Topology:
    """H DGX-A100 boxes: NVSwitch 2400 Gbit/s per GPU, one 200 Gbit/s NIC per GPU into rail ToRs.

    >>> dgx_a100(2).nranks
    16
    """
    return _dgx(hosts, 2400.0, 200.0, "dgx-a100")


def dgx_h100(hosts: int) -> Topology:
    """H DGX-H100 boxes: NVSwitch 3600 Gbit/s per GPU, one 400 Gbit/s NIC per GPU into rail ToRs.

    >>> dgx_h100(1).link("gpu0", "nvs0.0").gbps
    3600.0
    """
    return _dgx(hosts, 3600.0, 400.0, "dgx-h100")


def nvswitch(n: int, *, gbps: float = 2880.0) -> Topology:
    """One host: n GPUs on one NVSwitch.

    >>> nvswitch(8).nranks
    8
    """
    n = _count(n, "nvswitch GPU count N", 2)
    gbps = positive_value(gbps, "nvswitch gbps")
    nodes = [_switch("nvs0.0", "nvswitch")] + [_gpu(r, 0) for r in range(n)]
    links = [lk for r in range(n) for lk in _cable(f"gpu{r}", "nvs0.0", gbps, NVSWITCH_LATENCY_US)]
    return Topology.create(f"nvswitch-{n}", nodes, links, {"family": "nvswitch"})


def ring(n: int, *, gbps: float = 400.0) -> Topology:
    """n GPUs in a bidirectional ring of direct links (n = 2 gives one cable).

    >>> ring(4).link("gpu3", "gpu0").gbps
    400.0
    """
    n = _count(n, "ring GPU count N", 2)
    gbps = positive_value(gbps, "ring gbps")
    pairs = sorted({tuple(sorted((r, (r + 1) % n))) for r in range(n)})
    links = [lk for a, b in pairs for lk in _cable(f"gpu{a}", f"gpu{b}", gbps, DIRECT_LATENCY_US)]
    return Topology.create(f"ring-{n}", [_gpu(r, r) for r in range(n)], links, {"family": "ring"})


def torus(x: int, y: int, *, gbps: float = 400.0) -> Topology:
    """2-D torus of x×y GPUs (rank = row·y + column); a dimension of size 2 has one cable per pair.

    >>> torus(3, 3).nranks, len(torus(3, 3).links)
    (9, 36)
    """
    x = _count(x, "torus X")
    y = _count(y, "torus Y")
    if x * y < 2:
        raise TopologyError("torus needs at least 2 GPUs (X*Y >= 2)")
    gbps = positive_value(gbps, "torus gbps")
    pairs: set[tuple[int, int]] = set()
    for r in range(x):
        for c in range(y):
            me = r * y + c
            for other in (((r + 1) % x) * y + c, r * y + (c + 1) % y):
                if other != me:
                    pairs.add((min(me, other), max(me, other)))
    links = [lk for a, b in sorted(pairs) for lk in _cable(f"gpu{a}", f"gpu{b}", gbps, DIRECT_LATENCY_US)]
    return Topology.create(f"torus-{x}x{y}", [_gpu(r, r) for r in range(x * y)], links, {"family": "torus"})


def _ints(text: str, count: int, spec: str) -> list[int]:
    parts = text.split("x")
    if len(parts) != count or not all(re.fullmatch(r"[0-9]{1,9}", p) for p in parts):
        form = "x".join("N" * 1 for _ in range(count))
        raise TopologyError(f"named spec {short_repr(spec)}: expected {count} integer(s) of the form {form!r} "
                            f"(at most 9 digits each), got {short_repr(text)}")
    values = [int(p) for p in parts]
    if math.prod(values) > MAX_NAMED_GPUS:
        raise TopologyError(f"named spec {short_repr(spec)}: describes {math.prod(values)} GPUs or hosts, above the "
                            f"limit of {MAX_NAMED_GPUS} (synth.topologies.named.MAX_NAMED_GPUS)")
    return values


def _options(items: list[str], allowed: tuple[str, ...], spec: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise TopologyError(f"named spec {short_repr(spec)}: option {short_repr(item)} must be KEY=VALUE")
        if key not in allowed:
            hint = difflib.get_close_matches(key, allowed, n=1)
            extra = f" (did you mean {hint[0]!r}?)" if hint else ""
            raise TopologyError(f"named spec {short_repr(spec)}: unknown option {short_repr(key)}{extra}; allowed: {', '.join(allowed)}")
        try:
            out[key] = float(value)
        except ValueError:
            raise TopologyError(f"named spec {short_repr(spec)}: option {key[:40]}={short_repr(value)} is not a number") from None
    return out


def _build_hpn(arg: str, opts: list[str], spec: str) -> Topology:
    s, h, n = _ints(arg, 3, spec)
    o = _options(opts, ("nic", "nvswitch"), spec)
    return hpn(s, h, n, nic_gbps=o.get("nic", 400.0), nvswitch_gbps=o.get("nvswitch", 2880.0))


def _no_options(opts: list[str], spec: str) -> None:
    if opts:
        raise TopologyError(f"named spec {short_repr(spec)}: takes no options, got {short_repr(','.join(opts))}")


def _single(builder: Callable[[int], Topology]) -> Callable[[str, list[str], str], Topology]:
    def build(arg: str, opts: list[str], spec: str) -> Topology:
        _no_options(opts, spec)
        return builder(_ints(arg, 1, spec)[0])

    return build


def _build_torus(arg: str, opts: list[str], spec: str) -> Topology:
    _no_options(opts, spec)
    x, y = _ints(arg, 2, spec)
    return torus(x, y)


def _build_h200(arg: str | None, opts: list[str], spec: str) -> Topology:
    _no_options(opts, spec)
    return hpn(1, 2, 4, nic_gbps=200.0, nvswitch_gbps=3600.0, name="h200-proto")


_BUILDERS: dict[str, Callable[[str, list[str], str], Topology]] = {
    "hpn": _build_hpn,
    "nvswitch": _single(nvswitch),
    "ring": _single(ring),
    "torus": _build_torus,
    "dgx-a100": _single(dgx_a100),
    "dgx-h100": _single(dgx_h100),
}

#: The spec forms :func:`named_topology` accepts, for help texts and error messages.
NAMED_SPECS: tuple[str, ...] = (
    "hpn:SxHxN[,nic=GBIT][,nvswitch=GBIT]",
    "h200-proto",
    "nvswitch:N",
    "ring:N",
    "torus:XxY",
    "dgx-a100:H",
    "dgx-h100:H",
)


def named_topology(spec: str) -> Topology:
    """Build the topology a named spec denotes (see docs/topology.md).

    >>> named_topology("torus:2x2").nranks
    4
    >>> named_topology("h200-proto").link("gpu0", "nvs0.0").gbps
    3600.0
    """
    if not isinstance(spec, str) or not spec.strip():
        raise TopologyError(f"named spec must be a non-empty string, got {short_repr(spec)}")
    head, *opts = spec.strip().split(",")
    if head == "h200-proto":
        return _build_h200(None, opts, spec)
    family, sep, arg = head.partition(":")
    if family not in _BUILDERS or not sep:
        known = [*_BUILDERS, "h200-proto"]
        hint = difflib.get_close_matches(family, known, n=1)
        extra = f" (did you mean {hint[0]!r}?)" if hint else ""
        raise TopologyError(f"unknown topology spec {short_repr(spec)}{extra}; known: {', '.join(NAMED_SPECS)}")
    return _BUILDERS[family](arg, opts, spec)

"""Parse ``ibstat`` and ``ibv_devinfo`` output: every port of every HCA with its state and rate.

``ibstat`` (infiniband-diags) prints one ``CA 'mlx5_0'`` block per HCA with ``Port N:`` blocks
holding ``State: Active``, ``Rate: 400`` (Gbit/s) and ``Link layer: InfiniBand``.
``ibv_devinfo`` (rdma-core) prints ``hca_id: mlx5_0`` blocks with ``port: N`` blocks holding
``state: PORT_ACTIVE (4)`` and ``link_layer: …``; only ``ibv_devinfo -v`` adds
``active_width: 4X (2)`` and ``active_speed: 100.0 Gbps (128)``, whose product is the rate.

Examples
--------
>>> text = '''CA 'mlx5_0'
... \\tCA type: MT4129
... \\tNumber of ports: 1
... \\tPort 1:
... \\t\\tState: Active
... \\t\\tRate: 400
... \\t\\tLink layer: InfiniBand
... '''
>>> parse_ibstat(text, source="ibstat.txt")
(HcaPort(hca='mlx5_0', port=1, state='Active', active=True, rate_gbps=400.0, link_layer='InfiniBand', line=4),)
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from synth.errors import TopologyError, short_repr

__all__ = ["HcaPort", "parse_ibstat", "parse_ibv_devinfo"]


@dataclass(frozen=True, slots=True)
class HcaPort:
    """One port of an HCA: ``state`` as the tool prints it, ``rate_gbps`` ``None`` where not stated.

    ``line`` is the line of the port's heading in its file, for messages.
    """

    hca: str
    port: int
    state: str
    active: bool
    rate_gbps: float | None
    link_layer: str | None
    line: int


@dataclass
class _Draft:
    """A port being read (mutable while its block lasts; frozen into :class:`HcaPort`)."""

    hca: str
    port: int
    line: int
    state: str | None = None
    rate_gbps: float | None = None
    width: int | None = None
    lane_gbps: float | None = None
    link_layer: str | None = None


def _finish(d: _Draft, source: str, active_word: str, state_key: str) -> HcaPort:
    if d.state is None:
        raise TopologyError(f"{source}:{d.line}: {d.hca} port {d.port} has no '{state_key}' line")
    rate = d.rate_gbps
    if rate is None and d.width is not None and d.lane_gbps is not None:
        rate = d.width * d.lane_gbps
    return HcaPort(d.hca, d.port, d.state, d.state.split()[0] == active_word, rate, d.link_layer, d.line)


def _number(text: str, where: str, what: str) -> float:
    m = re.match(r"\s*([0-9]+(?:\.[0-9]+)?)", text)
    if not m:
        raise TopologyError(f"{where}: {what} must be a number, got {short_repr(text.strip())}")
    return float(m.group(1))


def _collect(drafts: list[_Draft], source: str, active_word: str, state_key: str, tool: str) -> tuple[HcaPort, ...]:
    if not drafts:
        raise TopologyError(f"{source}: no HCA port found: is this the output of `{tool}`?")
    seen: set[tuple[str, int]] = set()
    for d in drafts:
        if (d.hca, d.port) in seen:
            raise TopologyError(f"{source}:{d.line}: {d.hca} port {d.port} appears twice")
        seen.add((d.hca, d.port))
    return tuple(_finish(d, source, active_word, state_key) for d in drafts)


def parse_ibstat(text: str, *, source: str = "<ibstat>") -> tuple[HcaPort, ...]:
    """Every port of ``ibstat`` output, in file order.

    Raises
    ------
    TopologyError
        No ``CA '…'`` block; a ``Port N:`` outside one; a port without ``State:``; a ``Rate:`` that is
        not a number; a port listed twice.
    """
    drafts: list[_Draft] = []
    hca: str | None = None
    for no, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        m = re.match(r"CA '([^']+)'\s*\Z", stripped)
        if m:
            hca = m.group(1)
            continue
        m = re.match(r"Port (\d+):\s*\Z", stripped)
        if m:
            if hca is None:
                raise TopologyError(f"{source}:{no}: 'Port {m.group(1)}:' before any CA 'NAME' line")
            drafts.append(_Draft(hca, int(m.group(1)), no))
            continue
        key, sep, value = stripped.partition(":")
        if not sep or not drafts or drafts[-1].hca != hca:
            continue
        d = drafts[-1]
        if key == "State":
            d.state = value.strip()
        elif key == "Rate":
            d.rate_gbps = _number(value, f"{source}:{no}", f"{d.hca} port {d.port} Rate")
        elif key == "Link layer":
            d.link_layer = value.strip()
    return _collect(drafts, source, "Active", "State:", "ibstat")


def parse_ibv_devinfo(text: str, *, source: str = "<ibv_devinfo>") -> tuple[HcaPort, ...]:
    """Every port of ``ibv_devinfo`` (or ``ibv_devinfo -v``) output, in file order.

    The rate is ``active_width`` × ``active_speed`` where both are printed (``-v``), else ``None``.

    >>> ports = parse_ibv_devinfo('''hca_id:\\tmlx5_1
    ... \\tphys_port_cnt:\\t\\t1
    ... \\t\\tport:\\t1
    ... \\t\\t\\tstate:\\t\\tPORT_DOWN (1)
    ... \\t\\t\\tactive_width:\\t\\t4X (2)
    ... \\t\\t\\tactive_speed:\\t\\t50.0 Gbps (64)
    ... ''', source="devinfo.txt")
    >>> ports[0].active, ports[0].rate_gbps
    (False, 200.0)
    """
    drafts: list[_Draft] = []
    hca: str | None = None
    for no, line in enumerate(text.splitlines(), start=1):
        key, sep, value = line.strip().partition(":")
        if not sep:
            continue
        value = value.strip()
        where = f"{source}:{no}"
        if key == "hca_id":
            hca = value
        elif key == "port" and re.fullmatch(r"\d+", value):
            if hca is None:
                raise TopologyError(f"{where}: 'port: {value}' before any 'hca_id:' line")
            drafts.append(_Draft(hca, int(value), no))
        elif not drafts or drafts[-1].hca != hca:
            continue
        elif key == "state":
            drafts[-1].state = value
        elif key == "active_width":
            m = re.match(r"(\d+)X\b", value)
            if not m:
                raise TopologyError(f"{where}: active_width must look like '4X (2)', got {short_repr(value)}")
            drafts[-1].width = int(m.group(1))
        elif key == "active_speed":
            drafts[-1].lane_gbps = _number(value, where, "active_speed")
        elif key == "link_layer":
            drafts[-1].link_layer = value
    return _collect(drafts, source, "PORT_ACTIVE", "state:", "ibv_devinfo")

"""synth/topologies/probe/ibstat.py on canned `ibstat` / `ibv_devinfo -v` outputs (tests/vectors/probe)."""

from __future__ import annotations

import re

import pytest

from synth.errors import TopologyError
from synth.topologies.probe import parse_ibstat, parse_ibv_devinfo
from tests.synth.topologies.probe._vectors import ports, text


def test_ibstat_of_a_dgx_h100() -> None:
    got = {p.hca: p for p in ports("dgx-h100.ibstat.txt")}
    assert sorted(got) == sorted(f"mlx5_{i}" for i in range(12))
    assert got["mlx5_0"].active and got["mlx5_0"].rate_gbps == 400.0 and got["mlx5_0"].link_layer == "InfiniBand"
    assert got["mlx5_1"].rate_gbps == 200.0 and got["mlx5_1"].link_layer == "Ethernet"
    assert all(p.port == 1 for p in got.values())


def test_ibstat_port_down() -> None:
    got = {p.hca: p for p in ports("nic-down.ibstat.txt")}
    assert not got["mlx5_3"].active and got["mlx5_3"].state == "Down"
    assert sum(p.active for p in got.values()) == 11


def test_ibv_devinfo_verbose_rate_is_width_times_lane_speed() -> None:
    got = ports("a100-2nic.ibv_devinfo.txt")
    assert [(p.hca, p.port, p.active, p.rate_gbps, p.link_layer) for p in got] == [
        ("mlx5_0", 1, True, 200.0, "InfiniBand"), ("mlx5_1", 1, True, 200.0, "InfiniBand")]


def test_ibv_devinfo_without_verbose_states_no_rate() -> None:
    plain = re.sub(r".*active_(width|speed):.*\n", "", text("a100-2nic.ibv_devinfo.txt"))
    assert [p.rate_gbps for p in parse_ibv_devinfo(plain, source="d")] == [None, None]


@pytest.mark.parametrize(
    ("parse", "doc", "match"),
    [
        (parse_ibstat, "\tPort 1:\n\t\tState: Active\n", r"^f:1: 'Port 1:' before any CA 'NAME' line"),
        (parse_ibstat, "CA 'mlx5_0'\n\tPort 1:\n\t\tRate: 400\n", r"^f:2: mlx5_0 port 1 has no 'State:' line"),
        (parse_ibstat, "CA 'mlx5_0'\n\tPort 1:\n\t\tState: Active\n\t\tRate: fast\n",
         r"^f:4: mlx5_0 port 1 Rate must be a number, got 'fast'"),
        (parse_ibstat, "CA 'mlx5_0'\n\tPort 1:\n\t\tState: Active\n\tPort 1:\n\t\tState: Active\n",
         r"^f:4: mlx5_0 port 1 appears twice"),
        (parse_ibstat, "hello\n", r"^f: no HCA port found: is this the output of `ibstat`\?"),
        (parse_ibv_devinfo, "\t\tport:\t1\n", r"^f:1: 'port: 1' before any 'hca_id:' line"),
        (parse_ibv_devinfo, "hca_id:\tmlx5_0\n\t\tport:\t1\n\t\t\tstate:\tPORT_ACTIVE (4)\n\t\t\tactive_width:\twide\n",
         r"^f:4: active_width must look like '4X \(2\)'"),
    ],
)
def test_malformed_port_output_names_file_and_line(parse, doc: str, match: str) -> None:  # noqa: ANN001
    with pytest.raises(TopologyError, match=match):
        parse(doc, source="f")

"""synth/topologies/probe/build.py: topologies from the canned tool outputs of tests/vectors/probe.

Each expected figure is derived independently: from the named spec the probe must reproduce, or
from the cut that binds AllGather (rate per source = min over cuts S of B+(S) / |S ∩ GPUs|).
"""

from __future__ import annotations

import pytest

from synth.bounds import optimal_bound
from synth.errors import TopologyError
from synth.topologies import dgx_h100, rail_layout, switch_roles, topology_from_json, topology_to_json
from synth.topologies.probe import HostProbe, parse_topo_matrix, probe_topology
from tests.synth.topologies.probe._vectors import dgx, host

COMPUTE_NICS = ("mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11")


@pytest.mark.parametrize("hosts", [1, 2])
def test_dgx_h100_is_the_named_spec(hosts: int) -> None:
    r = probe_topology([dgx()] * hosts)
    named = dgx_h100(hosts)
    assert r.topology.fingerprint == named.fingerprint  # same nodes, links, capacities and order
    assert switch_roles(r.topology) == switch_roles(named)
    assert rail_layout(r.topology) == rail_layout(named)
    assert optimal_bound("allgather", r.topology).algbw_GBps == optimal_bound("allgather", named).algbw_GBps
    assert [n.name for n in r.nics[0]] == list(COMPUTE_NICS)  # rail order: by the GPU that uses each
    assert r.warnings == ()
    assert any("mlx5_1 left out" in n for n in r.notes) and any("NVLink 200 Gbit/s" in n for n in r.notes)
    assert not any("PCIe" in n for n in r.notes)  # no PCIe link laid, so no PCIe rate assumed


def test_written_json_loads_back() -> None:
    topo = probe_topology([dgx(name="a"), dgx(name="b")]).topology
    assert topology_from_json(topology_to_json(topo)) == topo
    assert topo.meta["probe"]["hosts"] == ["a", "b"] and topo.meta["probe"]["gpu_models"] == ["H100", "H100"]


def test_a100_two_nics_shared_by_four_gpus_each() -> None:
    a100 = host("a100-2nic.topo.txt", "a100-2nic.ibv_devinfo.txt", "a100-2nic.gpus.csv")
    r = probe_topology([a100, a100])
    assert "PCIe 252 Gbit/s per x16 link (A100)" in r.notes
    topo = r.topology
    roles = switch_roles(topo)
    assert sorted(s for s, role in roles.items() if role == "nic") == ["nic0.0", "nic0.1", "nic1.0", "nic1.1"]
    assert topo.link("gpu0", "nvs0.0").gbps == 2400.0  # NV12 x 200 Gbit/s
    assert topo.link("gpu3", "nic0.0").gbps == 252.0 and not topo.has_link("gpu4", "nic0.0")  # PCIe Gen4
    assert topo.link("gpu12", "nic1.1").gbps == 252.0
    assert topo.link("nic1.0", "tor0.0").gbps == 200.0 and topo.link("tor0.1", "nic0.1").gbps == 200.0
    # the host is the binding cut: 2 NICs x 200 Gbit/s for its 8 GPUs
    assert optimal_bound("allgather", topo).algbw_GBps == pytest.approx(16 * (2 * 200 / 8) / 8)


def test_pcie_box_gets_its_pcie_tree() -> None:
    pcie = host("pcie-l40s.topo.txt", "pcie-l40s.ibstat.txt", "pcie-l40s.gpus.txt")
    topo = probe_topology([pcie, pcie]).topology
    trees = [s.id for s in topo.switches if s.id.startswith("pcie0.")]
    assert len(trees) == 7  # 4 PCIe switches (PIX), 2 sockets (NODE), 1 across sockets (SYS)
    assert not any(lk.src.startswith("gpu") and lk.dst.startswith("gpu") for lk in topo.links)
    sw = next(lk.dst for lk in topo.out_links("gpu0"))
    assert {lk.dst for lk in topo.out_links(sw)} >= {"gpu0", "gpu1", "nic0.0"}  # GPU0, GPU1, NIC0 are PIX
    assert all(lk.gbps == 252.0 for lk in topo.links if not lk.dst.startswith("tor") and not lk.src.startswith("tor"))
    # one GPU's only way in is its x16 link, shared by the other 15 sources
    assert optimal_bound("allgather", topo).algbw_GBps == pytest.approx(16 * (252 / 15) / 8)


def test_nic_down_is_left_out_with_a_warning_and_its_gpu_falls_back() -> None:
    r = probe_topology([dgx("nic-down.ibstat.txt")] * 2)
    assert r.warnings == ("mlx5_3: no active port in nic-down.ibstat.txt (port 1 Down); left out",)
    used = {n.name: n.gpus for n in r.nics[0]}
    assert "mlx5_3" not in used and 1 in used["mlx5_0"] and 1 in used["mlx5_4"]  # GPU1's nearest are now NODE
    assert rail_layout(r.topology) is None
    assert r.topology.link("gpu1", "nic0.0").gbps == 504.0  # shared NIC: GPU -> NIC over PCIe Gen5


def test_nic_selection_and_single_leaf() -> None:
    r = probe_topology([dgx()] * 2, nics=COMPUTE_NICS, fabric="single-leaf")
    topo = r.topology
    assert not any("left out" in n for n in r.notes)
    assert [lk.src for lk in topo.in_links("leaf0")] == [f"gpu{i}" for i in range(16)]
    assert rail_layout(topo) is None
    # a GPU takes in 3600 + 400 Gbit/s, shared by the 15 other sources, as on the rail fabric
    assert optimal_bound("allgather", topo).algbw_GBps == pytest.approx(16 * (4000 / 15) / 8)


def test_fabric_none_on_one_host() -> None:
    topo = probe_topology([dgx()], fabric="none").topology
    assert [s.id for s in topo.switches] == ["nvs0.0"]


LEGEND = "\nLegend:\n  X = Self\n  NV# = NVLinks\n  PHB = host bridge\n"


def _matrix(rows: list[str]) -> str:
    n = len(rows)
    return "\t" + "\t".join(f"GPU{i}" for i in range(n)) + "\n" + "".join(
        f"GPU{i}\t" + "\t".join(c if c != "X" else " X " for c in row.split()) + "\n" for i, row in enumerate(rows)
    ) + LEGEND


def test_direct_nvlink_mesh_is_not_an_nvswitch() -> None:
    # 4 x A100 (12 links each) with NV4 to each peer: 4 x 3 = 12 links, all used by direct cables
    m = parse_topo_matrix(_matrix(["X NV4 NV4 NV4", "NV4 X NV4 NV4", "NV4 NV4 X NV4", "NV4 NV4 NV4 X"]), source="m")
    topo = probe_topology([HostProbe("h", m, gpu_names=("NVIDIA A100-SXM4-40GB",) * 4)]).topology
    assert topo.switches == () and topo.link("gpu2", "gpu3").gbps == 800.0


def test_nvlink_bridged_pairs_on_pcie() -> None:
    m = parse_topo_matrix(_matrix(["X NV4 PHB PHB", "NV4 X PHB PHB", "PHB PHB X NV4", "PHB PHB NV4 X"]), source="m")
    topo = probe_topology([HostProbe("h", m)], nvlink_gbps=200.0, pcie_gbps=126.0).topology
    assert topo.link("gpu0", "gpu1").gbps == 800.0 and topo.link("gpu2", "gpu3").gbps == 800.0
    assert [s.id for s in topo.switches] == ["pcie0.0"]  # PHB: one host bridge joins all four
    assert topo.link("gpu0", "pcie0.0").gbps == 126.0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"hosts": [host("dgx-h100.topo.txt", "dgx-h100.ibstat.txt")]},
         r"dgx-h100\.topo\.txt: GPUs are joined by NVLink \(NV18\) but the GPU model is unknown: .*--nvlink-gbps"),
        ({"hosts": [host("dgx-h100.topo.txt", None, "dgx-h100.gpus.txt")]},
         r"dgx-h100\.topo\.txt: the rate of NIC mlx5_0 is unknown: .*--nic-gbps"),
        ({"hosts": [dgx()] * 2, "fabric": "none"}, r"fabric 'none' joins no hosts, but 2 hosts were given"),
        ({"hosts": [dgx()], "fabric": "ring"}, r"unknown fabric 'ring'; choose one of rail, single-leaf, none"),
        ({"hosts": [dgx()], "nics": ["mlx5_99"]}, r"no NIC 'mlx5_99' in the matrix"),
        ({"hosts": [dgx()], "nvlink_gbps": -1.0}, r"nvlink_gbps must be a finite number > 0, got -1\.0"),
        ({"hosts": [host("dgx-h100.topo.txt", "dgx-h100.ibstat.txt", "a100-2nic.gpus.csv")]},
         r"dgx-h100\.topo\.txt: NV18 joins two GPUs, but the A100 has 12 NVLinks per GPU"),
    ],
)
def test_errors_name_the_culprit(kwargs: dict, match: str) -> None:  # type: ignore[type-arg]
    options = dict(kwargs)
    hosts = options.pop("hosts")
    with pytest.raises(TopologyError, match=match):
        probe_topology(hosts, **options)

"""synth/topologies/probe/nvidia_smi.py on canned `nvidia-smi topo -m` outputs (tests/vectors/probe)."""

from __future__ import annotations

import pytest

from synth.errors import TopologyError
from synth.topologies.probe import Cell, Relation, parse_topo_matrix
from tests.synth.topologies.probe._vectors import text

NV18 = Cell(Relation.NVLINK, 18)


def test_dgx_h100_matrix_with_nic_legend() -> None:
    m = parse_topo_matrix(text("dgx-h100.topo.txt"), source="dgx")
    assert m.gpus == tuple(f"GPU{i}" for i in range(8))
    assert m.nics == tuple(f"mlx5_{i}" for i in range(12))  # NIC0..NIC11 through the NIC legend
    assert all(m.cell(f"GPU{a}", f"GPU{b}") == NV18 for a in range(8) for b in range(8) if a != b)
    assert m.cell("GPU1", "mlx5_3") == Cell(Relation.PIX) and m.cell("mlx5_3", "GPU1") == Cell(Relation.PIX)
    assert m.cell("GPU0", "mlx5_6").relation is Relation.SYS
    assert m.cell("mlx5_1", "mlx5_2").relation is Relation.PIX
    assert m.cell("GPU4", "GPU4").relation is Relation.SELF


def test_older_matrix_names_nics_in_the_header() -> None:
    m = parse_topo_matrix(text("a100-2nic.topo.txt"), source="a100")
    assert m.nics == ("mlx5_0", "mlx5_1")
    assert m.cell("GPU3", "GPU5") == Cell(Relation.NVLINK, 12)
    assert m.cell("GPU3", "mlx5_0").relation is Relation.PXB and m.cell("GPU3", "mlx5_1").relation is Relation.SYS


def test_pcie_matrix_without_nvlink() -> None:
    m = parse_topo_matrix(text("pcie-l40s.topo.txt"), source="pcie")
    cells = {m.cell(a, b).relation for a in m.gpus for b in m.gpus if a != b}
    assert cells == {Relation.PIX, Relation.NODE, Relation.SYS}


def test_text_before_the_header_is_skipped_and_soc_reads_as_sys() -> None:
    t = ("$ nvidia-smi topo -m\n\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tSOC\t0-7\nGPU1\tSOC\t X \t8-15\n\n"
         "Legend:\n  X   = Self\n  SOC  = Connection traversing a socket-level link\n")
    assert parse_topo_matrix(t).cell("GPU0", "GPU1") == Cell(Relation.SYS)


def test_missing_legend_is_refused_naming_the_file() -> None:
    with pytest.raises(TopologyError, match=r"^no-legend\.topo\.txt: no 'Legend:' block .* cut short"):
        parse_topo_matrix(text("no-legend.topo.txt"), source="no-legend.topo.txt")


def test_ragged_row_is_refused_naming_file_line_and_row() -> None:
    with pytest.raises(TopologyError, match=r"^ragged\.topo\.txt:4: row GPU2 has 22 cells, expected 23 "):
        parse_topo_matrix(text("ragged.topo.txt"), source="ragged.topo.txt")


def _two(cell01: str, cell10: str, legend: str = "  X = Self\n  NV# = NVLinks\n  PIX = bridge\n") -> str:
    return f"\tGPU0\tGPU1\nGPU0\t X \t{cell01}\nGPU1\t{cell10}\t X \n\nLegend:\n{legend}"


@pytest.mark.parametrize(
    ("doc", "match"),
    [
        (_two("NV4", "PIX"), r"t:2: row GPU0, column GPU1: is NV4 but row GPU1, column GPU0 \(line 3\) is PIX"),
        (_two("QQQ", "QQQ"), r"t:2: row GPU0, column GPU1: 'QQQ' is not a connection type"),
        (_two("X", "X"), r"t:2: row GPU0, column GPU1: 'X' \(self\) belongs on the diagonal only"),
        (_two("PXB", "PXB"), r"t:2: row GPU0, column GPU1: 'PXB' is not defined in the Legend"),
        (_two("NV0", "NV0"), r"NV0 names no NVLink"),
        ("\tGPU0\tGPU1\nGPU1\t X \tPIX\n", r"t:2: expected the row of GPU0, got 'GPU1'"),
        ("nothing here\n", r"t: no header line starting with 'GPU0'"),
        ("\tGPU0\tNIC0\nGPU0\t X \tNV2\nNIC0\tNV2\t X \n\nLegend:\n  X = Self\n  NV# = NVLinks\n",
         r"NVLink \(NV2\) between a GPU and a NIC"),
        ("\tGPU0\tNIC0\nGPU0\t X \tPIX\nNIC0\tPIX\t X \n\nLegend:\n  X = Self\n  PIX = bridge\n",
         r"t: the header names NIC0 but no 'NIC Legend:' entry"),
    ],
)
def test_malformed_matrix_names_the_culprit(doc: str, match: str) -> None:
    with pytest.raises(TopologyError, match=match):
        parse_topo_matrix(doc, source="t")

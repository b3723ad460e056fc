"""synth/topologies/probe/gpus.py: GPU names from nvidia-smi and the per-model link figures."""

from __future__ import annotations

import pytest

from synth.errors import TopologyError
from synth.topologies.probe import gpu_model, parse_gpu_names
from tests.synth.topologies.probe._vectors import text


def test_names_from_nvidia_smi_l_and_from_csv() -> None:
    assert parse_gpu_names(text("dgx-h100.gpus.txt")) == ("NVIDIA H100 80GB HBM3",) * 8
    assert parse_gpu_names(text("a100-2nic.gpus.csv")) == ("NVIDIA A100-SXM4-80GB",) * 8
    assert parse_gpu_names("index, name\n0, Tesla V100-SXM2-32GB\n1, Tesla V100-SXM2-32GB\n") == (
        "Tesla V100-SXM2-32GB",) * 2


@pytest.mark.parametrize(
    ("name", "model", "gbps", "links"),
    [("NVIDIA H100 80GB HBM3", "H100", 200.0, 18), ("NVIDIA H200", "H200", 200.0, 18),
     ("NVIDIA H20", "H20", 200.0, 18), ("NVIDIA A100-SXM4-80GB", "A100", 200.0, 12),
     ("NVIDIA B200", "B200", 400.0, 18), ("Tesla P100-SXM2-16GB", "P100", 160.0, 4),
     ("NVIDIA L40S", "L40S", None, None)],
)
def test_models(name: str, model: str, gbps: float | None, links: int | None) -> None:
    m = gpu_model(name)
    assert m is not None and (m.name, m.nvlink_gbps_per_link, m.nvlinks_per_gpu) == (model, gbps, links)


def test_unknown_model() -> None:
    assert gpu_model("NVIDIA GeForce RTX 4090") is None


@pytest.mark.parametrize(
    ("doc", "match"),
    [("GPU 0: NVIDIA H100 (UUID: GPU-1)\nGPU 2: NVIDIA H100 (UUID: GPU-2)\n", r"^g:2: expected GPU 1, got GPU 2"),
     ("GPU 0: NVIDIA H100 (UUID: GPU-1)\ngarbage\n", r"^g:2: expected 'GPU N: NAME"),
     ("memory.total\n80 GiB\n", r"^g:1: neither `nvidia-smi -L` output"),
     ("name, index\nNVIDIA H100\n", r"^g:2: 1 CSV field\(s\), the header has 2"),
     ("", r"^g: empty GPU list")],
)
def test_malformed_gpu_list(doc: str, match: str) -> None:
    with pytest.raises(TopologyError, match=match):
        parse_gpu_names(doc, source="g")

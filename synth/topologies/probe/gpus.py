"""GPU names from ``nvidia-smi -L`` / ``--query-gpu=name --format=csv``, and per-link speeds by model.

``nvidia-smi topo -m`` says how many NVLinks join two GPUs (``NV18``) but not how fast one is, and
nothing about PCIe. :data:`GPU_MODELS` holds the documented figures per model, each direction:

====================  ======  ==============  =========  =================
model                 NVLink  Gbit/s / link   links/GPU  PCIe x16 (Gbit/s)
====================  ======  ==============  =========  =================
P100                  1       160 (20 GB/s)   4          126 (Gen3)
V100                  2       200 (25 GB/s)   6          126 (Gen3)
A100 / A800           3       200             12 / 8     252 (Gen4)
H100 H200 H20 GH200   4       200             18         504 (Gen5)
H800                  4       200             8          504 (Gen5)
B100 / B200 / GB200   5       400 (50 GB/s)   18         504 (Gen5)
L40S L40 L4 A40 A10   none    -               -          252 (Gen4)
T4                    none    -               -          126 (Gen3)
====================  ======  ==============  =========  =================

So an H100 with ``NV18`` has 18 × 200 = 3600 Gbit/s of NVLink, an A100 with ``NV12`` 2400.

Examples
--------
>>> names = parse_gpu_names("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5a1c)\\n", source="gpus.txt")
>>> names, gpu_model(names[0]).nvlink_gbps_per_link
(('NVIDIA H100 80GB HBM3',), 200.0)
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from synth.errors import TopologyError, short_repr

__all__ = ["GPU_MODELS", "MAX_NVLINKS_PER_GPU", "GpuModel", "gpu_model", "parse_gpu_names"]


@dataclass(frozen=True, slots=True)
class GpuModel:
    """Link figures of a GPU model (each direction); ``nvlink_gbps_per_link`` ``None`` without NVLink."""

    name: str
    nvlink_gbps_per_link: float | None
    nvlinks_per_gpu: int | None
    pcie_gbps: float


_GEN3, _GEN4, _GEN5 = 126.0, 252.0, 504.0

GPU_MODELS: tuple[GpuModel, ...] = (
    GpuModel("GB200", 400.0, 18, _GEN5),
    GpuModel("B200", 400.0, 18, _GEN5),
    GpuModel("B100", 400.0, 18, _GEN5),
    GpuModel("GH200", 200.0, 18, _GEN5),
    GpuModel("H200", 200.0, 18, _GEN5),
    GpuModel("H100", 200.0, 18, _GEN5),
    GpuModel("H800", 200.0, 8, _GEN5),
    GpuModel("H20", 200.0, 18, _GEN5),
    GpuModel("A100", 200.0, 12, _GEN4),
    GpuModel("A800", 200.0, 8, _GEN4),
    GpuModel("V100", 200.0, 6, _GEN3),
    GpuModel("P100", 160.0, 4, _GEN3),
    GpuModel("L40S", None, None, _GEN4),
    GpuModel("L40", None, None, _GEN4),
    GpuModel("L4", None, None, _GEN4),
    GpuModel("A40", None, None, _GEN4),
    GpuModel("A10", None, None, _GEN4),
    GpuModel("T4", None, None, _GEN3),
)

#: The most NVLinks any GPU of :data:`GPU_MODELS` has: the NVSwitch test's bound for an unknown model.
MAX_NVLINKS_PER_GPU = 18

_MODEL_RE = re.compile(r"(?<![A-Z0-9])(" + "|".join(m.name for m in GPU_MODELS) + r")(?![A-Z0-9])")


def gpu_model(name: str) -> GpuModel | None:
    """The model a GPU name denotes (``"NVIDIA A100-SXM4-80GB"`` → A100), ``None`` if unknown.

    >>> gpu_model("Tesla V100-SXM2-32GB").name, gpu_model("NVIDIA GeForce RTX 4090") is None
    ('V100', True)
    """
    m = _MODEL_RE.search(name.upper())
    if m is None:
        return None
    return next(g for g in GPU_MODELS if g.name == m.group(1))


def parse_gpu_names(text: str, *, source: str = "<gpu list>") -> tuple[str, ...]:
    """GPU names in index order, from ``nvidia-smi -L`` or ``nvidia-smi --query-gpu=name --format=csv``.

    ``-L`` lines read ``GPU 0: NAME (UUID: …)``; the CSV has a header line with a ``name`` column
    (other columns may follow, e.g. ``--query-gpu=index,name``).

    Raises
    ------
    TopologyError
        Neither form; ``-L`` indices out of order; a CSV row without the ``name`` column.

    >>> parse_gpu_names("name\\nNVIDIA A100-SXM4-80GB\\nNVIDIA A100-SXM4-80GB\\n", source="q.csv")
    ('NVIDIA A100-SXM4-80GB', 'NVIDIA A100-SXM4-80GB')
    """
    lines = [(no, line.strip()) for no, line in enumerate(text.splitlines(), start=1) if line.strip()]
    if not lines:
        raise TopologyError(f"{source}: empty GPU list")
    if lines[0][1].startswith("GPU "):
        names: list[str] = []
        for no, line in lines:
            m = re.match(r"GPU (\d+): (.+?)(?: \((?:UUID|S/N): [^)]*\))*\Z", line)
            if not m:
                if line.startswith(("MIG ", "MIG-")):
                    continue  # MIG instances are listed under their GPU
                raise TopologyError(f"{source}:{no}: expected 'GPU N: NAME (UUID: ...)', got {short_repr(line)}")
            if int(m.group(1)) != len(names):
                raise TopologyError(f"{source}:{no}: expected GPU {len(names)}, got GPU {m.group(1)}")
            names.append(m.group(2).strip())
        return tuple(names)
    header = [h.strip().lower() for h in lines[0][1].split(",")]
    if "name" not in header:
        raise TopologyError(f"{source}:{lines[0][0]}: neither `nvidia-smi -L` output ('GPU 0: NAME') nor a CSV "
                            f"header with a 'name' column, got {short_repr(lines[0][1])}")
    col = header.index("name")
    out: list[str] = []
    for no, line in lines[1:]:
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != len(header):
            raise TopologyError(f"{source}:{no}: {len(cells)} CSV field(s), the header has {len(header)}")
        out.append(cells[col])
    if not out:
        raise TopologyError(f"{source}: the CSV has a header but no GPU")
    return tuple(out)

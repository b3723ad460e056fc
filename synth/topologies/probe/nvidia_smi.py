"""Parse the output of ``nvidia-smi topo -m``: the GPU/NIC connection matrix and its legends.

The documented layout: a header line naming the device columns (``GPU0 … GPU7``, then the NICs,
either as ``NIC0 …`` with a ``NIC Legend:`` block mapping ``NIC0: mlx5_0``, or, on older drivers,
directly as ``mlx5_0 …``), followed by the ``CPU Affinity`` / ``NUMA Affinity`` / ``GPU NUMA ID``
columns; one row per device; then ``Legend:`` defining the tokens ``X``, ``NV#``, ``PIX``,
``PXB``, ``PHB``, ``NODE``, ``SYS`` (``SOC`` on very old drivers, read as ``SYS``).

Every malformed input raises :class:`~synth.errors.TopologyError` naming the file and line.

Examples
--------
>>> text = '''\\tGPU0\\tGPU1\\tCPU Affinity
... GPU0\\t X \\tNV12\\t0-15
... GPU1\\tNV12\\t X \\t0-15
...
... Legend:
...   X    = Self
...   NV#  = Connection traversing a bonded set of # NVLinks
... '''
>>> m = parse_topo_matrix(text, source="topo.txt")
>>> m.gpus, m.cell("GPU0", "GPU1")
(('GPU0', 'GPU1'), Cell(relation=<Relation.NVLINK: 'NV'>, nvlinks=12))
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from functools import cached_property

from synth.errors import TopologyError, short_repr

__all__ = ["PCIE_LEVELS", "Cell", "Relation", "TopoMatrix", "parse_topo_matrix"]


class Relation(str, Enum):
    """How two devices are connected; the value is nvidia-smi's token (``NV`` stands for ``NV#``)."""

    SELF = "X"
    NVLINK = "NV"
    PIX = "PIX"
    PXB = "PXB"
    PHB = "PHB"
    NODE = "NODE"
    SYS = "SYS"


#: The PCIe relations from nearest to farthest (nvidia-smi's legend order, reversed).
PCIE_LEVELS: tuple[Relation, ...] = (Relation.PIX, Relation.PXB, Relation.PHB, Relation.NODE, Relation.SYS)


@dataclass(frozen=True, slots=True)
class Cell:
    """One matrix entry; ``nvlinks`` is the ``#`` of ``NV#`` (0 for every other relation)."""

    relation: Relation
    nvlinks: int = 0


@dataclass(frozen=True)
class TopoMatrix:
    """The parsed matrix: ``cells[i][j]`` relates ``devices[i]`` and ``devices[j]``.

    ``nics`` are device names (``mlx5_0``), after the NIC legend has been applied.
    """

    source: str
    gpus: tuple[str, ...]
    nics: tuple[str, ...]
    cells: tuple[tuple[Cell, ...], ...]

    @property
    def devices(self) -> tuple[str, ...]:
        return self.gpus + self.nics

    @cached_property
    def _index(self) -> dict[str, int]:
        return {d: i for i, d in enumerate(self.devices)}

    def cell(self, a: str, b: str) -> Cell:
        """The entry of devices ``a`` and ``b`` (column names such as ``GPU0`` or ``mlx5_3``)."""
        try:
            return self.cells[self._index[a]][self._index[b]]
        except KeyError as exc:
            raise TopologyError(f"{self.source}: no device {short_repr(exc.args[0])} in the matrix "
                                f"(devices: {', '.join(self.devices)})") from None


_GPU = re.compile(r"GPU\d+\Z")
_NIC_ALIAS = re.compile(r"NIC\d+\Z")
_NV = re.compile(r"NV(\d+)\Z")
_TRAILERS = re.compile(r"CPU Affinity|NUMA Affinity|GPU NUMA ID")
_TRAILER_WORDS = {"CPU", "NUMA", "GPU"}
_TOKENS = {"X": Relation.SELF, "PIX": Relation.PIX, "PXB": Relation.PXB, "PHB": Relation.PHB,
           "NODE": Relation.NODE, "SYS": Relation.SYS, "SOC": Relation.SYS}
_NIC_LEGEND_ENTRY = re.compile(r"\s*(NIC\d+)\s*:\s*(\S+)\s*\Z")


def _cell(token: str, where: str) -> Cell:
    m = _NV.match(token)
    if m:
        return Cell(Relation.NVLINK, int(m.group(1)))
    if token in _TOKENS:
        return Cell(_TOKENS[token])
    raise TopologyError(f"{where}: {short_repr(token)} is not a connection type (X, NV#, PIX, PXB, PHB, NODE, SYS)")


def _find_header(lines: list[str], source: str) -> int:
    for i, line in enumerate(lines):
        tokens = line.split()
        is_row = len(tokens) > 1 and (tokens[1] in _TOKENS or _NV.match(tokens[1]) is not None)
        if tokens and tokens[0] == "GPU0" and not is_row:
            return i
    raise TopologyError(f"{source}: no header line starting with 'GPU0' found: "
                        "is this the output of `nvidia-smi topo -m`?")


def _header_columns(line: str) -> tuple[list[str], int]:
    """The device column names and how many affinity columns follow them."""
    tokens = line.split()
    devices: list[str] = []
    for tok in tokens:
        if tok in _TRAILER_WORDS:
            break
        devices.append(tok)
    return devices, len(_TRAILERS.findall(line))


def _legend_tokens(lines: list[str], start: int) -> set[str]:
    """The tokens the ``Legend:`` block defines (``X``, ``NV#``, ``PIX`` …)."""
    out: set[str] = set()
    for line in lines[start:]:
        if line.strip().endswith("Legend:") and line.strip() != "Legend:":
            break  # the NIC legend begins
        key, sep, _ = line.partition("=")
        if sep and key.strip():
            out.add(key.strip())
    return out


def _nic_legend(lines: list[str], start: int, source: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for i in range(start, len(lines)):
        if not lines[i].strip():
            continue
        m = _NIC_LEGEND_ENTRY.match(lines[i])
        if not m:
            break
        if m.group(1) in out:
            raise TopologyError(f"{source}:{i + 1}: {m.group(1)} appears twice in the NIC legend")
        out[m.group(1)] = m.group(2)
    return out


def parse_topo_matrix(text: str, *, source: str = "<nvidia-smi topo -m>") -> TopoMatrix:
    """Parse ``nvidia-smi topo -m`` output (see the module docstring for the format).

    Parameters
    ----------
    text
        The whole output, legends included (lines before the header, e.g. a shell prompt, are skipped).
    source
        What to call the input in error messages (a file name).

    Raises
    ------
    TopologyError
        No header; a row with too few or too many cells, or out of order; an unknown token; a missing
        ``Legend:`` (the output was cut short) or a token it does not define; ``NIC#`` columns without
        a ``NIC Legend:`` entry; ``X`` off the diagonal; an asymmetric entry; NVLink to a NIC.

    Examples
    --------
    >>> parse_topo_matrix("GPU0 GPU1\\nGPU0 X PIX\\n", source="t.txt")
    Traceback (most recent call last):
    ...
    synth.errors.TopologyError: t.txt:2: the matrix has 1 row(s), expected 2 (GPU0, GPU1)
    """
    lines = text.splitlines()
    head = _find_header(lines, source)
    devices, ntrail = _header_columns(lines[head])
    if len(set(devices)) != len(devices):
        raise TopologyError(f"{source}:{head + 1}: a device column appears twice in the header")
    gpus = [d for d in devices if _GPU.match(d)]
    if devices[: len(gpus)] != gpus:
        raise TopologyError(f"{source}:{head + 1}: the GPU columns must come first, got {' '.join(devices)}")
    n = len(devices)
    rows: list[tuple[Cell, ...]] = []
    row_line: list[int] = []
    i = head + 1
    while i < len(lines) and lines[i].strip() and not lines[i].strip().startswith("Legend"):
        tokens = lines[i].split()
        where = f"{source}:{i + 1}"
        if len(rows) == n:
            raise TopologyError(f"{where}: a row beyond the {n} devices of the header: {short_repr(tokens[0])}")
        if tokens[0] != devices[len(rows)]:
            raise TopologyError(f"{where}: expected the row of {devices[len(rows)]}, got {short_repr(tokens[0])}")
        ncells = len(tokens) - 1
        # A GPU row fills every affinity column; NIC rows leave them empty.
        low = n + ntrail if len(rows) < len(gpus) else n
        if not low <= ncells <= n + ntrail:
            expect = f"{low}" if low == n + ntrail else f"{n} to {n + ntrail}"
            raise TopologyError(f"{where}: row {tokens[0]} has {ncells} cells, expected {expect} ({n} device "
                                f"columns {devices[0]}..{devices[-1]} and {ntrail} affinity column(s))")
        rows.append(tuple(_cell(tok, f"{where}: row {tokens[0]}, column {col}")
                          for tok, col in zip(tokens[1: n + 1], devices)))
        row_line.append(i + 1)
        i += 1
    if len(rows) != n:
        raise TopologyError(f"{source}:{i + 1 if i < len(lines) else len(lines)}: the matrix has {len(rows)} row(s), "
                            f"expected {n} ({', '.join(devices)})")
    legend_at = next((j for j in range(i, len(lines)) if lines[j].strip() == "Legend:"), None)
    if legend_at is None:
        raise TopologyError(f"{source}: no 'Legend:' block after the matrix (line {i}): the output looks cut "
                            "short; paste the whole output of `nvidia-smi topo -m`")
    _check_cells(rows, devices, len(gpus), row_line, _legend_tokens(lines, legend_at + 1), source)
    nics = devices[len(gpus):]
    if any(_NIC_ALIAS.match(d) for d in nics):
        legend_line = next((j for j in range(i, len(lines)) if lines[j].strip() == "NIC Legend:"), None)
        mapping = {} if legend_line is None else _nic_legend(lines, legend_line + 1, source)
        missing = [d for d in nics if _NIC_ALIAS.match(d) and d not in mapping]
        if missing:
            raise TopologyError(f"{source}: the header names {', '.join(missing)} but no 'NIC Legend:' entry "
                                f"says which device it is (e.g. '  NIC0: mlx5_0')")
        nics = [mapping.get(d, d) for d in nics]
        if len(set(nics)) != len(nics):
            raise TopologyError(f"{source}: the NIC legend names a device twice: {', '.join(nics)}")
    return TopoMatrix(source, tuple(gpus), tuple(nics), tuple(rows))


def _check_cells(rows: list[tuple[Cell, ...]], devices: list[str], ngpus: int, row_line: list[int],
                 legend: set[str], source: str) -> None:
    for a, row in enumerate(rows):
        for b, cell in enumerate(row):
            where = f"{source}:{row_line[a]}: row {devices[a]}, column {devices[b]}"
            if (cell.relation is Relation.SELF) != (a == b):
                raise TopologyError(f"{where}: 'X' (self) belongs on the diagonal only, got {_token(cell)!r}")
            if cell.relation is Relation.NVLINK and (a >= ngpus or b >= ngpus):
                raise TopologyError(f"{where}: NVLink ({_token(cell)}) between a GPU and a NIC is not possible")
            if cell.relation is Relation.NVLINK and cell.nvlinks == 0:
                raise TopologyError(f"{where}: NV0 names no NVLink")
            token = "NV#" if cell.relation is Relation.NVLINK else _token(cell)
            if token not in legend and not (token == "SYS" and "SOC" in legend):
                raise TopologyError(f"{where}: {_token(cell)!r} is not defined in the Legend block")
            other = rows[b][a]
            if other != cell:
                raise TopologyError(f"{where}: is {_token(cell)} but row {devices[b]}, column {devices[a]} "
                                    f"(line {row_line[b]}) is {_token(other)}: the matrix must be symmetric")


def _token(cell: Cell) -> str:
    return f"NV{cell.nvlinks}" if cell.relation is Relation.NVLINK else cell.relation.value

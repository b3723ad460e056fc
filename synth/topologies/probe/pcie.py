"""The PCIe tree of a host, read from the distances of ``nvidia-smi topo -m``.

The relations nest: devices within ``PIX`` of each other share a PCIe switch, within ``PXB`` a
tree of switches, within ``PHB`` a host bridge, within ``NODE`` a NUMA node, and ``SYS`` spans the
sockets. For each level in that order the devices fall into groups (connected components of "at
most this far apart"); every distinct group of two or more devices becomes one switch, joined to
the smallest group that contains it, and a device to the smallest group that holds it. A pair
joined by NVLink (``NV#``) shows no PCIe distance and joins no group.

Examples
--------
>>> dist = {("a", "b"): 0, ("a", "c"): 4, ("b", "c"): 4}      # a, b on one switch; c across sockets
>>> groups, parent, attach = pcie_tree(["a", "b", "c"], lambda u, v: dist.get((u, v), dist.get((v, u))))
>>> groups, parent, attach
((('a', 'b'), ('a', 'b', 'c')), (1, None), {'a': 0, 'b': 0, 'c': 1})
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

__all__ = ["pcie_tree"]


def _components(devices: Sequence[str], near: Callable[[str, str], bool]) -> list[tuple[str, ...]]:
    root = {d: d for d in devices}

    def find(d: str) -> str:
        while root[d] != d:
            root[d] = root[root[d]]
            d = root[d]
        return d

    for i, u in enumerate(devices):
        for v in devices[i + 1:]:
            if near(u, v):
                root[find(u)] = find(v)
    groups: dict[str, list[str]] = {}
    for d in devices:
        groups.setdefault(find(d), []).append(d)
    return [tuple(g) for g in groups.values()]


def pcie_tree(
    devices: Sequence[str], level: Callable[[str, str], int | None], levels: int = 5
) -> tuple[tuple[tuple[str, ...], ...], tuple[int | None, ...], dict[str, int]]:
    """The switch groups of the PCIe tree (module docstring).

    Parameters
    ----------
    devices
        Device names in matrix order.
    level
        Distance of two devices, ``0..levels-1`` (PIX … SYS), or ``None`` where unknown (NVLink).

    Returns
    -------
    groups, parent, attach
        Each group's devices (in ``devices`` order), sorted by size then first device; the index
        of each group's parent group (``None`` for the top); the group each device hangs from.
        The top group holds every device, unless some device has no known distance to the rest.
    """
    order = {d: i for i, d in enumerate(devices)}
    found: dict[frozenset[str], tuple[str, ...]] = {}
    for lv in range(levels):

        def near(u: str, v: str, lv: int = lv) -> bool:
            d = level(u, v)
            return d is not None and d <= lv

        for comp in _components(devices, near):
            if len(comp) >= 2:
                found.setdefault(frozenset(comp), comp)
    groups = tuple(sorted(found.values(), key=lambda g: (len(g), order[g[0]])))
    sets = [frozenset(g) for g in groups]
    parent = tuple(
        next((j for j in range(i + 1, len(sets)) if sets[i] < sets[j]), None) for i in range(len(sets))
    )
    attach = {d: next(i for i, s in enumerate(sets) if d in s) for d in devices if any(d in s for s in sets)}
    return groups, parent, attach

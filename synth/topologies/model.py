"""The immutable topology model: GPU and switch nodes joined by directed, capacitated links.

:class:`Topology` is :class:`~synth.topologies._core.TopologyCore` (parts, validation, lookups,
changed copies) plus the views other modules build: a communicator's sub-topology and the failure
scenarios. The parts (:class:`Node`, :class:`Link`, ...) live in :mod:`synth.topologies.parts`.

Examples
--------
>>> from synth.topologies import named_topology
>>> topo = named_topology("ring:4")
>>> topo.nranks, len(topo.links), topo.link("gpu0", "gpu1").GBps
(4, 8, 50.0)
>>> topo.communicator([2, 3]).global_ranks, topo.with_failure("scale:gpu0:gpu1:0.5").name
((2, 3), 'ring-4+scale:gpu0:gpu1:0.5')
"""

from __future__ import annotations

from collections.abc import Iterable

from synth._types import Rank
from synth.topologies._core import TopologyCore
from synth.topologies.communicator import communicator, global_ranks
from synth.topologies.failures import apply_failure
from synth.topologies.parts import ROLES, Link, Node, NodeKind, exact_gbps

__all__ = ["ROLES", "Link", "Node", "NodeKind", "Topology", "exact_gbps"]


class Topology(TopologyCore):
    """A validated, immutable topology (see :class:`~synth.topologies._core.TopologyCore` for its
    fields and lookups).

    Build one with :func:`synth.topologies.named_topology`, :func:`synth.topologies.load_topology`
    or :meth:`Topology.create`, which validates.

    Examples
    --------
    >>> from synth.topologies import named_topology
    >>> t = named_topology("nvswitch:4")
    >>> [n.id for n in t.gpus]
    ['gpu0', 'gpu1', 'gpu2', 'gpu3']
    >>> t.scaled("gpu0", "nvs0.0", 0.5).link("nvs0.0", "gpu0").gbps
    1440.0
    """

    def communicator(self, ranks: Iterable[Rank], *, relay: bool = False) -> Topology:
        """The sub-topology of these global ranks, re-ranked in order (:mod:`synth.topologies.communicator`)."""
        return communicator(self, ranks, relay=relay)

    @property
    def global_ranks(self) -> tuple[Rank, ...]:
        """Global rank of each rank: a communicator's mapping, else ``0..nranks-1``."""
        return global_ranks(self)

    def with_failure(self, scenario: str) -> Topology:
        """Apply a failure scenario (``fail1``, ``fail2``, ``fail3``, ``scale:SRC:DST:F``)."""
        return apply_failure(self, scenario)

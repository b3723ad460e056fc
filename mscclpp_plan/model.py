"""MSCCL++ execution plan model: one frozen dataclass per JSON object of the plan format.

Field names follow the JSON keys of the executor's reader (``execution_plan.cc``). Keys the
reader does not know are kept in ``extra`` (key, JSON text) pairs so a plan is written back
with them.

Examples
--------
>>> ref = BufferRef(index=0, size=1, type="o")
>>> op = Op(name="copy", src_buff=(ref,), dst_buff=(BufferRef(index=1, size=1, type="o"),))
>>> op.is_control, ref.remote
(False, False)
>>> Op(name="signal", channel_ids=(0,), channel_type="memory").is_control
True
"""

from __future__ import annotations

from dataclasses import dataclass

from .limits import CONTROL_OPS

__all__ = [
    "BufferRef",
    "ChannelDecl",
    "Op",
    "Plan",
    "PlanGpu",
    "RemoteBuffer",
    "TbChannels",
    "TbRemoteRefs",
    "Threadblock",
]

Extra = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class BufferRef:
    """One ``src_buff`` / ``dst_buff`` entry: chunks ``[index, index + size)`` of a buffer.

    Exactly one of ``type`` (a local ``"i"``, ``"o"``, ``"s"``), ``buffer_id`` (the op's
    threadblock's ``buffer_id``-th remote buffer of the op's channel type) or
    ``switch_channel_id`` names the buffer.
    """

    index: int
    size: int
    type: str | None = None
    buffer_id: int | None = None
    switch_channel_id: int | None = None

    @property
    def remote(self) -> bool:
        """True if the entry names a peer's buffer (``buffer_id``)."""
        return self.buffer_id is not None


@dataclass(frozen=True, slots=True)
class Op:
    """One operation of a threadblock (``ops`` entry); a ``pipeline`` holds inner ``ops``.

    ``tbg`` is ``(tb_id, tbg_size)`` of ``tbg_info``; ``iter_context`` is
    ``(unit_size, num_chunks)``.
    """

    name: str
    src_buff: tuple[BufferRef, ...] = ()
    dst_buff: tuple[BufferRef, ...] = ()
    channel_ids: tuple[int, ...] | None = None
    channel_type: str | None = None
    reduce_op: str | None = None
    semaphore_ids: tuple[int, ...] | None = None
    barrier_id: int | None = None
    num_threadblocks: int | None = None
    tbg: tuple[int, int] | None = None
    iter_context: tuple[int, int] | None = None
    ops: tuple[Op, ...] = ()
    extra: Extra = ()

    @property
    def is_control(self) -> bool:
        """True for ops run by a block's first threads only (signals, waits, semaphores, and
        puts over port channels, which only post a request to the proxy)."""
        if self.name in CONTROL_OPS:
            return True
        return self.name in ("put", "pws", "pwsf") and self.channel_type == "port"


@dataclass(frozen=True, slots=True)
class TbChannels:
    """A threadblock's ``channels`` entry: indices into the GPU's flattened channels of a type."""

    channel_type: str
    channel_ids: tuple[int, ...]
    buff: str | None = None


@dataclass(frozen=True, slots=True)
class TbRemoteRefs:
    """A threadblock's ``remote_buffer_refs`` entry: GPU remote buffers it reaches over a type."""

    access_channel_type: str
    remote_buffer_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Threadblock:
    """One thread block: its ops in order, and the channels and remote buffers they index."""

    id: int
    ops: tuple[Op, ...]
    channels: tuple[TbChannels, ...] = ()
    remote_buffer_refs: tuple[TbRemoteRefs, ...] = ()


@dataclass(frozen=True, slots=True)
class ChannelDecl:
    """A GPU's ``channels`` entry: one channel per ``connected_to`` peer (memory/port), or a
    switch channel with ``buffer_type`` and ``rank_groups`` ((size, ranks), ...)."""

    channel_type: str
    connected_to: tuple[int, ...] = ()
    buffer_type: str | None = None
    rank_groups: tuple[tuple[int, tuple[int, ...]], ...] = ()
    buffer_key: str = "buffer_type"  # the DSL at the target commit writes "buff"; the executor reads this


@dataclass(frozen=True, slots=True)
class RemoteBuffer:
    """A GPU's ``remote_buffers`` entry: buffer ``type`` of ``rank``, reachable over channel types."""

    rank: int
    type: str
    access_channel_types: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class PlanGpu:
    """One ``gpus`` entry. Chunk counts size the buffers: a chunk is ``input size / input_chunks``."""

    id: int
    input_chunks: int
    output_chunks: int
    scratch_chunks: int
    threadblocks: tuple[Threadblock, ...]
    channels: tuple[ChannelDecl, ...] = ()
    remote_buffers: tuple[RemoteBuffer, ...] = ()
    semaphores: tuple[int, ...] = ()  # init values

    def flat_channels(self, channel_type: str) -> tuple[int, ...]:
        """Peers of the GPU's channels of ``channel_type``, in the executor's flattened order.

        >>> PlanGpu(0, 1, 1, 0, (), (ChannelDecl("memory", (1, 2)), ChannelDecl("port", (3,)),
        ...         ChannelDecl("memory", (1,)))).flat_channels("memory")
        (1, 2, 1)
        """
        return tuple(p for c in self.channels if c.channel_type == channel_type for p in c.connected_to)


@dataclass(frozen=True, slots=True)
class Plan:
    """A whole execution plan (one JSON file for all ranks)."""

    name: str
    collective: str
    protocol: str
    inplace: bool
    gpus: tuple[PlanGpu, ...]
    reuse_resources: bool = False
    num_threads_per_block: int = 1024
    use_double_scratch_buffer: bool = False
    buffer_alignment: int = 16
    min_message_size: int = 0
    max_message_size: int = 2**64 - 1
    extra: Extra = ()

    @property
    def nranks(self) -> int:
        """Number of GPUs."""
        return len(self.gpus)

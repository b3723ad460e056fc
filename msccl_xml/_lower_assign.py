"""Lowering, second pass: operations -> channels, threadblocks, dependencies, nops, Program.

Channels are chosen per relay chain (all its operations share the channel). On each GPU and
channel a threadblock owns at most one send peer and one recv peer, and each peer is owned by at
most one threadblock (the executor's one-tb-per-(channel, peer) rule); a chain goes to the open
channel where it fits with the shortest resulting threadblocks, and a new channel is opened only
when none fits. Dependencies are derived from chunk accesses (read-after-write, write-after-write,
write-after-read) between threadblocks of one GPU in key order, keeping only the latest step per
threadblock and dropping what an earlier step already waited for; a step with several becomes
nops (one dependency each) followed by the step with the remaining one.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import cast

from synth.errors import XmlError

from ._lower_ops import Op
from .program import BufferKind, Step, Threadblock, nop

__all__ = ["assign_channels", "build_threadblocks"]


@dataclass(slots=True)
class _Tb:
    send: int
    recv: int
    chan: int
    ops: list[Op] = field(default_factory=list)


@dataclass(slots=True)
class _Lane:
    """Threadblocks of one (gpu, channel)."""

    tbs: list[_Tb] = field(default_factory=list)
    send_owner: dict[int, _Tb] = field(default_factory=dict)
    recv_owner: dict[int, _Tb] = field(default_factory=dict)

    def fit(self, op: Op) -> tuple[int, _Tb | None, _Tb | None] | None:
        """Resulting tb size if ``op`` is placed here, with the tbs it would join; None if not."""
        a = self.send_owner.get(op.send) if op.send >= 0 else None
        b = self.recv_owner.get(op.recv) if op.recv >= 0 else None
        if op.send >= 0 and op.recv >= 0:
            if a is not None and b is not None and a is not b:
                if a.recv != -1 or b.send != -1:
                    return None
                return len(a.ops) + len(b.ops) + 1, a, b
            if a is not None and b is None and a.recv != -1:
                return None
            if b is not None and a is None and b.send != -1:
                return None
        owner = a if a is not None else b
        size = len(owner.ops) + 1 if owner is not None else 1
        return size, a, b

    def place(self, op: Op, chan: int) -> None:
        fitted = self.fit(op)
        assert fitted is not None
        _, a, b = fitted
        if a is None and b is None:
            tb = _Tb(op.send, op.recv, chan)
            self.tbs.append(tb)
        elif a is not None and b is not None and a is not b:
            a.recv = b.recv
            a.ops.extend(b.ops)
            self.tbs.remove(b)
            tb = a
        else:
            tb = a or b  # type: ignore[assignment]
            assert tb is not None
            if op.send >= 0:
                tb.send = op.send
            if op.recv >= 0:
                tb.recv = op.recv
        tb.ops.append(op)
        if tb.send >= 0:
            self.send_owner[tb.send] = tb
        if tb.recv >= 0:
            self.recv_owner[tb.recv] = tb


def assign_channels(
    ops: list[Op], nchains: int, *, max_channels: int, max_steps: int
) -> dict[tuple[int, int], _Lane]:
    """Place every operation on a (gpu, channel) lane; local operations go to channel 0."""
    by_chain: list[list[Op]] = [[] for _ in range(nchains)]
    local: list[Op] = []
    for op in ops:
        (local if op.chain < 0 else by_chain[op.chain]).append(op)
    lanes: dict[tuple[int, int], _Lane] = defaultdict(_Lane)
    nchan = 1
    for chain_ops in by_chain:
        best: tuple[int, int] | None = None
        for chan in range(nchan + 1):
            if chan == max_channels:
                break
            if chan == nchan and best is not None:
                break
            worst = 0
            for op in chain_ops:
                fitted = lanes[(op.gpu, chan)].fit(op)
                if fitted is None or fitted[0] > max_steps:
                    worst = -1
                    break
                worst = max(worst, fitted[0])
            if worst >= 0 and (best is None or worst < best[0]):
                best = (worst, chan)
        if best is None:
            where = ", ".join(f"gpu {op.gpu}" for op in chain_ops[:3])
            raise XmlError(
                f"lowering: a relay chain through {where} fits on none of {max_channels} channels "
                f"with at most {max_steps} steps per threadblock; raise max_channels (the runtime "
                "allows up to its channel limit; a channel holds one threadblock per send peer and "
                "per recv peer) or lower the schedule's nchunks"
            )
        chan = best[1]
        nchan = max(nchan, chan + 1)
        for op in chain_ops:
            lanes[(op.gpu, chan)].place(op, chan)
    for op in local:
        lane = lanes[(op.gpu, 0)]
        tb = next((t for t in lane.tbs if t.send == -1 and t.recv == -1), None)
        if tb is None:
            tb = _Tb(-1, -1, 0)
            lane.tbs.append(tb)
        tb.ops.append(op)
    return lanes


def build_threadblocks(
    lanes: dict[tuple[int, int], _Lane], ngpus: int, *, max_dep_tb: int
) -> dict[int, tuple[Threadblock, ...]]:
    """Number threadblocks, order their steps, add dependencies and nops."""
    per_gpu: dict[int, list[_Tb]] = defaultdict(list)
    for (gpu, _), lane in sorted(lanes.items()):
        per_gpu[gpu].extend(lane.tbs)
    result: dict[int, tuple[Threadblock, ...]] = {}
    for gpu in range(ngpus):
        tbs = sorted(per_gpu.get(gpu, []), key=lambda t: (t.send, t.recv, t.chan))
        result[gpu] = _gpu_threadblocks(gpu, tbs, max_dep_tb)
    return result


def _slots(ref: tuple[BufferKind, int] | None, cnt: int) -> list[tuple[BufferKind, int]]:
    return [] if ref is None else [(ref[0], ref[1] + k) for k in range(cnt)]


def _gpu_threadblocks(gpu: int, tbs: list[_Tb], max_dep_tb: int) -> tuple[Threadblock, ...]:
    for tb in tbs:
        tb.ops.sort(key=lambda o: o.key)
    tb_of: dict[int, int] = {}
    order: list[tuple[int, int]] = []  # (tb index, position) in key order
    for t, tb in enumerate(tbs):
        for pos, op in enumerate(tb.ops):
            tb_of[id(op)] = t
            order.append((t, pos))
    order.sort(key=lambda tp: tbs[tp[0]].ops[tp[1]].key)
    last_write: dict[tuple[BufferKind, int], tuple[int, int]] = {}
    readers: dict[tuple[BufferKind, int], list[tuple[int, int]]] = defaultdict(list)
    deps: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for t, pos in order:
        op = tbs[t].ops[pos]
        needed: dict[int, int] = {}
        reads = _slots(op.src, op.cnt) if op.type.reads_src else []
        writes = _slots(op.dst, op.cnt) if op.type.writes_dst else []
        for slot in reads + writes:
            w = last_write.get(slot)
            if w is not None and w[0] != t:
                needed[w[0]] = max(needed.get(w[0], -1), w[1])
        for slot in writes:
            for r in readers.pop(slot, []):
                if r[0] != t:
                    needed[r[0]] = max(needed.get(r[0], -1), r[1])
            last_write[slot] = (t, pos)
        for slot in reads:
            readers[slot].append((t, pos))
        deps[(t, pos)] = sorted(needed.items())
    # Prune what an earlier step of the same tb already waited for, then lay out steps.
    final_index: dict[tuple[int, int], int] = {}
    layouts: list[list[tuple[str, object]]] = []
    for t, tb in enumerate(tbs):
        waited: dict[int, int] = {}
        items: list[tuple[str, object]] = []
        for pos in range(len(tb.ops)):
            keep = [(d, p) for d, p in deps[(t, pos)] if waited.get(d, -1) < p]
            for d, p in keep:
                waited[d] = p
            for d, p in keep[1:]:
                items.append(("nop", (d, p)))
            final_index[(t, pos)] = len(items)
            items.append(("op", (pos, keep[0] if keep else None)))
        layouts.append(items)
    targets = {
        dep for items in layouts for kind, val in items
        for dep in ([val] if kind == "nop" else [val[1]] if val[1] else [])  # type: ignore[index]
    }  # fmt: skip
    out = []
    for t, (tb, items) in enumerate(zip(tbs, layouts)):
        steps = []
        for s, (kind, val) in enumerate(items):
            if kind == "nop":
                d, p = val  # type: ignore[misc]
                steps.append(_dep_nop(gpu, t, s, d, final_index[(d, p)], max_dep_tb))
                continue
            pos, dep = cast("tuple[int, tuple[int, int] | None]", val)
            op = tb.ops[pos]
            depid, deps_s = (-1, -1) if dep is None else (dep[0], final_index[dep])
            if depid > max_dep_tb:
                raise XmlError(_dep_error(gpu, t, depid, max_dep_tb))
            steps.append(_step(op, s, depid, deps_s, int((t, pos) in targets)))
        out.append(Threadblock(id=t, send=tb.send, recv=tb.recv, chan=tb.chan, steps=tuple(steps)))
    return tuple(out)


def _dep_error(gpu: int, t: int, depid: int, max_dep_tb: int) -> str:
    return (
        f"lowering: gpu {gpu} tb {t} must wait on tb {depid}, above the runtime's dependency "
        f"limit {max_dep_tb} (int8); use fewer channels or a schedule with fewer routes"
    )


def _dep_nop(gpu: int, t: int, s: int, d: int, deps: int, max_dep_tb: int) -> Step:
    if d > max_dep_tb:
        raise XmlError(_dep_error(gpu, t, d, max_dep_tb))
    return nop(depid=d, deps=deps, s=s)


def _step(op: Op, s: int, depid: int, deps: int, hasdep: int) -> Step:
    # Unused operand fields get the used ones (msccl-tools writes the peer's location there).
    src = op.src or op.dst
    dst = op.dst or op.src
    assert src is not None and dst is not None
    return Step(s=s, type=op.type, srcbuf=src[0], srcoff=src[1], dstbuf=dst[0], dstoff=dst[1],
                cnt=op.cnt, depid=depid, deps=deps, hasdep=hasdep)  # fmt: skip

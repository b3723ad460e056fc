"""Lowering, second pass: operations -> channels, threadblocks, dependencies, nops, Program.

Channels are chosen per relay chain (all its operations share the channel). On each GPU and
channel a threadblock owns at most one send peer and one recv peer, and each peer is owned by at
most one threadblock (the executor's one-tb-per-(channel, peer) rule); a chain goes to the open
channel where it fits with the shortest resulting threadblocks, and a new channel is opened only
when none fits. A chain that fits on no channel (deep trees on large fabrics: every relay GPU of
the chain must have a free (recv peer, send peer) pairing on one channel) is cut at relay steps
into the fewest consecutive segments that fit, each on its own channel. Dependencies are derived from chunk accesses (read-after-write, write-after-write,
write-after-read) between threadblocks of one GPU in key order, keeping only the latest step per
threadblock and dropping what an earlier step already waited for; a step with several becomes
nops (one dependency each) followed by the step with the remaining one.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

import numpy as np

from synth.errors import RuntimeLimitError

from ._lower_ops import RELAY_TYPES, Op
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
    max_peers: int = 1 << 30  # tbs with a send peer (and, separately, a recv peer) per channel
    sizes: dict[tuple[int, int], int] = field(default_factory=dict)  # size by (send, recv), until a place

    def size(self, op: Op) -> int:
        """Resulting tb size if ``op`` is placed here; ``-1`` if it fits not."""
        key = (op.send, op.recv)
        got = self.sizes.get(key)
        if got is None:
            got = self.sizes[key] = self._size(op.send, op.recv)
        return got

    def _size(self, send: int, recv: int) -> int:
        """:meth:`size` of an op with peers ``send`` and ``recv`` (``-1``: none)."""
        a = self.send_owner.get(send) if send >= 0 else None
        b = self.recv_owner.get(recv) if recv >= 0 else None
        # A new send (recv) peer on this channel means one more tb with a send (recv) peer.
        if send >= 0 and a is None and len(self.send_owner) >= self.max_peers:
            return -1
        if recv >= 0 and b is None and len(self.recv_owner) >= self.max_peers:
            return -1
        if send >= 0 and recv >= 0:
            if a is not None and b is not None and a is not b:
                if a.recv != -1 or b.send != -1:
                    return -1
                return len(a.ops) + len(b.ops) + 1
            if a is not None and b is None and a.recv != -1:
                return -1
            if b is not None and a is None and b.send != -1:
                return -1
        owner = a if a is not None else b
        return len(owner.ops) + 1 if owner is not None else 1

    def place(self, op: Op, chan: int) -> None:
        assert self.size(op) >= 0
        self.sizes.clear()
        a = self.send_owner.get(op.send) if op.send >= 0 else None
        b = self.recv_owner.get(op.recv) if op.recv >= 0 else None
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
    ops: list[Op],
    nchains: int,
    *,
    max_channels: int,
    max_steps: int,
    max_peers: int = 1 << 30,
    halves: Callable[[Op], tuple[Op, Op]] | None = None,
) -> dict[tuple[int, int], _Lane]:
    """Place every operation on a (gpu, channel) lane; local operations go to channel 0.

    A chain that fits on no channel is cut at relay steps into the fewest consecutive segments
    that each fit (greedily, longest first), using ``halves`` to split a relay step; without
    ``halves`` it is an error.
    """
    by_chain: list[list[Op]] = [[] for _ in range(nchains)]
    local: list[Op] = []
    for op in ops:
        (local if op.chain < 0 else by_chain[op.chain]).append(op)
    lanes: dict[tuple[int, int], _Lane] = defaultdict(lambda: _Lane(max_peers=max_peers))
    nchan = 1
    # Per (gpu, send, recv): the channels where such an op fits never again (see _worst_fit).
    dead: dict[tuple[int, int, int], set[int]] = {}

    def best_channel(seg: list[Op]) -> tuple[int, int] | None:
        best: tuple[int, int] | None = None
        first = [0]  # the op that last ruled a channel out goes first: it likely rules out the next
        ruled_out = set().union(*[dead.get((op.gpu, op.send, op.recv), ()) for op in seg])
        for chan in range(nchan + 1):
            if chan == max_channels:
                break
            if chan == nchan and best is not None:
                break
            if best is not None and best[0] <= 1:
                break  # every op takes at least one step: no channel can do better
            if chan in ruled_out:
                continue  # as _worst_fit would find: an op of ``seg`` fits there never again
            # a channel replaces the best only with a smaller worst size: stop once it cannot
            limit = max_steps if best is None else min(max_steps, best[0] - 1)
            worst = _worst_fit(lanes, seg, chan, limit, max_peers, first, (max_steps, dead))
            if worst >= 0 and (best is None or worst < best[0]):
                best = (worst, chan)
        return best

    def place(seg: list[Op], chan: int) -> None:
        nonlocal nchan
        nchan = max(nchan, chan + 1)
        for op in seg:
            lanes[(op.gpu, chan)].place(op, chan)

    for chain_ops in by_chain:
        if not chain_ops:
            continue
        best = best_channel(chain_ops)
        if best is not None:
            place(chain_ops, best[1])
            continue
        if halves is None or len(chain_ops) < 3 or any(op.type not in RELAY_TYPES for op in chain_ops[1:-1]):
            raise RuntimeLimitError(_no_channel(chain_ops[:3], max_channels, max_steps))
        last = len(chain_ops) - 1
        a = 0
        while a < last:
            found: tuple[list[Op], int, int] | None = None
            for b in range(a + 1, last + 1):
                first = chain_ops[a] if a == 0 else halves(chain_ops[a])[1]
                end = chain_ops[b] if b == last else halves(chain_ops[b])[0]
                seg = [first, *chain_ops[a + 1 : b], end]
                got = best_channel(seg)
                if got is None:
                    break
                found = (seg, got[1], b)
            if found is None:
                raise RuntimeLimitError(_no_channel(chain_ops[a : a + 2], max_channels, max_steps))
            place(found[0], found[1])
            a = found[2]
    _place_local(lanes, local)
    return lanes


def _place_local(lanes: dict[tuple[int, int], _Lane], local: list[Op]) -> None:
    """Local operations go to channel 0, to its tb without peers (made when missing)."""
    for op in local:
        lane = lanes[(op.gpu, 0)]
        tb = next((t for t in lane.tbs if t.send == -1 and t.recv == -1), None)
        if tb is None:
            tb = _Tb(-1, -1, 0)
            lane.tbs.append(tb)
        tb.ops.append(op)


def _worst_fit(lanes: dict[tuple[int, int], _Lane], seg: list[Op], chan: int, limit: int, max_peers: int,
               first: list[int], dead: tuple[int, dict[tuple[int, int, int], set[int]]]) -> int:
    """The largest tb size ``seg`` makes on channel ``chan``; ``-1`` if an op fits not or goes over ``limit``.

    Lanes not yet opened are not created (``max_peers``: their limit). The ops are tried from
    index ``first[0]`` on (the answer does not depend on the order), and ``first[0]`` becomes the
    one that ruled the channel out, if any.

    ``dead = (max_steps, channels)``: an op that fits not, or would make a tb over ``max_steps``,
    does so on that channel forever (a lane only gains peer owners, a tb's peers go from ``-1`` to
    one peer only, merges need both free ends, and tbs only grow), so ``chan`` is added to
    ``channels[(gpu, send, recv)]`` and the caller skips it for such ops from then on."""
    worst = 0
    n = len(seg)
    start = first[0]
    get = lanes.get
    for j in (range(n) if start == 0 else (*range(start, n), *range(start))):
        op = seg[j]
        lane = get((op.gpu, chan))
        if lane is None:  # an unopened lane: a new tb of one step, unless no peer may be added
            if (op.send >= 0 or op.recv >= 0) and max_peers <= 0:
                first[0] = j
                dead[1].setdefault((op.gpu, op.send, op.recv), set()).add(chan)
                return -1
            size = 1
        else:  # Lane.size, inlined (the hot loop of lowering)
            key = (op.send, op.recv)
            size = lane.sizes.get(key, -2)
            if size == -2:
                size = lane.sizes[key] = lane._size(op.send, op.recv)
        if size < 0 or size > limit:
            first[0] = j
            if size < 0 or size > dead[0]:
                dead[1].setdefault((op.gpu, op.send, op.recv), set()).add(chan)
            return -1
        if size > worst:
            worst = size
    return worst


def _no_channel(ops: list[Op], max_channels: int, max_steps: int) -> str:
    where = ", ".join(f"gpu {op.gpu}" for op in ops)
    return (
        f"lowering: a transfer chain through {where} fits on none of {max_channels} channels "
        f"with at most {max_steps} steps per threadblock; raise max_channels (the runtime "
        "allows up to its channel limit; a channel holds one threadblock per send peer and "
        "per recv peer) or lower the schedule's nchunks"
    )


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


def _access_deps(tbs: list[_Tb], order: list[tuple[int, int]]) -> dict[tuple[int, int], list[tuple[int, int]]]:
    """Per step ``(tb, position)``, in key order: the latest step of each other tb it must wait for
    (read-after-write, write-after-write, write-after-read on a chunk), as sorted ``(tb, position)``.

    Every chunk access becomes one row; per (chunk, step) group, in key order, a group waits for the
    last earlier group that writes the chunk, and a writing group also for every group that read the
    chunk since that write (a step that writes and reads a chunk reads it after its own write). All
    groups at once, with numpy: the pairs are each group's previous writer and each reading group's
    next writer. Reads of a buffer no step writes are left out (they have no writer and no later write).
    """
    written = {op.dst[0] for tb in tbs for op in tb.ops if op.type.writes_dst and op.dst}
    base: dict[BufferKind, int] = {}
    top = 0
    for kind in BufferKind:  # a slot id per (buffer, chunk)
        size = max((ref[1] + op.cnt for tb in tbs for op in tb.ops for ref in (op.src, op.dst)
                    if ref is not None and ref[0] is kind), default=0)
        base[kind], top = top, top + size
    starts: list[int] = []
    counts: list[int] = []
    steps: list[int] = []
    kinds: list[int] = []  # 1: write, 0: read
    for i, (t, pos) in enumerate(order):
        op = tbs[t].ops[pos]
        if op.type.writes_dst and op.dst:
            starts.append(base[op.dst[0]] + op.dst[1])
            counts.append(op.cnt)
            steps.append(i)
            kinds.append(1)
        if op.type.reads_src and op.src and op.src[0] in written:
            starts.append(base[op.src[0]] + op.src[1])
            counts.append(op.cnt)
            steps.append(i)
            kinds.append(0)
    deps: dict[tuple[int, int], list[tuple[int, int]]] = {tp: [] for tp in order}
    if not starts:
        return deps
    cnt = np.array(counts, np.int64)
    rep = np.repeat(np.arange(len(cnt)), cnt)
    offsets = np.arange(len(rep)) - np.repeat(np.cumsum(cnt) - cnt, cnt)
    slot = np.array(starts, np.int64)[rep] + offsets
    step = np.array(steps, np.int64)[rep]
    is_w = np.array(kinds, np.int64)[rep]
    # groups (slot, step): whether the step writes / reads the slot
    gkey = slot * len(order) + step
    uniq, inverse = np.unique(gkey, return_inverse=True)
    g_w = np.zeros(len(uniq), bool)
    g_r = np.zeros(len(uniq), bool)
    g_w[inverse[is_w == 1]] = True
    g_r[inverse[is_w == 0]] = True
    g_slot, g_step = uniq // len(order), uniq % len(order)
    idx = np.arange(len(uniq))
    first = np.r_[True, g_slot[1:] != g_slot[:-1]]  # a slot's first group (groups sorted by slot, step)
    seg_start = np.maximum.accumulate(np.where(first, idx, 0))
    # previous writing group in the slot (strictly earlier), -1 if none
    w_at = np.where(g_w, idx, -1)
    prev_w = np.r_[-1, np.maximum.accumulate(w_at)[:-1]]
    prev_w = np.where(prev_w >= seg_start, prev_w, -1)
    # next writing group in the slot (strictly later), len(uniq) if none
    last = np.r_[g_slot[1:] != g_slot[:-1], True]
    seg_end = np.minimum.accumulate(np.where(last, idx, len(uniq))[::-1])[::-1]
    w_at2 = np.where(g_w, idx, len(uniq))
    next_w = np.r_[np.minimum.accumulate(w_at2[::-1])[::-1][1:], len(uniq)]
    next_w = np.where(next_w <= seg_end, next_w, len(uniq))
    has_prev = prev_w >= 0
    has_next = g_r & (next_w < len(uniq))
    later = np.concatenate([g_step[has_prev], g_step[next_w[has_next]]])
    earlier = np.concatenate([g_step[prev_w[has_prev]], g_step[has_next]])
    t_of = np.array([t for t, _ in order], np.int64)
    p_of = np.array([p for _, p in order], np.int64)
    keep = t_of[later] != t_of[earlier]
    later, earlier = later[keep], earlier[keep]
    if not len(later):
        return deps
    # per (later step, earlier tb): the latest position; ascending tb per step
    et, ep = t_of[earlier], p_of[earlier]
    ordr = np.lexsort((ep, et, later))
    later, et, ep = later[ordr], et[ordr], ep[ordr]
    tail = np.r_[(later[1:] != later[:-1]) | (et[1:] != et[:-1]), True]
    for i, d, p in zip(later[tail].tolist(), et[tail].tolist(), ep[tail].tolist()):
        deps[order[i]].append((d, p))
    return deps


def _gpu_threadblocks(gpu: int, tbs: list[_Tb], max_dep_tb: int) -> tuple[Threadblock, ...]:
    for tb in tbs:
        tb.ops.sort(key=lambda o: o.key)
    unsorted: list[tuple[int, int]] = []
    keys = []
    for t, tb in enumerate(tbs):
        for pos, op in enumerate(tb.ops):
            unsorted.append((t, pos))
            keys.append(op.key)
    # (tb index, position) in key order (a stable sort: ties stay in (tb, position) order)
    order = [unsorted[i] for i in sorted(range(len(keys)), key=keys.__getitem__)]
    deps = _access_deps(tbs, order)
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
    targets = cast("set[tuple[int, int]]", {
        dep for items in layouts for kind, val in items
        for dep in ([val] if kind == "nop" else [val[1]] if val[1] else [])  # type: ignore[index]
    })  # fmt: skip
    # Dependency ids are int8: threadblocks that others wait on take the lowest ids.
    waited_on = {d for d, _ in targets}
    new_id = {t: i for i, t in enumerate(sorted(range(len(tbs)), key=lambda t: (t not in waited_on, t)))}
    out = []
    for t, (tb, items) in enumerate(zip(tbs, layouts)):
        steps = []
        for s, (kind, val) in enumerate(items):
            if kind == "nop":
                d, p = val  # type: ignore[misc]
                steps.append(_dep_nop(gpu, new_id[t], s, new_id[d], final_index[(d, p)], max_dep_tb))
                continue
            pos, dep = cast("tuple[int, tuple[int, int] | None]", val)
            op = tb.ops[pos]
            depid, deps_s = (-1, -1) if dep is None else (new_id[dep[0]], final_index[dep])
            if depid > max_dep_tb:
                raise RuntimeLimitError(_dep_error(gpu, new_id[t], depid, max_dep_tb))
            steps.append(_step(op, s, depid, deps_s, int((t, pos) in targets)))
        out.append(Threadblock(id=new_id[t], send=tb.send, recv=tb.recv, chan=tb.chan, steps=tuple(steps)))
    return tuple(sorted(out, key=lambda tb: tb.id))


def _dep_error(gpu: int, t: int, depid: int, max_dep_tb: int) -> str:
    return (
        f"lowering: gpu {gpu} tb {t} must wait on tb {depid}, above the runtime's dependency "
        f"limit {max_dep_tb} (int8): more than {max_dep_tb + 1} threadblocks are waited on; lower the "
        "schedule's nchunks or use fewer channels"
    )


def _dep_nop(gpu: int, t: int, s: int, d: int, deps: int, max_dep_tb: int) -> Step:
    if d > max_dep_tb:
        raise RuntimeLimitError(_dep_error(gpu, t, d, max_dep_tb))
    return nop(depid=d, deps=deps, s=s)


def _step(op: Op, s: int, depid: int, deps: int, hasdep: int) -> Step:
    # Unused operand fields get the used ones (msccl-tools writes the peer's location there).
    src = op.src or op.dst
    dst = op.dst or op.src
    assert src is not None and dst is not None
    return Step(s=s, type=op.type, srcbuf=src[0], srcoff=src[1], dstbuf=dst[0], dstoff=dst[1],
                cnt=op.cnt, depid=depid, deps=deps, hasdep=hasdep)  # fmt: skip

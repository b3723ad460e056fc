"""A numpy reference run of a compiled Plan on all ranks at once (round-synchronous), for tests."""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from runtime.executor.plan import Plan


def simulate_plan(plan: Plan, inplace: bool, chunk: int = 2, seed: int = 0) -> list[str]:
    """Run ``plan`` on random int64 data; return problems (unmatched batches, wrong outputs)."""
    rng = np.random.default_rng(seed)
    n, C, coll = plan.nranks, plan.nchunks, plan.collective
    c = C // n if coll != "allreduce" else C
    problems: list[str] = []
    ins, bufs = [], []
    for r in range(n):
        rp = plan.ranks[r]
        if coll == "allgather":
            x = rng.integers(0, 1000, c * chunk)
            o = np.zeros(C * chunk, dtype=np.int64)
            if inplace:
                o[r * c * chunk:(r + 1) * c * chunk] = x
                i = o[r * c * chunk:(r + 1) * c * chunk]
            else:
                i = x.copy()
        elif coll == "reducescatter":
            x = rng.integers(0, 1000, C * chunk)
            i = x.copy()
            o = i[r * c * chunk:(r + 1) * c * chunk] if inplace else np.zeros(c * chunk, dtype=np.int64)
        else:
            x = rng.integers(0, 1000, C * chunk)
            i = x.copy()
            o = i if inplace else np.zeros(C * chunk, dtype=np.int64)
        ins.append(x)
        bufs.append({"i": i, "o": o, "s": np.zeros(max(rp.scratch_chunks, 1) * chunk, dtype=np.int64),
                     "t": np.zeros(max(rp.temp_chunks, 1) * chunk, dtype=np.int64)})

    def view(r, reg):
        return bufs[r][reg[0]][reg[1] * chunk:(reg[1] + reg[2]) * chunk]

    def local(r, ops):
        for op in ops:
            if op.kind == "copy":
                view(r, op.dst)[:] = view(r, op.a).copy()
            else:
                view(r, op.dst)[:] = view(r, op.a) + view(r, op.b)

    for r in range(n):
        local(r, plan.ranks[r].pre_ops)
    by_round = [{rnd.index: rnd for rnd in plan.ranks[r].rounds} for r in range(n)]
    for t in range(1, plan.nrounds + 1):
        outbox: dict[tuple[int, int], list] = defaultdict(list)
        for r in range(n):
            rnd = by_round[r].get(t)
            if rnd:
                for m in rnd.sends:
                    outbox[(r, m.peer)].append((m.chunks, view(r, m.regions[0]).copy()))
        for r in range(n):
            rnd = by_round[r].get(t)
            if rnd:
                for m in rnd.recvs:  # one batch runs its ops concurrently: a receive must not touch a send's data
                    if any(np.shares_memory(view(r, m.regions[0]), view(r, x.regions[0])) for x in rnd.sends):
                        problems.append(f"round {t}: rank {r} receives into memory it sends in the same batch")
                    q = outbox.get((m.peer, r))
                    if not q:
                        problems.append(f"round {t}: rank {r} receives from {m.peer} with no send")
                        continue
                    cnt, data = q.pop(0)
                    if cnt != m.chunks:
                        problems.append(f"round {t}: {m.peer}->{r} sizes {cnt} != {m.chunks}")
                        continue
                    view(r, m.regions[0])[:] = data
        for key, q in outbox.items():
            if q:
                problems.append(f"round {t}: {len(q)} sends {key} without a receive")
        for r in range(n):
            rnd = by_round[r].get(t)
            if rnd:
                local(r, rnd.ops)
    blk = c * chunk
    for r in range(n):
        if coll == "allgather":
            want = np.concatenate(ins)
        elif coll == "reducescatter":
            want = sum(x[r * blk:(r + 1) * blk] for x in ins)
        elif coll == "allreduce":
            want = sum(ins)
        else:
            want = np.concatenate([x[r * blk:(r + 1) * blk] for x in ins])
        got = bufs[r]["o"] if not (inplace and coll in ("allreduce", "alltoall")) else bufs[r]["i"]
        if not np.array_equal(got, want):
            problems.append(f"rank {r}: wrong {coll} output (inplace={inplace})")
    return problems

"""Static FIFO matching of sends and receives per (sender, receiver, channel).

The k-th send-type step from A to B on channel c pairs with the k-th receive-type step at B from A
on c, and both must move the same ``cnt``.
"""

from __future__ import annotations

from collections import defaultdict

from .program import Program

__all__ = ["Endpoint", "match_problems"]

Endpoint = tuple[int, int, int, int]  # (gpu, tb, step, cnt)
Connection = tuple[int, int, int]  # (sender, receiver, channel)


def _endpoints(program: Program) -> tuple[
    dict[Connection, list[Endpoint]], dict[Connection, list[Endpoint]], set[Connection]
]:
    sends: dict[Connection, list[Endpoint]] = defaultdict(list)
    recvs: dict[Connection, list[Endpoint]] = defaultdict(list)
    send_tb: dict[Connection, int] = {}
    recv_tb: dict[Connection, int] = {}
    ambiguous: set[Connection] = set()
    for gpu in program.gpus:
        for tb in gpu.threadblocks:
            for step in tb.steps:
                if step.type.sends and tb.send >= 0:
                    key = (gpu.id, tb.send, tb.chan)
                    if send_tb.setdefault(key, tb.id) != tb.id:
                        ambiguous.add(key)
                    sends[key].append((gpu.id, tb.id, step.s, step.cnt))
                if step.type.receives and tb.recv >= 0:
                    key = (tb.recv, gpu.id, tb.chan)
                    if recv_tb.setdefault(key, tb.id) != tb.id:
                        ambiguous.add(key)
                    recvs[key].append((gpu.id, tb.id, step.s, step.cnt))
    return sends, recvs, ambiguous


def match_problems(program: Program) -> list[str]:
    """Unmatched sends/receives and ``cnt`` mismatches, naming both ends.

    Connections served by several threadblocks on one side (a structural error reported
    elsewhere) have no defined order and are skipped.
    """
    sends, recvs, ambiguous = _endpoints(program)
    problems: list[str] = []
    for key in sorted(set(sends) | set(recvs)):
        if key in ambiguous:
            continue
        a, b, chan = key
        ss, rr = sends.get(key, []), recvs.get(key, [])
        for k in range(max(len(ss), len(rr))):
            if k >= len(rr):
                g, t, s, _ = ss[k]
                problems.append(
                    f"gpu {g} tb {t} step {s}: send to gpu {b} on channel {chan} has no "
                    f"matching recv (send #{k} of {len(ss)}, gpu {b} receives {len(rr)})"
                )
            elif k >= len(ss):
                g, t, s, _ = rr[k]
                problems.append(
                    f"gpu {g} tb {t} step {s}: recv from gpu {a} on channel {chan} has no "
                    f"matching send (recv #{k} of {len(rr)}, gpu {a} sends {len(ss)})"
                )
            elif ss[k][3] != rr[k][3]:
                g, t, s, cnt = rr[k]
                sg, st, sstep, scnt = ss[k]
                problems.append(
                    f"gpu {g} tb {t} step {s}: recv from gpu {a} on channel {chan} has cnt={cnt} "
                    f"but its matching send gpu {sg} tb {st} step {sstep} has cnt={scnt}"
                )
    return problems

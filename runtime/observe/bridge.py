"""Bridge to the controller: Inspector records as telemetry samples (``loopcoll.telemetry/1``).

A ``coll_perf`` record becomes one ``coll`` sample (``bytes`` = the collective's size S in the nccl-tests
convention — ``coll_msg_size_bytes`` × n_ranks for AllGather/ReduceScatter, ``coll_msg_size_bytes`` otherwise,
so ``throughput_GBps`` is the record's algbw — and ``busy_s`` = ``coll_exec_time_us``/10^6); a ``p2p_perf``
Send becomes one ``pair`` sample from the sender to its peer. Recv records describe the same transfers from the
other end and are not converted. ``t_s`` is the dump time, ``seq`` is null (the Inspector's per-type
``coll_sn`` is not the communicator's sequence number and is kept in ``extra``). With a job profile,
communicator-local ranks map to global ranks through the communicator's ``ranks`` list; the profile
communicator is found by ``comm_map`` (Inspector comm id or name → profile name) or by the Inspector's
``comm_name``. Samples that do not map are rejected with the telemetry reason codes.

>>> import tempfile
>>> from runtime.observe.db import connect
>>> from runtime.observe.ingest import ingest
>>> from runtime.observe.synthetic import SyntheticSpec, write_logs
>>> from runtime.formats.profile import profile_from_dict
>>> d = tempfile.mkdtemp()
>>> _ = write_logs(d, SyntheticSpec(nranks=2, ncolls=3, colls=(("AllGather", 1 << 20),), p2p=True))
>>> con = connect(); _ = ingest(con, [d])
>>> prof = profile_from_dict({"format": "loopcoll.profile/1", "topology": "ring:4", "communicators": [
...     {"name": "world", "ranks": [2, 3], "collectives": [{"collective": "allgather", "sizes": [2097152]}]}]})
>>> samples, report = inspector_samples(con, profile=prof)
>>> report.accepted, sorted({(s.kind, s.src, s.dst, s.bytes) for s in samples})
(12, [('coll', 2, None, 2097152), ('coll', 3, None, 2097152), ('pair', 2, 3, 1048576), ('pair', 3, 2, 1048576)])
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from runtime.formats.profile import JobProfile
from runtime.formats.telemetry import FORMAT, IngestReport, Sample, validate_samples

__all__ = ["inspector_samples"]

_COLLECTIVE = {"AllGather": "allgather", "ReduceScatter": "reducescatter", "AllReduce": "allreduce",
               "Broadcast": "broadcast", "Reduce": "reduce", "All2All": "alltoall", "SendRecv": "sendrecv",
               "Send": "send", "Recv": "recv"}


def inspector_samples(con: Any, *, profile: JobProfile | None = None,
                      comm_map: Mapping[str, str] | None = None) -> tuple[list[Sample], IngestReport]:
    """Samples from the Inspector records in the current window (see :func:`runtime.observe.select_window`),
    ordered by time, communicator and rank, with a report of those rejected (by reason)."""
    cmap = dict(comm_map or {})
    members = {c.name: c.ranks for c in profile.communicators} if profile is not None else None
    rejected: Counter[str] = Counter()
    first: list[str] = []
    objs: list[dict[str, Any]] = []

    def resolve(comm_id: str, comm_name: str | None, rank: int, what: str) -> tuple[str, int] | None:
        name = cmap.get(comm_id) or (cmap.get(comm_name) if comm_name else None)
        if members is None:
            return (name or (comm_name if comm_name and comm_name != "unknown" else comm_id)), rank
        if name is None and comm_name in members:
            name = comm_name
        if name is None or name not in members:
            rejected["unknown_comm"] += 1
            first.append(f"{what}: communicator {comm_id} ({comm_name}) is not in the profile")
            return None
        ranks = members[name]
        if not 0 <= rank < len(ranks):
            rejected["unknown_rank"] += 1
            first.append(f"{what}: local rank {rank} is outside communicator {name!r} ({len(ranks)} ranks)")
            return None
        return name, ranks[rank]

    coll_rows = con.execute("""
        SELECT t_s, comm_id, comm_name, rank, coll, coll_sn, msg_size_bytes,
               msg_size_bytes * (CASE WHEN coll IN ('AllGather', 'AllGatherV', 'ReduceScatter')
                                      THEN coalesce(n_ranks, 1) ELSE 1 END) AS s_bytes,
               exec_time_us, timing_source, busbw_gbs
        FROM w_coll WHERE source = 'inspector' ORDER BY t_s, comm_id, rank, coll, coll_sn""").fetchall()
    for t_s, cid, cname, rank, coll, sn, msg, s_bytes, ex, src_kind, busbw in coll_rows:
        where = f"{cid} rank {rank} {coll} #{sn}"
        m = resolve(cid, cname, rank, where)
        if m is None:
            continue
        objs.append({"format": FORMAT, "t_s": t_s, "comm": m[0], "seq": None, "version": None, "kind": "coll",
                     "src": m[1], "dst": None, "bytes": int(s_bytes), "busy_s": ex / 1e6,
                     "collective": _COLLECTIVE.get(coll), "origin": "inspector",
                     "extra": {"coll": coll, "coll_sn": sn, "comm_id": cid, "coll_msg_size_bytes": msg,
                               "timing_source": src_kind, "busbw_gbs": busbw}})
    p2p_rows = con.execute("""
        SELECT t_s, comm_id, comm_name, rank, peer, p2p_sn, msg_size_bytes, exec_time_us, timing_source
        FROM w_p2p WHERE p2p = 'Send' ORDER BY t_s, comm_id, rank, p2p_sn""").fetchall()
    for t_s, cid, cname, rank, peer, sn, msg, ex, src_kind in p2p_rows:
        where = f"{cid} rank {rank} Send #{sn}"
        a = resolve(cid, cname, rank, where)
        b = resolve(cid, cname, peer, where) if a is not None else None
        if a is None or b is None:
            continue
        objs.append({"format": FORMAT, "t_s": t_s, "comm": a[0], "seq": None, "version": None, "kind": "pair",
                     "src": a[1], "dst": b[1], "bytes": int(msg), "busy_s": ex / 1e6, "collective": "send",
                     "origin": "inspector", "extra": {"p2p_sn": sn, "comm_id": cid, "timing_source": src_kind}})
    samples, report = validate_samples(objs, comms=profile.comm_ranks() if profile is not None else None)
    counts = Counter(report.rejected)
    counts.update(rejected)
    return samples, IngestReport(report.accepted, MappingProxyType(dict(sorted(counts.items()))),
                                 (first[0] if first else None) or report.first_error)

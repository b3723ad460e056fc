"""The SQL of :mod:`runtime.observe.ingest`: the typed JSON shapes of an Inspector line, staging a batch of
lines, classifying each (a record, a marker, or a rejection reason) and inserting the records.

>>> "json_transform" in _STAGE_SQL and "INSERT INTO coll" in _INSERT_COLL
True
"""

from __future__ import annotations

_HEADER_T = '{"id":"VARCHAR","comm_name":"VARCHAR","rank":"BIGINT","n_ranks":"BIGINT","nnodes":"BIGINT"}'
_META_T = ('{"inspector_output_format_version":"VARCHAR","git_rev":"VARCHAR","rec_mechanism":"VARCHAR",'
           '"dump_timestamp_us":"BIGINT","hostname":"VARCHAR","pid":"BIGINT"}')
_COLL_T = ('{"coll":"VARCHAR","coll_sn":"BIGINT","coll_msg_size_bytes":"BIGINT","coll_exec_time_us":"DOUBLE",'
           '"coll_timing_source":"VARCHAR","coll_algobw_gbs":"DOUBLE","coll_busbw_gbs":"DOUBLE",'
           '"coll_algo":"VARCHAR","coll_proto":"VARCHAR"}')
_P2P_T = ('{"p2p":"VARCHAR","p2p_sn":"BIGINT","p2p_peer":"BIGINT","p2p_msg_size_bytes":"BIGINT",'
          '"p2p_exec_time_us":"DOUBLE","p2p_timing_source":"VARCHAR","p2p_algobw_gbs":"DOUBLE","p2p_busbw_gbs":"DOUBLE"}')
_LINE_T = (f'{{"header":{_HEADER_T},"metadata":{_META_T},"coll_perf":{_COLL_T},"p2p_perf":{_P2P_T},'
           '"dump_stats":"JSON","proxy_trace":"JSON"}')
_MARK_T = f'{{"header":{_HEADER_T},"metadata":{_META_T}}}'

# One batch holds complete lines of one or more files: split into numbered lines, parse each once
# (`try(json_transform(...))` is NULL for text that is not JSON). `$1` file ids, `$2` the number of the line
# before each text, `$3` the texts. v4.3 bare bodies take the header/metadata of their file's last `dump_stats`
# marker before them (markers carried over from an earlier batch are staged with `carried`); batches without
# markers skip that window (the common v4.0 case).
_STAGE_SQL = f"""
CREATE OR REPLACE TEMP TABLE _stage AS
WITH f AS (SELECT unnest($1::INTEGER[]) AS fid, unnest($2::BIGINT[]) AS base, unnest($3::VARCHAR[]) AS txt),
     g AS (SELECT fid, base, string_split(txt, chr(10)) AS ls FROM f),
     l AS (SELECT fid AS file_id, base + generate_subscripts(ls, 1) AS line_no, unnest(ls) AS line FROM g)
SELECT file_id, line_no, line, try(json_transform(line, '{_LINE_T}')) AS r, FALSE AS carried
FROM l WHERE trim(line) <> ''
"""
_MARKER_STAGE_SQL = f"""
INSERT INTO _stage SELECT ?, ?, ?, try(json_transform(?, '{_LINE_T}')), TRUE
"""
_CONTEXT_PLAIN = "SELECT *, r.header AS h, r.metadata AS md, r.dump_stats IS NOT NULL AS is_marker FROM _stage"
_CONTEXT_MARKERS = f"""
SELECT *, coalesce(r.header, last_value(m_header IGNORE NULLS) OVER w) AS h,
       coalesce(r.metadata, last_value(m_meta IGNORE NULLS) OVER w) AS md
FROM (SELECT *, r.dump_stats IS NOT NULL AS is_marker,
             CASE WHEN r.dump_stats IS NOT NULL
                  THEN coalesce(r.header, json_transform(r.dump_stats, '{_MARK_T}').header) END AS m_header,
             CASE WHEN r.dump_stats IS NOT NULL
                  THEN coalesce(r.metadata, json_transform(r.dump_stats, '{_MARK_T}').metadata) END AS m_meta
      FROM _stage)
WINDOW w AS (PARTITION BY file_id ORDER BY line_no ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
"""
_CLASSIFY_SQL = """
CREATE OR REPLACE TEMP TABLE _parsed AS
WITH c AS ({context})
SELECT file_id, line_no, is_marker, h, md, r.coll_perf AS cp, r.p2p_perf AS pp, cls,
       CASE WHEN cls NOT IN ('coll', 'p2p') THEN line END AS line
FROM (SELECT *,
    CASE
      WHEN r IS NULL OR NOT starts_with(ltrim(line), '{{') THEN 'bad_json'
      WHEN is_marker THEN 'marker'
      WHEN r.coll_perf IS NULL AND r.p2p_perf IS NULL AND r.proxy_trace IS NOT NULL THEN 'proxy_trace'
      WHEN r.coll_perf IS NULL AND r.p2p_perf IS NULL THEN 'unknown_body'
      WHEN h IS NULL OR h.id IS NULL OR h.rank IS NULL OR md IS NULL OR md.dump_timestamp_us IS NULL
        THEN 'no_header'
      WHEN r.coll_perf IS NOT NULL AND (r.coll_perf.coll IS NULL OR r.coll_perf.coll_sn IS NULL
           OR r.coll_perf.coll_msg_size_bytes IS NULL OR r.coll_perf.coll_exec_time_us IS NULL) THEN 'bad_field'
      WHEN r.coll_perf IS NOT NULL AND (NOT isfinite(r.coll_perf.coll_exec_time_us)
           OR r.coll_perf.coll_exec_time_us <= 0 OR r.coll_perf.coll_msg_size_bytes < 0 OR h.rank < 0
           OR h.rank >= coalesce(h.n_ranks, h.rank + 1)) THEN 'range'
      WHEN r.coll_perf IS NOT NULL THEN 'coll'
      WHEN r.p2p_perf.p2p IS NULL OR r.p2p_perf.p2p_peer IS NULL OR r.p2p_perf.p2p_msg_size_bytes IS NULL
           OR r.p2p_perf.p2p_exec_time_us IS NULL THEN 'bad_field'
      WHEN NOT isfinite(r.p2p_perf.p2p_exec_time_us) OR r.p2p_perf.p2p_exec_time_us <= 0
           OR r.p2p_perf.p2p_msg_size_bytes < 0 OR h.rank < 0 OR r.p2p_perf.p2p_peer < 0 THEN 'range'
      ELSE 'p2p' END AS cls
    FROM c WHERE NOT carried)
"""

# Bandwidths as the Inspector defines them, used where a record's own value is missing or "nan":
# algbw = traffic / time with traffic = msg x nranks for AllGather(V)/ReduceScatter, msg otherwise;
# busbw = algbw x 2(n-1)/n (AllReduce), (n-1)/n (AllGather(V), ReduceScatter), 1 otherwise.
_ALGBW = ("(cp.coll_msg_size_bytes * (CASE WHEN cp.coll IN ('AllGather','AllGatherV','ReduceScatter') "
          "THEN coalesce(h.n_ranks, 1) ELSE 1 END) / 1e3 / cp.coll_exec_time_us)")
_BUSF = ("(CASE WHEN cp.coll = 'AllReduce' THEN 2.0 * (coalesce(h.n_ranks, 1) - 1) / coalesce(h.n_ranks, 1) "
         "WHEN cp.coll IN ('AllGather','AllGatherV','ReduceScatter') THEN (coalesce(h.n_ranks, 1) - 1.0) / "
         "coalesce(h.n_ranks, 1) ELSE 1.0 END)")

_HDR_SELECT = """file_id, line_no, h.id, h.comm_name, h.rank, h.n_ranks, h.nnodes,
    md.inspector_output_format_version, md.git_rev, md.rec_mechanism, md.hostname, md.pid, md.dump_timestamp_us"""

_INSERT_COLL = f"""
INSERT INTO coll SELECT {_HDR_SELECT},
    cp.coll, cp.coll_sn, cp.coll_msg_size_bytes, cp.coll_exec_time_us, cp.coll_timing_source,
    CASE WHEN isfinite(cp.coll_algobw_gbs) THEN cp.coll_algobw_gbs ELSE {_ALGBW} END,
    CASE WHEN isfinite(cp.coll_busbw_gbs) THEN cp.coll_busbw_gbs ELSE {_ALGBW} * {_BUSF} END,
    cp.coll_algo, cp.coll_proto
FROM _parsed WHERE cls = 'coll'
"""

_INSERT_P2P = f"""
INSERT INTO p2p SELECT {_HDR_SELECT},
    pp.p2p, pp.p2p_sn, pp.p2p_peer, pp.p2p_msg_size_bytes, pp.p2p_exec_time_us, pp.p2p_timing_source,
    CASE WHEN isfinite(pp.p2p_algobw_gbs) THEN pp.p2p_algobw_gbs ELSE pp.p2p_msg_size_bytes / 1e3 / pp.p2p_exec_time_us END,
    CASE WHEN isfinite(pp.p2p_busbw_gbs) THEN pp.p2p_busbw_gbs ELSE pp.p2p_msg_size_bytes / 1e3 / pp.p2p_exec_time_us END
FROM _parsed WHERE cls = 'p2p'
"""

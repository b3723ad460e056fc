"""Wire protocol: framing of arbitrary chunkings, the size limit, per-type validation, store path resolution."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runtime.service.daemon import resolve_store_file
from runtime.errors import WireError
from runtime.service.wire import CLIENT_TO_DAEMON, DAEMON_TO_CLIENT, MAX_MESSAGE_BYTES, LineFramer, decode, encode

_LINE = st.binary(min_size=1, max_size=40).map(lambda b: b.replace(b"\n", b"x").replace(b"\r", b"y")).filter(
    lambda b: b.strip())


@given(lines=st.lists(_LINE, max_size=12), cuts=st.lists(st.integers(0, 600), max_size=12))
def test_framer_reassembles_any_chunking(lines: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(line + b"\n" for line in lines)
    framer = LineFramer(max_bytes=64)
    got: list[bytes] = []
    prev = 0
    for cut in sorted({min(c, len(stream)) for c in cuts}) + [len(stream)]:
        got += framer.feed(stream[prev:cut])
        prev = cut
    assert got == lines
    assert framer.pending == 0


@given(size=st.integers(9, 200), chunk=st.integers(1, 50))
def test_framer_rejects_long_lines_without_holding_them(size: int, chunk: int) -> None:
    framer = LineFramer(max_bytes=8)
    data = b"a" * size + b"\n"
    with pytest.raises(WireError) as info:
        for i in range(0, len(data), chunk):
            framer.feed(data[i:i + chunk])
            assert framer.pending < 8  # never more than the limit held between feeds
    assert info.value.reason == "too_large"


def test_framer_limit_counts_the_newline() -> None:
    assert LineFramer(max_bytes=4).feed(b"abc\n") == [b"abc"]
    with pytest.raises(WireError):
        LineFramer(max_bytes=4).feed(b"abcd\n")


def test_encode_rejects_oversized_and_non_json() -> None:
    with pytest.raises(WireError) as info:
        encode({"type": "samples", "samples": ["x" * MAX_MESSAGE_BYTES]})
    assert info.value.reason == "too_large"
    with pytest.raises(WireError):
        encode({"type": "status", "x": float("nan")})


@pytest.mark.parametrize(("line", "reason", "needle"), [
    (b"not json", "bad_json", "not JSON"),
    (b"[1, 2]", "protocol", "JSON object"),
    (b'{"type": "version"}', "protocol", "not one of"),
    (b'{"type": "hello"}', "protocol", "token"),
    (b'{"type": "hello", "token": "t", "role": "admin"}', "protocol", "role"),
    (b'{"type": "hello", "token": "t", "rank": true}', "protocol", "rank"),
    (b'{"type": "hello", "token": "t", "comms": "dp0"}', "protocol", "comms"),
    (b'{"type": "samples", "samples": {}}', "protocol", "list"),
    (b'{"type": "get", "path": ""}', "protocol", "path"),
    (b'{"type": "get", "path": "a", "offset": -1}', "protocol", "offset"),
    (b'{"type": "status", "prometheus": 1}', "protocol", "prometheus"),
    (b'{"type": "status", "id": [1]}', "protocol", "id"),
])
def test_decode_rejects_bad_requests(line: bytes, reason: str, needle: str) -> None:
    with pytest.raises(WireError) as info:
        decode(line, CLIENT_TO_DAEMON)
    assert info.value.reason == reason
    assert needle in str(info.value)


def test_decode_fills_defaults_and_round_trips() -> None:
    hello = decode(b'{"type": "hello", "token": "t"}', CLIENT_TO_DAEMON)
    assert hello == {"type": "hello", "token": "t", "role": "tool", "rank": None, "comms": []}
    version = {"type": "version", "comm": "dp0", "collective": "allgather", "version": 3,
               "manifest_entry": {"comm": "dp0", "version": 3}}
    assert decode(encode(version).rstrip(b"\n"), DAEMON_TO_CLIENT) == version
    with pytest.raises(WireError):  # a daemon-only type is not a request
        decode(encode(version), CLIENT_TO_DAEMON)


def test_store_paths_cannot_escape(tmp_path: Path) -> None:
    store = tmp_path / "store"
    (store / "v1").mkdir(parents=True)
    (store / "v1" / "s.json").write_text("{}")
    (store / ".hidden").write_text("x")
    (tmp_path / "secret").write_text("x")
    os.symlink(tmp_path / "secret", store / "link")
    token = store / "tok"
    token.write_text("t")
    assert resolve_store_file(store, "v1/s.json") == (store / "v1" / "s.json").resolve()
    for bad in ("../secret", "/etc/passwd", "v1/../../secret", ".hidden", "link", "v1", "missing.json", "tok"):
        with pytest.raises(WireError) as info:
            resolve_store_file(store, bad, refuse=[token])
        assert info.value.reason == "path", bad
    assert json.loads((store / "v1" / "s.json").read_text()) == {}

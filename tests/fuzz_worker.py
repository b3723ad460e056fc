"""Fuzz properties over every text input loopcoll reads, run under an address-space limit.

Run by ``tests/test_fuzz_inputs.py`` in a subprocess: ``python tests/fuzz_worker.py EXAMPLES``.
The process first caps its address space (``RLIMIT_AS``, which also counts the solvers' native
memory) at :data:`AS_LIMIT_BYTES`, then checks, for topology JSON, named spec strings, failure
strings and MSCCL XML attribute values drawn by hypothesis: every input either loads or raises
one :class:`~synth.errors.LoopcollError` with a short message — any other exception, a
``MemoryError`` or an example running past :data:`EXAMPLE_LIMIT_S` seconds fails the run.
"""

from __future__ import annotations

import json
import resource
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

#: The stated cap: small inputs (≤ 64 KB) never make loopcoll allocate beyond this address space.
AS_LIMIT_BYTES = 2 << 30
EXAMPLE_LIMIT_S = 10
MAX_MESSAGE_CHARS = 2000


class _Slow(Exception):
    pass


def _alarm(signum: int, frame: object) -> None:
    raise _Slow()


def _expect_clean(run: Callable[[], Any], what: str) -> None:
    """``run()`` returns, or raises one LoopcollError with a short, non-empty message."""
    from synth.errors import LoopcollError

    signal.alarm(EXAMPLE_LIMIT_S)
    try:
        run()
    except LoopcollError as exc:
        msg = str(exc)
        assert msg and len(msg) <= MAX_MESSAGE_CHARS, f"{what}: message of {len(msg)} characters"
    except _Slow:
        raise AssertionError(f"{what}: ran longer than {EXAMPLE_LIMIT_S} s") from None
    except MemoryError:
        raise AssertionError(f"{what}: exhausted the {AS_LIMIT_BYTES >> 20} MiB address space") from None
    finally:
        signal.alarm(0)


def main(examples: int) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT_BYTES, AS_LIMIT_BYTES))
    signal.signal(signal.SIGALRM, _alarm)

    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    import msccl_xml
    from synth import load_topology, synthesize
    from synth.topologies import named_topology, topology_from_json
    from tests.strategies import topology_doc

    cfg = settings(max_examples=examples, deadline=None, database=None, derandomize=True,
                   suppress_health_check=list(HealthCheck))

    scalars = st.one_of(
        st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=20),
        st.integers(10**20, 10**400), st.sampled_from([1e308, -0.0, 10**400, "9" * 5000, 1e-320]),
    )
    json_values = st.recursive(scalars, lambda kids: st.one_of(st.lists(kids, max_size=4),
                                                               st.dictionaries(st.text(max_size=8), kids, max_size=4)),
                               max_leaves=12)
    paths = st.sampled_from([("name",), ("nodes",), ("links",), ("meta",), ("nodes", 0, "id"), ("nodes", 0, "rank"),
                             ("nodes", 1, "kind"), ("nodes", 2, "host"), ("links", 0, "gbps"), ("links", 1, "src"),
                             ("links", 2, "latency_us"), ("links", 3, "dst"), ("nodes", 0), ("links", 0)])

    @cfg
    @given(paths, json_values)
    def topology_json(path: tuple[Any, ...], value: Any) -> None:
        doc: Any = topology_doc()
        target = doc
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
        text = json.dumps(doc, allow_nan=True)
        _expect_clean(lambda: topology_from_json(text), f"topology JSON {text[:200]!r}")

    @cfg
    @given(st.one_of(st.text(max_size=40), st.binary(max_size=40).map(lambda b: b.decode("latin-1"))))
    def raw_json(text: str) -> None:
        _expect_clean(lambda: topology_from_json(text), f"raw JSON {text!r}")

    @cfg
    @given(st.sampled_from(["[" * 100_000, "{\"a\":" * 50_000, "1" * 5000, "[" + "1" * 4400 + "]"]))
    def deep_json(text: str) -> None:
        _expect_clean(lambda: topology_from_json(text), "deep/huge JSON")

    families = st.sampled_from(["ring", "nvswitch", "torus", "hpn", "dgx-a100", "dgx-h100", "h200-proto", "rng"])
    numbers = st.one_of(st.integers(0, 12).map(str), st.integers(17_000, 10**30).map(str), st.just("9" * 5000),
                        st.text("0123456789x-+. ", max_size=8))
    opts = st.lists(st.tuples(st.sampled_from(["nic", "nvswitch", "x", ""]),
                              st.one_of(numbers, st.sampled_from(["inf", "nan", "-1", "1e400", "0"]))), max_size=2)

    @cfg
    @given(st.one_of(st.text(max_size=30),
                     st.builds(lambda f, a, o: f + ":" + a + "".join(f",{k}={v}" for k, v in o), families, numbers,
                               opts)))
    def spec_string(spec: str) -> None:
        _expect_clean(lambda: load_topology(spec), f"spec {spec[:200]!r}")

    base = named_topology("hpn:1x2x8")
    scenario = st.one_of(
        st.text(max_size=30),
        st.builds(lambda a, b, f: f"scale:{a}:{b}:{f}", st.sampled_from(["gpu0", "tor0.0", "nvs0.0", "x", ""]),
                  st.sampled_from(["gpu0", "tor0.0", "nvs0.0", "gpu1", ""]),
                  st.one_of(st.floats().map(repr), numbers, st.sampled_from(["1e400", "-0.0", "nan", "0"]))),
        st.lists(st.sampled_from(["fail1", "fail2", "fail3", "fail9", "+", ""]), max_size=4).map("+".join),
    )

    @cfg
    @given(st.lists(scenario, max_size=3))
    def failure_strings(scenarios: list[str]) -> None:
        _expect_clean(lambda: base.with_failure("+".join(scenarios)) if scenarios else base,
                      f"failures {scenarios!r}")
        _expect_clean(lambda: load_topology("hpn:1x2x8", scenarios), f"failures {scenarios!r}")

    sched = synthesize("allgather", named_topology("ring:3")).schedule
    assert sched is not None
    text = msccl_xml.write(msccl_xml.lower(sched))
    attrs = ["ngpus", "nchunksperloop", "nchannels", "proto", "coll", "inplace", "i_chunks", "o_chunks", "s_chunks",
             "id", "send", "recv", "chan", "cnt", "srcoff", "dstoff", "depid", "deps", "hasdep", "type", "srcbuf", "s"]
    xml_values = st.one_of(
        st.integers(-2, 10**12).map(str), st.sampled_from(["1000000000", "400000000", "99999999999999999999",
                                                           "9" * 5000, "-1", "", " 1", "0x10", "1e3"]),
        st.text(max_size=12).map(lambda t: t.replace("&", "").replace("<", "").replace('"', "")),
    )

    @cfg
    @given(st.sampled_from(attrs), st.integers(0, 5), xml_values)
    def xml_attributes(attr: str, nth: int, value: str) -> None:
        needle = f' {attr}="'
        pos, count = -1, 0
        while True:
            nxt = text.find(needle, pos + 1)
            if nxt < 0:
                break
            pos, count = nxt, count + 1
            if count > nth:
                break
        if pos < 0:
            return
        start = pos + len(needle)
        end = text.index('"', start)
        mutated = text[:start] + value + text[end:]
        _expect_clean(lambda: msccl_xml.check_text(mutated), f"XML {attr}={value[:40]!r}")

    def explicit_cases() -> None:
        """The issue's tiny files that used to exhaust memory, each refused or reported invalid."""
        for attr, old, new in [("ngpus", 'ngpus="3"', 'ngpus="1000000000"'),
                               ("nchunksperloop", 'nchunksperloop="3"', 'nchunksperloop="400000000"'),
                               ("cnt", 'cnt="1"', 'cnt="1000000000"'),
                               ("cnt", 'cnt="1"', 'cnt="99999999999999999999"'),
                               ("cnt", 'cnt="1"', 'cnt="' + "9" * 5000 + '"')]:
            assert old in text, old
            mutated = text.replace(old, new, 1)
            result: list[Any] = []
            _expect_clean(lambda: result.append(msccl_xml.check_text(mutated)), f"XML {attr}")
            assert not result or not result[0].valid, attr
        for spec in ("ring:100000000", "ring:" + "9" * 5000):
            _expect_clean(lambda: load_topology(spec), spec[:30])

    for prop in (topology_json, raw_json, deep_json, spec_string, failure_strings, xml_attributes, explicit_cases):
        prop()
        print(f"ok {prop.__name__}", flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 30)

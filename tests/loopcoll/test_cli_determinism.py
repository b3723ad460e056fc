"""Same input, same bytes: CLI output must not depend on PYTHONHASHSEED.

One subprocess per seed runs a batch of commands (exports and ``bound --json``) and the bytes of
every output are compared across seeds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from synth.topologies import Link, Node, NodeKind, Topology, write_topology

ROOT = Path(__file__).resolve().parents[2]

COMMANDS = [
    ["topo", "export", "hpn:2x2x2", "-o", "{out}/hpn.json"],
    ["topo", "export", "hpn:1x2x8", "--fail", "fail3", "--fail", "scale:gpu9:nvs0.1:0.5", "-o", "{out}/fail.json"],
    ["topo", "export", "{in}/random.json", "-o", "{out}/random.json"],
    ["topo", "show", "hpn:1x2x8", "--fail", "fail1"],
    ["bound", "allgather", "hpn:1x2x8", "--json"],
    ["bound", "alltoall", "hpn:1x2x8", "--json"],
    ["bound", "reducescatter", "{in}/random.json", "--json"],
    ["bound", "allreduce", "{in}/random.json", "--json"],
    ["bound", "allgather", "torus:3x3", "--fail", "scale:gpu0:gpu1:0.5", "--json"],
]

SCRIPT = """
import contextlib, io, json, sys
from loopcoll.cli import main
commands, out_dir = json.loads(sys.argv[1]), sys.argv[2]
results = []
for argv in commands:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = main(argv)
    results.append([code, buf.getvalue()])
print(json.dumps(results))
"""


def _random_topology() -> Topology:
    # Asymmetric, with names whose hash order differs from insertion order.
    names = ["zeta", "alpha", "mid", "beta"]
    nodes = [Node(n, NodeKind.GPU, r) for r, n in enumerate(names)] + [Node("sw-b", NodeKind.SWITCH),
                                                                        Node("sw-a", NodeKind.SWITCH)]
    links = []
    for i, n in enumerate(names):
        links.append(Link(n, "sw-b", 100.0 + 10 * i, 0.5))
        links.append(Link("sw-b", n, 100.0, 0.5))
        links.append(Link(n, "sw-a", 25.0, 0.1))
        links.append(Link("sw-a", n, 12.5 * (i + 1), 0.1))
    return Topology.create("determinism", nodes, links, {"purpose": "hash-seed test"})


def _run(seed: str, in_dir: Path, out_dir: Path) -> list[list[object]]:
    out_dir.mkdir()
    commands = [[a.replace("{in}", str(in_dir)).replace("{out}", str(out_dir)) for a in argv] for argv in COMMANDS]
    env = {**os.environ, "PYTHONHASHSEED": seed}
    proc = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(commands), str(out_dir)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300, check=True)
    results = json.loads(proc.stdout)
    # The out directory differs between runs; make the "wrote PATH" lines comparable.
    return [[code, text.replace(str(out_dir), "OUT")] for code, text in results]


def test_cli_output_is_identical_under_two_hash_seeds(tmp_path: Path) -> None:
    in_dir = tmp_path / "in"
    in_dir.mkdir()
    write_topology(_random_topology(), in_dir / "random.json")
    first = _run("0", in_dir, tmp_path / "a")
    second = _run("4242", in_dir, tmp_path / "b")
    assert all(code == 0 for code, _ in first)
    assert first == second
    names = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert names == ["fail.json", "hpn.json", "random.json"]
    for name in names:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    assert (tmp_path / "a" / "random.json").read_bytes() == (in_dir / "random.json").read_bytes()

"""Job profiles: validation naming the culprit, round trips, topology checks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runtime.errors import ProfileError
from runtime.formats.profile import load_profile, profile_from_dict, profile_to_dict, write_profile
from synth import load_topology


def _prof(**comm_over: object) -> dict:
    comm = {"name": "dp0", "ranks": [0, 8], "collectives": [{"collective": "allgather", "sizes": [1 << 24, 1 << 20]}]}
    comm.update(comm_over)
    return {"format": "loopcoll.profile/1", "topology": "hpn:1x2x8", "communicators": [comm]}


def test_round_trip_and_sorted_sizes(tmp_path: Path) -> None:
    p = profile_from_dict(_prof())
    assert p.communicator("dp0").collectives[0].sizes_bytes == (1 << 20, 1 << 24)
    write_profile(tmp_path / "p.json", p)
    assert load_profile(tmp_path / "p.json") == p
    assert profile_from_dict(profile_to_dict(p)) == p
    assert p.comm_ranks() == {"dp0": (0, 8)}
    assert p.communicator("dp0").local_rank(8) == 1


@pytest.mark.parametrize(("over", "needle"), [
    ({"ranks": [0, 0]}, "repeat"),
    ({"ranks": []}, "ranks"),
    ({"ranks": [0, -1]}, "-1"),
    ({"ranks": [0, True]}, "True"),
    ({"name": ""}, "name"),
    ({"relay": "yes"}, "relay"),
    ({"collectives": [{"collective": "broadcast", "sizes": [1]}]}, "broadcast"),
    ({"collectives": [{"collective": "allgather", "sizes": [0]}]}, "sizes"),
    ({"collectives": [{"collective": "allgather", "sizes": [1]}, {"collective": "allgather", "sizes": [2]}]}, "twice"),
])
def test_bad_communicators_name_the_culprit(over: dict, needle: str) -> None:
    with pytest.raises(ProfileError, match=needle):
        profile_from_dict(_prof(**over))


def test_duplicate_names_format_and_files(tmp_path: Path) -> None:
    d = _prof()
    d["communicators"].append(d["communicators"][0])
    with pytest.raises(ProfileError, match="twice"):
        profile_from_dict(d)
    with pytest.raises(ProfileError, match="format"):
        profile_from_dict({**_prof(), "format": "x"})
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(ProfileError, match="bad.json"):
        load_profile(tmp_path / "bad.json")
    with pytest.raises(ProfileError, match="cannot read"):
        load_profile(tmp_path / "missing.json")


def test_topology_check_and_relative_topology_file(tmp_path: Path) -> None:
    topo = load_topology("hpn:1x2x8")
    profile_from_dict(_prof()).check_topology(topo)
    with pytest.raises(ProfileError, match="rank 16"):
        profile_from_dict(_prof(ranks=[0, 16])).check_topology(topo)
    (tmp_path / "t.json").write_text("{}")
    (tmp_path / "p.json").write_text(json.dumps({**_prof(), "topology": "t.json"}))
    assert load_profile(tmp_path / "p.json").topology == str(tmp_path / "t.json")

"""msccl_xml.deploy: one fitted, checked, digested version per (topology, collective, target, bands)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import FrozenInstanceError, dataclass
from pathlib import Path

import pytest

from msccl_xml import parse, render_xml
from msccl_xml.deploy import DeployableVersion, deploy, fit, fit_bands, unbounded_chunk_cap
from msccl_xml.targets import MscclTarget, SizeBand, Target, TorchTarget, target
from mscclpp_plan import PlanError, render_plan
from mscclpp_plan.target import MscclppTarget
from synth import Schedule, load_topology, synthesize
from synth.errors import RuntimeLimitError, ScheduleError, XmlError
from synth.topologies.model import Topology

RING = load_topology("ring:4")


@dataclass(frozen=True)
class Tight:
    """A target like msccl-executor-nccl whose runtime addresses at most ``most`` chunks per source
    (``fixed``: it says so up front; otherwise it has no fixed cap and only refuses)."""

    most: int
    fixed: bool = True
    renders: list[int] | None = None  # the chunk counts it was asked to render, in order

    @property
    def name(self) -> str:
        return "tight"

    def chunk_cap(self, collective: str, nranks: int) -> int | None:
        return self.most if self.fixed else None

    def render(self, schedule: Schedule, topology: Topology, band: SizeBand, protocol: str) -> bytes:
        if self.renders is not None:
            self.renders.append(schedule.nchunks)
        if schedule.nchunks > self.most:
            raise RuntimeLimitError(f"{schedule.nchunks} chunks per source exceed tight's {self.most}")
        return MscclTarget().render(schedule, topology, band, protocol)


def _again(collective: str, topo: Topology = RING):
    return lambda cap: synthesize(collective, topo, chunks=cap)


def test_a_version_is_the_checked_xml_export_writes(tmp_path: Path) -> None:
    from msccl_xml import export

    res = synthesize("allgather", RING)
    v = fit(res, RING, target("msccl-executor-nccl"))
    text = export(res.schedule, RING, str(tmp_path / "ag.xml"))
    assert isinstance(v, DeployableVersion) and v.bands[0].program == text.encode()
    assert (tmp_path / "ag.xml").read_bytes() == v.bands[0].program
    assert v.bands[0].digest == hashlib.sha256(v.bands[0].program).hexdigest()
    assert (v.collective, v.topology, v.target, v.status, v.gap_pct) == ("allgather", RING.name,
                                                                         "msccl-executor-nccl", "optimal", 0.0)
    assert v.algbw_GBps == res.algbw_GBps and v.capped_chunks is None and v.note is None
    with pytest.raises(FrozenInstanceError):
        v.note = "x"  # type: ignore[misc]


def test_digest_is_stable_across_runs_and_changes_with_a_band() -> None:
    bands = [(0, 1023), (1024, None)]
    a = fit(synthesize("allreduce", RING), RING, target("rccl"), bands=bands)
    b = fit(synthesize("allreduce", RING), RING, target("rccl"), bands=bands)
    assert a.digest == b.digest and len(a.digest) == 64
    moved = fit(synthesize("allreduce", RING), RING, target("rccl"), bands=[(0, 2047), (2048, None)])
    other = fit(synthesize("allreduce", RING, chunks=1), RING, target("rccl"), bands=bands)
    assert len({a.digest, moved.digest, other.digest}) == 3
    # One result in several bands: rendered once with the first band's bounds, as the store writes it.
    assert [x.shares for x in a.bands] == [None, 0] and a.bands[1].program == a.bands[0].program


def test_fit_bands_renders_each_band_with_its_own_bounds_unless_shared() -> None:
    res = synthesize("allgather", RING)
    own = fit_bands([(0, 4095, res), (4096, None, res)], RING, target("msccl-executor-nccl"), share=False)
    progs = [parse(b.program.decode()) for b in own.bands if b.program is not None]
    assert [(p.min_bytes, p.max_bytes) for p in progs] == [(0, 4095), (4096, 0)]
    assert [b.shares for b in own.bands] == [None, None]
    legacy = fit_bands([(0, 4095, res)], RING, target("msccl-legacy"))
    assert b'maxBytes="4096"' in legacy.bands[0].program  # the runtime's exclusive upper end


def test_tree_collective_is_capped_to_the_target_and_says_so() -> None:
    res = synthesize("allgather", RING)
    assert res.schedule is not None and res.schedule.nchunks == 2
    v = fit(res, RING, Tight(1), resynthesize=_again("allgather"))
    assert v.schedule.nchunks == 1 and v.capped_chunks == 1
    assert v.note == "re-synthesized with at most 1 chunks per source: the uncapped schedule's 2 chunks exceed tight's limits"
    assert v.result is not None and v.result.schedule is v.schedule


def test_without_a_fixed_cap_the_chunks_are_halved_until_they_fit() -> None:
    topo = load_topology("hpn:1x2x2", ["fail2"])
    res = synthesize("allgather", topo)
    assert res.schedule is not None and res.schedule.nchunks == 45
    seen: list[int] = []
    v = fit(res, topo, Tight(3, fixed=False, renders=seen), resynthesize=_again("allgather", topo))
    assert seen[0] == 45 and len(seen) >= 3 and seen == sorted(seen, reverse=True)  # 45, then <= 22, ...
    assert v.schedule.nchunks == seen[-1] <= 3 < seen[-2] and v.capped_chunks is not None
    assert len(seen) == 3 and v.capped_chunks == min(22, seen[1]) // 2  # halved from what the first cap gave
    assert v.note == (f"re-synthesized with at most {v.capped_chunks} chunks per source: the uncapped schedule's "
                      "45 chunks exceed tight's limits")


def test_alltoall_falls_back_to_10_chunks_per_block() -> None:
    res = synthesize("alltoall", RING, chunks=12)
    assert res.schedule is not None and res.schedule.nchunks == 12
    v = fit(res, RING, Tight(10), resynthesize=_again("alltoall"))
    assert v.schedule.nchunks == 10 and v.capped_chunks == 10
    assert v.note == "re-synthesized with 10 chunks per block: the chosen 12 exceed tight's limits"
    with pytest.raises(RuntimeLimitError, match="exceed tight's 9"):  # at 10 or fewer: no fallback
        fit(synthesize("alltoall", RING, chunks=10), RING, Tight(9), resynthesize=_again("alltoall"))


def test_fixed_chunks_raise_or_record_the_limit() -> None:
    res = synthesize("allgather", RING)
    with pytest.raises(RuntimeLimitError, match="exceed tight's 1"):
        fit(res, RING, Tight(1))
    with pytest.raises(RuntimeLimitError, match=r"\(even with 1 chunk per source\)"):
        fit(res, RING, Tight(0), resynthesize=_again("allgather"))
    kept = fit(res, RING, Tight(1), strict=False)
    band = kept.bands[0]
    assert band.program is None and band.error == "2 chunks per source exceed tight's 1"
    assert band.schedule is res.schedule and band.digest == hashlib.sha256(res.schedule.to_json().encode()).hexdigest()


def test_torch_and_mscclpp_targets() -> None:
    torch = deploy(RING, "allgather", target="torch")
    assert torch.bands[0].program == torch.schedule.to_json().encode() and torch.target == "torch"
    assert isinstance(TorchTarget(), Target) and isinstance(MscclppTarget(), Target)
    res = synthesize("allgather", RING)
    pp = fit(res, RING, MscclppTarget(inplace=True))
    assert pp.bands[0].program == render_plan(res.schedule, RING, inplace=True).encode() and pp.target == "MSCCL++"
    assert json.loads(pp.bands[0].program)["inplace"] is True
    with pytest.raises(PlanError, match="protocol Simple only"):
        fit(res, RING, MscclppTarget(), protocol="LL")


def test_bad_targets_and_sources_are_one_clear_error() -> None:
    with pytest.raises(XmlError, match="unknown export target 'nccl'"):
        deploy(RING, "allgather", target="nccl")
    with pytest.raises(XmlError, match="unknown runtime 'x'"):
        MscclTarget("x")
    with pytest.raises(ScheduleError, match="expected a SynthResult or a Schedule, got str"):
        fit("ag.json", RING, TorchTarget())  # type: ignore[arg-type]
    with pytest.raises(ScheduleError, match="no bands"):
        fit_bands([], RING, TorchTarget())


def test_given_schedule_has_its_own_figures() -> None:
    sched = synthesize("reducescatter", RING).schedule
    assert sched is not None
    v = fit(sched, RING, target("msccl-executor-nccl"))
    assert (v.status, v.gap_pct, v.result) == ("given", None, None)
    assert v.algbw_GBps == sched.algbw_GBps(RING)
    assert v.bands[0].program == render_xml(sched, RING).encode()


def test_unbounded_chunk_cap_follows_the_target() -> None:
    assert unbounded_chunk_cap("allgather", 16, [1 << 20]) == 32768 // 16
    assert unbounded_chunk_cap("allgather", 16, [1 << 20], Tight(3)) == 3

"""Worker functions for tests/runtime/test_alltoallv_run.py (run in spawned gloo processes)."""

from __future__ import annotations


def run_cases(rank: int, world: int, jobs: list[tuple[str, list[list[list[int]]]]]) -> list[str]:
    """Per (schedule JSON, cases) job and case (an N x N matrix of elements), run the schedule and the
    native collective; report what ran and whether the outputs are equal."""
    import torch
    import torch.distributed as dist

    from runtime.executor.alltoallv import all_to_all_single_v
    from synth.alltoallv_schedule import AllToAllvSchedule

    out: list[str] = []
    cases = [(AllToAllvSchedule.from_json(js), sizes) for js, many in jobs for sizes in many]
    for c, (sched, sizes) in enumerate(cases):
        ins = [sizes[rank][d] for d in range(world)]
        outs = [sizes[s][rank] for s in range(world)]
        g = torch.Generator().manual_seed(1000 * c + rank)
        inp = torch.randn(sum(ins), generator=g)
        got = torch.full((sum(outs),), float("nan"))
        ref = torch.full((sum(outs),), float("nan"))
        how = all_to_all_single_v(got, inp, outs, ins, sched)
        dist.all_to_all_single(ref, inp, outs, ins)
        out.append(f"{how}:{bool(torch.equal(got, ref))}")
    # The same through the Executor: demand samples, then the schedule.
    from runtime.executor import Executor

    samples: list = []
    ex = Executor(comm="ep", sink=samples.extend)
    ex.set_alltoallv_schedule(cases[0][0])
    sizes = cases[0][1]
    ins = [sizes[rank][d] for d in range(world)]
    outs = [sizes[s][rank] for s in range(world)]
    inp = torch.arange(sum(ins), dtype=torch.float32) + 1000 * rank
    got = torch.zeros(sum(outs))
    ref = torch.zeros(sum(outs))
    ex.all_to_all_single(got, inp, outs, ins)
    dist.all_to_all_single(ref, inp, outs, ins)
    demand = [s.extra["send_bytes"] for s in samples if s.kind == "demand"]
    out.append(f"executor:{ex.history[-1][1]}:{bool(torch.equal(got, ref))}:{demand == [[4 * k for k in ins]]}")
    ex.close()
    return out

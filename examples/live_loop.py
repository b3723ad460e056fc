"""The closed loop inside a training script: executors follow the loopcoll daemon while a fault is injected.

What a real job does (one process per GPU, a daemon somewhere): make an ``Executor`` per communicator, point it
at the daemon with ``ex.follow(Client(...))``, and call its collectives instead of ``torch.distributed``'s.
Versions the daemon publishes are staged in the background and switched to at the next agreement (every
``sync_every`` collectives, the same collective on every rank); telemetry goes back to the daemon. Here, on CPU,
the GPUs are emulated: ``LOOPCOLL_EMULATION`` (docs/live.md) makes every rank's sends run at the speeds of
``hpn:1x2x2`` scaled down 1000x and injects ``fail2`` (rank 0's NIC at 1/8) from step 100 to 250; the daemon
notices, re-synthesizes, and the ranks swap.

Run on CPU (starts the daemon in this process and 4 gloo processes; needs ``pip install loopcoll[runtime]``):
    python examples/live_loop.py
In a real job: run ``loopcoll daemon`` with your topology and profile, then per GPU
    LOOPCOLL_TOKEN=... torchrun --nproc-per-node 8 examples/live_loop.py --daemon HOST:PORT --backend nccl
(no emulation there: the fault is whatever your fabric does).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

EMULATION = {"format": "loopcoll.emulation/1", "topology": "hpn:1x2x2", "gbps_scale": 1000,
             "faults": [{"failure": "fail2", "start_seq": 201, "end_seq": 501}]}   # steps 100..250 (2 calls/step)


def train(rank: int, world: int, steps: int, daemon: str, token: str | None) -> dict:
    import torch
    import torch.distributed as dist

    from runtime import Client
    from runtime.executor import Executor

    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")
    # 1. One executor per communicator; versions agreed every 10 collectives. hosts: which ranks share a host.
    ex = Executor(comm="world", sync_every=10, control_timeout_s=60, hosts=[r // 2 for r in range(world)])
    # 2. Versions come from the daemon (pushed, fetched, staged); samples go to it.
    client = Client(daemon, token=token, role="executor", rank=dist.get_rank(), comms=["world"])
    ex.follow(client)
    while not (ex._staged.get("allgather") and ex._staged.get("alltoall")):   # wait for version 1 once
        import time

        time.sleep(0.01)
    ex.sync_versions()
    # 3. A training-like step: gather parameters (AllGather), exchange tokens between experts (AllToAll).
    shard = torch.randn(1 << 16, device=device)
    params = torch.empty(world << 16, device=device)
    tokens = torch.randn(1 << 18, device=device)
    routed = torch.empty_like(tokens)
    for step in range(steps):
        ex.all_gather_into_tensor(params, shard)      # drop-in for dist.all_gather_into_tensor
        ex.all_to_all_single(routed, tokens)          # drop-in for dist.all_to_all_single
        shard.add_(routed[: shard.numel()].mean() * 1e-3)
        if rank == 0 and step % 50 == 0:
            print(f"step {step:4d}: versions {ex.active}", flush=True)
    ex.close()
    client.close()
    return {"swaps": [(s.switch_seq, s.switched) for s in ex.swaps if s.switched]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--daemon", default=None, help="HOST:PORT of a running loopcoll daemon (token: $LOOPCOLL_TOKEN)")
    ap.add_argument("--backend", default="gloo", choices=["gloo", "nccl"])
    args = ap.parse_args()
    if "RANK" in os.environ:  # under torchrun, against a real daemon
        import torch
        import torch.distributed as dist

        if args.backend == "nccl":
            torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        dist.init_process_group(args.backend)
        train(dist.get_rank(), dist.get_world_size(), args.steps, args.daemon, None)
        dist.destroy_process_group()
        return
    import json
    import tempfile

    from runtime import Controller, ControllerConfig, profile_from_dict, serve
    from runtime.executor import emulation_from_dict
    from runtime.executor.launch import launch
    from runtime.scenarios.live import LIVE_CONTROLLER

    emu = emulation_from_dict(EMULATION)
    os.environ["LOOPCOLL_EMULATION"] = json.dumps(EMULATION)       # inherited by the executor processes
    topo = emu.scaled_topology()                                  # the controller sees the emulated speeds
    profile = profile_from_dict({"format": "loopcoll.profile/1", "topology": emu.topology, "communicators": [
        {"name": "world", "ranks": list(range(topo.nranks)), "collectives": [
            {"collective": "allgather", "sizes": [topo.nranks << 18]}, {"collective": "alltoall", "sizes": [1 << 20]}]}]})
    decisions = []
    with tempfile.TemporaryDirectory() as store:
        ctl = Controller(topo, profile, store, config=ControllerConfig(**LIVE_CONTROLLER),
                         log=lambda r: decisions.append(r) if r.get("event") in ("flag", "publish") else None)
        with serve(ctl, token="example", store_dir=store, log=lambda r: None) as daemon:
            per_rank = launch(train, topo.nranks, args.steps, daemon.address, "example", timeout_s=600)
    for d in decisions:
        print(f"controller: {d['event']} {d.get('collective')} v{d.get('version')} ({d.get('reason')})")
    print("rank 0 swaps (switch seq, {collective: (old, new)}):", per_rank[0]["swaps"])


if __name__ == "__main__":
    main()

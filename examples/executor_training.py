"""A DDP training loop whose gradient all-reduce runs loopcoll schedules through the executor (one line:
``model.register_comm_hook(None, ddp_comm_hook(ex))``).

Run on CPU with 4 local processes (gloo):      python examples/executor_training.py --nprocs 4
With a loopcoll daemon pushing new versions:   add --daemon HOST:PORT --token-file F, where F is the file
                                               `loopcoll daemon run --token-file F` wrote (or set $LOOPCOLL_TOKEN)
On GPUs (one process per GPU), e.g. torchrun --nproc-per-node 8 examples/executor_training.py --backend nccl

Bad options end at once with one ``executor_training.py: error: ...`` line (exit 2), before any process
starts: a --daemon without a token, an unreadable token file, a daemon that cannot be reached or refuses the
token. ``--telemetry DIR`` creates DIR.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def train(rank: int, world: int, steps: int, daemon: str | None, telemetry: str | None,
          token: str | None = None) -> float:
    import torch
    import torch.distributed as dist

    from torch.nn.parallel import DistributedDataParallel

    from msccl_xml import lower
    from runtime.executor import Executor, JsonlSink, ddp_comm_hook
    from synth import named_topology, synthesize

    cuda = dist.get_backend() == "nccl"
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1)).to(device)
    model = DistributedDataParallel(net, device_ids=[device] if cuda else None)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    sink = JsonlSink(f"{telemetry}/rank{rank}.jsonl") if telemetry else None

    # 1. One executor per communicator; agree on versions every 10 collectives (a checkpoint boundary).
    ex = Executor(comm="world", sink=sink, sync_every=10, control_timeout_s=60)
    if daemon:  # 2a. versions come from the loopcoll daemon, samples go to it
        from runtime import Client

        client = Client(daemon, token=token, role="executor", rank=dist.get_rank(), comms=["world"])
        ex.follow(client)
    else:  # 2b. or load a schedule yourself (a file path, a Program, a Schedule or a SynthResult)
        ex.load(lower(synthesize("allreduce", named_topology(f"ring:{world}")).schedule), version=1)
    # 3. one line: every gradient bucket's all-reduce (averaged, like DDP's default) runs through the executor
    model.register_comm_hook(None, ddp_comm_hook(ex))

    g = torch.Generator().manual_seed(rank)
    for step in range(steps):
        x = torch.randn(32, 64, generator=g).to(device)
        loss = ((model(x) - x.sum(1, keepdim=True)) ** 2).mean()
        opt.zero_grad()
        loss.backward()  # DDP calls the hook per bucket: ex.all_reduce on the bucket's flat gradients
        opt.step()
        if step == steps // 2 and not daemon:  # 4. hot-swap mid-training: stage now, switch at the next sync
            ex.stage(lower(synthesize("allreduce", named_topology(f"nvswitch:{world}")).schedule), version=2)
    ex.close()  # sends what is pending (to the daemon too) before returning
    if daemon:
        client.close()
    if sink:
        sink.close()
    if rank == 0:
        print(f"loss {loss.item():.4f}; versions used: {sorted({v for _s, _c, v in ex.history}, key=str)}")
    return float(loss.item())


def check_daemon(address: str, token_file: str | None) -> str:
    """The token for ``address``, after one round trip to the daemon (so that a wrong address or token
    fails here, in one line, rather than in every training process). Raises ``ValueError``."""
    from runtime.service.client import Client, read_token
    from runtime.errors import WireError

    if token_file is None and not os.environ.get("LOOPCOLL_TOKEN"):
        raise ValueError("--daemon needs the daemon's token: pass --token-file F (the file `loopcoll daemon run "
                         "--token-file F` writes) or set LOOPCOLL_TOKEN")
    try:
        token = read_token(token_file=token_file)
    except WireError as exc:
        raise ValueError(f"--token-file: {exc}") from None
    try:
        with Client(address, token=token, role="tool", timeout_s=5.0) as client:
            client.status()
    except WireError as exc:
        raise ValueError(f"--daemon {address}: {exc}") from None
    return token


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nprocs", type=int, default=4)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--backend", default="gloo", choices=["gloo", "nccl"])
    ap.add_argument("--daemon", default=None, metavar="HOST:PORT", help="HOST:PORT of a loopcoll daemon")
    ap.add_argument("--token-file", default=None, metavar="F",
                    help="the daemon's token file (`loopcoll daemon run --token-file F`); default $LOOPCOLL_TOKEN")
    ap.add_argument("--telemetry", default=None, metavar="DIR", help="directory for per-rank telemetry JSONL "
                    "(created if missing)")
    args = ap.parse_args(argv)
    if args.nprocs < 2 and "RANK" not in os.environ:
        ap.error(f"--nprocs must be at least 2 (an all-reduce needs two ranks), got {args.nprocs}")
    if args.token_file is not None and args.daemon is None:
        ap.error("--token-file is the daemon's token: it needs --daemon HOST:PORT")
    token = None
    if args.daemon is not None:
        try:
            token = check_daemon(args.daemon, args.token_file)
        except ValueError as exc:
            ap.error(str(exc))
    if args.telemetry is not None:
        try:
            Path(args.telemetry).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            ap.error(f"--telemetry {args.telemetry}: cannot create the directory: {exc.strerror}")
    if "RANK" in os.environ:  # under torchrun
        import torch
        import torch.distributed as dist

        if args.backend == "nccl":
            torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        dist.init_process_group(args.backend)
        train(dist.get_rank(), dist.get_world_size(), args.steps, args.daemon, args.telemetry, token)
        dist.destroy_process_group()
        return
    from runtime.executor.launch import launch

    launch(train, args.nprocs, args.steps, args.daemon, args.telemetry, token, backend=args.backend)


if __name__ == "__main__":
    main()

"""Built-in workloads: a Llama-3.1-405B-like dense model and a DeepSeek-v3-671B-like MoE, one pipeline stage.

Scope (as in MCCL §6.3): pipeline parallelism 16, and only one stage is simulated (traffic between
stages is point to point), so ``gpus`` = 128…2048 stands for full jobs of 2048…32768 GPUs. Every
data-parallel replica of the stage processes ``tokens`` = 16384 tokens per iteration (forward and
backward); the fabric has 8 GPUs per host.

Compute model: ``flops / (peak × mfu)`` with peak 989.4 TFLOP/s (dense BF16 of an H100/H200 SXM,
NVIDIA datasheets) and ``mfu`` 0.40 (Llama 3 reports 38–43 % BF16 MFU on 8 K–16 K H100s:
Dubey et al., "The Llama 3 Herd of Models", 2024, Table 4). Training FLOPs per token are
``6 × (active parameters)`` plus causal attention ``6 × seq × (score width)`` per layer (the
``1/2`` of causality applied to the usual ``12``).

Llama-3.1-405B (Dubey et al. 2024, Table 3): 126 layers, hidden ``h`` = 16384, FFN 53248, 128
heads, 8 KV heads of 128, vocabulary 128256, sequence 8192. Per layer
``2h² + 2·h·1024`` (attention) ``+ 3·h·53248`` (SwiGLU MLP) = 3.188 G parameters; 126 layers plus
embedding and output (2 × 128256 × h) give 405.8 G. A stage holds ⌈126/16⌉ = 8 layers.
Parallelism: tensor-parallel 8 inside a host with sequence parallelism (per layer, forward: 2
AllGather + 2 ReduceScatter of the activations ``tokens × h × 2`` bytes = 537 MB, backward: the
same 4 again, on the host's 8 GPUs, blocking), FSDP (ZeRO-3) across the hosts: data-parallel
collectives on the 8 rail groups (GPU ``i`` of every host), all 8 at once. Per layer each GPU holds
``3.188 G / 8`` parameters = 797 MB in BF16: AllGather of them before forward and again before
backward (S = 797 MB output), ReduceScatter of the BF16 gradients after backward (S = 797 MB input).
FSDP prefetch overlaps the next layer's AllGather and the previous layer's ReduceScatter with
compute (stream ``dp``); tensor-parallel collectives are on the critical path (stream ``tp``).

DeepSeek-v3-671B (DeepSeek-AI, "DeepSeek-V3 Technical Report", 2024, §2 and §4.2): 61 layers
(the first 3 dense), hidden 7168, MLA attention (128 heads, q-LoRA 1536, kv-LoRA 512, q/k head
dim 128 + 64 rope, v 128): 187 M parameters per layer; 256 routed experts and 1 shared expert
of ``3 × 7168 × 2048`` = 44.0 M parameters each, top-8 routing; vocabulary 129280; sequence 4096.
58 × (11.32 G + 0.19 G) + 3 dense layers + embeddings ≈ 671 G. Active per token per MoE layer:
attention + 9 experts + router = 585 M. A stage holds 4 MoE layers (61/16 ≈ 3.8).
Parallelism: no tensor parallelism (each GPU is a data-parallel replica for attention with its
own ``tokens``); expert parallelism over ``E = min(gpus, 256)`` consecutive GPUs (whole hosts,
across hosts), ``256/E`` experts per GPU. Per MoE layer, forward: dispatch AllToAll of
``tokens × 8 × 7168`` bytes (FP8, 940 MB per GPU) and combine (BF16, 1.88 GB); backward the two
again in BF16 (1.88 GB each); blocking. Gradients (after backward, overlapped with nothing):
non-expert parameters (attention, shared expert, router: 4 × 233 M) are reduced hierarchically —
ReduceScatter inside the host then ReduceScatter + AllGather on the rail group of the hosts
(1/8 of the BF16 bytes each, ZeRO-1) — and, when ``gpus > E``, the routed-expert gradients of
each GPU (``256/E × 4 × 44 M`` parameters) across the ``gpus/E`` expert-parallel replicas
(ReduceScatter + AllGather on the stride-``E`` communicator).

Every communicator that holds GPU 0 is the one listed: the failure scenarios all hit GPU 0 and
training is synchronous, so the iteration waits for its slowest instance.

>>> w = llama405b(128)
>>> w.communicator_ranks("tp"), len(w.communicator_ranks("dp"))
((0, 1, 2, 3, 4, 5, 6, 7), 16)
>>> round(w.meta["params_per_stage"] / 1e9, 2)
25.5
>>> d = deepseek671b(512)
>>> len(d.communicator_ranks("ep")), d.communicator_ranks("edp")
(256, (0, 256))
"""

from __future__ import annotations

from typing import Any

from synth.workloads.model import WORKLOAD_FORMAT, Workload, WorkloadError

__all__ = ["GENERATORS", "PEAK_TFLOPS", "MFU", "deepseek671b", "llama405b", "generate"]

PEAK_TFLOPS = 989.4
MFU = 0.40
GPUS_PER_HOST = 8


def _check(gpus: int, tokens: int, pipeline: int) -> None:
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 2 * GPUS_PER_HOST or gpus % GPUS_PER_HOST:
        raise WorkloadError(f"gpus must be a multiple of {GPUS_PER_HOST} and >= {2 * GPUS_PER_HOST}, got {gpus!r}")
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
        raise WorkloadError(f"tokens must be an integer >= 1, got {tokens!r}")
    if isinstance(pipeline, bool) or not isinstance(pipeline, int) or pipeline < 1:
        raise WorkloadError(f"pipeline must be an integer >= 1, got {pipeline!r}")


def llama405b(gpus: int, *, tokens: int = 16384, pipeline: int = 16, mfu: float = MFU) -> Workload:
    """Llama-3.1-405B-like dense stage on ``gpus`` GPUs (module docstring: derivation)."""
    _check(gpus, tokens, pipeline)
    h, ffn, kv, layers_total, seq, vocab, tp = 16384, 53248, 1024, 126, 8192, 128256, 8
    layer_params = 2 * h * h + 2 * h * kv + 3 * h * ffn
    layers = -(-layers_total // pipeline)
    shard_bytes = layer_params / tp * 2
    act_bytes = tokens * h * 2
    layer_flops = (6 * layer_params * tokens + 6 * tokens * seq * h) / tp
    ops: list[dict[str, Any]] = []
    prev_fwd: str | None = None
    for i in range(layers):  # forward
        ag = f"L{i}.fwd.fsdp_ag"
        ops.append({"name": ag, "kind": "allgather", "comm": "dp", "bytes": shard_bytes, "stream": "dp",
                    "label": "FSDP param AllGather"})
        deps = [ag] + ([prev_fwd] if prev_fwd else [])
        for j, kind in enumerate(("allgather", "reducescatter", "allgather", "reducescatter")):
            ops.append({"name": f"L{i}.fwd.tp{j}", "kind": kind, "comm": "tp", "bytes": act_bytes, "stream": "tp",
                        "after": deps, "label": "TP activation " + ("AllGather" if j % 2 == 0 else "ReduceScatter")})
            deps = [f"L{i}.fwd.tp{j}"]
        ops.append({"name": f"L{i}.fwd", "kind": "compute", "flops": layer_flops / 3, "after": deps,
                    "label": "forward"})
        prev_fwd = f"L{i}.fwd"
    prev = prev_fwd
    for i in reversed(range(layers)):  # backward
        ag = f"L{i}.bwd.fsdp_ag"
        ops.append({"name": ag, "kind": "allgather", "comm": "dp", "bytes": shard_bytes, "stream": "dp",
                    "label": "FSDP param AllGather"})
        deps = [ag, prev] if prev else [ag]
        for j, kind in enumerate(("allgather", "reducescatter", "allgather", "reducescatter")):
            ops.append({"name": f"L{i}.bwd.tp{j}", "kind": kind, "comm": "tp", "bytes": act_bytes, "stream": "tp",
                        "after": deps, "label": "TP activation " + ("AllGather" if j % 2 == 0 else "ReduceScatter")})
            deps = [f"L{i}.bwd.tp{j}"]
        ops.append({"name": f"L{i}.bwd", "kind": "compute", "flops": 2 * layer_flops / 3, "after": deps,
                    "label": "backward"})
        ops.append({"name": f"L{i}.bwd.fsdp_rs", "kind": "reducescatter", "comm": "dp", "bytes": shard_bytes,
                    "stream": "dp", "after": [f"L{i}.bwd"], "label": "FSDP grad ReduceScatter"})
        prev = f"L{i}.bwd"
    ops.append({"name": "step_end", "kind": "compute", "time_s": 0.0,
                "after": [prev] + [f"L{i}.bwd.fsdp_rs" for i in range(layers)], "label": "optimizer (not timed)"})
    return Workload.from_dict({
        "format": WORKLOAD_FORMAT, "name": f"llama405b-{gpus}",
        "description": f"Llama-3.1-405B-like stage: {layers} layers, TP 8 in host, FSDP over {gpus // tp} hosts, "
                       f"{tokens} tokens per replica, pipeline {pipeline}",
        "gpus": gpus, "compute": {"peak_tflops": PEAK_TFLOPS, "mfu": mfu},
        "communicators": {"tp": {"start": 0, "stride": 1, "size": tp},
                          "dp": {"start": 0, "stride": GPUS_PER_HOST, "size": gpus // GPUS_PER_HOST,
                                 "relay_share": 1 / GPUS_PER_HOST}},
        "ops": ops,
        "meta": {"model": "llama-3.1-405b", "layers_per_stage": layers, "params_per_stage": layers * layer_params,
                 "params_total": layers_total * layer_params + 2 * vocab * h,
                 "tokens_per_replica": tokens, "pipeline": pipeline, "tp": tp, "dp": gpus // tp},
    })


def deepseek671b(gpus: int, *, tokens: int = 16384, pipeline: int = 16, mfu: float = MFU,
                 ep_max: int = 256) -> Workload:
    """DeepSeek-v3-671B-like MoE stage on ``gpus`` GPUs (module docstring: derivation)."""
    _check(gpus, tokens, pipeline)
    h, experts, topk, seq, layers_total = 7168, 256, 8, 4096, 61
    attn = 7168 * 1536 + 1536 * 128 * 192 + 7168 * (512 + 64) + 512 * 128 * 256 + 128 * 128 * 7168
    expert = 3 * h * 2048
    router = h * experts
    layers = round(layers_total / pipeline)
    ep = min(gpus, ep_max)
    if ep % GPUS_PER_HOST or experts % ep or gpus % ep:
        raise WorkloadError(f"expert parallelism {ep} must divide {experts} experts and {gpus} GPUs")
    attn_flops = 6 * attn * tokens + 6 * tokens * seq * 128 * (192 + 128) / 2
    expert_flops = 6 * ((topk + 1) * expert + router) * tokens
    dispatch_fp8, bf16 = tokens * topk * h, tokens * topk * h * 2
    ops: list[dict[str, Any]] = []
    prev: str | None = None
    for i in range(layers):
        a = [prev] if prev else []
        ops.append({"name": f"L{i}.fwd.attn", "kind": "compute", "flops": attn_flops / 3, "after": a,
                    "label": "forward"})
        ops.append({"name": f"L{i}.fwd.dispatch", "kind": "alltoall", "comm": "ep", "bytes": dispatch_fp8,
                    "after": [f"L{i}.fwd.attn"], "label": "EP dispatch AllToAll (FP8)"})
        ops.append({"name": f"L{i}.fwd.experts", "kind": "compute", "flops": expert_flops / 3,
                    "after": [f"L{i}.fwd.dispatch"], "label": "forward"})
        ops.append({"name": f"L{i}.fwd.combine", "kind": "alltoall", "comm": "ep", "bytes": bf16,
                    "after": [f"L{i}.fwd.experts"], "label": "EP combine AllToAll (BF16)"})
        prev = f"L{i}.fwd.combine"
    for i in reversed(range(layers)):
        ops.append({"name": f"L{i}.bwd.combine", "kind": "alltoall", "comm": "ep", "bytes": bf16, "after": [prev],
                    "label": "EP combine-grad AllToAll (BF16)"})
        ops.append({"name": f"L{i}.bwd.experts", "kind": "compute", "flops": 2 * expert_flops / 3,
                    "after": [f"L{i}.bwd.combine"], "label": "backward"})
        ops.append({"name": f"L{i}.bwd.dispatch", "kind": "alltoall", "comm": "ep", "bytes": bf16,
                    "after": [f"L{i}.bwd.experts"], "label": "EP dispatch-grad AllToAll (BF16)"})
        ops.append({"name": f"L{i}.bwd.attn", "kind": "compute", "flops": 2 * attn_flops / 3,
                    "after": [f"L{i}.bwd.dispatch"], "label": "backward"})
        prev = f"L{i}.bwd.attn"
    dense_bytes = layers * (attn + expert + router) * 2
    ops.append({"name": "grad.host_rs", "kind": "reducescatter", "comm": "tp", "bytes": dense_bytes, "after": [prev],
                "label": "dense grad ReduceScatter (host)"})
    ops.append({"name": "grad.rail_rs", "kind": "reducescatter", "comm": "dp", "bytes": dense_bytes / GPUS_PER_HOST,
                "after": ["grad.host_rs"], "label": "dense grad ReduceScatter (rail, ZeRO-1)"})
    ops.append({"name": "param.rail_ag", "kind": "allgather", "comm": "dp", "bytes": dense_bytes / GPUS_PER_HOST,
                "after": ["grad.rail_rs"], "label": "dense param AllGather (rail)"})
    comms: dict[str, Any] = {
        "ep": {"start": 0, "stride": 1, "size": ep},
        "tp": {"start": 0, "stride": 1, "size": GPUS_PER_HOST},
        "dp": {"start": 0, "stride": GPUS_PER_HOST, "size": gpus // GPUS_PER_HOST, "relay_share": 1 / GPUS_PER_HOST},
    }
    if gpus > ep:
        ebytes = experts // ep * layers * expert * 2
        ops.append({"name": "grad.expert_rs", "kind": "reducescatter", "comm": "edp", "bytes": ebytes, "after": [prev],
                    "label": "expert grad ReduceScatter"})
        ops.append({"name": "param.expert_ag", "kind": "allgather", "comm": "edp", "bytes": ebytes,
                    "after": ["grad.expert_rs"], "label": "expert param AllGather"})
        comms["edp"] = {"start": 0, "stride": ep, "size": gpus // ep, "relay_share": 1 / GPUS_PER_HOST}
    return Workload.from_dict({
        "format": WORKLOAD_FORMAT, "name": f"deepseek671b-{gpus}",
        "description": f"DeepSeek-v3-671B-like stage: {layers} MoE layers, EP {ep} ({experts // ep} experts/GPU), "
                       f"{tokens} tokens per GPU, pipeline {pipeline}",
        "gpus": gpus, "compute": {"peak_tflops": PEAK_TFLOPS, "mfu": mfu}, "communicators": comms, "ops": ops,
        "meta": {"model": "deepseek-v3-671b", "layers_per_stage": layers,
                 "params_per_stage": layers * (attn + (experts + 1) * expert + router),
                 "params_total": (layers_total - 3) * (attn + (experts + 1) * expert + router)
                 + 3 * (attn + 3 * h * 18432) + 2 * 129280 * h,
                 "tokens_per_replica": tokens, "pipeline": pipeline, "ep": ep},
    })


GENERATORS = {"llama405b": llama405b, "deepseek671b": deepseek671b}


def generate(name: str, gpus: int, **kwargs: Any) -> Workload:
    """A built-in workload by name (``llama405b``, ``deepseek671b``)."""
    if name not in GENERATORS:
        raise WorkloadError(f"unknown workload {name!r}; built-in: {', '.join(sorted(GENERATORS))}")
    return GENERATORS[name](gpus, **kwargs)

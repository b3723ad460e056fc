"""The public surface of msccl_xml is pinned."""

from __future__ import annotations

import msccl_xml


def test_public_api_is_pinned() -> None:
    assert sorted(msccl_xml.__all__) == sorted([
        "RUNTIMES", "BufferKind", "CheckResult", "CheckStatus", "Gpu", "Program", "Protocol", "RuntimeLimits",
        "Step", "StepType", "Threadblock", "check", "check_file", "check_text", "export", "lint_text",
        "lower", "nop", "parse", "program_algbw_GBps", "program_link_loads", "program_to_schedule",
        "read", "render_xml",
        "runtime_limits", "switch_path", "verdict_message", "write",
    ])
    for name in msccl_xml.__all__:
        assert hasattr(msccl_xml, name)


def test_runtime_limits_table() -> None:
    rows = {name: (lim.max_steps_per_tb, lim.max_tbs_per_gpu, lim.max_channels, lim.max_cnt)
            for name, lim in msccl_xml.RUNTIMES.items()}
    assert rows == {"msccl-executor-nccl": (64, 1024, 32, 71), "rccl": (64, 64, 128, 71),
                    "msccl-legacy": (256, 216, 32, 71)}

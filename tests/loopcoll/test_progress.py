"""Progress lines on stderr: live on a terminal (a real pty), a plain line now and then otherwise."""

from __future__ import annotations

import io
import os
import select

from loopcoll._progress import PLAIN_EVERY_S, ProgressLine


class _Clock:
    """A settable clock: the throttle is tested without sleeping."""

    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_plain_stream_gets_a_whole_line_every_few_seconds():
    buf, clock = io.StringIO(), _Clock()
    bar = ProgressLine("calibrate", stream=buf, clock=clock)
    bar(0.1, "fitting nccl_ring (1/1), 3 evaluations")
    assert buf.getvalue() == ""  # a short run stays silent
    clock.t += PLAIN_EVERY_S
    bar(0.25, "leave-one-out 5/20")
    clock.t += 1.0
    bar(0.3, "leave-one-out 6/20")  # within the interval: dropped
    clock.t += PLAIN_EVERY_S
    bar(1.0, "leave-one-out 20/20")
    bar.close()
    assert buf.getvalue().splitlines() == ["loopcoll: calibrate  25% leave-one-out 5/20 (5 s)",
                                           "loopcoll: calibrate 100% leave-one-out 20/20 (11 s)"]


def test_terminal_gets_one_live_line_cleared_at_the_end():
    master, slave = os.openpty()
    try:
        with open(slave, "w", closefd=False) as tty:
            clock = _Clock()
            with ProgressLine("replay", stream=tty, clock=clock) as bar:
                bar(0.0, "bootstrap: synthesizing the first versions")  # at once on a terminal
                clock.t += 0.5
                bar(0.5, "x")
        chunks = []
        while select.select([master], [], [], 0.5)[0]:  # a pty hands the bytes over in pieces
            chunks.append(os.read(master, 4096))
        got = b"".join(chunks).decode()
    finally:
        os.close(master)
        os.close(slave)
    first = "loopcoll: replay   0% bootstrap: synthesizing the first versions (0 s)"
    second = "loopcoll: replay  50% x (0 s)"
    assert got == "\r" + first + "\r" + second.ljust(len(first)) + "\r" + " " * len(first) + "\r"
    assert "\n" not in got


def test_quiet_writes_nothing():
    buf = io.StringIO()
    bar = ProgressLine("calibrate", quiet=True, stream=buf, every_s=0.0)
    bar(0.5, "x")
    bar.close()
    assert buf.getvalue() == ""

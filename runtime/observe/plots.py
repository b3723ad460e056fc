"""PNG plots for ``loopcoll inspect --plot DIR`` (matplotlib, Agg backend, imported lazily).

Per communicator: ``timeline_<comm>.png`` (busbw per time bin of every collective/size series, detected slow
periods shaded) and ``heatmap_<comm>.png`` (per rank and time bin, the rank's median busbw relative to the
series baseline: late-arriving ranks show as bright rows, slow periods as dark columns).

>>> import tempfile, pathlib
>>> from runtime.observe import SyntheticSpec, connect, ingest, write_logs
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> _ = write_logs(d / "logs", SyntheticSpec(nranks=2, ncolls=20, colls=(("AllGather", 1 << 20),)))
>>> con = connect(); _ = ingest(con, [d / "logs"])
>>> [pathlib.Path(p).name for p in write_plots(con, d / "png")]
['heatmap_0x5eed0c0ffee.png', 'timeline_0x5eed0c0ffee.png']
"""

from __future__ import annotations

import io
import os
import re
from pathlib import Path
from typing import Any

import numpy as np

from runtime.observe import analyze as A
from runtime.observe.errors import ObserveError
from synth.fileio import write_bytes_atomic

__all__ = ["write_plots"]


def _save(fig: Any, path: Path) -> None:
    """Write the figure atomically (a reader never sees half a PNG)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    write_bytes_atomic(path, buf.getvalue())


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:80]


def write_plots(con: Any, directory: str | os.PathLike[str], *, bin_s: float | None = None,
                signal: str = "median", periods: list[A.SlowPeriod] | None = None) -> list[str]:
    """Write the plots of the current window into ``directory``; returns the files written (sorted)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:  # pragma: no cover
        raise ObserveError(f"--plot needs matplotlib: pip install 'loopcoll[plot]' ({exc})") from None
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    bw = A.auto_bin_s(con) if bin_s is None else bin_s
    if periods is None:
        periods = A.slow_periods(con, bin_s=bw, signal=signal, store=False)
    rows = A.timeline(con, bw, signal=signal)
    t0row = con.execute("SELECT min(t_s) FROM w_coll").fetchone()
    if not rows or t0row[0] is None:
        return []
    t0 = float(t0row[0])
    written: list[str] = []
    for comm in sorted({r["comm_id"] for r in rows}):
        fig, ax = plt.subplots(figsize=(9, 3.6), dpi=100)
        series: dict[str, list[dict[str, Any]]] = {}
        for r in rows:
            if r["comm_id"] == comm:
                series.setdefault(f"{r['coll']} {r['size_bucket']}", []).append(r)
        for name, ser in sorted(series.items()):
            xs: list[float] = []
            ys: list[float] = []
            for r in ser:
                if xs and r["t_s"] - t0 - xs[-1] > 2.5 * bw:
                    xs.append(np.nan)  # an idle gap: do not draw a line across it
                    ys.append(np.nan)
                xs.append(r["t_s"] - t0)
                ys.append(r["busbw_gbs"])
            ax.plot(xs, ys, marker=".", ms=3, lw=1, label=name)
        for i, p in enumerate(x for x in periods if x.comm_id == comm):
            ax.axvspan(p.start_s - t0, p.end_s - t0, color="tab:red", alpha=0.15,
                       label="detected slow period" if i == 0 else None)
        ax.set_xlabel("time since window start (s)")
        ax.set_ylabel(f"busbw, {signal} over ranks (GB/s)")
        ax.set_title(f"communicator {comm}: busbw per {bw:.2f} s bin")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower left")
        fig.tight_layout()
        path = out / f"timeline_{_safe(comm)}.png"
        _save(fig, path)
        plt.close(fig)
        written.append(str(path))
        cells = con.execute(f"""
            WITH base AS (SELECT coll, msg_size_bytes, median(busbw_gbs) AS b FROM w_coll WHERE comm_id = ?
                          GROUP BY ALL)
            SELECT r.rank, CAST(floor((r.t_s - {t0!r}) / {float(bw)!r}) AS BIGINT) AS bin, median(r.busbw_gbs / base.b)
            FROM w_coll r JOIN base USING (coll, msg_size_bytes) WHERE r.comm_id = ? AND base.b > 0
            GROUP BY ALL""", [comm, comm]).fetchall()
        if not cells:
            continue
        nr = max(c[0] for c in cells) + 1
        nb = max(c[1] for c in cells) + 1
        grid = np.full((nr, nb), np.nan)
        for rank, b, v in cells:
            grid[rank, b] = v
        fig, ax = plt.subplots(figsize=(9, 3.2 if nr <= 16 else 5.0), dpi=100)
        im = ax.imshow(grid, aspect="auto", interpolation="nearest", cmap="viridis", origin="lower",
                       extent=(0, nb * bw, -0.5, nr - 0.5), vmin=0.0, vmax=float(np.nanpercentile(grid, 99)) or 1.0)
        fig.colorbar(im, ax=ax, label="busbw / series median")
        ax.set_xlabel("time since window start (s)")
        ax.set_ylabel("rank (communicator-local)")
        ax.set_title(f"communicator {comm}: per-rank busbw (late ranks bright, slow periods dark)", fontsize=10)
        if nr <= 16:
            ax.set_yticks(range(nr))
        fig.tight_layout()
        path = out / f"heatmap_{_safe(comm)}.png"
        _save(fig, path)
        plt.close(fig)
        written.append(str(path))
    return sorted(written)

"""Choosing the chunks per block K and the integral split of every block: within 0.1 % of the LP.

An AllToAll schedule sends every (source, destination) block as K whole chunks over the paths of
the LP's optimum (its *support*). Its time is ``T(x) = max_e Σ_{p∋e} x_p / (K·c_e)`` for integer
chunks ``x_p`` (``Σ_{p∈block} x_p = K``); the LP's is the same with ``x_p = K·f_p``, ``f_p`` the
LP's share of the block on path p. :func:`choose_chunks` looks for a small K (from the
requested one up to a cap) whose rounding loses at most :data:`TARGET_LOSS` (0.1 %), trying:

1. the caller's heuristic at the first K (largest remainder, dives, ...);
2. *exact K*: the common denominator of the shares ``f_p`` (rational reconstruction); when it is
   at most the cap, ``x_p = K·f_p`` is integral and the LP's optimum is kept exactly;
3. per K of :func:`candidate_nchunks` (the first K, then those that leave the fewest paths with a
   fractional ``K·f_p``): largest remainder, then a small MIP over the support (:func:`mip_round`,
   HiGHS: integer chunks per path, minimise T, seeded with the heuristic), within a time budget
   shared by all K.

The loss is always certified against the LP optimum (a bound for every K and every rounding).
When no K within the cap reaches the target, the best rounding is returned with the limit that
bound it (:attr:`Pick.binding`): the chunk cap, or the rounding time budget.

Examples
--------
>>> import numpy as np
>>> bp = BlockPaths(np.array([0, 0]), np.array([0, 1, 2]), np.array([0, 1]), np.array([1.0, 2.0]),
...                 np.array([1 / 3, 2 / 3]))
>>> pick = choose_chunks(bp, 10, 64, budget_s=1.0)
>>> pick.nchunks, pick.chunks.tolist(), pick.loss, pick.binding
(12, [4, 8], 0.0, None)
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from synth.errors import SolverError
from synth.solvers.highs import quiet_highs

__all__ = ["DEFAULT_NCHUNKS", "MAX_AUTO_NCHUNKS", "MAX_CANDIDATES", "MIP_MAX_NODES", "MIP_MAX_PATHS", "ROUNDING_BUDGET_S",
           "TARGET_LOSS", "BlockPaths", "Pick", "binding_note", "candidate_nchunks", "check_rounding_args", "choose_chunks",
           "chunk_cap", "exact_nchunks", "mip_round", "remainder_round"]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

#: Rounding loss (relative to the LP optimum) the chunk choice aims at.
TARGET_LOSS = 1e-3
#: Chunks per block tried first when the caller does not fix them.
DEFAULT_NCHUNKS = 10
#: Most chunks per block the automatic choice uses: at most 64, so that a path's chunks fit one
#: MSCCL step (``cnt`` ≤ 71) and the steps per threadblock stay those of the K = 10 schedule.
MAX_AUTO_NCHUNKS = 64
#: Default wall-clock seconds of the K search (MIPs included), on top of the LP.
ROUNDING_BUDGET_S = 3.0
#: Chunk counts tried after the first, at most (:func:`candidate_nchunks`).
MAX_CANDIDATES = 16
#: Branch-and-bound nodes per MIP: the MIP's work limit, so that the result does not depend on the
#: machine's speed (the time budget is only a safety net).
MIP_MAX_NODES = 20
#: Largest support (paths) the MIP is built for; above it only the remainder roundings run (a
#: 1024-GPU fabric has millions of paths: the model alone would take longer than the budget).
MIP_MAX_PATHS = 20_000

_FRACTION_TOL = 1e-7
_MIP_SLACK = 2  # a path's chunks stay within this of K·f_p in the MIP


@dataclass(frozen=True)
class BlockPaths:
    """The LP's support: per path its block, its links (CSR ``starts``/``links``) and its LP share.

    ``caps`` holds every link's capacity (GB/s; only the links of some path are read) and
    ``share`` the fraction of its block the LP sends on each path (summing to 1 per block).
    """

    block: IntArray
    starts: IntArray
    links: IntArray
    caps: FloatArray
    share: FloatArray

    def time(self, x: FloatArray, nchunks: int) -> float:
        """``max_e Σ_{p∋e} x_p / (nchunks·c_e)`` (block units per GB/s).

        >>> bp = BlockPaths(np.array([0]), np.array([0, 1]), np.array([0]), np.array([2.0]), np.array([1.0]))
        >>> bp.time(np.array([4.0]), 4)
        0.5
        """
        load = np.bincount(self.links, weights=np.repeat(np.asarray(x, dtype=np.float64), np.diff(self.starts)),
                           minlength=len(self.caps))
        used = load > 0
        return float((load[used] / self.caps[used]).max(initial=0.0)) / nchunks

    def loss(self, x: IntArray, nchunks: int) -> float:
        """Relative loss ``T(x) / T_LP − 1`` of an integral split, at least 0."""
        t_lp = self.time(self.share, 1)
        return max(0.0, self.time(x.astype(np.float64), nchunks) / t_lp - 1.0) if t_lp > 0 else 0.0


@dataclass(frozen=True)
class Pick:
    """The chosen K, chunks per support path, its loss, what bound it (None when within target),
    and every (K, loss, method) tried."""

    nchunks: int
    chunks: IntArray
    loss: float
    binding: str | None
    tried: tuple[tuple[int, float, str], ...]


def chunk_cap(n_gpus: int, nchunks: int | None, max_nchunks: int | None) -> tuple[int, int, str]:
    """(first K, largest K, the name of that limit) of the chunk choice: a given ``nchunks`` is
    used as is; else 10 first, up to ``max_nchunks`` (default 64) and the MSCCL executor's
    ``N·K ≤ 32768`` chunk cap.

    >>> chunk_cap(1024, None, None)
    (10, 32, 'chunk cap N·K <= 32768 (K <= 32 at N = 1024)')
    >>> chunk_cap(16, 7, None)
    (7, 7, 'nchunks=7')
    """
    if nchunks is not None:
        return nchunks, nchunks, f"nchunks={nchunks}"
    xml_cap = max(1, 32768 // max(1, n_gpus))
    want = MAX_AUTO_NCHUNKS if max_nchunks is None else max_nchunks
    first = min(DEFAULT_NCHUNKS, want, xml_cap)
    if xml_cap < want:
        return first, xml_cap, f"chunk cap N·K <= 32768 (K <= {xml_cap} at N = {n_gpus})"
    return first, want, f"max_nchunks={want}"


def check_rounding_args(max_nchunks: object, rounding_budget_s: object) -> None:
    """Raise :class:`~synth.errors.SolverError` naming a bad ``max_nchunks`` or ``rounding_budget_s``.

    >>> check_rounding_args(0, 1.0)
    Traceback (most recent call last):
    synth.errors.SolverError: max_nchunks must be None or an integer >= 1, got 0
    """

    if max_nchunks is not None and (isinstance(max_nchunks, bool) or not isinstance(max_nchunks, int)
                                    or max_nchunks < 1):
        raise SolverError(f"max_nchunks must be None or an integer >= 1, got {max_nchunks!r}")
    if isinstance(rounding_budget_s, bool) or not isinstance(rounding_budget_s, (int, float)) \
            or not math.isfinite(rounding_budget_s) or rounding_budget_s < 0:
        raise SolverError(f"rounding_budget_s must be a finite number of seconds >= 0, got {rounding_budget_s!r}")


def binding_note(limit: str | None) -> str:
    """The message suffix naming the limit that keeps a rounding above :data:`TARGET_LOSS`.

    >>> binding_note("nchunks=10")
    '; not within 0.1% of the optimum: bound by nchunks=10 (more chunks per block trade for gap)'
    >>> binding_note(None)
    ''
    """
    if limit is None:
        return ""
    return f"; not within {100 * TARGET_LOSS:g}% of the optimum: bound by {limit} (more chunks per block trade for gap)"


def remainder_round(block: IntArray, y: FloatArray, nchunks: int, tol: float = 1e-6) -> IntArray:
    """Largest remainder per block: floors of the flows ``y`` (chunk units), then one more chunk on
    the paths with the largest remainders (ties: earlier paths) until every block has ``nchunks``.

    >>> remainder_round(np.array([0, 0, 0]), np.array([2.0, 1.2, 0.8]), 4).tolist()
    [2, 1, 1]
    """
    base = np.floor(y + tol).astype(np.int64)
    nblocks = int(block.max()) + 1 if len(block) else 0
    short = nchunks - np.bincount(block, weights=base, minlength=nblocks).round().astype(np.int64)
    order = np.lexsort((np.arange(len(block)), -(y - base), block))
    ks = block[order]
    first = np.r_[0, np.flatnonzero(np.diff(ks)) + 1] if len(ks) else np.zeros(0, np.int64)
    rank = np.arange(len(ks)) - np.repeat(first, np.diff(np.r_[first, len(ks)]))
    out = base.copy()
    out[order] += (rank < short[ks]).astype(np.int64)
    return out


def exact_nchunks(share: FloatArray, cap: int, at_least: int = 1) -> int | None:
    """The smallest K in ``[at_least, cap]`` that makes every ``K·share`` integral (a multiple of
    their least common denominator), or None when there is none.

    >>> exact_nchunks(np.array([1 / 3, 2 / 3, 0.5]), 64, 10)
    12
    >>> exact_nchunks(np.array([1 / 97]), 64) is None
    True
    """
    d = 1
    for f in np.unique(np.round(share, 12)).tolist():
        q = Fraction(f).limit_denominator(cap)
        if abs(float(q) - f) > _FRACTION_TOL:
            return None
        d = d * q.denominator // math.gcd(d, q.denominator)
        if d > cap:
            return None
    k = d * max(1, -(-at_least // d))
    return k if k <= cap else None


def mip_round(bp: BlockPaths, nchunks: int, budget_s: float, seed: IntArray | None = None,
              target: float = TARGET_LOSS) -> IntArray | None:
    """Integer chunks per support path minimising T at ``nchunks`` per block (HiGHS MIP), each path
    within ±2 chunks of ``nchunks·share``; stops when within ``target/4`` of its own bound, after
    :data:`MIP_MAX_NODES` branch-and-bound nodes (a deterministic limit) or, as a safety net, after
    ``budget_s``. None when HiGHS finds no solution.

    >>> bp = BlockPaths(np.array([0, 0, 1, 1]), np.array([0, 1, 2, 3, 4]), np.array([0, 1, 0, 1]),
    ...                 np.array([1.0, 1.0]), np.array([0.5, 0.5, 0.5, 0.5]))
    >>> x = mip_round(bp, 3, 1.0)
    >>> bp.time(x, 3) == bp.time(np.array([2, 1, 1, 2]), 3)  # 3 chunks per link, the best at K = 3
    True
    """
    import highspy


    npaths = len(bp.block)
    used, link_row = np.unique(bp.links, return_inverse=True)
    _, block_row = np.unique(bp.block, return_inverse=True)
    nblocks = int(block_row.max()) + 1
    cap = bp.caps[used] / bp.caps[used].max()
    y = nchunks * bp.share
    lo = np.maximum(0, np.floor(y + 1e-9) - _MIP_SLACK)
    hi = np.minimum(nchunks, np.ceil(y - 1e-9) + _MIP_SLACK)
    # Column p: its block row, then its links' rows; the last column is T.
    lengths = np.diff(bp.starts) + 1
    col_start = np.r_[0, np.cumsum(lengths)].astype(np.int32)
    index = np.empty(int(lengths.sum()), dtype=np.int32)
    heads = col_start[:-1]
    index[heads] = block_row
    body = np.ones(len(index), dtype=bool)
    body[heads] = False
    index[body] = nblocks + link_row
    nlinks = len(used)
    lp = highspy.HighsLp()
    lp.num_col_ = npaths + 1
    lp.num_row_ = nblocks + nlinks
    lp.col_cost_ = np.r_[np.zeros(npaths), 1.0]
    lp.col_lower_ = np.r_[lo, 0.0]
    lp.col_upper_ = np.r_[hi, highspy.kHighsInf]
    lp.row_lower_ = np.r_[np.full(nblocks, float(nchunks)), np.full(nlinks, -highspy.kHighsInf)]
    lp.row_upper_ = np.r_[np.full(nblocks, float(nchunks)), np.zeros(nlinks)]
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = np.r_[col_start, col_start[-1] + nlinks].astype(np.int32)
    lp.a_matrix_.index_ = np.r_[index, np.arange(nblocks, nblocks + nlinks, dtype=np.int32)].astype(np.int32)
    lp.a_matrix_.value_ = np.r_[np.ones(len(index)), -float(nchunks) * cap]
    lp.integrality_ = [highspy.HighsVarType.kInteger] * npaths + [highspy.HighsVarType.kContinuous]
    t_lp = bp.time(bp.share, 1) * bp.caps[used].max()
    h = quiet_highs(random_seed=0, time_limit=max(0.05, float(budget_s)), mip_rel_gap=0.0,
                    mip_abs_gap=target / 4 * t_lp, mip_max_nodes=MIP_MAX_NODES)
    h.passModel(lp)
    if seed is not None and ((seed >= lo) & (seed <= hi)).all():
        sol = highspy.HighsSolution()
        sol.col_value = np.r_[seed.astype(np.float64), bp.time(seed.astype(np.float64), nchunks)
                              * bp.caps[used].max()].tolist()
        h.setSolution(sol)
    h.run()
    if h.getInfo().primal_solution_status != 2:  # kSolutionStatusFeasible
        return None
    x = np.rint(np.asarray(h.getSolution().col_value[:npaths])).astype(np.int64)
    per_block = np.bincount(block_row, weights=x, minlength=nblocks)
    return x if (per_block == nchunks).all() and (x >= 0).all() else None


def candidate_nchunks(share: FloatArray, first: int, cap: int, limit: int = MAX_CANDIDATES) -> list[int]:
    """``first``, then the ``limit`` K in ``(first, cap]`` that leave the fewest paths with a
    fractional ``K·share`` (the K whose rounding has the least to fix; ties: smaller K), in
    increasing order.

    >>> candidate_nchunks(np.array([1 / 7, 6 / 7, 0.5, 0.5]), 10, 64, 3)
    [10, 14, 28, 42]
    """
    scored = []
    for k in range(first + 1, cap + 1):
        y = k * share
        scored.append((int(np.count_nonzero(np.abs(y - np.rint(y)) > _FRACTION_TOL)), k))
    return [first, *sorted(k for _, k in sorted(scored)[:limit])]


def choose_chunks(bp: BlockPaths, first: int, cap: int, *, budget_s: float = ROUNDING_BUDGET_S,
                  first_loss: float | None = None, target: float = TARGET_LOSS,
                  cap_name: str | None = None) -> Pick:
    """The first K in ``[first, cap]`` (``first``, the exact K, then :func:`candidate_nchunks`) whose
    rounding loses at most ``target`` (module docstring), else the best rounding found and the
    limit that bound it.

    ``first_loss`` is the loss of the caller's own rounding at ``first`` (dives, ...): when it is
    within ``target`` only the exact K is tried. ``cap_name`` names the cap in :attr:`Pick.binding`
    (default ``"at most {cap} chunks per block"``).
    """
    deadline = time.perf_counter() + max(0.0, budget_s)
    tried: list[tuple[int, float, str]] = []
    best: list[tuple[float, int, IntArray]] = []

    def consider(k: int, x: IntArray | None, how: str) -> bool:
        if x is None:
            return False
        loss = bp.loss(x, k)
        tried.append((k, loss, how))
        if not best or loss < best[0][0] - 1e-12:
            best[:] = [(loss, k, x)]
        return loss <= target

    def done(binding: str | None) -> Pick:
        loss, k, x = best[0]
        return Pick(k, x, loss, None if loss <= target else binding, tuple(tried))

    x_first = remainder_round(bp.block, first * bp.share, first)
    consider(first, x_first, "largest remainder")
    floor = min(best[0][0], math.inf if first_loss is None else first_loss)
    if floor <= 1e-12:
        return done(None)
    k_exact = exact_nchunks(bp.share, cap, first)
    if k_exact is not None:
        consider(k_exact, np.rint(k_exact * bp.share).astype(np.int64), "exact K")
        if best[0][0] <= 1e-12:
            return done(None)
    if floor <= target:
        return done(None)
    for k in candidate_nchunks(bp.share, first, cap):
        x = remainder_round(bp.block, k * bp.share, k) if k != first else x_first
        if k != first and consider(k, x, "largest remainder"):
            return done(None)
        left = deadline - time.perf_counter()
        if left <= 0:
            return done(f"rounding time budget {budget_s:g} s")
        # A third of the budget per MIP at most, so that a slow one leaves time for other K.
        if len(bp.block) <= MIP_MAX_PATHS and consider(k, mip_round(bp, k, min(left, budget_s / 3), x, target),
                                                       "mip"):
            return done(None)
    return done(cap_name or f"at most {cap} chunks per block")

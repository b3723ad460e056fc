"""Max-min fair rates by progressive filling (water-filling), solved over path classes.

Every flow of a path class crosses the same links, so max-min fairness gives all of them one
rate: the classes are the unknowns and a class of ``w`` flows weighs ``w`` on each of its links.
All unfrozen flows rise together; a link whose residual capacity runs out freezes every class
through it at the current level (Bertsekas & Gallager, *Data Networks*, 2nd ed., §6.5.2).

Examples
--------
>>> import numpy as np
>>> # class 0 crosses links 0 and 1, class 1 only link 1; link 0 carries 1, link 1 carries 3 byte/s.
>>> rates = maxmin_rates(np.array([1, 2]), np.array([0, 0, 1]), np.array([0, 1, 1]), np.array([1.0, 3.0]))
>>> [float(r) for r in rates]
[1.0, 1.0]
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["maxmin_rates"]

# Links whose fair share is within this factor of the smallest one saturate in the same round:
# shares that are equal in exact arithmetic differ by a few ulps, and freezing them together
# keeps the round count (and so the cost) independent of that noise.
_TIE_RTOL = 1e-12


def maxmin_rates(
    weight: npt.NDArray[np.int64],
    pair_path: npt.NDArray[np.int64],
    pair_link: npt.NDArray[np.int64],
    cap: npt.NDArray[np.float64],
    share: npt.NDArray[np.int64] | None = None,
) -> npt.NDArray[np.float64]:
    """Per-flow (weighted) max-min fair rate of each path class (0.0 where ``weight`` is 0).

    Parameters
    ----------
    weight
        Flows currently active in each path class.
    pair_path, pair_link
        The (class, link) incidence pairs.
    cap
        Link capacities (any rate unit; the result has the same unit).
    share
        Per class, how many fair shares one of its flows gets (a hop-flow of a route carrying
        ``c`` chunks stands for ``c`` concurrent chunk transfers); default 1.

    Notes
    -----
    Each round saturates at least one link, so there are at most ``#links`` rounds of
    ``O(#pairs)`` work; on fabric-shaped instances a handful suffice.
    """
    nl = cap.size
    w = weight.astype(np.float64) if share is None else (weight * share).astype(np.float64)
    wp = w[pair_path]
    live = wp > 0
    pp = pair_path[live]
    pl = pair_link[live]
    wp = wp[live]
    rate = np.zeros(weight.size, dtype=np.float64)
    residual = cap.astype(np.float64, copy=True)
    path_min = np.empty(weight.size)
    near = np.empty(nl)
    with np.errstate(divide="ignore", invalid="ignore"):  # unused links: x / 0, never read
        while pp.size:
            level = residual / np.bincount(pl, weights=wp, minlength=nl)
            path_min.fill(np.inf)
            np.minimum.at(path_min, pp, level[pl])
            pm = path_min[pp]
            near.fill(np.inf)
            np.minimum.at(near, pl, pm)
            # A link no fuller than any link its paths touch is a bottleneck now: freezing flows
            # elsewhere only raises the fair level of the links around it (they freeze at a level
            # at most theirs), so all such local minima freeze in one round.
            hit = (level <= near * (1.0 + _TIE_RTOL))[pl]
            if hit.all():  # every remaining class crosses a bottleneck: the last round
                rate[pp] = pm
                break
            frozen = np.zeros(weight.size, dtype=bool)
            frozen[pp[hit]] = True
            hit = frozen[pp]
            rate[pp[hit]] = pm[hit]
            residual -= np.bincount(pl[hit], weights=(wp * pm)[hit], minlength=nl)
            keep = ~hit
            pp, pl, wp = pp[keep], pl[keep], wp[keep]
    return rate if share is None else rate * share

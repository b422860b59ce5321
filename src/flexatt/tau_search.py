"""The τ search: the selection rule and the searches on log τ that the sweep, the evaluation,
the comparisons and the units share (docs/method.md, τ search). Pure functions: the decoding is
passed in as ``point(tau) -> {"tau", "window", "bleu", ...}``, so nothing here imports torch.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence


def select_tau(points: list[dict], reference_bleu: float, tolerance: float) -> dict | None:
    """The τ-selection rule (Flexible Attention 2017, §5.2; docs/method.md, τ search).

    Among ``points`` (dicts with ``tau``, ``window`` and ``bleu`` on dev), keep those whose BLEU
    is at least ``reference_bleu − tolerance`` (``reference_bleu``: the same model at τ = ∞) and
    return the one with the smallest mean window; ties go to the higher BLEU, then the larger τ.
    ``None`` when no point qualifies (the model then keeps τ = ∞).
    """
    eligible = [p for p in points if within_tolerance(p["bleu"], reference_bleu, tolerance)]
    if not eligible:
        return None
    return min(eligible, key=lambda p: (p["window"], -p["bleu"], -p["tau"]))


def select_beta(points: list[dict], reference_bleu: float, tolerance: float) -> dict | None:
    """The β-selection rule of fine-tuning (docs/method.md, β sweep), shared by the ``sweep_beta``
    stage and the long profiles' units.

    Among ``points`` (dicts with ``beta``; ``bleu``: that fine-tuning's dev BLEU at τ = ∞;
    ``window``: its mean dev window at its own τ, selected by :func:`select_tau`), keep those whose
    BLEU is at most ``tolerance`` below ``reference_bleu`` (the same recipe at β = 0) and return
    the one with the smallest window; ties go to the higher BLEU, then the smaller β. ``None``
    when no point qualifies. The window at each β's own τ is what fine-tuning is for: at one
    shared τ a larger g_t narrows the window by construction, whatever it costs in BLEU there.
    """
    eligible = [p for p in points if within_tolerance(p["bleu"], reference_bleu, tolerance)]
    if not eligible:
        return None
    return min(eligible, key=lambda p: (p["window"], -p["bleu"], p["beta"]))


def dev_grid(grid: Sequence[float], mean_src_len: float, add_log_mean_len: bool) -> list[float]:
    """The τ grid a dev search starts from: ``grid``, with τ = log S̄ added in order where
    ``add_log_mean_len`` (S̄: the dev set's mean source length; :func:`log_mean_length`)."""
    log_mean = log_mean_length(mean_src_len)
    return sorted([*grid, log_mean]) if add_log_mean_len and log_mean not in grid else list(grid)


def log_mean_length(mean_src_len: float) -> float:
    """τ = ln S̄ to 3 decimals: the 2016 paper's heuristic −log(1/S̄) (docs/method.md, τ search;
    on the logarithm's base, Choices and differences)."""
    return round(math.log(mean_src_len), 3)


def within_tolerance(bleu: float, reference_bleu: float, tolerance: float) -> bool:
    """Whether ``bleu`` is at most ``tolerance`` below ``reference_bleu``. The difference is
    rounded (6 decimals) before the comparison: scores are kept to 2 decimals, and in binary
    floating point 31.99 ≥ 32.49 − 0.5 is false."""
    return round(reference_bleu - bleu, 6) <= tolerance


#: how many times :func:`search_points` halves τ below the grid when its smallest τ passes, or
#: doubles it above the grid when none passes
BELOW_GRID_STEPS = 6


def search_points(point, grid: list[float], reference_bleu: float, tolerance: float,
                  steps: int) -> list[dict]:
    """Every dev point of one model: the grid, then ``steps`` bisections on log τ.

    ``point(tau) -> {"tau", "window", "bleu", ...}`` decodes dev at ``tau``. A point passes when
    its BLEU is at most ``tolerance`` below ``reference_bleu`` (:func:`within_tolerance`). The
    bracket is the smallest passing τ of the grid and the largest failing τ below it; where the
    grid's smallest τ already passes, τ is halved (up to :data:`BELOW_GRID_STEPS` times, points
    marked ``"source": "below grid"``) until one fails, and where no τ of the grid passes, τ is
    doubled from its largest (as many times at most, ``"above grid"``) until one passes, so the
    selection is held at neither edge of the grid (a model that needs a wider window than the
    grid's largest τ gives still gets the smallest one within the tolerance, not τ = ∞). Each
    step then decodes the geometric mean of the bracket and moves the bound it falls on, so the
    knee of the curve is found with ``steps`` extra decodes. No bisection when every doubling
    still fails, or every halving still passes. Returns the points in order of τ, each marked
    ``"source": "grid" | "below grid" | "above grid" | "search"``.
    """
    points = [{**point(tau), "source": "grid"} for tau in grid]
    top = max((t for t in grid if 0 < t < math.inf), default=0.0)

    def passes(p: dict) -> bool:
        return within_tolerance(p["bleu"], reference_bleu, tolerance)

    def beyond_grid(tau: float) -> dict:
        p = {**point(tau), "source": "above grid" if tau > top else "below grid"}
        points.append(p)
        return p

    lo, hi = bracket(points, passes, beyond_grid, factor=2.0, max_expand=BELOW_GRID_STEPS, upward=True)
    if lo is not None:
        points += bisect_log_tau(point, lo, hi, passes, steps)
    return sorted(points, key=lambda p: p["tau"])


def bracket(points: list[dict], passes: Callable[[dict], bool], decode: Callable[[float], dict], *,
            factor: float, max_expand: int, upward: bool) -> tuple[float | None, float | None]:
    """``(lo, hi)``: the bracket on τ of a property that holds from some τ on, for
    :func:`bisect_log_tau`. ``hi`` is the smallest finite τ > 0 of ``points`` that ``passes``,
    ``lo`` the largest one below it that fails. Where no τ passes and ``upward``, τ is multiplied
    by ``factor`` from the largest known (1.0 with none), up to ``max_expand`` times, until one
    passes; where no τ below ``hi`` fails, τ is divided by ``factor`` up to ``max_expand`` times
    until one fails (each new τ rounded to 4 decimals). ``decode(tau)`` decodes a new point and
    adds it to ``points``. ``lo`` (or both) is ``None`` where no bracket was found.
    Used by :func:`search_points` (×2) and :func:`match_window` (×4), both ways."""
    def finite() -> list[tuple[float, bool]]:
        return [(float(p["tau"]), passes(p)) for p in points if 0 < float(p["tau"]) < math.inf]

    hi = min((tau for tau, ok in finite() if ok), default=None)
    if hi is None and upward:
        tau = max((tau for tau, _ in finite()), default=1.0)
        for _ in range(max_expand):
            tau = round(tau * factor, 4)
            if passes(decode(tau)):
                hi = tau
                break
    if hi is None:
        return None, None
    lo = max((tau for tau, ok in finite() if tau < hi and not ok), default=None)
    tau = hi
    for _ in range(max_expand if lo is None else 0):
        tau = round(tau / factor, 4)
        if tau <= 0:
            break
        if passes(decode(tau)):
            hi = tau
        else:
            lo = tau
            break
    return lo, hi


def bisect_log_tau(point, lo: float, hi: float, passes, steps: int) -> list[dict]:
    """``steps`` bisections on log τ between ``lo`` (a τ that fails ``passes``) and ``hi`` (one
    that passes), for a property that holds from some τ on (window and BLEU both grow with τ).

    Each step decodes ``point(mid)`` at the geometric mean of the bracket, rounded to 4 decimals,
    and moves the bound it falls on; it stops early when the rounded mean is no longer strictly
    inside the bracket. Used by :func:`search_points` (``passes``: BLEU within the tolerance) and
    by the compare stage's matched windows (``passes``: the window reaches a target).
    Returns the new points, each marked ``"source": "search"``.
    """
    points = []
    for _ in range(steps):
        mid = round(math.exp(0.5 * (math.log(lo) + math.log(hi))), 4)
        if not lo < mid < hi:
            break
        p = {**point(mid), "source": "search"}
        points.append(p)
        if passes(p):
            hi = mid
        else:
            lo = mid
    return points


def match_window(point: Callable[[float], dict], known: Sequence[dict], target: float, steps: int, *,
                 factor: float = 4.0, max_expand: int = 6) -> tuple[dict, list[dict]]:
    """The τ at which a flexible model's mean dev window equals ``target`` (a fixed window's
    mean dev window), by bisection on log τ (:func:`bisect_log_tau`, the τ search's
    bisection; the window grows with τ).

    ``point(tau) -> {"tau", "window", ...}`` decodes dev at ``tau``; ``known``: points already
    decoded (the sweep_tau stage's, ``tau`` ``inf`` for τ = ∞), used to bracket first. The
    bracket is the largest τ whose window is below ``target`` and the smallest τ above it whose
    window reaches it; where no known τ reaches (or stays below) the target, τ is multiplied
    (divided) by ``factor`` up to ``max_expand`` times (:func:`bracket`). Then ``steps``
    bisections. The match is
    the point with the window nearest ``target`` among all known and new points (ties: the
    smaller window, then the smaller τ), τ = ∞ included.

    Returns:
        ``(match, new)``: the matched point and the points decoded here, in order.
    """
    def reaches(p: dict) -> bool:
        return p["window"] >= target

    points, new = [dict(p) for p in known], []

    def decode(tau: float) -> dict:
        p = dict(point(tau))
        points.append(p)
        new.append(p)
        return p

    lo, hi = bracket(points, reaches, decode, factor=factor, max_expand=max_expand, upward=True)
    if lo is not None and hi is not None:
        for p in bisect_log_tau(lambda t: dict(point(t)), lo, hi, reaches, steps):
            points.append(p)
            new.append(p)
    match = min(points, key=lambda p: (abs(p["window"] - target), p["window"], float(p["tau"])))
    return match, new

"""The papers' figures, regenerated from our runs (matplotlib, PNG).

* :func:`tradeoff` — BLEU against mean window over the τ grid (Flexible Attention 2017, Fig. 3);
* :func:`vision_span` — the scored window per decoding step, with p_t (Fig. 4);
* :func:`step_curves` — g_t (Fig. 5) or SACT's temperature per decoding step;
* :func:`attention_heatmap` — attention weights with the scored window outlined;
* :func:`bleu_by_length` — BLEU per source-length bucket (Luong et al. 2015, Fig. 6);
* :func:`sigma_curve` — dev BLEU and window against σ;
* :func:`beta_curve` — dev BLEU and window against fine-tuning's β;
* :func:`matched_window` — test BLEU with its 95% interval against the window, every model.

Every function writes one PNG atomically and returns its path.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from flexatt.io import atomic_path  # noqa: E402
from flexatt.tau import label as tau_label  # noqa: E402


def _save(fig, path: str | os.PathLike) -> Path:
    path = Path(path)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def tradeoff(curves: dict[str, list[tuple[float, float, float]]], path: str | os.PathLike,
             reference: dict[str, tuple[float, float]] | None = None) -> Path:
    """``curves``: label → [(tau, window, bleu), …]; ``reference``: label → (window, bleu) points
    (e.g. global attention) drawn as stars."""
    fig, ax = plt.subplots(figsize=(6, 4))
    for label, points in curves.items():
        points = sorted(points, key=lambda p: p[1])
        ax.plot([p[1] for p in points], [p[2] for p in points], marker="o", label=label)
        for tau, window, bleu in points:
            ax.annotate(tau_label(tau), (window, bleu), textcoords="offset points", xytext=(3, 4), fontsize=7)
    for label, (window, bleu) in (reference or {}).items():
        ax.plot([window], [bleu], marker="*", markersize=12, linestyle="none", label=label)
    ax.set_xlabel("mean window (positions scored per step)")
    ax.set_ylabel("BLEU")
    ax.set_title("Window / BLEU trade-off over τ")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def vision_span(traces: Sequence[dict], path: str | os.PathLike) -> Path:
    """One panel per sentence: the scored window [span_lo, span_hi] per step, and p_t.

    Each trace dict holds numpy arrays ``span_lo``, ``span_hi``, ``position`` and the ints
    ``src_len`` and a ``title``.
    """
    fig, axes = plt.subplots(len(traces), 1, figsize=(7, 2.6 * len(traces)), squeeze=False,
                             constrained_layout=True)
    for ax, tr in zip(axes[:, 0], traces):
        steps = np.arange(1, len(tr["span_lo"]) + 1)
        ax.fill_between(steps, tr["span_lo"] - 0.5, tr["span_hi"] + 0.5, step="mid", alpha=0.35,
                        label="scored window")
        ax.plot(steps, tr["position"], color="black", linewidth=1, label="p_t")
        ax.set_ylim(0.5, tr["src_len"] + 0.5)
        ax.set_ylabel("source position")
        ax.set_title(tr["title"], fontsize=9)
        ax.legend(fontsize=7, loc="upper left")
    axes[-1, 0].set_xlabel("decoding step t")
    fig.suptitle("Vision span per decoding step")
    return _save(fig, path)


def step_curves(series: dict[str, np.ndarray], path: str | os.PathLike, ylabel: str, title: str,
                hlines: Sequence[float] = ()) -> Path:
    """Line per label over decoding steps (g_t, or SACT's temperature)."""
    fig, ax = plt.subplots(figsize=(7, 3))
    for label, values in series.items():
        ax.plot(np.arange(1, len(values) + 1), values, marker=".", label=label)
    for y in hlines:
        ax.axhline(y, color="grey", linestyle=":", linewidth=1)
    ax.set_xlabel("decoding step t")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return _save(fig, path)


def attention_heatmap(weights: np.ndarray, src_tokens: Sequence[str], tgt_tokens: Sequence[str],
                      span_lo: np.ndarray, span_hi: np.ndarray, path: str | os.PathLike,
                      title: str) -> Path:
    """Attention (T x S) with each step's scored window outlined (1-based spans)."""
    t_len, s_len = weights.shape
    fig, ax = plt.subplots(figsize=(max(4, 0.32 * s_len + 2), max(3, 0.3 * t_len + 1.5)))
    ax.imshow(weights, cmap="Greys", aspect="auto", vmin=0, vmax=max(float(weights.max()), 1e-9))
    for t in range(t_len):
        lo, hi = int(span_lo[t]) - 1, int(span_hi[t]) - 1
        ax.add_patch(plt.Rectangle((lo - 0.5, t - 0.5), hi - lo + 1, 1, fill=False,
                                   edgecolor="tab:red", linewidth=0.8))
    ax.set_xticks(range(s_len), list(src_tokens)[:s_len], rotation=90, fontsize=7)
    ax.set_yticks(range(t_len), list(tgt_tokens)[:t_len], fontsize=7)
    ax.set_title(title, fontsize=9)
    return _save(fig, path)


def bleu_by_length(rows: dict[str, list[dict]], path: str | os.PathLike) -> Path:
    """``rows``: model → output of :func:`flexatt.metrics.bleu_by_length`."""
    fig, ax = plt.subplots(figsize=(7, 3.5))
    names = [b["bucket"] for b in next(iter(rows.values()))]
    for label, buckets in rows.items():
        xs = [k for k, b in enumerate(buckets) if b["bleu"] is not None]
        ax.plot(xs, [buckets[k]["bleu"] for k in xs], marker="o", label=label)
    ax.set_xticks(range(len(names)), names)
    ax.set_xlabel("source length (words)")
    ax.set_ylabel("BLEU")
    ax.set_title("BLEU by source length")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    return _save(fig, path)


def sigma_curve(points: list[dict], path: str | os.PathLike) -> Path:
    """``points``: dicts with ``sigma``, ``dev_bleu`` and ``window`` (at the reference tau)."""
    fig, ax = plt.subplots(figsize=(5, 3.5))
    sigmas = [p["sigma"] for p in points]
    ax.plot(sigmas, [p["dev_bleu"] for p in points], marker="o", color="tab:blue")
    ax.set_xlabel("sigma")
    ax.set_ylabel("dev BLEU (τ = ∞)", color="tab:blue")
    twin = ax.twinx()
    twin.plot(sigmas, [p["window"] for p in points], marker="s", color="tab:orange")
    twin.set_ylabel("mean window at the reference τ", color="tab:orange")
    ax.set_title("Penalty width sigma")
    ax.grid(alpha=0.3)
    return _save(fig, path)


def matched_window(curves: dict[str, list[dict]], points: dict[str, dict], path: str | os.PathLike,
                   title: str = "Test BLEU (95% CI) against mean window") -> Path:
    """BLEU with its 95% confidence interval against the mean window (the compare stage).

    ``curves``: label → points drawn as a line (a flexible model over τ); ``points``: label → one
    point drawn as a marker (a fixed window, Global, SACT, a flexible model at a matched τ).
    Each point is a dict with ``window``, ``bleu`` and ``ci`` (``[low, high]``, or ``None``: no
    error bar) and, on a curve, ``tau`` (annotated)."""
    def bars(ps: list[dict]) -> np.ndarray:
        return np.array([[max(p["bleu"] - p["ci"][0], 0.0), max(p["ci"][1] - p["bleu"], 0.0)]
                         if p.get("ci") else [0.0, 0.0] for p in ps]).T.reshape(2, -1)

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, ps in curves.items():
        ps = sorted(ps, key=lambda p: p["window"])
        ax.errorbar([p["window"] for p in ps], [p["bleu"] for p in ps], yerr=bars(ps), marker="o",
                    markersize=4, capsize=2, label=label)
        for p in ps:
            if "tau" in p:
                ax.annotate(tau_label(p["tau"]), (p["window"], p["bleu"]), textcoords="offset points",
                            xytext=(3, 4), fontsize=6)
    markers = "s^vDP*Xph"
    for k, (label, p) in enumerate(points.items()):
        ax.errorbar([p["window"]], [p["bleu"]], yerr=bars([p]), marker=markers[k % len(markers)],
                    markersize=7, capsize=3, linestyle="none", label=label)
    ax.set_xlabel("mean window (positions scored per step)")
    ax.set_ylabel("BLEU")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    return _save(fig, path)


def beta_curve(points: list[dict], reference: dict, tau: float, path: str | os.PathLike,
               selected: float | None = None) -> Path:
    """Dev BLEU (τ = ∞) and the mean dev window against β (log axis): the window at the fixed
    ``tau`` and at each run's own selected τ; the β = 0 run as dashed lines, the ``selected`` β
    circled."""
    fig, ax = plt.subplots(figsize=(5.5, 3.5))
    betas = [p["beta"] for p in points]
    ax.plot(betas, [p["dev_bleu"] for p in points], marker="o", color="tab:blue")
    ax.axhline(reference["dev_bleu"], color="tab:blue", linestyle="--", linewidth=1)
    ax.set_xscale("log")
    ax.set_xlabel("beta")
    ax.set_ylabel("dev BLEU (τ = ∞)", color="tab:blue")
    twin = ax.twinx()
    twin.plot(betas, [p["window"] for p in points], marker="s", color="tab:orange", label=f"at τ = {tau_label(tau)}")
    twin.axhline(reference["window"], color="tab:orange", linestyle="--", linewidth=1)
    twin.plot(betas, [p["selected_window"] for p in points], marker="^", color="tab:green",
              label="at its selected τ")
    twin.axhline(reference["selected_window"], color="tab:green", linestyle="--", linewidth=1)
    for p in points:
        if p["beta"] == selected:
            twin.plot([p["beta"]], [p["selected_window"]], marker="o", markersize=12, fillstyle="none",
                      color="black", linestyle="none", label="selected")
    twin.set_ylabel("mean dev window")
    twin.legend(fontsize=7, loc="upper right")
    ax.set_title("Fine-tuning weight beta (dashed: beta = 0)")
    ax.grid(alpha=0.3)
    return _save(fig, path)

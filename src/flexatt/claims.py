"""The papers' claims, tested on our runs (docs/method.md, Claims): the paired tests of a BLEU
difference, the Holm–Bonferroni correction over a family of tests, the verdict rules, the claims
table and the matched-window search. Pure functions; ``flexatt.stages.compare`` runs them.

Every comparison is of two systems A and B translating the same test sentences against the same
reference: Δ = BLEU(A) − BLEU(B) (sacrebleu, :func:`flexatt.metrics.corpus_bleu`), its 95%
paired-bootstrap interval (:func:`bleu_difference`), and two p-values of H0 "Δ = 0":
sacrebleu's paired bootstrap resampling (Koehn 2004; the test of Table 1) and sacrebleu's
approximate randomisation (Riezler & Maxwell 2005), both through
:func:`flexatt.metrics.bleu_significance`. Each p-value is Holm-adjusted within its family
(:func:`holm`, :func:`adjust`); verdicts read the adjusted bootstrap p together with the interval
(the AR p is reported beside it, with whether it agrees).

sacrebleu's bootstrap p is the share of resamples whose centred statistic |Δ*| − mean |Δ*|
exceeds |Δ|. Where the two systems clearly differ, |Δ*| ≈ Δ* and mean |Δ*| ≈ Δ, so p ≈ P(Δ* − Δ >
Δ): the tail of one side. It falls below 0.05 near Δ/σ ≈ 1.64, while the 95% interval excludes 0
only from Δ/σ ≈ 1.96. A verdict of a difference therefore needs both: the adjusted p below α and
the interval on one side of 0 (:func:`verdict_better`).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np
from sacrebleu.metrics import BLEU

from flexatt.metrics import BOOTSTRAP_SAMPLES, BOOTSTRAP_SEED, bleu_significance, corpus_bleu
from flexatt.rows import Row
from flexatt.tau import label

__all__ = ["ALPHA", "MARGIN", "CLAIMS", "LOCAL_ATTENTIONS", "MATCH_TOLERANCE", "MIN_NARROWING", "PAPER_CUT",
           "REQUIRED_CUT", "VERDICT_WINDOWS", "adjust", "against_paper", "bleu_difference", "claim_rows", "claims_table",
           "compare_pair", "holm", "sentence_stats", "in_verdict", "outcome", "repeats_inf", "verdict_better", "verdict_cut",
           "verdict_effect", "verdict_narrowing", "verdict_not_worse", "verdict_within", "windows_match"]

K = TypeVar("K", bound=Hashable)

#: the family-wise error rate of every verdict (``compare.alpha``)
ALPHA = 0.05
#: the BLEU loss that counts as "no loss" (``compare.margin``): the 2017 paper's τ tolerance (§5.2)
MARGIN = 0.5
#: attention variants with a fixed window of 2D+1 positions (Luong et al. 2015 §3.2; ``local_mr``:
#: local-m along the corpus's length ratio)
LOCAL_ATTENTIONS = ("local_m", "local_p", "local_mr")
#: the share of positions the 2017 paper's selected τ removes (§5.2: 56–64%): claim b reports where
#: it lies against our cut (:func:`against_paper`), never uses it as a threshold
PAPER_CUT = (0.56, 0.64)
#: claim b: the least share of positions the selected τ must cut (half). The papers report 56–64%
#: at their selected τ; "most positions need not be scored" is read as more than half of them, a
#: bound below the papers' range so that a cut like theirs passes it with its interval
REQUIRED_CUT = 0.5
#: claim c: the least relative narrowing that counts as "narrows the window" (5% fewer positions).
#: Mean windows of two models that decode almost alike differ by hundredths of a position; without a
#: test over sentences for windows, a smaller mean alone would call any such difference a narrowing.
MIN_NARROWING = 0.05
#: claim f: the fixed windows (their D) whose matched pairs decide its verdict (docs/method.md,
#: Claims); a pair with another D (local_m_d2: 5 positions, about 87% of them cut, which no paper
#: claims) is reported, outside the verdict
VERDICT_WINDOWS = (5, 10)
#: a matched window is one whose mean dev window is within this share of the fixed window's
#: (10%); a search that ends farther away (the window jumps past the target between two τ) leaves
#: the pair "not matched", outside claim f
MATCH_TOLERANCE = 0.10

HOLDS, FAILS, INCONCLUSIVE, NOT_MEASURED = "holds", "fails", "inconclusive", "not measured"
NOT_MATCHED = "not matched"


# --------------------------------------------------------------------------------------------
# Multiple testing


def holm(p_values: Mapping[K, float]) -> dict[K, float]:
    """Holm–Bonferroni step-down adjusted p-values of one family of m tests (Holm 1979, "A simple
    sequentially rejective multiple test procedure", Scand. J. Statist. 6:65–70).

    With the p-values sorted, p_(1) ≤ … ≤ p_(m), the adjusted value of the i-th is

        p̃_(i) = min(1, max_{j ≤ i} (m − j + 1) · p_(j)),

    so rejecting every test with p̃ < α controls the family-wise error rate at α under any
    dependence between the tests, and rejects exactly what Holm's sequential procedure rejects.
    Ties keep the order given (their adjusted values are equal anyway). Returns the adjusted
    values under the same keys, in the order given; an empty family gives ``{}``.

    Hand-written because no dependency of the project provides it: scipy's
    ``scipy.stats.false_discovery_control`` offers only the Benjamini–Hochberg/–Yekutieli FDR
    procedures, not a family-wise correction; statsmodels' ``multipletests`` has Holm but is
    deliberately not added for one formula; sacrebleu has none.

    Raises:
        ValueError: a p-value that is not a number in [0, 1] (naming its key).
    """
    for key, p in p_values.items():
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
            raise ValueError(f"p-value of {key!r} must be a number in [0, 1] (got {p!r})")
    order = sorted(p_values, key=lambda k: p_values[k])
    m, running, adjusted = len(order), 0.0, {}
    for i, key in enumerate(order):
        running = max(running, (m - i) * float(p_values[key]))
        adjusted[key] = min(1.0, running)
    return {key: adjusted[key] for key in p_values}


def adjust(comparisons: Sequence[dict], alpha: float = ALPHA) -> None:
    """Holm-adjust, in place, the ``p_bs`` and ``p_ar`` of ``comparisons`` within each family
    (the ``family`` key of each): adds ``p_bs_holm``, ``p_ar_holm`` (4 decimals) and
    ``family_size``, and ``ar_agrees`` (both adjusted p-values on the same side of ``alpha``).
    A comparison whose p-value is ``None`` is left out of its family and gets ``None``."""
    families: dict[str, list[int]] = {}
    for i, c in enumerate(comparisons):
        families.setdefault(c["family"], []).append(i)
    for members in families.values():
        for test in ("p_bs", "p_ar"):
            given = {i: comparisons[i][test] for i in members if comparisons[i].get(test) is not None}
            adjusted = holm(given)
            for i in members:
                comparisons[i][f"{test}_holm"] = round(adjusted[i], 4) if i in adjusted else None
        for i in members:
            c = comparisons[i]
            c["family_size"] = sum(1 for j in members if comparisons[j].get("p_bs") is not None)
            c["ar_agrees"] = (None if c["p_bs_holm"] is None or c["p_ar_holm"] is None
                              else (c["p_bs_holm"] < alpha) == (c["p_ar_holm"] < alpha))


# --------------------------------------------------------------------------------------------
# Paired tests


def sentence_stats(metric: BLEU, hypotheses: Sequence[str], references: Sequence[str]) -> np.ndarray:
    """Per-sentence BLEU sufficient statistics (the n-gram matches and totals, the lengths), as
    sacrebleu's paired tests compute them: ``n x 2(order)+2``."""
    return np.asarray(metric._extract_corpus_statistics(list(hypotheses), [list(references)]), dtype=np.float64)


def bleu_difference(hyp_a: Sequence[str], hyp_b: Sequence[str], references: Sequence[str], *,
                    n_samples: int = BOOTSTRAP_SAMPLES, seed: int = BOOTSTRAP_SEED) -> dict[str, Any]:
    """Δ = BLEU(A) − BLEU(B) on the same sentences and its 95% paired-bootstrap interval.

    Each of ``n_samples`` resamples draws n sentence indices with replacement and rescores both
    systems on them from their per-sentence sufficient statistics; the interval is the percentile
    interval of the resampled differences Δ*_b, with sacrebleu's percentile indices
    (``sacrebleu.significance.estimate_ci``: the ⌊B/40⌋-th and the (B − ⌊B/40⌋ − 1)-th of the
    sorted values). The indices are those of sacrebleu's paired bootstrap test for the same seed
    (``numpy.random.default_rng(seed).choice(n, (B, n))``, as ``_paired_bs_test`` draws them), so
    the interval and that test's p-value (:func:`flexatt.metrics.bleu_significance`) come from
    the same resampled test sets (Koehn 2004).

    Hand-written because sacrebleu reports an interval per system (``mean ± ci``), never one of
    a difference; the statistics and the score come from sacrebleu's own ``BLEU`` (its
    ``_extract_corpus_statistics`` and ``_compute_score_from_stats``, the methods its
    ``PairedTest`` uses), so Δ is exactly the difference of :func:`~flexatt.metrics.corpus_bleu`.

    Returns:
        ``{"delta": Δ, "ci": [low, high]}`` (BLEU points, 2 decimals).

    Raises:
        ValueError: the three lists differ in length, are empty, or a bad ``n_samples``/``seed``.
    """
    n = len(references)
    if not n or len(hyp_a) != n or len(hyp_b) != n:
        raise ValueError(f"bleu_difference needs as many hypotheses of A ({len(hyp_a)}) and B ({len(hyp_b)}) "
                         f"as references ({n}), at least one")
    if isinstance(n_samples, bool) or not isinstance(n_samples, int) or n_samples < 1:
        raise ValueError(f"n_samples must be an integer >= 1 (got {n_samples!r})")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be an integer >= 0 (got {seed!r})")
    metric = BLEU()
    a, b = sentence_stats(metric, hyp_a, references), sentence_stats(metric, hyp_b, references)
    score = lambda s: metric._compute_score_from_stats(list(s)).score  # noqa: E731
    delta = score(a.sum(0)) - score(b.sum(0))
    idx = np.random.default_rng(seed).choice(n, size=(n_samples, n), replace=True)
    diffs = np.sort([score(a[i].sum(0)) - score(b[i].sum(0)) for i in idx])
    low = n_samples // 40
    return {"delta": round(float(delta), 2), "ci": [round(float(diffs[low]), 2),
                                                    round(float(diffs[n_samples - low - 1]), 2)]}


def compare_pair(hyp_a: Sequence[str], hyp_b: Sequence[str], references: Sequence[str], *,
                 n_samples: int = BOOTSTRAP_SAMPLES, seed: int = BOOTSTRAP_SEED,
                 ar_trials: int = 10000) -> dict[str, Any]:
    """Every number of one comparison A vs B: ``bleu_a``, ``bleu_b``, their 95% intervals
    ``ci_a``, ``ci_b`` (sacrebleu's per-system bootstrap interval, as Table 1), ``delta`` and its
    interval ``ci`` (:func:`bleu_difference`), ``p_bs`` (paired bootstrap, ``n_samples``
    resamples; see the module's docstring for what it measures) and ``p_ar`` (approximate
    randomisation, ``ar_trials`` trials, two-sided), both unadjusted, from
    :func:`flexatt.metrics.bleu_significance` with the same ``seed``."""
    systems, against = {"A": list(hyp_a), "B": list(hyp_b)}, {"A": "B", "B": None}
    bs = bleu_significance(systems, [list(references)], against, n_samples=n_samples, seed=seed)
    ar = bleu_significance(systems, [list(references)], against, n_samples=ar_trials, seed=seed, test="ar")
    return {"bleu_a": round(corpus_bleu(hyp_a, [list(references)])[0], 2),
            "bleu_b": round(corpus_bleu(hyp_b, [list(references)])[0], 2),
            "ci_a": bs["A"]["bleu_ci"], "ci_b": bs["B"]["bleu_ci"],
            **bleu_difference(hyp_a, hyp_b, references, n_samples=n_samples, seed=seed),
            "p_bs": bs["A"]["p_value"], "p_ar": ar["A"]["p_value"]}


# --------------------------------------------------------------------------------------------
# Verdicts


def _side(ci: Sequence[float]) -> int:
    """+1 when the 95% interval of Δ lies above 0, −1 when below, 0 when it contains 0."""
    low, high = ci
    return 1 if low > 0 else -1 if high < 0 else 0


def verdict_better(ci: Sequence[float], p: float, alpha: float = ALPHA) -> str:
    """"A > B": holds when the adjusted p < α and the 95% interval of Δ lies above 0; fails when
    the adjusted p < α and the interval lies below 0 (B significantly better); inconclusive
    otherwise. Both, because the bootstrap p alone reads one tail (the module's docstring)."""
    side = _side(ci)
    if p < alpha and side:
        return HOLDS if side > 0 else FAILS
    return INCONCLUSIVE


def verdict_not_worse(ci: Sequence[float], p: float, alpha: float = ALPHA, margin: float = MARGIN) -> str:
    """"A ≥ B", read as non-inferiority: fails when A is significantly worse (the adjusted p < α
    and the 95% interval of Δ below 0); holds when the interval excludes a loss of more than
    ``margin`` (low ≥ −margin); inconclusive otherwise (the data allow a loss beyond the margin
    without showing one)."""
    if p < alpha and _side(ci) < 0:
        return FAILS
    return HOLDS if verdict_within(ci, margin) == HOLDS else INCONCLUSIVE


def verdict_within(ci: Sequence[float], margin: float = MARGIN) -> str:
    """"A loses at most ``margin`` BLEU against B" (non-inferiority): holds when the 95% interval
    of Δ lies above −margin (low ≥ −margin), fails when it lies below (high < −margin),
    inconclusive when it contains −margin."""
    low, high = ci
    if low >= -margin:
        return HOLDS
    return FAILS if high < -margin else INCONCLUSIVE


def verdict_effect(ci: Sequence[float], effect: float) -> str:
    """"A gains ``effect`` BLEU over B" (a paper's reported gain): fails when the 95% interval of Δ
    excludes ``effect``; holds when it contains ``effect`` and excludes 0 (a gain of that size,
    and a gain at all); inconclusive when it contains both."""
    low, high = ci
    if not low <= effect <= high:
        return FAILS
    return HOLDS if _side(ci) > 0 else INCONCLUSIVE


def verdict_cut(within: str, cut: Sequence[float], required: float = REQUIRED_CUT) -> str:
    """Claim b, "the selected τ cuts at least ``required`` of the positions at ≤ δ BLEU" (rule
    ``within+cut``): ``within`` the verdict of the BLEU difference against the margin
    (:func:`verdict_within`), ``cut`` the interval (low, high) of the share of positions cut,
    1 − window(A)/window(B) (over seeds; one model: the point twice). The cut is enough when
    low ≥ ``required``, not enough when high < ``required``. Fails when ``within`` fails or the
    cut is not enough; holds when ``within`` holds and the cut is enough; inconclusive otherwise.
    The papers' 56–64% is reported beside (:func:`against_paper`)."""
    low, high = cut
    if within == FAILS or high < required:
        return FAILS
    return HOLDS if within == HOLDS and low >= required else INCONCLUSIVE


def verdict_narrowing(within: str, change: Sequence[float], min_narrowing: float = MIN_NARROWING) -> str:
    """Claim c, "fine-tuning narrows the window" (rule ``narrower+within``), the fine-tuned model
    and its control each at its own selected τ: ``within`` the verdict of their BLEU difference
    against the margin (:func:`verdict_within`), ``change`` the interval (low, high) of the
    relative change of the window, window(fine-tuned)/window(control) − 1 (one pair, or one seed:
    the point twice). The window narrows when the high end ≤ −``min_narrowing``, does not when
    the low end > −``min_narrowing``, and is undecided in between. Fails when it does not narrow
    or ``within`` fails; holds when it narrows and ``within`` holds; inconclusive otherwise."""
    low, high = change
    narrower = HOLDS if high <= -min_narrowing else FAILS if low > -min_narrowing else INCONCLUSIVE
    if FAILS in (within, narrower):
        return FAILS
    return HOLDS if within == narrower == HOLDS else INCONCLUSIVE


def against_paper(figure: float | Sequence[float], paper: Sequence[float]) -> str:
    """Where a paper's range ``paper`` (low, high) lies against our ``figure`` (a value, or an
    interval (low, high)): ``below`` it, ``above`` it, or ``inside`` (the two overlap)."""
    low, high = (figure, figure) if isinstance(figure, (int, float)) else figure
    if paper[1] < low:
        return "below"
    if paper[0] > high:
        return "above"
    return "inside"


def in_verdict(pair: Mapping) -> bool:
    """Whether a matched-window pair counts toward claim f: its fixed window's D is one of
    :data:`VERDICT_WINDOWS`."""
    return pair.get("D") in VERDICT_WINDOWS


def windows_match(dev_window: float, target: float, tolerance: float = MATCH_TOLERANCE) -> bool:
    """Whether a flexible model's mean dev window matches a fixed window's (``target``): within
    ``tolerance`` of it, relative."""
    return abs(dev_window - target) <= tolerance * target


def outcome(ci: Sequence[float], p: float, alpha: float = ALPHA) -> str:
    """A matched-window pair from A's side: ``better`` / ``worse`` where :func:`verdict_better`
    holds / fails, else ``equal`` (no significant difference)."""
    return {HOLDS: "better", FAILS: "worse"}.get(verdict_better(ci, p, alpha), "equal")


#: the claims (docs/method.md, Claims): id, statement, source, the rows it compares (A, B) and
#: the rule of its verdict; "c" and "f" are built from several comparisons
CLAIMS = (
    {"id": "a", "claim": "Flexible τ=∞ ≥ Global", "source": "Shu & Nakayama 2017, Table 1",
     "a": "flexible", "b": "global", "rule": "not_worse"},
    {"id": "b", "claim": "the selected τ cuts positions at ≤ 0.5 BLEU (fine-tuned flexible, τ vs τ=∞; "
     "the paper's 56–64% reported beside)",
     "source": "Shu & Nakayama 2017, §5.2", "a": "flexible_ft_tau", "b": "flexible_ft", "rule": "within+cut"},
    {"id": "c", "claim": "fine-tuning narrows the window (fine-tuned vs control, each at its own selected τ)",
     "source": "Shu & Nakayama 2017, §4 (eq. 9)", "a": "flexible_ft_tau", "b": "flexible_ctl_tau",
     "rule": "narrower+within", "at_inf": ("flexible_ft", "flexible_ctl")},
    {"id": "c+sact", "claim": "fine-tuning narrows the window, Flexible+SACT (fine-tuned vs control, each at its "
     "own selected τ)",
     "source": "Shu & Nakayama 2017, §4 (eq. 9)", "a": "flexible_sact_ft_tau", "b": "flexible_sact_ctl_tau",
     "rule": "narrower+within", "at_inf": ("flexible_sact_ft", "flexible_sact_ctl")},
    {"id": "d", "claim": "Local-p > Global", "source": "Luong et al. 2015, Table 1", "a": "local_p", "b": "global",
     "rule": "better"},
    {"id": "e", "claim": "SACT > Global", "source": "Lin et al. 2018", "a": "sact", "b": "global",
     "rule": "better"},
    {"id": "e2", "claim": "SACT gains +2 BLEU over Global", "source": "Lin et al. 2018", "a": "sact", "b": "global",
     "rule": "effect", "paper_effect": 2.0},
    {"id": "f", "claim": "Flexible beats a fixed window of equal size (matched windows)",
     "source": "Shu & Nakayama 2017, §5", "rule": "matched"},
)


def claim_rows() -> list[str]:
    """The Table 1 rows that the claims compare (the A and B of every claim of :data:`CLAIMS`
    that names them), in the order the claims name them."""
    rows = [spec[side] for spec in CLAIMS for side in ("a", "b") if side in spec]
    return list(dict.fromkeys(rows))


def _find(comparisons: Sequence[dict], a: str, b: str) -> dict | None:
    return next((c for c in comparisons if c["a"] == a and c["b"] == b), None)


def claims_table(rows: Mapping[str, dict], comparisons: Sequence[dict], matched: Sequence[dict] = (), *,
                 alpha: float = ALPHA, margin: float = MARGIN) -> list[dict]:
    """One entry per claim of :data:`CLAIMS`: its ``effect`` (Δ BLEU of A − B), ``ci`` (95%),
    ``p`` (Holm-adjusted paired bootstrap), ``p_ar`` (Holm-adjusted AR), ``verdict`` and
    ``detail``. ``rows``: the test rows of ``results/metrics.json`` (``window``, ``bleu``,
    ``g_mean``, ``tau``); ``comparisons``: the results of :func:`compare_pair` with ``a``, ``b``
    and the adjusted p-values (:func:`adjust`); ``matched``: the matched-window pairs (``model``,
    ``local``, ``comparison`` naming A and B, ``outcome``).

    Verdict rules (α = ``alpha``, δ = ``margin``, p the adjusted bootstrap p):

    * a (``not_worse``): :func:`verdict_not_worse` (non-inferiority with the margin);
    * b (``within+cut``): :func:`verdict_cut` of :func:`verdict_within` and the cut
      1 − window(A)/window(B) (one model: the interval is the point): fails when the BLEU
      difference fails the margin or no position is cut, else the verdict of the margin; the
      papers' 56–64% is reported against the cut (``paper_cut``, :func:`against_paper`);
    * c (``narrower+within``), per flexible model with a control, the fine-tuned model and the
      control **each at its own selected τ** (:func:`flexatt.stages.evaluate.tau_of`):
      :func:`verdict_narrowing` of :func:`verdict_within` and the relative change of the window
      window(A)/window(B) − 1 (one pair: the interval is the point). Each model's τ, the means of
      g_t and the pair at τ = ∞ (fine-tuned vs control) are reported in ``detail``;
    * d, e (``better``): :func:`verdict_better`;
    * e2 (``effect``): :func:`verdict_effect` with the paper's +2 BLEU;
    * f (``matched``): over the matched pairs of a fixed window with D in
      :data:`VERDICT_WINDOWS` (:func:`outcome`; pairs whose dev windows do not match,
      :func:`windows_match`, are counted apart), holds when every pair is ``better``, fails when
      any pair is ``worse``, inconclusive otherwise; pairs of other windows are reported in
      ``detail``, outside the verdict.

    A claim whose rows (or comparisons) are missing is ``not measured``, with ``missing``; so is
    a claim whose test would repeat one at τ = ∞ because no τ was selected (:func:`repeats_inf`):
    b where none was selected for the fine-tuned model (its τ row is its τ = ∞ row again), c where
    none was selected for either model (both decode every position, equal windows by
    construction). Where only one model of c has a selected τ, the other is compared at τ = ∞,
    its own operating point.
    """
    out = []
    for spec in CLAIMS:
        entry = {k: spec[k] for k in ("id", "claim", "source", "rule")}
        if spec["rule"] == "matched":
            out.append({**entry, **_matched_claim(matched)})
            continue
        a, b = spec["a"], spec["b"]
        if repeats_inf(a, b, rows):  # b, c: no τ selected, the test is one at τ = ∞ again
            models = [Row.of(r).model for r in (a, b) if not_selected(r, rows)]
            out.append({**entry, "a": a, "b": b, "verdict": NOT_MEASURED, "missing": [
                f"a selected τ for {' or '.join(models)} (sweep_tau kept none within its tolerance)"]})
            continue
        c = _find(comparisons, a, b)
        missing = [r for r in (a, b) if r not in rows] or ([] if c else [f"{a} vs {b}"])
        if missing:
            out.append({**entry, "a": a, "b": b, "verdict": NOT_MEASURED, "missing": missing})
            continue
        ra, rb = rows[a], rows[b]
        entry.update({"a": a, "b": b, "effect": c["delta"], "ci": c["ci"], "p": c["p_bs_holm"],
                      "p_ar": c["p_ar_holm"], "ar_agrees": c.get("ar_agrees"), "family": c["family"]})
        rule = spec["rule"]
        if rule == "not_worse":
            entry["verdict"] = verdict_not_worse(c["ci"], c["p_bs_holm"], alpha, margin)
            entry["detail"] = f"BLEU {ra['bleu']:.2f} vs {rb['bleu']:.2f}, margin {margin:g}"
        elif rule == "better":
            entry["verdict"] = verdict_better(c["ci"], c["p_bs_holm"], alpha)
            entry["detail"] = f"BLEU {ra['bleu']:.2f} vs {rb['bleu']:.2f}"
        elif rule == "effect":
            lo, hi = c["ci"]
            entry["paper_effect"] = spec["paper_effect"]
            entry["verdict"] = verdict_effect(c["ci"], spec["paper_effect"])
            entry["detail"] = (f"BLEU {ra['bleu']:.2f} vs {rb['bleu']:.2f}; paper +{spec['paper_effect']:g} BLEU "
                               f"{'inside' if lo <= spec['paper_effect'] <= hi else 'outside'} the CI")
        elif rule == "within+cut":
            cut = round(1.0 - ra["window"] / rb["window"], 4)
            entry["cut"] = cut
            entry["paper_cut"] = against_paper(cut, PAPER_CUT)
            entry["verdict"] = verdict_cut(verdict_within(c["ci"], margin), (cut, cut))
            entry["detail"] = (f"τ={label(ra['tau'])}: window {ra['window']:.1f} vs {rb['window']:.1f}, "
                               f"{100 * cut:.0f}% of positions cut (at least {100 * REQUIRED_CUT:.0f}%; the paper's "
                               f"{percent_range(PAPER_CUT)} {entry['paper_cut']} ours); BLEU {ra['bleu']:.2f} vs "
                               f"{rb['bleu']:.2f}, margin {margin:g}")
        elif rule == "narrower+within":
            change = round(ra["window"] / rb["window"] - 1.0, 4)
            entry["verdict"] = verdict_narrowing(verdict_within(c["ci"], margin), (change, change))
            entry["tau"] = [ra["tau"], rb["tau"]]
            entry["window"] = [ra["window"], rb["window"]]
            entry["window_change"] = change
            entry["g_mean"] = [ra.get("g_mean"), rb.get("g_mean")]
            g = lambda v: "–" if v is None else f"{v:.3f}"  # noqa: E731
            entry["detail"] = (f"each at its own τ, {label(ra['tau'])} vs {label(rb['tau'])}: window "
                               f"{ra['window']:.2f} vs {rb['window']:.2f} ({100 * change:+.1f}%, narrower: "
                               f"≤ −{100 * MIN_NARROWING:.0f}%); mean g_t {g(ra.get('g_mean'))} vs "
                               f"{g(rb.get('g_mean'))}; BLEU {ra['bleu']:.2f} vs {rb['bleu']:.2f}, margin {margin:g}")
            inf = _find(comparisons, *spec["at_inf"])
            if inf is not None:
                entry["at_inf"] = {"a": inf["a"], "b": inf["b"], "effect": inf["delta"], "ci": inf["ci"],
                                   "p": inf["p_bs_holm"], "p_ar": inf["p_ar_holm"]}
                entry["detail"] += (f"; τ=∞: Δ BLEU {inf['delta']:+.2f} [{inf['ci'][0]:+.2f}, {inf['ci'][1]:+.2f}], "
                                    f"p {inf['p_bs_holm']:.4f}")
        out.append(entry)
    return out


def not_selected(row: str, rows: Mapping[str, Mapping]) -> bool:
    """Whether ``row`` is a ``<x>_tau`` row that decodes at τ = ∞ because ``sweep_tau`` selected
    no τ for ``<x>``: the same model and decoding as ``<x>``, so a test of it against ``<x>``
    compares a system with itself."""
    return Row.of(row).at_tau and row in rows and math.isinf(rows[row]["tau"])


def repeats_inf(a: str, b: str, rows: Mapping[str, Mapping]) -> bool:
    """Whether a test of row ``a`` against row ``b`` is no test of its own because a τ row of
    theirs has no selected τ (:func:`not_selected`): one of them is the other's model at τ = ∞
    again (a system against itself), or both are their models' τ = ∞ rows again (the test of
    those rows, made under their own names)."""
    na, nb = not_selected(a, rows), not_selected(b, rows)
    return (na and nb) or (na and Row.of(a).model == b) or (nb and Row.of(b).model == a)


def percent_range(bounds: Sequence[float]) -> str:
    """``(0.56, 0.64)`` as "56–64%"."""
    return f"{100 * bounds[0]:.0f}–{100 * bounds[1]:.0f}%"


def _matched_claim(pairs: Sequence[dict]) -> dict:
    """Claim f from the matched pairs: the verdict over those of :func:`in_verdict`, the others
    listed in ``detail`` as outside it."""
    if not pairs:
        return {"verdict": NOT_MEASURED, "missing": ["matched-window pairs (no local row or flexible model)"]}
    counted = [m for m in pairs if in_verdict(m)]
    outside = [m for m in pairs if not in_verdict(m)]
    counts = {o: [m["outcome"] for m in counted].count(o) for o in ("better", "equal", "worse", NOT_MATCHED)}
    windows = ", ".join(map(str, VERDICT_WINDOWS))
    listed = lambda ms: "; ".join(f"{m['model']} vs {m['local']} (D={m.get('D', '?')}): {m['outcome']}"  # noqa: E731
                                  for m in ms)
    detail = (f"D = {windows}: {counts['better']} better, {counts['equal']} equal, {counts['worse']} worse"
              + (f", {counts[NOT_MATCHED]} not matched" if counts[NOT_MATCHED] else "")
              + (": " + listed(counted) if counted else "")
              + (f"; outside the verdict: {listed(outside)}" if outside else ""))
    entry = {"pairs": len(pairs), "outcomes": counts, "outside_verdict": len(outside), "detail": detail}
    outcomes = [m["outcome"] for m in counted if m["outcome"] != NOT_MATCHED]
    if not outcomes:
        return {"verdict": NOT_MEASURED, **entry, "missing": [
            f"a flexible dev window within {100 * MATCH_TOLERANCE:.0f}% of a fixed window's" if counted
            else f"a matched pair with a fixed window of D = {' or '.join(map(str, VERDICT_WINDOWS))}"]}
    verdict = (HOLDS if all(o == "better" for o in outcomes) else FAILS if "worse" in outcomes else INCONCLUSIVE)
    return {"verdict": verdict, **entry}

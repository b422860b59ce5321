"""The papers' claims decided from a long run's units (:mod:`flexatt.units`), with no checkpoint
and no decoding: every figure comes from the units' stored test decodes (docs/method.md, Claims).

Each claim compares two systems A and B on the test sentences, seed by seed (A and B of the same
training seed; a fine-tuning and its control from the same parent, averaged over the parent's
pairs). The training seeds decide (Clark et al. 2011: a resampling of one run's test sentences
does not carry the optimiser's instability):

* **per seed**: Δ BLEU, the corpus BLEU of A minus B on that seed's own test decodes;
* **over seeds**: their mean, its 95% t-interval (:func:`t_interval`) and the two-sided p of a
  one-sample t-test (:func:`t_test_p`), Holm-adjusted over the run's comparisons
  that get a verdict (one family, from a, b, c, d, e and each fixed window of f);
* **two-level bootstrap** (shown, not deciding): seeds resampled, then each drawn seed's test
  sentences (:func:`bleu_difference_over_seeds`); with one seed, a paired
  bootstrap of its sentences.

A verdict ("holds", "fails", "inconclusive") needs :data:`MIN_SEEDS` training seeds (fine-tuning
parents for c) on both sides of its comparison; with fewer the comparison shows its numbers and
is **not decided**. The rules, on the interval over seeds (α 0.05, margin 0.5 BLEU):

* **a** Flexible τ = ∞ ≥ Global: non-inferiority within the margin
  (:func:`flexatt.claims.verdict_not_worse`).
* **b** the dev-selected τ cuts at least half the positions at ≤ 0.5 BLEU
  (:func:`flexatt.claims.verdict_cut`): the BLEU of flexible at its selected τ against τ = ∞
  within the margin, and the share of positions cut, 1 − window(τ)/window(∞), with its interval
  at or above :data:`REQUIRED_CUT`. The papers' 56–64% is reported against that
  interval (:func:`flexatt.claims.against_paper`); the dev Δ of every seed is shown beside the test Δ.
* **c** fine-tuning narrows the window (:func:`flexatt.claims.verdict_narrowing`): each
  fine-tuning against its control of the same parent and fine-tuning seed, **each at its own
  dev-selected τ** (never at one shared τ, where a larger g_t narrows the window by
  construction), averaged per parent; over parents: holds when the relative change of the test
  window has an interval at or below −5% and the BLEU difference is within the margin; fails when
  that interval lies above −5% or the BLEU difference fails the margin. The τ = ∞ difference and
  each side's window and BLEU at its selected τ are shown beside; so is the paper's β = 0.1
  against its control (:data:`PAPER_BETA`), which is not tested.
* **d** Local-p > Global, **e** SACT > Global: :func:`flexatt.claims.verdict_better`; **e2** SACT
  gains +2 BLEU: :func:`flexatt.claims.verdict_effect`.
* **f** Flexible beats a fixed window of the same size, at D = 5 and 10
  (:data:`flexatt.claims.VERDICT_WINDOWS`; the plan's ``fixed`` windows): flexible decoded on test
  at the τ whose dev window equals the fixed model's (a pair whose dev windows differ by more
  than 10% is not matched), one verdict per fixed window (:func:`flexatt.claims.verdict_better`);
  f fails when any fixed window's fails, holds when every one holds, is not decided while one is
  not (and none fails), and is inconclusive otherwise.

The budget check's other sides (:func:`budget_claims`) re-ask claims a and b at its budget, at
the first seed, beside the same seed's Δ at the budget.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from sacrebleu.metrics import BLEU

from flexatt.claims import (ALPHA, FAILS, HOLDS, INCONCLUSIVE, MARGIN, MATCH_TOLERANCE, MIN_NARROWING, NOT_MEASURED,
                            PAPER_CUT, REQUIRED_CUT, VERDICT_WINDOWS, against_paper, bleu_difference, holm,
                            percent_range, sentence_stats, verdict_better, verdict_cut, verdict_effect,
                            verdict_narrowing, verdict_not_worse, verdict_within, windows_match)
from flexatt.metrics import BOOTSTRAP_SAMPLES, BOOTSTRAP_SEED
from flexatt.tau import INF
from flexatt.products import (BUDGET_GAIN, Plan, Unit, budget_gain, budget_short, done_units, load_products,
                              match_records, parse_unit, select_beta, tau_key, why_again)

#: SACT's gain over Global in its paper (Lin et al. 2018), the effect claim e2 tests
SACT_EFFECT = 2.0
#: a verdict needs this many training seeds (fine-tuning parents for claim c) on both sides: with
#: two, the t-interval's quantile (12.7) leaves almost any Δ inside it, and one seed carries no
#: optimiser variance at all
MIN_SEEDS = 3
#: the fine-tuning strength of the 2017 paper (§4), shown beside the β chosen on dev for claim c
PAPER_BETA = 0.1
#: a comparison shown with its numbers but too few training seeds for a verdict
UNDECIDED = "not decided"

#: a claim's record pairs (A, B), grouped per training seed (or parent): ``[(seed, [(A, B), ...])]``
Groups = list[tuple[int, list[tuple[dict, dict]]]]


def t_interval(values: Sequence[float], level: float = 0.95) -> dict[str, Any]:
    """``{"n", "mean", "sd", "ci"}`` of ``values`` (one per seed): the sample sd and the two-sided
    t-interval of the mean (scipy's t quantile); ``sd`` and ``ci`` are ``None`` with one value."""
    from scipy.stats import t

    x = np.asarray(values, dtype=np.float64)
    n = len(x)
    if n == 0:
        raise ValueError("t_interval needs at least one value")
    mean = float(x.mean())
    if n < 2:
        return {"n": 1, "mean": round(mean, 4), "sd": None, "ci": None}
    sd = float(x.std(ddof=1))
    half = float(t.ppf(0.5 + level / 2, n - 1)) * sd / math.sqrt(n)
    return {"n": n, "mean": round(mean, 4), "sd": round(sd, 4), "ci": [round(mean - half, 4), round(mean + half, 4)]}


def bleu_difference_over_seeds(groups: Sequence[Sequence[tuple[Sequence[str], Sequence[str], Sequence[str]]]], *,
                                n_samples: int = BOOTSTRAP_SAMPLES, seed: int = BOOTSTRAP_SEED) -> dict[str, Any]:
    """Δ̄, the mean over training seeds of Δ_s = BLEU(A_s) − BLEU(B_s), and its 95% two-level
    bootstrap interval: each ``groups[s]`` is one seed's comparisons ``(hyp_a, hyp_b, references)``
    (one, or several whose Δ is averaged: the fine-tuning pairs of one parent).

    Each of ``n_samples`` resamples draws k of the k seeds with replacement and, for every draw
    afresh, each comparison's test sentences with replacement (the Δ of the draw is that of the
    resampled sentences, rescored from their sufficient statistics); Δ̄* is the mean over the
    draws. The percentile interval takes the indices of :func:`flexatt.claims.bleu_difference`. Resampling the
    seeds carries the training-seed variance (Clark et al. 2011), which putting the seeds' test
    sets end to end and resampling their sentences (a paired bootstrap of the pooled set) drops:
    it treats each seed's copy of a sentence as an independent sentence. With one seed it is a
    paired bootstrap of that seed's sentences.

    Hand-written because sacrebleu's paired tests resample the sentences of one test set only;
    the statistics and scores are sacrebleu's own (as :func:`flexatt.claims.bleu_difference`).

    Returns:
        ``{"delta": Δ̄, "ci": [low, high]}`` (BLEU points, 2 decimals).

    Raises:
        ValueError: no group, an empty group, or lists of unequal lengths within a comparison.
    """
    if not groups or any(not g for g in groups):
        raise ValueError("bleu_difference_over_seeds needs at least one seed, each with a comparison")
    metric = BLEU()
    score = lambda s: metric._compute_score_from_stats(list(s)).score  # noqa: E731
    stats = []
    for group in groups:
        members = []
        for hyp_a, hyp_b, refs in group:
            if not refs or len(hyp_a) != len(refs) or len(hyp_b) != len(refs):
                raise ValueError(f"a comparison needs as many hypotheses of A ({len(hyp_a)}) and B ({len(hyp_b)}) "
                                 f"as references ({len(refs)}), at least one")
            members.append((sentence_stats(metric, hyp_a, refs), sentence_stats(metric, hyp_b, refs)))
        stats.append(members)
    delta = float(np.mean([np.mean([score(a.sum(0)) - score(b.sum(0)) for a, b in g]) for g in stats]))
    rng = np.random.default_rng(seed)
    k = len(stats)
    diffs = np.empty(n_samples)
    for i, drawn in enumerate(rng.integers(k, size=(n_samples, k))):
        total = 0.0
        for j in drawn:
            per = []
            for a, b in stats[j]:
                idx = rng.integers(len(a), size=len(a))
                per.append(score(a[idx].sum(0)) - score(b[idx].sum(0)))
            total += float(np.mean(per))
        diffs[i] = total / k
    diffs.sort()
    low = n_samples // 40
    return {"delta": round(delta, 2), "ci": [round(float(diffs[low]), 2), round(float(diffs[n_samples - low - 1]), 2)]}


def t_test_p(deltas: Sequence[float]) -> float | None:
    """The two-sided p of a one-sample t-test of H0 "mean Δ = 0" over the per-seed Δs (scipy's
    ``ttest_1samp``); ``None`` with fewer than 2 seeds. Seeds that agree exactly give 1 where every
    Δ is 0 and 0 otherwise (the t statistic is infinite)."""
    from scipy.stats import ttest_1samp

    x = np.asarray(deltas, dtype=np.float64)
    if len(x) < 2:
        return None
    if np.all(x == x[0]):
        return 1.0 if x[0] == 0 else 0.0
    return float(ttest_1samp(x, 0.0).pvalue)


class Units:
    """A run's finished units and their test decodes, read once each."""

    def __init__(self, folder: str | Path, plan: Plan):
        self.folder, self.plan = Path(folder), plan
        self.manifests = done_units(self.folder)
        self._decodes: dict[str, dict] = {}

    def has(self, name: str) -> bool:
        return name in self.manifests

    def record(self, name: str, tau: float, split: str = "test") -> dict:
        """The stored decode of unit ``name`` on ``split`` at ``tau`` (``inf``: every position)."""
        if name not in self._decodes:
            own = load_products(self.folder / name)["decodes"]["records"]
            later = match_records(self.folder, name, self.manifests)  # fixed windows matched to it later
            self._decodes[name] = {(r["split"], r["tau"]): r for r in [*later, *own]}
        return self._decodes[name][(split, tau)]

    def seeds(self, *variants: str, budget: float = 1.0) -> list[int]:
        """The training seeds at which every one of ``variants`` has a finished unit."""
        return [s for s in self.plan.seeds if all(self.has(Unit(v, s, budget).name) for v in variants)]


def _comparison(groups: Groups, references: dict[str, list[str]], *, n_samples: int, seed: int) -> dict[str, Any]:
    """Per seed (the mean over a group's pairs) Δ BLEU, their interval and t-test over seeds, and
    the two-level bootstrap of the record pairs ``(A, B)``."""
    per = [round(float(np.mean([a["bleu"] - b["bleu"] for a, b in pairs])), 2) for _, pairs in groups]
    boot = bleu_difference_over_seeds([[(a["hypotheses"], b["hypotheses"], references[a["split"]]) for a, b in pairs]
                                       for _, pairs in groups], n_samples=n_samples, seed=seed)
    return {"seeds": len(groups), "seed_ids": [s for s, _ in groups], "per_seed": per,
            "over_seeds": t_interval(per), "bootstrap": boot, "p_t": t_test_p(per)}


def _selected(units: Units, name: str) -> float:
    """The τ a unit's flexible model selected on dev (τ = ∞: none, or not a flexible model)."""
    return units.manifests[name]["summary"]["dev"].get("selected_tau", INF)


def claim_pairs(units: Units) -> dict[str, Groups]:
    """The record pairs (A, B) of each pairwise claim, grouped per seed (claim c: per parent)."""
    p = units.plan
    flex = p.flexible
    one = lambda s, a, b: (s, [(a, b)])  # noqa: E731
    pairs: dict[str, Groups] = {}
    pairs["a"] = [one(s, units.record(Unit(flex, s).name, INF), units.record(Unit("global", s).name, INF))
                  for s in units.seeds(flex, "global")]
    pairs["b"] = [one(s, units.record(Unit(flex, s).name, _selected(units, Unit(flex, s).name)),
                      units.record(Unit(flex, s).name, INF)) for s in units.seeds(flex)
                  if not math.isinf(_selected(units, Unit(flex, s).name))]
    if (found := finetuning_pairs(units)) is not None:
        pairs["c"] = _finetuning_groups(units, found[1])
    for claim, variant in (("d", "local_p"), ("e", "sact")):
        pairs[claim] = [one(s, units.record(Unit(variant, s).name, INF), units.record(Unit("global", s).name, INF))
                        for s in units.seeds(variant, "global")]
    for fixed in p.fixed:
        found_f = []
        for s in units.seeds(flex, fixed):
            matched = units.manifests[Unit(flex, s).name]["summary"].get("matched", {}).get(Unit(fixed, s).name)
            if matched is not None and windows_match(matched["dev"]["window"], matched["target"], MATCH_TOLERANCE):
                found_f.append(one(s, units.record(Unit(flex, s).name, matched["tau"]),
                                   units.record(Unit(fixed, s).name, INF)))
        pairs[f"f:{fixed}"] = found_f
    return pairs


def finetuning_pairs(units: Units, beta: float | None = None) -> tuple[float, dict[int, dict[int, tuple[str, str]]]] | None:
    """β (default: the one selected on dev) and, per parent seed and fine-tuning run, the names of
    each finished pair (fine-tuned, control) at β; ``None`` while β is not selected (or the plan
    has no fine-tuning). At the selected β only pairs trained at the plan's
    ``finetuning.precision`` count, where it names one: a corpus's pairs at one precision (the β
    sweep's run may have trained at another)."""
    p = units.plan
    ft = p.finetuning
    selected = select_beta(p, units.manifests) if ft is not None else None
    beta = selected if beta is None else beta
    if ft is None or beta is None:
        return None
    precision = ft.precision if beta == selected else None
    found: dict[int, dict[int, tuple[str, str]]] = {}
    for name in sorted(units.manifests):
        unit = parse_unit(name)
        if unit.variant != ft.parent or unit.kind != "finetune" or unit.beta != beta:
            continue
        control = Unit(ft.parent, unit.seed, beta=0.0, run=unit.run).name
        if not units.has(control):
            continue
        trained = {str(units.manifests[n].get("training", {}).get("precision")) for n in (name, control)}
        if precision is None or trained == {precision}:
            found.setdefault(unit.seed, {})[unit.run] = (name, control)
    return beta, {s: dict(sorted(runs.items())) for s, runs in sorted(found.items())}


def _finetuning_groups(units: Units, found: dict[int, dict[int, tuple[str, str]]], tau: str = "selected") -> Groups:
    """Claim c's record pairs per parent: each side at its own dev-selected τ (``tau="inf"``: both
    at τ = ∞)."""
    at = (lambda n: _selected(units, n)) if tau == "selected" else (lambda n: INF)  # noqa: E731
    return [(s, [tuple(units.record(n, at(n)) for n in names) for names in runs.values()])
            for s, runs in found.items() if runs]


def _finetuning_detail(units: Units, beta: float, found: dict[int, dict[int, tuple[str, str]]]) -> dict[str, Any]:
    """Beside claim c's BLEU at the selected τ: the per-parent window change and its interval, the
    τ = ∞ Δ BLEU per parent and its interval, each side's mean window and BLEU at its selected τ,
    and the pairs (runs) per parent."""
    selected = _finetuning_groups(units, found)
    inf = _finetuning_groups(units, found, "inf")
    change = [float(np.mean([a["window"] / b["window"] - 1 for a, b in pairs])) for _, pairs in selected]
    inf_delta = [float(np.mean([a["bleu"] - b["bleu"] for a, b in pairs])) for _, pairs in inf]
    every = [pair for _, pairs in selected for pair in pairs]
    side = lambda i: {"window": round(float(np.mean([p[i]["window"] for p in every])), 2),  # noqa: E731
                      "bleu": round(float(np.mean([p[i]["bleu"] for p in every])), 2)}
    return {"beta": beta, "window_change": t_interval(change),
            "inf": {"per_seed": [round(d, 2) for d in inf_delta], "over_seeds": t_interval(inf_delta)},
            "at_selected": {"tuned": side(0), "control": side(1)},
            "pairs_per_parent": {s: sorted(runs) for s, runs in found.items() if runs}}


CLAIM_TEXT = {
    "a": ("Flexible τ=∞ ≥ Global", "Shu & Nakayama 2017, Table 1", "not_worse"),
    "b": (f"the dev-selected τ cuts ≥ {100 * REQUIRED_CUT:.0f}% of positions at ≤ 0.5 BLEU (paper: 56–64%)",
          "Shu & Nakayama 2017, §5.2", "within+cut"),
    "c": ("fine-tuning narrows the window (fine-tuned vs control, each at its own selected τ; over parents)",
          "Shu & Nakayama 2017, §4 (eq. 9)", "narrower+within"),
    "d": ("Local-p > Global", "Luong et al. 2015, Table 1", "better"),
    "e": ("SACT > Global", "Lin et al. 2018", "better"),
    "e2": ("SACT gains +2 BLEU over Global", "Lin et al. 2018", "effect"),
    "f": (f"Flexible beats a fixed window of equal size (D = {', '.join(map(str, VERDICT_WINDOWS))}; matched on dev)",
          "Shu & Nakayama 2017, §5", "matched"),
}


def _planned(plan: Plan, claim: str) -> bool:
    """Whether ``plan`` trains the models claim ``claim`` compares (a Transformer profile's asks
    a, b and f only: no fine-tuning, local-p or SACT)."""
    variants = {*plan.seeded, *plan.fixed, *plan.others}
    needs = {"c": plan.finetuning is not None, "d": "local_p" in variants, "e": "sact" in variants,
             "e2": "sact" in variants, "f": bool(plan.fixed)}
    return needs.get(claim, True)


def _verdict(rule: str, s: dict, p: float | None, *, alpha: float, margin: float, bounds: Sequence[float] = ()) -> str:
    """A comparison's verdict by its claim's ``rule`` on the interval over seeds and the
    Holm-adjusted t-test p; :data:`UNDECIDED` with fewer than :data:`MIN_SEEDS`
    seeds. ``bounds``: the cut's (b) or the window change's (c) interval over seeds."""
    if s["seeds"] < MIN_SEEDS:
        return UNDECIDED
    ci = s["over_seeds"]["ci"]
    if rule == "not_worse":
        return verdict_not_worse(ci, p, alpha, margin)
    if rule in ("better", "matched"):
        return verdict_better(ci, p, alpha)
    if rule == "effect":
        return verdict_effect(ci, SACT_EFFECT)
    if rule == "within+cut":
        return verdict_cut(verdict_within(ci, margin), bounds)
    return verdict_narrowing(verdict_within(ci, margin), bounds)


def _overall_f(verdicts: list[str]) -> str:
    """Claim f from its fixed windows' verdicts (the module's docstring)."""
    if FAILS in verdicts:
        return FAILS
    if verdicts and all(v == HOLDS for v in verdicts):
        return HOLDS
    return UNDECIDED if UNDECIDED in verdicts or NOT_MEASURED in verdicts else INCONCLUSIVE


def decide(units: Units, references: dict[str, list[str]], *, alpha: float = ALPHA, margin: float = MARGIN,
           n_samples: int = 1000, seed: int = 1234) -> list[dict]:
    """Every claim of :data:`CLAIM_TEXT` with its rule, per-seed figures, interval over seeds,
    two-level bootstrap, Holm-adjusted p and verdict (the module's docstring); a claim without
    its units is ``not measured``."""
    groups = claim_pairs(units)
    stats = {key: _comparison(found, references, n_samples=n_samples, seed=seed)
             for key, found in groups.items() if found}
    # the family: the comparisons that get a verdict (a t-test over fewer seeds decides nothing)
    adjusted = holm({key: s["p_t"] for key, s in stats.items() if s["seeds"] >= MIN_SEEDS})
    out = []
    for claim, (text, source, rule) in CLAIM_TEXT.items():
        entry: dict[str, Any] = {"id": claim, "claim": text, "source": source, "rule": rule}
        keys = [k for k in groups if k.startswith("f:")] if claim == "f" else ["e" if claim == "e2" else claim]
        if not any(k in stats for k in keys):
            out.append({**entry, "verdict": NOT_MEASURED, "missing": "no finished units of this comparison"
                        if _planned(units.plan, claim) else "not in this profile's plan"})
            continue
        if claim == "f":
            parts = []
            for key in keys:
                if key not in stats:
                    parts.append({"fixed": key[2:], "verdict": NOT_MEASURED})
                    continue
                s = stats[key]
                parts.append({"fixed": key[2:], **s, "p": adjusted.get(key),
                              "verdict": _verdict(rule, s, adjusted.get(key), alpha=alpha, margin=margin)})
            entry["pairs"] = parts
            entry["verdict"] = _overall_f([p["verdict"] for p in parts])
            out.append(entry)
            continue
        s = stats[keys[0]]
        entry.update(s, p=adjusted.get(keys[0]))
        bounds: Sequence[float] = ()
        if rule == "effect":
            entry["paper_effect"] = SACT_EFFECT
        elif rule == "within+cut":
            cut = t_interval([1 - a["window"] / b["window"] for _, pairs in groups["b"] for a, b in pairs])
            bounds = _bounds(cut)
            dev = [units.manifests[Unit(units.plan.flexible, s_).name]["summary"]["dev"] for s_ in s["seed_ids"]]
            entry.update(cut=cut, required_cut=REQUIRED_CUT, paper_cut=against_paper(bounds, PAPER_CUT),
                         dev_per_seed=[round(d["selected"]["bleu"] - d["inf"]["bleu"], 2) for d in dev])
        elif rule == "narrower+within":
            beta, found = finetuning_pairs(units)
            entry.update(_finetuning_detail(units, beta, found))
            bounds = _bounds(entry["window_change"])
            paper = finetuning_pairs(units, PAPER_BETA) if beta != PAPER_BETA else None
            if paper is not None and paper[1]:
                paper_groups = _finetuning_groups(units, paper[1])
                entry["paper_beta"] = {**_comparison(paper_groups, references, n_samples=n_samples, seed=seed),
                                       **_finetuning_detail(units, PAPER_BETA, paper[1]),
                                       "precision": sorted({str(units.manifests[n].get("training", {}).get("precision"))
                                                            for runs in paper[1].values() for pair in runs.values()
                                                            for n in pair})}
        entry["verdict"] = _verdict(rule, s, entry["p"], alpha=alpha, margin=margin, bounds=bounds)
        out.append(entry)
    return out


def _bounds(stat: dict) -> list[float]:
    """The interval of a :func:`t_interval` over seeds; with one seed, its value twice."""
    return stat["ci"] or [stat["mean"], stat["mean"]]


def budget_claims(units: Units, claims: list[dict], references: dict[str, list[str]], *, n_samples: int = 1000,
                  seed: int = 1234) -> list[dict]:
    """Claims a and b re-asked at the budget check's budget (its variant and ``others``, first seed,
    ``factor`` times the budget): per claim Δ BLEU there with its paired-bootstrap interval
    (:func:`flexatt.claims.bleu_difference`), beside the same seed's Δ at the budget, and whether
    the Δ ``moved`` by more than the half-width of the claim's interval at the budget (over seeds,
    or with one seed its bootstrap). Empty until the check's units are done."""
    check = units.plan.budget_check
    if check is None:
        return []
    first, f = units.plan.seeds[0], check.factor
    longer = Unit(units.plan.flexible, first, f).name
    if not units.has(longer):
        return []
    found: dict[str, tuple[dict, dict]] = {}
    if units.has(Unit("global", first, f).name):
        found["a"] = (units.record(longer, INF), units.record(Unit("global", first, f).name, INF))
    if not math.isinf(_selected(units, longer)):
        found["b"] = (units.record(longer, _selected(units, longer)), units.record(longer, INF))
    by_id = {c["id"]: c for c in claims}
    out = []
    for claim, (a, b) in found.items():
        d = bleu_difference(a["hypotheses"], b["hypotheses"], references[a["split"]], n_samples=n_samples, seed=seed)
        row: dict[str, Any] = {"id": claim, "factor": f, "seed": first, "delta": d["delta"], "ci": d["ci"]}
        if claim == "b":
            row["cut"] = round(1 - a["window"] / b["window"], 4)
        c = by_id.get(claim, {})
        if first in c.get("seed_ids", []):
            base = c["per_seed"][c["seed_ids"].index(first)]
            ci = c["over_seeds"]["ci"] or c["bootstrap"]["ci"]
            half = (ci[1] - ci[0]) / 2
            row.update(at_budget=base, half_width=round(half, 2), moved=abs(d["delta"] - base) > half)
        out.append(row)
    return out


def model_table(units: Units) -> list[dict]:
    """Per model (and a flexible model at its selected τ): test BLEU, window and AER over the
    seeds done (mean, sd, n), the diagonal's AER beside."""
    rows = []
    by_variant: dict[tuple[str, str], list[dict]] = {}
    for name, m in units.manifests.items():
        if m.get("kind", "train") != "train" or m.get("budget", 1.0) != 1.0:
            continue
        test = m["summary"]["test"]
        by_variant.setdefault((m["variant"], "τ=∞"), []).append(
            {"bleu": test["inf"]["bleu"], "window": test["inf"]["window"], "aer": (test.get("aer") or {}).get("inf"),
             "diagonal": test.get("aer_diagonal"), "seed": m["seed"]})
        if "selected" in test:
            tau = m["summary"]["dev"].get("selected_tau", INF)
            label = "τ=∞" if math.isinf(tau) else "selected τ"
            aer = (test.get("aer") or {}).get(tau_key(tau))
            by_variant.setdefault((m["variant"], label + " "), []).append(
                {"bleu": test["selected"]["bleu"], "window": test["selected"]["window"], "aer": aer,
                 "diagonal": test.get("aer_diagonal"), "seed": m["seed"], "tau": tau})
    for (variant, at), found in sorted(by_variant.items(), key=lambda kv: (kv[0][0] != "global", kv[0][0],
                                                                          kv[0][1] != "τ=∞")):
        row = {"model": variant, "at": at.strip(), "seeds": sorted(f["seed"] for f in found)}
        for key in ("bleu", "window", "aer", "diagonal"):
            values = [f[key] for f in found if f[key] is not None]
            row[key] = t_interval(values) if values else None
        rows.append(row)
    return rows


def budget_check(units: Units) -> dict | None:
    """The budget check: the dev (and test) BLEU of the first seed's model trained for the budget
    and for ``factor`` times it, both at their last epoch and τ = ∞ (beam search), whether
    the longer run gains less than :data:`BUDGET_GAIN` dev BLEU (``enough``), whether the plan keeps
    the budget as final (``final``) and whether it does so although the check fails (``kept_short``);
    ``None`` until both are done."""
    check = units.plan.budget_check
    gain = budget_gain(units.plan, units.manifests)
    if gain is None:
        return None
    enough = not budget_short(units.plan, units.manifests)
    seed = units.plan.seeds[0]
    a, b = units.manifests[Unit(check.variant, seed).name], units.manifests[Unit(check.variant, seed, check.factor).name]
    return {"variant": check.variant, "factor": check.factor,
            "epochs": [a["training"]["epochs"], b["training"]["epochs"]],
            "dev_bleu": [a["summary"]["dev"]["inf"]["bleu"], b["summary"]["dev"]["inf"]["bleu"]],
            "test_bleu": [a["summary"]["test"]["inf"]["bleu"], b["summary"]["test"]["inf"]["bleu"]],
            "dev_gain": gain, "enough": enough, "final": check.final, "kept_short": check.final and not enough}


def precisions(units: Units) -> list[str]:
    """The training precisions of the units, the most used first: ``bf16-mixed (17 units)``, the
    others with their units' names where they are few (``32-true (a-s1, b-s1)``)."""
    found: dict[str, list[str]] = {}
    for name, m in sorted(units.manifests.items()):
        if "precision" in m.get("training", {}):
            found.setdefault(str(m["training"]["precision"]), []).append(name)
    ranked = sorted(found.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    return [f"{p} ({len(names)} units)" if i == 0 or len(names) > 4 else f"{p} ({', '.join(names)})"
            for i, (p, names) in enumerate(ranked)]


def _ms(stat: dict | None, digits: int = 2) -> str:
    if stat is None:
        return "–"
    return f"{stat['mean']:.{digits}f}" + ("" if stat["sd"] is None else f" ± {stat['sd']:.{digits}f}")


def _interval(stat: dict, scale: float = 1.0, digits: int = 2, unit: str = "", sign: str = "+") -> str:
    """A :func:`t_interval` as ``mean [low, high]`` (signed unless ``sign=""``; one value: the
    mean alone)."""
    f = lambda x: f"{scale * x:{sign}.{digits}f}"  # noqa: E731
    return f(stat["mean"]) + unit + (f" [{f(stat['ci'][0])}, {f(stat['ci'][1])}]" if stat["ci"] else "")


def _detail(c: dict) -> str:
    """The claim's figures beside its Δ BLEU: b's cut and dev Δ, c's window change, τ = ∞ Δ and
    each side at its selected τ."""
    if "cut" in c:
        cut = c["cut"]
        return (f"positions cut {_interval(cut, 100, 0, '%', '')} (required ≥ {100 * c['required_cut']:.0f}%; the "
                f"paper's {percent_range(PAPER_CUT)} " + ("overlaps it" if c["paper_cut"] == "inside"
                                                           else f"lies {c['paper_cut']} it")
                + "); dev Δ per seed " + ", ".join(f"{d:+.2f}" for d in c["dev_per_seed"]))
    if "window_change" in c:
        return _finetuning_text(c)
    return ""


def _finetuning_text(c: dict) -> str:
    tuned, control = c["at_selected"]["tuned"], c["at_selected"]["control"]
    pairs = "; ".join(f"s{s}: r{','.join(map(str, runs))}" for s, runs in c["pairs_per_parent"].items())
    return (f"β = {c['beta']:g}; window {_interval(c['window_change'], 100, 1, '%')} (narrower: ≤ −"
            f"{100 * MIN_NARROWING:.0f}%); at each selected τ {tuned['window']:.1f} vs {control['window']:.1f} "
            f"positions, {tuned['bleu']:.2f} vs {control['bleu']:.2f} BLEU; Δ at τ = ∞ "
            f"{_interval(c['inf']['over_seeds'])}; pairs per parent {pairs}")


def _row(label: str, rule: str, e: dict, verdict: str, detail: str) -> str:
    boot = e["bootstrap"]
    p = "–" if e.get("p") is None else f"{e['p']:.4f}"
    return (f"| {label} | {rule} | {e['seeds']} | {verdict} | {', '.join(f'{d:+.2f}' for d in e['per_seed'])} | "
            f"{_interval(e['over_seeds'])} | {boot['delta']:+.2f} [{boot['ci'][0]:+.2f}, {boot['ci'][1]:+.2f}] | "
            f"{p} | {detail} |")


def render(table: list[dict], claims: list[dict], units: Units, budget: dict | None = None,
           shown: str | None = None, budget_rows: Sequence[dict] = (), again: Iterable[str] = ()) -> str:
    """The report as Markdown: the models over seeds, the budget check, then the claims (and
    claims a, b at the check's budget); ``shown`` names the units' folder (default: as given),
    ``again`` the finished units to be run again (:func:`flexatt.products.listed_again`)."""
    lines = [f"Units done: {len(units.manifests)} (`{shown or units.folder}`).", "",
             "| model | at | seeds | test BLEU | window | AER | diagonal AER |", "|---|---|---|---|---|---|---|"]
    for r in table:
        lines.append(f"| {r['model']} | {r['at']} | {','.join(map(str, r['seeds']))} | {_ms(r['bleu'])} | "
                     f"{_ms(r['window'])} | {_ms(r['aer'], 3)} | {_ms(r['diagonal'], 3)} |")
    lines += ["", "mean ± sd over training seeds; AER against the gold links, beside a length-proportional "
              "diagonal's.", ""]
    if trained := precisions(units):
        lines += ["Trained at " + ", ".join(trained) + "; the two sides of every pair at one precision.", ""]
    if edited := sorted(set(again) & set(units.manifests)):
        lines += ["To be run again (pending stages), its products shown until then: "
                  + "; ".join(f"`{n}` ({why_again(n, units.plan)})" for n in edited) + ".", ""]
    if budget is not None:
        lines += [f"Budget check: {budget['variant']} trained {budget['epochs'][1]} epochs instead of "
                  f"{budget['epochs'][0]} gains {budget['dev_gain']:+.2f} dev BLEU ({budget['dev_bleu'][0]:.2f} → "
                  f"{budget['dev_bleu'][1]:.2f}; test {budget['test_bleu'][0]:.2f} → {budget['test_bleu'][1]:.2f}): "
                  + ("under" if budget["enough"] else "not under") + f" {BUDGET_GAIN} BLEU, so the budget "
                  + ("is" if budget["enough"] else "is not") + " enough by this check"
                  + (". It is kept all the same (`budget_check.final`): the claims compare models trained "
                     "for an equal budget that stops short of convergence by this check." if budget.get("kept_short")
                     else "."), ""]
    lines += [f"A verdict needs {MIN_SEEDS} training seeds (claim c: parents); with fewer a comparison is "
              f"{UNDECIDED}. Δ BLEU (test) per seed, its mean and 95% t-interval over seeds (these decide, "
              "with the t-test's p Holm-adjusted over the comparisons decided), and a two-level bootstrap (seeds, then "
              "sentences; 95%).", "",
              "| claim | rule | seeds | verdict | Δ BLEU per seed | over seeds (95% t) | two-level bootstrap | "
              "p (t, Holm) | detail |", "|---|---|---|---|---|---|---|---|---|"]
    for c in claims:
        if c["verdict"] == NOT_MEASURED:
            lines.append(f"| {c['id']}: {c['claim']} | {c['rule']} | 0 | not measured | | | | | "
                         f"{c.get('missing', '')} |")
            continue
        for e in c.get("pairs") or [c]:
            if "fixed" in e and e["verdict"] == NOT_MEASURED:
                lines.append(f"| {c['id']} vs {e['fixed']} | {c['rule']} | 0 | not measured | | | | | |")
                continue
            label = f"{c['id']}: {c['claim']}" + (f" — vs {e['fixed']}" if "fixed" in e else "")
            lines.append(_row(label, c["rule"], e, e["verdict"], _detail(c)))
        if c.get("pairs"):
            lines.append(f"| {c['id']}: {c['claim']} | {c['rule']} | | {c['verdict']} | | | | | every fixed window |")
        if "paper_beta" in c:
            pb = c["paper_beta"]
            lines.append(_row(f"{c['id']} at the paper's β = {PAPER_BETA:g} (not tested)", c["rule"], pb, "–",
                              _finetuning_text(pb) + f"; trained at {', '.join(pb['precision'])}"))
    if budget_rows:
        lines += ["", f"Claims at ×{budget_rows[0]['factor']:g} the budget (seed {budget_rows[0]['seed']}; Δ BLEU and "
                  "its 95% paired bootstrap), beside the same seed's Δ at the budget:", "",
                  "| claim | Δ at ×1 | Δ at the check's budget | moved more than the claim's half-width? |",
                  "|---|---|---|---|"]
        for r in budget_rows:
            moved = ("–" if "moved" not in r else ("**yes**" if r["moved"] else "no") + f" (±{r['half_width']:.2f})")
            at = "–" if "at_budget" not in r else f"{r['at_budget']:+.2f}"
            cut = f"; cut {100 * r['cut']:.0f}%" if "cut" in r else ""
            lines.append(f"| {r['id']} | {at} | {r['delta']:+.2f} [{r['ci'][0]:+.2f}, {r['ci'][1]:+.2f}]{cut} | {moved} |")
    return "\n".join(lines) + "\n"


def report(folder: str | Path, plan: Plan, references: dict[str, list[str]], *, shown: str | None = None,
           again: Iterable[str] = (), **options) -> dict:
    """The run's table and claims from its units: ``{"units", "table", "budget_check", "claims",
    "budget_claims", "markdown"}``; ``shown`` names the folder in the Markdown, ``again`` the
    units to be run again, ``options`` go to :func:`decide`."""
    units = Units(folder, plan)
    table = model_table(units)
    claims = decide(units, references, **options)
    budget = budget_check(units)
    at_budget = budget_claims(units, claims, references, **{k: v for k, v in options.items()
                                                            if k in ("n_samples", "seed")})
    return {"units": sorted(units.manifests), "table": table, "budget_check": budget, "claims": claims,
            "budget_claims": at_budget, "markdown": render(table, claims, units, budget, shown, at_budget, again)}


#: the columns of the claims table a long profile's report logs to W&B (:func:`claim_records`)
CLAIM_COLUMNS = ["profile", "claim", "comparison", "seeds", "verdict", "delta", "ci_low", "ci_high", "bootstrap_low",
                 "bootstrap_high", "p"]
#: the columns of its models' table (:func:`model_records`)
MODEL_COLUMNS = ["profile", "model", "at", "seeds", "bleu", "bleu_sd", "window", "aer"]


def claim_records(profile: str, claims: list[dict]) -> list[dict]:
    """A report's claims as table rows (:data:`CLAIM_COLUMNS`), one per comparison (claim f one
    per fixed window, then its overall verdict): seeds, verdict, the mean Δ BLEU over seeds with
    its t-interval, the two-level bootstrap interval, the Holm-adjusted p."""
    rows = []
    for c in claims:
        for e in [*(c.get("pairs") or []), c]:
            row = {"profile": profile, "claim": c["id"], "comparison": f"vs {e['fixed']}" if "fixed" in e else "",
                   "verdict": e["verdict"], "seeds": e.get("seeds", 0)}
            if "over_seeds" in e:
                over, boot = e["over_seeds"], e["bootstrap"]
                row.update(delta=over["mean"], ci_low=(over["ci"] or [None, None])[0],
                           ci_high=(over["ci"] or [None, None])[1], bootstrap_low=boot["ci"][0],
                           bootstrap_high=boot["ci"][1], p=e.get("p"))
            rows.append(row)
    return rows


def model_records(profile: str, table: list[dict]) -> list[dict]:
    """A report's models table as rows (:data:`MODEL_COLUMNS`): test BLEU (mean, sd), window and
    AER over the seeds done."""
    mean = lambda stat: None if stat is None else stat["mean"]  # noqa: E731
    return [{"profile": profile, "model": r["model"], "at": r["at"], "seeds": len(r["seeds"]), "bleu": mean(r["bleu"]),
             "bleu_sd": None if r["bleu"] is None else r["bleu"]["sd"], "window": mean(r["window"]),
             "aer": mean(r["aer"])} for r in table]


def figure(units: Units, path: str | Path) -> Path:
    """Test BLEU against the window of every trained unit (:func:`_tradeoff_panel`) and, once β is
    selected and a pair finished, each fine-tuning pair at its own dev-selected τ
    (:func:`_pairs_panel`): what claims a–f read."""
    from flexatt.figures import _save, plt

    found = finetuning_pairs(units)
    pairs = found is not None and bool(found[1])
    fig, axes = plt.subplots(1, 2 if pairs else 1, figsize=(13 if pairs else 7, 4.5), squeeze=False)
    _tradeoff_panel(units, axes[0][0])
    if pairs:
        _pairs_panel(units, *found, axes[0][1])
    fig.tight_layout()
    return _save(fig, path)


def _tradeoff_panel(units: Units, ax) -> None:
    """One point per trained unit at τ = ∞, each flexible unit's test curve over τ and its
    dev-selected τ marked."""
    colours: dict[str, str] = {}
    for name, m in sorted(units.manifests.items()):
        if m.get("kind", "train") != "train" or m.get("budget", 1.0) != 1.0:
            continue
        test = m["summary"]["test"]
        variant = m["variant"]
        label = None if variant in colours else variant  # one legend entry per model
        colour = colours.setdefault(variant, f"C{len(colours) % 10}")
        ax.scatter([test["inf"]["window"]], [test["inf"]["bleu"]], color=colour, label=label, zorder=3)
        if "curve" in test:
            points = sorted([*test["curve"], test["inf"]], key=lambda p: p["window"])
            ax.plot([p["window"] for p in points], [p["bleu"] for p in points], color=colour, alpha=0.5, lw=1)
        if "selected" in test:
            ax.scatter([test["selected"]["window"]], [test["selected"]["bleu"]], color=colour, marker="*", s=120,
                       zorder=4, label=None)
    ax.set_xlabel("positions scored per decoding step (test)")
    ax.set_ylabel("test BLEU")
    ax.set_title("Every seed at τ = ∞ (dots), flexible's τ curve, its dev-selected τ (stars)", fontsize=10)
    if colours:
        ax.legend(fontsize=8)
    ax.grid(alpha=0.3)


def _pairs_panel(units: Units, beta: float, pairs: dict[int, dict[int, tuple[str, str]]], ax) -> None:
    """Claim c: each pair's control (circle) and fine-tuning (triangle), each at its own
    dev-selected τ on test, an arrow from the one to the other; one colour per parent."""
    first = True
    for i, (parent, runs) in enumerate(sorted(pairs.items())):
        colour = f"C{i % 10}"
        for r, (tuned, control) in sorted(runs.items()):
            a, b = (units.manifests[n]["summary"]["test"]["selected"] for n in (tuned, control))
            ax.annotate("", xy=(a["window"], a["bleu"]), xytext=(b["window"], b["bleu"]),
                        arrowprops={"arrowstyle": "->", "color": colour, "alpha": 0.6})
            ax.scatter([b["window"]], [b["bleu"]], facecolors="none", edgecolors=colour, zorder=3,
                       label="control (β = 0)" if first else None)
            ax.scatter([a["window"]], [a["bleu"]], color=colour, marker="^", zorder=3,
                       label=f"fine-tuned (β = {beta:g})" if first else None)
            ax.annotate(f"s{parent} r{r}", (a["window"], a["bleu"]), textcoords="offset points", xytext=(4, 4),
                        fontsize=8)
            first = False
    n = sum(len(runs) for runs in pairs.values())
    ax.set_xlabel("positions scored per decoding step (test), at each model's dev-selected τ")
    ax.set_ylabel("test BLEU")
    ax.set_title(f"Fine-tuning vs its control, {n} pair{'s' * (n != 1)} from {len(pairs)} "
                 f"parent{'s' * (len(pairs) != 1)} (colours)", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)

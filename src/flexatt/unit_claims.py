"""The papers' claims decided from a long run's units (:mod:`flexatt.units`), with no checkpoint
and no decoding: every figure comes from the units' stored test decodes (docs/method.md, Claims).

Each claim compares two systems A and B on the test sentences, seed by seed (A and B of the same
training seed; a fine-tuning and its control of the same fine-tuning seed). Two intervals decide:

* **over seeds**: the per-seed Δ BLEU (corpus BLEU of A minus B, each seed's own test decodes),
  its mean and a 95% t-interval over the seeds (:func:`t_interval`), the practice of Clark et al.
  (2011) for optimiser instability; none with one seed;
* **pooled**: the seeds' test sets put end to end, A's hypotheses against B's sentence by sentence
  (:func:`flexatt.claims.compare_pair`: Δ BLEU with its 95% paired-bootstrap interval, the paired
  bootstrap p and approximate randomisation p), the p-values Holm-adjusted over every claim of the
  run (one family).

A verdict holds (or fails) when the two agree and is inconclusive when they do not; with one seed
the pooled verdict decides alone and the claim says so. The rules (α 0.05, margin 0.5 BLEU):

* **a** Flexible τ = ∞ ≥ Global: non-inferiority within the margin
  (:func:`flexatt.claims.verdict_not_worse`; over seeds :func:`flexatt.claims.verdict_within`).
* **b** the dev-selected τ cuts positions at ≤ 0.5 BLEU (:func:`flexatt.claims.verdict_cut`): the
  BLEU of flexible at its selected τ against τ = ∞ within the margin, and the share of positions
  cut, 1 − window(τ)/window(∞), with its t-interval over seeds above 0. The papers' 56–64% is
  reported against that interval (below, inside, above: :func:`flexatt.claims.against_paper`),
  never used as a threshold on a point estimate.
* **c** fine-tuning narrows the window (:func:`flexatt.claims.verdict_narrowing`): each
  fine-tuning against its control of the same seed, **each at its own dev-selected τ** (never at
  one shared τ, where a larger g_t narrows the window by construction): holds when the relative
  change of the test window has a t-interval at or below −5% and the BLEU difference is within
  the margin; fails when that interval lies above −5% or the BLEU difference fails the margin.
* **d** Local-p > Global, **e** SACT > Global: :func:`flexatt.claims.verdict_better`; **e2** SACT
  gains +2 BLEU: :func:`flexatt.claims.verdict_effect`.
* **f** Flexible beats a fixed window of the same size, at D = 5 and 10
  (:data:`flexatt.claims.VERDICT_WINDOWS`; the plan's ``fixed`` windows): flexible decoded on test
  at the τ whose dev window equals the fixed model's (a pair whose dev windows differ by more
  than 10% is not matched), one verdict per fixed window (:func:`flexatt.claims.verdict_better`);
  f holds when every fixed window's holds, fails when any fails.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from flexatt.claims import (ALPHA, FAILS, HOLDS, INCONCLUSIVE, MARGIN, MATCH_TOLERANCE, MIN_NARROWING, NOT_MEASURED,
                            PAPER_CUT, VERDICT_WINDOWS, against_paper, compare_pair, holm, percent_range,
                            verdict_better, verdict_cut, verdict_effect, verdict_narrowing, verdict_not_worse,
                            verdict_within, windows_match)
from flexatt.tau import INF
from flexatt.products import (BUDGET_GAIN, Plan, Unit, budget_gain, budget_short, done_units, load_products,
                              match_records, select_beta, tau_key)

#: SACT's gain over Global in its paper (Lin et al. 2018), the effect claim e2 tests
SACT_EFFECT = 2.0


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


def combine(pooled: str, over_seeds: str | None) -> str:
    """The claim's verdict: the pooled one where there is one seed (``over_seeds`` ``None``),
    else the verdict both agree on, inconclusive where they differ."""
    if over_seeds is None or over_seeds == pooled:
        return pooled
    return INCONCLUSIVE


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

    def seeds(self, *variants: str) -> list[int]:
        """The training seeds at which every one of ``variants`` has a finished unit."""
        return [s for s in self.plan.seeds if all(self.has(Unit(v, s).name) for v in variants)]


def _pair_stats(pairs: list[tuple[dict, dict]], references: dict[str, list[str]], *, n_samples: int, seed: int,
                ar_trials: int) -> dict[str, Any]:
    """Per-seed Δ BLEU (its t-interval) and the pooled comparison of the record pairs ``(A, B)``."""
    deltas = [a["bleu"] - b["bleu"] for a, b in pairs]
    hyp_a = [h for a, _ in pairs for h in a["hypotheses"]]
    hyp_b = [h for _, b in pairs for h in b["hypotheses"]]
    refs = [r for a, _ in pairs for r in references[a["split"]]]
    pooled = compare_pair(hyp_a, hyp_b, refs, n_samples=n_samples, seed=seed, ar_trials=ar_trials)
    return {"seeds": len(pairs), "per_seed": [round(d, 2) for d in deltas], "over_seeds": t_interval(deltas),
            "pooled": pooled}


def _seed_verdict(stats: dict, rule: str, margin: float) -> str | None:
    ci = stats["over_seeds"]["ci"]
    if ci is None:
        return None
    if rule in ("not_worse", "within"):
        return verdict_within(ci, margin)
    return {1: HOLDS, -1: FAILS}.get(1 if ci[0] > 0 else -1 if ci[1] < 0 else 0, INCONCLUSIVE)


def claim_pairs(units: Units) -> dict[str, list[tuple[dict, dict]]]:
    """The record pairs (A, B) of each pairwise claim, one per seed (or fine-tuning seed)."""
    p = units.plan
    flex = p.flexible
    pairs: dict[str, list[tuple[dict, dict]]] = {}
    pairs["a"] = [(units.record(Unit(flex, s).name, INF), units.record(Unit("global", s).name, INF))
                  for s in units.seeds(flex, "global")]
    pairs["b"] = [(units.record(Unit(flex, s).name, _selected(units, Unit(flex, s).name)),
                   units.record(Unit(flex, s).name, INF)) for s in units.seeds(flex)
                  if not math.isinf(_selected(units, Unit(flex, s).name))]
    if (found := finetuning_pairs(units)) is not None:
        pairs["c"] = [tuple(units.record(n, _selected(units, n)) for n in names) for names in found[1].values()]
    for claim, variant in (("d", "local_p"), ("e", "sact")):
        pairs[claim] = [(units.record(Unit(variant, s).name, INF), units.record(Unit("global", s).name, INF))
                        for s in units.seeds(variant, "global")]
    for fixed in p.fixed:
        found = []
        for s in units.seeds(flex, fixed):
            matched = units.manifests[Unit(flex, s).name]["summary"].get("matched", {}).get(Unit(fixed, s).name)
            if matched is not None and windows_match(matched["dev"]["window"], matched["target"], MATCH_TOLERANCE):
                found.append((units.record(Unit(flex, s).name, matched["tau"]), units.record(Unit(fixed, s).name, INF)))
        pairs[f"f:{fixed}"] = found
    return pairs


def finetuning_pairs(units: Units) -> tuple[float, dict[int, tuple[str, str]]] | None:
    """The selected β and, per run r, the names of its finished pair (fine-tuned, control) at that β
    from the first seed's parent; ``None`` while β is not selected (or the plan has no fine-tuning)."""
    p = units.plan
    ft = p.finetuning
    beta = select_beta(p, units.manifests) if ft is not None else None
    if beta is None:
        return None
    names = {r: (Unit(ft.parent, p.seeds[0], beta=beta, run=r).name, Unit(ft.parent, p.seeds[0], beta=0.0, run=r).name)
             for r in range(1, ft.pairs + 1)}
    return beta, {r: pair for r, pair in names.items() if all(units.has(n) for n in pair)}


def _selected(units: Units, name: str) -> float:
    """The τ a unit's flexible model selected on dev (``None``: none, or not a flexible model)."""
    return units.manifests[name]["summary"]["dev"].get("selected_tau", INF)


CLAIM_TEXT = {
    "a": ("Flexible τ=∞ ≥ Global", "Shu & Nakayama 2017, Table 1", "not_worse"),
    "b": ("the dev-selected τ cuts positions at ≤ 0.5 BLEU (paper: 56–64%)", "Shu & Nakayama 2017, §5.2", "within+cut"),
    "c": ("fine-tuning narrows the window (fine-tuned vs control, each at its own selected τ)",
          "Shu & Nakayama 2017, §4 (eq. 9)", "narrower+within"),
    "d": ("Local-p > Global", "Luong et al. 2015, Table 1", "better"),
    "e": ("SACT > Global", "Lin et al. 2018", "better"),
    "e2": ("SACT gains +2 BLEU over Global", "Lin et al. 2018", "effect"),
    "f": (f"Flexible beats a fixed window of equal size (D = {', '.join(map(str, VERDICT_WINDOWS))}; matched on dev)",
          "Shu & Nakayama 2017, §5", "matched"),
}


def decide(units: Units, references: dict[str, list[str]], *, alpha: float = ALPHA, margin: float = MARGIN,
           n_samples: int = 1000, seed: int = 1234, ar_trials: int = 10000) -> list[dict]:
    """Every claim of :data:`CLAIM_TEXT` with its rule, per-seed and pooled figures and verdict
    (the module's docstring); a claim without its units is ``not measured``."""
    pairs = claim_pairs(units)
    stats = {key: _pair_stats(found, references, n_samples=n_samples, seed=seed, ar_trials=ar_trials)
             for key, found in pairs.items() if found}
    if "e" in stats:
        stats["e2"] = stats["e"]
    adjusted = holm({key: s["pooled"]["p_bs"] for key, s in stats.items() if key != "e2"})
    adjusted_ar = holm({key: s["pooled"]["p_ar"] for key, s in stats.items() if key != "e2"})
    out = []
    for claim, (text, source, rule) in CLAIM_TEXT.items():
        entry: dict[str, Any] = {"id": claim, "claim": text, "source": source, "rule": rule}
        keys = [k for k in pairs if k.startswith("f:")] if claim == "f" else [claim]
        if not any(k in stats for k in keys):
            out.append({**entry, "verdict": NOT_MEASURED, "missing": "no finished units of this comparison"})
            continue
        if claim == "f":
            parts = []
            for key in keys:
                if key not in stats:
                    parts.append({"fixed": key[2:], "verdict": NOT_MEASURED})
                    continue
                s = stats[key]
                pooled = verdict_better(s["pooled"]["ci"], adjusted[key], alpha)
                parts.append({"fixed": key[2:], **s, "p": adjusted[key], "p_ar": adjusted_ar[key],
                              "verdict": combine(pooled, _seed_verdict(s, "better", margin))})
            verdicts = [p["verdict"] for p in parts]
            entry["pairs"] = parts
            entry["verdict"] = (FAILS if FAILS in verdicts else HOLDS if verdicts and all(v == HOLDS for v in verdicts)
                                else INCONCLUSIVE)
            out.append(entry)
            continue
        s = stats[claim]
        base = "e" if claim == "e2" else claim
        entry.update(s, p=adjusted[base], p_ar=adjusted_ar[base])
        ci = s["pooled"]["ci"]
        if rule == "not_worse":
            entry["verdict"] = combine(verdict_not_worse(ci, adjusted[base], alpha, margin), _seed_verdict(s, rule, margin))
        elif rule == "better":
            entry["verdict"] = combine(verdict_better(ci, adjusted[base], alpha), _seed_verdict(s, rule, margin))
        elif rule == "effect":
            entry["paper_effect"] = SACT_EFFECT
            over = s["over_seeds"]["ci"]
            entry["verdict"] = combine(verdict_effect(ci, SACT_EFFECT),
                                       None if over is None else verdict_effect(over, SACT_EFFECT))
        elif rule == "within+cut":
            cut = t_interval([1 - a["window"] / b["window"] for a, b in pairs["b"]])
            within = combine(verdict_within(ci, margin), _seed_verdict(s, "within", margin))
            entry["cut"] = cut
            entry["paper_cut"] = against_paper(_bounds(cut), PAPER_CUT)
            entry["verdict"] = verdict_cut(within, _bounds(cut))
        elif rule == "narrower+within":
            change = t_interval([a["window"] / b["window"] - 1 for a, b in pairs["c"]])
            within = combine(verdict_within(ci, margin), _seed_verdict(s, "within", margin))
            entry["window_change"] = change
            entry["beta"] = select_beta(units.plan, units.manifests)  # the pairs' β, chosen on dev
            entry["verdict"] = verdict_narrowing(within, _bounds(change))
        out.append(entry)
    return out


def _bounds(stat: dict) -> list[float]:
    """The interval of a :func:`t_interval` over seeds; with one seed, its value twice."""
    return stat["ci"] or [stat["mean"], stat["mean"]]


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


def render(table: list[dict], claims: list[dict], units: Units, budget: dict | None = None,
           shown: str | None = None) -> str:
    """The report as Markdown: the models over seeds, the budget check, then the claims;
    ``shown`` names the units' folder (default: as given)."""
    lines = [f"Units done: {len(units.manifests)} (`{shown or units.folder}`).", "",
             "| model | at | seeds | test BLEU | window | AER | diagonal AER |", "|---|---|---|---|---|---|---|"]
    for r in table:
        lines.append(f"| {r['model']} | {r['at']} | {','.join(map(str, r['seeds']))} | {_ms(r['bleu'])} | "
                     f"{_ms(r['window'])} | {_ms(r['aer'], 3)} | {_ms(r['diagonal'], 3)} |")
    lines += ["", "mean ± sd over training seeds; AER against the gold links, beside a length-proportional "
              "diagonal's.", ""]
    if trained := precisions(units):
        lines += ["Trained at " + ", ".join(trained) + "; the two sides of every pair at one precision.", ""]
    if budget is not None:
        lines += [f"Budget check: {budget['variant']} trained {budget['epochs'][1]} epochs instead of "
                  f"{budget['epochs'][0]} gains {budget['dev_gain']:+.2f} dev BLEU ({budget['dev_bleu'][0]:.2f} → "
                  f"{budget['dev_bleu'][1]:.2f}; test {budget['test_bleu'][0]:.2f} → {budget['test_bleu'][1]:.2f}): "
                  + ("under" if budget["enough"] else "not under") + f" {BUDGET_GAIN} BLEU, so the budget "
                  + ("is" if budget["enough"] else "is not") + " enough by this check"
                  + (". It is kept all the same (`budget_check.final`): the claims compare models trained "
                     "for an equal budget that stops short of convergence by this check." if budget.get("kept_short")
                     else "."), ""]
    lines += ["| claim | rule | verdict | Δ BLEU per seed | over seeds (95% t) | pooled (95% bootstrap) | "
              "p (Holm) | p AR (Holm) | detail |", "|---|---|---|---|---|---|---|---|---|"]
    for c in claims:
        if c["verdict"] == NOT_MEASURED:
            lines.append(f"| {c['id']}: {c['claim']} | {c['rule']} | not measured | | | | | | {c.get('missing', '')} |")
            continue
        entries = c.get("pairs") or [c]
        for e in entries:
            if e["verdict"] == NOT_MEASURED:
                lines.append(f"| {c['id']} vs {e['fixed']} | {c['rule']} | not measured | | | | | | |")
                continue
            over = e["over_seeds"]
            over_text = (f"{over['mean']:+.2f} [{over['ci'][0]:+.2f}, {over['ci'][1]:+.2f}]" if over["ci"]
                         else f"{over['mean']:+.2f} (one {'pair' if 'window_change' in c else 'seed'})")
            pooled = e["pooled"]
            label = f"{c['id']}: {c['claim']}" + (f" — vs {e['fixed']}" if "fixed" in e else "")
            detail = ""
            if "cut" in c:
                cut = c["cut"]
                detail = (f"positions cut {100 * cut['mean']:.0f}%" + (f" [{100 * cut['ci'][0]:.0f}, "
                          f"{100 * cut['ci'][1]:.0f}]" if cut["ci"] else "")
                          + f"; the paper's {percent_range(PAPER_CUT)} "
                          + ("overlaps it" if c["paper_cut"] == "inside" else f"lies {c['paper_cut']} it"))
            if "window_change" in c:
                w = c["window_change"]
                detail = (f"at β = {c['beta']:g} (chosen on dev): window {100 * w['mean']:+.1f}%"
                          + (f" [{100 * w['ci'][0]:+.1f}, {100 * w['ci'][1]:+.1f}]" if w["ci"] else "")
                          + f"; narrower: ≤ −{100 * MIN_NARROWING:.0f}%")
            lines.append(f"| {label} | {c['rule']} | {e['verdict'] if 'fixed' in e else c['verdict']} | "
                         f"{', '.join(f'{d:+.2f}' for d in e['per_seed'])} | {over_text} | "
                         f"{pooled['delta']:+.2f} [{pooled['ci'][0]:+.2f}, {pooled['ci'][1]:+.2f}] | {e['p']:.4f} | "
                         f"{e['p_ar']:.4f} | {detail} |")
        if c.get("pairs"):
            lines.append(f"| {c['id']}: {c['claim']} | {c['rule']} | {c['verdict']} | | | | | | every fixed window |")
    return "\n".join(lines) + "\n"


def report(folder: str | Path, plan: Plan, references: dict[str, list[str]], *, shown: str | None = None,
           **options) -> dict:
    """The run's table and claims from its units: ``{"units", "table", "budget_check", "claims",
    "markdown"}``; ``shown`` names the folder in the Markdown, ``options`` go to :func:`decide`."""
    units = Units(folder, plan)
    table = model_table(units)
    claims = decide(units, references, **options)
    budget = budget_check(units)
    return {"units": sorted(units.manifests), "table": table, "budget_check": budget, "claims": claims,
            "markdown": render(table, claims, units, budget, shown)}


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


def _pairs_panel(units: Units, beta: float, pairs: dict[int, tuple[str, str]], ax) -> None:
    """Claim c: each run's control (circle) and fine-tuning (triangle), each at its own
    dev-selected τ on test, an arrow from the one to the other."""
    for r, (tuned, control) in sorted(pairs.items()):
        a, b = (units.manifests[n]["summary"]["test"]["selected"] for n in (tuned, control))
        colour = f"C{(r - 1) % 10}"
        ax.annotate("", xy=(a["window"], a["bleu"]), xytext=(b["window"], b["bleu"]),
                    arrowprops={"arrowstyle": "->", "color": colour, "alpha": 0.6})
        ax.scatter([b["window"]], [b["bleu"]], facecolors="none", edgecolors=colour, zorder=3,
                   label="control (β = 0)" if r == min(pairs) else None)
        ax.scatter([a["window"]], [a["bleu"]], color=colour, marker="^", zorder=3,
                   label=f"fine-tuned (β = {beta:g})" if r == min(pairs) else None)
        ax.annotate(f"r{r}", (a["window"], a["bleu"]), textcoords="offset points", xytext=(4, 4), fontsize=8)
    ax.set_xlabel("positions scored per decoding step (test), at each model's dev-selected τ")
    ax.set_ylabel("test BLEU")
    ax.set_title(f"Fine-tuning vs its control, {len(pairs)} pair{'s' * (len(pairs) != 1)} from one parent",
                 fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)

"""Stage ``compare``: the papers' claims tested on our test set, flexible attention against fixed
windows of the same size, and the multiple-testing correction of every comparison.

1. **Matched windows.** For every fixed-window row of ``results/metrics.json`` (attention
   ``local_m`` or ``local_p``, whatever its ``model.local_D``, read from the params by
   :meth:`flexatt.schema.Params.model_of`) and every flexible model of ``compare.models``: the τ at
   which the flexible model's mean window on **dev** equals the fixed window's mean dev window
   (:func:`flexatt.tau_search.match_window`: bisection on log τ, bracketed by the dev points that
   ``sweep_tau`` already decoded), then the flexible model decoded on **test** at that τ and
   compared with the fixed-window row on test. Every pair is reported; claim f counts only those
   of a fixed window with D in :data:`flexatt.claims.VERDICT_WINDOWS`.
2. **τ curves on test** of every model of ``compare.curve_models`` at ``sweep_tau.curve_taus``,
   each point with its 95% bootstrap interval (a point that ``sweep_tau`` or ``evaluate`` decoded
   is read from its decodes).
3. **Comparisons** (:func:`flexatt.claims.compare_pair`): Δ BLEU with its 95% paired-bootstrap
   interval, the paired bootstrap p (``evaluate.bootstrap_samples``, ``evaluate.bootstrap_seed``:
   the resamples of Table 1) and the approximate-randomisation p (``compare.ar_trials``), for two
   families, each Holm-adjusted (:func:`flexatt.claims.adjust`): ``table1``, every comparison
   Table 1 marks (each row against its reference row), and ``compare``, the comparisons this
   stage adds (fine-tuned vs control, flexible at a matched τ vs the fixed window, any claim's
   pair that Table 1 does not test).
4. **Claims** (:func:`flexatt.claims.claims_table`): effect, interval, adjusted p and a verdict
   (holds / fails / inconclusive / not measured) per claim; docs/method.md, Claims.

Reads ``evaluate.out``, the translations of every row (``evaluate.translations_dir``),
``sweep_tau.out``, the decodes of ``sweep_tau.decodes`` and ``evaluate.decodes`` (a point either
decoded is read, not decoded again) and the checkpoints it decodes. Rows that a profile does not evaluate (the
controls, other window sizes) are left out: their claims are "not measured".

Writes ``compare.out`` (JSON), ``compare.report`` (Markdown: the claims, the matched windows, the
Holm-adjusted p of Table 1), ``compare.curve_file`` (CSV for ``dvc plots``) and
``compare.figure`` (test BLEU with its 95% interval against the mean window, every model); logs
them to W&B.

Usage::

    python -m flexatt.stages.compare
    python -m flexatt.stages.compare compare.models=[flexible_ft] compare.search_steps=8
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from omegaconf import DictConfig

from flexatt import config as C
from flexatt import figures, schema
from flexatt.claims import (CLAIMS, LOCAL_ATTENTIONS, MATCH_TOLERANCE, MIN_NARROWING, NOT_MATCHED, NOT_MEASURED,
                            REQUIRED_CUT, VERDICT_WINDOWS, adjust, claims_table, compare_pair, in_verdict, outcome, repeats_inf,
                            windows_match)
from flexatt.errors import DataError
from flexatt.data.evalset import EvalSet
from flexatt.io import atomic_path, write_csv, write_json
from flexatt.metrics import bleu_significance, corpus_bleu
from flexatt.points import Decoder, load_decodes
from flexatt.tau import INF, from_json, label
from flexatt.tau_search import match_window
from flexatt.tracking import start_run

#: rows drawn at their full window in the figure, beside the fixed windows
FULL_WINDOW_ROWS = ("global", "sact")
CSV_FIELDS = ["model", "kind", "split", "tau", "window", "bleu", "ci_low", "ci_high"]


def _read_json(path: Path, stage: str) -> dict:
    if not path.is_file():
        raise DataError(path, f"not found (run the {stage} stage first)")
    try:
        return from_json(json.loads(path.read_text(encoding="utf-8")))
    except json.JSONDecodeError as exc:
        raise DataError(path, f"is not valid JSON ({exc})") from None


def read_translations(rows: dict[str, dict], directory: Path, split: str, references: list[str]) -> dict[str, list[str]]:
    """The test translations of every row (``<directory>/<row>.<split>.txt``), checked against
    ``results/metrics.json``: as many lines as references and the BLEU it reports (a file that
    scores otherwise is stale: evaluate has to run again)."""
    out = {}
    for row, m in rows.items():
        path = directory / f"{row}.{split}.txt"
        if not path.is_file():
            raise DataError(path, "not found (run the evaluate stage first)")
        lines = path.read_text(encoding="utf-8").split("\n")[:-1]
        if len(lines) != len(references):
            raise DataError(path, f"has {len(lines)} lines for {len(references)} {split} references")
        bleu = round(corpus_bleu(lines, [references])[0], 2)
        if abs(bleu - m["bleu"]) > 0.011:
            raise DataError(path, f"scores {bleu:.2f} BLEU where results/metrics.json has {m['bleu']:.2f} for "
                            f"{row} (stale translations: run the evaluate stage again)")
        out[row] = lines
    return out


def local_rows(p: schema.Params, rows: dict[str, dict]) -> dict[str, dict]:
    """The fixed-window rows: every evaluated row that is a trained variant whose attention is
    local-m or local-p, with its ``attention`` and ``D`` (``model.local_D`` after the variant's
    overrides), in the order of ``rows``."""
    out = {}
    for row in rows:
        if row in p.variants:
            model = p.model_of(row, "variants")
            if model.attention in LOCAL_ATTENTIONS:
                out[row] = {"attention": model.attention, "D": model.local_D}
    return out


def run(cfg: DictConfig | schema.Params) -> dict:
    """The stage: :func:`compute`, then :func:`publish`; returns the report."""
    p = schema.params(cfg)
    logging.getLogger("sacrebleu").setLevel(logging.WARNING)  # not a line per test of each comparison
    tracker = start_run(p, "compare", p.evaluate.split, tags=[p.profile])
    report, points = compute(p)
    publish(p, report, points, tracker)
    print(render(report))
    return report


def compute(p: schema.Params) -> tuple[dict, dict[str, dict]]:
    """Every figure of the comparison: the matched windows (dev decodes where the sweep's
    points do not suffice), the τ curves on the test split, every paired test Holm-adjusted in
    its family, the claims. Returns the report and the figure's single points."""
    cp, ev = p.compare, p.evaluate
    split, tok_dir = ev.split, Path(p.train.data_dir)
    metrics_file = Path(ev.out)
    metrics, sweep = _read_json(metrics_file, "evaluate"), _read_json(Path(p.sweep_tau.out), "sweep_tau")
    rows: dict[str, dict] = metrics.get("models") or {}
    if "global" not in rows:
        raise DataError(metrics_file, "has no global row (run the evaluate stage with evaluate.checkpoints.global)")
    seed, n_samples, trials, alpha = ev.bootstrap_seed, ev.bootstrap_samples, cp.ar_trials, cp.alpha
    sets = {"dev": EvalSet.load(tok_dir, "dev")}
    sets[split] = sets["dev"] if split == "dev" else EvalSet.load(tok_dir, split)
    references = sets[split].references
    hyps = read_translations(rows, Path(ev.translations_dir), split, references)
    decoder = Decoder(p, sets, key="compare.models")
    for stored in (p.sweep_tau.decodes, ev.decodes):  # decoded once, by the stage that needed them first
        load_decodes(decoder, stored, "compare")
    started = time.perf_counter()
    locals_ = local_rows(p, rows)
    matched = matched_windows(p, decoder, rows, locals_, sweep, hyps)
    curves = tau_curves(p, decoder, split, seed, n_samples)
    comparisons = paired_tests(rows, hyps, matched, references, seed=seed, n_samples=n_samples, trials=trials,
                               alpha=alpha)
    by_pair = {(c["a"], c["b"]): c for c in comparisons}
    for m in matched:
        c = by_pair[(m["name"], m["local"])]
        m.update({"delta": c["delta"], "ci": c["ci"], "ci_flexible": c["ci_a"], "p": c["p_bs_holm"],
                  "p_ar": c["p_ar_holm"],
                  "outcome": (outcome(c["ci"], c["p_bs_holm"], alpha)
                              if windows_match(m["dev"]["window"], m["dev"]["target"]) else NOT_MATCHED)})
    claims = claims_table(rows, comparisons, matched, alpha=alpha, margin=cp.margin)
    table1 = {c["a"]: {"against": c["b"], "p_value": rows[c["a"]].get("p_value"), "p_bs": c["p_bs"],
                       "p_bs_holm": c["p_bs_holm"], "p_ar": c["p_ar"], "p_ar_holm": c["p_ar_holm"],
                       "family_size": c["family_size"]}
              for c in comparisons if c["family"] == "table1"}
    for row, t in table1.items():
        if t["p_value"] is not None and t["p_value"] != t["p_bs"]:
            print(f"compare: warning: {row}: bootstrap p {t['p_bs']} here, {t['p_value']} in {metrics_file} "
                  "(evaluate ran with other bootstrap settings?)", flush=True)
    print(f"compare: {len(comparisons)} comparisons ({n_samples} resamples, {trials} AR trials) in "
          f"{time.perf_counter() - started:.1f} s", flush=True)
    report = {"split": split, "alpha": alpha, "margin": cp.margin,
              "bootstrap": {"test": "paired bootstrap resampling (sacrebleu PairedTest, test_type='bs')",
                            "n_samples": n_samples, "seed": seed},
              "ar": {"test": "approximate randomisation (sacrebleu PairedTest, test_type='ar')",
                     "n_trials": trials, "seed": seed},
              "correction": "Holm-Bonferroni within each family (table1, compare)",
              "verdicts": {c["id"]: c["verdict"] for c in claims},
              "claims": claims, "matched": matched, "table1": table1, "comparisons": comparisons,
              "curves": curves, "decoded_by": decoder.decoded_by}
    return report, plot_points(rows, locals_, matched)


def matched_windows(p: schema.Params, decoder: Decoder, rows: dict[str, dict], locals_: dict[str, dict],
                    sweep: dict, hyps: dict[str, list[str]]) -> list[dict]:
    """Each flexible model of ``compare.models`` at the τ whose dev window equals each fixed
    window's (:func:`flexatt.tau_search.match_window`, bracketed by the sweep's dev points), and
    its test decode there (added to ``hyps`` as ``<model>@<fixed row>``)."""
    cp, split = p.compare, p.evaluate.split
    flexible = [m for m in cp.models if m in p.evaluate.checkpoints]
    for m in cp.models:
        if m not in p.evaluate.checkpoints:
            print(f"compare: {m} is not a row of evaluate.checkpoints here; no matched window for it", flush=True)
    matched: list[dict] = []
    for local, info in locals_.items():
        target = decoder.point(local, "dev", INF)["window"]
        for model in flexible:
            known = []
            if model in sweep.get("models", {}):
                known = [sweep["models"][model]["inf"], *sweep["models"][model]["points"]]
            known += decoder.points(model, "dev")
            match, new = match_window(lambda tau, model=model: decoder.point(model, "dev", tau), known, target,
                                      cp.search_steps)
            tau = match["tau"]
            test = decoder.point(model, split, tau)
            name = f"{model}@{local}"
            hyps[name] = decoder.hypotheses(model, split, tau)
            matched.append({"model": model, "local": local, **info, "name": name, "tau": tau,
                            "dev": {"target": target, "window": match["window"], "bleu": match["bleu"],
                                    "decoded": len(new)},
                            "test": {"window": test["window"], "window_local": rows[local]["window"],
                                     "bleu": test["bleu"], "bleu_local": rows[local]["bleu"]}})
            print(f"compare: {model} matches {local} (D={info['D']}, dev window {target:.2f}) at tau={label(tau)}: "
                  f"dev window {match['window']:.2f} ({len(new)} new dev decodes); test window "
                  f"{test['window']:.2f} vs {rows[local]['window']:.2f}", flush=True)
    return matched


def paired_tests(rows: dict[str, dict], hyps: dict[str, list[str]], matched: list[dict], references: list[str], *,
                 seed: int, n_samples: int, trials: int, alpha: float) -> list[dict]:
    """Every paired test of the stage, once each (:func:`flexatt.claims.compare_pair`), Holm-adjusted
    within its family: Table 1's (each row against its reference row), the claims' and the matched
    windows' (family ``compare``). A τ row without a selected τ is its τ = ∞ row again: no test
    that would repeat one at τ = ∞ is made (:func:`flexatt.claims.repeats_inf`)."""
    comparisons: list[dict] = []

    def add(a: str, b: str, family: str) -> None:
        if repeats_inf(a, b, rows):
            return
        if a in hyps and b in hyps and not any(c["a"] == a and c["b"] == b for c in comparisons):
            comparisons.append({"a": a, "b": b, "family": family,
                                **compare_pair(hyps[a], hyps[b], references, n_samples=n_samples, seed=seed,
                                               ar_trials=trials)})

    for row, m in rows.items():
        if m.get("p_value_against"):
            add(row, m["p_value_against"], "table1")
    for spec in CLAIMS:
        for a, b in [(spec.get("a"), spec.get("b")), spec.get("at_inf", (None, None))]:
            if a and b:
                add(a, b, "compare")
    for m in matched:
        add(m["name"], m["local"], "compare")
    adjust(comparisons, alpha)
    return comparisons


def publish(p: schema.Params, report: dict, points: dict[str, dict], tracker) -> None:
    """The report as files (``compare.out``, ``compare.report``, ``compare.curve_file``, the
    figure) and on the run's dashboard."""
    cp, split = p.compare, report["split"]
    write_json(cp.out, report)
    with atomic_path(cp.report) as tmp:
        Path(tmp).write_text(render(report), encoding="utf-8")
    ci = lambda pt, i: (pt.get("ci") or [None, None])[i]  # noqa: E731
    csv_rows = [{"model": name, "kind": "curve", "split": split, "tau": pt["tau"], "window": pt["window"],
                 "bleu": pt["bleu"], "ci_low": ci(pt, 0), "ci_high": ci(pt, 1)}
                for name, pts in report["curves"].items() for pt in pts]
    csv_rows += [{"model": name, "kind": pt["kind"], "split": split, "tau": pt.get("tau"), "window": pt["window"],
                  "bleu": pt["bleu"], "ci_low": ci(pt, 0), "ci_high": ci(pt, 1)} for name, pt in points.items()]
    write_csv(cp.curve_file, csv_rows, CSV_FIELDS)
    figure = figures.matched_window(report["curves"], points, cp.figure,
                                    f"{split} BLEU (95% CI) against mean window; τ marked on the curves")
    claims, matched = report["claims"], report["matched"]
    tracker.records("compare/claims", [{**c, "ci_low": (c.get("ci") or [None, None])[0],
                                        "ci_high": (c.get("ci") or [None, None])[1], "p_holm": c.get("p"),
                                        "p_ar_holm": c.get("p_ar"),
                                        "detail": c.get("detail", ", ".join(c.get("missing", [])))} for c in claims],
                    ["id", "claim", "source", "a", "b", "effect", "ci_low", "ci_high", "p_holm", "p_ar_holm",
                     "verdict", "detail"])
    tracker.records("compare/matched", [{**m, "dev_target": m["dev"]["target"], "dev_window": m["dev"]["window"],
                                         "test_window": m["test"]["window"],
                                         "test_window_local": m["test"]["window_local"], "bleu": m["test"]["bleu"],
                                         "bleu_local": m["test"]["bleu_local"], "p_holm": m["p"],
                                         "p_ar_holm": m["p_ar"]} for m in matched],
                    ["model", "local", "D", "tau", "dev_target", "dev_window", "test_window", "test_window_local",
                     "bleu", "bleu_local", "delta", "p_holm", "p_ar_holm", "outcome"])
    tracker.records("compare/table1_holm",
                    [{"row": r, **t, "p_holm": t["p_bs_holm"]} for r, t in report["table1"].items()],
                    ["row", "against", "p_value", "p_holm", "p_ar", "p_ar_holm"])
    tracker.records("compare/points", csv_rows, CSV_FIELDS)
    tracker.image("figures/matched_window", figure, "Test BLEU (95% CI) against mean window")
    tracker.summary({f"claims/{c['id']}": c["verdict"] for c in claims})
    tracker.config({"decoded_by": report["decoded_by"]})
    tracker.finish()


def tau_curves(p: schema.Params, decoder: Decoder, split: str, seed: int, n_samples: int) -> dict[str, list[dict]]:
    """Every model of ``compare.curve_models`` on ``split`` at ``sweep_tau.curve_taus``: label →
    points (``tau``, ``window``, ``bleu``, ``ci``: sacrebleu's bootstrap interval of each point)."""
    curves = {}
    for model in p.compare.curve_models:
        if model not in p.evaluate.checkpoints:
            continue
        taus = list(p.sweep_tau.curve_taus)
        pts = [decoder.point(model, split, tau) for tau in taus]
        names = [f"tau={tau:g}" for tau in taus]
        ci = bleu_significance({n: decoder.hypotheses(model, split, tau) for n, tau in zip(names, taus)},
                               [decoder.sets[split].references], {n: None for n in names},
                               n_samples=n_samples, seed=seed)
        curves[model] = [{"tau": pt["tau"], "window": pt["window"], "bleu": pt["bleu"], "ci": ci[n]["bleu_ci"]}
                         for n, pt in zip(names, pts)]
    return curves


def plot_points(rows: dict[str, dict], locals_: dict[str, dict], matched: list[dict]) -> dict[str, dict]:
    """The single points of the figure: every fixed window, Global and SACT at their full window,
    every flexible model at a matched τ."""
    points = {}
    for row, info in locals_.items():
        m = rows[row]
        points[f"{row} (D={info['D']})"] = {"kind": "fixed", "window": m["window"], "bleu": m["bleu"],
                                            "ci": m.get("bleu_ci")}
    for row in FULL_WINDOW_ROWS:
        if row in rows:
            m = rows[row]
            points[row] = {"kind": "full", "window": m["window"], "bleu": m["bleu"], "ci": m.get("bleu_ci")}
    for m in matched:
        points[f"{m['name']} (τ={label(m['tau'])})"] = {
            "kind": "matched", "tau": m["tau"], "window": m["test"]["window"], "bleu": m["test"]["bleu"],
            "ci": m.get("ci_flexible")}
    return points


def _p(value) -> str:
    return "–" if value is None else f"{value:.4f}"


def _ci(ci) -> str:
    return "–" if not ci else f"[{ci[0]:+.2f}, {ci[1]:+.2f}]"


def render(report: dict) -> str:
    """``compare.report``: the claims table, the matched-window table and the Holm-adjusted p of
    every Table 1 comparison, with the rules under each."""
    alpha, margin = report["alpha"], report["margin"]
    bs, ar = report["bootstrap"], report["ar"]
    lines = [f"# Claims and matched windows — {report['split']} set", "",
             "## Claims", "",
             "| claim | source | A vs B | effect (Δ BLEU) | 95% CI | p (Holm) | p AR (Holm) | family | verdict | detail |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for c in report["claims"]:
        pair = f"{c['a']} vs {c['b']}" if c.get("a") else "matched pairs"
        if c["verdict"] == NOT_MEASURED:
            lines.append(f"| {c['id']}. {c['claim']} | {c['source']} | {pair} | – | – | – | – | – | not measured | "
                         f"missing: {', '.join(c.get('missing', []))} |")
            continue
        effect = "–" if c.get("effect") is None else f"{c['effect']:+.2f}"
        lines.append(f"| {c['id']}. {c['claim']} | {c['source']} | {pair} | {effect} | {_ci(c.get('ci'))} | "
                     f"{_p(c.get('p'))} | {_p(c.get('p_ar'))} | {c.get('family') or '–'} | **{c['verdict']}** | "
                     f"{c.get('detail', '')} |")
    lines += ["", f"Δ = BLEU(A) − BLEU(B) on the same sentences; 95% CI: paired bootstrap percentile interval "
              f"({bs['n_samples']} resamples, seed {bs['seed']}); p: paired bootstrap (sacrebleu; where the systems "
              "differ it reads one tail, so p < 0.05 can come with a CI that contains 0), Holm-adjusted within "
              f"its family (table1: Table 1's comparisons; compare: the ones this stage adds); p AR: approximate "
              f"randomisation ({ar['n_trials']} trials), Holm-adjusted likewise. Verdicts (α = {alpha:g}, "
              f"margin δ = {margin:g} BLEU; docs/method.md, Claims): A > B holds when p < α and the CI lies "
              "above 0, fails when p < α and the CI lies below 0; A ≥ B fails when p < α and the CI lies below "
              "0, holds when the CI's low end ≥ −δ; \"at ≤ δ BLEU\" holds when the CI's low end ≥ −δ, fails "
              "when its high end < −δ; a paper's gain of +x fails when the CI excludes x, holds when it "
              "contains x and lies above 0; otherwise inconclusive. b fails where \"at ≤ δ BLEU\" fails or "
              f"less than {100 * REQUIRED_CUT:.0f}% of the positions is cut (1 − window(A)/window(B)), holds "
              "where \"at ≤ δ BLEU\" holds and the cut reaches it; the paper's 56–64% is reported against the "
              "cut. c compares the fine-tuned "
              f"model and its control each at its own selected τ: it holds where the window is at least "
              f"{100 * MIN_NARROWING:.0f}% narrower (a change ≤ −{100 * MIN_NARROWING:.0f}%) and "
              "\"at ≤ δ BLEU\" holds, fails where it is not or \"at ≤ δ BLEU\" fails. f holds when every "
              f"matched pair of a fixed window with D in {{{', '.join(map(str, VERDICT_WINDOWS))}}} is better, "
              "fails when any is worse; pairs of other windows are reported, outside the verdict."]
    lines += ["", "## Matched windows", "",
              "| flexible | fixed window | τ (matched on dev) | dev window flex / fixed | test window flex / fixed | "
              "test BLEU flex / fixed | Δ BLEU [95% CI] | p (Holm) | p AR (Holm) | outcome |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for m in report["matched"]:
        lines.append(f"| {m['model']} | {m['local']} (D={m['D']}) | {label(m['tau'])} | {m['dev']['window']:.2f} / "
                     f"{m['dev']['target']:.2f} | {m['test']['window']:.2f} / {m['test']['window_local']:.2f} | "
                     f"{m['test']['bleu']:.2f} / {m['test']['bleu_local']:.2f} | {m['delta']:+.2f} {_ci(m['ci'])} | "
                     f"{_p(m['p'])} | {_p(m['p_ar'])} | {m['outcome']}"
                     f"{'' if in_verdict(m) else ' (outside the verdict)'} |")
    if not report["matched"]:
        lines.append("| – | no fixed-window row or flexible model evaluated | | | | | | | | |")
    lines += ["", "τ: the threshold at which the flexible model's mean dev window is nearest the fixed window's "
              f"(bisection on log τ); outcome: better / worse when p (Holm) < {alpha:g} and the CI lies on that "
              f"side of 0, else equal; not matched when the dev windows differ by more than "
              f"{100 * MATCH_TOLERANCE:.0f}% (left out of claim f); outside the verdict: a fixed window whose D "
              f"is not one of {', '.join(map(str, VERDICT_WINDOWS))}, reported but not counted in claim f."]
    lines += ["", "## Table 1 comparisons, Holm-adjusted", "",
              "| row | against | p (Table 1) | p (Holm) | p AR | p AR (Holm) |", "|---|---|---|---|---|---|"]
    for row, t in report["table1"].items():
        lines.append(f"| {row} | {t['against']} | {_p(t['p_value'])} | {_p(t['p_bs_holm'])}"
                     f"{'†' if t['p_bs_holm'] is not None and t['p_bs_holm'] < alpha else ''} | {_p(t['p_ar'])} | "
                     f"{_p(t['p_ar_holm'])} |")
    size = next(iter(report["table1"].values()), {}).get("family_size", 0)
    lines += ["", f"One family of {size} tests (every row against its Table 1 reference); † Holm-adjusted p < "
              f"{alpha:g}."]
    return "\n".join(lines) + "\n"


def main() -> None:
    C.run_stage(run)


if __name__ == "__main__":
    main()

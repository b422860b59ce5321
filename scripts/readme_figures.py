"""Write the README's figures from the committed results, or check that they match them.

    python scripts/readme_figures.py            # rewrite the generated blocks
    python scripts/readme_figures.py --check    # exit 1, naming each stale block, if any differs

The README, ``docs/default-profile.md`` and ``benchmarks/README.md`` carry blocks between
``<!-- NAME:begin -->`` and ``<!-- NAME:end -->`` whose text is derived from files that the
pipeline and the benchmarks write, so the prose never quotes a figure of an earlier run:

* ``headline`` (README): what the long profiles' current reports (``results/<profile>/report.json``)
  measure over training seeds for flexible attention at its dev-selected τ (share of Global's
  positions scored, Δ BLEU against τ = ∞) and at τ = ∞ against Global, with the seed counts, and
  the claims measured on too few seeds for a verdict;
* ``transformer`` (README): the Transformer profiles' units done and the claims they decide;
  ``transformer_units`` (``docs/transformer.md``): their models and claims as the RNN's in the
  README, and the two architectures per model and seed, also at equal training minutes;
* ``bible`` (README): the finished units of the long runs (``make bible``, ``make grc``:
  ``results/<profile>/units/``), both corpora side by side, with the claims their current
  reports decide; ``grc`` (README) the Greek alignment probes (``results/grc/probes/``) while
  none aligns;
* ``results`` (docs/default-profile.md): the default profile's Table 1 (``results/table1.md``)
  under a caption with the corpus sizes (``results/filter.json``);
* ``finetuning`` (docs/default-profile.md): whether fine-tuning narrows the window against its
  control, and the β sweep (``results/metrics.json``, ``results/sweep_beta.json``);
* ``char`` (docs/default-profile.md): the char profile's run (``results/char/``: dev BLEU of
  training, Table 1's window and BLEU), if committed;
* ``reordering`` (docs/default-profile.md): flexible attention's window and BLEU against how much
  the data reorders (``results/reordering/summary.json``, ``make reordering``), if committed;
* ``pipeline``: minutes per stage of the last timed ``make repro`` and the machine it ran on
  (``benchmarks/results/pipeline.json``): the table in ``benchmarks/README.md``, its total in the README.

Everything outside the blocks is left as it is.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import textwrap
from pathlib import Path

from flexatt.claims import MIN_NARROWING, NOT_MEASURED

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DEFAULT_DOC = ROOT / "docs" / "default-profile.md"
TRANSFORMER_DOC = ROOT / "docs" / "transformer.md"
BENCH_README = ROOT / "benchmarks" / "README.md"


def _shown(path: Path) -> Path:
    """``path`` as the README names it: relative to the repository where it is inside it."""
    try:
        return path.relative_to(ROOT)
    except ValueError:
        return path


def _json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _table_lines(markdown: str) -> list[str]:
    """The first Markdown table of ``markdown`` (its ``|`` lines)."""
    lines, started = [], False
    for line in markdown.splitlines():
        if line.startswith("|"):
            lines.append(line)
            started = True
        elif started:
            break
    return lines


def _params() -> dict:
    import yaml

    return yaml.safe_load((ROOT / "params.yaml").read_text(encoding="utf-8"))


def results_block(table_md: str, filt: dict, metrics: dict) -> str:
    splits, reordering = filt["splits"], filt.get("reordering")
    crossing = (f"; {reordering['crossing_link_pairs']:.1%} of gold link pairs cross, in "
                f"{reordering['sentences_with_crossing']:.0%} of pairs" if reordering else "")
    caption = (f"What `make repro` shows (the default profile, 3 epochs): {splits['train']['pairs']:,} training pairs, "
               f"{splits[metrics['split']]['pairs']:,} {metrics['split']} pairs, beam {metrics['beam_size']}"
               f"{crossing} (`results/table1.md`, `results/metrics.json`, `results/filter.json`).")
    return caption + "\n\n" + "\n".join(_table_lines(table_md))


def finetuning_block(metrics: dict, beta: dict | None, lock: Path = ROOT / "dvc.lock") -> str:
    """Whether fine-tuning narrows the window against its control (Table 1's effect table), and
    what the β sweep found (``results/sweep_beta.json``); the β the fine-tuning ran with is read
    from the ``lock`` of the run (:func:`finetuned_beta`)."""
    effects, rows = metrics.get("finetuning_effect", {}), metrics["models"]
    # at the selected τ; where none was selected, the τ = ∞ comparison is the only one
    effect = effects.get("flexible_ft_tau") or effects.get("flexible_ft")
    if not effect:
        return "No fine-tuning control was evaluated."
    beta_used = finetuned_beta(lock)
    paper = " (the paper's)" if beta_used == "0.1" else ""
    better = effect["bleu"] > 0 and effect["p_value"] < 0.05  # than its control
    lead = "**Fine-tuning against its control** (β = 0, the same extra epochs and learning rates): "
    narrows = False
    if effect["tau"] is None and effect.get("tau_control") is None:  # no tau selected: both decode every position
        text = (f"{lead}`sweep_tau` selected no τ for the model fine-tuned at β = {beta_used}{paper} nor for its "
                f"control, so both decode every position (τ = ∞; Δ BLEU {_signed(effect['bleu'])}, unadjusted p = "
                f"{effect['p_value']:.3f}): **whether fine-tuning narrows the window is not measured on this run**.")
    else:
        ft, ctl = rows["flexible_ft_tau"], rows["flexible_ctl_tau"]
        # claim c's rule: each at its own selected τ, narrower by at least MIN_NARROWING
        narrows = ft["window"] / ctl["window"] - 1 <= -MIN_NARROWING
        verdict = "narrows the window" if narrows else "does not narrow the window"
        text = (f"{lead}at β = {beta_used}{paper} the fine-tuned flexible model scores {ft['window']:.2f} positions "
                f"per step at its τ = {_tau(effect['tau'])}, its control {ctl['window']:.2f} at its own τ = "
                f"{_tau(effect.get('tau_control'))} (Δ BLEU "
                f"{_signed(effect['bleu'])}, unadjusted p = {effect['p_value']:.3f}): **on this corpus fine-tuning "
                f"at that β {verdict}**"
                + ("" if narrows or better else "; its gain over Flexible τ = ∞ comes from training longer")
                + ".")
    if beta:
        ref, points = beta["reference"], beta["points"]
        chosen = next((q for q in points if q["beta"] == beta.get("selected_beta")), None)
        # claim c's rule on dev: each run at its own selected τ, narrower by at least MIN_NARROWING
        if chosen and chosen["selected_window"] / ref["selected_window"] - 1 <= -MIN_NARROWING:
            lead = ("On dev the sweep chose it" if f"{chosen['beta']:g}" == beta_used
                    else "A larger β narrows it further" if narrows else "A larger β does")
            text += (f" {lead} (`sweep_beta`, dev, each run at its own selected τ): at β = {chosen['beta']:g} "
                     f"mean g_t {ref['g_mean']:.2f} → {chosen['g_mean']:.2f} and window "
                     f"{ref['selected_window']:.2f} → {chosen['selected_window']:.2f} (τ = "
                     f"{_tau(ref['selected_tau'])} → {_tau(chosen['selected_tau'])}) at dev BLEU "
                     f"{chosen['dev_bleu']:.2f} (β = 0: {ref['dev_bleu']:.2f})")
            last = points[-1]
            text += (f"; β = {last['beta']:g} costs {ref['dev_bleu'] - last['dev_bleu']:.2f} dev BLEU."
                     if last is not chosen else ".")
        else:
            text += (f" No β of the sweep narrowed the dev window at its own τ by {MIN_NARROWING:.0%} within "
                     f"{beta['tolerance']:g} dev BLEU.")
    return textwrap.fill(text, width=100, break_on_hyphens=False)


def _lock_params(lock: Path, stage: str) -> dict:
    """The params.yaml values ``stage`` of ``lock`` (a ``dvc.lock``) ran with; empty where the
    lock or the stage is missing."""
    import yaml

    entry = (yaml.safe_load(lock.read_text(encoding="utf-8")) or {}).get("stages", {}).get(stage) \
        if lock.is_file() else None
    return ((entry or {}).get("params") or {}).get("params.yaml", {})


def finetuned_beta(lock: Path) -> str:
    """The β that ``finetune@flexible`` of ``lock`` ran with (for a long run, the one its
    ``sweep_beta`` selected); ``finetune.beta`` of params.yaml where the lock has no such stage."""
    beta = _lock_params(lock, "finetune@flexible").get("finetune.beta")
    return f"{(_params()['finetune']['beta'] if beta is None else beta):g}"


def char_block(run: Path) -> str:
    """The character-level models (``make char``): how far they trained and what τ gives."""
    if not (run / "metrics.json").is_file():
        return ""
    rows = _json(run / "metrics.json")["models"]
    dev = {name: _json(path)["dev_bleu"] for name, path in (
        ("global", run / "train" / "global.json"), ("flexible", run / "train" / "flexible.json"),
        ("flexible_ft", run / "finetune" / "flexible.json")) if path.is_file()}
    glob, ft, ft_tau = rows["global"], rows["flexible_ft"], rows["flexible_ft_tau"]
    tau = "τ = ∞ (none kept dev BLEU)" if ft_tau["tau"] is None else f"τ = {ft_tau['tau']:g}"
    text = (f"Character level (`make char`, `{run.relative_to(ROOT)}/`): best dev BLEU "
            f"{dev.get('global', float('nan')):.2f} Global, {dev.get('flexible', float('nan')):.2f} Flexible, "
            f"{dev.get('flexible_ft', float('nan')):.2f} fine-tuned; on test the fine-tuned model at {tau} scores "
            f"{ft_tau['window']:.1f} positions per step instead of {glob['window']:.1f} "
            f"({_cut(ft_tau['reduction'])}) at {ft_tau['bleu']:.2f} BLEU (τ = ∞: {ft['bleu']:.2f}; "
            f"Global: {glob['bleu']:.2f}).")
    return textwrap.fill(text, width=100, break_on_hyphens=False)


#: the corpus of each long run made of units, as the units section's columns name it
UNITS_CORPUS = {"bible": ("Bible", "`make bible` (Spanish → English Bible)"),
                "grc": ("Greek NT", "`make grc` (Koine Greek → English)"),
                "bible_tf": ("Bible, Transformer", "`make bible_tf` (the Transformer on the Bible)"),
                "grc_tf": ("Greek NT, Transformer", "`make grc_tf` (the Transformer on the Greek NT)")}

#: the Transformer profiles (:func:`transformer_section`) and the RNN profile whose data each reads
TRANSFORMER_PROFILES = {"bible_tf": "bible", "grc_tf": "grc"}

#: the language pair of each long run's corpus, as the headline names it
UNITS_LANGUAGES = {"bible": "Spanish → English", "grc": "Koine Greek → English"}


def current_report(run: Path) -> dict | None:
    """A long run's ``report.json`` while it covers exactly the units done (its ``units``), else
    ``None``: a report of other units decides nothing about these."""
    from flexatt.products import done_units

    path = run / "report.json"
    if not path.is_file():
        return None
    report = _json(path)
    return report if report.get("units") == sorted(done_units(run / "units")) else None


def _interval(stat: dict, fmt) -> str:
    """A statistic over seeds as ``mean [low, high]`` (its 95% t-interval), the mean alone for one seed."""
    return fmt(stat["mean"]) + (f" [{fmt(stat['ci'][0])}, {fmt(stat['ci'][1])}]" if stat.get("ci") else "")


def _count(n: int, of: str = "seed") -> str:
    return f"{n} {of}{'s' * (n != 1)}"


def headline(runs: dict[str, Path]) -> str:
    """The README's first figures, from the long profiles' current reports (:func:`current_report`):
    flexible attention at its dev-selected τ, the share of Global's positions it scores per step
    (1 − claim b's cut) and its Δ BLEU against τ = ∞ (claim b's), then at τ = ∞ its Δ BLEU against
    Global (claim a's), each as mean [95% t-interval] over training seeds with its seed count, per
    corpus; then, per corpus, the claims measured on fewer than ``MIN_SEEDS`` seeds (fine-tuning
    parents for c), which are not decided for that reason. The verdicts are the claims table's
    (:func:`units_claims`), not repeated here."""
    from flexatt.products import done_units
    from flexatt.unit_claims import MIN_SEEDS

    def measured(c: dict | None) -> bool:
        return bool(c) and c.get("verdict", NOT_MEASURED) != NOT_MEASURED and c.get("over_seeds") is not None

    def percent(x: float) -> str:
        return f"{100 * x:.0f}%"

    selected, at_inf, few, stale = [], [], [], []
    for profile, run in runs.items():
        report = current_report(run)
        if report is None:
            if done_units(run / "units"):
                stale.append(f"`dvc repro pipelines/{profile}/dvc.yaml:report`")
            continue
        name = UNITS_CORPUS[profile][0]
        claims = {c["id"]: c for c in report["claims"]}
        a, b = claims.get("a"), claims.get("b")
        if measured(b) and b.get("cut"):
            cut = b["cut"]
            share = {"mean": 1 - cut["mean"], "ci": cut["ci"] and [1 - cut["ci"][1], 1 - cut["ci"][0]]}
            selected.append((_interval(share, percent), _interval(b["over_seeds"], _signed),
                             f"the {name} ({UNITS_LANGUAGES[profile]}, {_count(b['seeds'])})"))
        if measured(a):
            at_inf.append((_interval(a["over_seeds"], _signed), name, a["seeds"]))
        groups: dict[tuple[int, str], list[str]] = {}
        for c in report["claims"]:
            pairs = [(f"f vs {e['fixed']}", e) for e in c.get("pairs", [])] if "pairs" in c else [(c["id"], c)]
            for label, e in pairs:
                if c["id"] != "e2" and measured(e) and e["seeds"] < MIN_SEEDS:  # e2 is e's seeds
                    of = "parent" if "window_change" in e else "seed"
                    groups.setdefault((e["seeds"], of), []).append(label)
        if groups:
            def joined(labels: list[str]) -> str:
                fixed = [label.removeprefix("f vs ") for label in labels if label.startswith("f vs ")]
                return ", ".join([label for label in labels if not label.startswith("f vs ")]
                                 + ([f"f vs {', '.join(fixed)}"] if fixed else []))
            few.append(f"{name}: " + ", ".join(f"{joined(labels)} ({_count(n, of)})"
                                              for (n, of), labels in sorted(groups.items(),
                                                                            key=lambda g: (g[0][1] == "seed", g[0][0]))))
    text = []
    if selected:
        first, *others = selected
        text.append("**At equal training budgets** (test set; mean [95% t-interval] over training seeds), "
                    "flexible attention at its dev-selected τ scores "
                    f"**{first[0]} of Global's positions per step at {first[1]} BLEU against τ = ∞** on {first[2]}"
                    + "".join(f" and **{share} at {delta}** on {where}" for share, delta, where in others) + ".")
    if at_inf:
        seeds = {n for _, _, n in at_inf}
        each = (f" ({_count(seeds.pop())}{' each' if len(at_inf) > 1 else ''})" if len(seeds) == 1 else "")
        text.append("At τ = ∞ it differs from Global by " + " and ".join(
            f"{delta} BLEU on the {name}" + ("" if each else f" ({_count(n)})") for delta, name, n in at_inf)
            + each + ".")
    if few:
        text.append(f"A verdict needs {MIN_SEEDS} training seeds; measured on fewer so far, these claims are "
                    f"*not decided*: {'; '.join(few)}.")
    if stale:
        text.append(f"{' and '.join(stale)} brings the figures up to date with the units done.")
    if not selected and not at_inf:
        text.insert(0, "No equal-budget claim is measured yet: `make units` trains the long profiles' units "
                       "([Results](#results)).")
    else:
        text.append("Every verdict: [Results](#results).")
    return textwrap.fill(" ".join(text), width=100, break_on_hyphens=False, break_long_words=False)


def units_section(runs: dict[str, Path]) -> str:
    """The long runs made of units (``results/<profile>/units/``, the stages of ``pipelines/<profile>/``), both
    corpora side by side: how many of each plan's units are done (and where the plan waits for a
    longer budget, :func:`flexatt.products.budget_waits`; a budget kept although its check failed is
    said in the claims' budget row) and the earlier budgets' failed checks; each model
    over the seeds done (a flexible model also at its dev-selected τ): test BLEU, window and AER as mean ± sd
    (:func:`flexatt.unit_claims.model_table`), the diagonal's AER once per corpus; the minutes a
    unit took; the Greek probes' outcome once one aligns (:func:`probes_block`); then the claims
    of each run's current report (:func:`units_claims`). Only finished units count; nothing is
    promised for the rest (``pipelines/<profile>/units.yaml``: pending)."""
    from flexatt.unit_claims import Units, model_table
    from flexatt.products import budget_waits, plan, read_plan

    found, waiting = {}, set()
    for profile, run in runs.items():
        spec = read_plan(ROOT / "conf" / "units" / f"{profile}.yaml")
        units = Units(run / "units", spec)
        names = [u.name for u in plan(spec, units.manifests)]
        found[profile] = (run, units, len(names) + len([n for n in units.manifests if n not in names]))
        if budget_waits(spec, units.manifests):
            waiting.add(profile)
    # a budget kept although its check failed is said in the claims' budget row
    counts = ", ".join(f"{UNITS_CORPUS[p][1]} {len(u.manifests)} of {total}"
                       + (" (its other seeds wait for a longer budget: the budget check failed)" if p in waiting else "")
                       for p, (run, u, total) in found.items())
    lead = (f"**Equal-budget models** ([long runs](#configuration)), units done so far: {counts}; a unit is one model "
            f"trained for its profile's budget and decoded." + "".join(f" {s}" for s in superseded_budgets(runs)))
    done = {p: v for p, v in found.items() if v[1].manifests}
    if not done:
        return textwrap.fill(lead, width=100, break_on_hyphens=False)
    ms = lambda st, d=2: "–" if st is None else (  # noqa: E731
        f"{st['mean']:.{d}f}" + ("" if st["sd"] is None else f" ± {st['sd']:.{d}f}"))
    # a window every seed shares (at τ = ∞: every source position) is shown once, without a ± of 0
    same_once = lambda st: st if st is None or st["sd"] != 0 else {**st, "sd": None}  # noqa: E731
    tables = {p: {(r["model"], r["at"]): r for r in model_table(u)} for p, (_, u, _) in done.items()}
    rows = list(dict.fromkeys(key for t in tables.values() for key in t))
    rows.sort(key=lambda k: (k[0] != "global", k[0], k[1] != "τ=∞"))
    head = " | ".join(f"{UNITS_CORPUS[p][0]}: seeds | test BLEU | window | AER" for p in done)
    lines = [f"| model | at | {head} |", "|---|---|" + "---|---|---|---|" * len(done)]
    for key in rows:
        cells = []
        for p in done:
            r = tables[p].get(key)
            cells += (["", "", "", ""] if r is None else
                      [str(len(r["seeds"])), ms(r["bleu"]), ms(same_once(r["window"])), ms(r["aer"], 3)])
        lines.append(f"| {key[0]} | {key[1]} | {' | '.join(cells)} |")
    diagonal = ", ".join(f"{t[rows[0]]['diagonal']['mean']:.3f} {UNITS_CORPUS[p][0]}" for p, t in tables.items()
                            if t.get(rows[0], {}).get("diagonal"))

    def span(minutes: list[float]) -> str:
        return (f"{min(minutes):.0f}" if round(min(minutes)) == round(max(minutes))
                else f"{min(minutes):.0f}–{max(minutes):.0f}") + " min"

    took = []
    for p, (_, u, _) in done.items():
        # a unit resumed at its training's end (an earlier budget's check trained it) only decoded
        decoded = [m["minutes"]["total"] for m in u.manifests.values() if resumed_at_end(m)]
        trained = [m["minutes"]["total"] for m in u.manifests.values() if not resumed_at_end(m)]
        parts = ([span(trained)] if trained else []) + (
            [f"{len(decoded)} only decoded, {span(decoded)}: an earlier check trained it"] if decoded else [])
        took.append(f"{UNITS_CORPUS[p][0]} {parts[0]}" + (f" ({parts[1]})" if len(parts) > 1 else ""))
    machines = sorted({m["machine"]["cpu"] for _, u, _ in done.values() for m in u.manifests.values()})
    beam = next(iter(next(iter(done.values()))[1].manifests.values()))["decode"]["beam_size"]
    probes = probes_block(runs["grc"]) if "grc" in runs else ""
    aligned = " ".join(probes.split()) + " " if probes and "| probe" not in probes else ""  # else: the grc block
    note = (f"Mean ± sd over seeds; sacrebleu, beam {beam}; window: positions scored per step; test AER (a "
            f"length-proportional diagonal that reads no words: {diagonal}); a window without ± is the same "
            f"for every seed. {aligned}A unit took: "
            f"{'; '.join(took)} on {', '.join(machines)}.")
    text, table = units_claims({p: run for p, (run, _, _) in done.items()})
    return "\n".join([textwrap.fill(lead, width=100, break_on_hyphens=False), "", *lines, "",
                      textwrap.fill(f"{note} {text}", width=100, break_on_hyphens=False, break_long_words=False),
                      *([""] + table if table else [])])


def transformer_section(runs: dict[str, Path]) -> str:
    """The README's lines on the Transformer profiles: units done of each plan, the claims their
    reports decide (per corpus, those of one verdict and seed count together) and a link to
    ``docs/transformer.md``
    (:func:`transformer_units`). Empty before the first unit."""
    from flexatt.products import done_units, plan, read_plan
    from flexatt.unit_claims import Units

    done = {p: run for p, run in runs.items() if done_units(run / "units")}
    if not done:
        return ""
    counts, claims = [], []
    for profile, run in done.items():
        spec = read_plan(ROOT / "conf" / "units" / f"{profile}.yaml")
        units = Units(run / "units", spec)
        corpus = UNITS_CORPUS[TRANSFORMER_PROFILES[profile]][0]
        counts.append(f"{corpus} {len(units.manifests)} of "
                      f"{len({u.name for u in plan(spec, units.manifests)} | set(units.manifests))}")
        report = current_report(run)
        verdicts: dict[tuple[str, str], list[str]] = {}  # (verdict, seed count) -> the claims that have it
        for c in (report or {}).get("claims", []):
            if c.get("verdict", NOT_MEASURED) != NOT_MEASURED and "seeds" in c:
                verdicts.setdefault((c["verdict"], _count(c["seeds"])), []).append(c["id"])
        claims += [f"{corpus} {', '.join(ids)} **{verdict}** ({count})" for (verdict, count), ids in verdicts.items()]
    text = (f"**Transformer** (flexible cross-attention in every decoder layer; `make grc_tf`, `make bible_tf`): "
            f"units done {', '.join(counts)}; claims: {', '.join(claims) or 'none measured yet'}; its models "
            f"against the RNN's, also at equal training minutes: [Transformer results](docs/transformer.md).")
    return textwrap.fill(text, width=100, break_on_hyphens=False, break_long_words=False)


def transformer_units(runs: dict[str, Path]) -> str:
    """``docs/transformer.md``'s figures: the Transformer profiles' units as the RNN's in the README
    (:func:`units_section`: models over seeds, the claims their reports decide), then per corpus
    and per model and seed the two architectures from the report's comparison
    (``architectures``, :mod:`flexatt.architectures`): test BLEU at each one's budget and greedy
    dev BLEU after the same training minutes; where both centres of flexible cross-attention have
    finished at a seed, the two side by side (:func:`flexatt.architectures.render_centres`). Says
    so before the first unit."""
    from flexatt.products import done_units

    done = {p: run for p, run in runs.items() if done_units(run / "units")}
    if not done:
        return "No Transformer unit has finished yet."
    lines = ["| corpus | model | seed | epochs (Transformer / RNN) | training minutes | test BLEU τ = ∞ | equal "
             "minutes | greedy dev BLEU at them |", "|---|---|---|---|---|---|---|---|"]
    for profile, run in done.items():
        corpus = UNITS_CORPUS[TRANSFORMER_PROFILES[profile]][0]
        for r in ((current_report(run) or {}).get("architectures") or {}).get("rows", []):
            if r["equal_minutes"] is None:  # trained on two kinds of machine: minutes do not compare
                equal = f"– | – (trained on {r['machines'][0]} / {r['machines'][1]})"
            else:
                equal = (f"{r['equal_minutes']:.0f} | {r['dev_bleu_at_equal'][0]:.2f} / "
                         f"{r['dev_bleu_at_equal'][1]:.2f}")
            lines.append(f"| {corpus} | {r['model']} | {r['seed']} | {r['epochs'][0]} / {r['epochs'][1]} | "
                         f"{r['minutes'][0]:.0f} / {r['minutes'][1]:.0f} | {r['test_bleu'][0]:.2f} / "
                         f"{r['test_bleu'][1]:.2f} | {equal} |")
    against = ("\n\n**Transformer against RNN** (the same model and training seed; each trained for its own "
               "profile's budget; the minutes are those of training, not of the dev decoding after each epoch, "
               "and compare only between units trained on one kind of machine):\n\n"
               + "\n".join(lines)) if len(lines) > 2 else ""
    centres = ""
    for profile, run in done.items():
        rows = ((current_report(run) or {}).get("centres") or {}).get("rows", [])
        if rows:
            from flexatt.architectures import render_centres

            corpus = UNITS_CORPUS[TRANSFORMER_PROFILES[profile]][0]
            centres += (f"\n\n**The window's centre on the {corpus}** (flexible with the query's centre and with "
                        f"the layer below's, per training seed; dev chooses):\n\n" + render_centres(rows).rstrip())
    # the README's links, from docs/
    section = units_section(done).replace("](#configuration)", "](../README.md#configuration)").replace("](docs/", "](")
    return section + against + centres


def resumed_at_end(manifest: dict) -> bool:
    """Whether a unit's training was resumed after its last epoch from a run that is not one of
    its own attempts (it only decoded: that run, an earlier budget's check, trained it; a unit's
    own earlier attempts count in its minutes)."""
    training = manifest.get("training", {})
    return (training.get("resumed_from_epoch") is not None and training["resumed_from_epoch"] == training.get("epochs")
            and manifest.get("minutes", {}).get("attempts", 1) == 1)


def earlier_checks(run: Path) -> list[dict]:
    """The budget checks of a long run's earlier budgets (``<run>/budget-<epochs>/``: their units,
    moved there when the profile's budget rose), by epochs: ``{"variant", "epochs": [budget,
    longer], "dev_gain", "enough", "folder"}``. From the folder's ``report.json`` where it has the
    check; else from its units: the check's longer model against the same model trained for the
    budget, found in any of the run's budget folders by variant, seed and schedule (an earlier
    check's longer model is trained exactly as the next budget's: the same epochs and halvings)."""
    from flexatt.unit_claims import BUDGET_GAIN
    from flexatt.products import dev_gain, done_units

    def schedule(m: dict) -> tuple:
        return m["variant"], m["seed"], m["training"]["epochs"], m["training"].get("lr_halve_from_epoch")

    folders = sorted(run.glob("budget-*/"), key=lambda f: int(f.name.split("-")[1]))
    units = {f: done_units(f / "units") for f in folders}
    trained = {schedule(m): m for found in units.values() for m in found.values() if m.get("kind", "train") == "train"}
    out = []
    for folder in folders:
        check = _json(folder / "report.json").get("budget_check") if (folder / "report.json").is_file() else None
        if check:
            out.append({**{k: check[k] for k in ("variant", "epochs", "dev_gain", "enough")}, "folder": folder})
            continue
        epochs = int(folder.name.split("-")[1])
        for m in units[folder].values():
            if m.get("kind", "train") != "train" or m.get("budget", 1.0) == 1.0:
                continue
            longer = m["training"]
            halved = longer["epochs"] - longer["lr_halve_from_epoch"]
            base = trained.get((m["variant"], m["seed"], epochs, epochs - halved))
            if base is not None:
                gain = dev_gain(base, m)
                out.append({"variant": m["variant"], "epochs": [epochs, longer["epochs"]], "dev_gain": gain,
                            "enough": gain < BUDGET_GAIN, "folder": folder})
    return out


def superseded_budgets(runs: dict[str, Path]) -> list[str]:
    """One sentence on the earlier budgets of the long runs whose budget checks failed
    (:func:`earlier_checks`): what training longer gained there, per corpus, and where their
    units are (one folder, or ``budget-*`` for several)."""
    failed = {p: [c for c in earlier_checks(run) if not c["enough"]] for p, run in runs.items()}
    failed = {p: checks for p, checks in failed.items() if checks}
    if not failed:
        return []
    variants = {c["variant"] for checks in failed.values() for c in checks}
    parts = []
    for profile, checks in failed.items():
        folder = (f"{_shown(checks[0]['folder'])}/" if len(checks) == 1 else f"{_shown(runs[profile])}/budget-*/")
        gains = ", ".join(f"{c['epochs'][0]} → {c['epochs'][1]} epochs {_signed(c['dev_gain'])}" for c in checks)
        who = "" if len(variants) == 1 else f" ({checks[0]['variant']})"
        parts.append(f"{UNITS_CORPUS[profile][0]}{who} {gains} (`{folder}`)")
    whose = f"{next(iter(variants))}'s " if len(variants) == 1 else ""
    return [f"Earlier budgets failed their checks ({whose}dev BLEU gain from training longer: {'; '.join(parts)})."]


def units_claims(runs: dict[str, Path]) -> tuple[str, list[str]]:
    """The claims the long runs' units decide, as a sentence and the lines of a table with one
    column per corpus, from each run's ``report.json`` (:mod:`flexatt.unit_claims`) while it
    covers exactly the units done. Per measured claim: its verdict with its seed count (parents
    for c), the Δ BLEU over seeds (mean and 95% t-interval, or the one seed's; each seed's Δ
    where there are several) and the two-level bootstrap interval; b's share of positions cut,
    c's window change and τ = ∞ Δ; e2 (the paper's +2 BLEU) in e's cell; f once per fixed
    window; the budget check once both of its units are done, and claims a and b at its budget.
    The p-values are in the reports. Without a measured claim the table is empty and the
    sentence says why. (One long function: its small formatters are the cells of this one table.)"""
    from flexatt.unit_claims import BUDGET_GAIN, MIN_SEEDS

    def delta(e: dict) -> str:
        over, boot = e["over_seeds"], e["bootstrap"]
        seeds = (f"{_signed(over['mean'])} [{_signed(over['ci'][0])}, {_signed(over['ci'][1])}]" if over["ci"]
                 else _signed(over["mean"]))
        each = e.get("per_seed") or []
        if len(each) > 1:  # the values the interval is over: seeds (parents for c), in seed order
            seeds += f" ({', '.join(_signed(x) for x in each)})"
        return f"{seeds}; bootstrap [{_signed(boot['ci'][0])}, {_signed(boot['ci'][1])}]"

    def share(stat: dict, sign: str = "") -> str:
        fmt = lambda x: f"{100 * x:{sign}.0f}%".replace("-", "−")  # noqa: E731
        return fmt(stat["mean"]) + (f" [{fmt(stat['ci'][0])}, {fmt(stat['ci'][1])}]" if stat["ci"] else "")

    def verdict(e: dict) -> str:
        of = "parent" if "window_change" in e else "seed"  # c: over fine-tuning parents
        n = e["seeds"]
        return f"**{e['verdict']}** ({n} {of}{'s' * (n != 1)})"

    def cell(c: dict, effect: dict | None = None) -> str:
        if c["verdict"] == NOT_MEASURED:
            return ""
        if "pairs" in c:
            return f"**{c['verdict']}**"
        extra = (f"; cut {share(c['cut'])}" if "cut" in c else
                 f"; window {share(c['window_change'], '+')} at β = {c['beta']:g}, Δ at τ = ∞ "
                 f"{_signed(c['inf']['over_seeds']['mean'])}" if "window_change" in c else "")
        e2 = f", by +2 (e2): **{effect['verdict']}**" if effect else ""
        return f"{verdict(c)}{e2}: {delta(c)}{extra}"

    reports, stale = {}, []
    for profile, run in runs.items():
        report = current_report(run)
        if report is not None:
            reports[profile] = report
        else:
            stale.append(f"`dvc repro pipelines/{profile}/dvc.yaml:report`")
    def cells_of(report: dict) -> dict[str, str]:
        """One corpus's column: row label -> cell, in the report's order, the budget check last."""
        claims = {c["id"]: c for c in report["claims"]}
        e2 = claims.get("e2") if claims.get("e2", {}).get("verdict", NOT_MEASURED) != NOT_MEASURED else None
        out = {}
        for c in report["claims"]:
            if c["id"] != "e2":
                label = CLAIM_LABELS.get(c["id"], c["claim"])
                out[f"{c['id']}. {label}"] = cell(c, e2 if c["id"] == "e" else None)
                out.update({f"{c['id']}. vs {e['fixed']}": cell(e) for e in c.get("pairs", [])})
        budget = report.get("budget_check")
        if budget:
            out[f"budget: {budget['variant']} at ×{budget['factor']:g} epochs gains < {BUDGET_GAIN} dev BLEU"] = (
                f"**{'holds' if budget['enough'] else 'fails'}**: {_signed(budget['dev_gain'])} "
                f"({budget['epochs'][0]} → {budget['epochs'][1]} epochs"
                + ("; budget kept)" if budget.get("kept_short") else ")"))
        if rows := report.get("budget_claims"):
            def moved(r: dict) -> str:
                return "" if "moved" not in r else (f", at ×1 {_signed(r['at_budget'])}"
                                                    + (": **moved**" if r["moved"] else ""))
            out[f"budget: a, b at ×{rows[0]['factor']:g} (seed {rows[0]['seed']})"] = "; ".join(
                f"{r['id']} {_signed(r['delta'])} [{_signed(r['ci'][0])}, {_signed(r['ci'][1])}]{moved(r)}" for r in rows)
        return out

    columns = {p: cells_of(r) for p, r in reports.items()}
    order = [*CLAIM_LABELS, "budget:"]  # a corpus's own rows (grc's extra fixed windows) under their claim
    labels = sorted(dict.fromkeys(label for cells in columns.values() for label in cells),
                    key=lambda label: order.index(label.split(".")[0] if "." in label.split(" ")[0] else "budget:"))
    labels = [label for label in labels if any(cells.get(label) for cells in columns.values())]
    text = []
    if stale:
        text.append(f"Claims: {' and '.join(stale)} decides them from the units done.")
    if reports and not labels:
        text.append("Claims (`results/<profile>/report.md`): none has its units yet.")
    if not labels:
        return " ".join(text), []
    lines = [f"| claim | {' | '.join(UNITS_CORPUS[p][0] for p in reports)} |", "|---|" + "---|" * len(reports)]
    lines += [f"| {label} | {' | '.join(columns[p].get(label, '') for p in reports)} |" for label in labels]
    lead = (f"**Claims** (test; a verdict needs {MIN_SEEDS} training seeds, else *not decided*; Δ BLEU "
            f"[95% t-interval] over seeds (each seed's Δ), two-level bootstrap [95%]; p-values: "
            f"`results/<profile>/report.md`, `figures/units.png` beside; [rules](docs/method.md#claims)):")
    return " ".join([*text, lead]), lines


def _cut(reduction: float) -> str:
    """A window reduction (a fraction of Global's window) as a signed percentage."""
    percent = round(100 * reduction)
    return f"−{percent}%" if percent > 0 else f"+{-percent}%" if percent < 0 else "0%"


def _signed(x: float) -> str:
    return f"{x:+.2f}".replace("-", "−")


def _tau(tau: float | None) -> str:
    """A τ of the results JSON (``null``: τ = ∞) as the README writes it."""
    return "∞" if tau is None else f"{tau:g}"


#: how far below the length-proportional diagonal's test AER a Greek Global's has to be, chosen on
#: dev, before the Greek units run: attention that aligns, so that its windows mean something
ALIGNMENT_MARGIN = 0.1


def probes_block(run: Path) -> str:
    """The alignment probes of a long profile (``<run>/probes/<name>/units/global-s1``: Global
    trained under other settings, ``python -m flexatt.units run global-s1 KEY=VALUE ...``), each
    with its settings (the overrides its unit records, or the commit whose profile it ran), dev
    and test AER beside the diagonal's and its minutes; and whether the one best on dev reaches
    the diagonal's test AER less :data:`ALIGNMENT_MARGIN`. Empty without probes."""
    from flexatt.products import done_units

    probes = {folder.parent.name: m for folder in sorted((run / "probes").glob("*/units"))
              for m in done_units(folder).values() if m["summary"]["test"].get("aer")}
    if not probes:
        return ""
    lines = ["| probe | settings | dev AER (diagonal) | test AER (diagonal) | test BLEU | min |",
             "|---|---|---|---|---|---|"]
    for name, m in sorted(probes.items(), key=lambda item: -item[1]["summary"]["dev"]["aer"]["inf"]):
        dev, test = m["summary"]["dev"], m["summary"]["test"]
        settings = (" ".join(f"`{o}`" for o in m["source"].get("overrides") or [])
                    or f"the profile as of {str(m['source'].get('commit'))[:7]}")
        lines.append(f"| {name} | {settings} | {dev['aer']['inf']:.3f} ({dev['aer_diagonal']:.3f}) | "
                     f"{test['aer']['inf']:.3f} ({test['aer_diagonal']:.3f}) | {test['inf']['bleu']:.2f} | "
                     f"{m['minutes']['total']:.0f} |")
    best_name, best = min(probes.items(), key=lambda item: item[1]["summary"]["dev"]["aer"]["inf"])
    target = best["summary"]["test"]["aer_diagonal"] - ALIGNMENT_MARGIN
    # AERs are kept to 4 decimals: the difference is rounded before the comparison
    if round(best["summary"]["test"]["aer_diagonal"] - best["summary"]["test"]["aer"]["inf"], 6) >= ALIGNMENT_MARGIN:
        text = (f"Greek settings: of {len(probes)} probes (`{_shown(run)}/probes/`), the best by dev AER, "
                f"{best_name}, where Global's test AER {best['summary']['test']['aer']['inf']:.3f} is at least "
                f"{ALIGNMENT_MARGIN:g} below the diagonal's {best['summary']['test']['aer_diagonal']:.3f}.")
        return textwrap.fill(text, width=100, break_on_hyphens=False)
    text = (f"Before its units run, Global has to align on this corpus: a test AER at least {ALIGNMENT_MARGIN:g} "
            f"below the diagonal's (≤ {target:.3f}), the setting chosen by dev AER. The probes so far "
            f"(`{_shown(run)}/probes/`, Global, seed 1, ordered by dev AER): the best on dev, {best_name}, has "
            f"test AER {best['summary']['test']['aer']['inf']:.3f}, not yet enough.")
    return "\n".join([textwrap.fill(text, width=100, break_on_hyphens=False), "", *lines])


#: the README's short name of each claim of the long profiles (:mod:`flexatt.unit_claims`; its own
#: text otherwise), in the claims table's order; e2 is said in e's row
CLAIM_LABELS = {"a": "Flexible τ=∞ ≥ Global", "b": "the selected τ cuts ≥ 50% of positions at ≤ 0.5 BLEU",
                "c": "fine-tuning narrows the window (vs a control)", "d": "Local-p > Global",
                "e": "SACT > Global", "f": "Flexible > a fixed window of equal size"}


#: how the reordering line names each real corpus of ``make reordering`` (its data folder's name)
CORPUS_LABELS = {"bible": "Bible", "nt_grc_en": "Greek NT"}


def reordering_block(path: Path) -> str:
    """What ``make reordering`` found (``results/reordering/summary.json``): per level of the
    synthetic task and per real corpus, the crossing-link share, flexible attention's window at
    its selected τ (and its share of Global's) and test BLEU against Global's, local-m's too."""
    if not path.is_file():
        return ""
    points = _json(path)["points"]
    synthetic = sorted((p for p in points if p["source"] == "synthetic"), key=lambda p: p["level"])
    if not synthetic:
        return ""

    def delta(p: dict, key: str) -> str:
        return f"{p[key + '_bleu'] - p['global_bleu']:+.1f}".replace("-", "−")

    def share(p: dict) -> str:  # no τ selected: the model decodes at τ = ∞, every position
        return "100" if p["flexible_tau"] is None else f"{100 * p['flexible_window_share']:.0f}"

    def each(values) -> str:
        return " / ".join(values)

    levels = each(f"{100 * p['level']:g}" for p in synthetic)
    crossing = each(f"{100 * p['crossing_link_pairs']:.1f}" for p in synthetic)
    text = (f"**Reordering** (`make reordering`, `results/figures/window_vs_reordering.png`): with {levels}% "
            f"of the synthetic task's chunks reversed ({crossing}% of gold link pairs cross), flexible attention "
            f"at its dev-selected τ scores {each(share(p) for p in synthetic)}% of Global's "
            f"{synthetic[0]['global_window']:.1f} positions, at BLEU {each(delta(p, 'flexible') for p in synthetic)} "
            f"vs Global (local-m, D = {synthetic[0]['local_D']}: {each(delta(p, 'local_m') for p in synthetic)}).")
    for p in points:
        if p["source"] != "synthetic":
            corpus = p["source"].split(" ")[0]
            text += (f" {CORPUS_LABELS.get(corpus, corpus)} ({100 * p['crossing_link_pairs']:.1f}% cross): "
                     f"{share(p)}% of {p['global_window']:.1f}, {delta(p, 'flexible')} (local-m, D = {p['local_D']}: "
                     f"{delta(p, 'local_m')}).")
    return textwrap.fill(text, width=100, break_on_hyphens=False, break_long_words=False)


def _machine(pipe: dict) -> str:
    m = pipe.get("machine")
    if not m:
        return "the machine is not recorded"
    bf16 = {True: "native bf16", False: "no native bf16", None: "bf16 support unknown"}[m.get("native_bf16")]
    return f"{m.get('cpu') or 'CPU'}, {m['logical_cores']} logical cores, {m['simd']}, {bf16}, torch {m['torch']}"


def pipeline_table(pipe: dict) -> str:
    stages = pipe["stages"]
    train = [s for s in stages if s.startswith("train@")]
    ft = [s for s in stages if s.startswith("finetune@")]

    def names(group: list[str]) -> str:
        return " / ".join(s.split("@", 1)[1] for s in group)

    def mins(group: list[str]) -> str:
        return " / ".join(f"{stages[s]:.2f}" for s in group)

    rows = [("filter + tokenize", f"{stages.get('filter', 0) + stages.get('tokenize', 0):.2f}")]
    if train:
        rows.append((f"train@{names(train)}", mins(train)))
    if ft:
        rows.append((f"finetune@{names(ft)}", mins(ft)))
    rows += [(s, f"{stages[s]:.2f}") for s in stages if s not in ("filter", "tokenize") and s not in train + ft]
    rows.append(("**`make repro` from scratch**" if pipe.get("from_scratch") else "**`make repro`**",
                 f"**{pipe['total_minutes']:.1f}**"))
    if "noop_seconds_median" in pipe:
        rows.append(("no-op `make repro`", f"{pipe['noop_seconds_median']:.2f} s (median of {len(pipe['noop_seconds'])})"))
    return "\n".join([f"Stage times from `benchmarks/results/pipeline.json` (minutes; {_machine(pipe)}; "
                      "independent stages ran side by side, so the stages' minutes add up to more than the total):", "",
                      "| stage | minutes |", "|---|---|", *(f"| {a} | {b} |" for a, b in rows)])


def pipeline_summary(pipe: dict) -> str:
    """The README's line on the pipeline's wall time (the table per stage is in the benchmarks' README)."""
    stages = pipe["stages"]
    train = sum(m for s, m in stages.items() if s.startswith(("train@", "finetune@", "control@")))
    kind = "`make repro` from scratch" if pipe.get("from_scratch") else "`make repro`"
    text = (f"{kind}: **{pipe['total_minutes']:.1f} min** on {_machine(pipe)}; its trainings and "
            f"fine-tunings took {train:.1f} min of stage time, two at a time (per stage: "
            f"`benchmarks/results/pipeline.json`, [benchmarks](benchmarks/README.md))")
    if "noop_seconds_median" in pipe:
        text += f"; a no-op `make repro` {pipe['noop_seconds_median']:.2f} s"
    return textwrap.fill(text + ".", width=100, break_on_hyphens=False)


def blocks_of(path: Path, runs: dict[str, Path] | None = None) -> dict[str, str]:
    """The generated blocks of ``path`` (the README, ``docs/default-profile.md`` or
    ``benchmarks/README.md``); ``runs``: the long runs made of units by profile (default
    ``results/bible`` and ``results/grc``), those with a ``units/`` folder (or the units of an
    earlier budget) shown side by side in the bible block and summed up in the headline."""
    pipe = _json(ROOT / "benchmarks" / "results" / "pipeline.json")
    if path == BENCH_README:
        return {"pipeline": pipeline_table(pipe)}
    if path == DEFAULT_DOC:
        metrics = _json(ROOT / "results" / "metrics.json")
        filt = _json(ROOT / "results" / "filter.json")
        beta = ROOT / "results" / "sweep_beta.json"
        return {
            "results": results_block((ROOT / "results" / "table1.md").read_text(encoding="utf-8"), filt, metrics),
            "finetuning": finetuning_block(metrics, _json(beta) if beta.is_file() else None),
            "char": char_block(ROOT / "results" / "char"),
            "reordering": reordering_block(ROOT / "results" / "reordering" / "summary.json"),
        }
    runs = runs or {p: ROOT / "results" / p for p in UNITS_CORPUS}
    if path == TRANSFORMER_DOC:
        return {"transformer_units": transformer_units({p: run for p, run in runs.items() if p in TRANSFORMER_PROFILES})}
    long = {p: run for p, run in runs.items() if ((run / "units").is_dir() or any(run.glob("budget-*/units")))
            and p not in TRANSFORMER_PROFILES}
    grc_probes = probes_block(runs["grc"]) if "grc" in runs else ""
    return {
        "headline": headline(long),
        "bible": units_section(long) if long else "",
        "grc": grc_probes if "| probe" in grc_probes else "",  # an aligned probe is a sentence of the bible block
        "transformer": transformer_section({p: run for p, run in runs.items() if p in TRANSFORMER_PROFILES}),
        "pipeline": pipeline_summary(pipe),
    }


def fill(text: str, blocks: dict[str, str], path: Path) -> str:
    for name, body in blocks.items():
        pattern = re.compile(rf"(<!-- {name}:begin -->\n)(.*?)(<!-- {name}:end -->)", re.S)
        if not pattern.search(text):
            sys.exit(f"error: {path}: no <!-- {name}:begin --> ... <!-- {name}:end --> block")
        text = pattern.sub(lambda m: m.group(1) + (body + "\n" if body else "") + m.group(3), text, count=1)
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a block is stale")
    args = parser.parse_args()
    stale = []
    for path in (README, DEFAULT_DOC, TRANSFORMER_DOC, BENCH_README):
        text = path.read_text(encoding="utf-8")
        blocks = blocks_of(path)
        new = fill(text, blocks, path)
        if new != text:
            if args.check:
                stale += [f"{path.relative_to(ROOT)}: {name}" for name in blocks
                          if fill(text, {name: blocks[name]}, path) != text]
            else:
                path.write_text(new, encoding="utf-8")
                print(f"wrote {path.relative_to(ROOT)}")
    if stale:
        sys.exit("stale README figures (run python scripts/readme_figures.py): " + ", ".join(stale))


if __name__ == "__main__":
    main()

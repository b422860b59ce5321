"""The README's figures are those of the committed results, it stays short enough to read, and
the project cites only documents it ships."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_readme_figures_are_the_committed_results():
    result = subprocess.run([sys.executable, "scripts/readme_figures.py", "--check"], cwd=ROOT,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_the_readme_is_at_most_150_lines():
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 150


def test_the_project_cites_its_own_method_document_not_an_internal_one():
    """docs/method.md is the project's account of its method; no file cites a document that
    does not ship with it (the word is built here, so this file does not match itself)."""
    import re

    word = re.compile(r"\b" + "SP" + r"EC\b")
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    hits = [name for name in tracked.split()
            if name.endswith((".py", ".md", ".yaml", ".yml", ".txt", ".json", ".cpp", ".toml", ".csv"))
            and (ROOT / name).is_file() and word.search((ROOT / name).read_text(encoding="utf-8", errors="replace"))]
    assert not hits, hits


def _selected_beta() -> float:
    """The β the committed β sweep selected: the β a converged run made of its files fine-tuned with."""
    import json

    return json.loads((ROOT / "results/sweep_beta.json").read_text())["selected_beta"]


def test_a_run_whose_sweep_selected_no_tau_says_so(tmp_path):
    """Where sweep_tau kept no τ within the tolerance, the fine-tuned model and its control decode
    every position: the default profile's fine-tuning paragraph says that no τ was selected (not
    that fine-tuning fails to narrow a window nobody narrowed)."""
    from conftest import load_script

    figures = load_script("readme_figures")
    metrics = json.loads((ROOT / "results/metrics.json").read_text())
    for name in ("flexible_ft_tau", "flexible_ctl_tau"):
        metrics["models"][name] = {**metrics["models"][name.replace("_tau", "")], "tau": None, "reduction": 0.0}
    del metrics["finetuning_effect"]["flexible_ft_tau"]  # the evaluate stage compares them at τ = ∞ only
    lock = tmp_path / "dvc.lock"
    lock.write_text(json.dumps({"stages": {"finetune@flexible": {"params": {"params.yaml": {
        "finetune.beta": _selected_beta()}}}}}))  # the β the run fine-tuned with, as its lock records it
    finetuning = " ".join(figures.finetuning_block(
        metrics, json.loads((ROOT / "results/sweep_beta.json").read_text()), lock).split())
    assert (f"`sweep_tau` selected no τ for the model fine-tuned at β = {_selected_beta():g} nor for its control, so both "
            "decode every position (τ = ∞;" in finetuning)
    assert "whether fine-tuning narrows the window is not measured on this run" in finetuning
    assert "does not narrow the window" not in finetuning


def test_a_window_cut_is_a_signed_percentage():
    from conftest import load_script

    figures = load_script("readme_figures")
    assert [figures._cut(x) for x in (0.7014, 0.004, 0.0, -0.003, -0.12)] == ["−70%", "0%", "0%", "0%", "+12%"]


def test_without_units_the_long_runs_block_is_empty_and_the_headline_says_so(tmp_path):
    """Without a long run's units the README has no figures to head it with, and says so; the default
    profile's figures are those of its own page, as a demonstration."""
    from conftest import load_script

    figures = load_script("readme_figures")
    blocks = figures.blocks_of(figures.README, runs={p: tmp_path / p for p in ("bible", "grc", "bible_tf", "grc_tf")})
    assert blocks["bible"] == "" == blocks["grc"] == blocks["transformer"]
    assert " ".join(blocks["headline"].split()) == (
        "No equal-budget claim is measured yet: `make units` trains the long profiles' units ([Results](#results)).")
    assert set(blocks) == {"headline", "bible", "grc", "transformer", "pipeline"}
    demo = figures.blocks_of(figures.DEFAULT_DOC)
    assert set(demo) == {"results", "finetuning", "char", "reordering"}
    assert demo["results"].startswith("What `make repro` shows (the default profile")


def _claim(cid: str, seeds: int, mean: float, ci: list[float] | None, verdict: str, **extra) -> dict:
    return {"id": cid, "claim": cid, "verdict": verdict, "seeds": seeds,
            "over_seeds": {"n": seeds, "mean": mean, "sd": None if ci is None else 0.1, "ci": ci},
            "bootstrap": {"delta": mean, "ci": [mean - 0.3, mean + 0.3]}, "p": None, **extra}


def test_the_headline_gives_flexible_attention_over_seeds_per_corpus_and_what_lacks_seeds(tmp_path):
    """The headline reads each long run's current report: at the dev-selected τ the share of
    Global's positions scored (1 − claim b's cut, its interval turned round) and b's Δ BLEU against
    τ = ∞, then a's Δ against Global, each with its seed count; the claims measured on fewer than
    3 seeds (parents for c; f per fixed window; e2 not apart from e) are named as not decided; a
    report of other units than those done is not read, and the headline names the report to rebuild."""
    from conftest import load_script

    figures = load_script("readme_figures")
    runs = {}
    for profile, names in (("bible", ["flexible-s1", "flexible-s2", "flexible-s3", "global-s1"]),
                           ("grc", ["flexible-s1", "global-s1"])):
        run = runs[profile] = tmp_path / profile
        for name in names:
            unit = _unit(name, name.split("-")[0], int(name[-1]), 30.0, 25.3)
            (run / "units" / name).mkdir(parents=True)
            (run / "units" / name / "unit.json").write_text(json.dumps(unit))
    cut = {"n": 3, "mean": 0.7339, "sd": 0.01, "ci": [0.7068, 0.7609]}
    bible = [_claim("a", 3, 0.5133, [0.3252, 0.7014], "holds"),
             _claim("b", 3, -0.2833, [-0.6141, 0.0475], "inconclusive", cut=cut),
             _claim("c", 1, -0.49, None, "not decided", beta=100.0,
                    window_change={"n": 1, "mean": -0.18, "sd": None, "ci": None},
                    inf={"over_seeds": {"n": 1, "mean": -0.72, "sd": None, "ci": None}}),
             _claim("d", 1, -0.77, None, "not decided"), _claim("e", 1, -0.37, None, "not decided"),
             _claim("e2", 1, -0.37, None, "not decided"),
             {"id": "f", "claim": "f", "verdict": "not decided",
              "pairs": [{"fixed": "local_m_d5", **_claim("f", 3, 1.35, [0.59, 2.12], "holds")},
                        {"fixed": "local_m", **_claim("f", 1, -0.28, None, "not decided")},
                        {"fixed": "local_p", **_claim("f", 2, 1.26, [-5.0, 7.5], "not decided")},
                        {"fixed": "local_mr", "verdict": "not measured"}]}]
    (runs["bible"] / "report.json").write_text(_report(
        ["flexible-s1", "flexible-s2", "flexible-s3", "global-s1"], bible))
    grc = [_claim("a", 1, -0.1, None, "not decided"),
           _claim("b", 1, -0.48, None, "not decided", cut={"n": 1, "mean": 0.5477, "sd": None, "ci": None})]
    (runs["grc"] / "report.json").write_text(_report(["flexible-s1", "global-s1"], grc))
    text = " ".join(figures.headline(runs).split())
    assert text == (
        "**At equal training budgets** (test set; mean [95% t-interval] over training seeds), flexible attention "
        "at its dev-selected τ scores **27% [24%, 29%] of Global's positions per step at −0.28 [−0.61, +0.05] BLEU "
        "against τ = ∞** on the Bible (Spanish → English, 3 seeds) and **45% at −0.48** on the Greek NT (Koine "
        "Greek → English, 1 seed). At τ = ∞ it differs from Global by +0.51 [+0.33, +0.70] BLEU on the Bible "
        "(3 seeds) and −0.10 BLEU on the Greek NT (1 seed). A verdict needs 3 training seeds; measured on fewer "
        "so far, these claims are *not decided*: Bible: c (1 parent), d, e, f vs local_m (1 seed), f vs local_p "
        "(2 seeds); Greek NT: a, b (1 seed). Every verdict: [Results](#results).")
    # the README's headline is that of the committed reports
    assert figures.blocks_of(figures.README)["headline"] == figures.headline(
        {p: ROOT / "results" / p for p in ("bible", "grc")})
    # a report of other units than those done: not read; its rebuild named
    (runs["grc"] / "units" / "global-s2").mkdir()
    (runs["grc"] / "units" / "global-s2" / "unit.json").write_text(json.dumps(_unit("global-s2", "global", 2, 30.0, 25.3)))
    text = " ".join(figures.headline(runs).split())
    assert "Greek NT" not in text
    assert text.endswith("Bible: c (1 parent), d, e, f vs local_m (1 seed), f vs local_p (2 seeds). "
                         "`dvc repro pipelines/grc/dvc.yaml:report` brings the figures up to date with the units "
                         "done. Every verdict: [Results](#results).")
    (runs["bible"] / "report.json").unlink()
    assert " ".join(figures.headline({"bible": runs["bible"]}).split()) == (
        "No equal-budget claim is measured yet: `make units` trains the long profiles' units ([Results](#results)). "
        "`dvc repro pipelines/bible/dvc.yaml:report` brings the figures up to date with the units done.")


def test_the_alignment_probes_are_listed_and_the_best_on_dev_is_held_to_the_margin(tmp_path):
    """The grc block's probes: every probe unit with its settings, ordered by dev AER; the one
    best on dev (not on test) is held to the diagonal's test AER less the margin."""
    from conftest import load_script

    figures = load_script("readme_figures")
    run = tmp_path / "grc"
    assert figures.probes_block(run) == ""

    def probe(name: str, overrides: list[str], dev: float, test: float) -> None:
        folder = run / "probes" / name / "units" / "global-s1"
        folder.mkdir(parents=True)
        (folder / "unit.json").write_text(json.dumps({
            "source": {"commit": "0123456789", "overrides": overrides}, "minutes": {"total": 30.4},
            "summary": {"dev": {"aer": {"inf": dev}, "aer_diagonal": 0.726},
                        "test": {"aer": {"inf": test}, "aer_diagonal": 0.729, "inf": {"bleu": 11.3}}}}))

    probe("base", [], 0.720, 0.711)
    probe("wide", ["model.hidden_size=256"], 0.640, 0.635)
    probe("lucky", ["model.dropout=0.5"], 0.650, 0.620)  # best on test, not on dev
    block = figures.probes_block(run)
    text = " ".join(block.split("\n\n")[0].split())
    assert "(≤ 0.629)" in text and "the best on dev, wide, has test AER 0.635, not yet enough." in text
    rows = [line for line in block.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert [r.split(" | ")[0] for r in rows] == ["| base", "| lucky", "| wide"]
    assert rows[0].split(" | ")[1] == "the profile as of 0123456" and "`model.hidden_size=256`" in rows[2]
    probe("deep", ["model.layers=2"], 0.630, 0.629)  # aligned: one sentence, the table stays in the files
    assert figures.probes_block(run) == figures.textwrap.fill(
        "Greek settings: of 4 probes (`" + str(figures._shown(run)) + "/probes/`), the best by dev AER, deep, where "
        "Global's test AER 0.629 is at least 0.1 below the diagonal's 0.729.", width=100, break_on_hyphens=False)


def _unit(name: str, variant: str, seed: int, test: float, window: float, selected: dict | None = None) -> dict:
    summary = {"dev": {"inf": {"tau": None, "window": 24.1, "bleu": test + 1}},
               "test": {"inf": {"tau": None, "window": window, "bleu": test}, "aer": {"inf": 0.48},
                        "aer_diagonal": 0.61}}
    if selected:
        summary["dev"].update(selected_tau=selected["tau"], selected={**selected, "bleu": test + 0.6})
        summary["test"]["selected"] = {**selected, "bleu": test - 0.3}
        summary["test"]["aer"][f"{selected['tau']:g}"] = 0.5
    return {"unit": name, "variant": variant, "seed": seed, "kind": "train", "budget": 1.0, "summary": summary,
            "training": {"epochs": 25}, "minutes": {"total": 52.4}, "source": {"commit": "89abcdef0123"},
            "machine": {"cpu": "Some CPU"}, "decode": {"beam_size": 5}}


def test_the_units_section_shows_the_models_over_their_finished_units_and_no_promise(tmp_path):
    """Once a long run's units exist, the units section gives each model over the seeds done (and
    only those), flexible also at its dev-selected τ, one column group per corpus, the diagonal's
    AER once per corpus; the bible block itself is then empty."""
    from conftest import load_script

    figures = load_script("readme_figures")
    run = tmp_path / "bible"
    (run / "units").mkdir(parents=True)
    empty = figures.units_section({"bible": run})
    assert "(Spanish → English Bible) 0 of 24;" in " ".join(empty.split()) and "|" not in empty
    assert figures.blocks_of(figures.README, runs={"bible": run, "grc": ROOT / "results/grc"})["grc"] == ""
    # the probes' outcome is a sentence of the units section
    for unit in (_unit("global-s1", "global", 1, 30.0, 25.3), _unit("global-s2", "global", 2, 31.0, 25.1),
                 _unit("flexible-s1", "flexible", 1, 31.1, 25.3, {"tau": 1.2, "window": 11.87})):
        (run / "units" / unit["unit"]).mkdir()
        (run / "units" / unit["unit"] / "unit.json").write_text(json.dumps(unit))
    block = figures.units_section({"bible": run})
    text = " ".join(block.split())
    assert "(Spanish → English Bible) 3 of 24;" in text and "reads no words: 0.610 Bible);" in text
    assert "Claims: `dvc repro pipelines/bible/dvc.yaml:report` decides them from the units done." in text
    rows = [line for line in block.splitlines() if line.startswith("| global") or line.startswith("| flexible")]
    assert rows == ["| global | τ=∞ | 2 | 30.50 ± 0.71 | 25.20 ± 0.14 | 0.480 ± 0.000 |",
                    "| flexible | τ=∞ | 1 | 31.10 | 25.30 | 0.480 |",
                    "| flexible | selected τ | 1 | 30.80 | 11.87 | 0.500 |"]
    assert "local_m" not in block  # units not done are not shown
    grc = tmp_path / "grc"
    (grc / "units" / "global-s1").mkdir(parents=True)
    (grc / "units" / "global-s1" / "unit.json").write_text(json.dumps(_unit("global-s1", "global", 1, 12.0, 38.0)))
    both = figures.units_section({"bible": run, "grc": grc})
    assert both.splitlines()[[i for i, line in enumerate(both.splitlines()) if line.startswith("| model")][0] + 2] \
        == "| global | τ=∞ | 2 | 30.50 ± 0.71 | 25.20 ± 0.14 | 0.480 ± 0.000 | 1 | 12.00 | 38.00 | 0.480 |"
    assert "| flexible | τ=∞ | 1 | 31.10 | 25.30 | 0.480 |  |  |  |  |" in both
    # a window every seed shares (every source position at τ = ∞) carries no ± of 0
    (grc / "units" / "global-s2").mkdir()
    (grc / "units" / "global-s2" / "unit.json").write_text(json.dumps(_unit("global-s2", "global", 2, 13.0, 38.0)))
    shared = figures.units_section({"grc": grc})
    assert "| global | τ=∞ | 2 | 12.50 ± 0.71 | 38.00 | 0.480 ± 0.000 |" in shared.splitlines()
    assert "a window without ± is the same for every seed" in " ".join(shared.split())


def _report(names: list[str], claims: list[dict], budget: dict | None = None) -> str:
    return json.dumps({"units": sorted(names), "claims": claims, "budget_check": budget})


def test_the_units_section_gives_the_claims_of_a_current_report_only(tmp_path):
    """The claims come from a run's report.json only while that report covers exactly the units
    done: per measured claim its verdict with its seed count (parents for c), the Δ over seeds
    (each seed's Δ where there are several) and the two-level bootstrap; f per fixed window; the budget check; the claims not measured on any
    corpus are left out."""
    from conftest import load_script

    figures = load_script("readme_figures")
    run = tmp_path / "bible"
    for unit in (_unit("global-s1", "global", 1, 30.0, 25.3),
                 _unit("flexible-s1", "flexible", 1, 31.1, 25.3, {"tau": 1.2, "window": 11.87})):
        (run / "units" / unit["unit"]).mkdir(parents=True)
        (run / "units" / unit["unit"] / "unit.json").write_text(json.dumps(unit))
    stats = {"seeds": 1, "over_seeds": {"n": 1, "mean": 1.1, "sd": None, "ci": None},
             "bootstrap": {"delta": 1.08, "ci": [0.61, 1.52]}, "p": None}
    claims = [{"id": "a", "claim": "Flexible τ=∞ ≥ Global", "verdict": "not decided", **stats},
              {"id": "b", "claim": "cut", "verdict": "inconclusive", **stats, "seeds": 3,
               "over_seeds": {"n": 3, "mean": -0.3, "sd": 0.2, "ci": [-0.8, 0.2]}, "per_seed": [-0.1, -0.5, -0.3],
               "cut": {"n": 3, "mean": 0.52, "sd": 0.01, "ci": [0.5, 0.55]}},
              {"id": "c", "claim": "narrows", "verdict": "not decided", **stats, "seeds": 2, "beta": 10.0,
               "over_seeds": {"n": 2, "mean": -0.32, "sd": 0.13, "ci": [-1.52, 0.89]},
               "window_change": {"n": 2, "mean": -0.149, "sd": 0.01, "ci": [-0.251, -0.048]},
               "inf": {"per_seed": [-0.1, -0.3], "over_seeds": {"n": 2, "mean": -0.2, "sd": 0.14, "ci": [-1.5, 1.1]}}},
              {"id": "f", "claim": "fixed", "verdict": "not decided",
               "pairs": [{"fixed": "local_m_d5", "verdict": "not decided", **stats},
                         {"fixed": "local_m", "verdict": "not measured"}]}]
    budget = {"variant": "flexible", "factor": 1.5, "epochs": [25, 38], "dev_gain": 0.61, "enough": False}
    (run / "report.json").write_text(_report(["flexible-s1", "global-s1"], claims, budget))
    lines = figures.units_section({"bible": run}).splitlines()
    rows = lines[[i for i, line in enumerate(lines) if line.startswith("| claim")][0]:]
    assert rows == ["| claim | Bible |", "|---|---|",
                    "| a. Flexible τ=∞ ≥ Global | **not decided** (1 seed): +1.10; bootstrap [+0.61, +1.52] |",
                    "| b. the selected τ cuts ≥ 50% of positions at ≤ 0.5 BLEU | **inconclusive** (3 seeds): −0.30 "
                    "[−0.80, +0.20] (−0.10, −0.50, −0.30); bootstrap [+0.61, +1.52]; cut 52% [50%, 55%] |",
                    "| c. fine-tuning narrows the window (vs a control) | **not decided** (2 parents): −0.32 "
                    "[−1.52, +0.89]; bootstrap [+0.61, +1.52]; window −15% [−25%, −5%] at β = 10, Δ at τ = ∞ −0.20 |",
                    "| f. Flexible > a fixed window of equal size | **not decided** |",
                    "| f. vs local_m_d5 | **not decided** (1 seed): +1.10; bootstrap [+0.61, +1.52] |",
                    "| budget: flexible at ×1.5 epochs gains < 0.5 dev BLEU | **fails**: +0.61 (25 → 38 epochs) |"]
    kept = {**budget, "final": True, "kept_short": True}
    (run / "report.json").write_text(_report(["flexible-s1", "global-s1"], claims, kept))
    assert figures.units_section({"bible": run}).splitlines()[-1] == (
        "| budget: flexible at ×1.5 epochs gains < 0.5 dev BLEU | **fails**: +0.61 (25 → 38 epochs; budget kept) |")
    (run / "units" / "global-s2").mkdir()
    (run / "units" / "global-s2" / "unit.json").write_text(json.dumps(_unit("global-s2", "global", 2, 31.0, 25.1)))
    block = figures.units_section({"bible": run})
    assert "**inconclusive**" not in block and " ".join(block.split()).endswith(
        "Claims: `dvc repro pipelines/bible/dvc.yaml:report` decides them from the units done.")


def test_the_units_of_an_earlier_budget_that_failed_its_check_are_named_not_counted(tmp_path):
    """A run whose budget rose keeps the earlier budget's units in ``budget-<epochs>/``: the block
    counts none of them, says what training longer gained there and where its report is, and shows
    even while the new budget has no unit done; an earlier budget whose check passed is not named."""
    from conftest import load_script

    figures = load_script("readme_figures")
    run = tmp_path / "bible"
    old = run / "budget-25"
    (old / "units" / "global-s1").mkdir(parents=True)
    (old / "units" / "global-s1" / "unit.json").write_text(json.dumps(_unit("global-s1", "global", 1, 30.0, 25.3)))
    budget = {"variant": "flexible", "factor": 1.5, "epochs": [25, 38], "dev_gain": 1.22, "enough": False}
    (old / "report.json").write_text(_report(["global-s1"], [], budget))
    block = figures.blocks_of(figures.README, runs={"bible": run, "grc": tmp_path / "grc"})["bible"]
    text = " ".join(block.split())
    assert "(Spanish → English Bible) 0 of 24;" in text and "|" not in block
    assert text.endswith("Earlier budgets failed their checks (flexible's dev BLEU gain from training longer: "
                         f"Bible 25 → 38 epochs +1.22 (`{old}/`)).")
    (old / "report.json").write_text(_report(["global-s1"], [], {**budget, "dev_gain": 0.3, "enough": True}))
    assert "Earlier budgets" not in figures.blocks_of(figures.README, runs={"bible": run})["bible"]


def test_an_earlier_budgets_check_is_read_from_its_units_when_its_report_lacks_it(tmp_path):
    """A budget folder holding only its check's longer model takes the base from the folder before
    it (that budget's check trained exactly this budget: the same epochs and halvings), and the
    failed budgets are one sentence; a base of another schedule is not taken."""
    from conftest import load_script

    figures = load_script("readme_figures")
    run = tmp_path / "bible"

    def unit(folder: str, name: str, budget: float, epochs: int, halve: int, dev: float) -> None:
        m = _unit(name, "flexible", 1, 30.0, 25.3)
        m.update(budget=budget, training={"epochs": epochs, "lr_halve_from_epoch": halve})
        m["summary"]["dev"] = {"inf": {"tau": None, "window": 30.0, "bleu": dev}}
        (run / folder / "units" / name).mkdir(parents=True, exist_ok=True)
        (run / folder / "units" / name / "unit.json").write_text(json.dumps(m))

    unit("budget-25", "flexible-s1", 1.0, 25, 20, 36.14)
    unit("budget-25", "flexible-s1-x1.5", 1.5, 38, 33, 37.36)
    unit("budget-38", "flexible-s1-x1.5", 1.5, 57, 52, 38.02)
    checks = figures.earlier_checks(run)
    assert [(c["epochs"], c["dev_gain"], c["enough"]) for c in checks] == [([25, 38], 1.22, False), ([38, 57], 0.66, False)]
    assert figures.superseded_budgets({"bible": run}) == [
        "Earlier budgets failed their checks (flexible's dev BLEU gain from training longer: Bible 25 → 38 epochs "
        f"+1.22, 38 → 57 epochs +0.66 (`{run}/budget-*/`))."]
    unit("budget-38", "flexible-s1-x1.5", 1.5, 57, 50, 38.02)  # eight halvings: not the 38-epoch model's schedule
    assert [c["epochs"] for c in figures.earlier_checks(run)] == [[25, 38]]
    unit("budget-38", "flexible-s1-x1.5", 1.5, 57, 52, 37.70)
    assert figures.superseded_budgets({"bible": run}) == [
        "Earlier budgets failed their checks (flexible's dev BLEU gain from training longer: Bible 25 → 38 epochs "
        f"+1.22 (`{run}/budget-25/`))."]
    grc = tmp_path / "grc" / "budget-30"  # another corpus, whose check trained another model: named per corpus
    grc.mkdir(parents=True)
    (grc / "report.json").write_text(_report([], [], {"variant": "global", "epochs": [30, 45], "dev_gain": 1.72,
                                                      "enough": False}))
    assert figures.superseded_budgets({"bible": run, "grc": tmp_path / "grc"}) == [
        "Earlier budgets failed their checks (dev BLEU gain from training longer: Bible (flexible) 25 → 38 epochs "
        f"+1.22 (`{run}/budget-25/`); Greek NT (global) 30 → 45 epochs +1.72 (`{grc}/`))."]


def test_a_unit_resumed_at_its_trainings_end_is_timed_as_decoding_only(tmp_path):
    """A unit whose training an earlier budget's check did (resumed after its last epoch) is not
    shown as a unit's wall time; it is counted as decoded only."""
    from conftest import load_script

    figures = load_script("readme_figures")
    run = tmp_path / "bible"
    resumed = {**_unit("flexible-s1", "flexible", 1, 31.1, 25.3), "minutes": {"total": 2.2},
               "training": {"epochs": 57, "resumed_from_epoch": 57}}
    for unit in (_unit("global-s1", "global", 1, 30.0, 25.3), resumed):
        (run / "units" / unit["unit"]).mkdir(parents=True)
        (run / "units" / unit["unit"] / "unit.json").write_text(json.dumps(unit))
    text = " ".join(figures.units_section({"bible": run}).split())
    assert "A unit took: Bible 52 min (1 only decoded, 2 min: an earlier check trained it) on Some CPU." in text
    assert figures.resumed_at_end(resumed) and not figures.resumed_at_end({"training": {"epochs": 57, "resumed_from_epoch": 30}})
    # resumed at the end from an attempt of its own (interrupted while decoding): it trained
    assert not figures.resumed_at_end({**resumed, "minutes": {"total": 52.0, "attempts": 2}})


def test_the_committed_units_reports_cover_the_committed_units():
    """Each long run's report.json (written with each committed unit) is that of its units done."""
    from flexatt.products import done_units

    for profile in ("bible", "grc"):
        folder = ROOT / "results" / profile
        if (folder / "units").is_dir() and done_units(folder / "units"):
            report = json.loads((folder / "report.json").read_text(encoding="utf-8"))
            assert report["units"] == sorted(done_units(folder / "units")), profile


def test_both_long_runs_with_every_unit_and_claim_keep_the_readme_within_its_length(tmp_path, monkeypatch):
    """The README once both corpora's plans are done, written as the committed runs write it: every
    model of the plan over three seeds in each units block, every claim measured (f against each
    fixed window) with figures as wide as the measured ones, the budget check failed and its budget
    kept, the earlier budgets' failed checks, a unit only decoded, units from two machines."""
    from conftest import load_script

    from flexatt.unit_claims import CLAIM_TEXT
    from flexatt.products import read_plan

    figures = load_script("readme_figures")
    stats = {"seeds": 3, "over_seeds": {"n": 3, "mean": -3.91, "sd": 2.2, "ci": [-10.49, +6.23]},
             "bootstrap": {"delta": -3.91, "ci": [-14.55, -13.29]}, "p": 0.0123}
    earlier = {"bible": [(25, 38, 1.22), (38, 57, 0.66)], "grc": [(30, 45, 1.72)]}
    for profile in ("bible", "grc"):
        spec = read_plan(ROOT / "conf" / "units" / f"{profile}.yaml")
        run = tmp_path / "results" / profile
        names = []
        for variant in dict.fromkeys([*spec.seeded, *spec.fixed, *spec.others]):
            for seed in spec.seeds:
                selected = {"tau": 2.1234, "window": 19.87} if variant == spec.flexible else None
                unit = _unit(f"{variant}-s{seed}", variant, seed, 33.12, 35.24, selected)
                unit["minutes"]["total"] = 8.4 + 118.6 * (seed == 3)
                unit["machine"]["cpu"] = "Intel(R) Xeon(R) Processor" if seed == 2 else "AMD EPYC"
                if variant == spec.flexible and seed == 1:  # trained by an earlier budget's check
                    unit["training"] = {"epochs": 25, "resumed_from_epoch": 25}
                    unit["minutes"] = {"total": 2.2, "attempts": 1}
                (run / "units" / unit["unit"]).mkdir(parents=True)
                (run / "units" / unit["unit"] / "unit.json").write_text(json.dumps(unit))
                names.append(unit["unit"])
        claims = []
        for cid, (text, _, _) in CLAIM_TEXT.items():
            claim = {"id": cid, "claim": text, "verdict": "inconclusive", **stats}
            if cid == "b":
                claim["cut"] = {"n": 3, "mean": 0.54, "sd": 0.2, "ci": [0.11, 0.97]}
            if cid == "c":
                claim["window_change"] = {"n": 5, "mean": -0.17, "sd": 0.03, "ci": [-0.19, -0.16]}
                claim["beta"] = 100.0
                claim["inf"] = {"per_seed": [-0.72, -0.8, -0.61], "over_seeds": {"n": 3, "mean": -0.71, "sd": 0.1,
                                                                                 "ci": [-0.95, -0.47]}}
            if cid == "f":
                claim["pairs"] = [{"fixed": v, "verdict": "inconclusive", **stats} for v in spec.fixed]
            claims.append(claim)
        budget = {"variant": "flexible", "factor": 1.5, "epochs": [45, 68], "dev_bleu": [14.44, 15.64],
                  "test_bleu": [14.31, 14.75], "dev_gain": 1.2, "enough": False, "final": True, "kept_short": True}
        at_budget = [{"id": "a", "factor": 1.5, "seed": 1, "delta": -0.33, "ci": [-0.72, 0.07], "at_budget": 0.04,
                      "half_width": 0.63, "moved": False},
                     {"id": "b", "factor": 1.5, "seed": 1, "delta": -1.33, "ci": [-1.72, -0.97], "cut": 0.55,
                      "at_budget": -0.09, "half_width": 0.75, "moved": True}]
        (run / "report.json").write_text(json.dumps({"units": sorted(names), "claims": claims, "budget_check": budget,
                                                     "budget_claims": at_budget}))
        for epochs, longer, gain in earlier[profile]:
            folder = run / f"budget-{epochs}"
            (folder / "units").mkdir(parents=True)
            (folder / "report.json").write_text(_report([], [], {**budget, "epochs": [epochs, longer],
                                                                 "dev_gain": gain, "enough": False}))
    monkeypatch.setattr(figures, "ROOT", tmp_path)  # the grc block reads ROOT/results/grc
    monkeypatch.setattr(figures, "_shown", lambda path: path.relative_to(tmp_path))
    for name in ("benchmarks/results/pipeline.json", "results/grc/probes", "conf"):
        target = tmp_path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.symlink_to(ROOT / name)
    blocks = figures.blocks_of(figures.README)  # the long runs of ROOT/results: tmp_path's
    block = " ".join(blocks["bible"].split())
    assert "of 5 probes (`results/grc/probes/`), the best by dev AER" in block
    assert ("Earlier budgets failed their checks (flexible's dev BLEU gain from training longer: Bible 25 → 38 "
            "epochs +1.22, 38 → 57 epochs +0.66 (`results/bible/budget-*/`); Greek NT 30 → 45 epochs +1.72 "
            "(`results/grc/budget-30/`)).") in block
    assert "A unit took: Bible 8–127 min (1 only decoded, 2 min: an earlier check trained it); Greek NT" in block
    assert "on AMD EPYC, Intel(R) Xeon(R) Processor." in block
    assert ("| budget: flexible at ×1.5 epochs gains < 0.5 dev BLEU | **fails**: +1.20 (45 → 68 epochs; budget kept) "
            "| **fails**") in blocks["bible"]
    assert "; window −17% [−19%, −16%] at β = 100, Δ at τ = ∞ −0.71 |" in blocks["bible"]
    assert "| e. SACT > Global | **inconclusive** (3 seeds), by +2 (e2): **inconclusive**: −3.91 [−10.49, +6.23]" \
        in blocks["bible"]
    assert ("| budget: a, b at ×1.5 (seed 1) | a −0.33 [−0.72, +0.07], at ×1 +0.04; b −1.33 [−1.72, −0.97], at ×1 "
            "−0.09: **moved** |") in blocks["bible"]
    text = figures.fill(figures.README.read_text(encoding="utf-8"), blocks, figures.README)
    (tmp_path / "README.md").write_text(text)
    headline = " ".join(blocks["headline"].split())
    assert "on the Greek NT (Koine Greek → English, 3 seeds)" in headline
    assert "not decided" not in headline  # every claim has its seeds
    assert len(text.splitlines()) <= 150, len(text.splitlines())


def test_the_transformer_profiles_are_a_pointer_in_the_readme_and_their_units_a_page(tmp_path):
    """The README says how many Transformer units are done and what their reports decide, and
    points to ``docs/transformer.md``, whose block has their models as the RNN's and the two
    architectures per model and seed from a current report's comparison."""
    from conftest import load_script

    figures = load_script("readme_figures")
    run = tmp_path / "grc_tf"
    unit = _unit("global-s1", "global", 1, 14.2, 38.2)
    (run / "units" / "global-s1").mkdir(parents=True)
    (run / "units" / "global-s1" / "unit.json").write_text(json.dumps(unit))
    stats = {"seeds": 1, "over_seeds": {"n": 1, "mean": 0.3, "sd": None, "ci": None},
             "bootstrap": {"delta": 0.3, "ci": [-0.1, 0.7]}, "p": None}
    report = json.loads(_report(["global-s1"], [{"id": "a", "claim": "a", "verdict": "not decided", **stats},
                                                {"id": "d", "claim": "d", "verdict": "not measured"}]))
    report["architectures"] = {"against": "grc", "rows": [
        {"model": "global", "seed": 1, "epochs": [30, 45], "minutes": [80.4, 47.1], "test_bleu": [14.2, 14.1],
         "equal_minutes": 47.1, "dev_bleu_at_equal": [12.0, 12.42]}]}
    (run / "report.json").write_text(json.dumps(report))
    readme = " ".join(figures.transformer_section({"grc_tf": run, "bible_tf": tmp_path / "bible_tf"}).split())
    assert "units done Greek NT 1 of 13; claims: Greek NT a **not decided** (1 seed);" in readme
    assert "[Transformer results](docs/transformer.md)" in readme
    page = figures.transformer_units({"grc_tf": run})
    assert "| Greek NT | global | 1 | 30 / 45 | 80 / 47 | 14.20 / 14.10 | 47 | 12.00 / 12.42 |" in page
    assert "| global | τ=∞ | 1 | 14.20 |" in page and "](../README.md#configuration)" in page
    assert figures.transformer_units({"grc_tf": tmp_path / "none"}) == "No Transformer unit has finished yet."

"""flexatt.unit_claims: the claims decided from units' stored decodes, on constructed units whose
hypotheses are made to differ by known amounts (verdicts over seeds, the two-level bootstrap beside)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from flexatt.claims import FAILS, HOLDS, INCONCLUSIVE, NOT_MEASURED, bleu_difference
from flexatt.metrics import corpus_bleu
from flexatt.unit_claims import UNDECIDED, bleu_difference_over_seeds, precisions, report, t_interval, t_test_p
from flexatt.products import Plan, Unit, pack_json, write_products

ROOT = Path(__file__).resolve().parents[1]

N = 120
WORDS = [f"w{i}" for i in range(400)]
rng = random.Random(7)
REFERENCES = [" ".join(rng.sample(WORDS, 10)) for _ in range(N)]


def _system(errors: float, seed: int) -> list[str]:
    """The references with about ``errors`` of their words replaced (a worse system: more)."""
    r = random.Random(seed)
    return [" ".join(w if r.random() >= errors else "x" for w in ref.split()) for ref in REFERENCES]


def _record(tau: float | None, errors: float, seed: int, window: float) -> dict:
    hyps = _system(errors, seed)
    return {"split": "test", "tau": tau, "window": window, "bleu": round(corpus_bleu(hyps, [REFERENCES])[0], 2),
            "hypotheses": hyps}


def _unit(folder: Path, unit: Unit, records: list[dict], *, selected: float | None = None, matched: dict | None = None,
          dev_bleu: float = 30.0, dev_window: float = 20.0, precision: str | None = None) -> None:
    test = {"inf": {k: records[0][k] for k in ("tau", "window", "bleu")}}
    dev = {"inf": {"tau": None, "window": dev_window, "bleu": dev_bleu}}
    if selected is not None:
        sel = next(r for r in records if r["tau"] == selected)
        test["selected"] = {k: sel[k] for k in ("tau", "window", "bleu")}
        dev.update(selected_tau=selected, selected={"tau": selected, "window": sel["window"], "bleu": dev_bleu - 0.2})
    summary = {"dev": dev, "test": test, **({"matched": matched} if matched else {})}
    manifest = {"unit": unit.name, "kind": unit.kind, "variant": unit.variant, "seed": unit.seed, "budget": unit.budget,
                "summary": summary, "training": {"epochs": 38 if unit.budget != 1.0 else 25,
                                                 **({"precision": precision} if precision else {})}}
    write_products(folder / unit.name, manifest, {"curve.csv": b"epoch,step,lr\n",
                                                  "decodes.json.xz": pack_json({"records": records}, "decodes.json.xz")})


PLAN = Plan(seeds=[1, 2, 3], seeded=["global", "flexible"], fixed=["local_m_d5", "local_m"], others=["sact", "local_p"],
            parents=["flexible"], finetuning={"parent": "flexible", "betas": [10.0], "epochs": 1, "pairs": 3,
                                              "parent_seeds": [2, 3], "parent_pairs": 2})
OPTIONS = {"n_samples": 200}


def test_the_t_interval_over_seeds():
    assert t_interval([1.0, 2.0, 3.0]) == {"n": 3, "mean": 2.0, "sd": 1.0, "ci": [-0.4841, 4.4841]}
    assert t_interval([0.5]) == {"n": 1, "mean": 0.5, "sd": None, "ci": None}


def test_the_t_test_over_seeds():
    assert t_test_p([1.0, 2.0, 3.0]) == pytest.approx(0.07418, abs=1e-5)  # t = 2/(1/sqrt 3) = 3.46, 2 df
    assert t_test_p([0.5]) is None
    assert t_test_p([0.3, 0.3, 0.3]) == 0.0 and t_test_p([0.0, 0.0]) == 1.0


GOOD, BAD = _system(0.1, 1), _system(0.5, 2)


def test_the_two_level_bootstrap_carries_the_spread_between_seeds():
    same = [[(GOOD, GOOD, REFERENCES)]] * 3
    assert bleu_difference_over_seeds(same, n_samples=50, seed=7) == {"delta": 0.0, "ci": [0.0, 0.0]}
    one = bleu_difference_over_seeds([[(GOOD, BAD, REFERENCES)]], n_samples=300, seed=7)
    paired = bleu_difference(GOOD, BAD, REFERENCES, n_samples=300, seed=7)
    assert one["delta"] == paired["delta"] and one["ci"][0] <= one["delta"] <= one["ci"][1]
    # seeds that disagree (A better at one, worse at another, equal at the third) average to 0;
    # resampling the seeds puts the interval around both of them
    split = [[(GOOD, BAD, REFERENCES)], [(BAD, GOOD, REFERENCES)], [(GOOD, GOOD, REFERENCES)]]
    both = bleu_difference_over_seeds(split, n_samples=400, seed=7)
    assert both["delta"] == 0.0 and both["ci"][0] < -0.5 * paired["delta"] and both["ci"][1] > 0.5 * paired["delta"]
    assert bleu_difference_over_seeds(split, n_samples=400, seed=7) == both  # seeded
    # a group's comparisons are averaged: two pairs of one parent with Δ and −Δ give 0
    pairs = [[(GOOD, BAD, REFERENCES), (BAD, GOOD, REFERENCES)]]
    assert bleu_difference_over_seeds(pairs, n_samples=50, seed=7)["delta"] == 0.0


def test_the_two_level_bootstrap_refuses_an_empty_seed_or_a_length_mismatch():
    with pytest.raises(ValueError, match="at least one seed"):
        bleu_difference_over_seeds([[(GOOD, BAD, REFERENCES)], []])
    with pytest.raises(ValueError, match=rf"hypotheses of A \({N - 1}\) and B \({N}\) as references \({N}\)"):
        bleu_difference_over_seeds([[(GOOD[:-1], BAD, REFERENCES)]])


def _pair(folder: Path, parent: int, run: int, *, tuned_window: float, control_window: float = 12.0,
          precision: str | None = None) -> None:
    """A fine-tuning and its control from ``parent``: the same translations at each one's own
    selected τ (Δ BLEU 0), the fine-tuned model at ``tuned_window`` positions."""
    k = 10 * parent + run
    _unit(folder, Unit("flexible", parent, beta=10.0, run=run),
          [_record(None, 0.25, 610 + k, 25.0), _record(1.0, 0.25, 640 + k, tuned_window)], selected=1.0,
          dev_bleu=29.9, precision=precision)
    _unit(folder, Unit("flexible", parent, beta=0.0, run=run),
          [_record(None, 0.25, 630 + k, 25.0), _record(1.5, 0.25, 640 + k, control_window)], selected=1.5,
          precision=precision)


@pytest.fixture
def run(tmp_path: Path) -> Path:
    """Three seeds of Global and Flexible (flexible a little better), the fixed windows, SACT and
    local-p at seed 1, a local-m at D = 2 outside the plan, and fine-tuning/control pairs from
    three parents (three from the first, two from each other)."""
    for s in (1, 2, 3):
        _unit(tmp_path, Unit("global", s), [_record(None, 0.40, 100 + s, 25.0)])
        _unit(tmp_path, Unit("flexible", s), [_record(None, 0.25, 200 + s, 25.0), _record(1.2, 0.25, 200 + s, 11.0),
                                              _record(0.5, 0.24, 400 + s, 10.6)],
              selected=1.2, matched={"local_m_d5-s1": {"target": 11.0, "tau": 0.5, "dev": {"window": 10.8}}} if s == 1
              else None)
    _unit(tmp_path, Unit("local_m_d5", 1), [_record(None, 0.40, 501, 11.0)])
    _unit(tmp_path, Unit("local_m_d2", 1), [_record(None, 0.05, 502, 5.0)])  # better than flexible: not in f
    _unit(tmp_path, Unit("sact", 1), [_record(None, 0.29, 503, 25.0)])
    # fine-tuned narrower than its control at each one's own selected τ, at the same BLEU
    for parent, runs in ((1, (1, 2, 3)), (2, (1, 2)), (3, (1, 2))):
        for r in runs:
            _pair(tmp_path, parent, r, tuned_window=9.0 + 0.2 * r + 0.1 * parent, control_window=12.0 + 0.1 * r)
    return tmp_path


def _claims(folder: Path, plan: Plan = PLAN) -> dict[str, dict]:
    return {c["id"]: c for c in report(folder, plan, {"test": REFERENCES}, **OPTIONS)["claims"]}


def test_claims_over_seeds_and_parents(run):
    claims = _claims(run)
    a = claims["a"]
    assert a["seeds"] == 3 and a["over_seeds"]["ci"] is not None and a["verdict"] == HOLDS
    assert len(a["per_seed"]) == 3 and min(a["per_seed"]) > 0  # flexible drops fewer words at every seed
    assert a["p"] is not None and a["bootstrap"]["ci"][0] <= a["bootstrap"]["delta"] <= a["bootstrap"]["ci"][1]
    b = claims["b"]  # the same translations at τ: within the margin, and it cuts 56% of positions
    assert b["cut"]["mean"] == pytest.approx(0.56) and b["paper_cut"] == "inside" and b["verdict"] == HOLDS
    assert b["required_cut"] == 0.5 and b["dev_per_seed"] == [-0.2, -0.2, -0.2]
    c = claims["c"]  # over 3 parents, each at its own selected τ: 9.3-9.9 positions against 12.1-12.3
    assert c["seeds"] == 3 and c["seed_ids"] == [1, 2, 3] and c["pairs_per_parent"] == {1: [1, 2, 3], 2: [1, 2], 3: [1, 2]}
    assert c["window_change"]["ci"][1] < -0.05 and c["verdict"] == HOLDS
    assert c["beta"] == 10.0  # the β of the pairs, chosen on dev from the sweep's units
    assert c["inf"]["per_seed"] == [round(x, 2) for x in c["inf"]["per_seed"]] and len(c["inf"]["per_seed"]) == 3
    assert c["at_selected"]["tuned"]["window"] < c["at_selected"]["control"]["window"]
    assert claims["d"]["verdict"] == NOT_MEASURED  # no local-p unit
    e = claims["e"]  # one seed: its numbers, no verdict
    assert e["over_seeds"]["ci"] is None and e["p"] is None and e["verdict"] == UNDECIDED
    assert claims["e2"]["verdict"] == UNDECIDED
    f = claims["f"]
    assert [p["fixed"] for p in f["pairs"]] == ["local_m_d5", "local_m"]  # D = 5 and 10; D = 2 is not in f
    assert f["pairs"][0]["verdict"] == UNDECIDED and f["pairs"][0]["per_seed"][0] > 0  # better, but one seed
    assert f["pairs"][1]["verdict"] == NOT_MEASURED and f["verdict"] == UNDECIDED


def test_a_verdict_needs_three_seeds(run):
    """Two seeds of a clear gain are shown, not decided; the third decides."""
    import shutil

    shutil.rmtree(run / "global-s3")
    a = _claims(run)["a"]
    assert a["seeds"] == 2 and a["over_seeds"]["ci"] is not None and min(a["per_seed"]) > 0
    assert a["verdict"] == UNDECIDED
    _unit(run, Unit("global", 3), [_record(None, 0.40, 103, 25.0)])
    assert _claims(run)["a"]["verdict"] == HOLDS


def test_c_is_over_parents_and_one_parent_does_not_decide(run):
    import shutil

    for parent in (2, 3):
        for r in (1, 2):
            for name in (f"flexible-s{parent}-ft-b10-r{r}", f"flexible-s{parent}-ctl-r{r}"):
                shutil.rmtree(run / name)
    c = _claims(run)["c"]  # three pairs of one parent: their spread is fine-tuning noise, not seeds
    assert c["seeds"] == 1 and c["verdict"] == UNDECIDED and c["window_change"]["ci"] is None


def test_c_reads_only_the_pairs_at_the_plans_precision(run):
    plan = Plan(**{**PLAN.model_dump(), "finetuning": {**PLAN.finetuning.model_dump(), "precision": "32-true"}})
    assert "c" not in {k for k, c in _claims(run, plan).items() if c["verdict"] != NOT_MEASURED}
    for parent, runs in ((1, (2, 3)), (2, (1, 2)), (3, (1,))):
        for r in runs:
            _pair(run, parent, r, tuned_window=9.5, precision="32-true")
    c = _claims(run, plan)["c"]  # the sweep's pair r1 of parent 1 (no precision recorded) is left out
    assert c["pairs_per_parent"] == {1: [2, 3], 2: [1, 2], 3: [1]} and c["verdict"] == HOLDS


def test_the_papers_beta_is_shown_beside_the_selected_one(run):
    plan = Plan(**{**PLAN.model_dump(), "finetuning": {**PLAN.finetuning.model_dump(), "betas": [0.1, 10.0]}})
    _unit(run, Unit("flexible", 1, beta=0.1, run=1), [_record(None, 0.30, 701, 25.0), _record(1.4, 0.30, 702, 11.8)],
          selected=1.4, dev_bleu=29.9, dev_window=20.0)
    c = _claims(run, plan)["c"]
    pb = c["paper_beta"]  # one pair, against the sweep's control: shown, not tested
    assert c["beta"] == 10.0 and pb["beta"] == 0.1 and pb["seeds"] == 1 and pb["pairs_per_parent"] == {1: [1]}
    assert pb["inf"]["per_seed"][0] < 0  # the β = 0.1 model translates worse at τ = ∞ here
    assert "at the paper's β = 0.1 (not tested)" in report(run, plan, {"test": REFERENCES}, **OPTIONS)["markdown"]


def test_a_wide_interval_over_seeds_leaves_b_inconclusive(run):
    """Seeds that disagree (one loses 0.2 of its words at τ, two lose nothing) widen the t-interval
    past the margin."""
    _unit(run, Unit("flexible", 3), [_record(None, 0.25, 203, 25.0), _record(1.2, 0.45, 303, 11.0)], selected=1.2)
    b = _claims(run)["b"]
    assert b["per_seed"][:2] == [0.0, 0.0] and b["per_seed"][2] < -5
    assert b["over_seeds"]["ci"][0] < -0.5 < b["over_seeds"]["ci"][1]  # the margin inside the interval
    assert b["verdict"] == INCONCLUSIVE


def test_b_fails_when_the_cut_is_under_half(run):
    for s in (1, 2, 3):  # the same translations at a τ that scores 16 of 25 positions: 36% cut
        _unit(run, Unit("flexible", s), [_record(None, 0.25, 200 + s, 25.0), _record(1.2, 0.25, 200 + s, 16.0)],
              selected=1.2)
    b = _claims(run)["b"]
    assert b["cut"]["mean"] == pytest.approx(0.36) and b["verdict"] == FAILS


def test_c_fails_when_the_fine_tuned_window_is_not_narrower_at_its_own_tau(run):
    for parent, runs in ((1, (1, 2, 3)), (2, (1, 2)), (3, (1, 2))):  # its own selected τ gives the control's window
        for r in runs:
            _pair(run, parent, r, tuned_window=12.2 + 0.05 * r, control_window=12.0 + 0.1 * r)
    c = _claims(run)["c"]
    assert c["window_change"]["ci"][0] > -0.05 and c["verdict"] == FAILS


def test_claims_a_and_b_at_the_budget_checks_budget(run):
    plan = Plan(**{**PLAN.model_dump(), "budget_check": {"variant": "flexible", "factor": 1.5, "others": ["global"]}})
    _unit(run, Unit("flexible", 1, 1.5), [_record(None, 0.25, 201, 25.0), _record(1.1, 0.25, 201, 10.0)],
          selected=1.1)
    out = report(run, plan, {"test": REFERENCES}, **OPTIONS)
    assert [r["id"] for r in out["budget_claims"]] == ["b"]  # Global at x1.5 not done yet
    _unit(run, Unit("global", 1, 1.5), [_record(None, 0.10, 901, 25.0)])  # Global gains far more with the budget
    out = report(run, plan, {"test": REFERENCES}, **OPTIONS)
    rows = {r["id"]: r for r in out["budget_claims"]}
    claims = {c["id"]: c for c in out["claims"]}
    assert rows["a"]["at_budget"] == claims["a"]["per_seed"][0] and rows["a"]["delta"] < 0 < rows["a"]["at_budget"]
    assert rows["a"]["moved"] and rows["b"]["delta"] == 0.0 and not rows["b"]["moved"] and rows["b"]["cut"] == 0.6
    assert "Claims at ×1.5 the budget" in out["markdown"] and "**yes**" in out["markdown"]


def test_the_figure_shows_each_fine_tuning_pair_beside_the_trade_off(run, tmp_path_factory):
    import shutil

    from PIL import Image

    from flexatt.unit_claims import Units, figure, finetuning_pairs

    out = tmp_path_factory.mktemp("figures")
    assert finetuning_pairs(Units(run, PLAN)) == (10.0, {
        1: {r: (f"flexible-s1-ft-b10-r{r}", f"flexible-s1-ctl-r{r}") for r in (1, 2, 3)},
        2: {r: (f"flexible-s2-ft-b10-r{r}", f"flexible-s2-ctl-r{r}") for r in (1, 2)},
        3: {r: (f"flexible-s3-ft-b10-r{r}", f"flexible-s3-ctl-r{r}") for r in (1, 2)}})
    both = Image.open(figure(Units(run, PLAN), out / "both.png")).size
    shutil.rmtree(run / "flexible-s1-ctl-r3")
    assert list(finetuning_pairs(Units(run, PLAN))[1][1]) == [1, 2]  # a pair once both sides finished
    for r in (1, 2):
        shutil.rmtree(run / f"flexible-s1-ctl-r{r}")
    assert finetuning_pairs(Units(run, PLAN)) is None  # β waits for the sweep's control
    alone = Image.open(figure(Units(run, PLAN), out / "alone.png")).size
    assert both[0] > 1.5 * alone[0]  # the pairs' panel beside the trade-off


def test_the_budget_check_says_what_longer_training_gains(run):
    from flexatt.unit_claims import Units, budget_check

    assert budget_check(Units(run, PLAN)) is None  # not run yet
    plan = Plan(**{**PLAN.model_dump(), "budget_check": {"variant": "flexible", "factor": 1.5}})
    _unit(run, Unit("flexible", 1, 1.5), [_record(None, 0.25, 201, 25.0)], dev_bleu=30.7)
    for name, epochs in (("flexible-s1", 25), ("flexible-s1-x1.5", 38)):
        path = run / name / "unit.json"
        manifest = __import__("json").loads(path.read_text())
        manifest["training"] = {"epochs": epochs}
        path.write_text(__import__("json").dumps(manifest))
    check = budget_check(Units(run, plan))
    assert check["epochs"] == [25, 38] and check["dev_gain"] == 0.7 and not check["enough"]
    assert not check["final"] and not check["kept_short"]
    md = report(run, plan, {"test": REFERENCES}, **OPTIONS)["markdown"]
    assert "gains +0.70 dev BLEU" in md and "is not enough by this check." in md and "kept all the same" not in md
    kept = Plan(**{**PLAN.model_dump(), "budget_check": {"variant": "flexible", "factor": 1.5, "final": True}})
    assert budget_check(Units(run, kept))["kept_short"]
    assert "It is kept all the same" in report(run, kept, {"test": REFERENCES}, **OPTIONS)["markdown"]


def test_the_report_renders_every_claim(run):
    md = report(run, PLAN, {"test": REFERENCES}, **OPTIONS)["markdown"]
    assert "| global | τ=∞ | 1,2,3 |" in md and "| flexible | selected τ | 1,2,3 |" in md
    assert "not measured" in md and "vs local_m_d5" in md and "the paper's 56–64% overlaps it" in md
    claim_rows = [line for line in md.splitlines() if line.startswith("| claim") or line.startswith("| a:")
                  or line.startswith("| c") or line.startswith("| f:") or line.startswith("| f vs")]
    assert len({line.count("|") for line in claim_rows}) == 1  # every row as many columns as the header


def test_the_report_names_the_precisions_the_units_trained_at(run):
    class Found:  # what precisions reads of the units: their manifests
        manifests = {**{f"u{i}-s1": {"training": {"precision": "bf16-mixed"}} for i in range(6)},
                     "flexible-s1-ft-b10-r2": {"training": {"precision": "32-true"}},
                     "flexible-s1-ctl-r2": {"training": {"precision": "32-true"}}, "old-s1": {"training": {}}}

    assert precisions(Found) == ["bf16-mixed (6 units)", "32-true (flexible-s1-ctl-r2, flexible-s1-ft-b10-r2)"]
    Found.manifests = {f"u{i}-s2": {"training": {"precision": "32-true"}} for i in range(5)}
    assert precisions(Found) == ["32-true (5 units)"]
    assert "Trained at" not in report(run, PLAN, {"test": REFERENCES}, **OPTIONS)["markdown"]  # none recorded


def test_the_report_stage_writes_the_report_and_figure_from_units_alone(run, tmp_path):
    """No checkpoint, no decoding: the references and the units' products are all it reads."""
    import shutil

    from flexatt.errors import DataError
    from flexatt.products import done_units
    from flexatt.stages.report import read_references, write_report

    results = tmp_path / "copy" / "bible" / "units"
    shutil.copytree(run, results, ignore=shutil.ignore_patterns("copy"))
    data = tmp_path / "copy" / "tok"
    data.mkdir()
    (data / "test.ref").write_text("\n".join(REFERENCES) + "\n", encoding="utf-8")
    refs = read_references({"test": data / "test.ref"}, done_units(results))
    written, _ = write_report("bible", results, refs, plan_dir=ROOT / "conf/units")
    assert written == [results.parent / "report.json", results.parent / "report.md", results.parent / "figures/units.png"]
    assert (results.parent / "report.md").read_text().startswith("Units done: ")
    assert (results.parent / "figures" / "units.png").stat().st_size > 10_000
    claims = {c["id"]: c for c in __import__("json").loads((results.parent / "report.json").read_text())["claims"]}
    assert claims["a"]["verdict"] == HOLDS
    (data / "test.ref").write_text("\n".join(REFERENCES[::-1]) + "\n", encoding="utf-8")
    (results / "global-s1" / "unit.json").write_text((results / "global-s1" / "unit.json").read_text().replace(
        '"summary"', '"data": {"test.ref": "0000"}, "summary"', 1))
    with pytest.raises(DataError, match="not the references the units decoded"):
        read_references({"test": data / "test.ref"}, done_units(results))


def test_the_report_names_the_units_its_listing_runs_again_from_the_listing_alone(run, tmp_path):
    """A finished unit that the pipeline's ``units.yaml`` lists as pending (freeze found it ran on
    uncommitted edits, which needs the repository's history) is named as to be run again; the
    report reads that from the listing, so a clone without the history writes the same report."""
    import shutil

    import yaml

    from flexatt.products import done_units, listed_again
    from flexatt.stages.report import write_report

    results = tmp_path / "copy" / "bible" / "units"
    shutil.copytree(run, results, ignore=shutil.ignore_patterns("copy"))
    refs = {"test": REFERENCES}
    listing = tmp_path / "units.yaml"
    assert listed_again(listing, done_units(results)) == set()  # no listing: none
    listing.write_text(yaml.safe_dump({"finished": {}, "pending": {
        "global-s1": {"unit": "global-s1"}, "sact-s9": {"unit": "sact-s9"}}}))
    assert listed_again(listing, done_units(results)) == {"global-s1"}  # sact-s9 has no products
    _, markdown = write_report("bible", results, refs, plan_dir=ROOT / "conf/units", listing=listing)
    assert ("To be run again (pending stages), its products shown until then: `global-s1` (ran on "
            "uncommitted edits to what it ran).") in markdown
    _, markdown = write_report("bible", results, refs, plan_dir=ROOT / "conf/units")
    assert "To be run again" not in markdown


def test_the_report_logs_its_claims_models_and_figure_to_w_and_b(run, tmp_path):
    """The report stage's W&B run (job type units-report, the profile's units group): the claims
    table a row per comparison, the models table, the figure; what the dashboard's units section
    reads of it."""
    import json

    from wandb_records import find_runs, logged_keys

    from flexatt import config as C
    from flexatt import dashboard, schema
    from flexatt.io import write_json
    from flexatt.stages.report import log_report
    from flexatt.unit_claims import CLAIM_COLUMNS, Units, claim_records, figure

    out = report(run, PLAN, {"test": REFERENCES}, **OPTIONS)
    write_json(tmp_path / "report.json", {k: v for k, v in out.items() if k != "markdown"})
    saved = json.loads((tmp_path / "report.json").read_text())
    rows = claim_records("grc", saved["claims"])
    assert [(r["claim"], r["comparison"]) for r in rows if r["claim"] == "f"] == [
        ("f", "vs local_m_d5"), ("f", "vs local_m"), ("f", "")]
    a = next(r for r in rows if r["claim"] == "a")
    assert a["seeds"] == 3 and a["verdict"] == HOLDS and a["ci_low"] < a["delta"] < a["ci_high"] and set(a) == set(CLAIM_COLUMNS)
    p = schema.validate(C.load_params(str(ROOT / "pipelines/grc/params.yaml"),
                                      ["logger.enabled=true", "logger.mode=offline", f"logger.dir={tmp_path}"]))
    # as a Transformer profile's report has it: its models against the RNN's (flexatt.architectures)
    saved["architectures"] = {"against": "grc", "rows": [
        {"model": "global", "seed": 1, "epochs": [30, 45], "minutes": [80.0, 47.0], "test_bleu": [14.2, 14.1],
         "machines": ["Intel(R) Xeon(R) Processor, native bf16, bf16-mixed, 2 threads"] * 2,
         "equal_minutes": 47.0, "dev_bleu_at_equal": [12.0, 12.4]}]}
    log_report(p, saved, figure(Units(run, PLAN), tmp_path / "units.png"))
    runs = find_runs(tmp_path / "wandb")
    assert [(r["run"].job_type, r["run"].run_group) for r in runs] == [("units-report", "grc-units")]
    assert runs[0]["summary"]["units"] == len(saved["units"])
    section = next(s for s in dashboard.sections({}) if dashboard.of_units(s))
    of_report = {k for k in dashboard.keys_read(section) if not k.startswith(("test/", "config."))}
    assert of_report <= logged_keys(tmp_path / "wandb")


def test_a_claim_whose_models_the_plan_does_not_train_says_so(tmp_path):
    """A Transformer profile's plan asks a, b and f: c, d and e are not in it, not merely unmeasured."""
    from flexatt.products import read_plan
    from flexatt.unit_claims import Units, decide

    (tmp_path / "units").mkdir()
    claims = {c["id"]: c for c in decide(Units(tmp_path / "units", read_plan(ROOT / "conf/units/grc_tf.yaml")), {})}
    assert {k for k, c in claims.items() if c.get("missing") == "not in this profile's plan"} == {"c", "d", "e", "e2"}
    assert {k for k, c in claims.items() if c.get("missing") == "no finished units of this comparison"} == {"a", "b", "f"}

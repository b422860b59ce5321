"""flexatt.unit_claims: the claims decided from units' stored decodes, on constructed units whose
hypotheses are made to differ by known amounts (per-seed t-intervals beside the pooled test)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from flexatt.claims import FAILS, HOLDS, INCONCLUSIVE, NOT_MEASURED
from flexatt.metrics import corpus_bleu
from flexatt.unit_claims import precisions, report, t_interval
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
          dev_bleu: float = 30.0, dev_window: float = 20.0) -> None:
    test = {"inf": {k: records[0][k] for k in ("tau", "window", "bleu")}}
    dev = {"inf": {"tau": None, "window": dev_window, "bleu": dev_bleu}}
    if selected is not None:
        sel = next(r for r in records if r["tau"] == selected)
        test["selected"] = {k: sel[k] for k in ("tau", "window", "bleu")}
        dev.update(selected_tau=selected, selected={"tau": selected, "window": sel["window"], "bleu": dev_bleu - 0.2})
    summary = {"dev": dev, "test": test, **({"matched": matched} if matched else {})}
    manifest = {"unit": unit.name, "kind": unit.kind, "variant": unit.variant, "seed": unit.seed, "budget": unit.budget,
                "summary": summary}
    write_products(folder / unit.name, manifest, {"curve.csv": b"epoch,step,lr\n",
                                                  "decodes.json.xz": pack_json({"records": records}, "decodes.json.xz")})


PLAN = Plan(seeds=[1, 2, 3], seeded=["global", "flexible"], fixed=["local_m_d5", "local_m"], others=["sact", "local_p"],
            parents=["flexible"], finetuning={"parent": "flexible", "betas": [10.0], "epochs": 1, "pairs": 3})
OPTIONS = {"n_samples": 200, "ar_trials": 200}


def test_the_t_interval_over_seeds():
    assert t_interval([1.0, 2.0, 3.0]) == {"n": 3, "mean": 2.0, "sd": 1.0, "ci": [-0.4841, 4.4841]}
    assert t_interval([0.5]) == {"n": 1, "mean": 0.5, "sd": None, "ci": None}


@pytest.fixture
def run(tmp_path: Path) -> Path:
    """Three seeds of Global and Flexible (flexible a little better), the fixed windows, SACT and
    local-p at seed 1, a local-m at D = 2 outside the plan, and three fine-tuning/control pairs."""
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
    # (the same translations: the BLEU difference is 0)
    for r in (1, 2, 3):
        _unit(tmp_path, Unit("flexible", 1, beta=10.0, run=r), [_record(None, 0.25, 610 + r, 25.0),
                                                              _record(1.0, 0.25, 640 + r, 9.0 + 0.2 * r)],
              selected=1.0, dev_bleu=29.9)
        _unit(tmp_path, Unit("flexible", 1, beta=0.0, run=r), [_record(None, 0.25, 630 + r, 25.0),
                                                             _record(1.5, 0.25, 640 + r, 12.0 + 0.1 * r)],
              selected=1.5)
    return tmp_path


def _claims(folder: Path) -> dict[str, dict]:
    return {c["id"]: c for c in report(folder, PLAN, {"test": REFERENCES}, **OPTIONS)["claims"]}


def test_claims_from_units_with_seeds_beside_the_pooled_test(run):
    claims = _claims(run)
    a = claims["a"]
    assert a["seeds"] == 3 and a["over_seeds"]["ci"] is not None and a["verdict"] == HOLDS
    assert len(a["per_seed"]) == 3 and min(a["per_seed"]) > 0  # flexible drops fewer words at every seed
    b = claims["b"]  # the same translations at τ: within the margin, and it cuts 56% of positions
    assert b["cut"]["mean"] == pytest.approx(0.56) and b["paper_cut"] == "inside" and b["verdict"] == HOLDS
    c = claims["c"]  # each at its own selected τ: 9.2-9.6 positions against 12.2-12.3
    assert c["seeds"] == 3 and c["window_change"]["ci"][1] < -0.05 and c["verdict"] == HOLDS
    assert c["beta"] == 10.0  # the β of the pairs, chosen on dev from the sweep's units
    assert claims["d"]["verdict"] == NOT_MEASURED  # no local-p unit
    assert claims["e"]["over_seeds"]["ci"] is None  # one seed: the pooled test decides alone
    f = claims["f"]
    assert [p["fixed"] for p in f["pairs"]] == ["local_m_d5", "local_m"]  # D = 5 and 10; D = 2 is not in f
    assert f["pairs"][0]["verdict"] == HOLDS and f["pairs"][1]["verdict"] == NOT_MEASURED
    assert f["verdict"] == INCONCLUSIVE  # D = 10 not measured yet: not every fixed window holds


def test_a_wide_interval_over_seeds_leaves_b_inconclusive(run):
    """Seeds that disagree (one loses 0.2 of its words at τ, two lose nothing) widen the t-interval
    past the margin even where the pooled interval stays inside it."""
    _unit(run, Unit("flexible", 3), [_record(None, 0.25, 203, 25.0), _record(1.2, 0.45, 303, 11.0)], selected=1.2)
    b = _claims(run)["b"]
    assert b["per_seed"][:2] == [0.0, 0.0] and b["per_seed"][2] < -5
    assert b["over_seeds"]["ci"][0] < -0.5 < b["over_seeds"]["ci"][1]  # the margin inside the interval
    assert b["verdict"] == INCONCLUSIVE


def test_c_fails_when_the_fine_tuned_window_is_not_narrower_at_its_own_tau(run):
    for r in (1, 2, 3):  # the fine-tuned model's curve shifted: its own selected τ gives the control's window
        _unit(run, Unit("flexible", 1, beta=10.0, run=r), [_record(None, 0.25, 610 + r, 25.0),
                                                         _record(1.0, 0.25, 640 + r, 12.2 + 0.05 * r)],
              selected=1.0, dev_bleu=29.9)
    c = _claims(run)["c"]
    assert c["window_change"]["ci"][0] > -0.05 and c["verdict"] == FAILS


def test_the_figure_shows_each_fine_tuning_pair_beside_the_trade_off(run, tmp_path_factory):
    import shutil

    from PIL import Image

    from flexatt.unit_claims import Units, figure, finetuning_pairs

    out = tmp_path_factory.mktemp("figures")
    assert finetuning_pairs(Units(run, PLAN)) == (
        10.0, {r: (f"flexible-s1-ft-b10-r{r}", f"flexible-s1-ctl-r{r}") for r in (1, 2, 3)})
    both = Image.open(figure(Units(run, PLAN), out / "both.png")).size
    shutil.rmtree(run / "flexible-s1-ctl-r3")
    assert list(finetuning_pairs(Units(run, PLAN))[1]) == [1, 2]  # a pair once both sides finished
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
                  or line.startswith("| f:") or line.startswith("| f vs")]
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

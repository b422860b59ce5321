"""flexatt.units: the plan's order, the budget check's schedule, the diagonal
alignment, and a real unit on the smoke profile whose products are complete, load, and come from
the weights it keeps."""

from __future__ import annotations

import json
import lzma
import math
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, copy_of, run_module
from flexatt.errors import ConfigError, DataError
from flexatt.runtime import native_cpu_bf16
from flexatt.products import (Plan, Unit, budget_gain, budget_overrides, budget_short, budget_waits, done_units,
                              load_products,
                              nearest_fixed, pack_json, parse_unit, phase, plan, precision_conflicts, read_plan,
                              select_beta, verified_manifest, write_products)
from flexatt.tau import INF
from flexatt.decoding.alignments import diagonal_links
from flexatt.units import AttemptClock, load_weights


def _manifest(dev_inf: float, selected: float | None = None) -> dict:
    dev = {"inf": {"tau": math.inf, "window": dev_inf, "bleu": 30.0}}
    if selected is not None:
        dev["selected"] = {"tau": 1.0, "window": selected, "bleu": 29.8}
    return {"summary": {"dev": dev}}


CONVERGED_LIKE = Plan(seeds=[1, 2, 3], seeded=["global", "flexible"], fixed=["local_m_d5", "local_m"], others=["sact"],
            parents=["flexible"], budget_check={"variant": "flexible", "factor": 1.5})


def test_the_budget_check_comes_first_then_the_first_seed_of_every_model_flexible_last_of_the_seeds():
    """The check and its model first (a failed check holds the rest); flexible keeps its weights, so
    the fixed windows that finish after it are matched from them. A flexible model without kept
    weights cannot be matched later: it stays after the fixed windows, the check after it."""
    names = [u.name for u in plan(CONVERGED_LIKE, {})]
    assert names == ["flexible-s1", "flexible-s1-x1.5", "global-s1", "local_m_d5-s1", "local_m-s1", "sact-s1",
                     "global-s2", "flexible-s2", "global-s3", "flexible-s3"]
    assert [u.keep_weights for u in plan(CONVERGED_LIKE, {}) if u.variant == "flexible" and u.budget == 1.0] == [True] * 3
    unkept = Plan.model_validate({**CONVERGED_LIKE.model_dump(), "parents": []})
    assert [u.name for u in plan(unkept, {})][:6] == ["global-s1", "local_m_d5-s1", "local_m-s1", "sact-s1",
                                                      "flexible-s1", "flexible-s1-x1.5"]
    on_global = Plan.model_validate({**CONVERGED_LIKE.model_dump(), "budget_check": {"variant": "global", "factor": 1.5}})
    assert [u.name for u in plan(on_global, {})][:3] == ["global-s1", "global-s1-x1.5", "local_m_d5-s1"]


def test_the_other_seeds_wait_for_a_budget_that_passes_its_check():
    def dev(bleu: float) -> dict:
        return {"summary": {"dev": {"inf": {"bleu": bleu}}}}

    first = ["flexible-s1", "flexible-s1-x1.5", "global-s1", "local_m_d5-s1", "local_m-s1", "sact-s1"]
    assert budget_gain(CONVERGED_LIKE, {"flexible-s1": dev(36.14)}) is None  # the check not run yet
    done = {"flexible-s1": dev(36.14), "flexible-s1-x1.5": dev(36.63)}
    assert budget_gain(CONVERGED_LIKE, done) == 0.49 and not budget_short(CONVERGED_LIKE, done)
    assert [u.name for u in plan(CONVERGED_LIKE, done)][-4:] == ["global-s2", "flexible-s2", "global-s3", "flexible-s3"]
    done["flexible-s1-x1.5"] = dev(36.64)  # 0.5 gained: the budget is short, the plan ends with the first seed
    assert budget_short(CONVERGED_LIKE, done) and [u.name for u in plan(CONVERGED_LIKE, done)] == first
    assert not budget_short(Plan(seeds=[1], seeded=["flexible"]), done)  # a plan without a check
    kept = Plan.model_validate({**CONVERGED_LIKE.model_dump(), "budget_check": {"variant": "flexible", "final": True}})
    assert budget_short(kept, done) and not budget_waits(kept, done)  # a budget kept as final: the seeds run at it
    assert [u.name for u in plan(kept, done)][-4:] == ["global-s2", "flexible-s2", "global-s3", "flexible-s3"]
    from flexatt.freeze import budget_note

    assert budget_note(CONVERGED_LIKE, done).startswith("the other seeds and the pairs wait: flexible trained x1.5 "
                                                       "gains +0.50")
    assert budget_note(kept, done) == "kept the budget (budget_check.final), although flexible trained x1.5 gains +0.50 dev BLEU"


def test_the_fixed_window_nearest_flexibles_selected_window_gets_the_seeds_once_known():
    done = {"flexible-s1": _manifest(24.0, selected=11.2), "local_m_d5-s1": _manifest(10.9),
            "local_m-s1": _manifest(19.8)}
    assert nearest_fixed(CONVERGED_LIKE, 1, {k: v for k, v in done.items() if k != "local_m-s1"}) is None  # not all known
    assert nearest_fixed(CONVERGED_LIKE, 1, done) == "local_m_d5"
    names = [u.name for u in plan(CONVERGED_LIKE, done)]
    assert names[-6:] == ["global-s2", "local_m_d5-s2", "flexible-s2", "global-s3", "local_m_d5-s3", "flexible-s3"]


def test_the_fine_tuning_sweep_runs_beside_its_control_and_its_pairs_wait_for_the_selected_beta():
    spec = Plan(seeds=[1, 2], seeded=["global", "flexible"], parents=["flexible"],
                finetuning={"parent": "flexible", "betas": [1.0, 10.0], "epochs": 2, "pairs": 3})
    names = [u.name for u in plan(spec, {})]
    assert names == ["global-s1", "flexible-s1", "flexible-s1-ctl-r1", "flexible-s1-ft-b1-r1",
                     "flexible-s1-ft-b10-r1", "global-s2", "flexible-s2"]

    def run(dev_bleu: float, window: float) -> dict:
        return {"summary": {"dev": {"inf": {"bleu": dev_bleu, "window": 24.0},
                                    "selected": {"bleu": dev_bleu - 0.3, "window": window}}}}

    done = {"flexible-s1-ctl-r1": run(33.0, 18.0), "flexible-s1-ft-b1-r1": run(32.9, 16.0),
            "flexible-s1-ft-b10-r1": run(32.6, 12.0)}
    assert select_beta(spec, done) == 10.0
    assert [u.name for u in plan(spec, done)][-4:] == ["flexible-s1-ft-b10-r2", "flexible-s1-ctl-r2",
                                                        "flexible-s1-ft-b10-r3", "flexible-s1-ctl-r3"]
    done["flexible-s1-ft-b10-r1"] = run(32.0, 12.0)  # 1.0 below the control: out of the tolerance
    assert select_beta(spec, done) == 1.0
    done["flexible-s1-ft-b1-r1"] = run(31.0, 16.0)
    assert select_beta(spec, done) is None  # no β keeps the control's BLEU: the pairs wait
    assert select_beta(spec, {k: v for k, v in done.items() if k != "flexible-s1-ctl-r1"}) is None


def test_the_plans_stages_come_in_order_and_several_profiles_finish_a_stage_on_each_before_the_next(tmp_path):
    """phase: 0 the first seed of every claim (budget check, β sweep and control included), 1 the
    other seeds, 2 the pairs; a plan is in that order, and ``flexatt repro`` starts the units of
    two profiles' pipelines by it (:func:`flexatt.schedule.unit_phases`)."""
    spec = Plan(seeds=[1, 2], seeded=["global", "flexible"], parents=["flexible"],
                budget_check={"variant": "flexible", "factor": 1.5},
                finetuning={"parent": "flexible", "betas": [1.0, 10.0], "epochs": 2, "pairs": 2})
    done = {name: {"summary": {"dev": {"inf": {"bleu": 33.0, "window": 24.0}, "selected": {"bleu": 32.8, "window": w}}}}
            for name, w in (("flexible-s1-ctl-r1", 18.0), ("flexible-s1-ft-b1-r1", 16.0), ("flexible-s1-ft-b10-r1", 12.0))}
    units = plan(spec, done)
    assert [(u.name, phase(spec, u)) for u in units] == [
        ("flexible-s1", 0), ("flexible-s1-x1.5", 0), ("global-s1", 0), ("flexible-s1-ctl-r1", 0),
        ("flexible-s1-ft-b1-r1", 0), ("flexible-s1-ft-b10-r1", 0), ("global-s2", 1), ("flexible-s2", 1),
        ("flexible-s1-ft-b10-r2", 2), ("flexible-s1-ctl-r2", 2)]

    from flexatt.schedule import unit_phases

    stages = {"global-s2": "decode", "flexible-s1-ft-b1-r1": "train", "flexible-s1-ft-b10-r2": "train"}
    root = tmp_path
    (root / "conf/units").mkdir(parents=True)
    for profile in ("bible", "grc"):
        (root / "conf/units" / f"{profile}.yaml").write_text(yaml.safe_dump(spec.model_dump()))
        (root / "pipelines" / profile).mkdir(parents=True)
        (root / "pipelines" / profile / "units.yaml").write_text(yaml.safe_dump(
            {"pending": {n: {"unit": n} for n in stages}}))
    names = [f"pipelines/{p}/dvc.yaml:{stage}@{n}" for p in ("bible", "grc") for n, stage in stages.items()]
    phases = unit_phases([*names, "report"], root)
    assert phases == {name: {"global-s2": 1, "flexible-s1-ft-b1-r1": 0, "flexible-s1-ft-b10-r2": 2}[name.split("@")[1]]
                      for name in names}  # each claim's first seed on both corpora before any second


def test_the_budget_check_adds_epochs_at_the_full_rate_and_keeps_the_halvings():
    assert budget_overrides(25, 20, 1.5) == ["train.epochs=38", "train.lr_halve_from_epoch=33"]
    assert budget_overrides(40, 35, 1.5) == ["train.epochs=60", "train.lr_halve_from_epoch=55"]


def test_unit_names_round_trip_and_bad_ones_are_refused():
    for unit in (Unit("local_m_d5", 2), Unit("flexible", 1, 1.5), Unit("flexible", 1, beta=10.0, run=2),
                 Unit("flexible", 1, beta=0.0, run=3)):
        assert parse_unit(unit.name) == unit
    for bad in ("global", "global-sx", "-s1", "flexible-s1-xfast", "flexible-s1-ft-b010-r1", "flexible-s1-ctl"):
        with pytest.raises(ConfigError):
            parse_unit(bad)


def test_the_diagonal_links_every_target_word_once_in_proportion():
    assert diagonal_links(4, 2) == {(1, 0), (3, 1)}
    assert diagonal_links(2, 4) == {(0, 0), (0, 1), (1, 2), (1, 3)}
    assert diagonal_links(3, 3) == {(0, 0), (1, 1), (2, 2)}
    assert diagonal_links(0, 3) == set() == diagonal_links(3, 0)


def test_the_profiles_plans_are_valid_and_name_their_variants(tmp_path):
    from omegaconf import OmegaConf

    from conftest import compose_params
    from flexatt import schema

    for profile in ("bible", "grc", "smoke", "bible_tf", "grc_tf"):
        spec = read_plan(ROOT / f"conf/units/{profile}.yaml")
        params = schema.validate(OmegaConf.load(compose_params(tmp_path / profile, f"profile={profile}",
                                                               test_precision=False)))
        tuned = [spec.finetuning.parent] if spec.finetuning else []
        for variant in [*spec.seeded, *spec.fixed, *spec.others, *spec.parents, *tuned]:
            assert variant in params.variants, variant
            params.model_of(variant)  # a model the profile's architecture builds
        assert all(parent in spec.parents for parent in tuned)  # its weights are kept
        assert params.train.lr_schedule == "fixed" and params.train.early_stopping_patience is None
        assert (params.model.arch == "transformer") == profile.endswith("_tf")
    bad = tmp_path / "bad.yaml"
    bad.write_text("seeds: [1]\nseeded: [global]\nbudget_check: {variant: flexible, factor: 0.5}\n")
    with pytest.raises(ConfigError, match="budget_check.factor"):
        read_plan(bad)
    bad.write_text("seeds: [1]\nseeded: [global]\nfixd: [local_m]\n")
    with pytest.raises(ConfigError, match="fixd"):
        read_plan(bad)


def test_a_unit_whose_products_predate_a_fix_the_plan_names_runs_again(tmp_path):
    """``run_again`` in a plan: a finished unit made from a commit without the fix is due again
    (whatever its edits); one made from the fix or a later commit is not; a bad commit is refused."""
    import subprocess

    from flexatt.products import rerun_due, why_again

    def commit(message: str) -> str:
        subprocess.run(["git", "commit", "-q", "--allow-empty", "-m", message], cwd=tmp_path, check=True)
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path, check=True, capture_output=True,
                              text=True).stdout.strip()

    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run(["git", "config", "user.email", "t@example.org"], cwd=tmp_path, check=True)
    subprocess.run(["git", "config", "user.name", "t"], cwd=tmp_path, check=True)
    before, fix, after = commit("before"), commit("the fix"), commit("after")
    done = {name: {"source": {"commit": c, "uncommitted_edits": False}}
            for name, c in (("flexible-s1", before), ("flexible-s2", fix), ("flexible-s3", after), ("global-s1", before))}
    plain = read_plan(ROOT / "conf/units/smoke.yaml")
    assert rerun_due(done, tmp_path, plain) == set()
    spec = plain.model_copy(update={"run_again": {
        n: {"fixed_in": fix[:10], "why": "decoded before the fix"} for n in ("flexible-s1", "flexible-s2", "flexible-s3")}})
    spec = type(plain).model_validate(spec.model_dump())
    assert rerun_due(done, tmp_path, spec) == {"flexible-s1"}
    assert why_again("flexible-s1", spec) == "decoded before the fix"
    assert why_again("global-s1", spec) == "ran on uncommitted edits to what it ran"
    bad = tmp_path / "bad.yaml"
    bad.write_text("seeds: [1]\nseeded: [global]\nrun_again: {global-s1: {fixed_in: HEAD, why: x}}\n")
    with pytest.raises(ConfigError, match="run_again.global-s1.fixed_in"):
        read_plan(bad)


def test_a_units_clock_adds_up_the_attempts_that_trained_its_model(tmp_path):
    """Each attempt writes its seconds, added to its predecessors', beside the resume state; a
    training that starts afresh deletes that folder, and the earlier attempts no longer count."""
    import time

    path = tmp_path / ".resume/units/global-s1/model/clock.json"
    with AttemptClock(path, every=0.01) as first:
        deadline = time.monotonic() + 10
        while not path.is_file() and time.monotonic() < deadline:  # the heartbeat, while training
            time.sleep(0.01)
        assert json.loads(path.read_text())["attempts"] == 1  # what a killed process leaves
        time.sleep(0.05)
    # an attempt that failed (left by an exception) still records what it took
    left = json.loads(path.read_text())
    assert left["attempts"] == 1 and left["wall"] >= 0.05 and left["cpu"] >= 0

    with AttemptClock(path, every=60) as second:  # resumed: the first attempt's seconds count
        earlier = second.stop(fresh=False)
    assert earlier == left
    again = json.loads(path.read_text())
    assert again["attempts"] == 2 and again["wall"] >= left["wall"]

    with AttemptClock(path, every=0.01) as third:  # started afresh: the trainer deletes the folder
        import shutil

        shutil.rmtree(path.parent)
        path.parent.mkdir(parents=True)
        deadline = time.monotonic() + 10
        while not path.is_file() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert json.loads(path.read_text())["attempts"] == 1
        assert third.stop(fresh=False) == {"wall": 0.0, "cpu": 0.0, "attempts": 0}
    with AttemptClock(path, every=60) as fourth:  # the trainer says it started afresh
        assert fourth.stop(fresh=True)["attempts"] == 0
    assert json.loads(path.read_text())["attempts"] == 1


#: a short τ search: what a unit decodes, not how long it takes
SHORT = ["train.epochs=1", "logger.enabled=false", "sweep_tau.grid=[1.0]", "sweep_tau.search_steps=1",
         "sweep_tau.add_log_mean_len=false", "sweep_tau.curve_taus=[0.5]"]


@pytest.fixture(scope="module")
def smoke_unit(smoke_tokenized, tmp_path_factory) -> Path:
    work = copy_of(smoke_tokenized, tmp_path_factory.mktemp("unit"))
    (work / "conf").symlink_to(ROOT / "conf")  # a fine-tuning's epochs: conf/units/<profile>.yaml
    result = run_module("flexatt.units", "run", "flexible-s2", "--out", "products", "--keep-weights",
                        "--match", "local_m-s2=4.5", *SHORT, cwd=work, threads="1")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return work


def test_a_units_products_are_complete_and_load(smoke_unit):
    products = load_products(smoke_unit / "products")
    m = products["manifest"]
    assert (m["unit"], m["variant"], m["seed"], m["model"]["attention"]) == ("flexible-s2", "flexible", 2, "flexible")
    assert m["training"]["stopped_by"] == "budget" and m["training"]["checkpoint"] == "last"
    assert m["training"]["lr_sequence"] == [float(row["lr"]) for row in products["curve"]]
    assert m["minutes"]["cpu"] > 0 and m["minutes"]["threads"] == 1
    assert m["minutes"]["attempts"] == 1  # trained in one go
    clock = json.loads((smoke_unit / ".resume/units/flexible-s2/model/flexible/clock.json").read_text())
    assert clock["attempts"] == 1 and clock["wall"] / 60 <= m["minutes"]["train"] + 0.05
    assert m["machine"]["bf16_native"] == native_cpu_bf16()  # the model name alone may not tell
    records = {(r["split"], r["tau"]): r for r in products["decodes"]["records"]}
    n = {split: len((smoke_unit / f"artifacts/tok/{split}.ref").read_text().splitlines()) for split in ("dev", "test")}
    for split in ("dev", "test"):
        r = records[(split, math.inf)]
        assert len(r["hypotheses"]) == len(r["window_sum"]) == len(r["steps"]) == len(r["bleu_stats"]) == n[split]
        assert m["summary"][split]["inf"]["bleu"] == r["bleu"]
        assert 0 <= m["summary"][split]["aer_diagonal"] <= 1 and 0 <= m["summary"][split]["aer"]["inf"] <= 1
        assert len(products["alignments"][split]["inf"]) == n[split]
    selected = m["summary"]["dev"]["selected_tau"]
    assert ("test", selected) in records and ("test", 0.5) in records and ("dev", 0.5) in records
    assert any(key.startswith("test__") for key in products["g"])
    matched = m["summary"]["matched"]["local_m-s2"]  # flexible at the τ of a fixed window's dev window
    assert matched["target"] == 4.5 and matched["dev"]["window"] == records[("dev", matched["tau"])]["window"]
    assert matched["test"] == {k: records[("test", matched["tau"])][k] for k in ("tau", "window", "bleu")}
    dev_windows = [r["window"] for (split, _), r in records.items() if split == "dev"]
    assert abs(matched["dev"]["window"] - 4.5) == min(abs(w - 4.5) for w in dev_windows)
    assert sum(info["bytes"] for info in m["files"].values()) < 2e6


def test_a_units_numbers_come_from_the_weights_it_keeps(smoke_unit):
    """The parent's float16 weights, decoded again, give the unit's stored test hypotheses."""
    from flexatt.data.evalset import EvalSet
    from flexatt.decoding.translate import DecodeOptions, translate_split

    products = load_products(smoke_unit / "products")
    model = load_weights(smoke_unit / "products/weights.fp16.pt")
    data = EvalSet.load(smoke_unit / "artifacts/tok", "test")
    beam = products["manifest"]["decode"]["beam_size"]
    out = translate_split(model, data.split, data.tgt_vocab, DecodeOptions(beam_size=beam, batch_size=150, backend="eager"))
    stored = next(r for r in products["decodes"]["records"] if r["split"] == "test" and math.isinf(r["tau"]))
    assert out.hypotheses == stored["hypotheses"]
    assert out.window_sum.tolist() == stored["window_sum"]


def test_evaluate_and_compare_from_products_equal_them_from_the_model(smoke_unit):
    """What the claims read from a unit's products (no checkpoint, no decoding) equals what the
    evaluate and compare stages compute from the model: its kept weights decoded again on the
    test split at τ = ∞ and at the selected τ give the stored window, BLEU and chrF
    (``evaluate.score_row``), and the comparison of the two decodes from their stored records
    (``unit_claims``: Δ and its bootstrap) is that of the fresh ones."""
    from flexatt.claims import bleu_difference
    from flexatt.data.evalset import EvalSet
    from flexatt.decoding.translate import DecodeOptions, translate_split
    from flexatt.stages.evaluate import score_row
    from flexatt.unit_claims import _comparison, bleu_difference_over_seeds

    products = load_products(smoke_unit / "products")
    m = products["manifest"]
    model = load_weights(smoke_unit / "products/weights.fp16.pt")
    data = EvalSet.load(smoke_unit / "artifacts/tok", "test")
    options = DecodeOptions(beam_size=m["decode"]["beam_size"], alpha=m["decode"]["alpha"], batch_size=150,
                            backend="eager")
    records = {(r["split"], r["tau"]): r for r in products["decodes"]["records"]}
    taus = (math.inf, m["summary"]["dev"]["selected_tau"])
    fresh = {tau: translate_split(model, data.split, data.tgt_vocab, options.at(tau)) for tau in taus}
    for tau, out in fresh.items():
        row, stored = score_row(out, data, "en"), records[("test", tau)]
        assert {k: row[k] for k in ("window", "window_step_weighted", "bleu", "chrf")} \
            == {k: stored[k] for k in ("window", "window_step_weighted", "bleu", "chrf")}, tau
    options_ = {"n_samples": 200, "seed": 7}
    from_products = _comparison([(1, [(records[("test", taus[1])], records[("test", taus[0])])])],
                                {"test": data.references}, **options_)["bootstrap"]
    fresh_pair = (fresh[taus[1]].hypotheses, fresh[taus[0]].hypotheses, data.references)
    assert from_products == bleu_difference_over_seeds([[fresh_pair]], **options_)
    assert from_products["delta"] == bleu_difference(*fresh_pair, **options_)["delta"]


@pytest.mark.slow  # a fine-tuning and its control trained end to end
def test_a_control_replays_its_fine_tunings_learning_rates_from_the_same_kept_weights(smoke_unit):
    parent = smoke_unit / "products" / "weights.fp16.pt"
    for name in ("flexible-s2-ft-b10-r1", "flexible-s2-ctl-r1"):
        result = run_module("flexatt.units", "run", name, "--out", name, "--parent", str(parent), *SHORT,
                            cwd=smoke_unit, threads="1")
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    ft, ctl = (load_products(smoke_unit / n)["manifest"] for n in ("flexible-s2-ft-b10-r1", "flexible-s2-ctl-r1"))
    spec = read_plan(ROOT / "conf/units/smoke.yaml").finetuning
    assert (ft["kind"], ctl["kind"]) == ("finetune", "control")
    assert ft["training"]["lr_sequence"] == ctl["training"]["lr_sequence"] == [0.002] * spec.epochs
    assert ft["finetuning"]["parent_sha256"] == ctl["finetuning"]["parent_sha256"]
    assert (ft["finetuning"]["beta"], ctl["finetuning"]["beta"]) == (10.0, 0.0)
    assert "selected" in ft["summary"]["dev"] and "selected" in ctl["summary"]["dev"]  # both τ-selected on dev
    missing = run_module("flexatt.units", "run", "flexible-s2-ctl-r2", "--out", "x", "--parent", "nowhere.pt",
                         *SHORT, cwd=smoke_unit, threads="1")
    assert missing.returncode == 2 and "nowhere.pt" in missing.stderr and "flexible-s2" in missing.stderr


@pytest.mark.slow  # a second unit trained, then a match decoded
def test_a_flexible_unit_is_matched_later_from_its_kept_weights(smoke_unit, tmp_path):
    """A fixed window finished after the flexible unit: the match decodes the kept weights (the
    test record equals a fresh decode of them at the matched τ), adds only the new decodes, keeps
    every other product byte for byte, records the amendment, and is not redone once there."""
    from flexatt.data.evalset import EvalSet
    from flexatt.decoding.translate import translate_split
    from flexatt.points import decode_options
    from flexatt.tau import INF

    folder = copy_of(smoke_unit / "products", tmp_path / "late")
    before = load_products(folder)
    result = run_module("flexatt.units", "match", str(folder), "--match", "local_m_d5-s2=3.0", *SHORT,
                        cwd=smoke_unit, threads="1")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    after = load_products(folder)
    m = after["manifest"]
    assert set(m["summary"]["matched"]) == {"local_m-s2", "local_m_d5-s2"}
    assert m["summary"]["matched"]["local_m-s2"] == before["manifest"]["summary"]["matched"]["local_m-s2"]
    late = m["summary"]["matched"]["local_m_d5-s2"]
    assert late["target"] == 3.0 and m["amended"][0]["matched"] == ["local_m_d5-s2"]
    assert "commit" in m["amended"][0]["source"] and m["amended"][0]["machine"]["cpu"] and m["amended"][0]["minutes"] >= 0
    assert m["amended"][0]["machine"]["bf16_native"] == native_cpu_bf16()
    old = before["decodes"]["records"]
    assert all(r in after["decodes"]["records"] for r in old)  # nothing decoded before is changed
    assert {name: before["manifest"]["files"][name] for name in before["manifest"]["files"] if name != "decodes.json.xz"} \
        == {name: m["files"][name] for name in m["files"] if name != "decodes.json.xz"}
    from omegaconf import OmegaConf

    p = OmegaConf.load(smoke_unit / "params.yaml")
    data = EvalSet.load(smoke_unit / p.train.data_dir, "test")
    fresh = translate_split(load_weights(folder / "weights.fp16.pt"), data.split, data.tgt_vocab,
                            decode_options(p).at(late["tau"]))
    record = next(r for r in after["decodes"]["records"] if r["split"] == "test" and r["tau"] == late["tau"])
    assert record["hypotheses"] == fresh.hypotheses and late["test"]["bleu"] == record["bleu"]
    assert late["tau"] != INF
    digest = (folder / "unit.json").read_bytes()
    again = run_module("flexatt.units", "match", str(folder), "--match", "local_m_d5-s2=3.0", *SHORT, cwd=smoke_unit,
                       threads="1")
    assert again.returncode == 0 and (folder / "unit.json").read_bytes() == digest  # matched already: unchanged
    kept = {k: v for k, v in load_products(folder)["manifest"].items() if k != "files"}
    write_products(folder, kept, {name: (folder / name).read_bytes() for name in m["files"] if name != "weights.fp16.pt"})
    refused = run_module("flexatt.units", "match", str(folder), "--match", "local_p-s2=4.0", *SHORT, cwd=smoke_unit,
                         threads="1")
    assert refused.returncode == 2 and "weights.fp16.pt" in refused.stderr and "local_p-s2" in refused.stderr


@pytest.mark.slow  # a fixed-window unit trained and matched end to end
def test_a_fixed_window_matches_its_seeds_flexible_unit_in_its_own_decoding(smoke_unit, tmp_path):
    """A pipeline's fixed-window unit, finished after its seed's flexible unit, matches it in its
    own decoding stage: the flexible folder is not touched, the match is the one the flexible
    unit's own folder would get (``match``), and the report's reading folds it into the flexible
    unit (its ``matched`` entry, its test record at the matched τ)."""
    from flexatt.unit_claims import Units

    results = tmp_path / "units"
    flexible = copy_of(smoke_unit / "products", results / "flexible-s2")
    before = {f.name: f.read_bytes() for f in flexible.iterdir()}
    trained = run_module("flexatt.units", "train", "local_p-s2", "--work", "w", *SHORT, cwd=smoke_unit, threads="1")
    assert trained.returncode == 0, trained.stdout[-2000:] + trained.stderr[-3000:]
    decoded = run_module("flexatt.units", "decode", "local_p-s2", "--work", "w", "--out", str(results / "local_p-s2"),
                         "--match-flexible", str(flexible), *SHORT, cwd=smoke_unit, threads="1")
    assert decoded.returncode == 0, decoded.stdout[-2000:] + decoded.stderr[-3000:]
    assert {f.name: f.read_bytes() for f in flexible.iterdir()} == before
    done = done_units(results)
    fixed = done["local_p-s2"]
    window = fixed["summary"]["dev"]["inf"]["window"]
    entry = done["flexible-s2"]["summary"]["matched"]["local_p-s2"]
    assert entry == fixed["matched_by"]["match"] and entry["target"] == window
    assert fixed["matched_by"]["unit"] == "flexible-s2"
    late = copy_of(flexible, tmp_path / "late")
    result = run_module("flexatt.units", "match", str(late), "--match", f"local_p-s2={window!r}", *SHORT,
                        cwd=smoke_unit, threads="1")
    assert result.returncode == 0, result.stderr[-3000:]
    assert load_products(late)["manifest"]["summary"]["matched"]["local_p-s2"] == entry
    record = Units(results, read_plan(ROOT / "conf/units/smoke.yaml")).record("flexible-s2", entry["tau"])
    assert record["bleu"] == entry["test"]["bleu"] and record["window"] == entry["test"]["window"]
    wrong = run_module("flexatt.units", "decode", "local_p-s2", "--work", "w", "--out", str(tmp_path / "x"),
                       "--match-flexible", str(results / "local_p-s2"), *SHORT, cwd=smoke_unit, threads="1")
    assert wrong.returncode == 2 and "kept no weights" in wrong.stderr


def test_a_units_decoding_logs_its_figures_to_its_w_and_b_run(smoke_unit, tmp_path):
    """BLEU, chrF, RIBES, window and AER at τ = ∞ and at the selected τ, on both splits: the
    summary of a W&B run of its own, grouped by profile, equal to the products' figures."""
    from wandb_records import find_runs

    from flexatt.metrics import corpus_ribes
    from flexatt.units import decode_figures

    out = tmp_path / "decoded"
    SHORT_ON = [o for o in SHORT if not o.startswith("logger.")]
    result = run_module("flexatt.units", "decode", "flexible-s2", "--keep-weights", "--out", str(out), *SHORT_ON,
                        "logger.enabled=true", "logger.mode=offline", f"logger.dir={tmp_path}", cwd=smoke_unit, threads="1")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    products = load_products(out)
    manifest, records = products["manifest"], products["decodes"]["records"]
    runs = [r for r in find_runs(tmp_path / "wandb") if r["run"].job_type == "unit-decode"]
    assert len(runs) == 1 and runs[0]["run"].run_group == "smoke-units"
    summary = runs[0]["summary"]
    from omegaconf import OmegaConf

    tok = smoke_unit / OmegaConf.load(smoke_unit / "params.yaml").train.data_dir
    refs = {s: (tok / f"{s}.ref").read_text(encoding="utf-8").split("\n")[:-1] for s in ("dev", "test")}
    expected = decode_figures(manifest, records, refs)
    assert {k: summary[k] for k in expected} == expected
    test_inf = next(r for r in records if r["split"] == "test" and r["tau"] == INF)
    assert expected["test/inf/bleu"] == manifest["summary"]["test"]["inf"]["bleu"] == test_inf["bleu"]
    assert expected["test/inf/ribes"] == round(100 * corpus_ribes(test_inf["hypotheses"], refs["test"]), 2)
    assert expected["test/selected/window"] == manifest["summary"]["test"]["selected"]["window"]
    assert expected["test/inf/aer"] == manifest["summary"]["test"]["aer"]["inf"]
    assert runs[0]["config"]["variant"] == "flexible" and runs[0]["config"]["seed"] == 2
    # what the dashboard's units section reads of a unit's decoding
    from wandb_records import logged_keys

    from flexatt import dashboard

    section = next(s for s in dashboard.sections({}) if dashboard.of_units(s))
    of_decodes = {k for k in dashboard.keys_read(section) if k.startswith(("test/", "config."))}
    assert of_decodes and of_decodes <= logged_keys(tmp_path / "wandb")


def test_a_unit_refuses_to_train_on_uncommitted_edits_to_what_it_runs(tmp_path, monkeypatch):
    import subprocess

    from flexatt.errors import ConfigError
    from flexatt.units import refuse_uncommitted

    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.py").write_text("x = 1\n")
    (tmp_path / "notes.txt").write_text("free\n")
    git("add", "src/a.py")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "a")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("still free\n")  # not what a unit runs
    refuse_uncommitted("params.yaml")
    (tmp_path / "src" / "a.py").write_text("x = 2\n")
    with pytest.raises(ConfigError, match="src/a.py"):
        refuse_uncommitted("params.yaml")


def test_a_finished_unit_started_again_trains_no_further_says_so_and_decodes_the_same(smoke_unit):
    """Its resume state (kept in the work folder) is of the run that ended: the trainer's word is
    in the unit's log, no epoch is trained, and the products are those of the first run."""
    result = run_module("flexatt.units", "run", "flexible-s2", "--out", "again", "--keep-weights",
                        "--match", "local_m-s2=4.5", *SHORT, cwd=smoke_unit, threads="1")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert "flexatt.trainer: " in result.stderr and "the run had already ended" in result.stderr
    first, again = load_products(smoke_unit / "products"), load_products(smoke_unit / "again")
    assert again["manifest"]["training"]["resumed_from_epoch"] == again["manifest"]["training"]["epochs"]
    assert again["curve"] == first["curve"]

    def untimed(decodes: dict) -> list[dict]:  # what was decoded, without the seconds it took
        return [{k: v for k, v in r.items() if k != "seconds"} for r in decodes["records"]]

    assert untimed(again["decodes"]) == untimed(first["decodes"])


@pytest.mark.slow  # a longer training end to end
def test_the_budget_check_trains_longer_and_decodes_like_any_unit(smoke_unit):
    """Claims a and b are re-asked at the check's budget: its flexible model is decoded over τ
    too, with a τ selected on dev, as at the budget."""
    result = run_module("flexatt.units", "run", "flexible-s2-x1.5", "--out", "longer", *SHORT, cwd=smoke_unit,
                        threads="1")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    products = load_products(smoke_unit / "longer")
    m = products["manifest"]
    assert m["training"]["epochs"] == 2 and m["training"]["epochs_budget"] == 2 and m["budget"] == 1.5
    decoded = {(r["split"], r["tau"]) for r in products["decodes"]["records"]}
    assert {("dev", math.inf), ("test", math.inf)} <= decoded and len({t for s, t in decoded if s == "dev"}) > 1
    assert "selected_tau" in m["summary"]["dev"] and products["alignments"] is not None


@pytest.mark.slow  # two Transformer units trained and decoded end to end
def test_a_transformer_unit_trains_and_decodes_as_a_unit_with_its_layers_windows(smoke_tokenized, tmp_path):
    """A unit of a Transformer profile (model.arch=transformer) goes through the same unit: its
    products load, its test decodes keep each cross-attention layer's window beside the mean; a
    flexible unit keeps its weights (a parent, as the Transformer plans make it) and a fixed window
    that finishes after it is matched to it from them, as on the RNN."""
    work = copy_of(smoke_tokenized, tmp_path / "tf")
    (work / "conf").symlink_to(ROOT / "conf")
    sizes = ["model.arch=transformer", "model.hidden_size=32", "model.ff_size=64", "model.layers=2", "model.heads=2"]
    result = run_module("flexatt.units", "run", "flexible-s1", "--keep-weights", "--out", "units/flexible-s1",
                        "--match", "local_mr-s1=4.5", *SHORT, *sizes, cwd=work, threads="1")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    products = load_products(work / "units/flexible-s1")
    assert products["manifest"]["model"]["arch"] == "transformer"
    assert (work / "units/flexible-s1/weights.fp16.pt").is_file()
    for r in products["decodes"]["records"]:
        assert len(r["layer_windows"]) == 2, r["layer_windows"]  # per layer: per sentence, then the mean
        assert sum(r["layer_windows"]) / 2 == pytest.approx(r["window"], abs=0.01)
    fixed = run_module("flexatt.units", "run", "local_m-s1", "--out", "units/local_m-s1", "--match-flexible",
                       "units/flexible-s1", *SHORT, *sizes, cwd=work, threads="1")
    assert fixed.returncode == 0, fixed.stdout[-2000:] + fixed.stderr[-3000:]
    done = done_units(work / "units")
    entry = done["flexible-s1"]["summary"]["matched"]["local_m-s1"]
    assert entry["target"] == done["local_m-s1"]["summary"]["dev"]["inf"]["window"]
    assert done["local_m-s1"]["matched_by"]["unit"] == "flexible-s1"


def test_a_changed_product_is_refused(smoke_unit, tmp_path):
    folder = copy_of(smoke_unit / "products", tmp_path / "p")
    decodes = folder / "decodes.json.xz"
    data = json.loads(lzma.decompress(decodes.read_bytes()))
    data["records"][0]["hypotheses"][0] = "edited"
    decodes.write_bytes(lzma.compress(json.dumps(data).encode()))
    with pytest.raises(DataError, match="decodes.json.xz"):
        load_products(folder)
    (folder / "unit.json").write_text("{")
    with pytest.raises(DataError, match="unit.json"):
        load_products(folder)


def test_committed_units_load_whichever_compression_they_were_written_with():
    """A unit's decodes are .json.xz, or .json.gz where a unit was written before xz (an earlier
    budget's units): every committed unit's files are the ones its manifest lists (size and
    SHA-256); one unit per compression loads, and re-packing it gives the bytes written (the
    same code reads and packs every unit: loading all would grow this test with each unit)."""
    found = sorted((ROOT / "results").glob("*/units/*/unit.json")) + \
        sorted((ROOT / "results").glob("*/budget-*/units/*/unit.json"))
    assert found
    repacked = {}
    for manifest in found:
        name = next(n for n in verified_manifest(manifest.parent)["files"] if n.startswith("decodes.json"))
        assert name in ("decodes.json.gz", "decodes.json.xz")
        if name not in repacked:
            products = load_products(manifest.parent)
            assert pack_json(products["decodes"], name) == (manifest.parent / name).read_bytes(), manifest.parent
            repacked[name] = manifest.parent
    assert set(repacked) == {"decodes.json.gz", "decodes.json.xz"}, repacked
    with pytest.raises(ValueError, match="decodes.json.bz2"):
        pack_json({}, "decodes.json.bz2")

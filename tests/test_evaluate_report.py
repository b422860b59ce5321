"""Tests of the evaluate stage's scoring and reporting: score_row (BLEU, chrF, Moses-tokenised
BLEU, windows), the reference rows of the significance test, Table 1's rendering, and one run of
the whole stage on a one-epoch model (metrics.json and table1.md fields)."""

from __future__ import annotations

import json
import math
import shutil
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from conftest import copy_of, run_inprocess, run_module
from flexatt.decoding import BACKENDS
from flexatt.decoding.translate import Translation
from flexatt.metrics import corpus_bleu, corpus_chrf, moses_tokenize, tokenized_bleu
from flexatt.tau import from_json
from flexatt.errors import DataError
from flexatt.claims import not_selected
from flexatt.stages.evaluate import TABLE_ORDER, finetuning_effect, reference_row, render_table, score_row, tau_of

HYPS = ["I do know it's here, and I don't care.", "And God saw the light, that it was good."]
REFS = ["I don't know it's here, and I don't care.", "And God saw the light, that it was good."]


def _translation(hyps: list[str]) -> Translation:
    # sentence 0: 30 positions over 3 steps (10 per step); sentence 1: 20 over 10 steps (2 per step)
    return Translation(hypotheses=hyps, window_sum=np.array([30.0, 20.0]), steps=np.array([3, 10]),
                       src_lengths=np.array([12, 12]), seconds=0.5)


def test_score_row_fields():
    data = SimpleNamespace(references=REFS, second_references=None)
    row = score_row(_translation(HYPS), data, "en")
    assert row["window"] == pytest.approx((10 + 2) / 2)  # per sentence, then over sentences
    assert row["window_step_weighted"] == pytest.approx(50 / 13, abs=1e-3)  # over all steps
    assert row["bleu"] == round(corpus_bleu(HYPS, [REFS])[0], 2)
    assert row["chrf"] == round(corpus_chrf(HYPS, [REFS])[0], 2)
    assert row["chrf_signature"].startswith("nrefs:1|case:mixed|eff:yes|nc:6|nw:0")
    want_tok = tokenized_bleu(moses_tokenize(HYPS, "en"), [moses_tokenize(REFS, "en")])[0]
    assert row["bleu_tok"] == round(want_tok, 2)
    assert row["bleu_tok"] != row["bleu"]  # Moses splits "don't" and "it's", 13a does not
    assert row["decode_ms"] == 250.0
    assert "bleu_multi" not in row
    data2 = SimpleNamespace(references=REFS, second_references=["", "And God saw the light."])
    assert score_row(_translation(HYPS), data2, "en")["bleu_multi"] == row["bleu"]  # blank: no reference


def test_reference_rows():
    rows = set(TABLE_ORDER)
    want = {"global": None, "local_m": "global", "local_p": "global", "flexible": "global",
            "flexible_tau": "flexible", "flexible_ft": "flexible_ctl", "flexible_ft_tau": "flexible_ft",
            "flexible_ctl": "flexible", "flexible_ctl_tau": "flexible_ctl",
            "sact": "global", "flexible_sact": "global", "flexible_sact_tau": "flexible_sact",
            "flexible_sact_ft": "flexible_sact_ctl", "flexible_sact_ft_tau": "flexible_sact_ft",
            "flexible_sact_ctl": "flexible_sact", "flexible_sact_ctl_tau": "flexible_sact_ctl"}
    assert {row: reference_row(row, rows) for row in TABLE_ORDER} == want
    # without a control, a fine-tuned model is tested against its base, and without that against global
    assert reference_row("flexible_ft", {"global", "flexible", "flexible_ft"}) == "flexible"
    assert reference_row("flexible_ft", {"global", "flexible_ft"}) == "global"


def test_a_control_decodes_at_its_own_selected_tau(tmp_path):
    selected = {"flexible": 1.5, "flexible_ft": 2.25, "flexible_ctl": 1.75, "flexible_sact_ft": 2.0}
    assert tau_of("flexible", selected, tmp_path) == 1.5
    assert tau_of("flexible_ft", selected, tmp_path) == 2.25
    assert tau_of("flexible_ctl", selected, tmp_path) == 1.75  # its own, not the fine-tuned model's 2.25
    with pytest.raises(DataError, match=r"no selected tau for flexible_sact_ctl \(add it to sweep_tau.models\)"):
        tau_of("flexible_sact_ctl", selected, tmp_path)  # the fine-tuned model's τ is not borrowed


def test_finetuning_effect_is_finetuned_minus_control():
    refs = ["the cat sat on the mat today", "a dog ran in the park at noon", "birds sing in the tall trees"] * 4
    good, bad = list(refs), ["the cat sat", "a dog", "birds"] * 4
    results = {"flexible_ft": _row(30.0, None, None, None, g_mean=0.5, window=20.0),
               "flexible_ctl": _row(29.0, None, None, None, g_mean=0.4, window=20.0),
               "flexible_ft_tau": _row(28.0, None, None, None, tau=2.0, g_mean=0.5, window=8.0),
               "flexible_ctl_tau": _row(27.5, None, None, None, tau=1.5, g_mean=0.4, window=9.5),  # its own τ
               "flexible_sact_ft": _row(1.0, None, None, None, window=5.0)}  # no control
    hyps = {"flexible_ft": good, "flexible_ctl": bad, "flexible_ft_tau": good, "flexible_ctl_tau": good,
            "flexible_sact_ft": good}
    effect = finetuning_effect(results, hyps, refs, n_samples=200, seed=7)
    assert set(effect) == {"flexible_ft", "flexible_ft_tau"}
    assert effect["flexible_ft"] == {"control": "flexible_ctl", "tau": math.inf, "tau_control": math.inf, "bleu": 1.0,
                                     "g_mean": 0.1, "window": 0.0, "p_value": effect["flexible_ft"]["p_value"]}
    assert effect["flexible_ft"]["p_value"] < 0.05  # whole sentences against fragments
    assert effect["flexible_ft_tau"]["window"] == -1.5
    assert (effect["flexible_ft_tau"]["tau"], effect["flexible_ft_tau"]["tau_control"]) == (2.0, 1.5)
    assert effect["flexible_ft_tau"]["p_value"] == 1.0  # identical hypotheses
    table = render_table({**results, "global": _row(20.0, None, None, None)}, _cfg(), "test", 5, None, effect)
    assert "## Fine-tuning against its control" in table
    assert "| fine-tuned row | τ (fine-tuned / control) | Δ BLEU |" in table
    assert "| Flexible + fine-tuning τ=2 | 2 / 1.5 | +0.50 | 1.000 | +0.1000 | -1.50 |" in table
    assert "| Flexible + fine-tuning τ=∞ | ∞ / ∞ | +1.00 |" in table


def test_no_tau_selected_adds_no_second_comparison_at_tau_inf():
    """Where sweep_tau selected no τ for either model, the _tau rows decode at τ = ∞: the fine-tuned
    model and its control are compared once, at τ = ∞, not a second time under the τ rows' names.
    Where only the control has one, the τ rows are two operating points: compared."""
    refs = ["the cat sat on the mat today", "a dog ran in the park at noon"] * 4
    results = {"flexible_ft": _row(30.0, None, None, None), "flexible_ctl": _row(29.0, None, None, None),
               "flexible_ft_tau": _row(30.0, None, None, None), "flexible_ctl_tau": _row(29.0, None, None, None)}
    hyps = {name: list(refs) for name in results}
    assert set(finetuning_effect(results, hyps, refs, n_samples=100, seed=7)) == {"flexible_ft"}
    results["flexible_ctl_tau"] = _row(28.5, None, None, None, tau=1.5, window=9.0)
    effect = finetuning_effect(results, hyps, refs, n_samples=100, seed=7)
    assert set(effect) == {"flexible_ft", "flexible_ft_tau"}
    assert (effect["flexible_ft_tau"]["tau"], effect["flexible_ft_tau"]["tau_control"]) == (math.inf, 1.5)


def _cfg():
    return OmegaConf.create({"model": {"local_D": 10, "sact_lambda": 2.0}})


def _row(bleu, ci, p, against, tau=math.inf, **extra):
    return {"tau": tau, "window": 20.0, "reduction": 0.25, "bleu": bleu, "chrf": 50.0, "bleu_tok": bleu + 1,
            "ribes": 0.8, "aer": 0.4, "decode_ms": 3.0, "bleu_signature": "nrefs:1|tok:13a",
            "chrf_signature": "nrefs:1|nc:6", "bleu_ci": ci, "p_value": p, "p_value_against": against, **extra}


def test_a_control_trains_its_budget_and_is_not_marked_as_capped():
    budget = {"epochs": 6, "best_epoch": 2, "cap": 6, "stopped": "budget"}
    results = {
        "global": _row(20.0, [19.4, 20.6], None, None, reduction=0.0,
                       training={"epochs": 30, "best_epoch": 30, "cap": 30, "stopped": "cap"}),
        "flexible_ctl": _row(20.2, [19.6, 20.8], 0.4, "global", training=budget),
        "flexible_ctl_tau": _row(20.0, [19.4, 20.6], 0.3, "flexible_ctl", tau=1.2, training=budget),
    }
    table = render_table(results, _cfg(), "test", 5, {"n_samples": 1000, "seed": 1234})
    cells = [line for line in table.splitlines() if line.startswith("| ") and "| 6 (2)" in line]
    assert len(cells) == 2 and not any("‡" in line for line in cells)
    assert "| 30 (30)‡ |" in table and "Every row trained by the stopping rule reached its cap." in table


def test_render_table_shows_interval_dagger_and_footnotes():
    results = {
        "global": _row(20.0, [19.4, 20.52], None, None, reduction=0.0,
                       training={"epochs": 9, "best_epoch": 7, "cap": 30, "stopped": "early stopping"}),
        "local_m": _row(18.0, [17.5, 18.5], 0.001, "global",
                        training={"epochs": 30, "best_epoch": 30, "cap": 30, "stopped": "cap"}),
        "flexible": _row(20.1, [19.5, 20.7], 0.3, "global"),
        "flexible_tau": _row(19.0, [18.4, 19.6], 0.01, "flexible", tau=0.8,
                             decoded_by={"backend": "kernel", "simd": "AVX2", "torch": "2.13.0"}),
    }
    table = render_table(results, _cfg(), "test", 5, {"n_samples": 1000, "seed": 1234})
    lines = table.splitlines()
    head = next(line for line in lines if line.startswith("| model"))
    assert head == ("| model | window | reduction | BLEU | chrF | tok. BLEU | RIBES | AER | epochs (best) "
                    "| ms/sentence (backend) |")
    row = {line.split(" | ")[0][2:]: line for line in lines if line.startswith("| ") and line != head}
    assert "| 20.00 ± 0.56 |" in row["Global"]  # half-width of [19.4, 20.52]
    assert "| 18.00 ± 0.50† |" in row["Local-m (D=10)"]
    assert "| 20.10 ± 0.60 |" in row["Flexible τ=∞"]
    assert "| 19.00 ± 0.60† |" in row["Flexible τ=0.8"]
    assert row["Global"].endswith("| 9 (7) | 3.0 |")  # a result that does not say which backend
    assert row["Local-m (D=10)"].endswith("| 30 (30)‡ | 3.0 |")  # stopped at the cap
    assert row["Flexible τ=0.8"].endswith("| – | 3.0 (kernel) |")  # no training record
    assert "‡ stopped at the cap" in table and "reached its cap" not in table
    assert "| 50.00 |" in row["Global"]  # chrF
    assert "(docs/method.md, Window); reduction against Global." in table
    assert "sacrebleu's paired bootstrap resampling (1000 resamples, seed 1234)" in table
    assert "† Holm-adjusted p < 0.05 (Holm–Bonferroni over the table's 3 comparisons)" in table
    assert "Marked: Global for Local-m (D=10); Flexible τ=∞ for Flexible τ=0.8." in table
    assert "chrF: sacrebleu (nrefs:1|nc:6)" in table and "Moses tokenizer" in table


def test_render_table_without_intervals_keeps_plain_scores():
    results = {"global": _row(20.0, None, None, None, reduction=0.0)}
    table = render_table(results, _cfg(), "dev", 1)
    assert "| 20.00 |" in table and "±" not in table and "†" not in table and "Marked" not in table


# --------------------------------------------------------------------------------------------
# The whole stage on a one-epoch model


@pytest.fixture(scope="module")
def evaluated(smoke_trained, tmp_path_factory):
    """The evaluate stage on the smoke data with one one-epoch flexible checkpoint in every row."""
    path = copy_of(smoke_trained, tmp_path_factory.mktemp("evaluate"))
    for name in NAMES:
        (path / "ck").mkdir(exist_ok=True)
        shutil.copyfile(path / "m/flexible/best.ckpt", path / f"ck/{name}.ckpt")
    (path / "tau.json").write_text(json.dumps({"models": {"flexible": {"selected_tau": 1.0},
                                                          "flexible_ft": {"selected_tau": None}}}))
    result = run_module("flexatt.stages.evaluate", *_overrides("ev"), "evaluate.bootstrap_seed=77", "evaluate.bootstrap_samples=200", cwd=path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return path, result.stdout


NAMES = ("global", "local_m", "local_p", "flexible", "sact", "flexible_sact", "flexible_ft")


def _overrides(out: str) -> list[str]:
    return [*(f"evaluate.checkpoints.{n}=ck/{n}.ckpt" for n in NAMES), "~evaluate.checkpoints.flexible_sact_ft",
            "~evaluate.checkpoints.flexible_ctl", "~evaluate.checkpoints.flexible_sact_ctl",
            "evaluate.tau_rows=[flexible,flexible_ft]", "sweep_tau.out=tau.json", f"evaluate.out={out}/metrics.json",
            f"evaluate.table={out}/table1.md", f"evaluate.translations_dir={out}/tr",
            f"evaluate.by_length_file={out}/by_length.csv", f"evaluate.figures_dir={out}/fig", "logger.enabled=false"]


def test_stage_writes_significance_chrf_and_windows(evaluated):
    path, stdout = evaluated
    report = from_json(json.loads((path / "ev/metrics.json").read_text()))  # τ = ∞: null in the file
    assert report["significance"]["n_samples"] == 200 and report["significance"]["seed"] == 77
    models = report["models"]
    assert set(models) == {"global", "local_m", "local_p", "flexible", "sact", "flexible_sact", "flexible_ft",
                           "flexible_tau", "flexible_ft_tau"}
    for row, m in models.items():
        low, high = m["bleu_ci"]
        assert low <= high and isinstance(m["chrf"], float) and 0 <= m["chrf"] <= 100
        assert m["window_step_weighted"] > 0
        assert m["p_value_against"] == (None if not_selected(row, models) else reference_row(row, models))
        assert (m["p_value"] is None) == (row == "global" or not_selected(row, models))
        # what decoded the row: the same checkpoint everywhere, so the same backend
        assert m["decoded_by"] == models["global"]["decoded_by"]
        assert m["decoded_by"]["torch"] == torch.__version__ and m["decoded_by"]["backend"] in BACKENDS
    # every row decodes the same checkpoint: identical hypotheses, no difference to test
    for row in ("local_m", "flexible", "flexible_ft"):
        assert models[row]["p_value"] == 1.0 and models[row]["bleu_ci"] == models["global"]["bleu_ci"]
    # no τ selected for flexible_ft: its τ row decodes at τ = ∞, its base row again, and is not tested
    # against it (nor counted among the table's comparisons); flexible's (τ = 1) is
    ft_tau = models["flexible_ft_tau"]
    assert math.isinf(ft_tau["tau"]) and ft_tau["p_value"] is None and ft_tau["bleu_ci"] is not None
    assert models["flexible_tau"]["tau"] == 1.0 and models["flexible_tau"]["p_value_against"] == "flexible"
    assert "Holm–Bonferroni over the table's 7 comparisons" in (path / "ev/table1.md").read_text()
    assert "BLEU confidence intervals and p-values (9 rows, 200 resamples)" in stdout
    table = (path / "ev/table1.md").read_text()
    assert "±" in table and "seed 77" in table and "| chrF |" in table
    assert f"({models['global']['decoded_by']['backend']}) |" in table


def test_stage_refuses_a_zero_seed_before_decoding(evaluated, capsys):
    path, _ = evaluated
    code, err = run_inprocess("evaluate", [*_overrides("ev0"), "evaluate.bootstrap_seed=0"], capsys, cwd=path)
    assert code == 2 and "Traceback" not in err
    assert err.strip().splitlines()[-1] == "error: evaluate.bootstrap_seed: must be >= 1 (got 0)"
    assert not (path / "ev0").exists()


def test_the_stage_writes_its_decodes_and_reads_what_sweep_tau_decoded(evaluated):
    """Every row's decode goes to ``evaluate.decodes`` (its records give the row's window and
    BLEU); a (model, split, τ) that ``sweep_tau.decodes`` holds is read from it, not decoded again:
    a stored record with other translations shows through in that row alone."""
    from flexatt.points import read_decodes
    from flexatt.products import pack_json
    from flexatt.decoding.translate import DecodeOptions

    path, _ = evaluated
    options = DecodeOptions(**OmegaConf.to_container(OmegaConf.load(path / "params.yaml").decode))
    stored = read_decodes(path / "artifacts/decodes/evaluate.json.xz", options)
    assert set(stored) == set(NAMES)  # the checkpoint rows, each decoded once per τ
    models = from_json(json.loads((path / "ev/metrics.json").read_text()))["models"]
    for name in NAMES:
        inf = [r for r in stored[name] if math.isinf(r["tau"])]
        assert len(inf) == 1 and (inf[0]["window"], inf[0]["bleu"]) == (models[name]["window"], models[name]["bleu"])
    marked = {**stored["global"][0], "hypotheses": ["marked"] * len(stored["global"][0]["hypotheses"])}
    (path / "sweep.json.xz").write_bytes(pack_json({"beam_size": options.beam_size, "alpha": options.alpha,
                                                    "records": {"global": [marked]}}, "sweep.json.xz"))
    result = run_module("flexatt.stages.evaluate", *_overrides("ev2"), "evaluate.bootstrap_seed=77",
                        "evaluate.bootstrap_samples=200", "sweep_tau.decodes=sweep.json.xz",
                        "evaluate.decodes=ev2/decodes.json.xz", cwd=path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert (path / "ev2/tr/global.test.txt").read_text().split("\n")[:-1] == marked["hypotheses"]
    assert (path / "ev2/tr/local_m.test.txt").read_text() == (path / "ev/tr/local_m.test.txt").read_text()
    (path / "sweep.json.xz").write_bytes(pack_json({"beam_size": options.beam_size + 1, "alpha": options.alpha,
                                                    "records": {}}, "sweep.json.xz"))
    result = run_module("flexatt.stages.evaluate", *_overrides("ev3"), "sweep_tau.decodes=sweep.json.xz", cwd=path)
    assert result.returncode == 2 and f"sweep.json.xz: decoded with beam {options.beam_size + 1}" in result.stderr

"""The compare stage's statistics (flexatt.claims): Holm's correction against hand-computed values,
the paired bootstrap interval of a BLEU difference and the approximate randomisation test on tiny
inputs, the verdict rules on synthetic results, the matched-window search (on a synthetic curve
and on a tiny model), and the stage itself on the smoke pipeline (slow)."""

from __future__ import annotations

import csv
import json
import math
import os

import numpy as np
import pytest
import torch

from flexatt import claims
from flexatt.tau_search import match_window
from flexatt.claims import (adjust, against_paper, bleu_difference, claims_table, compare_pair, holm, not_selected,
                            outcome, repeats_inf, verdict_better, verdict_cut, verdict_effect, verdict_narrowing,
                            verdict_not_worse, verdict_within, windows_match)
from flexatt.metrics import bleu_significance, corpus_bleu

REFS = ["the cat sat on the mat", "a dog ran in the park", "she reads a book at night",
        "we walk to the old town", "the sun is warm today", "he plays the piano well",
        "they drink tea in the morning", "birds sing in the tall trees"]
GOOD = list(REFS[:6]) + ["they drink coffee in the morning", "birds sing in tall trees"]
BAD = ["the cat sat", "a dog ran", "she reads", "we walk to town", "the sun", "he plays well",
       "they drink tea", "birds sing"]


# --------------------------------------------------------------------------------------------
# Holm


def test_holm_matches_hand_computed_values():
    # sorted: 0.005·4 = 0.02, 0.01·3 = 0.03, 0.03·2 = 0.06, 0.04·1 = 0.04 → max(0.06, 0.04) = 0.06
    got = holm({"a": 0.01, "b": 0.04, "c": 0.03, "d": 0.005})
    assert list(got) == ["a", "b", "c", "d"]
    assert got == pytest.approx({"a": 0.03, "b": 0.06, "c": 0.06, "d": 0.02})
    # capped at 1 and monotone: 0.01·3 = 0.03, 0.5·2 = 1.0, 0.6·1 = 0.6 → 1.0
    assert holm({"x": 0.5, "y": 0.6, "z": 0.01}) == pytest.approx({"x": 1.0, "y": 1.0, "z": 0.03})
    assert holm({"p": 0.02, "q": 0.02}) == pytest.approx({"p": 0.04, "q": 0.04})  # ties
    assert holm({"only": 0.03}) == {"only": 0.03}  # a family of one: unchanged
    assert holm({}) == {}


@pytest.mark.parametrize("bad", [1.5, -0.1, float("nan"), None, True])
def test_holm_refuses_a_p_value_outside_0_1_naming_it(bad):
    with pytest.raises(ValueError, match="p-value of 'row7'"):
        holm({"ok": 0.1, "row7": bad})


def test_adjust_corrects_within_each_family_only():
    comps = [{"family": "t1", "p_bs": 0.01, "p_ar": 0.02}, {"family": "t1", "p_bs": 0.04, "p_ar": 0.03},
             {"family": "cmp", "p_bs": 0.04, "p_ar": 0.2}, {"family": "cmp", "p_bs": None, "p_ar": None}]
    adjust(comps, alpha=0.05)
    assert [c["p_bs_holm"] for c in comps] == [0.02, 0.04, 0.04, None]
    assert [c["p_ar_holm"] for c in comps] == [0.04, 0.04, 0.2, None]
    assert [c["family_size"] for c in comps] == [2, 2, 1, 1]
    assert [c["ar_agrees"] for c in comps] == [True, True, False, None]


# --------------------------------------------------------------------------------------------
# Paired tests


def test_bleu_difference_is_the_difference_of_corpus_bleu_with_a_seeded_interval():
    d = bleu_difference(GOOD, BAD, REFS, n_samples=200, seed=7)
    expected = corpus_bleu(GOOD, [REFS])[0] - corpus_bleu(BAD, [REFS])[0]
    assert d["delta"] == pytest.approx(expected, abs=0.006)
    low, high = d["ci"]
    assert low <= d["delta"] <= high and low > 0  # GOOD is better on every resample
    assert bleu_difference(GOOD, BAD, REFS, n_samples=200, seed=7) == d  # seeded
    assert bleu_difference(GOOD, GOOD, REFS, n_samples=50, seed=7) == {"delta": 0.0, "ci": [0.0, 0.0]}
    swapped = bleu_difference(BAD, GOOD, REFS, n_samples=200, seed=7)
    assert swapped["delta"] == -d["delta"] and swapped["ci"] == [-high, -low]


def test_bleu_difference_uses_the_resamples_of_sacrebleus_paired_bootstrap():
    """The same indices as sacrebleu's paired bootstrap for the same seed: A's resampled scores
    (recomputed from the same draw) give sacrebleu's half-width of A's interval, which is centred
    on A's observed BLEU, not on the resamples' mean."""
    from sacrebleu.metrics import BLEU
    from sacrebleu.significance import estimate_ci

    metric = BLEU()
    stats = np.asarray(metric._extract_corpus_statistics(GOOD, [REFS]), dtype=np.float64)
    idx = np.random.default_rng(11).choice(len(REFS), size=(300, len(REFS)), replace=True)
    mean, ci = estimate_ci(np.array([metric._compute_score_from_stats(list(stats[i].sum(0))).score for i in idx]))
    sig = bleu_significance({"A": GOOD, "B": BAD}, REFS, {"A": "B", "B": None}, n_samples=300, seed=11)
    observed = corpus_bleu(GOOD, [REFS])[0]
    assert sig["A"]["bleu_ci"] == [round(observed - ci, 2), round(observed + ci, 2)]
    assert round(mean - ci, 2) != sig["A"]["bleu_ci"][0]  # sacrebleu's own centre, the resamples' mean


def test_bleu_difference_names_a_length_mismatch():
    with pytest.raises(ValueError, match=r"hypotheses of A \(7\) and B \(8\) as references \(8\)"):
        bleu_difference(GOOD[:7], BAD, REFS)


def test_approximate_randomisation_is_sacrebleus_with_the_seed_restored(monkeypatch):
    from sacrebleu.metrics import BLEU
    from sacrebleu.significance import PairedTest

    monkeypatch.setenv("SACREBLEU_SEED", "99")
    got = bleu_significance({"A": GOOD, "B": BAD}, REFS, {"A": "B", "B": None}, n_samples=500, seed=5, test="ar")
    assert os.environ["SACREBLEU_SEED"] == "99"
    monkeypatch.setenv("SACREBLEU_SEED", "5")
    _, scores = PairedTest([("B", BAD), ("A", GOOD)], {"BLEU": BLEU()}, [REFS], test_type="ar", n_samples=500)()
    assert got["A"]["p_value"] == round(scores["BLEU"][1].p_value, 4)
    assert got["A"]["p_value_against"] == "B" and got["A"]["bleu_ci"] is None and got["B"]["bleu_ci"] is None
    same = bleu_significance({"A": GOOD, "B": GOOD}, REFS, {"A": "B", "B": None}, n_samples=100, test="ar")
    assert same["A"]["p_value"] == 1.0  # equal BLEU: no evidence of a difference
    with pytest.raises(ValueError, match="test must be 'bs'"):
        bleu_significance({"A": GOOD}, REFS, {"A": None}, test="t")


def test_compare_pair_reports_both_tests_and_both_intervals():
    c = compare_pair(GOOD, BAD, REFS, n_samples=200, seed=3, ar_trials=300)
    assert set(c) == {"bleu_a", "bleu_b", "ci_a", "ci_b", "delta", "ci", "p_bs", "p_ar"}
    assert c["bleu_a"] > c["bleu_b"] and c["delta"] > 0
    assert 0 < c["p_bs"] <= 1 and 0 < c["p_ar"] <= 1
    assert c["ci_a"][0] <= c["ci_a"][1] and c["ci_b"][0] <= c["ci_b"][1]


# --------------------------------------------------------------------------------------------
# Verdicts


@pytest.mark.parametrize("ci, p, better, not_worse, pair", [
    ([0.4, 1.6], 0.01, "holds", "holds", "better"),
    ([-0.2, 2.2], 0.20, "inconclusive", "holds", "equal"),
    ([-1.6, -0.4], 0.01, "fails", "fails", "worse"),
    ([-1.9, -0.1], 0.20, "inconclusive", "inconclusive", "equal"),
    ([-0.4, 0.4], 0.01, "inconclusive", "holds", "equal"),
    # the bootstrap p reads one tail: p < α while the 95% interval still contains 0
    ([-0.40, 5.10], 0.048, "inconclusive", "holds", "equal"),
    ([-5.10, 0.40], 0.048, "inconclusive", "inconclusive", "equal"),
    # a tiny gain whose interval allows a loss beyond the margin: not shown to be "≥"
    ([-1.6, 1.5], 0.98, "inconclusive", "inconclusive", "equal"),
    # significantly worse, even within the margin: "≥" fails
    ([-0.45, -0.15], 0.01, "fails", "fails", "worse"),
])
def test_the_verdict_rules(ci, p, better, not_worse, pair):
    assert verdict_better(ci, p, 0.05) == better
    assert verdict_not_worse(ci, p, 0.05, 0.5) == not_worse
    assert outcome(ci, p, 0.05) == pair


@pytest.mark.parametrize("ci, verdict", [([1.2, 3.0], "holds"), ([0.1, 0.5], "fails"), ([2.1, 3.0], "fails"),
                                         ([-0.5, 2.5], "inconclusive")])
def test_a_papers_effect_is_read_from_the_interval(ci, verdict):
    assert verdict_effect(ci, 2.0) == verdict


def test_sacrebleus_bootstrap_p_can_fall_below_alpha_while_the_interval_contains_zero():
    """Real sacrebleu tests of two random systems (one keeps 70% of the reference words, the other
    64%): within a few draws the bootstrap p is below 0.05 while the 95% interval of Δ (the same
    resamples) contains 0, its one-tailed reading; the verdict there is inconclusive."""
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(30)]
    refs = [" ".join(rng.choice(words, 8)) for _ in range(80)]

    def noisy(keep):
        return [" ".join(w if rng.random() < keep else rng.choice(words) for w in r.split()) for r in refs]

    for _ in range(6):
        a, b = noisy(0.70), noisy(0.64)
        p = bleu_significance({"A": a, "B": b}, [refs], {"A": "B", "B": None}, n_samples=1000, seed=1)["A"]["p_value"]
        ci = bleu_difference(a, b, refs, n_samples=1000, seed=1)["ci"]
        if p < 0.05 and ci[0] <= 0 <= ci[1]:
            break
    else:
        pytest.fail("no draw with p < 0.05 and an interval containing 0")
    assert verdict_better(ci, p, 0.05) == "inconclusive" and outcome(ci, p, 0.05) == "equal"


@pytest.mark.parametrize("window, target, match", [(10.0, 10.0, True), (10.9, 10.0, True), (11.2, 10.0, False),
                                                   (8.9, 10.0, False)])
def test_a_match_is_a_dev_window_within_ten_percent(window, target, match):
    assert windows_match(window, target) is match


@pytest.mark.parametrize("ci, verdict", [([-0.4, 0.3], "holds"), ([-0.5, 0.3], "holds"),
                                         ([-0.9, -0.1], "inconclusive"), ([-1.2, -0.6], "fails")])
def test_within_margin_reads_the_interval(ci, verdict):
    assert verdict_within(ci, 0.5) == verdict


def _row(window, bleu, tau=math.inf, g=None):
    return {"window": window, "bleu": bleu, "tau": tau, "g_mean": g}


def _comp(a, b, delta, ci, p, family="table1"):
    return {"a": a, "b": b, "family": family, "delta": delta, "ci": ci, "p_bs_holm": p, "p_ar_holm": p,
            "ar_agrees": True}


ROWS = {"global": _row(35.0, 17.0), "flexible": _row(35.0, 18.3), "local_p": _row(17.0, 12.1),
        "sact": _row(35.0, 17.6), "flexible_ft": _row(35.0, 19.1, g=0.30),
        "flexible_ft_tau": _row(10.5, 18.6, tau=2.4, g=0.31), "flexible_ctl": _row(35.0, 19.0, g=0.20),
        "flexible_ctl_tau": _row(16.0, 18.9, tau=1.8, g=0.21)}  # the control at its own selected τ
COMPS = [_comp("flexible", "global", 1.3, [0.6, 2.0], 0.004),
         _comp("flexible_ft_tau", "flexible_ft", -0.5, [-0.9, -0.1], 0.02),
         _comp("local_p", "global", -5.1, [-5.9, -4.3], 0.004),
         _comp("sact", "global", 0.6, [-0.1, 1.3], 0.09),
         _comp("flexible_ft_tau", "flexible_ctl_tau", -0.3, [-0.45, -0.1], 0.04, "compare"),
         _comp("flexible_ft", "flexible_ctl", 0.1, [-0.2, 0.4], 0.6, "compare"),
         _comp("flexible@local_m", "local_m", 1.0, [0.2, 1.8], 0.01, "compare")]
MATCHED = [{"model": "flexible", "local": "local_m", "D": 10, "outcome": "better"},
           {"model": "flexible_ft", "local": "local_m", "D": 10, "outcome": "equal"}]


def test_the_claims_table_on_synthetic_results():
    table = {c["id"]: c for c in claims_table(ROWS, COMPS, MATCHED, alpha=0.05, margin=0.5)}
    assert [c["id"] for c in claims.CLAIMS] == list(table)
    assert table["a"]["verdict"] == "holds" and table["a"]["effect"] == 1.3 and table["a"]["p"] == 0.004
    # 70% fewer positions, but the loss's interval reaches past 0.5 BLEU; the paper's 56–64% lies below 70%
    b = table["b"]
    assert b["verdict"] == "inconclusive" and b["rule"] == "within+cut" and b["cut"] == pytest.approx(0.7)
    assert b["paper_cut"] == "below" and "70% of positions cut" in b["detail"] and "56–64% below ours" in b["detail"]
    assert "56" not in b["claim"].split("(")[0]  # the paper's figure is reported, not claimed
    c = table["c"]  # each at its own τ: 10.5 against 16.0 positions (−34%), within 0.5 BLEU
    assert c["verdict"] == "holds" and c["tau"] == [2.4, 1.8] and c["window_change"] == pytest.approx(-0.3438)
    assert "each at its own τ, 2.4 vs 1.8" in c["detail"] and "(-34.4%, narrower: ≤ −5%)" in c["detail"]
    assert c["at_inf"]["effect"] == 0.1 and "mean g_t 0.310 vs 0.210" in c["detail"]
    assert table["c+sact"]["verdict"] == "not measured"
    assert set(table["c+sact"]["missing"]) == {"flexible_sact_ft_tau", "flexible_sact_ctl_tau"}
    assert table["d"]["verdict"] == "fails"  # local-p significantly below Global
    assert table["e"]["verdict"] == "inconclusive"  # p 0.09
    assert table["e2"]["verdict"] == "fails" and "outside the CI" in table["e2"]["detail"]  # +2 above [−0.1, 1.3]
    assert table["f"]["verdict"] == "inconclusive"
    assert table["f"]["outcomes"] == {"better": 1, "equal": 1, "worse": 0, "not matched": 0}


def test_claim_verdicts_move_with_the_evidence():
    rows = {**ROWS, "flexible_ft_tau": _row(20.0, 18.6, tau=2.4), "flexible_ctl_tau": _row(18.0, 18.9, tau=2.4)}
    comps = [_comp("flexible", "global", -0.8, [-1.4, -0.2], 0.01), _comp("sact", "global", 2.1, [1.2, 3.0], 0.001),
             _comp("flexible_ft_tau", "flexible_ft", -0.2, [-0.4, 0.1], 0.3),
             _comp("flexible_ft_tau", "flexible_ctl_tau", -0.3, [-0.4, -0.1], 0.04, "compare")]
    table = {c["id"]: c for c in claims_table(rows, comps, [], alpha=0.05, margin=0.5)}
    assert table["a"]["verdict"] == "fails"  # flexible significantly below Global
    assert table["b"]["verdict"] == "fails"  # 43% fewer positions within the margin: less than half
    assert table["c"]["verdict"] == "fails"  # wider than the control
    assert table["d"]["verdict"] == "not measured"  # no comparison of local_p
    assert table["e"]["verdict"] == "holds"
    assert table["e2"]["verdict"] == "holds" and "inside the CI" in table["e2"]["detail"]
    assert table["f"]["verdict"] == "not measured"
    worse = [*MATCHED, {"model": "flexible", "local": "local_p", "D": 10, "outcome": "worse"}]
    assert {c["id"]: c for c in claims_table(rows, comps, worse)}["f"]["verdict"] == "fails"
    better = [{**m, "outcome": "better"} for m in MATCHED]
    assert {c["id"]: c for c in claims_table(rows, comps, better)}["f"]["verdict"] == "holds"


def test_pairs_whose_windows_did_not_match_are_left_out_of_claim_f():
    pairs = [*MATCHED, {"model": "flexible", "local": "local_p", "D": 10, "outcome": "not matched"}]
    f = {c["id"]: c for c in claims_table(ROWS, COMPS, pairs)}["f"]
    assert f["verdict"] == "inconclusive" and f["outcomes"]["not matched"] == 1 and "1 not matched" in f["detail"]
    better = [{**m, "outcome": "better"} for m in MATCHED] + [pairs[-1]]
    assert {c["id"]: c for c in claims_table(ROWS, COMPS, better)}["f"]["verdict"] == "holds"
    none = [{**m, "outcome": "not matched"} for m in MATCHED]
    assert {c["id"]: c for c in claims_table(ROWS, COMPS, none)}["f"]["verdict"] == "not measured"


def test_fine_tuning_is_not_judged_where_no_tau_was_selected():
    """Without a selected τ for either model both _tau rows decode at τ = ∞, where the windows are
    equal by construction: claims b and c are not measured, not failed."""
    rows = {**ROWS, "flexible_ft_tau": _row(35.0, 19.1, tau=math.inf), "flexible_ctl_tau": _row(35.0, 19.0, tau=math.inf)}
    table = {c["id"]: c for c in claims_table(rows, COMPS, MATCHED)}
    # b: the τ row is the τ = ∞ row again, a cut of 0% judged against itself
    assert table["b"]["verdict"] == "not measured"
    assert table["b"]["missing"] == ["a selected τ for flexible_ft (sweep_tau kept none within its tolerance)"]
    assert table["c"]["verdict"] == "not measured"
    assert table["c"]["missing"] == ["a selected τ for flexible_ft or flexible_ctl (sweep_tau kept none within its "
                                     "tolerance)"]
    assert table["a"]["verdict"] != "not measured"


def test_c_compares_a_model_without_a_selected_tau_at_tau_inf_its_own_operating_point():
    """Only the control kept a τ: the fine-tuned model scores every position at its own operating
    point, a wider window than the control's, so fine-tuning did not narrow it."""
    rows = {**ROWS, "flexible_ft_tau": _row(35.0, 19.1, tau=math.inf)}
    c = {c["id"]: c for c in claims_table(rows, COMPS, MATCHED)}["c"]
    assert c["verdict"] == "fails" and c["tau"] == [math.inf, 1.8] and "each at its own τ, ∞ vs 1.8" in c["detail"]
    assert repeats_inf("flexible_ft_tau", "flexible_ft", rows)  # b: a system against itself
    assert not repeats_inf("flexible_ft_tau", "flexible_ctl_tau", rows)  # c: two operating points
    rows["flexible_ctl_tau"] = _row(35.0, 19.0, tau=math.inf)
    assert repeats_inf("flexible_ft_tau", "flexible_ctl_tau", rows)  # the τ = ∞ pair again


def test_a_tau_row_without_a_selected_tau_is_the_tau_inf_row_again():
    rows = {"flexible_ft": _row(35.0, 19.1), "flexible_ft_tau": _row(35.0, 19.1, tau=math.inf),
            "flexible_ctl_tau": _row(12.0, 19.0, tau=2.0)}
    assert [not_selected(r, rows) for r in ("flexible_ft", "flexible_ft_tau", "flexible_ctl_tau", "absent_tau")] \
        == [False, True, False, False]


def test_nothing_measured_is_not_an_error():
    table = claims_table({"global": _row(30.0, 15.0)}, [], [])
    assert {c["verdict"] for c in table} == {"not measured"}


# --------------------------------------------------------------------------------------------
# Matched windows


def test_match_window_bisects_inside_the_known_bracket():
    calls = []

    def point(tau):  # window grows with τ: 3·sqrt(τ) + 1
        calls.append(tau)
        return {"tau": tau, "window": round(3 * math.sqrt(tau) + 1, 4), "bleu": 10.0}

    known = [{"tau": t, "window": 3 * math.sqrt(t) + 1, "bleu": 10.0} for t in (0.8, 1.0, 1.2, 1.6)]
    known.append({"tau": math.inf, "window": 30.0, "bleu": 11.0})
    target = 3 * math.sqrt(1.1) + 1
    match, new = match_window(point, known, target, steps=8)
    assert all(1.0 < t < 1.2 for t in calls) and len(calls) == len(new) <= 8
    assert match["window"] == pytest.approx(target, abs=0.01)


def test_match_window_widens_the_bracket_both_ways():
    point = lambda tau: {"tau": tau, "window": 2 * tau + 1, "bleu": 0.0}  # noqa: E731
    known = [{"tau": 1.0, "window": 3.0, "bleu": 0.0}]
    low, new = match_window(point, known, 1.5, steps=10)  # below every known window: τ / 4 first
    assert new[0]["tau"] == 0.25 and low["window"] == pytest.approx(1.5, abs=0.02)
    high, new = match_window(point, known, 20.0, steps=10)  # above: τ · 4 until reached
    assert [p["tau"] for p in new[:2]] == [4.0, 16.0] and high["window"] == pytest.approx(20.0, abs=0.1)
    inf, new = match_window(point, [{"tau": math.inf, "window": 5.0, "bleu": 0.0}], 5.0, steps=0)
    assert math.isinf(inf["tau"])  # τ = ∞ already has the window


def test_match_window_on_a_tiny_model_matches_a_fixed_window(single_thread):
    """A tiny flexible model decoded for real: the τ found gives the mean window of a local-m
    model with D = 1 on the same sentences, within the resolution of the bisection."""
    from flexatt.data.subwords import EncodedSplit
    from flexatt.decoding.translate import DecodeOptions, translate_split
    from flexatt.model import build_model

    class Ids:
        def decode(self, rows):
            return [" ".join(map(str, r)) for r in rows]

    rng = np.random.default_rng(0)
    src = [rng.integers(4, 16, rng.integers(6, 14)).tolist() for _ in range(12)]
    split = EncodedSplit.from_lists(src, [[5]] * len(src))
    sizes = {"emb_size": 8, "hidden_size": 8, "att_size": 8, "readout_size": 8, "dropout": 0.0}
    torch.manual_seed(0)
    local = build_model({**sizes, "attention": "local_m", "local_D": 1}, 16, 16).eval()
    target = translate_split(local, split, Ids(), DecodeOptions(max_len_ratio=1.0, backend="eager")).mean_window
    torch.manual_seed(0)
    flexible = build_model({**sizes, "attention": "flexible"}, 16, 16).eval()

    def point(tau):
        out = translate_split(flexible, split, Ids(), DecodeOptions(max_len_ratio=1.0, tau=tau))
        return {"tau": tau, "window": out.mean_window, "bleu": 0.0}

    known = [point(t) for t in (0.8, 1.6, math.inf)]
    match, new = match_window(point, known, target, steps=10)
    assert 2.0 < target < 3.0  # 2D + 1 = 3 positions, fewer at the sentence ends
    assert match["window"] == pytest.approx(target, abs=0.1), (target, match, new)
    assert point(match["tau"])["window"] == match["window"]  # the same decode again


# --------------------------------------------------------------------------------------------
# The stage


def test_local_rows_read_D_from_the_params_not_the_name(root):
    from flexatt import schema
    from flexatt.config import compose
    from flexatt.stages.compare import local_rows

    p = schema.validate(compose(["+variants.local_m_d2={attention: local_m, local_D: 2}",
                                 "+variants.wide={attention: local_p, local_D: 25}"], config_dir=root / "conf"))
    rows = {name: {} for name in ("global", "local_m", "local_p", "local_m_d2", "wide", "flexible_ft", "local_m_tau")}
    assert local_rows(p, rows) == {"local_m": {"attention": "local_m", "D": 10},
                                   "local_p": {"attention": "local_p", "D": 10},
                                   "local_m_d2": {"attention": "local_m", "D": 2},
                                   "wide": {"attention": "local_p", "D": 25}}


def test_stale_or_missing_translations_are_refused_naming_the_file(tmp_path):
    from flexatt.errors import DataError
    from flexatt.stages.compare import read_translations

    (tmp_path / "good.test.txt").write_text("\n".join(GOOD) + "\n", encoding="utf-8")
    bleu = round(corpus_bleu(GOOD, [REFS])[0], 2)
    assert read_translations({"good": {"bleu": bleu}}, tmp_path, "test", REFS) == {"good": GOOD}
    with pytest.raises(DataError, match=r"good\.test\.txt: scores .* where results/metrics\.json has 1\.00"):
        read_translations({"good": {"bleu": 1.0}}, tmp_path, "test", REFS)
    with pytest.raises(DataError, match=r"other\.test\.txt: not found \(run the evaluate stage first\)"):
        read_translations({"other": {"bleu": 1.0}}, tmp_path, "test", REFS)
    with pytest.raises(DataError, match=r"good\.test\.txt: has 8 lines for 7 test references"):
        read_translations({"good": {"bleu": bleu}}, tmp_path, "test", REFS[:7])


def test_the_stage_names_a_missing_metrics_file(smoke_dir, capsys):
    from conftest import run_inprocess

    code, err = run_inprocess("compare", ["logger.enabled=false"], capsys, cwd=smoke_dir)
    assert code == 2 and err.strip() == "error: results/metrics.json: not found (run the evaluate stage first)"


def check_compare_outputs(copy, results: str = "results") -> None:
    """What the compare stage leaves in a pipeline run of the smoke profile (``copy``; its
    results under ``results``)."""
    report = json.loads((copy / results / "compare.json").read_text())
    verdicts = report["verdicts"]
    assert set(verdicts) == {c["id"] for c in claims.CLAIMS}
    assert set(verdicts.values()) <= {"holds", "fails", "inconclusive", "not measured"}
    assert {"a", "d", "e"} <= {k for k, v in verdicts.items() if v != "not measured"}
    pairs = {(m["model"], m["local"]) for m in report["matched"]}
    assert pairs == {(f, l) for f in ("flexible", "flexible_ft") for l in ("local_m", "local_p")}
    for m in report["matched"]:
        assert m["D"] == 3  # the smoke profile's model.local_D
        assert abs(m["dev"]["window"] - m["dev"]["target"]) < 0.5
        assert m["outcome"] in ("better", "equal", "worse", "not matched") and 0 < m["p"] <= 1 and 0 < m["p_ar"] <= 1
    table1 = report["table1"]
    metrics = json.loads((copy / results / "metrics.json").read_text())["models"]
    assert set(table1) == {r for r, m in metrics.items() if m.get("p_value_against")}
    for row, t in table1.items():
        assert t["p_bs"] == metrics[row]["p_value"]  # the resamples of Table 1
        assert t["p_value"] <= t["p_bs_holm"] <= 1 and t["family_size"] == len(table1)
    curve = (copy / results / "plots/matched_window.csv").read_text().splitlines()
    assert curve[0] == "model,kind,split,tau,window,bleu,ci_low,ci_high"
    assert any(line.startswith("flexible,curve,") for line in curve) and any(",fixed," in line for line in curve)
    points = list(csv.DictReader(curve))
    assert all(r["ci_low"] and r["ci_high"] for r in points if r["kind"] == "curve")  # every τ point, with its CI
    assert (copy / results / "figures/matched_window.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = (copy / results / "compare.md").read_text()
    for heading in ("## Claims", "## Matched windows", "## Table 1 comparisons, Holm-adjusted"):
        assert heading in md
    from wandb_records import find_runs

    runs = [r for r in find_runs(copy / "wandb") if r["run"].job_type == "compare"]
    assert any({f"claims/{k}": v for k, v in verdicts.items()}.items() <= r["summary"].items() for r in runs)


@pytest.mark.slow
def test_the_compare_stage_on_the_smoke_pipeline(smoke_copy):
    copy, _ = smoke_copy
    check_compare_outputs(copy, "results/smoke")


def test_a_window_a_hair_smaller_than_the_controls_is_not_a_narrowing():
    from flexatt.claims import MIN_NARROWING

    rows = {**ROWS, "flexible_ft_tau": _row(9.808, 18.6, tau=2.3), "flexible_ctl_tau": _row(9.829, 18.7, tau=2.3)}
    comps = [c for c in COMPS if (c["a"], c["b"]) != ("flexible_ft_tau", "flexible_ctl_tau")] + \
        [_comp("flexible_ft_tau", "flexible_ctl_tau", -0.1, [-0.3, 0.1], 0.5, "compare")]
    table = {c["id"]: c for c in claims_table(rows, comps, [])}
    assert table["c"]["verdict"] == "fails" and "(-0.2%, narrower: ≤ −5%)" in table["c"]["detail"]
    rows["flexible_ft_tau"] = _row(9.829 * (1 - MIN_NARROWING), 18.6, tau=2.3)
    assert {c["id"]: c for c in claims_table(rows, comps, [])}["c"]["verdict"] == "holds"


# --------------------------------------------------------------------------------------------
# The rules the default pipeline shares with the units' claims (flexatt.unit_claims)


@pytest.mark.parametrize("within, cut, verdict", [
    ("holds", (0.56, 0.56), "holds"),  # one model: its cut, the point twice
    ("holds", (0.4, 0.4), "fails"),  # 40% cut: less than the half the rule requires
    ("holds", (0.45, 0.62), "inconclusive"),  # an interval over seeds across one half
    ("inconclusive", (0.7, 0.7), "inconclusive"),  # a wide BLEU interval decides, whatever the cut
    ("fails", (0.7, 0.7), "fails"),
    ("holds", (0.0, 0.0), "fails"),  # nothing cut
    ("holds", (-0.1, 0.3), "fails"),  # an interval over seeds below the half
])
def test_claim_b_needs_half_the_positions_cut(within, cut, verdict):
    """One rule for the default profile's one model and the units' seeds."""
    assert verdict_cut(within, cut) == verdict


@pytest.mark.parametrize("within, change, verdict", [
    ("holds", (-0.10, -0.10), "holds"),
    ("holds", (-0.05, -0.05), "holds"),  # exactly 5% fewer positions counts
    ("holds", (-0.03, -0.03), "fails"),  # narrowed 3%: not by 5%
    ("holds", (0.02, 0.02), "fails"),
    ("holds", (-0.12, -0.02), "inconclusive"),  # an interval over seeds across −5%
    ("inconclusive", (-0.10, -0.10), "inconclusive"),
    ("fails", (-0.10, -0.10), "fails"),
])
def test_verdict_narrowing(within, change, verdict):
    assert verdict_narrowing(within, change) == verdict


@pytest.mark.parametrize("figure, where", [(0.7, "below"), (0.6, "inside"), (0.4, "above"), (0.64, "inside"),
                                           ((0.5, 0.57), "inside"), ((0.65, 0.8), "below"), ((0.2, 0.5), "above")])
def test_against_paper_says_where_the_papers_range_lies(figure, where):
    assert against_paper(figure, (0.56, 0.64)) == where


def test_b_with_a_wide_interval_is_inconclusive_and_a_cut_under_half_fails():
    rows = {**ROWS, "flexible_ft_tau": _row(14.0, 18.9, tau=2.4)}  # 60% of 35 positions cut
    others = [c for c in COMPS if c["b"] != "flexible_ft"]
    wide = [*others, _comp("flexible_ft_tau", "flexible_ft", -0.2, [-0.9, 0.5], 0.6)]
    b = {c["id"]: c for c in claims_table(rows, wide, MATCHED)}["b"]
    assert b["cut"] == pytest.approx(0.6) and b["verdict"] == "inconclusive"  # the margin inside the interval
    narrow = [*others, _comp("flexible_ft_tau", "flexible_ft", -0.2, [-0.4, 0.1], 0.3)]
    b = {c["id"]: c for c in claims_table(rows, narrow, MATCHED)}["b"]
    assert b["verdict"] == "holds" and b["paper_cut"] == "inside"  # the paper's 56–64%, reported only
    rows["flexible_ft_tau"] = _row(21.0, 18.9, tau=2.4)  # 40% cut within the margin: less than half
    b = {c["id"]: c for c in claims_table(rows, narrow, MATCHED)}["b"]
    assert b["verdict"] == "fails" and "at least 50%" in b["detail"]
    rows["flexible_ft_tau"] = _row(35.0, 18.9, tau=9.0)  # a selected τ that cuts nothing
    assert {c["id"]: c for c in claims_table(rows, narrow, MATCHED)}["b"]["verdict"] == "fails"


def test_c_reads_each_model_at_its_own_tau_and_fails_a_3_percent_narrowing():
    """The control's _tau row is decoded at the control's own τ (its window at that τ); the
    fine-tuned curve shifted so that its own τ gives 3% fewer positions fails, 10% holds."""
    comps = [c for c in COMPS if c["b"] != "flexible_ctl_tau"] + \
        [_comp("flexible_ft_tau", "flexible_ctl_tau", -0.1, [-0.3, 0.1], 0.5, "compare")]
    for window, verdict in ((0.97 * 16.0, "fails"), (0.90 * 16.0, "holds")):
        rows = {**ROWS, "flexible_ft_tau": _row(window, 18.8, tau=2.6, g=0.31)}
        c = {c["id"]: c for c in claims_table(rows, comps, MATCHED)}["c"]
        assert c["verdict"] == verdict, window
        assert c["tau"] == [2.6, 1.8] and c["window"] == [window, 16.0]


def test_f_counts_only_the_fixed_windows_of_the_verdict():
    """A D = 2 window that beats flexible is reported, outside the verdict; D = 5 and 10 decide."""
    from flexatt.claims import VERDICT_WINDOWS

    assert VERDICT_WINDOWS == (5, 10)
    pairs = [{"model": "flexible", "local": "local_m_d5", "D": 5, "outcome": "better"},
             {"model": "flexible", "local": "local_m", "D": 10, "outcome": "better"},
             {"model": "flexible", "local": "local_m_d2", "D": 2, "outcome": "worse"}]
    f = {c["id"]: c for c in claims_table(ROWS, COMPS, pairs)}["f"]
    assert f["verdict"] == "holds" and f["outcomes"] == {"better": 2, "equal": 0, "worse": 0, "not matched": 0}
    assert f["pairs"] == 3 and f["outside_verdict"] == 1
    assert "outside the verdict: flexible vs local_m_d2 (D=2): worse" in f["detail"]
    only = {c["id"]: c for c in claims_table(ROWS, COMPS, pairs[2:])}["f"]
    assert only["verdict"] == "not measured"
    assert only["missing"] == ["a matched pair with a fixed window of D = 5 or 10"]


def test_the_report_marks_matched_pairs_outside_the_verdict():
    from flexatt.stages.compare import render

    pair = {"model": "flexible", "tau": 0.5, "dev": {"window": 5.1, "target": 5.0},
            "test": {"window": 5.2, "window_local": 5.0, "bleu": 18.0, "bleu_local": 19.0}, "delta": -1.0,
            "ci": [-1.5, -0.5], "p": 0.01, "p_ar": 0.01, "outcome": "worse"}
    report = {"split": "test", "alpha": 0.05, "margin": 0.5, "bootstrap": {"n_samples": 1000, "seed": 1},
              "ar": {"n_trials": 100}, "claims": claims_table(ROWS, COMPS, []), "table1": {},
              "matched": [{**pair, "local": "local_m_d2", "D": 2}, {**pair, "local": "local_m", "D": 10}]}
    lines = render(report).splitlines()
    assert any(line.startswith("| flexible | local_m_d2 (D=2) |") and line.endswith("| worse (outside the verdict) |")
               for line in lines)
    assert any(line.startswith("| flexible | local_m (D=10) |") and line.endswith("| worse |") for line in lines)


def test_paired_tests_skip_only_a_repeat_of_a_test_at_tau_inf():
    from flexatt.stages.compare import paired_tests

    rows = {"flexible_ft": _row(35.0, 19.1), "flexible_ctl": _row(35.0, 19.0),
            "flexible_ft_tau": _row(35.0, 19.1, tau=math.inf), "flexible_ctl_tau": _row(12.0, 18.0, tau=1.8)}
    hyps = {"flexible_ft": GOOD, "flexible_ctl": BAD, "flexible_ft_tau": GOOD, "flexible_ctl_tau": BAD}
    done = {(c["a"], c["b"]) for c in paired_tests(rows, hyps, [], REFS, seed=1, n_samples=20, trials=20, alpha=0.05)}
    assert ("flexible_ft_tau", "flexible_ctl_tau") in done  # c: the control at its own τ
    assert ("flexible_ft_tau", "flexible_ft") not in done  # b: the fine-tuned model against itself
    rows["flexible_ctl_tau"] = _row(35.0, 19.0, tau=math.inf)
    done = {(c["a"], c["b"]) for c in paired_tests(rows, hyps, [], REFS, seed=1, n_samples=20, trials=20, alpha=0.05)}
    assert done == {("flexible_ft", "flexible_ctl")}  # the τ = ∞ pair, once

"""flexatt.seeds: the headline comparisons paired by training seed (t-test, Holm)."""

from __future__ import annotations

import math

import pytest

from flexatt import seeds
from flexatt.errors import ConfigError


def job(status="COMPLETED", **figures):
    return {"status": status, **figures}


def test_a_paired_comparison_matches_the_t_distribution_by_hand():
    """Differences 1, 1.5, 1: mean 7/6, sd √(1/12), t = 7 on 2 degrees of freedom, whose CDF is
    1/2 + t / (2 √(2 + t²)); the 95% quantile of t(2) is 4.302653."""
    rows = [job(flexible_bleu=20.0, global_bleu=19.0), job(flexible_bleu=21.0, global_bleu=19.5),
            job(flexible_bleu=22.0, global_bleu=21.0)]
    [c] = seeds.paired(rows, [("flexible_bleu", "global_bleu", "F − G")])
    sd = math.sqrt(1 / 12)
    assert c["n"] == 3 and c["diffs"] == [1.0, 1.5, 1.0]
    assert c["mean"] == pytest.approx(7 / 6) and c["sd"] == pytest.approx(sd)
    assert c["p"] == pytest.approx(2 * (0.5 - 7 / (2 * math.sqrt(51))), rel=1e-9)
    half = 4.302652729911275 * sd / math.sqrt(3)
    assert c["ci"] == pytest.approx([7 / 6 - half, 7 / 6 + half], rel=1e-9)
    assert c["p_holm"] == pytest.approx(c["p"])  # a family of one


def test_only_completed_jobs_with_both_figures_count_and_p_is_holm_adjusted_across_pairs():
    rows = [job(a=3.0, b=1.0, c=1.0), job(a=4.0, b=1.5, c=2.0), job(a=5.0, b=2.5, c=2.0),
            job("FAILED", a=100.0, b=0.0, c=0.0), job(a=None, b=1.0, c="")]
    first, second, empty = seeds.paired(rows, [("a", "b", "a − b"), ("a", "c", "a − c"), ("a", "z", "none")])
    assert first["n"] == second["n"] == 3 and empty["n"] == 0 and empty["mean"] is None
    assert empty["p"] is None and empty["p_holm"] is None
    low, high = sorted([first, second], key=lambda c: c["p"])
    assert low["p_holm"] == pytest.approx(min(1.0, 2 * low["p"]))
    assert high["p_holm"] == pytest.approx(min(1.0, max(2 * low["p"], high["p"])))


def test_equal_differences_and_a_single_job_give_no_p():
    [steady] = seeds.paired([job(a=2.0, b=1.0), job(a=3.0, b=2.0)], [("a", "b", "a − b")])
    assert steady["mean"] == 1.0 and steady["sd"] == 0.0 and steady["p"] is None
    [single] = seeds.paired([job(a=2.0, b=1.0)], [("a", "b", "a − b")])
    assert single["n"] == 1 and single["sd"] is None and single["ci"] is None and single["p"] is None


def test_the_markdown_leaves_out_what_no_job_measured():
    results = seeds.paired([job(a=2.0, b=1.0), job(a=3.5, b=2.0)], [("a", "b", "a − b"), ("a", "z", "never")])
    text = seeds.markdown(results)
    assert "| a − b | 2 | +1.25 ± 0.35 |" in text and "never" not in text


def test_a_job_without_a_selected_tau_is_left_out_of_the_pairs_at_tau():
    """Without a selected τ a job decodes its τ rows at τ = ∞: their difference from τ = ∞ is 0
    by construction, so that job is not a measurement of the pairs at τ."""
    rows = [job(flexible_ft_tau_bleu=19.0, flexible_ft_bleu=20.0, flexible_bleu=20.0, global_bleu=19.0, selected_tau=1.2),
            job(flexible_ft_tau_bleu=19.5, flexible_ft_bleu=20.0, flexible_bleu=21.0, global_bleu=19.5, selected_tau=1.4),
            job(flexible_ft_tau_bleu=20.0, flexible_ft_bleu=20.0, flexible_bleu=20.5, global_bleu=19.0, selected_tau=None)]
    at_tau, at_inf = seeds.paired(rows, [("flexible_ft_tau_bleu", "flexible_ft_bleu", "τ − ∞"),
                                         ("flexible_bleu", "global_bleu", "F − G")])
    assert at_tau["n"] == 2 and at_tau["diffs"] == [-1.0, -0.5]
    assert at_inf["n"] == 3


def test_a_job_whose_control_kept_no_tau_is_left_out_of_the_pairs_with_the_control_at_its_tau():
    """The control is decoded at its own dev-selected τ: a job where none was selected for it
    decodes it at τ = ∞, which is no operating point to compare the fine-tuned model's with."""
    rows = [job(flexible_ft_tau_window=9.0, flexible_ctl_tau_window=10.0, flexible_ft_tau_bleu=19.0,
                flexible_ft_bleu=19.5, selected_tau=1.2, selected_tau_control=1.5),
            job(flexible_ft_tau_window=9.5, flexible_ctl_tau_window=9.8, flexible_ft_tau_bleu=19.2,
                flexible_ft_bleu=19.4, selected_tau=1.4, selected_tau_control=1.4),
            job(flexible_ft_tau_window=9.2, flexible_ctl_tau_window=35.2, flexible_ft_tau_bleu=19.1,
                flexible_ft_bleu=19.6, selected_tau=1.3, selected_tau_control=None)]
    control, own = seeds.paired(rows, [("flexible_ft_tau_window", "flexible_ctl_tau_window", "ft − ctl"),
                                       ("flexible_ft_tau_bleu", "flexible_ft_bleu", "τ − ∞")])
    assert control["n"] == 2 and control["diffs"] == pytest.approx([-1.0, -0.3])
    assert own["n"] == 3


def test_the_callback_refuses_an_unknown_key_naming_it():
    with pytest.raises(ConfigError, match=r"hydra.callbacks.seed_comparison: unknown key\(s\) pairs"):
        seeds.SeedComparison(pairs=[])


def test_the_command_names_a_folder_that_is_not_a_sweep(tmp_path, capsys):
    assert seeds.main([str(tmp_path)]) == 2
    assert "sweep.json" in capsys.readouterr().err

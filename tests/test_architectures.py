"""The Transformer profile's units against the RNN profile's at equal training minutes
(:mod:`flexatt.architectures`), on hand-made learning curves with known answers."""

from __future__ import annotations

from pathlib import Path

import pytest

from flexatt import architectures as A


XEON = {"cpu": "Intel(R) Xeon(R) Processor", "bf16_native": True}


def _unit(folder: Path, name: str, seconds: list[float], bleu: list[float], test: float, machine: dict = XEON,
          precision: str = "bf16-mixed", trained: bool = True) -> dict:
    (folder / name).mkdir(parents=True)
    rows = ["epoch,step,lr,train_loss,val_loss,val_nll_token,val_bleu,train_tokens,train_seconds,tokens_per_second"]
    rows += [f"{i + 1},0,0.001,1,1,1,{b},100,{s},1" for i, (s, b) in enumerate(zip(seconds, bleu))]
    (folder / name / "curve.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    from flexatt.products import parse_unit

    unit = parse_unit(name)
    return {"variant": unit.variant, "seed": unit.seed, "summary": {"test": {"inf": {"bleu": test}}},
            "machine": dict(machine), "training": {"precision": precision, "threads": 2},
            "minutes": {"train": sum(seconds) / 60 if trained else 0.0}}


def test_dev_bleu_at_equal_minutes_is_each_sides_last_epoch_within_the_shorter_training(tmp_path):
    ours, theirs = tmp_path / "tf", tmp_path / "rnn"
    # the Transformer: 3 epochs of 2 minutes; the RNN: 5 epochs of 1 minute
    mo = {"global-s1": _unit(ours, "global-s1", [120, 120, 120], [5.0, 9.0, 12.0], 14.0)}
    mt = {"global-s1": _unit(theirs, "global-s1", [60] * 5, [1.0, 3.0, 6.0, 8.0, 10.0], 13.0),
          "global-s2": _unit(theirs, "global-s2", [60] * 5, [1.0, 3.0, 6.0, 8.0, 10.0], 13.5)}
    rows = A.compare(ours, theirs, mo, mt)
    where = "Intel(R) Xeon(R) Processor, native bf16, bf16-mixed, 2 threads"
    assert rows == [{"model": "global", "seed": 1, "epochs": [3, 5], "minutes": [6.0, 5.0], "test_bleu": [14.0, 13.0],
                     "machines": [where, where], "equal_minutes": 5.0,
                     "dev_bleu_at_equal": [9.0, 10.0]}]  # seed 2: the RNN's alone
    assert A.bleu_at(A.minutes_curve(ours / "global-s1"), 1.9) is None  # no epoch finished yet
    text = A.render(rows, "grc_tf", "grc")
    assert "| global | 1 | 3 / 5 | 6.0 / 5.0 | 14.00 / 13.00 | 5.0 | 9.00 / 10.00 |" in text
    assert A.render([], "grc_tf", "grc") == ""
    assert A.records("grc_tf", "grc", rows) == [{
        "profile": "grc_tf", "against": "grc", "model": "global", "seed": 1, "equal_minutes": 5.0, "epochs": 3,
        "epochs_against": 5, "minutes": 6.0, "minutes_against": 5.0, "test_bleu": 14.0, "test_bleu_against": 13.0,
        "dev_bleu_at_equal": 9.0, "dev_bleu_at_equal_against": 10.0, "machine": where, "machine_against": where}]
    assert set(A.records("grc_tf", "grc", rows)[0]) == set(A.COLUMNS)
    figure = A.figure(ours, theirs, rows, ("grc_tf", "grc"), tmp_path / "fig.png")
    assert figure.stat().st_size > 0


@pytest.mark.parametrize("machine, precision, trained", [
    ({"cpu": "AMD EPYC", "bf16_native": True}, "bf16-mixed", True),  # another CPU
    ({"cpu": "Intel(R) Xeon(R) Processor", "bf16_native": True}, "32-true", True),  # another precision
    ({"cpu": "Intel(R) Xeon(R) Processor", "bf16_native": False}, "bf16-mixed", True),  # no native bf16
    (XEON, "bf16-mixed", False),  # the unit only decoded a model an earlier run trained
])
def test_minutes_compare_only_between_units_trained_on_one_kind_of_machine(tmp_path, machine, precision, trained):
    ours, theirs = tmp_path / "tf", tmp_path / "rnn"
    mo = {"global-s1": _unit(ours, "global-s1", [120, 120, 120], [5.0, 9.0, 12.0], 14.0)}
    mt = {"global-s1": _unit(theirs, "global-s1", [60] * 5, [1.0, 3.0, 6.0, 8.0, 10.0], 13.0, machine, precision,
                             trained)}
    [row] = A.compare(ours, theirs, mo, mt)
    assert row["equal_minutes"] is None and row["dev_bleu_at_equal"] == [None, None]
    assert row["minutes"] == [6.0, 5.0] and row["test_bleu"] == [14.0, 13.0]  # each side's own figures stay
    text = A.render([row], "grc_tf", "grc")
    assert f"not comparable: trained on {row['machines'][0]} / {row['machines'][1]} | – |" in text
    assert (machine["cpu"] in row["machines"][1]) if trained else row["machines"][1].startswith("elsewhere")
    assert A.figure(ours, theirs, [row], ("grc_tf", "grc"), tmp_path / "fig.png").stat().st_size > 0


def test_a_unit_that_does_not_record_native_bf16_matches_on_cpu_precision_and_threads(tmp_path):
    ours, theirs = tmp_path / "tf", tmp_path / "rnn"
    mo = {"global-s1": _unit(ours, "global-s1", [120], [5.0], 14.0)}
    mt = {"global-s1": _unit(theirs, "global-s1", [60, 60], [1.0, 3.0], 13.0, {"cpu": XEON["cpu"]})}
    assert A.compare(ours, theirs, mo, mt)[0]["dev_bleu_at_equal"] == [5.0, 3.0]


def test_units_other_than_a_models_budget_run_are_not_compared(tmp_path):
    ours, theirs = tmp_path / "tf", tmp_path / "rnn"
    mo = {"global-s1-x1.5": _unit(ours, "global-s1-x1.5", [60], [1.0], 2.0)}
    mt = {"global-s1": _unit(theirs, "global-s1", [60], [1.0], 2.0)}
    assert A.compare(ours, theirs, mo, mt) == []


@pytest.mark.parametrize("profile, tok, base", [("grc_tf", "artifacts/grc/tok", "grc"), ("grc", "artifacts/grc/tok", None),
                                                ("x", "artifacts/tok", None)])
def test_a_profile_reading_anothers_data_names_it_as_its_base(profile, tok, base):
    assert A.base_profile(profile, tok) == base


def test_the_window_of_every_layer_is_shown_for_the_units_that_record_it():
    """A Transformer unit's test decodes keep each cross-attention layer's window: shown at τ = ∞
    and, for a flexible model, at its selected τ; a unit without them (the RNN's) is left out."""
    import math

    class Found:
        manifests = {"flexible-s1": {"kind": "train", "budget": 1.0, "summary": {"dev": {"selected_tau": 0.5}}},
                     "flexible-s1-x1.5": {"kind": "train", "budget": 1.5, "summary": {"dev": {}}},
                     "global-s1": {"kind": "train", "budget": 1.0, "summary": {"dev": {}}},
                     "rnn-s1": {"kind": "train", "budget": 1.0, "summary": {"dev": {}}}}

        def record(self, name, tau):
            if name == "rnn-s1":
                return {"window": 30.0}
            return {"window": 30.0 if math.isinf(tau) else 10.0,
                    "layer_windows": [30.0, 30.0] if math.isinf(tau) else [8.004, 11.996]}

    rows = A.layer_windows(Found())
    assert [(r["unit"], r["tau"], r["layers"]) for r in rows] == [
        ("flexible-s1", math.inf, [30.0, 30.0]), ("flexible-s1", 0.5, [8.0, 12.0]), ("global-s1", math.inf, [30.0, 30.0])]
    text = A.render_layers(rows)
    assert "| flexible-s1 | 0.5 | 10.00 | 8.00 | 12.00 |" in text and text.startswith("| unit | τ | window | layer 1 | layer 2 |")
    assert A.render_layers([]) == ""


def _flexible(seed: int, centre: str, dev: tuple[float, float, float, float], test: tuple[float, float, float],
              budget: float = 1.0) -> dict:
    """A flexible unit's manifest: dev (BLEU at τ = ∞, selected τ, its window, its BLEU), test
    (BLEU at τ = ∞, window and BLEU at that τ)."""
    return {"seed": seed, "kind": "train", "budget": budget, "model": {"attention": "flexible", "centre": centre},
            "summary": {"dev": {"inf": {"bleu": dev[0]}, "selected": {"tau": dev[1], "window": dev[2], "bleu": dev[3]}},
                        "test": {"inf": {"bleu": test[0]}, "selected": {"window": test[1], "bleu": test[2]}}}}


def test_the_two_centres_are_compared_per_seed_and_dev_chooses():
    manifests = {"flexible-s1": _flexible(1, "query", (14.0, 2.5, 18.0, 13.7), (14.2, 17.5, 13.9)),
                 "flexible_below-s1": _flexible(1, "below", (13.5, 1.5, 12.0, 13.2), (13.9, 11.8, 13.4)),
                 "flexible-s2": _flexible(2, "query", (14.1, 2.0, 17.0, 13.9), (14.0, 16.9, 13.8)),  # no pair at seed 2
                 "flexible-s1-x1.5": _flexible(1, "query", (15.0, 2.0, 17.0, 14.9), (15.0, 17.0, 14.8), 1.5),
                 "global-s1": {"seed": 1, "kind": "train", "budget": 1.0, "model": {"attention": "global"}}}
    rows = A.centres(manifests)
    assert [r["seed"] for r in rows] == [1]
    assert rows[0]["query"]["unit"] == "flexible-s1" and rows[0]["below"]["unit"] == "flexible_below-s1"
    assert rows[0]["below"] == {"unit": "flexible_below-s1", "dev_bleu_inf": 13.5, "tau": 1.5, "dev_window": 12.0,
                                "dev_bleu": 13.2, "test_bleu_inf": 13.9, "test_window": 11.8, "test_bleu": 13.4}
    assert A.centre_on_dev(rows) == "query"  # 13.7 against 13.2 dev BLEU at the selected τ
    text = A.render_centres(rows)
    assert "| 1 | below | flexible_below-s1 | 13.50 | 1.5 | 12.00 | 13.20 | 13.90 | 11.80 | 13.40 |" in text
    assert "the **query** centre" in text
    tie = [{**rows[0], "below": {**rows[0]["below"], "dev_bleu": 13.7}}]
    assert A.centre_on_dev(tie) == "below"  # equal dev BLEU: the smaller window
    assert A.centres({}) == [] and A.centre_on_dev([]) is None and A.render_centres([]) == ""

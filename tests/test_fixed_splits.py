"""Splits fixed by the corpus: a TSV's ``split`` column (data/nt_grc_en) or dev and test files
beside the training files (WMT'15); the filter stage keeps them as given, and refuses a split it
cannot follow by file and line, or a half-given pair of files by its key."""

from __future__ import annotations

import gzip
import json

import pytest
from omegaconf import OmegaConf

from conftest import ROOT, compose_params, run_inprocess
from flexatt import schema
from flexatt.config import compose
from flexatt.data.corpus import RawPair
from flexatt.data.filtering import plan_split


def write_tsv(path, rows, header=("key", "grc", "en", "split")):
    path.write_text("\n".join("\t".join(row) for row in (header, *rows)) + "\n", encoding="utf-8")
    return path


def filter_output(folder):
    report = json.loads((folder / "report.json").read_text(encoding="utf-8"))
    keys = {split: (folder / f"{split}.key").read_text(encoding="utf-8").splitlines()
            for split in ("train", "dev", "test")}
    return report, keys


@pytest.fixture
def nt_dir(tmp_path):
    """A folder holding params.yaml of the smoke profile with the nt_grc_en data config."""
    compose_params(tmp_path, "profile=smoke", "data=nt_grc_en")
    return tmp_path


def test_a_split_column_is_kept_exactly(nt_dir, capsys):
    long = " ".join(["λόγος"] * 60)
    rows = [("k1", "α β", "a b", "train"),
            ("k2", "γ δ", "c d", "dev"),
            ("k3", "ε ζ", "e f", "test"),
            ("k4", "α β", "a b", "train"),    # a training duplicate: dropped
            ("k5", "ε ζ", "e f", "train"),    # repeats a test pair: dropped, so no pair is train and test
            ("k6", "γ δ", "c d", "dev"),      # a dev duplicate: kept (a fixed set is scored whole)
            ("k7", long, "long", "dev"),      # long: kept in dev, as dev always keeps long pairs
            ("k8", long, "long too", "train"),  # long: dropped from train (filter.max_len)
            ("k9", "η θ ι", "g h i", "train"),
            ("k10", "κ", "k", "test")]
    write_tsv(nt_dir / "my.tsv", rows)
    code, err = run_inprocess("filter", ["data.tsv=my.tsv", "data.tsv_align=null", "filter.dev_size=1",
                                         "filter.test_size=1", "filter.metrics_file=filter.json"], capsys, cwd=nt_dir)
    assert code == 0, err
    report, keys = filter_output(nt_dir / "artifacts/filter")
    assert keys == {"train": ["k1", "k9"], "dev": ["k2", "k6", "k7"], "test": ["k3", "k10"]}
    assert report["split_by"] == "fixed (column split)" and "split" not in report["side_files"]
    assert report["dropped"]["duplicate"] == 2 and report["dropped"]["too_long"] == 1
    assert report["dropped_lines"]["duplicate"] == [5, 6]  # the TSV's lines (the header is line 1)
    metrics = json.loads((nt_dir / "filter.json").read_text(encoding="utf-8"))
    assert metrics["split_by"] == "fixed (column split)" and metrics["splits"]["dev"]["pairs"] == 3


@pytest.mark.parametrize("value", ["valid", "Test", ""])
def test_a_split_value_other_than_train_dev_test_is_refused_by_file_and_line(nt_dir, capsys, value):
    write_tsv(nt_dir / "my.tsv", [("k1", "α", "a", "train"), ("k2", "β", "b", "dev"), ("k3", "γ", "c", value)])
    code, err = run_inprocess("filter", ["data.tsv=my.tsv", "data.tsv_align=null", "filter.on_invalid=skip"],
                              capsys, cwd=nt_dir)
    assert code == 2
    assert f"error: my.tsv:4: split {value!r} (column 'split', data.columns.split) must be one of train, dev, test" in err
    assert not (nt_dir / "artifacts").exists()


def test_a_split_left_empty_is_refused(nt_dir, capsys):
    write_tsv(nt_dir / "my.tsv", [("k1", "α", "a", "train"), ("k2", "β", "b", "dev")])
    code, err = run_inprocess("filter", ["data.tsv=my.tsv", "data.tsv_align=null"], capsys, cwd=nt_dir)
    assert code == 2 and "error: my.tsv: the corpus fixes no test pairs (of 2 read)" in err


def test_the_greek_corpus_keeps_its_own_splits(nt_dir, capsys):
    """data/nt_grc_en through its data config: every dev and test verse of the TSV is in its split,
    and every training verse kept is a training verse of the TSV; the gold alignments travel."""
    (nt_dir / "data").symlink_to(ROOT / "data")
    code, err = run_inprocess("filter", ["filter.metrics_file=filter.json"], capsys, cwd=nt_dir)
    assert code == 0, err
    report, keys = filter_output(nt_dir / "artifacts/filter")
    with gzip.open(ROOT / "data/nt_grc_en/nt.grc-en.tsv.gz", "rt", encoding="utf-8") as handle:
        rows = [line.rstrip("\n").split("\t") for line in handle][1:]
    given = {split: [key for key, _, _, s in rows if s == split] for split in ("train", "dev", "test")}
    assert keys["dev"] == given["dev"] and keys["test"] == given["test"] and len(keys["dev"]) == 792
    assert set(keys["train"]) <= set(given["train"]) and len(keys["train"]) > 6000
    assert report["split_by"] == "fixed (column split)" and report["source"]["columns"]["split"] == "split"
    assert report["side_files"] == ["align", "key"] and report["reordering"]["crossing_link_pairs"] > 0.05


def two_file_corpus(folder, dev_lines=("d1", "d2")):
    for name, lines in (("train", ("t1", "t2", "t3", "t1")), ("dev", dev_lines), ("test", ("e1", "t2"))):
        (folder / f"{name}.de").write_text("".join(f"{s} de\n" for s in lines), encoding="utf-8")
        (folder / f"{name}.en").write_text("".join(f"{s} en\n" for s in lines), encoding="utf-8")
    return ["data.synthetic=null", "data.src=train.de", "data.tgt=train.en", "data.dev_src=dev.de",
            "data.dev_tgt=dev.en", "data.test_src=test.de", "data.test_tgt=test.en"]


def test_two_file_dev_and_test_sets_are_read_beside_the_training_files(smoke_dir, capsys):
    code, err = run_inprocess("filter", two_file_corpus(smoke_dir), capsys, cwd=smoke_dir)
    assert code == 0, err
    out = smoke_dir / "artifacts/filter"
    written = {split: (out / f"{split}.src").read_text(encoding="utf-8").splitlines() for split in ("train", "dev", "test")}
    # t1 twice: one copy; t2 is a test pair: not a training pair
    assert written == {"train": ["t1 de", "t3 de"], "dev": ["d1 de", "d2 de"], "test": ["e1 de", "t2 de"]}
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert report["split_by"] == "fixed (files data.dev_src, data.test_src)" and report["dropped"]["duplicate"] == 2
    assert report["source"]["dev_src"] == "dev.de" and report["source"]["test_tgt"] == "test.en"


def test_misaligned_dev_files_are_refused_before_the_training_files_are_read(smoke_dir, capsys):
    overrides = two_file_corpus(smoke_dir)
    (smoke_dir / "dev.en").write_text("d1 en\n", encoding="utf-8")
    code, err = run_inprocess("filter", overrides, capsys, cwd=smoke_dir)
    assert code == 2 and "error: dev.en: has 1 lines but dev.de has 2: the files are not line-aligned" in err
    assert not (smoke_dir / "artifacts").exists()
    (smoke_dir / "dev.en").write_text("d1 en\nd2 en\n", encoding="utf-8")
    code, err = run_inprocess("filter", [*overrides, "data.test_tgt=nope.en"], capsys, cwd=smoke_dir)
    assert code == 2 and "error: data.test_tgt: file not found: nope.en" in err


FILE_RULES = [
    ({"dev_src": "d.de"}, "data.dev_tgt: data.dev_src and data.dev_tgt must be given together"),
    ({"test_tgt": "t.en"}, "data.test_src: data.test_src and data.test_tgt must be given together"),
    ({"dev_src": "d.de", "dev_tgt": "d.en"}, "data.test_src: fixed dev and test files"),
    ({"test_src": "t.de", "test_tgt": "t.en"}, "data.dev_src: fixed dev and test files"),
    ({"dev_src": "d.de", "dev_tgt": "d.en", "test_src": "t.de", "test_tgt": "t.en"},
     "data.dev_src: fixed dev and test files need data.src and data.tgt"),
    ({"src": "a.de", "tgt": "a.en", "ref2": "r.en", "dev_src": "d.de", "dev_tgt": "d.en", "test_src": "t.de",
      "test_tgt": "t.en"}, "data.ref2: cannot be combined with fixed dev and test files"),
    ({"columns": {"src": "grc", "tgt": "en", "fold": "x"}}, "data.columns.fold: must be one of src, tgt, key, ref2, split"),
]


@pytest.mark.parametrize("values, expected", FILE_RULES, ids=[m.split(":")[0] + str(i) for i, (_, m) in enumerate(FILE_RULES)])
def test_fixed_split_settings_are_checked_by_key(values, expected):
    from flexatt.errors import ConfigError

    cfg = OmegaConf.to_container(compose([], config_dir=ROOT / "conf"), resolve=True)
    cfg["data"].update(values)
    with pytest.raises(ConfigError) as info:
        schema.validate(cfg)
    assert str(info.value).startswith(expected), str(info.value)


def test_plan_split_needs_every_pair_to_carry_a_split():
    pairs = [RawPair(1, "a", "b", {}, "train"), RawPair(2, "c", "d", {}, None)]
    with pytest.raises(ValueError, match="line 2 has no split"):
        plan_split(iter(pairs), 1, 1, 0, fixed=True)


def test_the_grc_profile_trains_on_the_greek_corpus_under_the_bible_budget_rule(tmp_path):
    params = schema.validate(OmegaConf.load(compose_params(tmp_path, "profile=grc", test_precision=False)))
    # the Greek verses with three English translations to train on; dev and test are nt_grc_en's
    assert params.profile == "grc" and params.data.name == "nt_grc_en_x3" and params.data.columns["split"] == "split"
    assert params.data.tsv_align.endswith("nt.grc-en.x3.align.gz") and params.model.dropout == 0.3
    assert {"global", "local_m", "flexible"} <= set(params.variants) and params.finetune.variants == ["flexible"]
    assert {"global", "local_m", "flexible", "flexible_ft"} <= set(params.evaluate.checkpoints)
    # the budget is grc's own (chosen with the alignment probes); the rule is bible's
    assert (params.train.epochs, params.train.lr_schedule, params.train.early_stopping_patience) == (45, "fixed", None)
    rule = schema.validate(OmegaConf.load(compose_params(tmp_path / "c", "profile=bible", test_precision=False)))
    # the same schedule: full rate, then as many epochs halved one after another; two threads
    assert params.train.lr_schedule == rule.train.lr_schedule == "fixed"
    assert params.train.early_stopping_patience is rule.train.early_stopping_patience is None
    assert (params.train.epochs - params.train.lr_halve_from_epoch
            == rule.train.epochs - rule.train.lr_halve_from_epoch)
    assert params.train.threads == rule.train.threads and params.train.lr == rule.train.lr

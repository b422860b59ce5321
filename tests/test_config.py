"""params.yaml is the composition of conf/; profiles compose; stages refuse bad values by key."""

from __future__ import annotations

import pytest
import yaml
from omegaconf import OmegaConf

from conftest import run_inprocess, run_module
from flexatt import config as C
from flexatt.errors import ConfigError


def test_params_yaml_is_in_sync_with_conf(root):
    """params.yaml must be exactly what `dvc exp run` composes from conf/ (never hand-edited)."""
    composed = OmegaConf.to_container(C.compose([], root / "conf"))
    committed = yaml.safe_load((root / "params.yaml").read_text())
    assert committed == composed, "params.yaml differs from conf/: run `make params` and commit it"


@pytest.mark.parametrize("profile", ["smoke", "default", "paper", "char"])
def test_every_profile_composes(root, profile):
    cfg = C.compose([f"profile={profile}"], root / "conf")
    assert cfg.profile == profile
    assert cfg.filter.max_len == 50


@pytest.mark.parametrize("profile", ["smoke", "default", "paper", "char", "grc", "bible"])
def test_every_tau_row_has_its_own_models_tau_to_decode_at(root, profile):
    """Each _tau row decodes at the τ sweep_tau selected for its own model (flexatt.stages.evaluate.tau_of),
    a control's too: every model of evaluate.tau_rows is swept, so evaluate never borrows a τ."""
    from flexatt.rows import Row

    cfg = C.compose([f"profile={profile}"], root / "conf")
    assert {Row.of(f"{row}_tau").model for row in cfg.evaluate.tau_rows} <= set(cfg.sweep_tau.models)
    assert any(row.endswith("_ctl") for row in cfg.sweep_tau.models)  # the controls are swept


def test_paper_profile_decodes_with_the_papers_beam(root):
    """The papers decode with a beam of 20 (2017 paper, §5); the default profile's CPU budget uses 5."""
    assert C.compose(["profile=paper"], root / "conf").decode.beam_size == 20
    assert C.compose([], root / "conf").decode.beam_size == 5


def test_char_profile_trains_global_and_flexible_on_characters(root):
    """The char profile: a character vocabulary, only the global and flexible models (and the
    fine-tuned flexible one) through every stage that names models, trained twice the default's
    epochs; the rest is the default's."""
    from flexatt.schema import validate

    char, default = C.compose(["profile=char"], root / "conf"), C.compose([], root / "conf")
    params = validate(char)
    assert char.tokenize.model_type == "char" and default.tokenize.model_type == "unigram"
    assert list(char.variants) == ["global", "flexible"]
    assert list(char.finetune.variants) == ["flexible"]
    assert dict(char.evaluate.checkpoints) == {
        "global": "artifacts/char/models/global/best.ckpt", "flexible": "artifacts/char/models/flexible/best.ckpt",
        "flexible_ft": "artifacts/char/models_ft/flexible/best.ckpt",
        "flexible_ctl": "artifacts/char/models_ctl/flexible/best.ckpt"}  # its outputs under artifacts/char/
    # every model of a _tau row has its own selected τ: the control's too
    assert list(char.sweep_tau.models) == ["flexible", "flexible_ft", "flexible_ctl"]
    assert list(char.evaluate.tau_rows) == ["flexible", "flexible_ft", "flexible_ctl"]
    assert params.model == validate(default).model
    assert char.train.epochs == 2 * default.train.epochs
    outputs = {"data_dir": None, "out_dir": None, "metrics_dir": None, "metrics_file": None}  # its own folders
    assert {**char.train, "epochs": None, **outputs} == {**default.train, "epochs": None, **outputs}
    assert {**char.filter, **outputs} == {**default.filter, **outputs} and char.decode == default.decode
    # the default's rows come from conf/evaluate/checkpoints/all.yaml: every trained variant, every
    # fine-tuned one and its control
    assert set(default.variants) | {f"{v}_{kind}" for v in default.finetune.variants for kind in ("ft", "ctl")} \
        == set(default.evaluate.checkpoints)


def test_smoke_profile_uses_synthetic_data(root):
    cfg = C.compose(["profile=smoke"], root / "conf")
    assert cfg.data.synthetic is not None and cfg.data.tsv is None


def test_load_params_overrides_and_unknown_keys(smoke_dir):
    cfg = C.load_params(smoke_dir / "params.yaml", ["filter.dev_size=7"])
    assert cfg.filter.dev_size == 7
    with pytest.raises(ConfigError, match="filter.nope"):
        C.load_params(smoke_dir / "params.yaml", ["filter.nope=1"])


def test_file_and_key_lookups_name_the_key(tmp_path):
    """The value rules are flexatt.schema's (tests/test_schema.py); config reads keys and files."""
    with pytest.raises(ConfigError, match=r"^a: file not found: /no/such/file \(train it first\)$"):
        C.require_file("a", "/no/such/file", hint="train it first")
    assert C.require_file("a", None) is None
    (tmp_path / "f").write_text("x")
    assert C.require_file("a", str(tmp_path / "f")) == tmp_path / "f"
    with pytest.raises(ConfigError, match=r"^b.c: missing from the configuration$"):
        C.get(OmegaConf.create({"a": 1}), "b.c")


def test_stage_refuses_unknown_key_and_bad_value(smoke_dir, capsys):
    bad_key = run_module("flexatt.stages.filter", "filter.dev_sise=3", cwd=smoke_dir)
    assert bad_key.returncode != 0 and "filter.dev_sise" in bad_key.stderr
    code, err = run_inprocess("filter", ["filter.on_invalid=ignore"], capsys, cwd=smoke_dir)
    assert code == 2
    assert "filter.on_invalid: must be one of error, skip (got 'ignore')" in err


def test_stage_without_params_file_says_so(tmp_path):
    result = run_module("flexatt.stages.filter", cwd=tmp_path)
    assert result.returncode != 0 and "params file not found" in result.stderr

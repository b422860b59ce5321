"""The configuration schema (flexatt.schema): its defaults are conf/'s, and every rule refuses a
bad value with one line naming the key and what it allows."""

from __future__ import annotations

import math

import pytest
from omegaconf import OmegaConf

from flexatt import schema
from flexatt.config import compose
from flexatt.errors import ConfigError


@pytest.fixture(scope="module")
def default_cfg(root):
    return compose([], config_dir=root / "conf")


def test_defaults_are_those_of_conf(default_cfg):
    composed = OmegaConf.to_container(default_cfg, resolve=True)
    for name, field in schema.Params.model_fields.items():
        if name in ("variants", "evaluate"):
            continue  # data, not defaults: the pipeline's models and their checkpoints
        default = field.get_default(call_default_factory=True)
        dumped = default.model_dump() if hasattr(default, "model_dump") else default
        if name == "trainer":  # keys conf/ leaves to Lightning have Lightning's defaults
            assert {k: v for k, v in dumped.items() if k not in composed[name]} == {"num_nodes": 1}
            dumped = {k: v for k, v in dumped.items() if k in composed[name]}
        assert dumped == composed[name], name
    evaluate = schema.Evaluate(checkpoints={"global": "g.ckpt", **{r: "x" for r in composed["evaluate"]["tau_rows"]}})
    assert {k: v for k, v in evaluate.model_dump().items() if k != "checkpoints"} == {
        k: v for k, v in composed["evaluate"].items() if k != "checkpoints"}


def test_the_default_and_smoke_configurations_are_valid(root):
    for overrides in ([], ["profile=smoke"], ["profile=paper"]):
        params = schema.validate(compose(overrides, config_dir=root / "conf"))
        assert params.model_of(params.train.variant).attention == params.train.variant


def _with(cfg, key, value):
    cfg = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
    if value is _DELETE:
        parent, _, leaf = key.rpartition(".")
        del OmegaConf.select(cfg, parent)[leaf]
    else:
        OmegaConf.update(cfg, key, value, force_add=True)
    return cfg


class _Delete:
    """The value of a rule that removes its key (a stable repr: it is part of the test id)."""

    def __repr__(self) -> str:
        return "<deleted>"


_DELETE = _Delete()

RULES = [
    ("seed", -1, "seed: must be >= 0 (got -1)"),
    ("data.name", "", "data.name: must be a non-empty string (got '')"),
    ("data.src", "a.txt", "data.tgt: data.src and data.tgt must be given together"),
    ("data.columns", {"src": "es", "tgt": "en", "lemma": "x"}, "data.columns.lemma: must be one of src, tgt, key, ref2, split"),
    ("data.synthetic", {"min_len": 5, "max_len": 2}, "data.synthetic.min_len: must be <= data.synthetic.max_len = 2 (got 5)"),
    ("data.synthetic", {"vocab_size": 1}, "data.synthetic.vocab_size: must be >= 2 (got 1)"),
    ("data.synthetic", {"reverse": 1.5}, "data.synthetic.reverse: must be <= 1.0 (got 1.5)"),
    ("filter.dev_size", 0, "filter.dev_size: must be >= 1 (got 0)"),
    ("filter.dev_sise", 3, "filter.dev_sise: unknown key"),
    ("filter.max_ratio", 0.5, "filter.max_ratio: must be >= 1.0 (got 0.5)"),
    ("filter.eval_max_len", 0, "filter.eval_max_len: must be >= 1 (got 0)"),
    ("filter.on_invalid", "ignore", "filter.on_invalid: must be one of error, skip (got 'ignore')"),
    ("filter.seed", "7", "filter.seed: must be an integer (got '7')"),
    ("tokenize.model_type", "wordpiece", "tokenize.model_type: must be one of unigram, bpe, char, word (got 'wordpiece')"),
    ("tokenize.vocab_size", 4, "tokenize.vocab_size: must be >= 8 (got 4)"),
    ("tokenize.character_coverage", 0.0, "tokenize.character_coverage: must be > 0.0 (got 0.0)"),
    ("tokenize.joint", 1, "tokenize.joint: must be true or false (got 1)"),
    ("tokenize.threads", 0, "tokenize.threads: must be >= 1 (got 0)"),
    ("model.score", "cosine", "model.score: must be one of concat, general, dot, scaled_dot, location (got 'cosine')"),
    ("model.emb_size", 0, "model.emb_size: must be >= 1 (got 0)"),
    ("model.dropout", 1.0, "model.dropout: must be < 1.0 (got 1.0)"),
    ("model.sigma", -1.0, "model.sigma: must be > 0.0 (got -1.0)"),
    ("model.sigma", math.inf, "model.sigma: must be a finite number (got inf)"),
    ("model.sact_lambda", 1.0, "model.sact_lambda: must be > 1.0 (got 1.0)"),
    ("model.g_feedback", "maybe", "model.g_feedback: must be true or false (got 'maybe')"),
    ("model.temperature", 0.0, "model.temperature: must be > 0.0 (got 0.0)"),
    ("variants.global.score", "cosine", "variants.global.score: must be one of concat"),
    ("variants.global.depth", 2, "variants.global.depth: unknown key"),
    ("trainer.accelerator", "abacus", "trainer.accelerator: must be one of auto, cpu, gpu, cuda, mps, tpu (got 'abacus')"),
    ("trainer.devices", 0, "trainer.devices: must be an integer >= 1, -1 (every device), auto, or a list of device indices (got 0)"),
    ("trainer.strategy", "telepathy", "trainer.strategy: must be one of auto, ddp,"),
    ("trainer.precision", "8-bit", "trainer.precision: must be one of 32-true, 16-mixed, bf16-mixed"),
    ("trainer.gradient_clip_val", -1.0, "trainer.gradient_clip_val: must be >= 0.0 (got -1.0)"),
    ("trainer.deterministic", "maybe", "trainer.deterministic: must be one of true, false, warn, null (got 'maybe')"),
    ("train.variant", "bahdanau", "train.variant: must be one of global, local_m, local_p, flexible, sact, flexible_sact (got 'bahdanau')"),
    ("train.epochs", 0, "train.epochs: must be >= 1 (got 0)"),
    ("train.epochs", True, "train.epochs: must be an integer (got True)"),
    ("train.lr", 0.0, "train.lr: must be > 0.0 (got 0.0)"),
    ("train.lr_schedule", "cosine", "train.lr_schedule: must be one of fixed, plateau (got 'cosine')"),
    ("train.early_stopping_patience", 0, "train.early_stopping_patience: must be >= 1 (got 0)"),
    ("train.lr_plateau_patience", 0, "train.lr_plateau_patience: must be >= 1 (got 0)"),
    ("train.label_smoothing", 1.0, "train.label_smoothing: must be < 1.0 (got 1.0)"),
    ("train.label_smoothing", -0.1, "train.label_smoothing: must be >= 0.0 (got -0.1)"),
    ("finetune.variant", "bahdanau", "finetune.variant: must be one of global, local_m"),
    ("finetune.variants", ["flexible", "bahdanau"], "finetune.variants[1]: must be one of global, local_m"),
    ("finetune.beta", -0.1, "finetune.beta: must be >= 0.0 (got -0.1)"),
    ("decode.beam_size", 0, "decode.beam_size: must be >= 1 (got 0)"),
    ("decode.alpha", -1.0, "decode.alpha: must be >= 0.0 (got -1.0)"),
    ("decode.max_len_ratio", 0.0, "decode.max_len_ratio: must be > 0.0 (got 0.0)"),
    ("decode.backend", "compiled", "decode.backend: must be one of auto, kernel, eager (got 'compiled')"),
    ("sweep_tau.grid", [0.8, -1.0], "sweep_tau.grid[1]: must be > 0.0 (got -1.0)"),
    ("sweep_tau.grid", [0.0], "sweep_tau.grid[0]: must be > 0.0 (got 0.0)"),
    ("sweep_tau.grid", [math.nan], "sweep_tau.grid[0]: must be a finite number (got nan)"),
    ("sweep_tau.grid", [0.8, math.inf], "sweep_tau.grid[1]: must be a finite number (got inf)"),
    ("sweep_tau.grid", [], "sweep_tau.grid: must not be empty"),
    ("sweep_tau.curve_splits", ["train"], "sweep_tau.curve_splits[0]: must be one of dev, test (got 'train')"),
    ("sweep_tau.search_steps", -1, "sweep_tau.search_steps: must be >= 0 (got -1)"),
    ("sweep_tau.figure", "", "sweep_tau.figure: must be a non-empty string (got '')"),
    ("sweep_sigma.grid", [1.5, 0.0], "sweep_sigma.grid[1]: must be > 0.0 (got 0.0)"),
    ("sweep_sigma.grid", [], "sweep_sigma.grid: must not be empty"),
    ("sweep_beta.grid", [], "sweep_beta.grid: must not be empty"),
    ("sweep_beta.grid", [0.1, 0.0], "sweep_beta.grid[1]: must be > 0.0 (got 0.0)"),
    ("sweep_beta.grid", [1.0, 0.1], "sweep_beta.grid[1]: must be > sweep_beta.grid[0] = 1.0: the sweep goes upward (got 0.1)"),
    ("sweep_beta.tau", -1.0, "sweep_beta.tau: must be >= 0.0 (got -1.0)"),
    ("sweep_beta.max_drop", -1.0, "sweep_beta.max_drop: must be >= 0.0 (got -1.0)"),
    ("sweep_beta.tolerance", -0.5, "sweep_beta.tolerance: must be >= 0.0 (got -0.5)"),
    ("sweep_beta.variant", "nope", "sweep_beta.variant: must be one of global, local_m, local_p, flexible, sact, flexible_sact (got 'nope')"),
    ("sweep_sigma.base_variant", "bahdanau", "sweep_sigma.base_variant: must be one of global, local_m"),
    ("sweep_sigma.warm_start_epochs", 0, "sweep_sigma.warm_start_epochs: must be >= 1 (got 0)"),
    ("evaluate.split", "train", "evaluate.split: must be one of dev, test (got 'train')"),
    ("evaluate.checkpoints.global", _DELETE, "evaluate.checkpoints: must include global"),
    ("evaluate.tau_rows", ["flexible", "bahdanau"], "evaluate.tau_rows[1]: must be one of global, "),
    ("evaluate.length_buckets", [20, 10], "evaluate.length_buckets[1]: must be > evaluate.length_buckets[0] = 20"),
    ("evaluate.length_buckets", ["ten"], "evaluate.length_buckets[0]: must be an integer (got 'ten')"),
    ("evaluate.samples", [-1], "evaluate.samples[0]: must be >= 0 (got -1)"),
    ("evaluate.bootstrap_seed", 0, "evaluate.bootstrap_seed: must be >= 1 (got 0)"),
    ("compare.search_steps", -1, "compare.search_steps: must be >= 0 (got -1)"),
    ("compare.alpha", 1.0, "compare.alpha: must be < 1.0 (got 1.0)"),
    ("compare.alpha", 0.0, "compare.alpha: must be > 0.0 (got 0.0)"),
    ("compare.margin", -0.5, "compare.margin: must be >= 0.0 (got -0.5)"),
    ("compare.ar_trials", 0, "compare.ar_trials: must be >= 1 (got 0)"),
    ("compare.models", "flexible", "compare.models: must be a list (got 'flexible')"),
    ("filter.test_size", 0, "filter.test_size: must be >= 1 (got 0)"),
    ("filter.max_len", -5, "filter.max_len: must be >= 1 (got -5)"),
    ("tokenize.seed", -1, "tokenize.seed: must be >= 0 (got -1)"),
    ("model.hidden_size", 2.5, "model.hidden_size: must be an integer (got 2.5)"),
    ("model.att_size", 0, "model.att_size: must be >= 1 (got 0)"),
    ("model.readout_size", 0, "model.readout_size: must be >= 1 (got 0)"),
    ("model.local_D", 0, "model.local_D: must be >= 1 (got 0)"),
    ("model.max_src_len", 0, "model.max_src_len: must be >= 1 (got 0)"),
    ("model.arch", "lstm", "model.arch: must be one of rnn, transformer (got 'lstm')"),
    ("model.layers", 0, "model.layers: must be >= 1 (got 0)"),
    ("model.heads", 0, "model.heads: must be >= 1 (got 0)"),
    ("model.ff_size", 0, "model.ff_size: must be >= 1 (got 0)"),
    ("model.centre", "middle", "model.centre: must be one of query, below (got 'middle')"),
    ("trainer.num_nodes", 0, "trainer.num_nodes: must be >= 1 (got 0)"),
    ("trainer.log_every_n_steps", -1, "trainer.log_every_n_steps: must be >= 0 (got -1)"),
    ("train.batch_size", 0, "train.batch_size: must be >= 1 (got 0)"),
    ("train.lr_halve_from_epoch", 0, "train.lr_halve_from_epoch: must be >= 1 (got 0)"),
    ("train.val_max_len_ratio", 0.0, "train.val_max_len_ratio: must be > 0.0 (got 0.0)"),
    ("train.seed", -1, "train.seed: must be >= 0 (got -1)"),
    ("train.threads", 0, "train.threads: must be >= 1 (got 0)"),
    ("finetune.epochs", 0, "finetune.epochs: must be >= 1 (got 0)"),
    ("finetune.lr", 0, "finetune.lr: must be > 0.0 (got 0.0)"),
    ("decode.batch_size", 0, "decode.batch_size: must be >= 1 (got 0)"),
    ("sweep_tau.tolerance", -0.5, "sweep_tau.tolerance: must be >= 0.0 (got -0.5)"),
    ("sweep_tau.curve_taus", [1.0, -2.0], "sweep_tau.curve_taus[1]: must be >= 0.0 (got -2.0)"),
    ("sweep_sigma.lr", 0.0, "sweep_sigma.lr: must be > 0.0 (got 0.0)"),
    ("evaluate.bootstrap_samples", 0, "evaluate.bootstrap_samples: must be >= 1 (got 0)"),
    ("logger.mode", "sometimes", "logger.mode: must be one of auto, online, offline, disabled (got 'sometimes')"),
    ("logger.enabled", "maybe", "logger.enabled: must be true or false (got 'maybe')"),
]


@pytest.mark.parametrize("key, value, expected", RULES, ids=[f"{k}={v!r}" for k, v, _ in RULES])
def test_every_rule_names_its_key_and_what_it_allows(default_cfg, key, value, expected):
    with pytest.raises(ConfigError) as info:
        schema.validate(_with(default_cfg, key, value))
    assert str(info.value).startswith(expected), str(info.value)
    assert "\n" not in str(info.value)


def test_a_variant_is_validated_with_the_model_it_overrides(default_cfg):
    """When it is used: a sweep may set a model key that one of the variants it does not train
    refuses (model.temperature with the sact variants in the config)."""
    params = schema.validate(_with(default_cfg, "variants.sact.temperature", 1.0))
    with pytest.raises(ConfigError, match=r"^model.temperature: must be null when model.attention is sact"):
        params.model_of("sact")
    params = schema.validate(_with(default_cfg, "model.dropout", 0.1))
    assert params.model_of("flexible").dropout == 0.1 and params.model_of("flexible").attention == "flexible"
    assert params.model_of("sact").model_dump() == {**params.model.model_dump(), "attention": "sact"}
    swept = schema.validate(_with(_with(default_cfg, "model.temperature", 0.8), "variants.sact.temperature", None))
    assert swept.model_of("sact").temperature is None and swept.model_of("global").temperature == 0.8


def test_a_transformer_model_refuses_what_it_cannot_build(default_cfg):
    """``model.arch=transformer``: the cross-attentions it has, heads dividing its size, an
    aligning layer among its layers; each refusal names its key."""
    cfg = _with(_with(default_cfg, "model.arch", "transformer"), "model.hidden_size", 64)
    schema.validate(cfg).model_of("flexible")
    for key, value, expected in (
            ("variants.sact.attention", "sact", "model.attention: must be one of global, flexible, local_m, "
                                                "local_mr when model.arch is transformer (got 'sact')"),
            ("model.heads", 3, "model.heads: must divide model.hidden_size (64) (got 3)"),
            ("model.align_layer", 3, "model.align_layer: must index one of the 3 decoder layers (got 3)")):
        with pytest.raises(ConfigError) as info:
            params = schema.validate(_with(cfg, key, value))
            params.model_of("sact" if key.startswith("variants") else "flexible")
        assert str(info.value).startswith(expected), str(info.value)


def test_fine_tuning_and_the_sigma_sweep_need_a_flexible_variant(default_cfg):
    for key, name in (("finetune.variant", "global"), ("sweep_sigma.base_variant", "local_p")):
        params = schema.validate(_with(default_cfg, key, name))
        with pytest.raises(ConfigError, match=rf"^{key}: must name a flexible model \(flexible, flexible_sact\), "
                                              rf"not '{name}': the objective needs g_t$"):
            params.flexible_variant(key)
    # the whole configuration stays valid for the stages that do not fine-tune
    params = schema.validate(_with(default_cfg, "variants.flexible.attention", "sparse"))
    with pytest.raises(ConfigError, match=r"^sweep_sigma.base_variant: must name a flexible model"):
        params.flexible_variant("sweep_sigma.base_variant")
    assert schema.validate(default_cfg).flexible_variant("finetune.variant") == "flexible"


def test_the_attention_is_one_of_the_registered_variants():
    from flexatt.attention import ATTENTION_VARIANTS, register_attention
    from flexatt.model import validate_config

    with pytest.raises(ConfigError, match=r"^model.attention: must be one of global, local_m, local_p, local_mr, flexible, "
                                          r"sact, flexible_sact.* \(got 'schema_probe'\)$"):
        validate_config({"attention": "schema_probe"})
    register_attention("schema_probe")(lambda scorer, args: None)
    try:
        assert validate_config({"attention": "schema_probe"})["attention"] == "schema_probe"
    finally:
        ATTENTION_VARIANTS.pop("schema_probe")


def _constrained_fields():
    """Every field of every group whose values are restricted beyond a plain type: a bound,
    a list of allowed values or a length."""
    import annotated_types
    import typing

    found = []
    for group_name, field in schema.Params.model_fields.items():
        model = field.annotation
        if not isinstance(model, type) or not issubclass(model, schema.Group):
            continue
        for name, info in model.model_fields.items():
            bounds = [m for m in info.metadata if isinstance(m, (annotated_types.Ge, annotated_types.Gt,
                                                                  annotated_types.Lt, annotated_types.Le))]
            text = str(info.annotation)
            literal = "Literal" in text or typing.get_origin(info.annotation) is typing.Literal
            if bounds or literal or "Ge(" in text or "Gt(" in text:
                found.append(f"{group_name}.{name}")
    return found


def test_every_bounded_or_enumerated_setting_has_a_rule_case():
    covered = {key.split("[")[0] for key, _, _ in RULES}
    missing = [key for key in _constrained_fields() if key not in covered]
    assert not missing, f"add a case to RULES for: {', '.join(missing)}"

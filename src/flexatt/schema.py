"""The configuration schema: every group of ``params.yaml`` with its types, allowed values, ranges
and defaults, validated in one place (pydantic v2, strict: no string is read as a number, no
``0``/``1`` as a boolean).

:func:`validate` checks a whole configuration and returns it typed (:class:`Params`); the first
rule that fails is raised as :class:`~flexatt.errors.ConfigError` naming the key and what it
allows, in the one-line form every stage prints::

    error: model.sigma: must be > 0 (got -1.0)
    error: sweep_tau.grid[1]: must be > 0 (got -1)
    error: filter.on_invalid: must be one of error, skip (got 'ignore')

The defaults are those of ``conf/`` (a test keeps them equal). Rules that read the file system
(a checkpoint or corpus that must exist) are not here: they belong to the stage that opens the
file, which names it when it is missing.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, field_validator, model_validator
from pydantic_core import PydanticCustomError

from flexatt.errors import ConfigError

# --------------------------------------------------------------------------------------
# allowed values (the modules that act on them import them from here)
# --------------------------------------------------------------------------------------
ON_INVALID = ("error", "skip")  # filter.on_invalid: refuse an undecodable line, or drop and count it
MODEL_TYPES = ("unigram", "bpe", "char", "word")  # tokenize.model_type: SentencePiece's
SCORE_TYPES = ("concat", "general", "dot", "scaled_dot", "location")  # model.score
ARCHS = ("rnn", "transformer")  # model.arch
#: the cross-attention a Transformer has (model.attention with model.arch transformer)
TRANSFORMER_ATTENTIONS = ("global", "flexible", "local_m", "local_mr")
LR_SCHEDULES = ("fixed", "plateau")  # train.lr_schedule
LOGGER_MODES = ("auto", "online", "offline", "disabled")  # logger.mode
SPLITS = ("dev", "test")  # what sweep_tau and evaluate decode
FLEXIBLE = ("flexible", "flexible_sact")  # the attention variants with a penalty strength g_t
ACCELERATORS = ("auto", "cpu", "gpu", "cuda", "mps", "tpu")
PRECISIONS = ("32-true", "16-mixed", "bf16-mixed", "16-true", "bf16-true", "64-true",
              "transformer-engine", "transformer-engine-float16", "auto")
PRECISION_ALIASES = ("32", "16", "64", "bf16", 32, 16, 64)


# --------------------------------------------------------------------------------------
# value types
# --------------------------------------------------------------------------------------
PositiveInt = Annotated[int, Field(ge=1)]
NonNegativeInt = Annotated[int, Field(ge=0)]
PositiveFloat = Annotated[float, Field(gt=0.0, allow_inf_nan=False)]
NonNegativeFloat = Annotated[float, Field(ge=0.0, allow_inf_nan=False)]
Text = Annotated[str, Field(min_length=1, pattern=r"\S")]  # a non-empty string
Tau = Annotated[float, Field(ge=0.0)]  # flexatt.tau: inf allowed (every position), NaN and < 0 refused


def _increasing(value: list, key: str, why: str) -> list:
    """``value`` when it strictly increases; else the error naming the first item that does not."""
    for i in range(1, len(value)):
        if value[i] <= value[i - 1]:
            raise PydanticCustomError("flexatt_item", "must be > " + key + "[{prev}] = {before}: " + why + " (got {value})",
                                      {"index": i, "prev": i - 1, "before": value[i - 1], "value": value[i]})
    return value


class Group(BaseModel):
    """A config group: strict types, unknown keys refused, assignment re-validated."""

    model_config = ConfigDict(strict=True, extra="forbid", validate_assignment=True)


# --------------------------------------------------------------------------------------
# groups
# --------------------------------------------------------------------------------------
class Synthetic(Group):
    n_pairs: PositiveInt = 1200
    vocab_size: Annotated[int, Field(ge=2)] = 40
    min_len: PositiveInt = 3
    max_len: PositiveInt = 12
    chunk: PositiveInt = 3
    reverse: Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)] = 1.0  # share of chunks reversed
    seed: NonNegativeInt = 1

    @model_validator(mode="after")
    def _lengths(self) -> Synthetic:
        if self.min_len > self.max_len:
            raise _error("min_len", f"must be <= data.synthetic.max_len = {self.max_len} (got {self.min_len})")
        return self


TSV_COLUMNS = ("src", "tgt", "key", "ref2", "split")  # data.columns: the roles of a TSV's columns


class Data(Group):
    name: Text = "bible"
    src_lang: Text = "es"
    tgt_lang: Text = "en"
    src: Optional[Text] = None
    tgt: Optional[Text] = None
    ref2: Optional[Text] = None
    align: Optional[Text] = None
    tsv: Optional[Text] = "data/bible/bible.es-en.tsv.gz"
    columns: dict[Literal[TSV_COLUMNS], Text] = Field(
        default_factory=lambda: {"src": "es", "tgt": "en", "key": "key", "ref2": "en_web"})
    tsv_align: Optional[Text] = "data/bible/bible.es-en.kjv.align.gz"
    synthetic: Optional[Synthetic] = None
    dev_src: Optional[Text] = None   # fixed dev and test sets beside data.src/data.tgt (the training files)
    dev_tgt: Optional[Text] = None
    test_src: Optional[Text] = None
    test_tgt: Optional[Text] = None

    @model_validator(mode="after")
    def _one_source(self) -> Data:
        if (self.src is None) != (self.tgt is None):
            raise _error("tgt" if self.tgt is None else "src", "data.src and data.tgt must be given together")
        for split in ("dev", "test"):
            src, tgt = getattr(self, f"{split}_src"), getattr(self, f"{split}_tgt")
            if (src is None) != (tgt is None):
                raise _error(f"{split}_tgt" if tgt is None else f"{split}_src",
                             f"data.{split}_src and data.{split}_tgt must be given together")
        fixed = [key for key in ("dev_src", "test_src") if getattr(self, key) is not None]
        if fixed:
            missing = "test_src" if fixed == ["dev_src"] else "dev_src" if fixed == ["test_src"] else None
            if missing:
                raise _error(missing, "fixed dev and test files (data.dev_src/dev_tgt, data.test_src/test_tgt) "
                             "must be given together")
            if self.src is None:
                raise _error("dev_src", "fixed dev and test files need data.src and data.tgt (the training files)")
            for side in ("ref2", "align"):
                if getattr(self, side) is not None:
                    raise _error(side, "cannot be combined with fixed dev and test files (data.dev_src, "
                                 "data.test_src), which have no side files")
        if self.src is None and self.tsv is None and self.synthetic is None:
            raise PydanticCustomError("flexatt", "no input configured: set data.src and data.tgt (two text "
                                      "files), data.tsv (one TSV) or data.synthetic")
        if self.src is None and self.tsv is not None and not {"src", "tgt"} <= set(self.columns):
            raise _error("columns", f"must map src and tgt (and optionally key, ref2, split) to column names of "
                         f"{self.tsv} (got {dict(self.columns)!r})")
        return self


class Filter(Group):
    out_dir: Text = "artifacts/filter"
    metrics_file: Optional[Text] = "results/filter.json"
    dev_size: PositiveInt = 1000
    test_size: PositiveInt = 2000
    max_len: PositiveInt = 50
    max_ratio: Annotated[float, Field(ge=1.0, allow_inf_nan=False)] = 3.0
    eval_max_len: Optional[PositiveInt] = 256
    on_invalid: Literal[ON_INVALID] = "error"
    seed: NonNegativeInt = 1234


class Tokenize(Group):
    in_dir: Text = "artifacts/filter"
    out_dir: Text = "artifacts/tok"
    metrics_file: Optional[Text] = "results/tokenize.json"
    model_type: Literal[MODEL_TYPES] = "unigram"
    joint: bool = True
    vocab_size: Annotated[int, Field(ge=8)] = 4000
    character_coverage: Annotated[float, Field(gt=0.0, le=1.0)] = 1.0
    threads: PositiveInt = 2
    seed: NonNegativeInt = 1234


class Model(Group):
    """``conf/model``: the network (:func:`flexatt.model.build_model`). The default of every model
    setting is defined here (``conf/model/default.yaml`` restates them for Hydra); the attention
    builders (:func:`flexatt.attention.register_attention`) get the validated object, with the
    tensor sizes beside it (:class:`flexatt.attention.AttentionSizes`)."""

    attention: Text = "global"  # a registered variant: flexatt.model.require_registered checks the registry
    score: Literal[SCORE_TYPES] = "concat"
    emb_size: PositiveInt = 128
    hidden_size: PositiveInt = 128
    att_size: PositiveInt = 128
    readout_size: PositiveInt = 128
    dropout: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.2
    local_D: PositiveInt = 10
    sigma: PositiveFloat = 1.5
    g_feedback: bool = True
    sact_lambda: Annotated[float, Field(gt=1.0, allow_inf_nan=False)] = 4.0
    sact_feedback: bool = True
    temperature: Optional[PositiveFloat] = None
    max_src_len: PositiveInt = 256
    # the Transformer (arch transformer; flexatt.transformer): hidden_size is its model size d,
    # att_size the hidden size of g_t's and the centre's networks
    arch: Literal[ARCHS] = "rnn"
    layers: PositiveInt = 3  # encoder layers, and decoder layers (each with its cross-attention)
    heads: PositiveInt = 4
    ff_size: PositiveInt = 1024
    centre: Literal["query", "below"] = "query"  # flexible cross-attention's centre
    align_layer: int = -2  # the decoder layer whose head-averaged cross-attention aligns (Python index)

    @model_validator(mode="after")
    def _transformer(self) -> Model:
        if self.arch != "transformer":
            return self
        if self.attention not in TRANSFORMER_ATTENTIONS:
            raise _error("attention", f"must be one of {', '.join(TRANSFORMER_ATTENTIONS)} when model.arch is "
                         f"transformer (got {self.attention!r})")
        if self.hidden_size % self.heads:
            raise _error("heads", f"must divide model.hidden_size ({self.hidden_size}) (got {self.heads})")
        if not -self.layers <= self.align_layer < self.layers:
            raise _error("align_layer", f"must index one of the {self.layers} decoder layers (got {self.align_layer})")
        return self

    @model_validator(mode="after")
    def _temperature(self) -> Model:
        if self.temperature is not None and self.attention in ("sact", "flexible_sact"):
            raise _error("temperature", f"must be null when model.attention is {self.attention} "
                         f"(its temperature is learned) (got {self.temperature})")
        return self


def _overrides_of(group: type[Group], name: str) -> type[Group]:
    """A group whose every key is ``group``'s, optional (``None``: not overridden), with the same
    type and range."""
    fields = {key: (Optional[Annotated[(info.annotation, *info.metadata)] if info.metadata else info.annotation], None)
              for key, info in group.model_fields.items()}
    return create_model(name, __base__=Group, __doc__=f"Overrides of the keys of {group.__name__}.", **fields)


#: a ``variants.<name>`` entry: any ``model`` key, overriding ``conf/model``; the variant's whole
#: model (with the rules between keys) is checked where it is used (:meth:`Params.model_of`)
ModelOverrides = _overrides_of(Model, "ModelOverrides")


class Trainer(Group):
    """``conf/trainer``: Lightning Trainer arguments. The ones flexatt sets are checked; any
    other key goes to Lightning as it is (whose own errors name the trainer group)."""

    model_config = ConfigDict(strict=True, extra="allow", validate_assignment=True)
    accelerator: Literal[ACCELERATORS] = "cpu"
    devices: Union[Literal["auto"], int, str, list[NonNegativeInt]] = 1
    num_nodes: PositiveInt = 1
    strategy: Text = "auto"
    precision: Any = "auto"  # one of PRECISIONS, or Lightning's short forms 32, 16, 64, bf16
    gradient_clip_val: Optional[NonNegativeFloat] = 3.0
    log_every_n_steps: NonNegativeInt = 20
    enable_progress_bar: bool = True
    deterministic: Any = True  # true, false, warn or null

    @field_validator("precision")
    @classmethod
    def _precision(cls, value: Any) -> Any:
        if isinstance(value, bool) or value not in (*PRECISIONS, *PRECISION_ALIASES):
            raise PydanticCustomError("flexatt", "must be one of {allowed} (got {value})",
                                      {"allowed": ", ".join(PRECISIONS), "value": repr(value)})
        return value

    @field_validator("deterministic")
    @classmethod
    def _deterministic(cls, value: Any) -> Any:
        if value not in (True, False, "warn", None) or (not isinstance(value, bool) and value in (0, 1)):
            raise PydanticCustomError("flexatt", "must be one of true, false, warn, null (got {value})",
                                      {"value": repr(value)})
        return value

    @field_validator("devices")
    @classmethod
    def _devices(cls, value: Any) -> Any:
        ok = (value == "auto" or (isinstance(value, int) and (value >= 1 or value == -1))
              or (isinstance(value, str) and value.replace(",", "").strip().isdigit())
              or (isinstance(value, list) and len(value) > 0))
        if not ok:
            raise PydanticCustomError("flexatt", "must be an integer >= 1, -1 (every device), auto, or a "
                                      "list of device indices (got {value})", {"value": repr(value)})
        return value

    @field_validator("strategy")
    @classmethod
    def _strategy(cls, value: str) -> str:
        from pytorch_lightning.strategies import StrategyRegistry

        known = ["auto", *StrategyRegistry.available_strategies()]
        if value not in known:
            raise PydanticCustomError("flexatt", "must be one of {known} (got {value})",
                                      {"known": ", ".join(known), "value": repr(value)})
        return value


class Train(Group):
    variant: Text = "flexible"
    data_dir: Text = "artifacts/tok"
    out_dir: Text = "artifacts/models"
    metrics_dir: Text = "results/train"
    epochs: PositiveInt = 3
    batch_size: PositiveInt = 64
    lr: PositiveFloat = 0.002
    lr_schedule: Literal[LR_SCHEDULES] = "plateau"
    lr_plateau_patience: PositiveInt = 1
    lr_halve_from_epoch: PositiveInt = 3
    early_stopping_patience: Optional[PositiveInt] = None
    label_smoothing: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.0
    val_max_len_ratio: PositiveFloat = 2.0
    seed: NonNegativeInt = 1234
    threads: PositiveInt = 1


class Finetune(Group):
    variant: Text = "flexible"
    variants: list[Text] = Field(default_factory=lambda: ["flexible", "flexible_sact"])
    init_dir: Text = "artifacts/models"
    out_dir: Text = "artifacts/models_ft"
    metrics_dir: Text = "results/finetune"
    beta: NonNegativeFloat = 0.1
    epochs: PositiveInt = 1
    lr: PositiveFloat = 0.0002
    control_out_dir: Text = "artifacts/models_ctl"  # control@<variant>: β = 0, the fine-tuning's epochs
    control_metrics_dir: Text = "results/finetune_control"


class SweepBeta(Group):
    """``conf/sweep_beta``: fine-tuning's β, swept upward (:mod:`flexatt.stages.sweep_beta`)."""

    variant: Text = "flexible"
    grid: Annotated[list[PositiveFloat], Field(min_length=1)] = Field(
        default_factory=lambda: [0.1, 1.0, 10.0, 100.0, 1000.0])
    tau: Tau = 2.0
    max_drop: NonNegativeFloat = 1.0
    tolerance: NonNegativeFloat = 0.5
    out_dir: Text = "artifacts/beta"
    out: Text = "results/sweep_beta.json"
    curve_file: Text = "results/plots/beta.csv"
    figure: Text = "results/figures/beta.png"

    @field_validator("grid")
    @classmethod
    def _ascending(cls, value: list[float]) -> list[float]:
        return _increasing(value, "sweep_beta.grid", "the sweep goes upward")


class Decode(Group):
    beam_size: PositiveInt = 5
    alpha: NonNegativeFloat = 1.0
    max_len_ratio: PositiveFloat = 2.0
    batch_size: PositiveInt = 150
    backend: Literal["auto", "kernel", "eager"] = "auto"


class SweepTau(Group):
    models: list[Text] = Field(default_factory=lambda: ["flexible", "flexible_ft", "flexible_ctl", "flexible_sact",
                                                        "flexible_sact_ft", "flexible_sact_ctl"])
    # the τ search brackets and bisects on log τ: positive, finite (τ = ∞ is decoded as the reference)
    grid: Annotated[list[PositiveFloat], Field(min_length=1)] = Field(default_factory=lambda: [0.8, 1.0, 1.2, 1.4, 1.6])
    add_log_mean_len: bool = True
    search_steps: NonNegativeInt = 4
    tolerance: NonNegativeFloat = 0.5
    curve_model: Text = "flexible_ft"
    curve_taus: list[Tau] = Field(default_factory=lambda: [0.3, 0.5, 0.8, 1.0, 1.2, 1.4, 1.6, 5.0, 8.0, math.inf])
    curve_splits: list[Literal[SPLITS]] = Field(default_factory=lambda: ["dev", "test"])
    out: Text = "results/sweep_tau.json"
    curve_file: Text = "results/plots/tradeoff.csv"
    figure: Text = "results/figures/tradeoff.png"
    decodes: Text = "artifacts/decodes/sweep_tau.json.xz"


class SweepSigma(Group):
    grid: Annotated[list[PositiveFloat], Field(min_length=1)] = Field(default_factory=lambda: [1.5, 5.0, 7.5, 10.0])
    base_variant: Text = "flexible"
    warm_start_epochs: PositiveInt = 1
    lr: PositiveFloat = 0.0005
    out_dir: Text = "artifacts/sigma"
    out: Text = "results/sweep_sigma.json"
    curve_file: Text = "results/plots/sigma.csv"
    figure: Text = "results/figures/sigma.png"


class Evaluate(Group):
    checkpoints: dict[str, Text] = Field(default_factory=dict)  # row name -> checkpoint
    tau_rows: list[Text] = Field(default_factory=lambda: ["flexible", "flexible_ft", "flexible_ctl", "flexible_sact",
                                                          "flexible_sact_ft", "flexible_sact_ctl"])
    split: Literal[SPLITS] = "test"
    length_buckets: Annotated[list[PositiveInt], Field(min_length=1)] = Field(
        default_factory=lambda: [10, 20, 30, 40, 50])
    bootstrap_samples: PositiveInt = 1000
    bootstrap_seed: PositiveInt = 1234  # sacrebleu leaves 0 unseeded
    samples: list[NonNegativeInt] = Field(default_factory=lambda: [0, 1, 2])
    out: Text = "results/metrics.json"
    table: Text = "results/table1.md"
    by_length_file: Text = "results/plots/bleu_by_length.csv"
    figures_dir: Text = "results/figures/evaluate"
    translations_dir: Text = "artifacts/translations"
    decodes: Text = "artifacts/decodes/evaluate.json.xz"

    @field_validator("length_buckets")
    @classmethod
    def _increasing(cls, value: list[int]) -> list[int]:
        return _increasing(value, "evaluate.length_buckets", "the list must increase")

    @model_validator(mode="after")
    def _rows(self) -> Evaluate:
        if "global" not in self.checkpoints:
            raise _error("checkpoints", "must include global (the reference of every comparison)")
        for i, row in enumerate(self.tau_rows):
            if row not in self.checkpoints:
                raise _error(f"tau_rows[{i}]", f"must be one of {', '.join(self.checkpoints)} (got {row!r})")
        return self


class Compare(Group):
    """``conf/compare``: the compare stage (claims, matched windows, Holm; docs/method.md, Claims)."""

    models: list[Text] = Field(default_factory=lambda: ["flexible", "flexible_ft"])  # matched to each fixed window
    curve_models: list[Text] = Field(default_factory=lambda: ["flexible", "flexible_ft"])  # tau curves on test
    search_steps: NonNegativeInt = 6  # bisections on log tau per matched window
    alpha: Annotated[float, Field(gt=0.0, lt=1.0)] = 0.05  # family-wise error rate of the verdicts
    margin: NonNegativeFloat = 0.5  # BLEU loss that counts as none ("at <= 0.5 BLEU")
    ar_trials: PositiveInt = 10000  # approximate randomisation trials (sacrebleu's default)
    out: Text = "results/compare.json"
    report: Text = "results/compare.md"
    curve_file: Text = "results/plots/matched_window.csv"
    figure: Text = "results/figures/matched_window.png"


class Logger(Group):
    enabled: bool = True
    project: Text = "flexatt"
    entity: Optional[Text] = None
    mode: Literal[LOGGER_MODES] = "auto"
    dir: Text = "."
    group: Optional[Text] = None
    log_checkpoint: bool = True


class SweepSummary(Group):
    """``hydra.callbacks.sweep_summary`` of a named sweep (:class:`flexatt.sweeps.SweepSummary`)."""

    model_config = ConfigDict(strict=True, extra="forbid")
    name: Text
    metrics_file: Text
    metrics: dict[str, Text]  # summary column -> dotted path in each job's metrics file
    main_metric: Text
    mode: Literal["max", "min"] = "max"
    x: Optional[Text] = None
    plot: Optional[list[Text]] = None
    aggregate: bool = False

    @field_validator("metrics")
    @classmethod
    def _columns(cls, value: dict) -> dict:
        if not value:
            raise PydanticCustomError("flexatt", "must map column names to dotted paths (got {{}})")
        return value

    @model_validator(mode="after")
    def _known_columns(self) -> SweepSummary:
        columns = ", ".join(self.metrics)
        if self.main_metric not in self.metrics:
            raise _error("main_metric", f"must be one of {columns} (got {self.main_metric!r})")
        for column in self.plot or []:
            if column not in self.metrics:
                raise _error("plot", f"{column!r} is not a column of metrics ({columns})")
        return self


class Params(BaseModel):
    """The whole ``params.yaml`` (and a stage's overrides on top of it)."""

    model_config = ConfigDict(strict=True, extra="allow")  # sweep settings, Hydra's own keys
    seed: NonNegativeInt = 1234
    profile: Text = "default"
    data: Data = Field(default_factory=Data)
    filter: Filter = Field(default_factory=Filter)
    tokenize: Tokenize = Field(default_factory=Tokenize)
    model: Model = Field(default_factory=Model)
    variants: dict[str, ModelOverrides] = Field(default_factory=dict)
    trainer: Trainer = Field(default_factory=Trainer)
    train: Train = Field(default_factory=Train)
    finetune: Finetune = Field(default_factory=Finetune)
    sweep_beta: SweepBeta = Field(default_factory=SweepBeta)
    decode: Decode = Field(default_factory=Decode)
    sweep_tau: SweepTau = Field(default_factory=SweepTau)
    sweep_sigma: SweepSigma = Field(default_factory=SweepSigma)
    evaluate: Evaluate = Field(default_factory=Evaluate)
    compare: Compare = Field(default_factory=Compare)
    logger: Logger = Field(default_factory=Logger)

    @model_validator(mode="after")
    def _names(self) -> Params:
        """The variants that other groups name exist. (Rows of ``evaluate.checkpoints`` are
        checked where they are read: a stage may run with some rows removed.)"""
        variants = list(self.variants)
        for key, name in [("train.variant", self.train.variant), ("finetune.variant", self.finetune.variant),
                          ("sweep_sigma.base_variant", self.sweep_sigma.base_variant),
                          ("sweep_beta.variant", self.sweep_beta.variant),
                          *((f"finetune.variants[{i}]", v) for i, v in enumerate(self.finetune.variants))]:
            if variants and name not in variants:
                raise ConfigError(key, f"must be one of {', '.join(variants)} (got {name!r})")
        return self

    def flexible_variant(self, key: str) -> str:
        """The variant that the setting ``key`` (``finetune.variant``, ``sweep_sigma.base_variant``)
        names, which must have a penalty strength g_t (flexible or flexible_sact attention)."""
        name = {"finetune.variant": self.finetune.variant, "sweep_sigma.base_variant": self.sweep_sigma.base_variant,
                "sweep_beta.variant": self.sweep_beta.variant}[key]
        if self.model_of(name, key).attention not in FLEXIBLE:
            raise ConfigError(key, f"must name a flexible model ({', '.join(FLEXIBLE)}), not {name!r}: "
                              "the objective needs g_t")
        return name

    def model_of(self, variant: str, key: str = "train.variant") -> Model:
        """``model`` with the overrides of ``variants[variant]``, validated as a whole; ``key``
        names the setting that chose ``variant`` in the error about an unknown one."""
        if variant not in self.variants:
            raise ConfigError(key, f"must be one of {', '.join(self.variants)} (got {variant!r})")
        overrides = self.variants[variant].model_dump(exclude_unset=True)  # an explicit null overrides too
        try:
            return Model.model_validate({**self.model.model_dump(), **overrides})
        except ValidationError as exc:
            raise _config_error(exc, "model") from None


# --------------------------------------------------------------------------------------
# errors: pydantic's, in flexatt's words
# --------------------------------------------------------------------------------------
def _error(key: str, message: str) -> PydanticCustomError:
    """A rule of a group's validator that names one of its keys (``key``, relative to the group)."""
    return PydanticCustomError("flexatt_key", "{message}", {"key": key, "message": message})


def _show(value: Any) -> str:
    return repr(value)


def _number(value: Any) -> str:
    return str(float(value)) if isinstance(value, (int, float)) and not isinstance(value, bool) else repr(value)


def _message(error: dict) -> str:
    """What a pydantic error means, as flexatt says it."""
    kind, ctx, value = error["type"], error.get("ctx") or {}, error.get("input")
    if kind in ("flexatt", "flexatt_key", "flexatt_item"):
        return error["msg"]
    if kind == "missing":
        return "missing from the configuration"
    if kind == "extra_forbidden":
        return "unknown key"
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return f"must be an integer (got {_show(value)})"
    if kind in ("float_type", "float_parsing"):
        return f"must be a number (got {_show(value)})"
    if kind == "finite_number":
        return f"must be a finite number (got {value})"
    if kind in ("bool_type", "bool_parsing"):
        return f"must be true or false (got {_show(value)})"
    if kind in ("string_type", "string_too_short", "string_pattern_mismatch"):
        return f"must be a non-empty string (got {_show(value)})"
    if kind in ("list_type", "dict_type"):
        return f"must be a {'list' if kind == 'list_type' else 'mapping'} (got {_show(value)})"
    if kind == "too_short":
        return "must not be empty"
    if kind == "literal_error":
        expected = ctx.get("expected", "").replace("'", "").replace(" or ", ", ")
        return f"must be one of {expected} (got {_show(value)})"
    bounds = {"greater_than": ">", "greater_than_equal": ">=", "less_than": "<", "less_than_equal": "<="}
    if kind in bounds:
        limit = next(iter(ctx.values()))
        shown = _number(value) if isinstance(limit, float) else _show(value)
        return f"must be {bounds[kind]} {limit} (got {shown})"
    return f"{error['msg']} (got {_show(value)})"


def _key(loc: tuple, prefix: str = "") -> str:
    key = prefix
    for part in loc:
        if isinstance(part, int):
            key += f"[{part}]"
        elif part in ("function-after", "function-before", "function-plain", "function-wrap", "[key]"):
            continue  # pydantic's names of a validator or of a mapping's key, not keys
        else:
            key += ("." if key else "") + str(part)
    return key


def _config_error(exc: ValidationError, prefix: str = "") -> ConfigError:
    error = exc.errors(include_url=False)[0]
    key = _key(tuple(error["loc"]), prefix)
    ctx = error.get("ctx") or {}
    if error["type"] == "flexatt_key":
        key = f"{key}.{ctx['key']}" if key else ctx["key"]
    elif error["type"] == "flexatt_item":
        key = f"{key}[{ctx['index']}]"
    return ConfigError(key or "params", _message(error))


def validate_group(group: type[BaseModel], values: Any, prefix: str) -> BaseModel:
    """One group's values (a mapping) checked by its schema ``group``; errors name ``prefix.<key>``."""
    from omegaconf import OmegaConf

    data = OmegaConf.to_container(values, resolve=True) if OmegaConf.is_config(values) else dict(values)
    try:
        return group.model_validate(data)
    except ValidationError as exc:
        raise _config_error(exc, prefix) from None


def group(cfg: Any, name: str) -> BaseModel:
    """The group ``name`` of ``cfg``, validated alone (for code that reads one group of a
    configuration that may hold only that group; a stage validates the whole with :func:`validate`)."""
    if isinstance(cfg, Params):
        return getattr(cfg, name)
    from omegaconf import OmegaConf

    values = OmegaConf.select(cfg, name) if OmegaConf.is_config(cfg) else cfg.get(name)
    if values is None:
        raise ConfigError(name, "missing from the configuration")
    return validate_group(Params.model_fields[name].annotation, values, name)


def params(cfg: Any) -> Params:
    """``cfg`` itself when it is already a validated :class:`Params`, else :func:`validate` of it."""
    return cfg if isinstance(cfg, Params) else validate(cfg)


def as_dict(cfg: Any) -> dict:
    """The plain nested dict of a configuration: a :class:`Params` as given (the keys it was
    validated from, not the defaults it filled in), a ``DictConfig`` resolved, a dict as it is."""
    from omegaconf import OmegaConf

    if isinstance(cfg, Params):
        return cfg.model_dump(exclude_unset=True)
    return OmegaConf.to_container(cfg, resolve=True) if OmegaConf.is_config(cfg) else dict(cfg)


def validate(cfg: Any) -> Params:
    """Check a whole configuration (an OmegaConf ``DictConfig`` or a dict) against the schema.

    Raises:
        ConfigError: the first rule that fails, naming its key.
    """
    from omegaconf import OmegaConf

    if isinstance(cfg, Params):
        return cfg
    data = OmegaConf.to_container(cfg, resolve=True) if OmegaConf.is_config(cfg) else dict(cfg)
    try:
        return Params.model_validate(data)
    except ValidationError as exc:
        raise _config_error(exc) from None

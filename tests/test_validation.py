"""Every stage checks its parameters before any work: one test per rule.

Each case runs a stage with one bad override and expects exit status 2, a one-line
``error: <key>: <what is allowed>`` on stderr and no output at all (no file created or changed,
no W&B run). The stages run in-process through :func:`flexatt.config.run_stage` (the same code
path as ``python -m flexatt.stages.<name>``, minus the interpreter start-up); a few cases run as
real subprocesses too.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from conftest import copy_of, run_inprocess, run_module
from flexatt import config as C

VARIANTS = ["global", "local_m", "local_p", "flexible", "sact", "flexible_sact"]


@pytest.fixture(scope="module")
def workdir(smoke_tokenized, tmp_path_factory) -> Path:
    """Smoke params, filtered and tokenized data, placeholder checkpoints at every path the
    later stages read (a rule must fail before any of them is opened), a small user corpus."""
    path = copy_of(smoke_tokenized, tmp_path_factory.mktemp("validation"))
    for folder in [*(f"artifacts/models/{v}" for v in VARIANTS), "artifacts/models_ft/flexible",
                   "artifacts/models_ft/flexible_sact", "artifacts/models_ctl/flexible",
                   "artifacts/models_ctl/flexible_sact"]:
        (path / folder).mkdir(parents=True)
        (path / folder / "best.ckpt").write_bytes(b"placeholder")
    tau = {"models": {m: {"selected_tau": 1.0} for m in ("flexible", "flexible_ft", "flexible_ctl", "flexible_sact",
                                                           "flexible_sact_ft", "flexible_sact_ctl")}}
    (path / "results/sweep_tau.json").write_text(json.dumps(tau))
    (path / "my.src").write_text("a b\nc d\n")
    (path / "my.tgt").write_text("A B\nC D\n")
    (path / "my.tsv").write_text("es\ten\na b\tA B\n")
    return path


def _snapshot(root: Path) -> tuple[dict, set]:
    """(every file outside wandb/ with its size and mtime, the W&B run folders)."""
    files, runs = {}, set()
    for p in root.rglob("*"):
        rel = p.relative_to(root)
        if rel.parts[0] == "wandb":
            if len(rel.parts) == 2 and rel.parts[1].startswith(("offline-run-", "run-")):
                runs.add(rel)
            continue
        stat = p.lstat()
        files[rel] = (stat.st_size, stat.st_mtime_ns) if p.is_file() else "dir"
    return files, runs


@pytest.fixture
def in_workdir(workdir, monkeypatch):
    monkeypatch.chdir(workdir)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.delenv(C.PARAMS_ENV, raising=False)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # only a regression would train; keep it short
    before = _snapshot(workdir)
    yield workdir
    torch.set_num_threads(threads)
    files, _ = _snapshot(workdir)
    for rel in sorted(set(files) - set(before[0]), key=lambda r: -len(r.parts)):  # keep the fixture pristine
        target = workdir / rel
        shutil.rmtree(target) if target.is_dir() else target.unlink(missing_ok=True)


def _case(stage, overrides, *expected):
    overrides = [overrides] if isinstance(overrides, str) else list(overrides)
    return pytest.param(stage, overrides, expected, id=f"{stage}:{' '.join(overrides)}")


CASES = [
    # ----------------------------------------------------------------------------- filter
    _case("filter", "filter.dev_size=0", "filter.dev_size: must be >= 1 (got 0)"),
    _case("filter", "filter.test_size=-5", "filter.test_size: must be >= 1 (got -5)"),
    _case("filter", "filter.max_len=0", "filter.max_len: must be >= 1 (got 0)"),
    _case("filter", "filter.max_ratio=0.5", "filter.max_ratio: must be >= 1.0 (got 0.5)"),
    _case("filter", "filter.on_invalid=ignore", "filter.on_invalid: must be one of error, skip (got 'ignore')"),
    _case("filter", "filter.seed=-1", "filter.seed: must be >= 0 (got -1)"),
    _case("filter", "filter.out_dir=", "filter.out_dir: must be a non-empty string"),
    _case("filter", ["data.src=nope.src", "data.tgt=nope.tgt"], "data.src: file not found: nope.src"),
    _case("filter", "data.src=my.src", "data.tgt: data.src and data.tgt must be given together"),
    _case("filter", ["data.src=my.src", "data.tgt=my.tgt", "data.ref2=nope.ref2"],
          "data.ref2: file not found: nope.ref2"),
    _case("filter", ["data.src=my.src", "data.tgt=my.tgt", "data.align=nope.align"],
          "data.align: file not found: nope.align"),
    _case("filter", ["data.synthetic=null", "data.tsv=nope.tsv", "+data.columns.src=es", "+data.columns.tgt=en"],
          "data.tsv: file not found: nope.tsv"),
    _case("filter", ["data.synthetic=null", "data.tsv=my.tsv", "+data.columns.src=es"],
          "data.columns: must map src and tgt"),
    _case("filter", "data.synthetic=null", "data: no input configured: set data.src and data.tgt"),
    _case("filter", "data.synthetic.n_pairs=0", "data.synthetic.n_pairs: must be >= 1 (got 0)"),
    _case("filter", "data.synthetic.chunk=0", "data.synthetic.chunk: must be >= 1 (got 0)"),
    _case("filter", "data.synthetic.vocab_size=1", "data.synthetic.vocab_size: must be >= 2 (got 1)"),
    _case("filter", ["data.synthetic.min_len=20", "data.synthetic.max_len=5"],
          "data.synthetic.min_len: must be <= data.synthetic.max_len = 5 (got 20)"),
    # ----------------------------------------------------------------------------- tokenize
    _case("tokenize", "tokenize.model_type=wordpiece",
          "tokenize.model_type: must be one of unigram, bpe, char, word (got 'wordpiece')"),
    _case("tokenize", "tokenize.joint=maybe", "tokenize.joint: must be true or false (got 'maybe')"),
    _case("tokenize", "tokenize.vocab_size=3", "tokenize.vocab_size: must be >= 8 (got 3)"),
    _case("tokenize", "tokenize.character_coverage=0", "tokenize.character_coverage: must be > 0.0 (got 0.0)"),
    _case("tokenize", "tokenize.character_coverage=1.5", "tokenize.character_coverage: must be <= 1.0 (got 1.5)"),
    _case("tokenize", "tokenize.threads=0", "tokenize.threads: must be >= 1 (got 0)"),
    _case("tokenize", "tokenize.seed=-1", "tokenize.seed: must be >= 0 (got -1)"),
    _case("tokenize", "tokenize.in_dir=nope", "nope/train.src: not found (run the filter stage first)"),
    # ----------------------------------------------------------------------------- train
    _case("train", "train.variant=bahdanau", "train.variant: must be one of global, local_m, local_p, "
          "flexible, sact, flexible_sact (got 'bahdanau')"),
    _case("train", "train.epochs=0", "train.epochs: must be >= 1 (got 0)"),
    _case("train", "train.lr=0", "train.lr: must be > 0.0 (got 0.0)"),
    _case("train", "train.lr=-0.1", "train.lr: must be > 0.0 (got -0.1)"),
    _case("train", "train.batch_size=0", "train.batch_size: must be >= 1 (got 0)"),
    _case("train", "train.lr_halve_from_epoch=0", "train.lr_halve_from_epoch: must be >= 1 (got 0)"),
    _case("train", "train.seed=-1", "train.seed: must be >= 0 (got -1)"),
    _case("train", "train.val_max_len_ratio=0", "train.val_max_len_ratio: must be > 0.0 (got 0.0)"),
    _case("train", "train.early_stopping_patience=0", "train.early_stopping_patience: must be >= 1 (got 0)"),
    _case("train", "train.early_stopping_patience=soon",
          "train.early_stopping_patience: must be an integer (got 'soon')"),
    _case("train", "train.data_dir=nope", "nope/src.model: SentencePiece model not found"),
    _case("train", "model.sigma=0", "model.sigma: must be > 0.0 (got 0.0)"),
    _case("train", "model.sigma=-1.5", "model.sigma: must be > 0.0 (got -1.5)"),
    _case("train", ["train.variant=sact", "model.sact_lambda=1"], "model.sact_lambda: must be > 1.0 (got 1.0)"),
    _case("train", ["train.variant=sact", "model.sact_lambda=0.5"], "model.sact_lambda: must be > 1.0 (got 0.5)"),
    _case("train", ["train.variant=global", "model.score=cosine"],
          "model.score: must be one of concat, general, dot, scaled_dot, location (got 'cosine')"),
    _case("train", ["train.variant=global", "+variants.global.score=cosine"],
          "variants.global.score: must be one of concat, general, dot, scaled_dot, location (got 'cosine')"),
    _case("train", "variants.flexible.attention=sparse", "model.attention: must be one of global, local_m, "),
    _case("train", "model.dropout=1", "model.dropout: must be < 1.0 (got 1.0)"),
    _case("train", "model.emb_size=0", "model.emb_size: must be >= 1 (got 0)"),
    _case("train", "model.hidden_size=-3", "model.hidden_size: must be >= 1 (got -3)"),
    _case("train", "model.att_size=0", "model.att_size: must be >= 1 (got 0)"),
    _case("train", "model.readout_size=0", "model.readout_size: must be >= 1 (got 0)"),
    _case("train", ["train.variant=local_m", "model.local_D=0"], "model.local_D: must be >= 1 (got 0)"),
    _case("train", "model.max_src_len=0", "model.max_src_len: must be >= 1 (got 0)"),
    _case("train", ["train.variant=global", "model.temperature=0"],
          "model.temperature: must be > 0.0 (got 0.0)"),
    _case("train", ["train.variant=sact", "model.temperature=1.0"],
          "model.temperature: must be null when model.attention is sact"),
    _case("train", "model.g_feedback=maybe", "model.g_feedback: must be true or false (got 'maybe')"),
    _case("train", "logger.mode=sometimes", "logger.mode: must be one of auto, online, offline, disabled"),
    _case("train", "logger.enabled=maybe", "logger.enabled: must be true or false"),
    _case("train", "logger.log_checkpoint=maybe", "logger.log_checkpoint: must be true or false"),
    _case("train", "trainer.devices=0", "trainer.devices: must be an integer >= 1, -1 (every device), auto"),
    _case("train", "trainer.accelerator=abacus", "trainer.accelerator: must be one of auto, cpu, gpu"),
    _case("train", "trainer.strategy=telepathy", "trainer.strategy: must be one of auto, ddp,"),
    _case("train", "trainer.precision=8-bit", "trainer.precision: must be one of 32-true, 16-mixed, bf16-mixed"),
    _case("train", "trainer.gradient_clip_val=-1", "trainer.gradient_clip_val: must be >= 0.0 (got -1.0)"),
    _case("train", "trainer.deterministic=maybe",
          "trainer.deterministic: must be one of true, false, warn, null (got 'maybe')"),
    # ----------------------------------------------------------------------------- finetune
    _case("finetune", "finetune.variant=global", "finetune.variant: must name a flexible model"),
    _case("finetune", "finetune.variant=bahdanau", "finetune.variant: must be one of global, local_m"),
    _case("finetune", "finetune.beta=-0.1", "finetune.beta: must be >= 0.0 (got -0.1)"),
    _case("finetune", "finetune.epochs=0", "finetune.epochs: must be >= 1 (got 0)"),
    _case("finetune", "finetune.lr=0", "finetune.lr: must be > 0.0 (got 0.0)"),
    _case("finetune", "finetune.init_dir=nope", "nope/flexible/best.ckpt: checkpoint to start from not found"),
    # ----------------------------------------------------------------------------- sweep_sigma
    _case("sweep_sigma", "sweep_sigma.grid=[1.5,0]", "sweep_sigma.grid[1]: must be > 0"),
    _case("sweep_sigma", "sweep_sigma.grid=[-1]", "sweep_sigma.grid[0]: must be > 0"),
    _case("sweep_sigma", "sweep_sigma.grid=[]", "sweep_sigma.grid: must not be empty"),
    _case("sweep_sigma", "sweep_sigma.base_variant=global", "sweep_sigma.base_variant: must name a flexible model"),
    _case("sweep_sigma", "sweep_sigma.base_variant=bahdanau", "sweep_sigma.base_variant: must be one of global"),
    _case("sweep_sigma", "sweep_sigma.warm_start_epochs=0", "sweep_sigma.warm_start_epochs: must be >= 1 (got 0)"),
    _case("sweep_sigma", "sweep_sigma.lr=0", "sweep_sigma.lr: must be > 0.0 (got 0.0)"),
    _case("sweep_sigma", "sweep_tau.grid=[]", "sweep_tau.grid: must not be empty"),
    _case("sweep_sigma", "decode.beam_size=0", "decode.beam_size: must be >= 1 (got 0)"),
    _case("sweep_sigma", "sweep_sigma.out=", "sweep_sigma.out: must be a non-empty string"),
    # ----------------------------------------------------------------------------- sweep_tau
    _case("sweep_tau", "sweep_tau.models=[flexible,bahdanau]", "sweep_tau.models[1]: must be one of global, local_m"),
    _case("sweep_tau", "sweep_tau.grid=[0.8,-1]", "sweep_tau.grid[1]: must be > 0.0 (got -1.0)"),
    _case("sweep_tau", "sweep_tau.grid=[nan]", "sweep_tau.grid[0]: must be a finite number (got nan)"),
    _case("sweep_tau", "sweep_tau.tolerance=-0.5", "sweep_tau.tolerance: must be >= 0.0 (got -0.5)"),
    _case("sweep_tau", "sweep_tau.curve_model=bahdanau", "sweep_tau.curve_model: must be one of global, local_m"),
    _case("sweep_tau", "sweep_tau.curve_taus=[1,-2]", "sweep_tau.curve_taus[1]: must be >= 0.0 (got -2.0)"),
    _case("sweep_tau", "sweep_tau.curve_splits=[train]", "sweep_tau.curve_splits[0]: must be one of dev, test (got 'train')"),
    _case("sweep_tau", "sweep_tau.add_log_mean_len=maybe", "sweep_tau.add_log_mean_len: must be true or false"),
    _case("sweep_tau", "decode.beam_size=0", "decode.beam_size: must be >= 1 (got 0)"),
    _case("sweep_tau", "decode.alpha=-1", "decode.alpha: must be >= 0.0 (got -1.0)"),
    _case("sweep_tau", "decode.max_len_ratio=0", "decode.max_len_ratio: must be > 0.0 (got 0.0)"),
    _case("sweep_tau", "decode.batch_size=0", "decode.batch_size: must be >= 1 (got 0)"),
    _case("sweep_tau", "evaluate.checkpoints.flexible_ft=nope.ckpt",
          "evaluate.checkpoints.flexible_ft: file not found: nope.ckpt"),
    _case("sweep_tau", "sweep_tau.figure=", "sweep_tau.figure: must be a non-empty string"),
    # ----------------------------------------------------------------------------- evaluate
    _case("evaluate", "evaluate.split=train", "evaluate.split: must be one of dev, test (got 'train')"),
    _case("evaluate", "~evaluate.checkpoints.global", "evaluate.checkpoints: must include global"),
    _case("evaluate", "evaluate.tau_rows=[flexible,bahdanau]", "evaluate.tau_rows[1]: must be one of global, "),
    _case("evaluate", "sweep_tau.out=nope.json", "nope.json: not found (run the sweep_tau stage first)"),
    _case("evaluate", "decode.beam_size=0", "decode.beam_size: must be >= 1 (got 0)"),
    _case("evaluate", "evaluate.length_buckets=[20,10]", "evaluate.length_buckets[1]: must be > "
          "evaluate.length_buckets[0] = 20"),
    _case("evaluate", "evaluate.length_buckets=[ten]", "evaluate.length_buckets[0]: must be an integer"),
    _case("evaluate", "evaluate.samples=[first]", "evaluate.samples[0]: must be an integer"),
    _case("evaluate", "evaluate.checkpoints.sact=nope.ckpt", "evaluate.checkpoints.sact: file not found: nope.ckpt"),
    _case("evaluate", "evaluate.table=", "evaluate.table: must be a non-empty string"),
]


@pytest.mark.parametrize("stage, overrides, expected", CASES)
def test_bad_value_is_refused_before_any_work(in_workdir, capsys, stage, overrides, expected):
    before = _snapshot(in_workdir)
    if stage == "train" and not any(o.startswith("train.epochs=") for o in overrides):
        overrides = ["train.epochs=1", *overrides]  # were the value accepted, train briefly
    code, stderr = run_inprocess(stage, overrides, capsys)
    errors = [line for line in stderr.splitlines() if line.startswith("error: ")]
    assert code == 2, stderr[-2000:]
    assert len(errors) == 1 and "Traceback" not in stderr, stderr[-2000:]
    for text in expected:
        assert text in errors[0]
    after = _snapshot(in_workdir)
    assert after[1] == before[1], "a W&B run was started for a refused configuration"
    assert after[0] == before[0], "an output was written: " + ", ".join(
        str(p) for p in set(after[0].items()) ^ set(before[0].items()))


@pytest.mark.parametrize("stage, overrides, expected", [
    ("filter", ["filter.dev_size=0"], "error: filter.dev_size: must be >= 1 (got 0)"),
    # the same rules run in-process above; each process costs seconds of start-up
    pytest.param("train", ["train.variant=flexible", "model.sigma=0"], "error: model.sigma: must be > 0.0 (got 0.0)",
                 marks=pytest.mark.slow),
    pytest.param("sweep_tau", ["sweep_tau.grid=[-1]"], "error: sweep_tau.grid[0]: must be > 0.0 (got -1.0)",
                 marks=pytest.mark.slow),
])
def test_refusal_as_a_user_sees_it(workdir, stage, overrides, expected):
    """The real entry point: one line on stderr, no traceback, exit status 2."""
    result = run_module(f"flexatt.stages.{stage}", *overrides, cwd=workdir)
    assert result.returncode == 2
    assert expected in result.stderr and "Traceback" not in result.stderr
    assert [line for line in result.stderr.splitlines() if line.startswith("error:")] == [expected]


@pytest.mark.parametrize("args, expected", [
    (["--beam", "0"], "error: --beam: must be >= 1 (got 0)"),
    (["--tau", "-1"], "error: --tau: must be >= 0 (got -1.0)"),
])
def test_translate_refuses_bad_options(tmp_path, args, expected):
    from flexatt.cli import main

    with pytest.raises(SystemExit) as info:
        main(["translate", "--checkpoint", str(tmp_path / "none.ckpt"), *args])
    assert info.value.code == expected

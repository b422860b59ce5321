"""``train(cfg, variant) -> (metrics, objects)``: train one model with a Lightning Trainer.

Callable from tests and notebooks; the ``train`` and ``finetune`` stages are thin wrappers.

A run's model folder ``<out_dir>/<variant>/`` holds what evaluation, translation and a
teammate need: ``best.ckpt`` (the weights of the best dev BLEU, with the hyperparameters and the
epoch: no optimiser state), the vocabularies ``src.model`` and ``tgt.model``, and ``run.json`` (a
fingerprint of everything that determines the run, and ``epochs_done`` once it has ended). The
resume state, ``last.ckpt`` (weights, optimiser, schedule and callbacks at the end of the latest
epoch), lives apart in :func:`resume_folder` (``.resume/<model folder>``), which DVC does not
track; a stage deletes it (:func:`drop_resume_state`) once its runs have finished. When a stage is
started again after a crash or ``kill -9``, a ``last.ckpt`` whose run's fingerprint matches is
resumed; since every epoch reseeds torch with ``seed + epoch`` (the dropout masks'
stream; the DataLoaders draw nothing from it, :class:`flexatt.data.datamodule.TranslationData`)
and the batch order is a function of ``seed + epoch``, the resumed run ends exactly where an
uninterrupted one ends.
A ``last.ckpt`` of a different configuration, data or code is never resumed.

``train.threads`` is the number of intra-op threads the run trains (and decodes dev) with: the
weights depend on it (the order of a product's partial sums), so it is a parameter of the run,
part of the resume fingerprint and recorded in the metrics JSON, never taken from the machine's
core count. A model trained beside others (``flexatt repro``, the sweeps' worker processes,
:mod:`flexatt.parallel`) gets exactly the weights it gets alone; ``side_by_side`` in the metrics
records how many trainings the launcher allowed at once.

``trainer.precision: auto`` is decided once per run (:func:`flexatt.runtime.resolve_precision`),
recorded in ``run.json``, the metrics JSON (``precision``, ``precision_reason``) and the W&B
config; a resumed run keeps the precision it started with, and under DDP the ranks started by
rank 0 take rank 0's decision.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import shutil
import sys
import tempfile
import time
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from omegaconf import DictConfig
from pytorch_lightning.callbacks import Callback, EarlyStopping, ModelCheckpoint

from flexatt import schema
from flexatt.attention import set_length_ratio
from flexatt.checkpoints import EPOCHS_DONE, SIDES, load_checkpoint_state, read_checkpoint
from flexatt.data.datamodule import TranslationData
from flexatt.data.subwords import Vocab
from flexatt.errors import ConfigError, DataError
from flexatt.io import atomic_path, file_digest, write_csv, write_json
from flexatt.model import count_parameters, require_registered
from flexatt.parallel import intra_op_threads, side_by_side
from flexatt.provenance import code_digest
from flexatt.runtime import AUTO_PRECISION, native_cpu_bf16, resolve_precision
from flexatt.tracking import default_group, lightning_logger, start_run
from flexatt.task import AtomicCheckpointIO, TranslationTask

log = logging.getLogger("flexatt.trainer")


class History(Callback):
    """Per-epoch learning curve and training throughput; saved in checkpoints, so a resumed run
    keeps the epochs it did before the interruption.

    ``lr`` is the learning rate the epoch trained with, read when it starts (by its end the
    ``fixed`` schedule has already set the next epoch's). ``train_loss`` is the epoch's mean of
    the training objective per sentence (each batch's loss weighted by its sentences), not the
    last batch's: batches are grouped by length, so one batch's loss says more about its
    sentences' length than about the model."""

    def __init__(self) -> None:
        self.rows: list[dict] = []
        self._tokens = 0
        self._train_seconds = 0.0
        self._t0 = 0.0
        self._lr: float | None = None
        self._loss_sum, self._sentences = 0.0, 0

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self._tokens, self._train_seconds = 0, 0.0
        self._loss_sum, self._sentences = 0.0, 0
        self._lr = pl_module.optimizers().param_groups[0]["lr"]

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._t0 = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self._train_seconds += time.perf_counter() - self._t0
        self._tokens += batch.n_tgt_tokens
        loss = outputs["loss"] if isinstance(outputs, Mapping) else outputs
        if loss is not None:
            self._loss_sum += float(loss) * len(batch)
            self._sentences += len(batch)

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        m = trainer.callback_metrics
        value = lambda k: round(float(m[k]), 4) if k in m else None  # noqa: E731
        self.rows.append({
            "epoch": trainer.current_epoch + 1,
            "step": trainer.global_step,
            "lr": self._lr,
            "train_loss": round(self._loss_sum / self._sentences, 4) if self._sentences else None,
            "val_loss": value("val/loss"),
            "val_nll_token": value("val/nll_token"),
            "val_bleu": value("val/bleu"),
            "train_tokens": self._tokens,
            "train_seconds": round(self._train_seconds, 2),
            "tokens_per_second": round(self._tokens / self._train_seconds, 1) if self._train_seconds else None,
        })

    def state_dict(self) -> dict:
        return {"rows": self.rows}

    def load_state_dict(self, state_dict: dict) -> None:
        self.rows = list(state_dict["rows"])


def _code_digest() -> str:
    """Hash of the code this run executes, part of the resume fingerprint: the import closure
    (:func:`flexatt.provenance.code_files`) of this module and of the stage module the process
    runs (``python -m flexatt.stages.train``), the files DVC lists as the stage's ``deps``."""
    main = getattr(sys.modules.get("__main__"), "__spec__", None)
    modules = [__name__] + ([main.name] if main and main.name.startswith("flexatt.") else [])
    return code_digest(*modules)


def model_config(cfg: DictConfig | schema.Params, variant: str, key: str = "train.variant") -> dict:
    """``model`` with the overrides of ``variants[variant]`` (:meth:`flexatt.schema.Params.model_of`);
    ``key`` names the setting that chose ``variant`` in the error about an unknown one."""
    return schema.params(cfg).model_of(variant, key).model_dump()


def warn_slow_bf16(trainer_cfg: dict) -> None:
    """Warn when ``trainer.precision`` asks for bf16 on a CPU without native bf16 products
    (AVX512-BF16 or AMX, :func:`flexatt.runtime.native_cpu_bf16`): there they are emulated and
    slower than float32. ``auto`` never resolves to bf16 there; a CPU whose flags cannot tell
    (ARM, not Linux) is not warned about."""
    precision = str(trainer_cfg.get("precision", ""))
    accelerator = trainer_cfg.get("accelerator", "auto")
    on_cpu = accelerator == "cpu" or (accelerator == "auto" and not torch.cuda.is_available())
    if precision.startswith("bf16") and on_cpu and native_cpu_bf16() is False:
        warnings.warn(f"trainer.precision={precision}: this CPU has no native bf16 matrix products "
                      f"(AVX512-BF16 / AMX); training is faster with trainer.precision=32-true",
                      stacklevel=2)


def build_trainer(cfg: DictConfig | schema.Params, ckpt_dir: Path, max_epochs: int, extra_callbacks: list,
                  logger: Any = False, precision: str | int | None = None,
                  resume_dir: Path | None = None) -> pl.Trainer:
    """A Lightning Trainer from ``cfg.trainer`` (:class:`flexatt.schema.Trainer`: the keys it
    gives, extra ones passed on) with our checkpointing and callbacks: the best weights to
    ``ckpt_dir/best.ckpt``, the resume state to ``resume_dir/last.ckpt`` (default:
    :func:`resume_folder` of ``ckpt_dir``); ``precision`` replaces ``trainer.precision``
    (default: :func:`flexatt.runtime.resolve_precision` of it)."""
    resume_dir = resume_folder(ckpt_dir) if resume_dir is None else resume_dir
    trainer_cfg = schema.group(cfg, "trainer").model_dump(exclude_unset=True)
    if precision is None and "precision" in trainer_cfg:
        precision, _ = resolve_precision(trainer_cfg["precision"], trainer_cfg.get("accelerator", "auto"))
    if precision is not None:
        trainer_cfg["precision"] = precision
    warn_slow_bf16(trainer_cfg)
    patience = schema.group(cfg, "train").early_stopping_patience
    # last.ckpt from a callback of its own: Lightning's save_last writes only in an epoch whose
    # top-k checkpoint was written, i.e. with a better dev BLEU; every epoch's end must be saved
    # for a resume to start from it (and to find the plateau schedule's state of that epoch)
    callbacks = [
        ModelCheckpoint(dirpath=ckpt_dir, filename="best", monitor="val/bleu", mode="max",
                        save_top_k=1, save_weights_only=True, enable_version_counter=False),
        *extra_callbacks,
        ModelCheckpoint(dirpath=resume_dir, filename="last", monitor=None, save_top_k=1,
                        enable_version_counter=False),
    ]
    if patience is not None:
        callbacks.append(EarlyStopping(monitor="val/bleu", mode="max", patience=patience))
    try:
        return pl.Trainer(**trainer_cfg, max_epochs=max_epochs, callbacks=callbacks, logger=logger,
                          default_root_dir=str(resume_dir), use_distributed_sampler=False,
                          plugins=[AtomicCheckpointIO()], num_sanity_val_steps=0)
    except (TypeError, ValueError, pl.utilities.exceptions.MisconfigurationException) as exc:
        raise ConfigError("trainer", str(exc)) from exc


def train(cfg: DictConfig | schema.Params, variant: str, *, out_dir: str | None = None, epochs: int | None = None,
          lr: float | None = None, beta: float = 0.0, init_from: str | Path | None = None,
          metrics_file: str | Path | None = None, job_type: str | None = None,
          run_name: str | None = None, lr_epochs: list[float] | None = None) -> tuple[dict, dict]:
    """Train (or fine-tune) the model ``variant`` of ``cfg.variants``.

    Args:
        cfg: the full params (``params.yaml`` with overrides), validated (a stage's) or not.
        variant: a key of ``cfg.variants``.
        out_dir, epochs, lr, metrics_file: default to ``train.out_dir`` etc.
        beta: β of the fine-tuning objective (0: plain cross-entropy).
        init_from: a checkpoint whose weights start the run (fine-tuning).
        job_type, run_name: of the W&B run (default: ``train`` or ``finetune``, the variant).
        lr_epochs: the learning rate of each epoch, replayed in place of ``train.lr_schedule``
            (:class:`flexatt.task.TranslationTask`; a control replays its fine-tuning's).

    Returns:
        ``(metrics, objects)``: the metrics written to ``metrics_file`` (by rank 0 only, under
        DDP; ``tokens_per_second`` counts every rank's tokens), and ``task``, ``trainer``,
        ``data``, ``ckpt_dir`` (the model folder), ``resume_dir`` (its resume state, kept until
        :func:`drop_resume_state`) and ``is_global_zero``.
    """
    p = schema.params(cfg)
    t = p.train
    with intra_op_threads(t.threads):
        return _train(p, variant, out_dir=out_dir, epochs=epochs, lr=lr, beta=beta, init_from=init_from,
                      metrics_file=metrics_file, job_type=job_type, run_name=run_name, lr_epochs=lr_epochs)


def _train(p: schema.Params, variant: str, *, out_dir: str | None, epochs: int | None, lr: float | None,
           beta: float, init_from: str | Path | None, metrics_file: str | Path | None, job_type: str | None,
           run_name: str | None, lr_epochs: list[float] | None) -> tuple[dict, dict]:
    """:func:`train` with ``train.threads`` in force (one function: the run's steps in order)."""
    t = p.train
    tok_dir, out_dir = Path(t.data_dir), Path(out_dir or t.out_dir)
    epochs = epochs if epochs is not None else t.epochs
    lr = lr if lr is not None else t.lr
    batch_size, halve_from, lr_schedule, seed, ratio = t.batch_size, t.lr_halve_from_epoch, t.lr_schedule, t.seed, t.val_max_len_ratio
    plateau_patience = t.lr_plateau_patience
    trainer_cfg = p.trainer.model_dump(exclude_unset=True)
    log_checkpoint = p.logger.log_checkpoint
    model_cfg = require_registered(model_config(p, variant))

    src_vocab, tgt_vocab = Vocab(tok_dir / "src.model"), Vocab(tok_dir / "tgt.model")
    data = TranslationData(tok_dir, batch_size, seed)
    dev_refs = _dev_references(tok_dir, len(data.dev))

    pl.seed_everything(seed, workers=True, verbose=False)
    task = TranslationTask(model_cfg, len(src_vocab), len(tgt_vocab), lr=lr, halve_from=halve_from,
                           beta=beta, seed=seed, max_len_ratio=ratio, lr_schedule=lr_schedule,
                           lr_plateau_patience=plateau_patience, lr_epochs=lr_epochs,
                           label_smoothing=t.label_smoothing,
                           vocab_digests={side: file_digest(tok_dir / f"{side}.model") for side in SIDES})
    if init_from is not None:
        init_from = Path(init_from)
        if not init_from.is_file():
            raise DataError(init_from, "checkpoint to start from not found (train that model first)")
        task.model.load_state_dict(load_checkpoint_state(init_from))
    else:  # a window along the length ratio takes the training corpus's (kept with the weights)
        set_length_ratio(task.model, data.train.src_lengths, data.train.tgt_lengths)
    task.detokenize, task.dev_references = tgt_vocab.decode, dev_refs

    ckpt_dir = out_dir / variant
    fingerprint = {
        "variant": variant, "model": model_cfg, "epochs": epochs, "lr": lr, "beta": beta,
        "batch_size": batch_size, "halve_from": halve_from, "lr_schedule": lr_schedule, "seed": seed,
        "lr_plateau_patience": plateau_patience, "lr_epochs": lr_epochs,
        "early_stopping_patience": t.early_stopping_patience, "val_max_len_ratio": ratio,
        "trainer": schema.as_dict(p).get("trainer", {}), **_input_digests(tok_dir), "code": _code_digest(),
        "threads": t.threads, "init_from": file_digest(init_from) if init_from else None,
    }
    resume_dir = resume_folder(ckpt_dir)
    resume, recorded = _resume_point(ckpt_dir, resume_dir, fingerprint)
    resumed_from_epoch = _epoch_of(resume)
    precision, precision_reason = _run_precision(trainer_cfg, recorded)
    history = History()
    job = job_type or ("finetune" if init_from is not None else "train")
    run_cfg = {**schema.as_dict(p), "precision": precision, "precision_reason": precision_reason}
    # the W&B group is the pipeline run's, named from the params before the precision was added
    run_cfg["logger"] = {**run_cfg.get("logger", {}), "group": p.logger.group or default_group(p)}
    tracker = start_run(run_cfg, job, run_name or variant, tags=[variant, model_cfg["attention"], p.profile])
    trainer = build_trainer(p, ckpt_dir, epochs, [history], lightning_logger(tracker), precision=precision,
                            resume_dir=resume_dir)
    run_record = {**fingerprint, "precision": precision, "precision_reason": precision_reason}
    if trainer.is_global_zero and resume is None:
        for folder in (ckpt_dir, resume_dir):
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
        write_json(ckpt_dir / "run.json", run_record)
    started = time.perf_counter()
    ended = _ended_run(resume, trainer, epochs)
    if ended is not None:  # nothing left to train: its learning curve, as the run left it
        log.info("%s: the run had already ended (%s): not trained further", resume, ended["why"])
        history.load_state_dict(ended["history"])
    else:
        # the objects made so far (modules, data, Lightning's) are not scanned again by every
        # collection of the step loop's garbage
        gc.collect()
        gc.freeze()
        try:
            trainer.fit(task, datamodule=data, ckpt_path=str(resume) if resume else None)
        except BaseException:
            tracker.finish()
            raise
        finally:
            gc.unfreeze()
    wall = time.perf_counter() - started
    rows = history.rows
    if trainer.is_global_zero:  # the checkpoints' vocabularies: a checkpoint's folder is self-contained
        for side in SIDES:
            with atomic_path(ckpt_dir / f"{side}.model") as tmp:
                shutil.copyfile(tok_dir / f"{side}.model", tmp)
        write_json(ckpt_dir / "run.json", {**run_record, EPOCHS_DONE: len(rows)})

    metrics = {"variant": variant, "attention": model_cfg["attention"], "parameters": count_parameters(task.model),
               "world_size": trainer.world_size, "threads": t.threads, "side_by_side": side_by_side(),
               "precision": precision, "precision_reason": precision_reason,
               **_curve_summary(rows, trainer.world_size), "resumed_from_epoch": resumed_from_epoch,
               "wall_minutes": round(wall / 60, 2)}
    if trainer.is_global_zero:
        metrics_file = Path(metrics_file or Path(t.metrics_dir) / f"{variant}.json")
        write_json(metrics_file, metrics)
        write_csv(metrics_file.with_suffix(".csv"), rows)
    _finish_run(tracker, metrics, ckpt_dir, f"{job}-{variant}", log_checkpoint)
    return metrics, {"task": task, "trainer": trainer, "data": data, "ckpt_dir": ckpt_dir,
                     "resume_dir": resume_dir, "is_global_zero": trainer.is_global_zero}


def _dev_references(tok_dir: Path, n: int) -> list[str]:
    """The dev references (``dev.ref``), one per dev pair, or a :class:`DataError` naming the file."""
    dev_refs = (tok_dir / "dev.ref").read_text(encoding="utf-8").split("\n")[:-1]
    if len(dev_refs) != n:
        raise DataError(tok_dir / "dev.ref", f"has {len(dev_refs)} lines for {n} dev pairs")
    return dev_refs


def _finish_run(tracker, metrics: dict, ckpt_dir: Path, name: str, log_checkpoint: bool) -> None:
    """The run's summary on its dashboard and, with ``logger.log_checkpoint``, the best checkpoint
    with its vocabularies as a model artifact; then the run ends."""
    tracker.summary({f"final/{k}": v for k, v in metrics.items() if v is not None})
    best_ckpt = ckpt_dir / "best.ckpt"
    if log_checkpoint and best_ckpt.is_file():
        tracker.artifact(name, "model", [best_ckpt, *(ckpt_dir / f"{side}.model" for side in SIDES)],
                         {"dev_bleu": metrics["dev_bleu"], "epoch": metrics["best_epoch"]})
    tracker.finish()


def _input_digests(tok_dir: Path) -> dict:
    """The digests of the data a run trains and validates on (part of its resume fingerprint)."""
    return {"data": file_digest(tok_dir / "train.npz"), "dev": file_digest(tok_dir / "dev.npz"),
            "dev_references": file_digest(tok_dir / "dev.ref")}


def _curve_summary(rows: list[dict], world_size: int) -> dict:
    """What the learning curve (one row per epoch, :class:`History`) says of the run: epochs, the
    best epoch and its dev BLEU, the last training loss, tokens per second (every rank: as many
    batches) and minutes per epoch."""
    best = max((r for r in rows if r["val_bleu"] is not None), key=lambda r: r["val_bleu"], default=None)
    secs = sum(r["train_seconds"] for r in rows)
    toks = sum(r["train_tokens"] for r in rows) * world_size
    return {"epochs": len(rows), "best_epoch": best["epoch"] if best else None,
            "dev_bleu": best["val_bleu"] if best else None,
            "final_train_loss": rows[-1]["train_loss"] if rows else None,
            "tokens_per_second": round(toks / secs, 1) if secs else None,
            "train_minutes_per_epoch": round(secs / 60 / len(rows), 2) if rows else None}


#: the ``run.json`` entries that record what was decided at the start, not the fingerprint
_DECIDED = ("precision", "precision_reason")
#: rank 0's resolved ``trainer.precision`` (``<precision>\t<reason>``), for the ranks it starts
PRECISION_ENV = "FLEXATT_RUN_PRECISION"
#: the folder, under the working directory, of the runs' resume state: outside every model
#: folder, so that DVC neither tracks nor shares it (git-ignored)
RESUME_DIR = ".resume"


def resume_folder(model_dir: str | Path) -> Path:
    """The folder of the resume state (``last.ckpt``) of the run whose model folder is
    ``model_dir``: ``.resume/<model_dir>`` for a folder under the working directory (a stage's),
    else ``<temp dir>/flexatt-resume/<absolute path of model_dir>``. The mapping keeps the
    folders' nesting, so the resume folder of a sweep's ``out_dir`` holds its runs'."""
    model_dir = Path(os.path.abspath(model_dir))
    cwd = Path.cwd()
    if model_dir == cwd or cwd in model_dir.parents:
        return Path(RESUME_DIR) / model_dir.relative_to(cwd)
    return Path(tempfile.gettempdir()) / "flexatt-resume" / model_dir.relative_to(model_dir.anchor)


def drop_resume_state(model_dir: str | Path) -> None:
    """Delete the resume state of ``model_dir``'s runs (:func:`resume_folder`; a sweep's
    ``out_dir`` drops all of its runs'): a stage calls it once its runs have finished, since
    what it keeps (``best.ckpt``, the vocabularies, ``run.json``) is all that is used later.
    Folders left empty above it go too, up to ``.resume`` itself."""
    folder = resume_folder(model_dir)
    shutil.rmtree(folder, ignore_errors=True)
    for parent in folder.parents:
        try:
            parent.rmdir()  # only an empty one
        except OSError:
            break
        if parent.name in (RESUME_DIR, "flexatt-resume"):
            break


def _resume_point(ckpt_dir: Path, resume_dir: Path, fingerprint: dict) -> tuple[Path | None, dict]:
    """``(last.ckpt, what its run decided)`` if ``resume_dir`` holds the resume state of the run
    in ``ckpt_dir`` and that run has exactly this fingerprint (its ``run.json``), else
    ``(None, {})``; the decisions are the :data:`_DECIDED` entries of ``run.json``. A run that
    had ended keeps its state until its stage drops it (:func:`_ended_run` then trains no more)."""
    last, run = resume_dir / "last.ckpt", ckpt_dir / "run.json"
    if not (last.is_file() and run.is_file()):
        return None, {}
    try:
        recorded = json.loads(run.read_text())
        same = isinstance(recorded, dict) and (
            {k: v for k, v in recorded.items() if k not in (*_DECIDED, EPOCHS_DONE)}
            == json.loads(json.dumps(fingerprint)))
    except json.JSONDecodeError:
        same = False
    if not same:
        log.info("%s belongs to another configuration: training from scratch", last)
        return None, {}
    log.info("resuming from %s", last)
    return last, {k: recorded[k] for k in _DECIDED if k in recorded}


def _ended_run(checkpoint: Path | None, trainer: pl.Trainer, max_epochs: int) -> dict | None:
    """``{"why", "history"}`` when the run whose ``last.ckpt`` is ``checkpoint`` had already
    ended — it did ``max_epochs`` epochs, or its early stopping had counted ``patience`` epochs
    without a better dev BLEU — else ``None``. ``history`` is the :class:`History` state saved in
    the checkpoint.

    A run cut off after its training ended but before its caller finished (a stage of several
    trainings, e.g. sweep_beta) is started again with the same fingerprint; Lightning restores
    the early-stopping counter but not the decision to stop, so fitting from that checkpoint
    would train one more epoch, and the result would differ from an uninterrupted run's."""
    if checkpoint is None:
        return None
    ckpt = read_checkpoint(checkpoint)
    states = ckpt.get("callbacks") or {}
    history = next((c for c in trainer.callbacks if isinstance(c, History)), None)
    if history is None or history.state_key not in states:
        return None
    done = int(ckpt["epoch"]) + 1
    if done >= max_epochs:
        return {"why": f"{done} of {max_epochs} epochs", "history": states[history.state_key]}
    for stopper in (c for c in trainer.callbacks if isinstance(c, EarlyStopping)):
        state = states.get(stopper.state_key) or {}
        if state.get("wait_count", 0) >= stopper.patience:
            return {"why": f"early stopping after epoch {done}: {state['wait_count']} epochs without a better "
                           f"{stopper.monitor}", "history": states[history.state_key]}
    return None


def _run_precision(trainer_cfg: dict, recorded: dict) -> tuple[str | int, str]:
    """The precision this run trains with, and why (:func:`flexatt.runtime.resolve_precision`).

    ``auto`` is decided once: a resumed run keeps the precision in its ``run.json``
    (``recorded``), and a data-parallel rank other than 0 takes the one rank 0 put in
    ``$FLEXATT_RUN_PRECISION`` before it started the other ranks (a timing probe could decide
    differently in each process). Rank 0 (or a single process) sets that variable."""
    requested = trainer_cfg.get("precision", "32-true")
    if requested != AUTO_PRECISION:
        return resolve_precision(requested, trainer_cfg.get("accelerator", "auto"))
    worker = any(int(os.environ.get(k, "0") or 0) != 0 for k in ("RANK", "LOCAL_RANK", "NODE_RANK"))
    inherited = os.environ.get(PRECISION_ENV, "") if worker else ""
    if "precision" in recorded:
        precision, reason = recorded["precision"], f"{recorded.get('precision_reason')} (kept on resume)"
    elif "\t" in inherited:
        precision, reason = inherited.split("\t", 1)
    else:
        precision, reason = resolve_precision(requested, trainer_cfg.get("accelerator", "auto"))
    if not worker:
        os.environ[PRECISION_ENV] = f"{precision}\t{reason}"
    return precision, reason


def _epoch_of(checkpoint: Path | None) -> int | None:
    """The number of epochs a checkpoint to resume from has done (``None`` without one).

    Raises:
        DataError: the checkpoint is truncated or not a Lightning checkpoint (it names the file).
    """
    if checkpoint is None:
        return None
    try:
        ckpt = read_checkpoint(checkpoint)
    except DataError as exc:
        raise DataError(checkpoint, f"cannot resume: {exc.reason} (delete it to train from scratch)") from exc
    if not isinstance(ckpt.get("epoch"), int):
        raise DataError(checkpoint, "cannot resume: not a Lightning checkpoint (no epoch count) "
                        "(delete it to train from scratch)")
    return ckpt["epoch"] + 1

"""Weights & Biases tracking that never stops the pipeline.

Every stage that trains or evaluates opens one W&B run: ``job_type`` is the stage name, tags
name the attention variant and the profile, the config is the full resolved params, and the
runs of one pipeline run share a group (``logger.group``, default ``<profile>-<hash of the
params>``, so re-running a stage with the same params lands in the same group).

Mode (``logger.mode``): ``auto`` is online when an API key is configured (``WANDB_API_KEY``)
and offline otherwise; runs are written under ``<logger.dir>/wandb/`` (ignored by git) and
``wandb sync wandb/offline-run-*`` uploads them later. An explicit ``WANDB_MODE`` in the
environment wins. Any W&B failure — no network, a bad key, a full disk — prints one warning and
the stage goes on without tracking.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from flexatt import schema

log = logging.getLogger("flexatt.tracking")

_PER_STAGE_KEYS = {"train": ("variant",), "finetune": ("variant",)}


def resolve_mode(mode: str) -> str:
    """``auto`` → ``online`` with an API key, else ``offline``; ``WANDB_MODE`` overrides all."""
    env = os.environ.get("WANDB_MODE")
    if env:
        return env
    if mode == "auto":
        return "online" if os.environ.get("WANDB_API_KEY") else "offline"
    return mode


def default_group(cfg: DictConfig | schema.Params) -> str:
    """``<profile>-<8 hex digits>``: a hash of the params as given, minus the per-stage selectors."""
    data = schema.as_dict(cfg)
    for section, keys in _PER_STAGE_KEYS.items():
        for key in keys:
            data.get(section, {}).pop(key, None)
    digest = hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:8]
    return f"{data.get('profile', 'run')}-{digest}"


def _warn(what: str, exc: BaseException) -> None:
    message = f"W&B {what} failed ({type(exc).__name__}: {exc}); continuing without it"
    log.warning(message)
    warnings.warn(message, RuntimeWarning, stacklevel=3)


class Tracker:
    """A W&B run, or nothing: every method is safe to call and never raises.

    Use as a context manager, or call :meth:`finish`.
    """

    def __init__(self, run: Any = None):
        self.run = run

    @property
    def active(self) -> bool:
        return self.run is not None

    def _call(self, what: str, fn, *args, **kwargs) -> Any:
        """``fn(*args, **kwargs)`` when a run is open; a warning instead of any exception."""
        if self.run is None:
            return None
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - tracking must never stop the pipeline
            _warn(what, exc)
            return None

    def log(self, values: dict, step: int | None = None) -> None:
        self._call("log", lambda: self.run.log(values, step=step))

    def summary(self, values: dict) -> None:
        self._call("summary", lambda: self.run.summary.update(values))

    def config(self, values: dict) -> None:
        """Add ``values`` to the run's config (what produced its results, known only once they
        are computed: e.g. the decoding backend)."""
        self._call("config", lambda: self.run.config.update(values, allow_val_change=True))

    def table(self, key: str, columns: list[str], rows: Iterable[Iterable]) -> Any:
        """Log a ``wandb.Table``; returns it (or ``None``)."""
        if self.run is None:  # no run: wandb is not needed, nor imported
            return None
        import wandb

        table = self._call("table", wandb.Table, columns=columns, data=[list(r) for r in rows])
        if table is not None:
            self.log({key: table})
        return table

    def records(self, key: str, records: Iterable[dict], columns: list[str]) -> Any:
        """Log ``records`` (dicts) as a table of ``columns``, a missing key an empty cell and
        τ = ∞ as ``null`` (:func:`flexatt.tau.to_json`); returns it (or ``None``)."""
        from flexatt.tau import to_json

        return self.table(key, columns, [[r.get(c) for c in columns] for r in to_json(list(records))])

    def line_plot(self, key: str, table: Any, x: str, y: str, title: str) -> None:
        if self.run is None or table is None:
            return
        import wandb

        plot = self._call("line plot", wandb.plot.line, table, x, y, title=title)
        if plot is not None:
            self.log({key: plot})

    def image(self, key: str, path: str | Path, caption: str | None = None) -> None:
        if self.run is None:
            return
        import wandb

        image = self._call("image", wandb.Image, str(path), caption=caption)
        if image is not None:
            self.log({key: image})

    def histogram(self, key: str, values: Any) -> None:
        if self.run is None:
            return
        import wandb

        hist = self._call("histogram", wandb.Histogram, values)
        if hist is not None:
            self.log({key: hist})

    def artifact(self, name: str, kind: str, files: Iterable[str | Path], metadata: dict | None = None) -> None:
        if self.run is None:
            return
        import wandb

        def upload():
            art = wandb.Artifact(name, type=kind, metadata=metadata or {})
            for f in files:
                art.add_file(str(f))
            self.run.log_artifact(art)

        self._call("artifact", upload)

    def finish(self) -> None:
        self._call("finish", lambda: self.run.finish())
        self.run = None

    def __enter__(self) -> Tracker:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.finish()


def _is_worker_process() -> bool:
    """True in the non-zero ranks of a data-parallel run: only rank 0 tracks."""
    return any(int(os.environ.get(k, "0") or 0) != 0 for k in ("RANK", "LOCAL_RANK", "NODE_RANK"))


def start_run(cfg: DictConfig | schema.Params | dict, job_type: str, name: str, tags: Iterable[str] = ()) -> Tracker:
    """Open the W&B run of a stage (or a no-op :class:`Tracker` when disabled or failing)."""
    settings = schema.group(cfg, "logger")
    if not settings.enabled or _is_worker_process():
        return Tracker()
    mode = resolve_mode(settings.mode)
    if mode == "disabled":
        return Tracker()
    group = settings.group or default_group(cfg)
    directory = Path(settings.dir)
    try:
        import wandb

        directory.mkdir(parents=True, exist_ok=True)
        run = wandb.init(
            project=settings.project,
            entity=settings.entity,
            group=group,
            job_type=job_type,
            name=f"{job_type}-{name}",
            tags=list(dict.fromkeys(str(t) for t in tags if t)),  # each once (variant = attention)
            config=schema.as_dict(cfg),
            dir=str(directory),
            mode=mode,
            reinit="create_new",
            settings=wandb.Settings(silent=True, console="off"),
        )
    except Exception as exc:  # noqa: BLE001 - e.g. no network, a bad key, a full disk
        _warn("init", exc)
        return Tracker()
    return Tracker(run)


def lightning_logger(tracker: Tracker) -> Any:
    """A Lightning ``WandbLogger`` writing into ``tracker``'s run, or ``False``."""
    if not tracker.active:
        return False
    from pytorch_lightning.loggers import WandbLogger

    class SafeWandbLogger(WandbLogger):
        """Lightning's W&B logger whose calls warn instead of raising (a W&B failure during
        training, e.g. its service gone or its folder full, must not stop the stage)."""

        def log_hyperparams(self, *args: Any, **kwargs: Any) -> None:
            try:
                super().log_hyperparams(*args, **kwargs)
            except Exception as exc:  # noqa: BLE001
                _warn("log_hyperparams", exc)

        def log_metrics(self, *args: Any, **kwargs: Any) -> None:
            try:
                super().log_metrics(*args, **kwargs)
            except Exception as exc:  # noqa: BLE001
                _warn("log_metrics", exc)

        def after_save_checkpoint(self, *args: Any, **kwargs: Any) -> None:
            try:
                super().after_save_checkpoint(*args, **kwargs)
            except Exception as exc:  # noqa: BLE001
                _warn("after_save_checkpoint", exc)

        def finalize(self, *args: Any, **kwargs: Any) -> None:
            try:
                super().finalize(*args, **kwargs)
            except Exception as exc:  # noqa: BLE001
                _warn("finalize", exc)

    try:
        return SafeWandbLogger(experiment=tracker.run, log_model=False)
    except Exception as exc:  # noqa: BLE001
        _warn("Lightning logger", exc)
        return False

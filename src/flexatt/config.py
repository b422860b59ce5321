"""Configuration: composing ``conf/``, reading ``params.yaml``, running a stage, checking values.

The pipeline's single source of truth is ``params.yaml``, the composition of ``conf/config.yaml``
that ``dvc exp run`` writes (DVC's Hydra integration, ``hydra.enabled`` in ``.dvc/config``).
Every stage is a module run as ``python -m flexatt.stages.<name>``; :func:`run_stage` makes
``params.yaml`` its Hydra primary config, so ``key=value`` overrides and ``-m`` sweeps work on
top of it, and every user-fixable error ends as one line naming the key or file.
"""

from __future__ import annotations

import logging
import math
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from flexatt.errors import ConfigError, FlexattError

log = logging.getLogger("flexatt")

PARAMS_ENV = "FLEXATT_PARAMS"
"""Environment variable naming the params file (default ``params.yaml`` in the working directory)."""

_MISSING = object()

# Hydra settings that keep a single run from writing anything outside its own outputs, given
# on the command line unless the user gives the same key. ``hydra.searchpath`` adds ``conf/``
# (relative to the working directory, the repository root; only where that folder exists, as
# Hydra warns about a missing one) so that the named sweeps of ``conf/sweep/`` compose on top
# of params.yaml: ``-m +sweep=<name>`` (see flexatt.sweeps). ``hydra.sweep.dir`` is left to
# Hydra's own default (``multirun/<date>/<time>``) so that a sweep config can set it: a
# command-line default would override every config file.
_HYDRA_DEFAULTS = {
    "hydra.run.dir": ".",
    "hydra.output_subdir": "null",
    **({"hydra.searchpath": "[file://conf]"} if os.path.isdir("conf") else {}),
    "hydra/job_logging": "stdout",
    "hydra/hydra_logging": "none",
}


def compose(overrides: Sequence[str] = (), config_dir: str | os.PathLike = "conf") -> DictConfig:
    """Compose ``conf/config.yaml`` with Hydra ``overrides`` exactly as ``dvc exp run`` does.

    Uses DVC's own composition function, so the result is what DVC would write to
    ``params.yaml`` (all interpolations resolved).
    """
    import tempfile

    from dvc.utils.hydra import compose_and_dump

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "params.yaml"
        compose_and_dump(out, str(Path(config_dir).resolve()), None, "config", tmp, list(overrides))
        return OmegaConf.load(out)


def load_params(path: str | os.PathLike | None = None, overrides: Sequence[str] = ()) -> DictConfig:
    """Load ``params.yaml`` (or ``$FLEXATT_PARAMS``) and apply dotted ``key=value`` overrides.

    Meant for tests and notebooks; stages get the same through :func:`run_stage`.
    Unknown keys are refused, as on the command line.
    """
    path = Path(path or os.environ.get(PARAMS_ENV, "params.yaml"))
    if not path.is_file():
        raise ConfigError(str(path), "params file not found (run from the repository root)")
    cfg = OmegaConf.load(path)
    OmegaConf.set_struct(cfg, True)
    for item in overrides:
        key, sep, _ = item.partition("=")
        if not sep:
            raise ConfigError(item, "override must look like key=value")
        if OmegaConf.select(cfg, key, default=_MISSING) is _MISSING:
            raise ConfigError(key, "no such key in the params file")
    return OmegaConf.merge(cfg, OmegaConf.from_dotlist(list(overrides)))


def run_stage(task: Callable[[DictConfig], Any], argv: Sequence[str] | None = None) -> None:
    """Run ``task(cfg)`` as a Hydra app whose primary config is ``params.yaml``.

    ``argv`` (default ``sys.argv[1:]``) may hold ``key=value`` overrides and Hydra flags such
    as ``-m``/``--multirun``. A :class:`~flexatt.errors.FlexattError` raised by the task is
    printed as ``error: <message>`` and the process exits with status 2; so is an ``OSError``
    (a full disk, a read-only folder: ``error: <file>: <reason>``), without a traceback.
    Outputs are written atomically (:mod:`flexatt.io`), so the earlier ones stay intact.
    The C allocator is tuned for large tensors first (:func:`flexatt.runtime.tune_allocator`).
    """
    import hydra

    from flexatt.runtime import tune_allocator

    tune_allocator()
    argv = list(sys.argv[1:] if argv is None else argv)
    params = Path(os.environ.get(PARAMS_ENV, "params.yaml")).resolve()
    if not params.is_file():
        sys.exit(f"error: {params}: params file not found (run from the repository root, "
                 f"or set {PARAMS_ENV})")
    given = {arg.split("=", 1)[0].lstrip("+~") for arg in argv if "=" in arg}
    defaults = [f"{k}={v}" for k, v in _HYDRA_DEFAULTS.items() if k not in given]

    def guarded(cfg: DictConfig) -> Any:
        try:
            return task(cfg)
        except FlexattError as exc:
            print(f"error: {exc}", file=sys.stderr)
            sys.exit(2)
        except OSError as exc:  # a full disk, a read-only folder, ... outside flexatt.io's writers
            print(f"error: {describe_os_error(exc)}", file=sys.stderr)
            sys.exit(2)

    app = hydra.main(config_path=str(params.parent), config_name=params.stem, version_base="1.3")(guarded)
    saved = sys.argv
    flags = [arg for arg in argv if arg.startswith("-")]  # Hydra's flags precede its overrides
    overrides = [arg for arg in argv if not arg.startswith("-")]
    sys.argv = [saved[0], *flags, *defaults, *overrides]
    try:
        app()
    finally:
        sys.argv = saved


def describe_os_error(exc: OSError) -> str:
    """``<file>: <reason>`` (``No space left on device``, ``Permission denied``, …) of an OSError."""
    reason = exc.strerror or str(exc) or type(exc).__name__
    if exc.filename is None:
        return reason
    where = os.fsdecode(exc.filename)
    if exc.filename2 is not None:
        where += f" -> {os.fsdecode(exc.filename2)}"
    return f"{where}: {reason}"


# --------------------------------------------------------------------------- value checks


def get(cfg: DictConfig, key: str) -> Any:
    """Return ``cfg[key]`` for a dotted key, refusing a key that is absent."""
    value = OmegaConf.select(cfg, key, default=_MISSING)
    if value is _MISSING:
        raise ConfigError(key, "missing from the configuration")
    return value


def check_int(cfg: DictConfig, key: str, minimum: int | None = None, optional: bool = False) -> int | None:
    """An integer (not a bool) ``>= minimum`` (or ``null`` when ``optional``)."""
    value = get(cfg, key)
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(key, f"must be an integer{' or null' if optional else ''} (got {value!r})")
    if minimum is not None and value < minimum:
        raise ConfigError(key, f"must be >= {minimum} (got {value})")
    return value


def check_float(cfg: DictConfig, key: str, *, gt: float | None = None, ge: float | None = None,
                allow_inf: bool = False) -> float:
    """A real number, optionally ``> gt`` or ``>= ge``; NaN always refused."""
    value = get(cfg, key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(key, f"must be a number (got {value!r})")
    value = float(value)
    if math.isnan(value) or (math.isinf(value) and not allow_inf):
        raise ConfigError(key, f"must be a finite number (got {value})")
    if gt is not None and not value > gt:
        raise ConfigError(key, f"must be > {gt} (got {value})")
    if ge is not None and not value >= ge:
        raise ConfigError(key, f"must be >= {ge} (got {value})")
    return value


def check_choice(cfg: DictConfig, key: str, allowed: Iterable[Any]) -> Any:
    """One of ``allowed``."""
    allowed = list(allowed)
    value = get(cfg, key)
    if value not in allowed:
        raise ConfigError(key, f"must be one of {', '.join(map(str, allowed))} (got {value!r})")
    return value


def check_bool(cfg: DictConfig, key: str) -> bool:
    """``true`` or ``false``."""
    value = get(cfg, key)
    if not isinstance(value, bool):
        raise ConfigError(key, f"must be true or false (got {value!r})")
    return value


def check_str(cfg: DictConfig, key: str, optional: bool = False) -> str | None:
    """A non-empty string (or ``null`` when ``optional``)."""
    value = get(cfg, key)
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(key, f"must be a non-empty string (got {value!r})")
    return value


def check_file(cfg: DictConfig, key: str, optional: bool = False, hint: str | None = None) -> Path | None:
    """A path to an existing file (or ``null`` when ``optional``); ``hint`` says how to make it."""
    value = check_str(cfg, key, optional)
    if value is None:
        return None
    path = Path(value)
    if not path.is_file():
        raise ConfigError(key, f"file not found: {value}" + (f" ({hint})" if hint else ""))
    return path


def _list(cfg: DictConfig, key: str, nonempty: bool) -> list:
    value = get(cfg, key)
    if isinstance(value, (str, bytes)) or not (isinstance(value, Sequence) or OmegaConf.is_list(value)):
        raise ConfigError(key, f"must be a list (got {value!r})")
    items = list(value)
    if nonempty and not items:
        raise ConfigError(key, "must not be empty")
    return items


def check_ints(cfg: DictConfig, key: str, minimum: int | None = None, *, increasing: bool = False,
               nonempty: bool = True) -> list[int]:
    """A list of integers ``>= minimum`` (strictly increasing when ``increasing``); an item's
    error names it as ``key[i]``."""
    items = _list(cfg, key, nonempty)
    for i, value in enumerate(items):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key}[{i}]", f"must be an integer (got {value!r})")
        if minimum is not None and value < minimum:
            raise ConfigError(f"{key}[{i}]", f"must be >= {minimum} (got {value})")
        if increasing and i and value <= items[i - 1]:
            raise ConfigError(f"{key}[{i}]", f"must be > {key}[{i - 1}] = {items[i - 1]}: the list "
                              f"must increase (got {value})")
    return [int(v) for v in items]


def check_floats(cfg: DictConfig, key: str, *, gt: float | None = None, ge: float | None = None,
                 allow_inf: bool = False, nonempty: bool = True) -> list[float]:
    """A list of real numbers, each ``> gt`` / ``>= ge``; NaN refused; errors name ``key[i]``."""
    items = _list(cfg, key, nonempty)
    return [_check_item(f"{key}[{i}]", v, gt, ge, allow_inf) for i, v in enumerate(items)]


def _check_item(key: str, value: Any, gt: float | None, ge: float | None, allow_inf: bool) -> float:
    try:
        return check_float(OmegaConf.create({"v": value}), "v", gt=gt, ge=ge, allow_inf=allow_inf)
    except ConfigError as exc:
        raise ConfigError(key, str(exc).split(": ", 1)[1]) from None


#: ``trainer.precision`` values: Lightning's (and the short forms 32, 16, 64, bf16), and ``auto``,
#: decided per machine before the Trainer is built (:func:`flexatt.runtime.resolve_precision`)
PRECISIONS = ("32-true", "16-mixed", "bf16-mixed", "16-true", "bf16-true", "64-true",
              "transformer-engine", "transformer-engine-float16", "auto")
_PRECISION_ALIASES = ("32", "16", "64", "bf16", 32, 16, 64)
ACCELERATORS = ("auto", "cpu", "gpu", "cuda", "mps", "tpu")


def check_trainer(cfg: DictConfig) -> dict[str, Any]:
    """The Lightning Trainer arguments of ``cfg.trainer``, the ones flexatt sets checked by key.

    ``accelerator``, ``devices`` (an integer >= 1, -1 for every device, ``auto``, or a list of
    device indices), ``num_nodes`` (>= 1), ``strategy`` (a name Lightning knows), ``precision``
    (a Lightning value or ``auto``, returned as given), ``gradient_clip_val`` (>= 0 or null),
    ``log_every_n_steps`` (>= 0), ``deterministic`` (true, false, ``warn`` or null),
    ``enable_progress_bar``; any other key is passed to Lightning as is (and its own errors name
    the trainer group).
    """
    trainer = get(cfg, "trainer")
    if not OmegaConf.is_dict(trainer) and not isinstance(trainer, dict):
        raise ConfigError("trainer", f"must be a mapping of Lightning Trainer arguments (got {trainer!r})")
    keys = set(trainer)
    if "accelerator" in keys:
        check_choice(cfg, "trainer.accelerator", ACCELERATORS)
    if "devices" in keys:
        devices = get(cfg, "trainer.devices")
        ok = (devices == "auto" or (isinstance(devices, int) and not isinstance(devices, bool)
                                    and (devices >= 1 or devices == -1))
              or (isinstance(devices, str) and devices.replace(",", "").strip().isdigit())
              or (OmegaConf.is_list(devices) and len(devices) > 0
                  and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in devices)))
        if not ok:
            raise ConfigError("trainer.devices", "must be an integer >= 1, -1 (every device), auto, or a "
                              f"list of device indices (got {devices!r})")
    if "num_nodes" in keys:
        check_int(cfg, "trainer.num_nodes", minimum=1)
    if "strategy" in keys:
        strategy = check_str(cfg, "trainer.strategy")
        from pytorch_lightning.strategies import StrategyRegistry

        known = ["auto", *StrategyRegistry.available_strategies()]
        if strategy not in known:
            raise ConfigError("trainer.strategy", f"must be one of {', '.join(known)} (got {strategy!r})")
    if "precision" in keys:
        precision = get(cfg, "trainer.precision")
        if isinstance(precision, bool) or precision not in (*PRECISIONS, *_PRECISION_ALIASES):
            raise ConfigError("trainer.precision", f"must be one of {', '.join(PRECISIONS)} (got {precision!r})")
    if "gradient_clip_val" in keys and get(cfg, "trainer.gradient_clip_val") is not None:
        check_float(cfg, "trainer.gradient_clip_val", ge=0.0)
    if "log_every_n_steps" in keys:
        check_int(cfg, "trainer.log_every_n_steps", minimum=0)
    if "deterministic" in keys:
        deterministic = get(cfg, "trainer.deterministic")
        if deterministic not in (True, False, "warn", None):
            raise ConfigError("trainer.deterministic", f"must be one of true, false, warn, null (got {deterministic!r})")
    if "enable_progress_bar" in keys:
        check_bool(cfg, "trainer.enable_progress_bar")
    return OmegaConf.to_container(trainer, resolve=True)

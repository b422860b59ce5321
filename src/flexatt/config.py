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

# Hydra settings that keep a single run from writing anything outside its own outputs.
_HYDRA_DEFAULTS = {
    "hydra.run.dir": ".",
    "hydra.output_subdir": "null",
    "hydra.sweep.dir": "multirun/${now:%Y-%m-%d}/${now:%H-%M-%S}",
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
    printed as ``error: <message>`` and the process exits with status 2.
    """
    import hydra

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

    app = hydra.main(config_path=str(params.parent), config_name=params.stem, version_base="1.3")(guarded)
    saved = sys.argv
    flags = [arg for arg in argv if arg.startswith("-")]  # Hydra's flags precede its overrides
    overrides = [arg for arg in argv if not arg.startswith("-")]
    sys.argv = [saved[0], *flags, *defaults, *overrides]
    try:
        app()
    finally:
        sys.argv = saved


# --------------------------------------------------------------------------- value checks


def get(cfg: DictConfig, key: str) -> Any:
    """Return ``cfg[key]`` for a dotted key, refusing a key that is absent."""
    value = OmegaConf.select(cfg, key, default=_MISSING)
    if value is _MISSING:
        raise ConfigError(key, "missing from the configuration")
    return value


def check_int(cfg: DictConfig, key: str, minimum: int | None = None) -> int:
    """An integer (not a bool) ``>= minimum``."""
    value = get(cfg, key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(key, f"must be an integer (got {value!r})")
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


def check_file(cfg: DictConfig, key: str, optional: bool = False) -> Path | None:
    """A path to an existing file (or ``null`` when ``optional``)."""
    value = check_str(cfg, key, optional)
    if value is None:
        return None
    path = Path(value)
    if not path.is_file():
        raise ConfigError(key, f"file not found: {value}")
    return path

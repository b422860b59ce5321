"""Configuration: composing ``conf/``, reading ``params.yaml``, running a stage (the values'
schema is :mod:`flexatt.schema`).

The pipeline's single source of truth is ``params.yaml``, the composition of ``conf/config.yaml``
that ``dvc exp run`` writes (DVC's Hydra integration, ``hydra.enabled`` in ``.dvc/config``).
Every stage is a module run as ``python -m flexatt.stages.<name>``; :func:`run_stage` makes
``params.yaml`` its Hydra primary config, so ``key=value`` overrides and ``-m`` sweeps work on
top of it, and every user-fixable error ends as one line naming the key or file.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Sequence
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
    """Run ``task(params)`` as a Hydra app whose primary config is ``params.yaml``: the composed
    configuration is validated once, here (:func:`flexatt.schema.validate`), and the task gets
    the validated :class:`~flexatt.schema.Params`; a wrong value is refused before it starts.

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
        from flexatt import schema

        try:
            return task(schema.validate(cfg))
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


# --------------------------------------------------------------------------- reading values
# Types, allowed values, ranges and defaults of every setting: flexatt.schema.


def get(cfg: DictConfig, key: str) -> Any:
    """Return ``cfg[key]`` for a dotted key, refusing a key that is absent."""
    value = OmegaConf.select(cfg, key, default=_MISSING)
    if value is _MISSING:
        raise ConfigError(key, "missing from the configuration")
    return value


def require_file(key: str, value: str | None, hint: str | None = None) -> Path | None:
    """``value`` (the setting ``key``) as a path to an existing file; ``None`` stays ``None``.
    ``hint`` says how to make the file."""
    if value is None:
        return None
    path = Path(value)
    if not path.is_file():
        raise ConfigError(key, f"file not found: {value}" + (f" ({hint})" if hint else ""))
    return path

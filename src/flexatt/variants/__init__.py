"""Attention variants beyond the built-in ones of :mod:`flexatt.attention`.

Every module in this folder is imported when :mod:`flexatt.model` is, so a module here that
decorates its class with :func:`flexatt.attention.register_attention` makes a new value of
``model.attention`` (docs/variants.md). The pipeline's stages list this folder
in their DVC ``deps``, and :mod:`flexatt.provenance` counts every module in it, so a new variant
re-runs what it can change.
"""

import importlib
import pkgutil

for _module in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
    importlib.import_module(f"{__name__}.{_module.name}")

"""τ, flexible attention's test-time threshold (Flexible Attention 2017, §3.1), in one form.

In Python τ is a float, and ``math.inf`` (:data:`INF`) means "score every position": the dense
path of every attention variant, the only meaning an infinite τ has. Everything that takes a τ
takes that float. :func:`check` is the one test of a value (a number ≥ 0; NaN refused): the config
schema's ``Tau`` type and the decoding entry points (:mod:`flexatt.decoding.search`) call it.

JSON has no infinity: results write τ = ∞ as ``null`` and read it back through :func:`to_json` and
:func:`from_json`, the only two places where the two forms meet (a τ-valued key of a record is
named in :data:`TAU_KEYS`). Whether a τ search kept a τ at
all is a field of its own (``selected``), never read off a ``null``. :func:`label` writes τ for
people ("∞" or the shortest decimal).
"""

from __future__ import annotations

import math
from typing import Any, Optional

#: score every position
INF = math.inf


def check(tau: Any, key: str = "tau") -> float:
    """``tau`` as a float τ ≥ 0 (``inf`` allowed), or a :class:`ValueError` naming ``key``."""
    try:
        value = float(tau)
    except (TypeError, ValueError):
        raise ValueError(f"{key} must be a number >= 0 (got {tau!r})") from None
    if isinstance(tau, bool) or math.isnan(value) or value < 0:
        raise ValueError(f"{key} must be >= 0 (got {tau!r})")
    return value


#: the keys whose values are τ in the records the stages write (:func:`to_json`, :func:`from_json`)
TAU_KEYS = frozenset({"tau", "selected_tau", "tau_control", "selected_tau_control"})


def to_json(value: Any, tau_valued: Optional[bool] = None) -> Any:
    """``value`` as JSON writes it: a τ (a number) with ``None`` (``null``) for ∞; in records (dicts,
    lists, nested) every value under a :data:`TAU_KEYS` key converted so (a number, or a dict or
    list of them), the other values as they are."""
    if isinstance(value, dict):
        return {k: to_json(v, bool(tau_valued) or k in TAU_KEYS) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(v, tau_valued) for v in value]
    if tau_valued is not False and isinstance(value, (int, float)) and not isinstance(value, bool):
        return None if math.isinf(value) else value
    return value


def from_json(value: Any, tau_valued: Optional[bool] = None) -> Any:
    """The inverse of :func:`to_json`: ``null`` as a τ (under a :data:`TAU_KEYS` key) is τ = ∞."""
    if isinstance(value, dict):
        return {k: from_json(v, bool(tau_valued) or k in TAU_KEYS) for k, v in value.items()}
    if isinstance(value, list):
        return [from_json(v, tau_valued) for v in value]
    if tau_valued is not False and value is None:
        return INF
    return value


def label(tau: float) -> str:
    """τ for people: "∞", or τ to 6 significant digits (``format(τ, "g")``, trailing zeros
    dropped): exact for the τs of the grids and searches, which are rounded to 4 decimals."""
    return "∞" if math.isinf(tau) else format(tau, "g")

"""Attention mechanisms: global, local-m / local-p, flexible, SACT and flexible+SACT.

All variants share one interface (see :class:`Attention`)::

    cache = attention.precompute(values, mask)              # once per sentence
    state = attention.init_state(cache, summary)            # p_0, c~_0, t = 0
    context, weights, state, stats = attention(query, feedback, cache, state, tau)

``query`` is the previous decoder state h_{t-1} (Bahdanau-style decoder; docs/method.md, Model) and
``feedback`` the embedding i_t of the previous output token y_{t-1}.

Positions
---------
The papers number source positions s = 1..S. Tensors are 0-based: slot ``j`` of a
``batch x src_len`` tensor holds position ``s = j + 1``. Every *position value* that enters
an equation (p_t, the penalty distance, the Gaussian of local-p, window bounds ``span_lo`` /
``span_hi`` in :class:`AttentionStats`) is 1-based, exactly as in the papers; only the
indices used to address tensors are 0-based (``index = s - 1``).

Score evaluation and the window metric (docs/method.md, Window)
---------------------------------------------------------------
Variants that restrict the vision span (local-m, local-p, and flexible at a finite
threshold ``tau``) score *only* the positions inside their window: the (row, position)
pairs of the window are packed into one flat list with a single batched index operation,
the score function is evaluated on that list, and the scores are scattered into a
``batch x W_max`` slice padded with ``-inf`` (:meth:`Attention.score_window`). The number of
evaluated positions per row (``stats.window``) is counted from the very index list that is
handed to the score function. A batch of one row (per-sentence decoding) needs no index list:
its window is a slice of the cached keys and of h̄, and its count is the slice's length. Dense
variants score all ``S_max`` slots of the padded batch (one batched kernel) and report the real
length ``S_i`` of each row.

Padding and out-of-window slots are always masked with ``-inf`` before a softmax
(``masked_fill``), never multiplied by 0.

Modules
-------
``base``: the containers, :func:`masked_softmax`, :class:`Attention` and global attention;
``scores``: the score functions; ``flexible``: Flexible Attention; ``local``: local-m / local-p (and
local-m along the length ratio);
``sact``: SACT; ``registry``: the variants of ``model.attention`` and :func:`build_attention`.
Every public name is importable from :mod:`flexatt.attention` itself.
"""

from flexatt.attention.base import (
    NEG_INF,
    Attention,
    AttentionCache,
    AttentionState,
    AttentionStats,
    GlobalAttention,
    RowMap,
    masked_softmax,
)
from flexatt.attention.flexible import FlexibleAttention
from flexatt.attention.local import LocalAttention, set_length_ratio
from flexatt.attention.registry import (
    ATTENTION_TYPES,
    ATTENTION_VARIANTS,
    AttentionSizes,
    Builder,
    attention_types,
    build_attention,
    register_attention,
)
from flexatt.attention.sact import SACTAttention, SACTTemperature
from flexatt.attention.scores import (
    SCORE_TYPES,
    ConcatScore,
    DotScore,
    GeneralScore,
    LocationScore,
    Scorer,
    _AdditiveScore,  # noqa: F401  (re-exported: the kernel restates it, flexatt.decoding.digests)
    build_scorer,
)

__all__ = [
    "ATTENTION_TYPES",
    "ATTENTION_VARIANTS",
    "NEG_INF",
    "SCORE_TYPES",
    "Attention",
    "AttentionCache",
    "AttentionSizes",
    "AttentionState",
    "AttentionStats",
    "Builder",
    "ConcatScore",
    "DotScore",
    "FlexibleAttention",
    "GeneralScore",
    "GlobalAttention",
    "LocalAttention",
    "LocationScore",
    "RowMap",
    "SACTAttention",
    "SACTTemperature",
    "Scorer",
    "attention_types",
    "build_attention",
    "build_scorer",
    "masked_softmax",
    "register_attention",
    "set_length_ratio",
]

"""The variants of ``model.attention``: :func:`register_attention`, the built-in registrations and
:func:`build_attention`.

A variant is built from the validated ``model`` config (:class:`flexatt.schema.Model`, which
holds every setting and its default) and the sizes of the tensors it attends between
(:class:`AttentionSizes`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from flexatt.attention.base import Attention, GlobalAttention
from flexatt.attention.flexible import FlexibleAttention
from flexatt.attention.local import LocalAttention
from flexatt.attention.sact import SACTAttention
from flexatt.attention.scores import Scorer, build_scorer
from flexatt.schema import Model

#: the built-in variants; :func:`attention_types` adds those registered by ``flexatt.variants``
ATTENTION_TYPES = ("global", "local_m", "local_p", "local_mr", "flexible", "sact", "flexible_sact")


@dataclass(frozen=True)
class AttentionSizes:
    """The sizes of the tensors an attention module reads; every other setting is a ``model``
    config value (:class:`flexatt.schema.Model`)."""

    query_size: int  # H, the decoder state h_{t-1}
    key_size: int  # 2H, the encoder states h̄_s (also the context size)
    feedback_size: int  # E, the feedback embedding i_t

    @classmethod
    def of(cls, model: Model) -> AttentionSizes:
        """The sizes in :func:`flexatt.model.build_model`'s network: H, 2H (bidirectional
        encoder) and E."""
        return cls(model.hidden_size, 2 * model.hidden_size, model.emb_size)


#: a variant's builder: ``(scorer, model, sizes) -> Attention``
Builder = Callable[[Scorer, Model, AttentionSizes], Attention]

#: ``model.attention`` name -> its :data:`Builder`
ATTENTION_VARIANTS: dict[str, Builder] = {}


def register_attention(name: str):
    """Class (or function) decorator: make ``name`` a value of ``model.attention``.

    A decorated class is built with its ``from_config(scorer, model, sizes)`` classmethod; a
    decorated function is the builder itself. ``model`` is the validated
    :class:`flexatt.schema.Model` (``model.local_D``, ``model.sigma``, ``model.temperature``, ...,
    each with its default), ``sizes`` an :class:`AttentionSizes`. A name registered twice is
    refused.

    Example (``src/flexatt/variants/``; README, "Add an attention variant")::

        @register_attention("my_variant")
        class MyAttention(Attention):
            @classmethod
            def from_config(cls, scorer, model, sizes):
                return cls(scorer, model.temperature)

            def forward(self, query, feedback, cache, state, tau=INF): ...
    """
    def add(builder):
        if name in ATTENTION_VARIANTS:
            raise ValueError(f"model.attention: the variant {name!r} is registered twice")
        ATTENTION_VARIANTS[name] = builder.from_config if isinstance(builder, type) else builder
        return builder

    return add


register_attention("global")(lambda scorer, m, s: GlobalAttention(scorer, m.temperature))
register_attention("local_m")(lambda scorer, m, s: LocalAttention(
    scorer, s.query_size, m.att_size, m.local_D, False, m.temperature))
register_attention("local_p")(lambda scorer, m, s: LocalAttention(
    scorer, s.query_size, m.att_size, m.local_D, True, m.temperature))
register_attention("local_mr")(lambda scorer, m, s: LocalAttention(
    scorer, s.query_size, m.att_size, m.local_D, False, m.temperature, ratio=True))
register_attention("flexible")(lambda scorer, m, s: FlexibleAttention(
    scorer, s.query_size, s.feedback_size, s.key_size, m.att_size, m.sigma, m.g_feedback,
    m.temperature, None, m.sact_feedback))
register_attention("sact")(lambda scorer, m, s: SACTAttention(
    scorer, s.query_size, s.key_size, m.sact_lambda, s.feedback_size if m.sact_feedback else None))
register_attention("flexible_sact")(lambda scorer, m, s: FlexibleAttention(
    scorer, s.query_size, s.feedback_size, s.key_size, m.att_size, m.sigma, m.g_feedback,
    m.temperature, m.sact_lambda, m.sact_feedback))


def attention_types() -> tuple[str, ...]:
    """Every value ``model.attention`` accepts: the built-in :data:`ATTENTION_TYPES` and the
    variants registered since (``flexatt.variants``)."""
    return tuple(ATTENTION_VARIANTS)


def build_attention(model: Model, sizes: AttentionSizes) -> Attention:
    """The attention module registered as ``model.attention``, on the score function
    ``model.score`` (``model.max_src_len`` bounds the location score)."""
    if model.attention not in ATTENTION_VARIANTS:
        raise ValueError(f"model.attention: {model.attention!r}; allowed: {', '.join(attention_types())}")
    scorer = build_scorer(model.score, sizes.query_size, sizes.key_size, model.att_size, model.max_src_len)
    return ATTENTION_VARIANTS[model.attention](scorer, model, sizes)

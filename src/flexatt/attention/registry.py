"""The variants of ``model.attention``: :func:`register_attention`, the built-in registrations and
:func:`build_attention`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Optional

from flexatt.attention.base import Attention, GlobalAttention
from flexatt.attention.flexible import FlexibleAttention
from flexatt.attention.local import LocalAttention
from flexatt.attention.sact import SACTAttention
from flexatt.attention.scores import Scorer, build_scorer

#: the built-in variants; :func:`attention_types` adds those registered by ``flexatt.variants``
ATTENTION_TYPES = ("global", "local_m", "local_p", "flexible", "sact", "flexible_sact")


@dataclass(frozen=True)
class AttentionArgs:
    """What a variant's builder gets besides the score function: the sizes of the model and
    the ``model`` config values (:data:`flexatt.model.DEFAULTS`)."""

    query_size: int  # H, the decoder state h_{t-1}
    key_size: int  # 2H, the encoder states h̄_s (also the context size)
    feedback_size: int  # E, the feedback embedding i_t
    att_size: int
    local_D: int = 10
    sigma: float = 1.5
    g_feedback: bool = True
    sact_lambda: float = 4.0
    temperature: Optional[float] = None
    sact_feedback: bool = True


#: ``model.attention`` name -> builder ``(scorer, AttentionArgs) -> Attention``
ATTENTION_VARIANTS: dict[str, Callable[[Scorer, AttentionArgs], Attention]] = {}


def register_attention(name: str):
    """Class (or function) decorator: make ``name`` a value of ``model.attention``.

    A decorated class is built with its ``from_config(scorer, args)`` classmethod; a decorated
    function is the builder itself. A name registered twice is refused.

    Example (``src/flexatt/variants/``; README, "Add an attention variant")::

        @register_attention("my_variant")
        class MyAttention(Attention):
            @classmethod
            def from_config(cls, scorer, args):
                return cls(scorer, args.temperature)

            def forward(self, query, feedback, cache, state, tau=None): ...
    """
    def add(builder):
        if name in ATTENTION_VARIANTS:
            raise ValueError(f"model.attention: the variant {name!r} is registered twice")
        ATTENTION_VARIANTS[name] = builder.from_config if isinstance(builder, type) else builder
        return builder

    return add


register_attention("global")(lambda scorer, a: GlobalAttention(scorer, a.temperature))
register_attention("local_m")(lambda scorer, a: LocalAttention(
    scorer, a.query_size, a.att_size, a.local_D, False, a.temperature))
register_attention("local_p")(lambda scorer, a: LocalAttention(
    scorer, a.query_size, a.att_size, a.local_D, True, a.temperature))
register_attention("flexible")(lambda scorer, a: FlexibleAttention(
    scorer, a.query_size, a.feedback_size, a.key_size, a.att_size, a.sigma, a.g_feedback,
    a.temperature, None, a.sact_feedback))
register_attention("sact")(lambda scorer, a: SACTAttention(
    scorer, a.query_size, a.key_size, a.sact_lambda, a.feedback_size if a.sact_feedback else None))
register_attention("flexible_sact")(lambda scorer, a: FlexibleAttention(
    scorer, a.query_size, a.feedback_size, a.key_size, a.att_size, a.sigma, a.g_feedback,
    a.temperature, a.sact_lambda, a.sact_feedback))


def attention_types() -> tuple[str, ...]:
    """Every value ``model.attention`` accepts: the built-in :data:`ATTENTION_TYPES` and the
    variants registered since (``flexatt.variants``)."""
    return tuple(ATTENTION_VARIANTS)


def build_attention(attention: str, score: str, args: AttentionArgs, max_src_len: int = 256) -> Attention:
    """The attention module registered as ``attention``, on the score function ``score``."""
    if attention not in ATTENTION_VARIANTS:
        raise ValueError(f"model.attention: {attention!r}; allowed: {', '.join(attention_types())}")
    scorer = build_scorer(score, args.query_size, args.key_size, args.att_size, max_src_len)
    return ATTENTION_VARIANTS[attention](scorer, args)

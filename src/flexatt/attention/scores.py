"""Score functions score(h_{t-1}, h̄_s): ``concat`` (Flexible Attention 2017, eq. 3), ``general``,
``dot``, ``scaled_dot`` and ``location`` (Luong et al. 2015, §3.1), each split into a per-sentence
key half and a per-step query half.
"""

from __future__ import annotations

import math
from typing import Optional

import torch
from torch import Tensor, nn

from flexatt.schema import SCORE_TYPES


class Scorer(nn.Module):
    """A score function score(h_{t-1}, h̄_s), split into a per-sentence key half and a
    per-step query half so that the key half is computed once per sentence.

    ``forward(q, keys, positions)`` broadcasts over leading dimensions: the dense path calls
    it with ``batch x 1 x d`` / ``batch x S x d`` / ``1 x S``, the windowed path with flat
    ``N x d`` / ``N x d`` / ``N`` lists of (row, position) pairs. ``positions`` are 0-based
    tensor indices; only the location score uses them.
    """

    def precompute(self, values: Tensor) -> Tensor:  # batch x S x 2H -> batch x S x d_key
        raise NotImplementedError

    def project_query(self, query: Tensor) -> Tensor:  # batch x Q -> batch x d_query
        raise NotImplementedError

    def forward(self, q: Tensor, keys: Tensor, positions: Tensor) -> Tensor:
        raise NotImplementedError


class _AdditiveScore(torch.autograd.Function):
    """e = v_aᵀ tanh(x / 2) over the last dim for x = q + k, forward and backward fused by hand.

    The caller passes both halves doubled (:class:`ConcatScore` keeps 2 U_k h̄ and 2 W_q h), and
    tanh is evaluated through the identity tanh(x / 2) = 2 σ(x) - 1: PyTorch's CPU tanh is slower
    than its sigmoid (benchmarks/README.md), and this tensor (batch x S x att, every decoding
    step) is the largest one of the recurrence, so each step costs one add and one sigmoid per
    element. The forward keeps only s = σ(q + k):

        e = 2 (s · v_a) - Σ v_a,    ∂e/∂(q + k) = v_a · (1 - tanh²) / 2 = v_a · 2 s (1 - s).

    Float32 results agree with ``v_a(torch.tanh((q + k) / 2))`` to ~1e-6 (tests check both values
    and gradients).
    """

    @staticmethod
    def forward(ctx, q: Tensor, keys: Tensor, v: Tensor) -> Tensor:
        s = torch.add(keys, q).sigmoid_()  # ... x att (q broadcasts over keys)
        ctx.save_for_backward(s, v)
        ctx.q_shape, ctx.k_shape = q.shape, keys.shape
        return torch.matmul(s, v).mul_(2.0).sub_(v.sum())  # ...

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: Tensor) -> tuple[Optional[Tensor], Optional[Tensor], Optional[Tensor]]:
        s, v = ctx.saved_tensors
        grad_q = grad_k = grad_v = None
        if ctx.needs_input_grad[2]:  # ∂e/∂v = 2 s - 1, summed over every score
            flat = s.reshape(-1, s.size(-1))
            grad_v = torch.matmul(grad.reshape(1, -1), flat).squeeze(0).mul_(2.0).sub_(grad.sum())
        if ctx.needs_input_grad[0] or ctx.needs_input_grad[1]:
            pre = torch.sub(1.0, s).mul_(s).mul_(grad.unsqueeze(-1) * (2.0 * v))  # ... x att
            if ctx.needs_input_grad[1]:
                grad_k = pre.sum_to_size(ctx.k_shape)
            if ctx.needs_input_grad[0]:
                grad_q = pre.sum_to_size(ctx.q_shape)
                if grad_k is not None and grad_q.data_ptr() == grad_k.data_ptr():
                    grad_q = grad_q.clone()  # never hand autograd one buffer twice
        return grad_q, grad_k, grad_v


class ConcatScore(Scorer):
    """``concat``: v_aᵀ tanh(W_a [h_{t-1}; h̄_s]) = v_aᵀ tanh(W_q h_{t-1} + U_k h̄_s).

    Flexible Attention 2017, eq. 3 (Bahdanau et al.'s additive score written as a
    concatenation, as in Luong et al. 2015). Both halves are kept doubled, keys 2 U_k h̄ (cached
    per sentence) and queries 2 W_q h_{t-1}, for :class:`_AdditiveScore`, which fuses the tanh
    and the product with v_a. Doubling is exact in binary floating point, so 2 U_k h̄ + 2 W_q h
    is bit for bit 2 (U_k h̄ + W_q h), and so are the gradients.
    """

    def __init__(self, query_size: int, key_size: int, att_size: int):
        super().__init__()
        self.W_q = nn.Linear(query_size, att_size, bias=False)
        self.U_k = nn.Linear(key_size, att_size, bias=False)
        self.v_a = nn.Linear(att_size, 1, bias=False)

    def precompute(self, values: Tensor) -> Tensor:
        return self.U_k(values).mul_(2.0)  # batch x S x att: 2 U_k h̄

    def project_query(self, query: Tensor) -> Tensor:
        return self.W_q(query).mul_(2.0)  # batch x att: 2 W_q h

    def forward(self, q: Tensor, keys: Tensor, positions: Tensor) -> Tensor:
        return _AdditiveScore.apply(q, keys, self.v_a.weight.view(-1))


class GeneralScore(Scorer):
    """``general`` (Luong et al. 2015, §3.1): h_{t-1}ᵀ W_a h̄_s; W_a h̄ is cached per sentence."""

    def __init__(self, query_size: int, key_size: int):
        super().__init__()
        self.W_a = nn.Linear(key_size, query_size, bias=False)

    def precompute(self, values: Tensor) -> Tensor:
        return self.W_a(values)  # batch x S x Q

    def project_query(self, query: Tensor) -> Tensor:
        return query

    def forward(self, q: Tensor, keys: Tensor, positions: Tensor) -> Tensor:
        return (q * keys).sum(-1)


class DotScore(Scorer):
    """``dot`` (Luong et al. 2015, §3.1) with both sides projected to ``att_size`` (the decoder and
    the bidirectional encoder have different sizes): (W_q h_{t-1})ᵀ (W_k h̄_s).
    ``scaled_dot`` divides by √att_size (Vaswani et al. 2017)."""

    def __init__(self, query_size: int, key_size: int, att_size: int, scaled: bool = False):
        super().__init__()
        self.W_q = nn.Linear(query_size, att_size, bias=False)
        self.W_k = nn.Linear(key_size, att_size, bias=False)
        self.scale = 1.0 / math.sqrt(att_size) if scaled else 1.0

    def precompute(self, values: Tensor) -> Tensor:
        return self.W_k(values)  # batch x S x att

    def project_query(self, query: Tensor) -> Tensor:
        return self.W_q(query)  # batch x att

    def forward(self, q: Tensor, keys: Tensor, positions: Tensor) -> Tensor:
        return (q * keys).sum(-1) * self.scale


class LocationScore(Scorer):
    """``location`` (Luong et al. 2015, §3.1): a_t = softmax(W_a h_{t-1}) over positions.

    The logits W_a h_{t-1} + b_a live on ``max_len`` positions; position s uses row s-1 of
    W_a, so a windowed call evaluates only the rows of its window, and the logits of a
    sentence are its first S_i rows (the rest is padding, masked by the caller).
    Keys are not used (``precompute`` returns a ``batch x S x 0`` tensor).
    """

    def __init__(self, query_size: int, max_len: int):
        super().__init__()
        self.max_len = max_len
        self.W_a = nn.Parameter(torch.empty(max_len, query_size))
        self.b_a = nn.Parameter(torch.zeros(max_len))
        nn.init.normal_(self.W_a, std=query_size**-0.5)

    def precompute(self, values: Tensor) -> Tensor:
        if values.size(1) > self.max_len:
            raise ValueError(
                f"location score: source length {values.size(1)} exceeds max_src_len={self.max_len}"
            )
        return values.new_zeros(values.size(0), values.size(1), 0)

    def project_query(self, query: Tensor) -> Tensor:
        return query

    def forward(self, q: Tensor, keys: Tensor, positions: Tensor) -> Tensor:
        return (q * self.W_a[positions]).sum(-1) + self.b_a[positions]


def build_scorer(
    score: str, query_size: int, key_size: int, att_size: int, max_src_len: int = 256
) -> Scorer:
    """Score function by config name (see :data:`SCORE_TYPES`)."""
    if score == "concat":
        return ConcatScore(query_size, key_size, att_size)
    if score == "general":
        return GeneralScore(query_size, key_size)
    if score in ("dot", "scaled_dot"):
        return DotScore(query_size, key_size, att_size, scaled=score == "scaled_dot")
    if score == "location":
        return LocationScore(query_size, max_src_len)
    raise ValueError(f"model.score: {score!r}; allowed: {', '.join(SCORE_TYPES)}")

"""Whatever a researcher edits, decoding follows: each member the decoding path runs — every
attention variant's ``forward``, the score functions, the decoder's ``step`` — edited in place
(monkeypatched, so the class that runs is the edited one) changes what ``decode.backend=auto``
decodes, in greedy, beam and forced decoding, and what it decodes is the edited model's own step
on a copy of the cache per row (the reference arithmetic, :mod:`tests.test_row_map`), bit for bit.
The kernel restates some of these members; its digests keep it from decoding an edit
(tests/test_backends.py)."""

from __future__ import annotations

import math
import warnings

import pytest
import torch

from flexatt.attention import attention_types
from flexatt.attention.scores import SCORE_TYPES
from flexatt.data.subwords import BOS_ID
from flexatt.decoders import RecurrentDecoder
from flexatt.decoding import beam_search, forced_decode, greedy
from flexatt.decoding.stepper import EagerStepper
from test_search import sources, tiny_model

pytestmark = pytest.mark.usefixtures("single_thread")

TAU = 0.6  # flexible variants decode at a finite τ (the windowed path); the others at inf


def edit_forward(cls):
    """The attention's forward, its context vector halved."""
    original = cls.forward

    def forward(self, query, feedback, cache, state, tau=math.inf):
        context, weights, new_state, stats = original(self, query, feedback, cache, state, tau)
        return 0.5 * context, weights, new_state, stats
    return "forward", forward


def edit_scorer(cls):
    """The score function, its scores scaled by 1.5."""
    original = cls.forward

    def forward(self, q, keys, positions):
        return 1.5 * original(self, q, keys, positions)
    return "forward", forward


def edit_step(cls):
    """The decoder's step, the logits of token 5 raised by 0.7."""
    original = cls.step

    def step(self, prev_tokens, state, cache, tau=math.inf):
        logits, new_state, weights, stats = original(self, prev_tokens, state, cache, tau)
        return logits + 0.7 * (torch.arange(logits.size(1)) == 5).to(logits.dtype), new_state, weights, stats
    return "step", step


def decode_all(model, tau):
    """Beam (k = 4, n-best 2), greedy and forced decoding of the same sources with ``auto``."""
    src, src_len = sources()
    beam = beam_search(model, src, src_len, 10, 4, tau=tau, n_best=2)
    g = greedy(model, src, src_len, 10, tau)
    tgt_out = torch.randint(4, 12, (src.size(0), 6), generator=torch.Generator().manual_seed(0))
    tgt_out[:, -1] = 3  # EOS
    tgt_in = torch.cat([torch.full((src.size(0), 1), BOS_ID), tgt_out[:, :-1]], 1)
    forced = forced_decode(model, src, src_len, tgt_in, tgt_out, tau)
    return {"beam": (beam.nbest, beam.scores), "greedy": (g.tokens, g.scores), "forced": (forced.log_probs,)}


def cases():
    out = []
    for name in attention_types():
        for member in ("forward", "scorer", "step"):
            out.append(pytest.param(name, "concat", member, id=f"{name}-{member}"))
    for score in SCORE_TYPES:  # every score function, under global and flexible attention
        if score != "concat":
            out += [pytest.param(name, score, "scorer", id=f"{name}-{score}-scorer") for name in ("global", "flexible")]
    return out


@pytest.mark.parametrize("attention,score,member", cases())
def test_auto_decodes_the_edit(attention, score, member, monkeypatch):
    model = tiny_model(attention, seed=1, score=score)
    tau = TAU if attention.startswith("flexible") else math.inf
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the kernel's stale digest warns; tests/test_backends.py checks it
        before = decode_all(model, tau)
        cls = {"forward": type(model.decoder.attention), "scorer": type(model.decoder.attention.scorer),
               "step": RecurrentDecoder}[member]
        name, edited = {"forward": edit_forward, "scorer": edit_scorer, "step": edit_step}[member](cls)
        monkeypatch.setattr(cls, name, edited)
        auto = decode_all(model, tau)
        monkeypatch.setattr(EagerStepper, "encode", lambda self, src, src_len: self.model.encode(src, src_len))
        reference = decode_all(model, tau)  # the edited model's step on a copy of the cache per row
    for search in ("beam", "greedy", "forced"):
        for a, r, b in zip(auto[search], reference[search], before[search]):
            assert torch.equal(a, r), f"{search}: auto does not decode the edited model as its own step does"
        assert not all(torch.equal(a, b) for a, b in zip(auto[search], before[search])), \
            f"{search}: the edit changed nothing that decodes"

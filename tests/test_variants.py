"""The attention-variant registry, and the worked example of adding a variant (docs/variants.md).

The example module and config entry are read from docs/variants.md itself, so it keeps working:
the module is loaded as ``flexatt.variants.local_prev`` would be, registers ``local_prev``, and
its weights are checked against the equation it states (global attention's softmax restricted to
±D positions around round(p_{t-1})), with the window counted by the code that scores.
"""

from __future__ import annotations

import re
import sys
import types
import warnings

import pytest
import torch
import yaml

from flexatt import attention as A
from flexatt import schema
from flexatt.model import DEFAULTS, build_model, validate_config

EXAMPLE_MODULE = "src/flexatt/variants/local_prev.py"


def _example_blocks(root, language: str) -> list[str]:
    text = (root / "docs/variants.md").read_text(encoding="utf-8")
    return re.findall(rf"```{language}\n(.*?)```", text, re.S)


@pytest.fixture
def local_prev(root):
    """The worked example's module, loaded under its package name; unregistered afterwards."""
    (code,) = [b for b in _example_blocks(root, "python") if b.startswith(f"# {EXAMPLE_MODULE}\n")]
    module = types.ModuleType("flexatt.variants.local_prev")
    module.__file__ = str(root / EXAMPLE_MODULE)
    sys.modules[module.__name__] = module
    try:
        exec(compile(code, module.__file__, "exec"), module.__dict__)
        yield module
    finally:
        A.ATTENTION_VARIANTS.pop("local_prev", None)
        sys.modules.pop(module.__name__, None)


def test_builtin_variants_are_registered_in_order_and_names_are_unique():
    assert A.attention_types()[:len(A.ATTENTION_TYPES)] == A.ATTENTION_TYPES
    with pytest.raises(ValueError, match="model.attention: the variant 'global' is registered twice"):
        A.register_attention("global")(lambda scorer, model, sizes: None)
    with pytest.raises(ValueError, match="model.attention: 'nope'; allowed: global, local_m"):
        A.build_attention(schema.Model(attention="nope", att_size=5), A.AttentionSizes(4, 6, 3))


def test_the_examples_config_entry_names_its_variant(local_prev, root):
    (block,) = _example_blocks(root, "yaml")
    entry = yaml.safe_load(block)
    assert entry == {"local_prev": {"attention": "local_prev"}}
    assert validate_config({**DEFAULTS, **entry["local_prev"]})["attention"] == "local_prev"
    assert "local_prev" in A.attention_types()


def _dense_reference(att, query, cache, state):
    """Global attention's weights (same scorer), restricted to [round(p) - D, round(p) + D] ∩ [1, S]."""
    q = att.scorer.project_query(query)
    scores = att.score_dense(q, cache)  # batch x S
    s = torch.arange(1, scores.size(1) + 1).unsqueeze(0)  # 1 x S (1-based)
    centre = torch.round(state.position).long().unsqueeze(1)
    inside = cache.mask & ((s - centre).abs() <= att.D)
    return A.masked_softmax(scores, inside), inside.sum(1)


def test_the_example_variant_scores_only_its_window_and_equals_the_masked_dense_computation(local_prev):
    torch.manual_seed(0)
    H, E, D = 8, 5, 2
    att = A.build_attention(schema.Model(attention="local_prev", att_size=7, local_D=D), A.AttentionSizes(H, 2 * H, E))
    assert isinstance(att, local_prev.PreviousCentreAttention) and att.D == D
    lengths = torch.tensor([9, 4, 7])
    values = torch.randn(3, 9, 2 * H)
    mask = torch.arange(9).unsqueeze(0) < lengths.unsqueeze(1)
    cache = att.precompute(values, mask)
    state = att.init_state(cache, values.mean(1))
    moved = 0
    for _ in range(6):
        query, feedback = torch.randn(3, H), torch.randn(3, E)
        ref_weights, ref_count = _dense_reference(att, query, cache, state)
        context, weights, new_state, stats = att(query, feedback, cache, state)
        torch.testing.assert_close(weights, ref_weights)
        torch.testing.assert_close(context, torch.bmm(ref_weights.unsqueeze(1), values).squeeze(1))
        assert torch.equal(stats.window, ref_count) and bool((stats.window < lengths).any())
        torch.testing.assert_close(new_state.position, (weights * torch.arange(1, 10)).sum(1))
        moved += int((torch.round(new_state.position) != torch.round(state.position)).sum())
        state = new_state
    assert moved > 0  # the window followed p_t


def test_the_example_variant_trains_and_decodes_in_a_model(local_prev):
    from flexatt.decoding import beam_search

    torch.manual_seed(0)
    model = build_model({"attention": "local_prev", "emb_size": 8, "hidden_size": 8, "att_size": 8,
                         "readout_size": 8, "dropout": 0.0, "local_D": 1}, 20, 20)
    src = torch.randint(4, 20, (2, 6))
    src_len = torch.tensor([6, 3])
    tgt_in = torch.randint(4, 20, (2, 5))
    logits, aux = model(src, src_len, tgt_in)
    logits.logsumexp(-1).sum().backward()
    assert all(p.grad is not None for p in model.decoder.attention.parameters())
    assert int(aux["window"].max()) <= 3  # 2D + 1 positions at most
    model.eval()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no backend to fall back from: the model's own step decodes it
        result = beam_search(model, src, src_len, max_len=8, beam_size=2)
    assert len(result.tokens) == 2 and result.backend == "eager"
    # its forward reads the row map's per-row tensors (cache.lengths): the same as a copy per row
    from flexatt.decoding.stepper import EagerStepper

    original = EagerStepper.encode
    try:
        EagerStepper.encode = lambda self, s, n: self.model.encode(s, n)
        per_row = beam_search(model, src, src_len, max_len=8, beam_size=2)
    finally:
        EagerStepper.encode = original
    assert torch.equal(per_row.tokens, result.tokens) and torch.equal(per_row.scores, result.scores)

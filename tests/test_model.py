"""Tests of the encoder-decoder model, its config validation and its losses."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from omegaconf import OmegaConf

from flexatt import schema
from flexatt.errors import ConfigError
from flexatt.attention import ATTENTION_TYPES
from flexatt.decoders import DecoderState
from flexatt.model import (
    DEFAULTS,
    Seq2Seq,
    build_model,
    count_parameters,
    finetune_loss,
    mean_strength,
    sequence_nll,
)

PAD, BOS, EOS, VOCAB = 0, 1, 2, 12
TINY = dict(emb_size=8, hidden_size=6, att_size=5, readout_size=7, dropout=0.0, local_D=2)


pytestmark = pytest.mark.usefixtures("single_thread")


def tiny_model(attention="global", seed=0, **kw) -> Seq2Seq:
    torch.manual_seed(seed)
    model = build_model({**TINY, "attention": attention, **kw}, VOCAB, VOCAB, PAD)
    return model.eval()


def batch():
    """Fixed batch: 3 sources of lengths 6, 3, 1 and targets of lengths 5, 2, 4 (+BOS)."""
    src = torch.tensor([[3, 4, 5, 6, 7, 8], [9, 10, 11, 0, 0, 0], [5, 0, 0, 0, 0, 0]])
    src_len = torch.tensor([6, 3, 1])
    tgt_out = torch.tensor([[5, 4, 3, 8, EOS], [11, EOS, 0, 0, 0], [6, 6, 7, EOS, 0]])
    tgt_in = torch.cat([torch.full((3, 1), BOS), tgt_out[:, :-1]], 1)
    tgt_in[tgt_out == 0] = 0
    return src, src_len, tgt_in, tgt_out, tgt_out != PAD


# --------------------------------------------------------------------------------------
# config
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "key,value,expected",
    [
        ("attention", "local", "must be one of global, local_m, local_p, local_mr, flexible, sact, flexible_sact (got 'local')"),
        ("score", "bilinear", "must be one of concat, general, dot, scaled_dot, location (got 'bilinear')"),
        ("emb_size", 0, "must be >= 1 (got 0)"),
        ("hidden_size", 2.5, "must be an integer (got 2.5)"),
        ("dropout", 1.0, "must be < 1.0 (got 1.0)"),
        ("local_D", 0, "must be >= 1 (got 0)"),
        ("sigma", -1.0, "must be > 0.0 (got -1.0)"),
        ("g_feedback", "yes", "must be true or false (got 'yes')"),
        ("sact_lambda", 1.0, "must be > 1.0 (got 1.0)"),
        ("temperature", 0.0, "must be > 0.0 (got 0.0)"),
        ("att_sise", 8, "unknown key"),
    ],
)
def test_build_model_rejects_bad_values_naming_the_key(key, value, expected):
    with pytest.raises(ConfigError) as info:
        build_model({key: value}, VOCAB, VOCAB)
    assert str(info.value) == f"model.{key}: {expected}"


def test_temperature_is_rejected_for_learned_temperature_variants():
    with pytest.raises(ConfigError, match=r"^model\.temperature: must be null when model.attention is sact"):
        build_model({"attention": "sact", "temperature": 0.9}, VOCAB, VOCAB)


@pytest.mark.parametrize("attention", ATTENTION_TYPES)
def test_build_model_takes_the_schema_object_and_builds_what_the_mapping_builds(attention):
    """The validated :class:`flexatt.schema.Model` is what the builders read: a model built from it
    has the parameters, bit for bit, and the config of one built from the equivalent mapping; its
    attention carries the schema's settings (σ, D, λ: one default each, in the schema)."""
    cfg = {**TINY, "attention": attention, "sigma": 2.5, "sact_lambda": 3.0}
    torch.manual_seed(0)
    from_schema = build_model(schema.Model(**cfg), VOCAB, VOCAB, PAD)
    torch.manual_seed(0)
    from_mapping = build_model(cfg, VOCAB, VOCAB, PAD)
    assert from_schema.config == from_mapping.config == schema.Model(**cfg).model_dump()
    a, b = from_schema.state_dict(), from_mapping.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    att = from_schema.decoder.attention
    if attention.startswith("flexible"):
        assert att.sigma == 2.5
    if attention.startswith("local"):
        assert att.D == TINY["local_D"]
    if attention.endswith("sact"):
        assert att.sact_temperature.lam == 3.0
    with pytest.raises(ConfigError, match="model.attention: must be one of global"):
        build_model(schema.Model(**{**cfg, "attention": "nope"}), VOCAB, VOCAB)


def test_build_model_accepts_omegaconf_and_defaults():
    cfg = OmegaConf.create({**TINY, "attention": "flexible", "temperature": None})
    model = build_model(cfg, VOCAB, 13)
    assert model.config["sigma"] == DEFAULTS["sigma"] and model.config["g_feedback"] is True
    assert model.decoder.W_s.out_features == 13
    assert count_parameters(model) == sum(p.numel() for p in model.parameters())
    model.decoder.W_s.weight.requires_grad_(False)
    assert count_parameters(model) == sum(p.numel() for p in model.parameters()) - 13 * 7
    assert count_parameters(model, trainable_only=False) > count_parameters(model)


# --------------------------------------------------------------------------------------
# forward == step loop, padding invariance
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "attention,tau",
    [(a, math.inf) for a in ATTENTION_TYPES] + [("flexible", 0.5), ("flexible_sact", 0.5)],
)
def test_teacher_forced_forward_equals_step_loop(attention, tau):
    model = tiny_model(attention)
    src, src_len, tgt_in, _, _ = batch()
    with torch.no_grad():
        logits, aux = model(src, src_len, tgt_in, tau=tau)
        cache, state = model.encode(src, src_len)
        for t in range(tgt_in.size(1)):
            step_logits, state, weights, stats = model.decode_step(tgt_in[:, t], state, cache, tau)
            torch.testing.assert_close(step_logits, logits[:, t])
            torch.testing.assert_close(weights, aux["attention"][:, t])
            assert torch.equal(stats.window, aux["window"][:, t])
    assert logits.shape == (3, 5, VOCAB) and aux["attention"].shape == (3, 5, 6)
    assert aux["window"].shape == aux["position"].shape == (3, 5)
    assert (aux["g"] is not None) == attention.startswith("flexible")
    assert (aux["temperature"] is not None) == attention.endswith("sact")


@pytest.mark.parametrize("attention,tau", [(a, math.inf) for a in ATTENTION_TYPES] + [("flexible", 0.5)])
def test_bf16_autocast_runs_only_the_readout_in_bf16(attention, tau):
    """trainer.precision=bf16-mixed runs the training step under autocast: the encoder and the
    recurrence stay float32 (identical attention, windows, p_t, g_t and state), the readout's
    products are bf16 and the logits come back float32, close to the float32 ones; every
    parameter gets a float32 gradient. The step path (greedy validation) does the same."""
    model = tiny_model(attention).train()  # dropout 0: train mode only changes what autograd keeps
    src, src_len, tgt_in, tgt_out, mask = batch()
    logits32, aux32 = model(src, src_len, tgt_in, tau=tau)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits, aux = model(src, src_len, tgt_in, tau=tau)
        loss = sequence_nll(logits, tgt_out, mask).sum()
        cache, state = model.encode(src, src_len)
        step_logits, state, _, _ = model.decode_step(tgt_in[:, 0], state, cache, tau)
    assert logits.dtype == step_logits.dtype == torch.float32
    for key in ("attention", "window", "position", "span_lo", "span_hi", "g", "temperature"):
        if aux32[key] is not None:
            assert aux[key].dtype == aux32[key].dtype and torch.equal(aux[key], aux32[key]), key
    assert torch.equal(aux["state"].hidden, aux32["state"].hidden)
    assert not torch.equal(logits, logits32)  # the readout did run in bf16 ...
    torch.testing.assert_close(logits, logits32, atol=0.05, rtol=0.02)  # ... to bf16 accuracy
    torch.testing.assert_close(step_logits, logits[:, 0])
    loss.backward()
    for name, p in model.named_parameters():
        if name != "decoder.embed.weight" or attention != "local_m":  # unused rows have zero grads
            assert p.grad is not None and p.grad.dtype == torch.float32, name


def test_bf16_on_a_cpu_without_native_bf16_warns_naming_the_key(monkeypatch):
    """Warned where the CPU's bf16 is emulated; silent for float32, for native bf16 and where the
    flags cannot tell (whatever CPU runs the test: the answer of native_cpu_bf16 is set here)."""
    import warnings

    from flexatt import trainer as train

    monkeypatch.setattr(train, "native_cpu_bf16", lambda: False)
    with pytest.warns(UserWarning, match=r"trainer\.precision=bf16-mixed: .*32-true"):
        train.warn_slow_bf16({"accelerator": "cpu", "precision": "bf16-mixed"})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        train.warn_slow_bf16({"accelerator": "cpu", "precision": "32-true"})
        for native in (True, None):
            monkeypatch.setattr(train, "native_cpu_bf16", lambda native=native: native)
            train.warn_slow_bf16({"accelerator": "cpu", "precision": "bf16-mixed"})


@pytest.mark.parametrize("attention", ATTENTION_TYPES)
def test_padding_does_not_change_outputs(attention):
    """A sentence decoded alone equals the same sentence inside a padded batch."""
    model = tiny_model(attention)
    src, src_len, tgt_in, _, _ = batch()
    with torch.no_grad():
        full, aux = model(src, src_len, tgt_in, tau=0.8)
        alone, aux1 = model(src[1:2, :3], src_len[1:2], tgt_in[1:2], tau=0.8)
    torch.testing.assert_close(alone, full[1:2])
    torch.testing.assert_close(aux1["attention"], aux["attention"][1:2, :, :3])
    assert torch.all(aux["attention"][1, :, 3:] == 0)


def test_decoder_state_reorder_for_beam_search():
    model = tiny_model("flexible_sact")
    src, src_len, tgt_in, _, _ = batch()
    with torch.no_grad():
        cache, state = model.encode(src, src_len)
        _, state, _, _ = model.decode_step(tgt_in[:, 0], state, cache)
        k = 2
        expand = torch.arange(3).repeat_interleave(k)
        beam_cache, beam_state = cache.index_select(expand), state.index_select(expand)
        assert isinstance(beam_state, DecoderState)
        ref, ref_state, _, _ = model.decode_step(tgt_in[:, 1], state, cache, tau=0.5)
        out, out_state, _, _ = model.decode_step(tgt_in[expand, 1], beam_state, beam_cache, tau=0.5)
        torch.testing.assert_close(out, ref[expand])
        origin = torch.tensor([5, 0, 2, 2, 1, 3])
        reordered = out_state.index_select(origin)
        torch.testing.assert_close(reordered.hidden, out_state.hidden[origin])
        torch.testing.assert_close(reordered.attention.position, ref_state.attention.position[expand][origin])


# --------------------------------------------------------------------------------------
# golden values (recorded from this implementation after the naive-recomputation tests)
# --------------------------------------------------------------------------------------
GOLDEN = {
    "global": {
        "logits": [0.1762148, -0.02972, -0.2171069, -0.2744537, -0.3788113, -0.494218,
                   0.0607412, -0.2289415, -0.2872201],
        "attention": [0.1580047, 0.1611941, 0.1685361, 0.1709368, 0.1781266, 0.1632017],
    },
    "flexible": {
        "logits": [0.003968, 0.0926261, -0.3924271, -0.0548589, 0.3463851, -0.3808216,
                   0.0261299, 0.0104139, -0.3304514],
        "attention": [0.1298119, 0.1953607, 0.2341704, 0.211955, 0.1530497, 0.0756523],
        "g": [0.5130376, 0.4361546, 0.565725, 0.3911154, 0.5662524],
        "position": [2.3844628, 3.04526, 3.2900269, 3.4506004, 3.5087399],
    },
}


def test_decoder_lstm_equals_torch_lstm_cell():
    """The decoder's LSTM step (input projection split into the feedback half, computed for all
    steps at once, and the context half) equals torch.nn.LSTMCell on [i_t; c_t] with the same
    parameters, values and gradients."""
    model = tiny_model("global")
    dec = model.decoder
    g = torch.Generator().manual_seed(5)
    n_emb, n_ctx, hid = dec.embed.embedding_dim, 2 * dec.hidden_size, dec.hidden_size
    i_t = torch.randn(4, n_emb, generator=g)
    ctx = torch.randn(4, n_ctx, generator=g)
    h, c = torch.randn(4, hid, generator=g), torch.randn(4, hid, generator=g)
    w = dec.lstm_weights()
    got = dec.lstm(dec.input_gates(i_t, w), ctx, h, c, w)
    want = dec.rnn(torch.cat([i_t, ctx], -1), (h, c))
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)
    grads = torch.autograd.grad(sum(x.sum() for x in got), list(dec.rnn.parameters()))
    ref_grads = torch.autograd.grad(sum(x.sum() for x in want), list(dec.rnn.parameters()))
    for a, b in zip(grads, ref_grads):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("attention", list(GOLDEN))
def test_golden_values(attention):
    model = tiny_model(attention, score="concat")
    src, src_len, tgt_in, _, _ = batch()
    with torch.no_grad():
        logits, aux = model(src, src_len, tgt_in)
    got = {
        "logits": logits[0, :3, :3].flatten().tolist(),
        "attention": aux["attention"][0, 2].tolist(),
    }
    if attention == "flexible":
        got["g"] = aux["g"][0].tolist()
        got["position"] = aux["position"][0].tolist()
    for name, expected in GOLDEN[attention].items():
        assert got[name] == pytest.approx(expected, rel=1e-4, abs=1e-6), name


# --------------------------------------------------------------------------------------
# losses
# --------------------------------------------------------------------------------------
def test_sequence_nll_equals_cross_entropy_values_and_gradients():
    """The training NLL (hand-written backward) against F.cross_entropy: per-sentence sum over
    real positions, batch mean; gradients in float64 (gradcheck) and float32."""
    from flexatt.model import _TokenNLL

    g = torch.Generator().manual_seed(7)
    logits = torch.randn(3, 4, 9, generator=g, requires_grad=True)
    tgt_out = torch.randint(0, 9, (3, 4), generator=g)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]], dtype=torch.bool)
    loss = sequence_nll(logits, tgt_out, mask)
    ce = F.cross_entropy(logits.transpose(1, 2), tgt_out, reduction="none")
    ref = (ce * mask).sum() / 3
    torch.testing.assert_close(loss, ref)
    got, want = (torch.autograd.grad(x, logits)[0] for x in (loss, ref))
    torch.testing.assert_close(got, want)
    x64 = torch.randn(5, 7, generator=g, dtype=torch.float64, requires_grad=True)
    target = torch.randint(0, 7, (5,), generator=g)
    assert torch.autograd.gradcheck(lambda x: _TokenNLL.apply(x, target, 0.0)[0], (x64,))


@pytest.mark.parametrize("smoothing", [0.1, 0.3])
def test_label_smoothed_loss_equals_cross_entropy_with_label_smoothing(smoothing):
    """The label-smoothed loss against ``F.cross_entropy(label_smoothing=ε)``, values and
    gradients (float32, and gradcheck in float64); the NLL beside it is the unsmoothed one."""
    from flexatt.model import _TokenNLL, sequence_loss

    g = torch.Generator().manual_seed(11)
    logits = torch.randn(3, 4, 9, generator=g, requires_grad=True)
    tgt_out = torch.randint(0, 9, (3, 4), generator=g)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 0, 0]], dtype=torch.bool)
    loss, nll = sequence_loss(logits, tgt_out, mask, smoothing)
    ce = F.cross_entropy(logits.transpose(1, 2), tgt_out, reduction="none", label_smoothing=smoothing)
    ref = (ce * mask).sum() / 3
    torch.testing.assert_close(loss, ref)
    torch.testing.assert_close(nll, sequence_nll(logits, tgt_out, mask))
    assert not nll.requires_grad
    got, want = (torch.autograd.grad(x, logits)[0] for x in (loss, ref))
    torch.testing.assert_close(got, want)
    x64 = torch.randn(5, 7, generator=g, dtype=torch.float64, requires_grad=True)
    target = torch.randint(0, 7, (5,), generator=g)
    assert torch.autograd.gradcheck(lambda x: _TokenNLL.apply(x, target, smoothing)[0], (x64,))


def test_finetune_loss_by_hand_and_gradients_reach_g():
    model = tiny_model("flexible").train()
    src, src_len, tgt_in, tgt_out, mask = batch()
    logits, aux = model(src, src_len, tgt_in)
    g, beta = aux["g"], 0.1
    loss = finetune_loss(logits, tgt_out, g, mask, beta)
    # by hand: per-sentence summed NLL and per-sentence mean g over real target positions
    logp = F.log_softmax(logits, -1)
    total = 0.0
    for i in range(3):
        T_i = int(mask[i].sum())
        nll = -sum(logp[i, t, tgt_out[i, t]] for t in range(T_i))
        total = total + nll - beta * sum(g[i, t] for t in range(T_i)) / T_i
    torch.testing.assert_close(loss, total / 3)
    torch.testing.assert_close(sequence_nll(logits, tgt_out, mask) - beta * mean_strength(g, mask).mean(), loss)
    loss.backward()
    att = model.decoder.attention
    for name in ("W_g", "v_g", "b_g"):
        param = getattr(att, name)
        grad = param.weight.grad if name == "W_g" else param.grad
        assert grad is not None and grad.abs().sum() > 0, name


def test_finetune_term_pushes_g_up():
    model = tiny_model("flexible", g_feedback=False).train()
    src, src_len, tgt_in, tgt_out, mask = batch()
    _, aux = model(src, src_len, tgt_in)
    (-mean_strength(aux["g"], mask).mean()).backward()
    att = model.decoder.attention
    before = mean_strength(aux["g"], mask).mean().item()
    with torch.no_grad():
        for p in (att.W_g.weight, att.v_g, att.b_g):
            p -= 0.5 * p.grad
        _, aux2 = model(src, src_len, tgt_in)
    assert mean_strength(aux2["g"], mask).mean().item() > before


# --------------------------------------------------------------------------------------
# learning sanity: reorder chunks of 3
# --------------------------------------------------------------------------------------
def reorder_batch(gen, size=32):
    lengths = torch.randint(4, 10, (size,), generator=gen)
    S = int(lengths.max())
    src = torch.zeros(size, S, dtype=torch.long)
    tgt_out = torch.zeros(size, S + 1, dtype=torch.long)
    for i, n in enumerate(lengths.tolist()):
        tokens = torch.randint(3, VOCAB, (n,), generator=gen)
        src[i, :n] = tokens
        chunks = [tokens[j : j + 3].flip(0) for j in range(0, n, 3)]
        tgt_out[i, :n] = torch.cat(chunks)
        tgt_out[i, n] = EOS
    tgt_in = torch.cat([torch.full((size, 1), BOS), tgt_out[:, :-1]], 1)
    tgt_in[tgt_out == PAD] = PAD
    return src, lengths, tgt_in, tgt_out, tgt_out != PAD


@pytest.mark.parametrize("attention", ["global", "flexible"])
def test_tiny_reordering_task_learns(attention):
    torch.manual_seed(0)
    cfg = dict(emb_size=16, hidden_size=32, att_size=16, readout_size=32, dropout=0.0)
    model = build_model({**cfg, "attention": attention}, VOCAB, VOCAB, PAD)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(1)
    held_out = reorder_batch(torch.Generator().manual_seed(99), 64)

    def token_ce(data):
        src, src_len, tgt_in, tgt_out, mask = data
        with torch.no_grad():
            logits, _ = model(src, src_len, tgt_in)
        return (sequence_nll(logits, tgt_out, mask) * len(src) / mask.sum()).item()

    model.eval()
    start = token_ce(held_out)
    model.train()
    for _ in range(200):
        src, src_len, tgt_in, tgt_out, mask = reorder_batch(gen)
        logits, _ = model(src, src_len, tgt_in)
        loss = sequence_nll(logits, tgt_out, mask)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 3.0)
        opt.step()
    model.eval()
    end = token_ce(held_out)
    assert start > 2.0 and end < 0.25 * start, (start, end)

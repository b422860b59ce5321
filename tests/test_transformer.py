"""flexatt.transformer: cross-attention against its equations (dense with the penalty at τ = ∞;
masked to the window at a finite τ, scoring only the window), incremental decoding against
teacher forcing, the penalty's gradients in float64."""

from __future__ import annotations

import math

import pytest
import torch

from flexatt.transformer import CrossAttention, TransformerConfig, TransformerSeq2Seq

B, S, T, D, HEADS = 3, 9, 6, 16, 4
LENGTHS = torch.tensor([9, 6, 4])


def _cross(kind: str, **extra) -> CrossAttention:
    torch.manual_seed(0)
    cfg = TransformerConfig(d_model=D, heads=HEADS, cross=kind, dropout=0.0, att_size=8, local_D=2, sigma=1.0,
                            length_ratio=1.5, **extra)
    return CrossAttention(cfg).double().eval()


def _inputs(seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    y = torch.randn(B, T, D, generator=g, dtype=torch.float64)
    enc = torch.randn(B, S, D, generator=g, dtype=torch.float64)
    mask = torch.arange(S).unsqueeze(0) < LENGTHS.unsqueeze(1)
    steps = torch.arange(1, T + 1).unsqueeze(0).expand(B, -1)
    return y, enc, mask, steps


def _reference(att: CrossAttention, y, enc, mask, centre, g, allowed):
    """The equations written out: per head q·k/√d_h − g (s − p)²/(2σ²) over the allowed positions."""
    q = att.q(y).view(B, T, HEADS, -1).transpose(1, 2)
    k, v = (z.view(B, S, HEADS, -1).transpose(1, 2) for z in att.kv(enc).chunk(2, -1))
    logits = q @ k.transpose(-1, -2) / math.sqrt(D // HEADS)
    if g is not None:
        s = torch.arange(1, S + 1, dtype=torch.float64)
        logits = logits - (g.unsqueeze(-1) * (s - centre.unsqueeze(-1)) ** 2 / 2.0).unsqueeze(1)
    a = torch.softmax(logits.masked_fill(~allowed.unsqueeze(1), float("-inf")), -1)
    out = att.out((a @ v).transpose(1, 2).reshape(B, T, D))
    return out, a.mean(1)


def test_flexible_at_tau_inf_is_the_dense_computation_with_the_penalty():
    att = _cross("flexible")
    y, enc, mask, steps = _inputs()
    out, weights, stats = att(y, att.memory(enc), mask, steps)
    centre = LENGTHS.double().unsqueeze(1) * torch.sigmoid(att.v_p(torch.tanh(att.W_p(y)))).squeeze(-1)
    g = torch.sigmoid(att.v_g(torch.tanh(att.W_g(y)))).squeeze(-1)
    ref_out, ref_w = _reference(att, y, enc, mask, centre, g, mask.unsqueeze(1).expand(-1, T, -1))
    torch.testing.assert_close(out, ref_out)
    torch.testing.assert_close(weights, ref_w)
    assert torch.equal(stats["window"], LENGTHS.unsqueeze(1).expand(-1, T))  # every real position
    torch.testing.assert_close(stats["g"], g)


@pytest.mark.parametrize("kind, tau", [("flexible", 0.8), ("flexible", 0.05), ("local_m", INF := math.inf),
                                       ("local_mr", math.inf)])
def test_a_window_is_the_dense_computation_masked_and_scores_only_the_window(kind, tau):
    att = _cross(kind)
    y, enc, mask, steps = _inputs()
    memory = att.memory(enc)
    centre, g = att.centre_and_strength(y, steps, LENGTHS, None)
    lo, hi = att.span(centre, g, tau, LENGTHS)
    s = torch.arange(1, S + 1)
    allowed = (s >= lo.unsqueeze(-1)) & (s <= hi.unsqueeze(-1)) & mask.unsqueeze(1)  # B x T x S
    if kind == "flexible":  # penalty < τ, and the position nearest the centre
        penalty = g.unsqueeze(-1) * (s - centre.unsqueeze(-1)) ** 2 / 2.0
        nearest = torch.minimum(torch.round(centre).clamp_min(1), LENGTHS.unsqueeze(1).double()).unsqueeze(-1)
        assert torch.equal(allowed, ((penalty < tau) | (s == nearest)) & mask.unsqueeze(1))
    else:
        p = steps.double() if kind == "local_m" else steps / 1.5
        near = torch.minimum(torch.round(p).clamp_min(1), LENGTHS.unsqueeze(1).double()).unsqueeze(-1)
        assert torch.equal(allowed, ((s - near).abs() <= 2) & mask.unsqueeze(1))
    # positions outside every window hold NaN keys and values: one product with them and the
    # output would be NaN
    outside = ~allowed.any(1)  # B x S: in no step's window
    poisoned = type(memory)(memory.keys.masked_fill(outside[:, None, :, None], float("nan")),
                            memory.values.masked_fill(outside[:, None, :, None], float("nan")))
    out, weights, stats = att(y, poisoned, mask, steps, tau)
    ref_out, ref_w = _reference(att, y, enc, mask, centre, g, allowed)
    torch.testing.assert_close(out, ref_out)
    torch.testing.assert_close(weights, ref_w)
    assert torch.equal(stats["window"], allowed.sum(-1))  # counted from the positions scored
    assert (stats["window"] < LENGTHS.unsqueeze(1)).any()


def test_the_penalty_path_has_the_gradients_of_its_equations():
    att = _cross("flexible")
    y, enc, mask, steps = _inputs()
    y = y[:1, :3].clone().requires_grad_()
    enc = enc[:1].clone().requires_grad_()

    def f(y, enc):
        out, _, stats = att(y, att.memory(enc), mask[:1], steps[:1, :3])
        return out, stats["g"], stats["position"]

    assert torch.autograd.gradcheck(f, (y, enc))
    windowed = lambda y, enc: att(y, att.memory(enc), mask[:1], steps[:1, :3], 0.5)[0]  # noqa: E731
    assert torch.autograd.gradcheck(windowed, (y, enc))


def _model(kind: str, centre: str = "query") -> TransformerSeq2Seq:
    torch.manual_seed(0)
    cfg = TransformerConfig(d_model=D, heads=HEADS, enc_layers=2, dec_layers=3, ff_size=32, dropout=0.0, cross=kind,
                            centre=centre, att_size=8, local_D=2, sigma=1.0, length_ratio=1.5, max_len=64)
    return TransformerSeq2Seq(cfg, 20, 23).double().eval()


@pytest.mark.parametrize("kind, centre, tau", [("global", "query", math.inf), ("flexible", "query", math.inf),
                                               ("flexible", "query", 0.5), ("flexible", "below", 0.5),
                                               ("local_m", "query", math.inf), ("local_mr", "query", math.inf)])
def test_incremental_decoding_equals_teacher_forcing_step_by_step(kind, centre, tau):
    model = _model(kind, centre)
    g = torch.Generator().manual_seed(3)
    src = torch.randint(3, 20, (B, S), generator=g).masked_fill(~(torch.arange(S) < LENGTHS.unsqueeze(1)), 0)
    tgt = torch.randint(3, 23, (B, T), generator=g)
    logits, aux = model(src, LENGTHS, tgt, tau)
    cache, state = model.encode(src, LENGTHS)
    for t in range(T):
        step_logits, state, weights, stats = model.decode_step(tgt[:, t], state, cache, tau)
        torch.testing.assert_close(step_logits, logits[:, t])
        torch.testing.assert_close(weights, aux["attention"][:, t])
        assert torch.equal(stats.window, aux["window"][:, t])
    per_layer = torch.stack([layer["window"] for layer in aux["layers"]])  # L x B x T, counted in each layer
    assert per_layer.dtype == torch.long and torch.equal(aux["window"], per_layer.double().mean(0))
    assert (aux["g"] is None) == (kind != "flexible")
    if kind != "global" and not (kind == "flexible" and math.isinf(tau)):
        dense = LENGTHS.unsqueeze(1)  # every real position
        assert (aux["window"] <= dense).all() and (aux["window"] < dense).any()


@pytest.mark.parametrize("kind, centre, tau", [("global", "query", math.inf), ("flexible", "query", math.inf),
                                               ("flexible", "query", 0.5), ("flexible", "below", 0.5),
                                               ("local_m", "query", math.inf), ("local_mr", "query", math.inf)])
def test_a_row_map_decodes_as_a_copy_per_row_bit_for_bit(kind, centre, tau):
    """The searches' cache (``by_row``: the sentences' memory and the sentence of each row, composed
    on every reorder) gives the numbers of a copy of every row's memory: windowed layers gather
    from the sentences' memory, the others read the rows' copy."""
    model = _model(kind, centre)
    g = torch.Generator().manual_seed(4)
    src = torch.randint(3, 20, (B, S), generator=g).masked_fill(~(torch.arange(S) < LENGTHS.unsqueeze(1)), 0)
    cache, state = model.encode(src, LENGTHS)
    mapped = cache.by_row()
    first = torch.tensor([2, 2, 0, 1, 1, 1, 0])  # rows of sentences in any order and number
    mapped, copied, state = mapped.index_select(first), cache.index_select(first), state.index_select(first)
    assert torch.equal(mapped.rows, first) and mapped.base is cache  # nothing copied
    tokens = torch.randint(3, 23, (first.numel(), 3), generator=g)
    states = [state, state]
    for t in range(3):
        out = [model.decode_step(tokens[:, t], s, c, tau) for s, c in zip(states, (mapped, copied))]
        (la, sa, wa, xa), (lb, sb, wb, xb) = out
        assert torch.equal(la, lb) and torch.equal(wa, wb) and torch.equal(xa.window, xb.window)
        states = [sa, sb]
    again = torch.tensor([6, 0, 3])  # a later reorder composes the map
    assert torch.equal(mapped.index_select(again).rows, first[again])
    assert torch.equal(model.decode_step(tokens[again, 0], states[0].index_select(again), mapped.index_select(again),
                                         tau)[0],
                       model.decode_step(tokens[again, 0], states[1].index_select(again), copied.index_select(again),
                                         tau)[0])


def test_the_centre_below_is_the_layer_belows_expected_position():
    model = _model("flexible", "below")
    src = torch.randint(3, 20, (B, S)).masked_fill(~(torch.arange(S) < LENGTHS.unsqueeze(1)), 0)
    _, aux = model(src, LENGTHS, torch.randint(3, 23, (B, T)), 0.5)
    layers = aux["layers"]
    for below, layer in zip(layers, layers[1:]):
        lo, hi = layer["span_lo"], layer["span_hi"]
        nearest = torch.minimum(torch.round(below["position"]).clamp_min(1), LENGTHS.unsqueeze(1).double()).long()
        assert ((lo <= nearest) & (nearest <= hi)).all()  # the window holds the centre below


def test_the_embeddings_are_shared_only_where_the_vocabulary_is_joint():
    """One table where the source and target SentencePiece models are one (their recorded digests
    equal), separate ones otherwise or unknown; the RNN keeps its own either way."""
    from flexatt.model import build_model, joint_vocabulary

    assert joint_vocabulary({"src": "a", "tgt": "a"}) and not joint_vocabulary({"src": "a", "tgt": "b"})
    assert not joint_vocabulary(None) and not joint_vocabulary({})
    cfg = {"arch": "transformer", "attention": "flexible", "hidden_size": 16, "heads": 2, "layers": 2, "ff_size": 32}
    shared, apart = build_model(cfg, 50, 50, joint_vocab=True), build_model(cfg, 50, 50)
    assert shared.src_embed is shared.tgt_embed and apart.src_embed is not apart.tgt_embed
    assert sum(p.numel() for p in apart.parameters()) - sum(p.numel() for p in shared.parameters()) == 50 * 16
    rnn = build_model({"attention": "global", "hidden_size": 16, "emb_size": 8}, 50, 50, joint_vocab=True)
    assert rnn.encoder.embed is not rnn.decoder.embed
    shared.load_state_dict(build_model(cfg, 50, 50, joint_vocab=True).state_dict())  # both names, one tensor


def test_a_wrong_setting_is_named():
    with pytest.raises(ValueError, match="cross must be one of"):
        TransformerConfig(cross="local_p")
    with pytest.raises(ValueError, match="multiple of heads"):
        TransformerConfig(d_model=10, heads=4)


def test_beam_search_decodes_it_the_same_at_any_batch_size():
    """The searches of flexatt.decoding decode it through its step API (the eager backend), one
    sentence at a time as in a batch."""
    from flexatt.decoding.search import beam_search

    model = _model("flexible").float()
    src = torch.randint(3, 20, (B, S), generator=torch.Generator().manual_seed(5))
    src = src.masked_fill(~(torch.arange(S) < LENGTHS.unsqueeze(1)), 0)
    batch = beam_search(model, src, LENGTHS, 10, 3, tau=0.5, n_best=2, backend="eager")
    for i in range(B):
        one = beam_search(model, src[i:i + 1, :int(LENGTHS[i])], LENGTHS[i:i + 1], 10, 3, tau=0.5, n_best=2,
                          backend="eager")
        width = one.tokens.size(-1)
        assert torch.equal(one.tokens[0], batch.tokens[i, ..., :width]) and (batch.tokens[i, ..., width:] == 0).all()
        assert int(one.window_sum[0]) == int(batch.window_sum[i])


def test_the_model_config_builds_it_and_the_trainer_trains_it(smoke_tokenized, tmp_path, monkeypatch):
    """``model.arch=transformer`` through the real pipeline pieces: the Lightning trainer learns the
    synthetic task (dev loss falls), the checkpoint rebuilds the model (weights_only) and decodes
    as the trained one; fine-tuning reads its g_t; local_mr gets the corpus's ρ."""
    from conftest import copy_of

    from flexatt.checkpoints import load_model
    from flexatt.config import load_params
    from flexatt.decoding.search import greedy
    from flexatt.trainer import train

    monkeypatch.chdir(copy_of(smoke_tokenized, tmp_path / "run"))
    sizes = ["model.arch=transformer", "model.hidden_size=32", "model.heads=4", "model.layers=2", "model.ff_size=64",
             "model.att_size=16", "train.out_dir=m", "train.metrics_dir=r", "train.label_smoothing=0.1"]
    metrics, objects = train(load_params("params.yaml", sizes), "flexible", epochs=3)
    assert objects["task"].hparams.label_smoothing == 0.1
    curve = [line.split(",") for line in (tmp_path / "run/r/flexible.csv").read_text().splitlines()[1:]]
    assert metrics["epochs"] == 3 and float(curve[-1][4]) < float(curve[0][4])  # dev loss falls
    model = load_model(tmp_path / "run/m/flexible/best.ckpt").eval()
    batch = next(iter(objects["data"].val_dataloader()))
    trained = objects["task"].model.eval()
    # the smoke profile's vocabulary is joint: one embedding table for the source, the target and
    # the output layer, in training and rebuilt from the checkpoint
    assert trained.src_embed is trained.tgt_embed and model.src_embed is model.tgt_embed
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in trained.parameters())
    if metrics["best_epoch"] == 3:
        assert torch.equal(greedy(model, batch.src, batch.src_len, 20, tau=0.5, backend="eager").tokens,
                           greedy(trained, batch.src, batch.src_len, 20, tau=0.5, backend="eager").tokens)
    _, aux = model(batch.src, batch.src_len, batch.tgt_in)
    assert aux["g"].shape == batch.tgt_in.shape  # what fine-tuning's −β·mean g reads
    _, local = train(load_params("params.yaml", [*sizes, "variants.local_m.attention=local_mr"]), "local_m", epochs=1)
    split = local["data"].train
    rho = (float(split.tgt_lengths.sum()) + len(split)) / (float(split.src_lengths.sum()) + len(split))
    assert [float(layer.cross.length_ratio) for layer in local["task"].model.decoder] == pytest.approx([rho] * 2)


@pytest.mark.parametrize("kind, tau", [("global", math.inf), ("flexible", 0.5)])
def test_an_in_place_edit_of_its_cross_attention_is_decoded(kind, tau, monkeypatch):
    """Whatever a researcher edits in the Transformer's cross-attention, decoding follows: its
    ``forward`` edited in place (the output halved) changes what ``decode.backend=auto`` decodes
    in greedy, beam and forced decoding, and that is the edited model's teacher-forced output."""
    from flexatt.decoding import beam_search, forced_decode, greedy

    model = _model(kind)
    src = torch.randint(3, 20, (B, S), generator=torch.Generator().manual_seed(7))
    src = src.masked_fill(~(torch.arange(S) < LENGTHS.unsqueeze(1)), 0)
    tgt = torch.randint(3, 23, (B, T), generator=torch.Generator().manual_seed(8))
    tgt_in = torch.cat([torch.ones(B, 1, dtype=torch.long), tgt[:, :-1]], 1)  # BOS = 1
    before = (greedy(model, src, LENGTHS, 8, tau, backend="auto"),
              beam_search(model, src, LENGTHS, 8, 3, tau=tau, backend="auto"),
              forced_decode(model, src, LENGTHS, tgt_in, tgt, tau, backend="auto"))
    original = CrossAttention.forward

    def edited(self, *args, **kwargs):
        out, weights, stats = original(self, *args, **kwargs)
        return 0.5 * out, weights, stats

    monkeypatch.setattr(CrossAttention, "forward", edited)
    after = (greedy(model, src, LENGTHS, 8, tau, backend="auto"),
             beam_search(model, src, LENGTHS, 8, 3, tau=tau, backend="auto"),
             forced_decode(model, src, LENGTHS, tgt_in, tgt, tau, backend="auto"))
    assert not torch.equal(before[2].log_probs, after[2].log_probs)  # the edit reaches forced decoding
    assert any(not torch.equal(b.tokens, a.tokens) or not torch.equal(b.log_probs, a.log_probs)
               for b, a in zip(before[:2], after[:2]))  # and the searches
    logits, _ = model(src, LENGTHS, tgt_in, tau=tau)  # the edited model's own teacher-forced output
    want = torch.log_softmax(logits, -1).gather(-1, tgt.unsqueeze(-1)).squeeze(-1).sum(1)  # log p(reference)
    torch.testing.assert_close(after[2].log_probs.view(-1).double(), want.double(), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_every_layers_window_is_counted_and_their_mean_is_the_window(search):
    """A Transformer's window per step is the mean over its cross-attention layers of the
    positions each scored; the searches keep each layer's sum too (``layer_window_sum``), whose
    mean over the layers is ``window_sum``; a layer's window lies within the sentence. The RNN
    has none."""
    from flexatt.decoding.search import beam_search, greedy, mean_window

    model = _model("flexible")
    src = torch.randint(3, 20, (B, S), generator=torch.Generator().manual_seed(9))
    src = src.masked_fill(~(torch.arange(S) < LENGTHS.unsqueeze(1)), 0)
    run = (lambda: greedy(model, src, LENGTHS, 8, 0.5, backend="eager")) if search == "greedy" else \
        (lambda: beam_search(model, src, LENGTHS, 8, 3, tau=0.5, backend="eager"))
    result = run()
    layers = result.layer_window_sum
    assert layers.shape == (B, 3)
    torch.testing.assert_close(layers.mean(1), result.window_sum)
    per_step = layers / result.steps.unsqueeze(1)
    assert (per_step >= 1).all() and (per_step <= LENGTHS.unsqueeze(1)).all()
    assert mean_window(result.window_sum, result.steps) == pytest.approx(
        float(sum(mean_window(layers[:, k], result.steps) for k in range(3)) / 3))
    from test_search import sources, tiny_model

    rnn = tiny_model("flexible")
    rnn_src, rnn_len = sources()
    assert greedy(rnn, rnn_src, rnn_len, 5, 0.5, backend="eager").layer_window_sum is None


def test_the_rnn_never_loads_the_transformers_module(root):
    """Every stage's module and an RNN of every variant of the root pipeline built, run forward and
    decoded, in a fresh interpreter: ``flexatt.transformer`` is never imported (the only import of
    it is :func:`flexatt.model.build_model`'s, for ``model.arch: transformer``), so an edit of it
    cannot change what an RNN stage computes, though its file is among every stage's DVC deps."""
    import subprocess
    import sys

    code = """
import importlib, pkgutil, sys, torch
import flexatt.stages
for m in pkgutil.iter_modules(flexatt.stages.__path__):
    importlib.import_module(f"flexatt.stages.{m.name}")
from flexatt.config import load_params
from flexatt.decoding.search import beam_search
from flexatt.model import build_model
params = load_params("params.yaml", [])
src, src_len = torch.randint(3, 50, (2, 7)), torch.tensor([7, 5])
for name, variant in params["variants"].items():
    model = build_model({**params["model"], **variant}, 50, 50, joint_vocab=True).eval()
    with torch.no_grad():
        model(src, src_len, torch.randint(3, 50, (2, 4)))
        beam_search(model, src, src_len, 5, 2, backend="eager")
assert "flexatt.transformer" not in sys.modules, "an RNN loaded flexatt.transformer"
print(len(params["variants"]))
"""
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert int(done.stdout.split()[-1]) >= 6  # global, local_m, local_p, flexible, sact, flexible_sact at least

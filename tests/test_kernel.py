"""Forced decoding on the kernel backend (flexatt.decoding.kernel, csrc/kernel.cpp) against
the eager reference (flexatt.decoding.forced_decode with backend="eager"), and the encoder's unpacked CPU path against the
packed one.

Sizes are chosen so that every vector loop of the kernel has a remainder (H = 20, A = 24, E = 12:
not multiples of 8 or 16 floats), and batches of 1, 3 (the span-sum path of the context's gate
share) and 6 rows (the one-product path, a row with no target step included)."""

from __future__ import annotations

import functools
import math
import os
import shutil
import subprocess
import sys
import warnings

import pytest
import torch
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from conftest import train_to_copy
from flexatt.decoding import kernel
from flexatt.errors import ConfigError
from flexatt.data.subwords import BOS_ID, EOS_ID, PAD_ID
from flexatt.model import build_model
from flexatt.decoding import forced_decode

VOCAB = 17
SIZES = dict(emb_size=12, hidden_size=20, att_size=24, readout_size=14, dropout=0.0)
SRC_LENGTHS = [9, 4, 11, 6, 2, 8]
TGT_LENGTHS = [7, 5, 3, 8, 0, 6]
STEPS = 120  # of copy training

pytestmark = pytest.mark.usefixtures("single_thread")


@pytest.fixture(scope="module")
def kernel_error() -> str | None:
    """Why the kernel cannot be built here (``None``: it is built, once, and cached on disk, so
    that no test times the build)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        built = kernel.extension() is not None
    return None if built else str(kernel._state["error"])


@pytest.fixture(autouse=True)
def needs_the_kernel(request, kernel_error):
    """Every test but those marked ``without_kernel`` is skipped, with the build error as the
    reason, on a machine where the kernel cannot be built (no compiler, no OpenMP, no Python
    headers); decoding there runs eagerly, which the other test modules cover. With
    ``FLEXATT_REQUIRE_KERNEL=1`` (CI, which installs a compiler) a failed build fails them."""
    if kernel_error is not None and request.node.get_closest_marker("without_kernel") is None:
        message = f"the kernel cannot be built on this machine: {kernel_error}"
        if os.environ.get("FLEXATT_REQUIRE_KERNEL", "0") == "1":
            pytest.fail(message)
        pytest.skip(message)


@functools.lru_cache(maxsize=None)
def copy_state() -> dict:
    """A global-attention model trained to copy its source, so that the attention (and with it
    p_t and the vision spans of the flexible models built from it) moves along the source; a
    fresh model's p_t stays near p_0 = 1."""
    torch.manual_seed(0)
    model = build_model({**SIZES, "attention": "global"}, VOCAB, VOCAB, PAD_ID)
    g = torch.Generator().manual_seed(0)

    def batch():
        lengths = torch.randint(3, 12, (32,), generator=g)
        src = torch.full((32, int(lengths.max())), PAD_ID, dtype=torch.long)
        for i, n in enumerate(lengths.tolist()):
            src[i, :n] = torch.randint(4, VOCAB, (n,), generator=g)
            src[i, n - 1] = EOS_ID
        return src, lengths

    return train_to_copy(model, (batch() for _ in range(STEPS)))


def model_of(attention="global", seed=0, **kw):
    """A model of variant ``attention`` with the copy model's parameters where their shapes
    match; the rest (W_p, SACT's, W_g without feedback) as initialised from ``seed``."""
    torch.manual_seed(seed)
    model = build_model({**SIZES, "attention": attention, **kw}, VOCAB, VOCAB, PAD_ID)
    own = model.state_dict()
    state = {k: v for k, v in copy_state().items() if k in own and own[k].shape == v.shape}
    model.load_state_dict(state, strict=False)
    if seed:  # another model: perturb it
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.05 * torch.randn(p.shape, generator=g))
    return model.eval()


def batch_of(rows: int, seed: int = 1):
    """``rows`` pairs: sources of SRC_LENGTHS (EOS last), references of TGT_LENGTHS (EOS last)."""
    g = torch.Generator().manual_seed(seed)
    src_len, tgt_len = torch.tensor(SRC_LENGTHS[:rows]), torch.tensor(TGT_LENGTHS[:rows])
    src = torch.full((rows, int(src_len.max())), PAD_ID, dtype=torch.long)
    tgt_out = torch.full((rows, max(1, int(tgt_len.max()))), PAD_ID, dtype=torch.long)
    for i in range(rows):
        n, m = int(src_len[i]), int(tgt_len[i])
        src[i, :n] = torch.randint(4, VOCAB, (n,), generator=g)
        src[i, n - 1] = EOS_ID
        if m:
            tgt_out[i, :m] = torch.randint(4, VOCAB, (m,), generator=g)
            tgt_out[i, m - 1] = EOS_ID
    tgt_in = torch.cat([torch.full((rows, 1), BOS_ID), tgt_out[:, :-1]], 1).masked_fill(tgt_out == PAD_ID, PAD_ID)
    return src, src_len, tgt_in, tgt_out, tgt_len


def both(model, rows, tau, seed=1):
    src, src_len, tgt_in, tgt_out, tgt_len = batch_of(rows, seed)
    args = (model, src, src_len, tgt_in, tgt_out, tau)
    eager = forced_decode(*args, tgt_len=tgt_len, return_traces=True, backend="eager")
    fast = forced_decode(*args, tgt_len=tgt_len, return_traces=True, backend="kernel")
    return eager, fast


def assert_same(eager, fast):
    torch.testing.assert_close(fast.log_probs, eager.log_probs, atol=2e-5, rtol=1e-5)
    torch.testing.assert_close(fast.attention, eager.attention, atol=2e-6, rtol=1e-5)
    for name in ("window_sum", "steps", "lengths", "tokens"):
        assert torch.equal(getattr(fast, name), getattr(eager, name)), name
    for a, b in zip(eager.traces, fast.traces):
        for name in ("window", "span_lo", "span_hi", "tokens"):
            assert torch.equal(getattr(a, name), getattr(b, name)), name
        torch.testing.assert_close(b.position, a.position, atol=2e-5, rtol=1e-5)
        torch.testing.assert_close(b.attention, a.attention, atol=2e-6, rtol=1e-5)
        assert (a.g is None) == (b.g is None)
        if a.g is not None:
            torch.testing.assert_close(b.g, a.g, atol=1e-6, rtol=1e-5)
        assert b.temperature is None


CASES = [("global", {}, math.inf), ("flexible", {}, math.inf), ("flexible", {}, 0.0), ("flexible", {}, 0.05), ("flexible", {}, 0.3),
         ("flexible", {}, 2.0), ("flexible", {"g_feedback": False}, 0.3), ("flexible", {"sigma": 5.0}, 0.1)]


@pytest.mark.parametrize("rows", [1, 3, 6])
@pytest.mark.parametrize("attention,kw,tau", CASES)
def test_the_kernel_equals_the_eager_reference(attention, kw, tau, rows):
    eager, fast = both(model_of(attention, **kw), rows, tau)
    assert_same(eager, fast)
    if attention == "flexible" and not math.isinf(tau) and rows > 1:  # the windows do restrict
        assert int(fast.window_sum.sum()) < sum(s * t for s, t in zip(SRC_LENGTHS, TGT_LENGTHS))


@pytest.mark.parametrize("rows", [1, 3, 6])
def test_two_threads_give_the_same_result(rows):
    """The kernel splits the attention's rows, the products' panels of columns and the
    encoder's two directions between the threads."""
    model = model_of("flexible", seed=2)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        assert_same(*both(model, rows, 0.3))
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("sigma", [0.5, 1.5, 5.0, 10.0])
def test_the_kernels_vision_span_is_bit_identical_to_the_equation(sigma):
    """The kernel's span (2017 §3.1, float32 in C++) against FlexibleAttention.vision_span, for
    the adversarial cases of test_attention's row test: g_t = 0 and denormal, p on and next to
    half-integers (round half to even), p ± r on an integer (the open interval's edge), p
    outside [1, S], τ = 0."""
    att = model_of("flexible", sigma=sigma).decoder.attention
    gen = torch.Generator().manual_seed(int(sigma * 10))
    n = 4000
    prev = torch.rand(n, generator=gen) * 60 - 5
    prev[:400] = torch.arange(400) * 0.5 - 5
    prev[400:800] = torch.nextafter(prev[:400], torch.tensor(float("inf")))
    g = torch.rand(n, generator=gen)
    g[800:810] = 0.0
    g[810:820] = torch.finfo(torch.float32).tiny / 4
    g[820:830] = 1e-30
    lengths = torch.randint(1, 50, (n,), generator=gen)
    ext = kernel.extension(required=True)
    for tau in (0.0, 1e-6, 0.025, 0.1, 0.8, 3.547, 50.0):
        radius = att.span_radius(g[1000:2000], tau)
        prev[1000:2000] = torch.round(torch.rand(1000, generator=gen) * 40) + radius
        lo, hi = att.vision_span(prev, g, tau, lengths)
        k_lo, k_hi = ext.vision_spans(prev, g, sigma, tau, lengths)
        bad = ((lo != k_lo) | (hi != k_hi)).nonzero().flatten().tolist()
        assert not bad, [(float(prev[i]), float(g[i]), tau, int(lengths[i])) for i in bad[:5]]


@pytest.mark.parametrize("tau", [math.inf, 0.3])
def test_the_window_is_the_span_and_only_it_is_weighted(tau):
    _, fast = both(model_of("flexible", seed=3), 6, tau)
    for i, tr in enumerate(fast.traces):
        src_len = SRC_LENGTHS[i]
        assert torch.equal(tr.window, tr.span_hi - tr.span_lo + 1)
        if math.isinf(tau):
            assert tr.window.tolist() == [src_len] * len(tr)
        positions = torch.arange(1, src_len + 1)
        inside = (positions >= tr.span_lo.unsqueeze(1)) & (positions <= tr.span_hi.unsqueeze(1))
        assert bool((tr.attention[~inside] == 0).all())
        torch.testing.assert_close(tr.attention.sum(1), torch.ones(len(tr)))
        torch.testing.assert_close(tr.position, (tr.attention * positions).sum(1))


def test_parameter_updates_reach_the_kernel():
    model = model_of("flexible", seed=4)
    both(model, 3, 0.5)  # arranges and caches the weights
    with torch.no_grad():
        model.decoder.attention.W_g.weight.mul_(-2.0)  # in place: the same storage, a new version
        model.decoder.W_s.bias.add_(0.5)
        model.encoder.rnn.weight_hh_l0_reverse.mul_(0.5)
    assert_same(*both(model, 3, 0.5))
    model.load_state_dict(model_of("flexible", seed=5).state_dict())
    assert_same(*both(model, 3, 0.5))


@pytest.mark.parametrize("attention,kw", [("local_m", {}), ("local_p", {}), ("sact", {}),
                                          ("flexible_sact", {}), ("global", {"score": "general"}),
                                          ("global", {"temperature": 2.0})])
def test_other_variants_fall_back_to_the_eager_path(attention, kw):
    model = model_of(attention, **kw)
    src, src_len, tgt_in, tgt_out, tgt_len = batch_of(3)
    auto = forced_decode(model, src, src_len, tgt_in, tgt_out, 0.5, tgt_len=tgt_len)
    eager = forced_decode(model, src, src_len, tgt_in, tgt_out, 0.5, tgt_len=tgt_len, backend="eager")
    assert torch.equal(auto.log_probs, eager.log_probs) and torch.equal(auto.window_sum, eager.window_sum)
    assert auto.backend != "kernel"
    with pytest.raises(ConfigError, match="decode.backend: kernel does not cover this model"):
        forced_decode(model, src, src_len, tgt_in, tgt_out, 0.5, tgt_len=tgt_len, backend="kernel")


def test_training_mode_and_autocast_are_refused_by_the_kernel():
    model = model_of("flexible")
    src, src_len, tgt_in, tgt_out, tgt_len = batch_of(3)
    model.train()
    with pytest.raises(ConfigError, match="training mode"):
        forced_decode(model, src, src_len, tgt_in, tgt_out, 0.5, tgt_len=tgt_len, backend="kernel")
    model.eval()
    with torch.autocast("cpu", dtype=torch.bfloat16), pytest.raises(ConfigError, match="autocast"):
        forced_decode(model, src, src_len, tgt_in, tgt_out, 0.5, tgt_len=tgt_len, backend="kernel")


def test_the_eager_backend_turns_the_kernel_off(monkeypatch):
    model = model_of("flexible")
    src, src_len, tgt_in, tgt_out, tgt_len = batch_of(3)

    def refuse(*args, **kwargs):
        raise AssertionError("the kernel ran")

    monkeypatch.setattr(kernel, "forced_decode", refuse)
    result = forced_decode(model, src, src_len, tgt_in, tgt_out, 0.5, tgt_len=tgt_len, backend="eager")
    assert result.steps.tolist() == TGT_LENGTHS[:3]
    with pytest.raises(AssertionError, match="the kernel ran"):
        forced_decode(model, src, src_len, tgt_in, tgt_out, 0.5, tgt_len=tgt_len)


def test_negative_tau_is_refused():
    model = model_of("flexible")
    src, src_len, tgt_in, tgt_out, tgt_len = batch_of(1)
    with pytest.raises(ValueError, match="tau must be >= 0"):
        forced_decode(model, src, src_len, tgt_in, tgt_out, -1.0, tgt_len=tgt_len, backend="kernel")


def test_the_phase_timer_times_every_step():
    model = model_of("flexible")
    src, src_len, tgt_in, tgt_out, tgt_len = batch_of(3)
    with kernel.PhaseTimer() as timer:
        forced_decode(model, src, src_len, tgt_in, tgt_out, 0.5, tgt_len=tgt_len, backend="kernel")
    assert timer.calls == 1 and timer.steps == sum(TGT_LENGTHS[:3])
    assert timer.attention_s > 0 and timer.lstm_s > 0
    forced_decode(model, src, src_len, tgt_in, tgt_out, 0.5, tgt_len=tgt_len, backend="kernel")
    assert timer.calls == 1  # outside the block nothing is timed


@pytest.mark.parametrize("rows", [1, 3, 6])
def test_the_kernels_encoder_equals_the_model_encoder(rows):
    model = model_of("flexible", seed=6)
    src, src_len, *_ = batch_of(rows)
    with torch.no_grad():
        cache, state = model.encode(src, src_len)
        f_cache, f_state = kernel._encode(model, kernel._weights(model), src, src_len)
    for a, b in zip(cache, f_cache):
        torch.testing.assert_close(b, a, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(f_state.hidden, state.hidden, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(f_state.attention.context, state.attention.context, atol=1e-6, rtol=1e-5)


def test_the_kernel_refuses_bad_lengths_and_tokens():
    ext = kernel.extension(required=True)
    table = torch.zeros(5, 8 * 4)
    w = ext.pack(torch.zeros(4, 16))
    src = torch.tensor([[1, 2, 4], [3, 1, 0]])
    with pytest.raises(RuntimeError, match=r"src_len\[1\] = 0 is outside \[1, 3\]"):
        ext.bilstm(src, torch.tensor([3, 0]), table, w, w)
    with pytest.raises(RuntimeError, match=r"src\[0, 2\] = 5 is outside the table's \[0, 5\)"):
        ext.bilstm(src + 1, torch.tensor([3, 2]), table, w, w)
    with pytest.raises(RuntimeError, match="table must be V x 8H"):
        ext.bilstm(src, torch.tensor([3, 2]), torch.zeros(5, 7), w, w)
    with pytest.raises(RuntimeError, match="w_hh_fwd must have 3 dimensions"):
        ext.bilstm(src, torch.tensor([3, 2]), table, torch.zeros(4, 16), w)
    with pytest.raises(RuntimeError, match="w_hh_bwd must be a K x 16 matrix packed by pack"):
        ext.bilstm(src, torch.tensor([3, 2]), table, w, ext.pack(torch.zeros(4, 200)))


def test_the_kernel_refuses_fed_back_tokens_outside_the_table():
    model = model_of("flexible")
    src, src_len, tgt_in, tgt_out, tgt_len = batch_of(6)
    tgt_in[3, 2] = VOCAB
    with pytest.raises(RuntimeError, match=rf"tokens\[\d, 2\] = {VOCAB} is outside the table's \[0, {VOCAB}\)"):
        forced_decode(model, src, src_len, tgt_in, tgt_out, 0.5, tgt_len=tgt_len, backend="kernel")


@pytest.mark.parametrize("m", [1, 5, 6, 7, 13, 97, 200])
@pytest.mark.parametrize("k,n", [(1, 1), (7, 15), (33, 64), (20, 65), (24, 130)])
@pytest.mark.parametrize("init", ["none", "bias", "rows"])
def test_the_packed_product_equals_a_matrix_product(m, k, n, init):
    """``linear`` (the kernel's products: panels of columns, blocks of rows, remainders of both)
    against torch, and each row's result independent of the other rows (bit for bit)."""
    ext = kernel.extension(required=True)
    g = torch.Generator().manual_seed(m * 1000 + k * 10 + n)
    x, w = torch.randn(m, k, generator=g), torch.randn(k, n, generator=g)
    wide = torch.randn(m, n + 3, generator=g)
    init_t = {"none": torch.empty(0), "bias": wide[0, :n], "rows": wide[:, 2:n + 2]}[init]  # rows: a strided view
    out = ext.linear(x, ext.pack(w), n, init_t)
    ref = x.double() @ w.double() + (0 if init == "none" else init_t.double())
    torch.testing.assert_close(out.double(), ref, atol=1e-5 * (k + 1), rtol=1e-5)
    part = slice(m // 2, m)  # the same rows in a batch of their own
    alone = ext.linear(x[part].contiguous(), ext.pack(w), n, init_t if init != "rows" else init_t[part])
    assert torch.equal(alone, out[part])


@pytest.mark.parametrize("n,v", [(1, 1), (5, 15), (40, 64), (33, 4001)])
def test_gold_log_probs_equal_the_log_softmax(n, v):
    ext = kernel.extension(required=True)
    g = torch.Generator().manual_seed(n + v)
    logits = 8 * torch.randn(n, v, generator=g)
    gold = torch.randint(0, v, (n,), generator=g)
    ref = torch.log_softmax(logits.double(), -1).gather(1, gold.unsqueeze(1)).squeeze(1)
    torch.testing.assert_close(ext.gold_log_probs(logits, gold).double(), ref, atol=2e-5, rtol=1e-6)
    with pytest.raises(RuntimeError, match=rf"gold\[0\] = {v} is outside \[0, {v}\)"):
        ext.gold_log_probs(logits, torch.full((n,), v))


def test_the_packed_product_refuses_mismatched_shapes():
    ext = kernel.extension(required=True)
    packed = ext.pack(torch.zeros(4, 10))
    with pytest.raises(RuntimeError, match="x has 3 columns, the packed matrix 4 rows"):
        ext.linear(torch.zeros(2, 3), packed, 10, torch.empty(0))
    with pytest.raises(RuntimeError, match="must be a K x 200 matrix packed by pack"):
        ext.linear(torch.zeros(2, 4), packed, 200, torch.empty(0))
    with pytest.raises(RuntimeError, match=r"init must be n \(10\) or M x n \(2 x 10\)"):
        ext.linear(torch.zeros(2, 4), packed, 10, torch.zeros(3, 10))


def test_the_batch_order_does_not_change_a_sentence():
    """The kernel runs the rows longest first; any order of the batch gives each sentence the
    same result, bit for bit."""
    model = model_of("flexible", seed=3)
    src, src_len, tgt_in, tgt_out, tgt_len = batch_of(6)
    perm = torch.tensor([4, 1, 5, 0, 3, 2])
    a = forced_decode(model, src, src_len, tgt_in, tgt_out, 0.3, tgt_len=tgt_len, backend="kernel")
    b = forced_decode(model, src[perm], src_len[perm], tgt_in[perm], tgt_out[perm], 0.3, tgt_len=tgt_len[perm],
                      backend="kernel")
    assert torch.equal(b.log_probs, a.log_probs[perm])
    assert torch.equal(b.window_sum, a.window_sum[perm])
    width = min(a.attention.size(-1), b.attention.size(-1))
    assert torch.equal(b.attention[..., :width], a.attention[perm][..., :width])


@pytest.mark.without_kernel
def test_the_unpacked_encoder_equals_the_packed_one_with_gradients():
    """RecurrentEncoder on a CPU runs the directions apart over the padded batch
    (``_directions_apart``); torch.nn.LSTM over packed sequences is the reference."""
    torch.manual_seed(0)
    model = build_model({**SIZES, "attention": "global"}, VOCAB, VOCAB, PAD_ID).train()
    enc = model.encoder
    src, src_len, *_ = batch_of(6)
    out = enc(src, src_len).states
    packed = pack_padded_sequence(enc.embed(src), src_len, batch_first=True, enforce_sorted=False)
    ref, _ = pad_packed_sequence(enc.rnn(packed)[0], batch_first=True, total_length=src.size(1))
    torch.testing.assert_close(out, ref, atol=1e-6, rtol=1e-5)
    weights = torch.randn_like(out)
    grads = torch.autograd.grad((out * weights).sum(), list(enc.rnn.parameters()))
    ref_grads = torch.autograd.grad((ref * weights).sum(), list(enc.rnn.parameters()))
    for g, r in zip(grads, ref_grads):
        torch.testing.assert_close(g, r, atol=1e-5, rtol=1e-4)
    pad = torch.arange(src.size(1)).unsqueeze(0) >= src_len.unsqueeze(1)
    assert bool((out[pad] == 0).all())


@pytest.mark.without_kernel
def test_an_unbuildable_extension_falls_back_with_a_warning(monkeypatch, tmp_path):
    saved = dict(kernel._state)
    monkeypatch.setattr(kernel, "SOURCE", tmp_path / "missing.cpp")
    kernel._state.clear()
    try:
        with pytest.warns(RuntimeWarning, match="could not be built"):
            assert kernel.extension() is None
        with pytest.raises(RuntimeError, match="could not be built"):
            kernel.extension(required=True)
        model = model_of("flexible")
        src, src_len, tgt_in, tgt_out, tgt_len = batch_of(3)
        result = forced_decode(model, src, src_len, tgt_in, tgt_out, 0.5, tgt_len=tgt_len)
        assert result.steps.tolist() == TGT_LENGTHS[:3]
    finally:
        kernel._state.clear()
        kernel._state.update(saved)
    assert math.isfinite(float(result.log_probs.sum()))


def test_a_lock_left_by_a_killed_build_does_not_block_the_next_one(tmp_path):
    """torch's ``load`` waits, with no time limit, while its ``lock`` file exists; a build killed
    half-way leaves that file behind. The next process removes it and loads the extension."""
    cache = tmp_path / "ext"
    built = kernel.build_directory()
    shutil.copytree(built, cache / built.name)  # copy2 keeps the times: ninja has nothing to do
    (cache / built.name / "lock").touch()
    env = dict(os.environ, FLEXATT_EXT_DIR=str(cache))
    code = "from flexatt.decoding import kernel; print(kernel.extension(required=True).__name__)"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith("flexatt_kernel_")
    assert "left by a build that was interrupted" in done.stderr
    assert not (cache / built.name / "lock").exists()

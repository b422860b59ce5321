"""The decoding contract: every backend decodes every model it claims as the eager backend does,
whatever the batch.

:func:`flexatt.decoding.backends.select_backend` may decode a model with any backend that covers
it (``kernel``: the compiled step), and the pipeline reports BLEU and windows from whichever ran.
The eager backend (the model's own modules) is the reference, so the kernel is correct only if it
gives the reference's results. This suite holds each backend to that, case by case: every registered attention
variant (:func:`flexatt.attention.attention_types`, the built-ins and ``flexatt.variants``) x
every backend that claims it (:func:`flexatt.decoding.backends.unsupported` is ``None``; the
others get no case) x greedy search, beam search (k = 5, n_best = 3) and forced decoding x
flexible attention's threshold tau (inf, 0.3, 0.8, 2.0 for the flexible variants):

1. *The eager search.* The same hypotheses (n-best lists included), windows (``window_sum``)
   and steps, scores and log-probabilities within float32 rounding. The kernel computes with its
   own products and exponentials, so a hypothesis may differ only where two candidates tie
   within that rounding (the other hypothesis' score within ATOL of the eager one, at most one
   sentence per batch). Forced decoding: the same log-probabilities, windows and steps,
   attention within rounding.
2. *The batch does not matter.* 150 random sentences of 1 to 25 tokens (padded to the longest of
   the batch) decoded in one batch of 150, in batches of 7 and (the first 8) one at a time give
   every sentence the same tokens, windows and steps — for every backend, eager included (a
   search whose output depends on its batch, through padding, finished sentences leaving, or
   beam rows of other sentences, is a classic bug that agreement on one batch does not catch).
   Scores are compared within rounding, for the kernel too: its own products are per row, but
   h_0 = tanh(W_init m + b_init) is the model's nn.Linear (a BLAS product whose rounding depends
   on the number of rows), and forced decoding of up to ``kernel.SMALL_BATCH`` sentences sums
   the context's share of the LSTM gates over the span instead (flexatt.decoding.kernel).

Plus, from the former tests/test_compiled_search.py: a larger random model (300 words, sizes
that leave a remainder in every vector loop, a padded batch, one and two threads) for every
backend, a backend's step on any row layout against the model's step, and the kernel's beam
candidates against log_softmax + topk.

The models are tiny random ones (their output layer scaled up, so that outputs are peaked and
near-ties rare), seeded. Kernel cases are skipped, with the build error as the reason, where the
kernel cannot be built (failed with ``FLEXATT_REQUIRE_KERNEL=1``); the claims themselves are
asserted regardless (:func:`test_the_backends_claim_what_they_promise`), so the suite cannot
silently test nothing.
"""

from __future__ import annotations

import functools
import math
import os

import pytest
import torch
from test_kernel import kernel_error  # noqa: F401  (fixture)

from flexatt.attention import AttentionStats, FlexibleAttention, RowMap, attention_types
from flexatt.data.subwords import BOS_ID, EOS_ID, PAD_ID
from flexatt.decoding import beam_search, forced_decode, greedy, kernel
from flexatt.decoding.backends import STEPPERS, select_backend, unsupported
from flexatt.model import build_model

pytestmark = pytest.mark.usefixtures("single_thread")

ATOL, RTOL = 2e-5, 1e-5  # float32 rounding of sums of a few hundred terms
VOCAB = 40
SIZES = {"emb_size": 12, "hidden_size": 16, "att_size": 16, "readout_size": 12, "dropout": 0.0}
SEED = 11
FAST = ("kernel",)  # the backends held to the eager one
TAUS = (math.inf, 0.3, 0.8, 2.0)  # flexible variants; the others: inf
SEARCHES = ("greedy", "beam", "forced")
BEAM, N_BEST = 5, 3
N_SENTENCES, CHUNK, ONE_AT_A_TIME = 150, 7, 8
#: what each backend must claim at least (the suite's cases are generated from the claims)
MUST_CLAIM = {"kernel": {"global", "flexible"}}


def require(backend: str, error) -> None:
    """Skip (``FLEXATT_REQUIRE_KERNEL=1``: fail) a kernel case where the kernel cannot be built."""
    if backend == "kernel" and error is not None:
        message = f"the kernel cannot be built on this machine: {error}"
        if os.environ.get("FLEXATT_REQUIRE_KERNEL", "0") == "1":
            pytest.fail(message)
        pytest.skip(message)


# --------------------------------------------------------------------------------------
# Models, sources, references
# --------------------------------------------------------------------------------------
def random_model(attention: str, vocab: int = VOCAB, seed: int = SEED, **sizes):
    """A seeded random model, its output layer scaled up: peaked outputs, so that the searches
    are not a sea of near-ties for rounding to flip."""
    torch.manual_seed(seed)
    model = build_model({**(sizes or SIZES), "attention": attention}, vocab, vocab, PAD_ID).eval()
    with torch.no_grad():
        model.decoder.W_s.weight.mul_(8.0)
    return model


@functools.cache
def model_of(attention: str):
    """The variant's model of the contract cases, its EOS logit raised (:func:`end_some`)."""
    return end_some(random_model(attention))


@torch.no_grad()
def end_some(model):
    """Raise the EOS bias until greedy search ends between a fifth and four fifths of the
    sentences with EOS (the one closest to half, of a few raises): a random model mostly repeats
    one token up to the step limit, and the searches' bookkeeping of hypotheses and sentences
    that end at different steps is what the batch must not change."""
    src = padded([s for s, _ in corpus()[:40]])
    src_len = torch.tensor([len(s) for s, _ in corpus()[:40]])
    bias, base = model.decoder.W_s.bias, float(model.decoder.W_s.bias[EOS_ID])
    best = None
    for raise_by in [0.5 * i for i in range(13)]:
        bias[EOS_ID] = base + raise_by
        out = greedy(model, src, src_len, src_len + 3, backend="eager")
        ended = float((out.lengths < out.steps).float().mean())
        if best is None or abs(ended - 0.5) < abs(best[0] - 0.5):
            best = (ended, raise_by)
        if 0.2 <= ended <= 0.8:
            break
    bias[EOS_ID] = base + best[1]
    return model


def claims(attention: str, backend: str) -> bool:
    """Whether ``backend`` covers the variant (without building the kernel: a kernel that cannot
    be built skips its cases instead of dropping them)."""
    return STEPPERS[backend].unsupported(model_of(attention)) is None


def taus(attention: str) -> tuple:
    return TAUS if isinstance(model_of(attention).decoder.attention, FlexibleAttention) else (math.inf,)


def padded(rows: list[list[int]]) -> torch.Tensor:
    out = torch.full((len(rows), max(map(len, rows))), PAD_ID, dtype=torch.long)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row, dtype=torch.long)
    return out


@functools.cache
def corpus(n: int = N_SENTENCES, seed: int = 5, vocab: int = VOCAB):
    """``n`` random sources of 1 to 25 tokens (EOS last) and a random reference of 1 to 20
    tokens (EOS last) per source, as token lists."""
    g = torch.Generator().manual_seed(seed)

    def sentence(max_len):
        length = int(torch.randint(1, max_len + 1, (1,), generator=g))
        return torch.randint(4, vocab, (length - 1,), generator=g).tolist() + [EOS_ID]

    return tuple((sentence(25), sentence(20)) for _ in range(n))


def sources(lengths: list[int], seed: int, vocab: int):
    """A padded batch of random sources of the given lengths (EOS last)."""
    g = torch.Generator().manual_seed(seed)
    src = padded([torch.randint(4, vocab, (n - 1,), generator=g).tolist() + [EOS_ID] for n in lengths])
    return src, torch.tensor(lengths)


# --------------------------------------------------------------------------------------
# Decoding, per sentence
# --------------------------------------------------------------------------------------
@functools.cache
def stepper_of(attention: str, backend: str):
    return select_backend(model_of(attention), backend)


def decode_batch(attention: str, backend: str, search: str, tau, index: list[int]) -> list[dict]:
    """Decode sentences ``index`` of :func:`corpus` in one batch: one record per sentence."""
    model, stepper = model_of(attention), stepper_of(attention, backend)
    pairs = [corpus()[i] for i in index]
    src = padded([s for s, _ in pairs])
    src_len = torch.tensor([len(s) for s, _ in pairs])
    if search == "forced":
        refs = [r for _, r in pairs]
        tgt_out = padded(refs)
        tgt_in = padded([[BOS_ID] + r[:-1] for r in refs])
        out = forced_decode(model, src, src_len, tgt_in, tgt_out, tau, backend=stepper)
        return [{"hyps": [r], "window": int(out.window_sum[i]), "steps": int(out.steps[i]),
                 "scores": out.log_probs[i].clone(), "log_probs": out.log_probs[i].clone(),
                 "attention": out.attention[i, : len(r), : len(pairs[i][0])].clone()}
                for i, r in enumerate(refs)]
    limit = src_len + 3
    if search == "greedy":
        out = greedy(model, src, src_len, limit, tau, backend=stepper)
        best = [[row[:n]] for row, n in zip(out.tokens.tolist(), out.lengths.tolist())]
    else:
        out = beam_search(model, src, src_len, limit, BEAM, tau=tau, n_best=N_BEST, backend=stepper)
        best = [[row[:n] for row, n in zip(rows, lens)]
                for rows, lens in zip(out.nbest.tolist(), out.nbest_lengths.tolist())]
    return [{"hyps": best[i], "window": int(out.window_sum[i]), "steps": int(out.steps[i]),
             "scores": out.scores[i].clone(), "log_probs": out.log_probs[i].clone()}
            for i in range(len(index))]


BATCHINGS = {
    "150": [list(range(N_SENTENCES))],
    "7": [list(range(i, min(i + CHUNK, N_SENTENCES))) for i in range(0, N_SENTENCES, CHUNK)],
    "1": [[i] for i in range(ONE_AT_A_TIME)],
}


@functools.cache
def decoded(attention: str, backend: str, search: str, tau, batching: str) -> tuple[list[dict], ...]:
    """The records of :func:`decode_batch`, one list per batch of ``BATCHINGS[batching]``."""
    return tuple(decode_batch(attention, backend, search, tau, index) for index in BATCHINGS[batching])


# --------------------------------------------------------------------------------------
# Comparisons
# --------------------------------------------------------------------------------------
def close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.allclose(a, b, atol=ATOL, rtol=RTOL)


def same_finite_close(a: torch.Tensor, b: torch.Tensor) -> bool:
    """-inf (fewer than n_best finished) at the same ranks, the rest within rounding."""
    finite = torch.isfinite(a)
    return torch.equal(torch.isfinite(b), finite) and close(a[finite], b[finite])


def assert_agrees(reference: list[dict], other: list[dict], what: str) -> None:
    """One batch: the same hypotheses (a tie excepted, at most one sentence: a differing
    hypothesis scores within ATOL of the reference's at its rank), the same windows and steps
    where the hypotheses are the same, scores and log-probabilities within rounding, forced
    decoding's attention likewise."""
    swapped = []
    for i, (ref, out) in enumerate(zip(reference, other)):
        if out["hyps"] != ref["hyps"]:
            for r, o, rs, os_ in zip(ref["hyps"], out["hyps"], ref["scores"].tolist(), out["scores"].tolist()):
                assert r == o or abs(rs - os_) <= ATOL, f"{what}: sentence {i}: not a tie: {o} {os_} vs {r} {rs}"
            swapped.append(i)
            continue
        assert (out["window"], out["steps"]) == (ref["window"], ref["steps"]), f"{what}: sentence {i}"
        for name in ("scores", "log_probs", "attention"):
            if name in ref:
                assert same_finite_close(out[name], ref[name]), f"{what}: sentence {i}: {name} {out[name]} vs {ref[name]}"
    for i in swapped:  # a tie: the scores at each rank still agree within rounding
        assert same_finite_close(other[i]["scores"], reference[i]["scores"]), f"{what}: sentence {i}"
    assert len(swapped) <= 1, f"{what}: sentences {swapped} differ: not a tie but a different search"


def by_sentence(batches: tuple[list[dict], ...]) -> list[dict]:
    return [record for batch in batches for record in batch]


# --------------------------------------------------------------------------------------
# The cases
# --------------------------------------------------------------------------------------
def cases(backends: tuple[str, ...]) -> list:
    return [pytest.param(name, backend, search, tau, id=f"{name}-{backend}-{search}-tau{tau}")
            for name in attention_types() for backend in backends if claims(name, backend)
            for search in SEARCHES for tau in taus(name)]


def test_the_backends_claim_what_they_promise():
    """The cases below are generated from the backends' claims: an empty claim would test
    nothing, so the promised coverage is asserted here."""
    for backend, names in MUST_CLAIM.items():
        for name in sorted(names):
            assert STEPPERS[backend].unsupported(model_of(name)) is None, \
                f"{backend} does not claim {name}: {STEPPERS[backend].unsupported(model_of(name))}"
    for name in attention_types():
        assert unsupported(model_of(name), "eager") is None


@pytest.mark.parametrize("attention,backend,search,tau", cases(FAST))
def test_a_backend_decodes_as_the_eager_backend_whatever_the_batch(attention, backend, search, tau,
                                                                   kernel_error):  # noqa: F811
    """Contract 1 on the batch of 150 and on each batch of 7; contract 2 for the backend."""
    require(backend, kernel_error)
    for batching in ("150", "7"):
        reference = decoded(attention, "eager", search, tau, batching)
        for j, (ref, out) in enumerate(zip(reference, decoded(attention, backend, search, tau, batching))):
            assert_agrees(ref, out, f"{backend} vs eager, batch {j} of {batching}")
    assert_batch_invariant(attention, backend, search, tau)


@pytest.mark.parametrize("attention,backend,search,tau", cases(("eager",)))
def test_the_eager_backend_decodes_the_same_whatever_the_batch(attention, backend, search, tau):
    """Contract 2 for the reference itself (every variant)."""
    assert_batch_invariant(attention, backend, search, tau)


def assert_batch_invariant(attention, backend, search, tau) -> None:
    """Per sentence: the same tokens (n-best lists), windows and steps in one batch of 150, in
    batches of 7 and one at a time; scores within rounding (the kernel: bit for bit, but for
    forced decoding one sentence at a time, see the module doc)."""
    whole = by_sentence(decoded(attention, backend, search, tau, "150"))
    for batching in ("7", "1"):
        for i, (a, b) in enumerate(zip(whole, by_sentence(decoded(attention, backend, search, tau, batching)))):
            what = f"{backend}: sentence {i} in batches of {batching} vs one batch of 150"
            assert b["hyps"] == a["hyps"], what
            assert (b["window"], b["steps"]) == (a["window"], a["steps"]), what
            # within rounding, not bit for bit, for every backend, the kernel included: h_0 =
            # tanh(W_init m + b_init) is the model's own nn.Linear (Encoder.output, which the
            # kernel calls too), a BLAS product whose rounding depends on the number of rows
            # (~1e-8 between 1 and 150 rows), though the kernel's own encoder LSTM and mean
            # are bit-identical per row; and forced decoding of up to kernel.SMALL_BATCH
            # sentences takes another sum by design (module doc)
            for name in ("scores", "log_probs", "attention"):
                if name in a:
                    assert same_finite_close(b[name], a[name]), f"{what}: {name} {b[name]} vs {a[name]}"


# --------------------------------------------------------------------------------------
# A larger model with padding (from tests/test_compiled_search.py)
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("attention,tau", [("global", math.inf), ("flexible", 0.5), ("flexible", math.inf)])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("backend", FAST)
def test_a_larger_model_with_padding(backend, attention, tau, threads, kernel_error):  # noqa: F811
    """A random model of 300 words with sizes that are not multiples of a vector (every vector
    loop has a remainder), a padded batch of 12 sentences, beam 5, on one and two threads."""
    require(backend, kernel_error)
    torch.set_num_threads(threads)  # the single_thread fixture restores the count
    model = random_model(attention, vocab=300, seed=3, emb_size=20, hidden_size=36, att_size=40,
                         readout_size=28, dropout=0.0)
    src, src_len = sources([14, 3, 9, 20, 11, 6, 17, 8, 2, 13, 5, 19], seed=7, vocab=300)
    limit = src_len + 3
    records = []
    for name in ("eager", backend):
        out = beam_search(model, src, src_len, limit, BEAM, tau=tau, n_best=N_BEST, backend=name)
        assert out.backend == name
        records.append([{"hyps": [row[:n] for row, n in zip(rows, lens)], "window": int(out.window_sum[i]),
                         "steps": int(out.steps[i]), "scores": out.scores[i], "log_probs": out.log_probs[i]}
                        for i, (rows, lens) in enumerate(zip(out.nbest.tolist(), out.nbest_lengths.tolist()))])
    assert_agrees(*records, what=f"{backend} vs eager")


# --------------------------------------------------------------------------------------
# One step on any row layout; the kernel's candidates (from tests/test_compiled_search.py)
# --------------------------------------------------------------------------------------
STEP_CASES = [(name, backend, tau) for backend in FAST for name in attention_types() if claims(name, backend)
              for tau in ((math.inf, 0.6) if isinstance(model_of(name).decoder.attention, FlexibleAttention) else (math.inf,))]


@pytest.mark.parametrize("attention,backend,tau", [pytest.param(*c, id="-".join(map(str, c))) for c in STEP_CASES])
@pytest.mark.parametrize("rows", [[0, 0, 1, 2, 2, 2], [1, 1, 0, 0], [2], [0, 1, 2]])
def test_one_step_on_any_row_layout_agrees_with_the_models_step(attention, backend, tau, rows,
                                                                kernel_error):  # noqa: F811
    """The backend's decode_step on any row -> sentence map, reordered again after the first
    step, against the model's step on the gathered cache: logits, weights, state and stats."""
    require(backend, kernel_error)
    model = model_of(attention)
    stepper = select_backend(model, backend)
    src, src_len = sources([7, 3, 9], seed=8, vocab=VOCAB)
    same = close
    with torch.no_grad():
        cache, state = stepper.encode(src, src_len)
        ref_cache, ref_state = model.encode(src, src_len)
        index = torch.tensor(rows)
        cache, state = cache.index_select(index), state.index_select(index)
        ref_cache, ref_state = ref_cache.index_select(index), ref_state.index_select(index)
        prev = torch.tensor([BOS_ID] + [5 + i for i in range(len(rows) - 1)])
        for step in range(3):  # a few steps, so that p_{t-1} moves
            out = stepper.decode_step(prev, state, cache, tau)
            ref = model.decode_step(prev, ref_state, ref_cache, tau)
            assert same(out[0], ref[0]) and same(out[2], ref[2])  # logits, weights
            for name in AttentionStats._fields:
                a, b = getattr(out[3], name), getattr(ref[3], name)
                assert (a is None) == (b is None), name
                if a is not None:
                    exact = name in ("window", "span_lo", "span_hi")
                    assert (torch.equal if exact else same)(a, b), name
            for a, b in [(out[1].hidden, ref[1].hidden), (out[1].cell, ref[1].cell),
                         (out[1].attention.position, ref[1].attention.position),
                         (out[1].attention.context, ref[1].attention.context)]:
                assert same(a, b)
            assert torch.equal(out[1].attention.step, ref[1].attention.step)
            state, ref_state, prev = out[1], ref[1], ref[0].argmax(-1)
            if step == 0:  # reorder: the composed map against the gathered cache
                perm = torch.arange(len(rows)).flip(0)
                cache, state, prev = cache.index_select(perm), state.index_select(perm), prev[perm]
                ref_cache, ref_state = ref_cache.index_select(perm), ref_state.index_select(perm)


def torch_candidates(logits, score, counts, k, n):
    """Beam search's selection written out: log_softmax + score on an n_act x k x V grid (-inf
    at missing rows), top n."""
    n_act, vocab = counts.numel(), logits.size(1)
    grid = logits.new_full((n_act, k, vocab), -math.inf)
    starts = counts.cumsum(0) - counts
    cand = torch.log_softmax(logits, -1) + score.unsqueeze(1)
    for j in range(n_act):
        grid[j, : int(counts[j])] = cand[int(starts[j]): int(starts[j] + counts[j])]
    return grid.view(n_act, -1).topk(n, dim=1)


@pytest.mark.parametrize("backend", FAST)
@pytest.mark.parametrize("vocab,counts,k", [(4000, [5, 5, 3, 1, 5], 5), (37, [2, 1, 2], 2), (7, [1, 3], 20),
                                            (100, [20, 20, 7], 20)])
def test_beam_candidates_are_the_top_n_of_the_log_softmax_grid(backend, vocab, counts, k,
                                                               kernel_error):  # noqa: F811
    """A backend's selection against log_softmax + topk over the k x V grid: the same candidates
    in the same order, scores within rounding; -inf past a sentence's candidates (V = 7, one
    row, n = 40)."""
    require(backend, kernel_error)
    g = torch.Generator().manual_seed(vocab)
    counts_t = torch.tensor(counts)
    logits = torch.randn(int(counts_t.sum()), vocab, generator=g) * 4
    score = -torch.rand(logits.size(0), generator=g) * 10
    n = min(2 * k, k * vocab)
    ref_score, ref_index = torch_candidates(logits, score, counts_t, k, n)
    stepper = select_backend(model_of("global"), backend)
    top_score, top_index = stepper.candidates(logits, score, counts_t.cumsum(0) - counts_t, counts_t, k, n)
    finite = torch.isfinite(ref_score)
    assert torch.equal(torch.isfinite(top_score), finite)
    assert torch.equal(top_index[finite], ref_index[finite])
    assert close(top_score[finite], ref_score[finite])


def test_the_kernels_candidates_break_ties_by_row_then_token(kernel_error):  # noqa: F811
    require("kernel", kernel_error)
    logits = torch.zeros(3, 16)  # every candidate of a row ties; rows 0 and 2 tie with each other
    score = torch.tensor([-1.0, -2.0, -1.0])
    stepper = select_backend(model_of("global"), "kernel")
    top_score, top_index = stepper.candidates(logits, score, torch.tensor([0]), torch.tensor([3]), 3, 20)
    assert top_index[0].tolist() == list(range(16)) + [32, 33, 34, 35]
    assert torch.equal(top_score[0], torch.full((20,), -1.0 - math.log(16.0)))


def test_bad_rows_are_refused_by_the_kernel(kernel_error):  # noqa: F811
    require("kernel", kernel_error)
    stepper = select_backend(model_of("global"), "kernel")
    src, src_len = sources([7, 3], seed=8, vocab=VOCAB)
    cache, state = stepper.encode(src, src_len)
    bad = RowMap(cache.base, torch.tensor([0, 2]))
    with pytest.raises(RuntimeError, match=r"sent\[1\] = 2 is outside \[0, 2\)"):
        stepper.decode_step(torch.tensor([BOS_ID, BOS_ID]), state, bad, math.inf)
    with pytest.raises(RuntimeError, match="sentence 0: rows"):
        stepper.candidates(torch.zeros(2, 5), torch.zeros(2), torch.tensor([1]), torch.tensor([2]), 2, 4)


assert kernel.SMALL_BATCH < CHUNK  # batches of 7 take the kernel's batch path (module doc)


# --------------------------------------------------------------------------------------
# Half-trained copy models: beams of 1 to 20, tau = inf, the per-step traces
# --------------------------------------------------------------------------------------
#: the half-trained copy models of tests/test_search.py (vocabulary 12: beams of 20 see several
#: hypotheses end at every step; outputs peaked, so ties are rare), on three batch layouts
COPY_BATCHES = {"one": [7], "padded": [5, 3, 9, 1] * 2, "two": [9, 2]}
COPY_CASES = [(name, backend, tau) for backend in FAST for name in ("global", "flexible", "sact", "flexible_sact")
              if name in MUST_CLAIM[backend]
              for tau in ((math.inf, 0.3, 0.8, 2.0) if name.startswith("flexible") else (math.inf,))]


def assert_search_agrees(eager, other) -> None:
    """Same n-best lists, windows and steps as eager, scores within rounding; where the kernel
    differs it is a float32 tie, in at most one sentence."""
    from test_search import hyps

    nbest = eager.nbest is not None  # greedy: the one hypothesis
    listed = (hyps(eager, nbest=True), hyps(other, nbest=True)) if nbest else \
        ([[h] for h in hyps(eager)], [[h] for h in hyps(other)])
    same = []
    for e_hyps, o_hyps, e_scores, o_scores in zip(*listed, eager.scores.tolist(), other.scores.tolist()):
        for e_hyp, o_hyp, e_score, o_score in zip(e_hyps, o_hyps, e_scores, o_scores):
            assert e_hyp == o_hyp or abs(e_score - o_score) <= ATOL, (e_hyp, o_hyp, e_score, o_score)
        same.append(e_hyps == o_hyps)
    assert sum(same) >= len(same) - 1
    rows = torch.tensor(same)
    assert other.window_sum[rows].tolist() == eager.window_sum[rows].tolist()
    assert other.steps[rows].tolist() == eager.steps[rows].tolist()
    assert same_finite_close(other.scores, eager.scores) and same_finite_close(other.log_probs, eager.log_probs)


def assert_traces_agree(eager, other) -> None:
    """The per-step traces of the best hypotheses (where they are the same hypothesis): tokens,
    windows and spans equal; attention, p_t, g_t, temperature within rounding."""
    match = close
    for e, o in zip(eager.traces, other.traces):
        if not torch.equal(o.tokens, e.tokens):
            continue
        assert torch.equal(o.window, e.window)
        assert torch.equal(o.span_lo, e.span_lo) and torch.equal(o.span_hi, e.span_hi)
        assert match(o.attention, e.attention) and match(o.position, e.position)
        for name in ("g", "temperature"):
            a, b = getattr(e, name), getattr(o, name)
            assert (a is None) == (b is None)
            assert a is None or match(b, a)


@pytest.mark.parametrize("attention,backend,tau", [pytest.param(*c, id="-".join(map(str, c))) for c in COPY_CASES])
@pytest.mark.parametrize("batch", list(COPY_BATCHES))
@pytest.mark.parametrize("k", [1, 5, 20])
def test_half_trained_models_beam_search_as_the_eager_backend(attention, backend, tau, batch, k,
                                                              kernel_error):  # noqa: F811
    from test_search import sources as copy_sources
    from test_search import tiny_model

    require(backend, kernel_error)
    model = tiny_model(attention, seed=1)
    src, src_len = copy_sources(COPY_BATCHES[batch], seed=5)
    limit = src_len * 2 + 1
    n_best = min(k, 3)
    eager = beam_search(model, src, src_len, limit, k, tau=tau, n_best=n_best, return_traces=True, backend="eager")
    other = beam_search(model, src, src_len, limit, k, tau=tau, n_best=n_best, return_traces=True, backend=backend)
    assert other.backend == backend
    assert_search_agrees(eager, other)
    assert_traces_agree(eager, other)
    if k == 5:  # greedy, on the same batch
        eager = greedy(model, src, src_len, 12, tau, return_traces=True, backend="eager")
        other = greedy(model, src, src_len, 12, tau, return_traces=True, backend=backend)
        assert_search_agrees(eager, other)
        assert_traces_agree(eager, other)
        assert other.tokens.shape == eager.tokens.shape

"""Decoding: greedy search, beam search and forced decoding (pure functions, no training state),
written once against :class:`~flexatt.decoding.stepper.Stepper`.

Each search takes a model and a ``backend`` (``decode.backend``: ``auto``, ``kernel``,
``eager``; :func:`flexatt.decoding.backends.select_backend` picks the stepper) and
drives the stepper (``encode`` once per batch, then ``decode_step`` once per decoding step; beam
search takes its candidates from ``candidates``; forced decoding runs in one call where the
stepper has ``forced``). Every backend counts the window in the code path that evaluates the
score function, so the window statistics below come from the scoring path itself
(``stats.window``: the positions whose score was evaluated in that row at that step).

The window metric (docs/method.md, Window)
-----------------------------------------
A *scored pair* is one (decoding step, live hypothesis) pair, i.e. one row handed to
``decode_step``. Every search returns, per sentence ``i``:

* ``window_sum[i]`` (float64) = Σ over the decoding steps t of sentence i, Σ over the live hypotheses h of
  sentence i at step t of ``stats.window[h]`` (the number of source positions whose score was
  evaluated for h at step t);
* ``steps[i]`` = the number of such (step, live hypothesis) pairs.

The window of a sentence is ``window_sum[i] / steps[i]``, its mean over its steps and live
hypotheses; the window of a test set is the mean of its sentences' windows
(:func:`mean_window`), as the 2017 paper defines it (§5: for global attention the average
window equals the average source length of the test data). :func:`step_weighted_window`,
``window_sum.sum() / steps.sum()``, weighs every (step, hypothesis) pair the same instead, so
long sentences and wide beams weigh more; it is reported beside, under that name.

* greedy: one live hypothesis per step, ``steps[i]`` = decoding steps (the EOS step included);
* beam search: a *live* hypothesis is one that is extended at that step. Step 1 extends only
  the single empty hypothesis of each sentence (it runs on ``batch`` rows; the beam is expanded
  after it, so no duplicate or dead row is ever computed); from then on each sentence has up
  to ``beam_size`` live rows. Hypotheses that emitted EOS, and sentences that are finished,
  leave the batch and are neither computed nor counted. Hence the count of score-function
  evaluations made during a search equals ``window_sum.sum()`` exactly (windowed paths; the
  dense path evaluates all ``S_max`` padded slots in one kernel and reports the ``S_i`` real ones);
* forced decoding: one row per reference token (EOS included), ``steps[i]`` = T_i.

Token ids: PAD=0, UNK=1, BOS=2, EOS=3 (``flexatt.data.subwords``). No token is masked out of the
output distribution (greedy and beam search see the same softmax).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor

from flexatt.attention import AttentionStats
from flexatt.data.subwords import BOS_ID, EOS_ID, PAD_ID
from flexatt.decoding.backends import select_backend
from flexatt.tau import INF
from flexatt.tau import check as check_tau
from flexatt.decoding.stepper import Stepper

NEG_INF = float("-inf")


def mean_window(window_sum, steps) -> float:
    """The window of a set of sentences (2017 paper, §5): each sentence's positions scored per
    (step, live hypothesis) pair, ``window_sum[i] / steps[i]``, then the mean over sentences.
    Takes per-sentence tensors or arrays (``batch``); 0.0 for an empty set."""
    window_sum = torch.as_tensor(window_sum, dtype=torch.float64)
    steps = torch.as_tensor(steps, dtype=torch.float64).clamp_min(1.0)
    return float((window_sum / steps).mean()) if window_sum.numel() else 0.0


def step_weighted_window(window_sum, steps) -> float:
    """Positions scored per (step, live hypothesis) pair over the whole set, Σ window_sum / Σ steps:
    long sentences and wide beams weigh more than in :func:`mean_window`."""
    return float(torch.as_tensor(window_sum).sum()) / max(int(torch.as_tensor(steps).sum()), 1)


# --------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------
@dataclass
class Trace:
    """Per-step traces of one decoded hypothesis (T = its decoding steps, EOS step included;
    S = the sentence's real source length S_i). Positions are 1-based, as in the papers."""

    tokens: Tensor  # T long            the token output at each step (EOS included if emitted)
    attention: Tensor  # T x S          a_t over the real source positions
    window: Tensor  # T long            positions whose score was evaluated at step t
    span_lo: Tensor  # T long           first scored position (vision span, 1-based)
    span_hi: Tensor  # T long           last scored position
    position: Tensor  # T float         p_t
    g: Optional[Tensor] = None  # T     penalty strength g_t (flexible variants)
    temperature: Optional[Tensor] = None  # T   SACT temperature τ_t (SACT variants)
    layer_window: Optional[Tensor] = None  # T x L   ``window`` per cross-attention layer (a Transformer)

    def __len__(self) -> int:
        return self.tokens.numel()


@dataclass
class SearchResult:
    """What a search returns for a batch of ``batch`` sentences.

    ``tokens``, ``window_sum`` and ``steps`` are always set; the rest are optional extras
    (``None`` where a search does not produce them).
    """

    tokens: Tensor  # batch x L   output ids of the best hypothesis (EOS excluded), PAD after the end
    window_sum: Tensor  # batch   Σ_steps Σ_live hypotheses stats.window (see the module doc)
    steps: Tensor  # batch        number of (step, live hypothesis) pairs scored
    layer_window_sum: Optional[Tensor] = None  # batch x L   the same per cross-attention layer (a Transformer)
    lengths: Optional[Tensor] = None  # batch   output tokens of ``tokens`` rows (EOS excluded)
    scores: Optional[Tensor] = None  # batch x n_best   final score (beam: log p / len**alpha)
    log_probs: Optional[Tensor] = None  # batch x n_best   log p(hypothesis | source), EOS included
    nbest: Optional[Tensor] = None  # batch x n_best x L   beam search: the n best, best first
    nbest_lengths: Optional[Tensor] = None  # batch x n_best
    attention: Optional[Tensor] = None  # batch x T x S   forced decoding: a_t (zeros past the end)
    traces: Optional[list[Trace]] = None  # per sentence, of the best hypothesis (``return_traces``)
    backend: str = "eager"  # the backend that decoded it (``decode.backend``)

    @property
    def mean_window(self) -> float:
        """The batch's window: per-sentence mean, then mean over sentences (:func:`mean_window`)."""
        return mean_window(self.window_sum, self.steps)

    @property
    def step_weighted_window(self) -> float:
        """Σ window_sum / Σ steps (:func:`step_weighted_window`)."""
        return step_weighted_window(self.window_sum, self.steps)


class _TraceBuffer:
    """Per-step traces of ``n`` hypotheses, ``n x T x ...``, written one step at a time."""

    def __init__(self, n: int, t_max: int, src_len: int, like: Tensor):
        self.n, self.t_max = n, t_max
        self.attention = like.new_zeros(n, t_max, src_len)
        self.fields: dict[str, Tensor] = {}

    def write(self, dest: Tensor, t: int, weights: Tensor, stats: AttentionStats,
              rows: Optional[Tensor] = None) -> None:
        """Store step ``t`` (0-based) of hypotheses ``dest`` from rows ``rows`` (default: all
        rows, in order) of that step's ``weights`` (N x S) and ``stats`` (N each)."""
        self.attention[dest, t] = weights if rows is None else weights[rows]
        for name in AttentionStats._fields:
            value = getattr(stats, name)
            if value is None:
                continue
            if name not in self.fields:
                self.fields[name] = value.new_zeros(self.n, self.t_max, *value.shape[1:])
            self.fields[name][dest, t] = value if rows is None else value[rows]

    def traces(self, index: list[int], steps: list[int], src_len: list[int],
               tokens: Tensor) -> list[Trace]:
        """:class:`Trace` of buffer rows ``index`` with their step counts, source lengths and
        output tokens (``len(index) x >=T`` ids)."""
        return _traces(self.attention, self.fields, index, steps, src_len, tokens)


def _traces(attention: Tensor, fields: dict[str, Tensor], index: list[int], steps: list[int],
            src_len: list[int], tokens: Tensor) -> list[Trace]:
    """:class:`Trace` of rows ``index`` of per-step traces (``attention`` n x T x S, ``fields``:
    :class:`AttentionStats` names -> n x T) with their step counts, source lengths and output
    tokens."""
    out = []
    for i, t, s in zip(index, steps, src_len):
        extra = {name: buf[i, :t].clone() for name, buf in fields.items()}
        for name in ("g", "temperature", "layer_window"):
            extra.setdefault(name, None)
        out.append(Trace(tokens=tokens[i, :t].clone(), attention=attention[i, :t, :s].clone(), **extra))
    return out


def _add_layers(total: Optional[Tensor], rows: Tensor, stats: AttentionStats, batch: int) -> Optional[Tensor]:
    """``total`` (batch x L, float64) with this step's per-layer windows (``stats.layer_window``,
    N x L, of the sentences ``rows``) added, as ``window_sum`` adds ``stats.window``; ``None``
    for a model without layers."""
    if stats.layer_window is None:
        return total
    if total is None:
        total = torch.zeros(batch, stats.layer_window.size(1), dtype=torch.float64, device=rows.device)
    return total.index_add_(0, rows, stats.layer_window.to(total.dtype))


def _limits(max_len: Tensor | int, batch: int, device: torch.device) -> Tensor:
    """Per-sentence step limits as a ``batch`` long tensor."""
    return torch.as_tensor(max_len, device=device).long().expand(batch)


# --------------------------------------------------------------------------------------
# Greedy search
# --------------------------------------------------------------------------------------
def _stepper(model, backend: str | Stepper) -> Stepper:
    """The stepper of ``model`` for ``backend`` (a name, or a stepper already selected)."""
    return select_backend(model, backend) if isinstance(backend, str) else backend


@torch.inference_mode()
def greedy(model, src: Tensor, src_len: Tensor, max_len: Tensor | int, tau: float = INF,
           return_traces: bool = False, backend: str | Stepper = "auto") -> SearchResult:
    """Greedy decoding of a batch.

    Args:
        model: a :class:`flexatt.model.Seq2Seq` (in eval mode).
        backend: ``decode.backend`` (or a :class:`~flexatt.decoding.stepper.Stepper`).
        src: batch x S ids, src_len: batch.
        max_len: the most steps per sentence (an int, or a batch tensor).
        tau: flexible attention's threshold (``inf``: score every position; :mod:`flexatt.tau`).
        return_traces: also return a :class:`Trace` per sentence.

    Returns a :class:`SearchResult` with ``tokens`` batch x max(max_len), ``window_sum`` /
    ``steps`` (one live hypothesis per step), ``lengths``, ``log_probs`` = ``scores`` batch x 1
    (log-probability of the output, EOS included if emitted; no length normalisation).

    Finished sentences leave the batch, so their steps are neither computed nor counted.
    """
    tau = check_tau(tau)
    stepper = _stepper(model, backend)
    batch, device = src.size(0), src.device
    limit = _limits(max_len, batch, device)
    cache, state = stepper.encode(src, src_len)
    t_max = int(limit.max()) if batch else 0
    tokens = torch.full((batch, t_max), PAD_ID, dtype=torch.long, device=device)
    window_sum = torch.zeros(batch, dtype=torch.float64, device=device)
    steps = torch.zeros(batch, dtype=torch.long, device=device)
    log_probs = torch.zeros(batch, device=device)
    eos_end = torch.zeros(batch, dtype=torch.bool, device=device)
    out_tokens = torch.full((batch, t_max), PAD_ID, dtype=torch.long, device=device)  # EOS kept
    buffer = _TraceBuffer(batch, t_max, src.size(1), log_probs) if return_traces else None
    active = torch.arange(batch, device=device)
    prev = torch.full((batch,), BOS_ID, dtype=torch.long, device=device)
    layer_sum: Optional[Tensor] = None
    for t in range(t_max):
        logits, state, weights, stats = stepper.decode_step(prev, state, cache, tau)
        prev = logits.argmax(-1)
        log_probs[active] += torch.log_softmax(logits.float(), -1).gather(1, prev.unsqueeze(1)).squeeze(1)
        window_sum[active] += stats.window.to(window_sum.dtype)
        layer_sum = _add_layers(layer_sum, active, stats, batch)
        steps[active] += 1
        if buffer is not None:
            buffer.write(active, t, weights, stats)
        is_eos = prev == EOS_ID
        eos_end[active] = is_eos
        ended = is_eos | (limit[active] <= t + 1)
        tokens[active, t] = prev.masked_fill(is_eos, PAD_ID)
        out_tokens[active, t] = prev
        if bool(ended.all()):
            break
        if bool(ended.any()):
            keep = (~ended).nonzero(as_tuple=True)[0]
            active, prev = active[keep], prev[keep]
            state, cache = state.index_select(keep), cache.index_select(keep)
    lengths = steps - eos_end.long()
    traces = None
    if buffer is not None:
        traces = buffer.traces(list(range(batch)), steps.tolist(), src_len.tolist(), out_tokens)
    lp = log_probs.unsqueeze(1)
    return SearchResult(tokens, window_sum, steps, layer_sum, lengths=lengths, scores=lp, log_probs=lp,
                        traces=traces, backend=stepper.name)


# --------------------------------------------------------------------------------------
# Beam search
# --------------------------------------------------------------------------------------
@torch.inference_mode()
def beam_search(
    model,
    src: Tensor,
    src_len: Tensor,
    max_len: Tensor | int,
    beam_size: int,
    tau: float = INF,
    alpha: float = 1.0,
    n_best: int = 1,
    return_traces: bool = False,
    backend: str | Stepper = "auto",
) -> SearchResult:
    """Beam search over a batch, batched over sentences and hypotheses (one ``N x ...`` tensor
    of live rows, N <= batch * beam_size, rows grouped by sentence).

    Args:
        model: a :class:`flexatt.model.Seq2Seq` (in eval mode).
        src: batch x S ids, src_len: batch.
        max_len: the most steps per sentence (an int, or a batch tensor; >= 1).
        beam_size: k, the number of live hypotheses per sentence (1 = greedy).
        tau: flexible attention's threshold (``inf``: score every position; :mod:`flexatt.tau`).
        alpha: length normalisation of finished hypotheses, score = log p / len**alpha with
            len = the hypothesis' decoding steps (its tokens, EOS included); 0 = no normalisation.
        n_best: how many finished hypotheses to return per sentence (<= beam_size).
        return_traces: also return a :class:`Trace` of each sentence's best hypothesis.
        backend: ``decode.backend`` (or a :class:`~flexatt.decoding.stepper.Stepper`).

    Algorithm (per step t = 1, 2, ...; all sentences at once):

    1. ``decode_step`` on the live rows (step 1: the ``batch`` empty hypotheses; the state and
       the cache are expanded by the first reordering, so no duplicate row is ever computed);
       the window statistics of those rows are added to their sentences.
    2. Candidate score = hypothesis log p + log_softmax(logits): N x V, scattered into a
       ``n_active x k x V`` grid (-inf where a sentence has fewer than k live rows); the top
       2k candidates per sentence over (k x V) are taken, best first (the stepper's
       ``candidates``: :func:`~flexatt.decoding.stepper.grid_candidates`, or the kernel's in
       one pass over the logits).
    3. Candidates ranked < k that end in EOS — or, at the sentence's last step t = max_len, all
       candidates ranked < k — are *finished*, scored with log p / t**alpha, and merged into the
       sentence's table of its n_best best finished hypotheses. The first k candidates not
       ending in EOS become the new live hypotheses (so a sentence keeps k live hypotheses
       whatever number finished; EOS candidates ranked >= k are dropped).
    4. A sentence ends when (a) it has finished ``beam_size`` hypotheses in total, or (b) its
       n_best-th best finished score cannot be beaten by any live hypothesis: log p only
       decreases, so a live hypothesis with log p = s can at best reach s / max_len**alpha;
       or (c) t = max_len. Its rows then leave the batch.
    5. The surviving rows' state (h, c, p_{t-1}, c̃_{t-1}, step) is reordered with
       ``state.index_select(parent rows)``; the cache (a row map,
       :class:`~flexatt.attention.RowMap`) is mapped to the new rows only when the rows'
       sentences change (beam expansion, a sentence leaving, a sentence with fewer than k live
       hypotheses).

    Hypotheses are recovered at the end by following the parent pointers of every step.
    With ``beam_size=1`` this is greedy search token for token (same steps, windows).

    Returns a :class:`SearchResult`: ``tokens`` batch x L (the best hypothesis, EOS excluded,
    PAD after), ``lengths`` batch, ``scores`` / ``log_probs`` batch x n_best (best first;
    -inf where fewer than n_best finished), ``nbest`` batch x n_best x L, ``nbest_lengths``,
    ``window_sum`` / ``steps`` per sentence as in the module doc, ``traces`` (best hypothesis).
    """
    k = int(beam_size)
    if k < 1:
        raise ValueError(f"beam_size must be >= 1, got {beam_size}")
    if not 1 <= n_best <= k:
        raise ValueError(f"n_best must be in [1, beam_size={k}], got {n_best}")
    tau = check_tau(tau)
    stepper = _stepper(model, backend)
    batch, device = src.size(0), src.device
    limit = _limits(max_len, batch, device)
    if batch and int(limit.min()) < 1:
        raise ValueError("max_len must be >= 1")
    full_cache, state = stepper.encode(src, src_len)
    cache, cache_rows = full_cache, torch.arange(batch, device=device)

    # live rows, grouped by sentence (ascending original sentence index)
    row_sent = torch.arange(batch, device=device)  # N  sentence of each live row
    row_score = torch.zeros(batch, device=device)  # N  log p of each live hypothesis
    prev = torch.full((batch,), BOS_ID, dtype=torch.long, device=device)  # N  y_{t-1}
    parent: Optional[Tensor] = None  # N  the row of step t-1 each row extends
    window_sum = torch.zeros(batch, dtype=torch.float64, device=device)
    steps = torch.zeros(batch, dtype=torch.long, device=device)
    finished = _Finished(batch, n_best, device)
    history = _History(return_traces)
    layer_sum: Optional[Tensor] = None

    t = 0
    while row_sent.numel() > 0:
        t += 1
        logits, state, weights, stats = stepper.decode_step(prev, state, cache, tau)
        window_sum.index_add_(0, row_sent, stats.window.to(window_sum.dtype))
        layer_sum = _add_layers(layer_sum, row_sent, stats, batch)
        steps.index_add_(0, row_sent, torch.ones_like(row_sent))
        history.add(prev, parent, weights, stats)
        c = _candidates(stepper, logits, row_score, row_sent, limit, k, t)
        finished.merge(c, t, alpha)
        c.go &= ~_sentences_done(c, finished, k, alpha).unsqueeze(1)
        # the surviving hypotheses become the rows of the next step
        a_idx, c_idx = c.go.nonzero(as_tuple=True)  # row-major: grouped by sentence
        parent = c.par_row[a_idx, c_idx]
        row_sent = c.sent_ids[a_idx]
        row_score = c.score[a_idx, c_idx]
        prev = c.tok[a_idx, c_idx]
        if row_sent.numel() == 0:
            break
        state = state.index_select(parent)
        if row_sent.numel() != cache_rows.numel() or not torch.equal(row_sent, cache_rows):
            cache, cache_rows = full_cache.index_select(row_sent), row_sent
    nbest, nbest_lengths, traces = _backtrack(finished, history, src.size(1), src_len)
    return SearchResult(
        tokens=nbest[:, 0].clone(),
        window_sum=window_sum,
        steps=steps,
        layer_window_sum=layer_sum,
        lengths=nbest_lengths[:, 0].clone(),
        scores=finished.norm,
        log_probs=finished.raw,
        nbest=nbest,
        nbest_lengths=nbest_lengths,
        traces=traces,
        backend=stepper.name,
    )


class _History:
    """What beam search needs to backtrack: per step the tokens fed (y_{t-1}, N_t), the rows of
    the previous step they extend (N_t; ``None`` at step 1) and, with ``traces``, the weights
    (N_t x S) and stats of every row."""

    def __init__(self, traces: bool):
        self.tokens: list[Tensor] = []
        self.parents: list[Optional[Tensor]] = []
        self.steps: Optional[list[tuple[Tensor, AttentionStats]]] = [] if traces else None

    def add(self, tokens: Tensor, parents: Optional[Tensor], weights: Tensor, stats: AttentionStats) -> None:
        self.tokens.append(tokens)
        self.parents.append(parents)
        if self.steps is not None:
            self.steps.append((weights, stats))


@dataclass
class _Candidates:
    """One step's candidates, ``n_act x n_cand`` for the ``n_act`` sentences with live rows
    (``sent_ids``), best first: ``score`` (log p), ``tok``, ``par_row`` (the row each extends),
    ``fin`` (finished: ranked < k and ending in EOS, or any ranked < k at the sentence's last
    step), ``go`` (the first k that do not end: the next live hypotheses), ``last``
    (``n_act x 1``: the sentence's last step) and ``limit`` (``n_act``: its step limit)."""

    sent_ids: Tensor
    score: Tensor
    tok: Tensor
    par_row: Tensor
    fin: Tensor
    go: Tensor
    last: Tensor
    limit: Tensor


def _candidates(stepper: Stepper, logits: Tensor, row_score: Tensor, row_sent: Tensor, limit: Tensor, k: int,
                t: int) -> _Candidates:
    """Steps 2-3 of :func:`beam_search`: the top 2k candidates per sentence over (k x V) and which
    of them finish or live on."""
    vocab = logits.size(1)
    sent_ids, counts = torch.unique_consecutive(row_sent, return_counts=True)  # n_act
    starts = counts.cumsum(0) - counts  # n_act: first row of each sentence
    n_cand = min(2 * k, k * vocab)
    top_score, top_idx = stepper.candidates(logits, row_score, starts, counts, k, n_cand)
    tok = top_idx % vocab  # n_act x n_cand
    par_row = starts.unsqueeze(1) + torch.div(top_idx, vocab, rounding_mode="floor")
    finite = top_score > NEG_INF
    is_eos = tok == EOS_ID
    sent_limit = limit[sent_ids]  # n_act
    last = (sent_limit <= t).unsqueeze(1)  # n_act x 1
    top_k = (torch.arange(n_cand, device=logits.device) < k).unsqueeze(0)
    fin = finite & top_k & (is_eos | last)
    go = finite & ~is_eos & ~last
    go &= go.long().cumsum(1) <= k
    return _Candidates(sent_ids, top_score, tok, par_row, fin, go, last, sent_limit)


class _Finished:
    """The ``n_best`` best finished hypotheses of each of ``batch`` sentences, best first:
    ``norm`` (log p / len**alpha), ``raw`` (log p), ``t`` (steps), ``row`` (its row at step
    ``t``), ``tok`` (its last token) and ``count`` (finished so far). Entries that are not
    finished hypotheses keep t = 0, log p = -inf."""

    def __init__(self, batch: int, n_best: int, device: torch.device):
        self.n_best = n_best
        self.norm = torch.full((batch, n_best), NEG_INF, device=device)
        self.raw = torch.full((batch, n_best), NEG_INF, device=device)
        self.t = torch.zeros((batch, n_best), dtype=torch.long, device=device)
        self.row = torch.zeros((batch, n_best), dtype=torch.long, device=device)
        self.tok = torch.full((batch, n_best), PAD_ID, dtype=torch.long, device=device)
        self.count = torch.zeros(batch, dtype=torch.long, device=device)

    def merge(self, c: _Candidates, t: int, alpha: float) -> None:
        """Step 3 of :func:`beam_search`: the candidates that finish at step ``t``, scored
        log p / t**alpha, merged into each sentence's table."""
        if not bool(c.fin.any()):
            return
        ids, fin = c.sent_ids, c.fin
        new_norm = torch.where(fin, c.score / float(t) ** alpha, NEG_INF)
        best_norm, pick = torch.cat([self.norm[ids], new_norm], 1).topk(self.n_best, dim=1)

        def merge(old: Tensor, new: Tensor) -> Tensor:
            return torch.cat([old[ids], new], 1).gather(1, pick)

        self.raw[ids] = merge(self.raw, torch.where(fin, c.score, NEG_INF))
        self.t[ids] = merge(self.t, fin.long() * t)
        self.row[ids] = merge(self.row, c.par_row.masked_fill(~fin, 0))
        self.tok[ids] = merge(self.tok, c.tok.masked_fill(~fin, PAD_ID))
        self.norm[ids] = best_norm
        self.count.index_add_(0, ids, fin.sum(1))


def _sentences_done(c: _Candidates, finished: _Finished, k: int, alpha: float) -> Tensor:
    """Step 4 of :func:`beam_search`, per active sentence (``n_act`` bool): its last step, k
    hypotheses finished, its n_best-th finished score out of any live hypothesis' reach (log p
    only decreases: at best log p / max_len**alpha), or no live candidate left."""
    best_live = torch.where(c.go, c.score, NEG_INF).max(1).values  # n_act
    bound = best_live / c.limit.to(best_live.dtype) ** alpha  # best reachable score
    return (c.last.squeeze(1) | (finished.count[c.sent_ids] >= k)
            | (finished.norm[c.sent_ids, -1] >= bound) | ~c.go.any(1))


def _backtrack(finished: _Finished, history: _History, src_max: int,
               src_len: Tensor) -> tuple[Tensor, Tensor, Optional[list[Trace]]]:
    """The n_best hypotheses of every sentence, from the parent pointers of every step:
    ``nbest`` batch x n_best x L (EOS excluded, PAD after), ``nbest_lengths`` and, where the
    history kept them, the traces of each sentence's best hypothesis."""
    batch, n_best = finished.t.shape
    device = finished.t.device
    t_end = finished.t.reshape(-1)  # batch * n_best (0 where no hypothesis)
    t_top = int(t_end.max()) if t_end.numel() else 0
    out = torch.full((t_end.numel(), t_top), PAD_ID, dtype=torch.long, device=device)  # EOS kept
    cur = finished.row.reshape(-1).clone()  # row of each hypothesis at the step being visited
    last_tok = finished.tok.reshape(-1)
    buffer = _TraceBuffer(batch, t_top, src_max, finished.norm) if history.steps is not None else None
    best = torch.arange(batch, device=device) * n_best  # the best hypothesis of each sentence
    for step in range(t_top, 0, -1):  # 1-based
        cont = (t_end > step).nonzero(as_tuple=True)[0]
        if cont.numel():
            nxt = cur[cont]  # rows at step + 1
            out[cont, step - 1] = history.tokens[step][nxt]
            cur[cont] = history.parents[step][nxt]
        end = (t_end == step).nonzero(as_tuple=True)[0]
        out[end, step - 1] = last_tok[end]
        if buffer is not None:
            on = (t_end[best] >= step).nonzero(as_tuple=True)[0]  # sentences
            weights, stats = history.steps[step - 1]
            buffer.write(on, step - 1, weights, stats, rows=cur[best[on]])
    ends_eos = (last_tok == EOS_ID) & (t_end > 0)
    nbest_lengths = (t_end - ends_eos.long()).view(batch, n_best)
    nbest = out.masked_fill(out == EOS_ID, PAD_ID).view(batch, n_best, t_top)
    traces = None
    if buffer is not None:
        traces = buffer.traces(list(range(batch)), finished.t[:, 0].tolist(), src_len.tolist(), out[best])
    return nbest, nbest_lengths, traces


# --------------------------------------------------------------------------------------
# Forced decoding
# --------------------------------------------------------------------------------------
@torch.inference_mode()
def forced_decode(
    model,
    src: Tensor,
    src_len: Tensor,
    tgt_in: Tensor,
    tgt_out: Tensor,
    tau: float = INF,
    tgt_len: Optional[Tensor] = None,
    return_traces: bool = False,
    backend: str | Stepper = "auto",
) -> SearchResult:
    """Feed the reference through the decoder one token at a time, at threshold ``tau``.

    The stepper's ``decode_step`` runs once per step (the decoding code path of greedy and beam
    search, not the teacher-forced ``forward``), unless it has a one-call ``forced`` (the kernel:
    the recurrence in one compiled call and the readout once over all steps). Both count the
    window in the loop that computes the scores, and the tests hold them equal.

    Args:
        src: batch x S ids, src_len: batch.
        tgt_in: batch x T, BOS y_1 .. y_{T-1} (the :class:`flexatt.data.batching.Batch` layout).
        tgt_out: batch x T, y_1 .. y_T (EOS last), PAD after.
        tgt_len: batch, the steps per sentence; default: the non-PAD tokens of ``tgt_out``.
        return_traces: also return a :class:`Trace` per sentence.
        backend: ``decode.backend`` (or a :class:`~flexatt.decoding.stepper.Stepper`).

    Returns a :class:`SearchResult`: ``tokens`` = the reference (EOS -> PAD), ``lengths``,
    ``log_probs`` = ``scores`` batch x 1 (log p(reference | source), EOS included),
    ``attention`` batch x T x S (a_t; zeros past each sentence's end), ``window_sum`` / ``steps``
    (one row per reference token), ``traces``. Finished sentences leave the batch.
    """
    batch, device = tgt_out.shape[0], src.device
    lengths = (tgt_out != PAD_ID).sum(1) if tgt_len is None else tgt_len.to(device).long()
    t_max = tgt_out.size(1)
    tau = check_tau(tau)
    stepper = _stepper(model, backend)
    out = stepper.forced(src, src_len, tgt_in, tgt_out, lengths, tau) if batch else None
    if out is not None:
        return _forced_result(out, tgt_out, lengths, src_len, return_traces, stepper.name)
    cache, state = stepper.encode(src, src_len)
    window_sum = torch.zeros(batch, dtype=torch.float64, device=device)
    steps = torch.zeros(batch, dtype=torch.long, device=device)
    log_probs = torch.zeros(batch, device=device)
    attention = torch.zeros(batch, t_max, src.size(1), device=device)
    buffer = _TraceBuffer(batch, t_max, src.size(1), log_probs) if return_traces else None
    active = (lengths > 0).nonzero(as_tuple=True)[0]
    if active.numel() < batch:
        state, cache = state.index_select(active), cache.index_select(active)
    for t in range(int(lengths.max()) if batch else 0):
        logits, state, weights, stats = stepper.decode_step(tgt_in[active, t], state, cache, tau)
        gold = tgt_out[active, t].unsqueeze(1)
        log_probs[active] += torch.log_softmax(logits.float(), -1).gather(1, gold).squeeze(1)
        window_sum[active] += stats.window.to(window_sum.dtype)
        steps[active] += 1
        attention[active, t] = weights.to(attention.dtype)
        if buffer is not None:
            buffer.write(active, t, weights, stats)
        ended = lengths[active] <= t + 1
        if bool(ended.all()):
            break
        if bool(ended.any()):
            keep = (~ended).nonzero(as_tuple=True)[0]
            active = active[keep]
            state, cache = state.index_select(keep), cache.index_select(keep)
    ref, out_lengths = _reference(tgt_out, lengths)
    traces = None
    if buffer is not None:
        traces = buffer.traces(list(range(batch)), lengths.tolist(), src_len.tolist(), ref)
    return _gold_result(ref, out_lengths, window_sum, steps, log_probs, attention, traces, stepper.name)


def _reference(tgt_out: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
    """The reference cut at ``lengths`` (PAD after) and its length without a final EOS."""
    in_ref = torch.arange(tgt_out.size(1), device=tgt_out.device).unsqueeze(0) < lengths.unsqueeze(1)
    ref = tgt_out.masked_fill(~in_ref, PAD_ID)
    last = ref.gather(1, (lengths - 1).clamp_min(0).unsqueeze(1)).squeeze(1)
    return ref, lengths - ((last == EOS_ID) & (lengths > 0)).long()


def _forced_result(out: dict, tgt_out: Tensor, lengths: Tensor, src_len: Tensor,
                   return_traces: bool, backend: str) -> SearchResult:
    """:class:`SearchResult` of :func:`forced_decode` from a stepper's one-call ``forced``."""
    batch, t_max = tgt_out.shape
    ref, out_lengths = _reference(tgt_out, lengths)
    attention = out["attention"]
    if attention.size(1) < t_max:  # the one-call path stops at the longest reference
        attention = torch.cat([attention, attention.new_zeros(batch, t_max - attention.size(1),
                                                              attention.size(2))], 1)
    traces = None
    if return_traces:
        fields = {name: out[name] for name in AttentionStats._fields if out.get(name) is not None}
        traces = _traces(attention, fields, list(range(batch)), lengths.tolist(), src_len.tolist(), ref)
    return _gold_result(ref, out_lengths, out["window"].sum(1).double(), lengths.clone(), out["log_probs"], attention, traces,
                        backend)


def _gold_result(ref: Tensor, lengths: Tensor, window_sum: Tensor, steps: Tensor, log_probs: Tensor,
                 attention: Tensor, traces, backend: str) -> SearchResult:
    """The :class:`SearchResult` of a forced decode: the reference as the tokens (EOS as PAD), its
    log-probability as the single hypothesis's score."""
    lp = log_probs.unsqueeze(1)
    return SearchResult(tokens=ref.masked_fill(ref == EOS_ID, PAD_ID), window_sum=window_sum, steps=steps,
                        lengths=lengths, scores=lp, log_probs=lp, attention=attention, traces=traces, backend=backend)

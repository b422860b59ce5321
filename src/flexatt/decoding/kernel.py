"""The kernel backend: the decoding recurrence compiled (``csrc/kernel.cpp``), for inference
on a CPU. :class:`KernelStepper` runs forced decoding of a whole batch in one call
(:meth:`KernelStepper.forced`) and the step of greedy and beam search (``decode_step``,
``beam_candidates``); all of them run one row's attention with the kernel's ``attend_row``.

Forced decoding feeds the reference back, so nothing of step t+1 waits for the readout of step
t: the recurrence (attention + LSTM) runs in C++ without a Python round trip per step, and the
readout runs once afterwards over the decoded steps (padding left out), as in teacher forcing,
and the log-softmax is evaluated at the gold token only. What depends only on a token is one row of a per-vocabulary table (computed
once per set of weights), so it is looked up, not computed: for the fed-back token the LSTM's
input gates W_ie i_t + b, g_t's W_ge i_t (2017 eq. 8) and the readout's W_oi i_t + b_o; for a
source token the encoder's input projections of both directions. Inside a step the query
products W_q h_{t-1} and W_gh h_{t-1} are one product; g_t, the vision span, the scores of the
span's positions, the penalty, the softmax, c_t and p_t are one loop over the span of each
sentence; then the LSTM. The encoder's bidirectional LSTM runs in the kernel too, its two
directions on two threads.

Every matrix product is the kernel's own (``linear``; weights packed in panels of columns by
``pack``): each output is one chain of fused multiply-adds in a fixed order, so a sentence's
result does not depend on the other rows of its batch, and on CPUs where the BLAS library's
GEMM runs far below the vector units' speed on tens of rows it is much faster
(``benchmarks/README.md``, the kernel's products). The rows run longest first, so each
step's products cover only the sentences still running. Batches of up to ``SMALL_BATCH`` rows
(per-sentence decoding) get the context's share of the LSTM gates, W_ic c_t = Σ_s a_t(s) W_ic
h̄_s, from a per-sentence projection summed over the span — work that shrinks with the window.
Global attention runs through the very same code with the span [1, S_i] and no penalty, so the
two are compared on equal terms.

Supported (:meth:`KernelStepper.unsupported`): :class:`~flexatt.attention.GlobalAttention` and
plain :class:`~flexatt.attention.FlexibleAttention` (2017 eq. 8 or 2016 eq. 7 strength) with the
concat score, no fixed temperature, the recurrent encoder, float32 parameters on the CPU, the
model in eval mode and no autocast — and only while the reference modules it restates are the
ones it was written against (:data:`RESTATED_DIGESTS`, :mod:`flexatt.decoding.digests`): a
model whose penalty, score, LSTM or readout was edited is decoded by the model's own modules (the
``eager`` backend, the reference): ``tests/test_kernel.py`` and ``tests/test_decoding_contract.py``
check that both give the same log-probabilities (within float32 rounding), attention, spans
(bit for bit), p_t, g_t, window counts and hypotheses.

The extension is compiled on first use with the C++ compiler ``torch.utils.cpp_extension``
finds (``g++``) for the SIMD level PyTorch itself dispatches to
on this CPU, and cached under ``$FLEXATT_EXT_DIR`` (default ``~/.cache/flexatt/ext``) by a hash
of the sources, the torch version and that level; a later process loads it in well under a
second. Without a compiler the backend is off, with one warning.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import sysconfig
import warnings
from pathlib import Path
from types import ModuleType
from typing import Iterator, Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from flexatt.attention import AttentionCache, AttentionState, AttentionStats, ConcatScore, FlexibleAttention, \
    GlobalAttention
from flexatt.decoders import DecoderState
from flexatt.decoding import digests
from flexatt.encoders import RecurrentEncoder

EXT_DIR_ENV = "FLEXATT_EXT_DIR"
SOURCE = Path(__file__).resolve().parent.parent / "csrc" / "kernel.cpp"

#: the digests of the members the kernel restates (:data:`flexatt.decoding.digests.RESTATED`) as
#: they were when it was last brought in line with them; print the current ones with
#: :func:`flexatt.decoding.digests.main`
RESTATED_DIGESTS: dict[str, str] = {
    "flexatt.attention:masked_softmax": "1eb1fe05807e",
    "flexatt.attention.flexible:span_radius": "6c84da9ff779",
    "flexatt.attention.flexible:window_bounds": "a7f22cd06aaf",
    "flexatt.attention:ConcatScore": "9cfdd32c6787",
    "flexatt.attention:_AdditiveScore": "dbad7b68aaf7",
    "flexatt.attention:Attention": "c56f3100cfd8",
    "flexatt.attention:GlobalAttention": "41f412aad37c",
    "flexatt.attention:FlexibleAttention": "d4e4757a1791",
    "flexatt.encoders:RecurrentEncoder": "6b3940383780",
    "flexatt.decoders:RecurrentDecoder": "b15caf0fffe3",
    "flexatt.model:Seq2Seq": "2b11e0829c42",
}
#: batches of up to this many rows (per-sentence decoding) take the context's share of the LSTM
#: gates as a sum over the span of a per-sentence projection (see the module doc)
SMALL_BATCH = 4

#: compiler flags per SIMD level of ``torch.backends.cpu.get_cpu_capability()``: the flags
#: PyTorch builds its own kernels of that level with, so ``at::vec::Vectorized`` matches
_SIMD_FLAGS = {
    "AVX512": ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mfma",
               "-DCPU_CAPABILITY=AVX512", "-DCPU_CAPABILITY_AVX512"],
    "AVX2": ["-mavx2", "-mfma", "-mf16c", "-DCPU_CAPABILITY=AVX2", "-DCPU_CAPABILITY_AVX2"],
}
_state: dict[str, object] = {}


def _build_key(level: str) -> str:
    digest = hashlib.sha256(SOURCE.read_bytes() + Path(__file__).read_bytes())
    digest.update(f"{torch.__version__}|{level}".encode())
    return digest.hexdigest()[:12]


def _find_ninja() -> None:
    """torch.utils.cpp_extension runs ``ninja`` from PATH; the ``ninja`` package installs it next
    to this interpreter, which is not on PATH when the environment is not activated."""
    if shutil.which("ninja") is None:
        scripts = sysconfig.get_path("scripts")
        if scripts and (Path(scripts) / "ninja").exists():
            os.environ["PATH"] = scripts + os.pathsep + os.environ.get("PATH", "")


def build_directory(level: Optional[str] = None) -> Path:
    """The folder the extension for a SIMD level (default: the one PyTorch dispatches to on this
    CPU) is built and cached in: ``$FLEXATT_EXT_DIR/kernel_<level>_<key>``."""
    level = level or torch.backends.cpu.get_cpu_capability()
    root = Path(os.environ.get(EXT_DIR_ENV) or Path.home() / ".cache" / "flexatt" / "ext")
    return root / f"kernel_{level.lower()}_{_build_key(level)}"


@contextlib.contextmanager
def _exclusive_build(build_dir: Path) -> Iterator[None]:
    """Hold the build folder for this process while ``torch.utils.cpp_extension.load`` runs.

    ``load`` marks a build in progress with a ``lock`` file (its ``FileBaton``) and waits, with
    no time limit, for that file to go. A process killed during ``load`` (Ctrl-C at the wrong
    moment, a killed job) leaves the file behind, and every later ``load`` of that folder waits
    forever. An ``flock`` on a file of our own is released by the operating system when its
    holder dies, so the process holding it is the only live builder of the folder: a ``lock``
    file it finds was left by a dead one, and is removed. Where ``fcntl`` is missing (Windows),
    ``load``'s own baton is all there is.
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield
        return
    with open(build_dir / "build.flock", "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # waits while another live process builds
        try:
            stale = build_dir / "lock"
            if stale.exists():
                warnings.warn(f"flexatt.decoding.kernel: removing {stale}, left by a build that was "
                              "interrupted", RuntimeWarning, stacklevel=3)
                stale.unlink(missing_ok=True)
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def extension(required: bool = False) -> Optional[ModuleType]:
    """The compiled extension (built on first use, then cached), or ``None`` if it cannot be
    built; ``required=True`` raises instead of returning ``None``."""
    if "ext" not in _state:
        try:
            from torch.utils.cpp_extension import load

            _find_ninja()

            level = torch.backends.cpu.get_cpu_capability()
            flags = _SIMD_FLAGS.get(level, ["-DCPU_CAPABILITY=DEFAULT", "-DCPU_CAPABILITY_DEFAULT"])
            build_dir = build_directory(level)
            build_dir.mkdir(parents=True, exist_ok=True)
            # -ffp-contract=off: every product and sum rounded as written, as PyTorch's ops round
            # them (a fused p - σ·√x moved a span bound); explicit FMAs stay where written.
            # -fopenmp: at::parallel_for is inline in ATen's headers and runs its OpenMP loop
            # (over sentences, or over the tiles of a product) only when compiled with it;
            # the OpenMP runtime is the one PyTorch has already loaded (libgomp.so.1)
            with _exclusive_build(build_dir):
                _state["ext"] = load(name=f"flexatt_{build_dir.name}", sources=[str(SOURCE)],
                                     build_directory=str(build_dir),
                                     extra_cflags=["-O3", "-ffp-contract=off", "-fopenmp", *flags],
                                     extra_ldflags=["-fopenmp"],
                                     verbose=False)
            _state["error"] = None
        except Exception as exc:  # no compiler, no ninja, a failed build: fall back to eager
            _state["ext"], _state["error"] = None, exc
            warnings.warn(f"flexatt.decoding.kernel: the kernel could not be built ({exc}); decoding "
                          "runs on the eager backend (set decode.backend=eager to silence this)",
                          RuntimeWarning, stacklevel=2)
    if _state["ext"] is None and required:
        raise RuntimeError(f"flexatt.decoding.kernel: the kernel could not be built: {_state['error']}")
    return _state["ext"]  # type: ignore[return-value]


def unsupported(model) -> Optional[str]:
    """Why ``model`` cannot be decoded by the kernel (``None`` if it can)."""
    if type(model.encoder) is not RecurrentEncoder:
        return f"encoder {type(model.encoder).__name__} (kernel: RecurrentEncoder)"
    att = model.decoder.attention
    if type(att) not in (GlobalAttention, FlexibleAttention):
        return f"attention {type(att).__name__} (kernel: GlobalAttention, FlexibleAttention)"
    if isinstance(att, FlexibleAttention) and att.sact:
        return "flexible attention with a SACT temperature"
    if type(att.scorer) is not ConcatScore:
        return f"score {type(att.scorer).__name__} (kernel: ConcatScore)"
    if att.temperature is not None:
        return "a fixed softmax temperature"
    if model.training:
        return "the model is in training mode"
    if torch.is_autocast_enabled("cpu"):
        return "autocast is on"
    if not all(p.device.type == "cpu" and p.dtype == torch.float32 for p in model.parameters()):
        return "not float32 on the CPU"
    return digests.stale(RESTATED_DIGESTS)


def _weights(model) -> dict:
    """The decoder's parameters arranged for the kernel (see ``csrc/kernel.cpp``), kept
    on the model until a parameter changes (its version counter or its storage)."""
    cached = getattr(model, "_kernel_weights", None)
    if cached is not None:
        params, stamp, out = cached
        if all(p._version == v and p.data_ptr() == d for p, (v, d) in zip(params, stamp)):
            return out
    params = list(model.parameters())
    out = _arrange(model)
    stamp = [(p._version, p.data_ptr()) for p in params]
    object.__setattr__(model, "_kernel_weights", (params, stamp, out))  # not a submodule or buffer
    return out


@torch.no_grad()
def _arrange(model) -> dict:
    """The model's parameters as the kernel takes them. Matrices are packed (``pack``: panels of
    columns, see ``csrc/kernel.cpp``): ``w_x`` [W_ic W_hh]ᵀ (its first C rows, ``w_x[:, :C]``,
    are W_icᵀ alone), ``w_qg`` [2 W_q; W_gh]ᵀ (the query half doubled, as :class:`ConcatScore`
    keeps it), ``w_ohc`` the readout's [h; c] columns transposed, ``w_s`` W_sᵀ, ``enc_w_hh_fwd`` /
    ``enc_w_hh_bwd`` the encoder's W_hhᵀ. ``table``: per target vocabulary entry y, every term of
    the fed-back embedding i = E[y] that does not depend on the recurrence, [W_ie i + b_ih + b_hh
    (4H); W_ge i (G, flexible); W_oi i + b_o (the readout's share, R)], so that a step's feedback
    is one row lookup; ``enc_table`` likewise per source entry x the encoder's input projections
    of both directions, [W_ih_fwd x + b_fwd; W_ih_bwd x + b_bwd] (8H)."""
    ext = extension(required=True)
    dec, att = model.decoder, model.decoder.attention
    w = dec.lstm_weights()
    hidden, ctx = dec.hidden_size, w.context.size(0)
    emb = dec.embed.weight  # V x E
    w_o = dec.W_o.weight  # R x (H + C + E)
    parts = [F.linear(emb, w.feedback, w.bias)]  # V x 4H
    out = {"w_x": ext.pack(torch.cat([w.context, w.hidden], 0).contiguous()),  # (C + H) x 4H
           "v_a": att.scorer.v_a.weight.reshape(-1).contiguous(), "flexible": isinstance(att, FlexibleAttention),
           "w_ohc": ext.pack(w_o[:, :hidden + ctx].t().contiguous()), "readout": w_o.size(0),
           "w_s": ext.pack(dec.W_s.weight.t().contiguous()), "b_s": dec.W_s.bias.contiguous(),
           "vocab": dec.W_s.weight.size(0), "gates": 4 * hidden}
    w_qg = att.scorer.W_q.weight * 2.0  # A x H: 2 W_q, exact
    if out["flexible"]:
        w_g = att.W_g.weight  # G x (H [+ E])
        w_qg = torch.cat([w_qg, w_g[:, :hidden]], 0)  # (A + G) x H
        if att.g_feedback:  # 2017 eq. 8: W_g [h; i] = W_gh h + W_ge i, b_g outside the tanh
            parts.append(F.linear(emb, w_g[:, hidden:]))
            out["b_g"] = float(att.b_g)
        else:  # 2016 eq. 7: the vector bias inside the tanh, the same for every token
            parts.append(att.b_g.expand(emb.size(0), -1))
            out["b_g"] = 0.0
        out["v_g"], out["sigma"] = att.v_g.contiguous(), float(att.sigma)
    else:
        out["v_g"], out["b_g"], out["sigma"] = emb.new_empty(0), 0.0, 1.0
    out["w_qg"] = ext.pack(w_qg.t().contiguous())  # H x (A [+ G])
    parts.append(F.linear(emb, w_o[:, hidden + ctx:], dec.W_o.bias))  # V x R
    out["table"] = torch.cat(parts, 1).contiguous()  # V x (4H [+ G] + R)
    out["readout_at"] = out["table"].size(1) - w_o.size(0)
    rnn = model.encoder.rnn
    out["enc_table"] = F.linear(model.encoder.embed.weight,  # V_src x 8H
                                torch.cat([rnn.weight_ih_l0, rnn.weight_ih_l0_reverse], 0),
                                torch.cat([rnn.bias_ih_l0 + rnn.bias_hh_l0,
                                           rnn.bias_ih_l0_reverse + rnn.bias_hh_l0_reverse])).contiguous()
    out["enc_w_hh_fwd"] = ext.pack(rnn.weight_hh_l0.t().contiguous())  # H x 4H
    out["enc_w_hh_bwd"] = ext.pack(rnn.weight_hh_l0_reverse.t().contiguous())
    return out


def _encode(model, w: dict, src: Tensor, src_len: Tensor):
    """``model.encode`` (:class:`~flexatt.encoders.RecurrentEncoder`, then the decoder's
    ``init_state``) with the bidirectional LSTM in the kernel (``bilstm``: its two directions on
    two threads at once, the input projections looked up per token in ``enc_table``; in eval
    mode the embedding has no dropout, so this is the same computation)."""
    lengths = src_len.long().contiguous()
    states = extension(required=True).bilstm(src.long().contiguous(), lengths, w["enc_table"],
                                              w["enc_w_hh_fwd"], w["enc_w_hh_bwd"])
    return model.decoder.init_state(model.encoder.output(states, lengths))


class PhaseTimer:
    """``with PhaseTimer() as timer:`` makes every forced decoding by the kernel inside the block time
    its phases (in the kernel, with a steady clock at each phase boundary): ``timer.attention_s``
    (the query products, g_t, the span, scores, softmax, c_t, p_t) and ``timer.lstm_s``."""

    def __init__(self):
        self.attention_s = self.lstm_s = 0.0
        self.calls = self.steps = 0

    def __enter__(self) -> "PhaseTimer":
        _state["timer"] = self
        return self

    def __exit__(self, *exc) -> None:
        _state.pop("timer", None)


def forced_decode(model, src: Tensor, src_len: Tensor, tgt_in: Tensor, tgt_out: Tensor,
                  lengths: Tensor, tau: float) -> dict:
    """Forced decoding of a batch with the kernel: ``lengths`` (batch, long) forced steps
    per sentence. Returns ``log_probs`` batch (log p(reference | source) over those steps),
    ``attention`` batch x T x S and per step (batch x T): ``window``, ``span_lo``, ``span_hi``,
    ``position`` (p_t) and ``g`` (``None`` for global), zeros past each sentence's end.
    The caller (:meth:`KernelStepper.forced`) is selected only where :func:`unsupported` allows."""
    ext = extension(required=True)
    w = _weights(model)
    flexible = w["flexible"]
    small = src.size(0) <= SMALL_BATCH
    cache, state = _encode(model, w, src, src_len)
    values = cache.values.contiguous()
    # a few rows: W_ic hbar_s once per sentence, summed over the span at each step
    ctx_gates = (ext.linear(values.view(-1, values.size(-1)), w["w_x"][:, :values.size(-1)], w["gates"],
                            values.new_empty(0))
                 .view(values.size(0), values.size(1), -1) if small else values.new_empty(0))
    timer: Optional[PhaseTimer] = _state.get("timer")  # type: ignore[assignment]
    lengths = lengths.long().contiguous()
    tgt_in = tgt_in[:, : max(int(lengths.max()), 1)].long().contiguous()
    hc, rows_b, rows_t, attention, window, span_lo, span_hi, position, g, phases = ext.forced_decode(
        cache.keys.contiguous(), values, cache.lengths.long().contiguous(), lengths,
        state.hidden.contiguous(), state.cell.contiguous(), tgt_in, w["table"], w["w_x"], w["w_qg"],
        w["v_a"], w["v_g"], w["b_g"], w["sigma"], float(tau), flexible, ctx_gates,
        timer is not None)
    if timer is not None:
        timer.attention_s += float(phases[0])
        timer.lstm_s += float(phases[1])
        timer.calls += 1
        timer.steps += int(lengths.sum())
    # the readout does not feed back: one product over the decoded steps (hc's rows), as in
    # teacher forcing; o_t = tanh(W_o [h_t; c_t; i_t] + b_o) with the i_t share looked up
    fed = w["table"].narrow(1, w["readout_at"], w["readout"]).index_select(0, tgt_in[rows_b, rows_t])
    o = torch.tanh(ext.linear(hc, w["w_ohc"], w["readout"], fed))
    logits = ext.linear(o, w["w_s"], w["vocab"], w["b_s"])  # N x V
    token_lp = ext.gold_log_probs(logits, tgt_out[rows_b, rows_t].long().contiguous())  # N
    log_probs = token_lp.new_zeros(src.size(0)).index_add_(0, rows_b, token_lp)
    return {"log_probs": log_probs, "attention": attention, "window": window, "span_lo": span_lo,
            "span_hi": span_hi, "position": position, "g": g if flexible else None}


class KernelStepper:
    """:class:`~flexatt.decoding.stepper.Stepper` of ``model`` (:func:`unsupported` allows it) with
    the compiled step: ``decode_step`` runs the attention of every row (``attend_row``, the loop
    of :meth:`forced` too, so greedy, beam and forced decoding share one implementation of the
    equations) and the LSTM in one call, then the readout with the kernel's products; the
    fed-back token's terms are table lookups (:func:`_arrange`). Each row reads its sentence's
    keys and h̄ from the per-sentence cache (:class:`~flexatt.attention.RowMap`: a reorder copies
    N longs).

    The kernel rounds differently from PyTorch's operators (its own products and exponentials),
    so scores agree with the eager step's within float32 rounding rather than bit for bit; spans
    and windows are computed by the same float32 operations (``tests/test_decoding_contract.py``)."""

    name = "kernel"
    unsupported = staticmethod(unsupported)

    def __init__(self, model):
        self.model = model
        self.ext = extension(required=True)
        self.w = _weights(model)

    def encode(self, src: Tensor, src_len: Tensor):
        """:meth:`flexatt.model.Seq2Seq.encode` with the kernel's encoder; one row per sentence."""
        cache, state = _encode(self.model, self.w, src, src_len)
        base = AttentionCache(cache.keys.contiguous(), cache.values.contiguous(), cache.mask,
                              cache.lengths.long().contiguous())
        return base.by_row(), state

    def decode_step(self, prev_tokens: Tensor, state: DecoderState, cache,
                    tau: float) -> tuple[Tensor, DecoderState, Tensor, AttentionStats]:
        """prev_tokens N -> logits N x V, the new state, weights N x S, stats (as the model's step)."""
        w = self.w
        base, tokens = cache.base, prev_tokens.long().contiguous()
        hc, cell, weights, window, lo, hi, p_t, g = self.ext.decode_step(
            base.keys, base.values, base.lengths, cache.rows.contiguous(), state.hidden, state.cell.contiguous(),
            state.attention.position.contiguous(), tokens, w["table"], w["w_x"], w["w_qg"], w["v_a"], w["v_g"],
            w["b_g"], w["sigma"], float(tau), w["flexible"])
        # o_t = tanh(W_o [h_t; c_t; i_t] + b_o) with the i_t share looked up; logits = W_s o_t + b_s
        fed = w["table"].narrow(1, w["readout_at"], w["readout"]).index_select(0, tokens)
        logits = self.ext.linear(torch.tanh(self.ext.linear(hc, w["w_ohc"], w["readout"], fed)), w["w_s"],
                                 w["vocab"], w["b_s"])  # N x V
        hidden = state.hidden.size(1)
        new_state = DecoderState(hc[:, :hidden], cell,
                                 AttentionState(p_t, hc[:, hidden:], state.attention.step + 1))
        return logits, new_state, weights, AttentionStats(window, lo, hi, p_t, g=g if w["flexible"] else None)

    def candidates(self, logits: Tensor, row_score: Tensor, starts: Tensor, counts: Tensor, k: int,
                   n: int) -> tuple[Tensor, Tensor]:
        """The kernel's ``beam_candidates``: the log-softmax and the top ``n`` of each sentence in
        one pass over the logits (the N x V log-probabilities are not written)."""
        return self.ext.beam_candidates(logits, row_score.float().contiguous(), starts.contiguous(),
                                        counts.contiguous(), n)

    def forced(self, src: Tensor, src_len: Tensor, tgt_in: Tensor, tgt_out: Tensor, lengths: Tensor,
               tau: float) -> dict:
        """The whole forced recurrence in one call (:func:`forced_decode`)."""
        return forced_decode(self.model, src, src_len, tgt_in, tgt_out, lengths, tau)

"""Shared helpers of the decoding benchmarks (``decode_speed.py``, ``beam_speed.py``).

* the models to compare: global attention and the fine-tuned flexible model at its selected τ,
  at subword level (the pipeline's checkpoints) or at character level (:func:`char_setting`:
  the char profile's run, ``make char``);
* side-by-side timing statistics (median and min–max spread over rounds);
* :class:`AttentionTimer`, which times the attention module's own calls inside a decode.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from flexatt.data.batching import Batch, LengthGroupedBatches, ParallelData, collate
from flexatt.data.subwords import EncodedSplit
from flexatt.decoding.kernel import PhaseTimer
from flexatt.runtime import CPUINFO, native_cpu_bf16, tune_allocator

ROOT = Path(__file__).resolve().parent.parent

#: benchmarks run flexatt as its stages do, with the C allocator tuned for large tensors
#: (``flexatt.runtime``; ``FLEXATT_ALLOCATOR=default`` turns it off)
ALLOCATOR_TUNED = tune_allocator()

CHAR_RUN = Path("artifacts/char")  # the char profile's models and data (make char: pipelines/char/)
CHAR_RESULTS = Path("results/char")  # its results
SUBWORD_CKPTS = {"global": Path("artifacts/models/global/best.ckpt"),
                 "flexible_ft": Path("artifacts/models_ft/flexible/best.ckpt")}


def machine() -> dict:
    """What the figures were measured on: the CPU's model name (``/proc/cpuinfo``, where there is
    one), logical cores, the SIMD level PyTorch dispatches to, whether bf16 products are native
    (:func:`flexatt.runtime.native_cpu_bf16`), torch's version and threads."""
    model = None
    try:
        with open(CPUINFO, encoding="utf-8", errors="replace") as handle:
            model = next((line.split(":", 1)[1].strip() for line in handle if line.startswith("model name")), None)
    except OSError:
        pass
    return {"cpu": model, "logical_cores": os.cpu_count(), "simd": torch.backends.cpu.get_cpu_capability(),
            "native_bf16": native_cpu_bf16(), "torch": torch.__version__, "threads": torch.get_num_threads()}


# --------------------------------------------------------------------------------------
# statistics and batches
# --------------------------------------------------------------------------------------
def med(values: list[float]) -> float:
    return statistics.median(values)


def spread(values: list[float], fmt: str = "{:.2f}") -> str:
    return f"{fmt.format(min(values))}–{fmt.format(max(values))}"


def rotated(items: list, shift: int) -> list:
    shift %= len(items)
    return items[shift:] + items[:shift]


def first_batches(split: EncodedSplit, n: int, batch_size: int) -> list[Batch]:
    """The first ``n`` pairs of ``split``: one batch per pair (``batch_size`` 1, in order) or
    length-grouped batches as ``flexatt.decoding.translate.translate_split`` makes them."""
    data = ParallelData(split)
    n = min(n, len(split))
    if batch_size == 1:
        return [collate([data[i]]) for i in range(n)]
    sub = list(range(n))
    sampler = LengthGroupedBatches(split.src_lengths[:n], split.tgt_lengths[:n], batch_size, shuffle=False)
    return [collate([data[sub[i]] for i in idx]) for idx in sampler]


def busy_cores(seconds: float = 1.0) -> float:
    """Cores kept busy by other processes over the next ``seconds`` (from ``/proc/stat``; this
    process is idle meanwhile). The load average would also count the benchmark that ran just
    before, so it is not used."""
    def sample() -> tuple[int, int]:
        with open("/proc/stat") as handle:
            fields = [int(x) for x in handle.readline().split()[1:]]
        idle = fields[3] + fields[4]  # idle + iowait
        return sum(fields) - idle, sum(fields)

    busy0, total0 = sample()
    time.sleep(seconds)
    busy1, total1 = sample()
    return (busy1 - busy0) / max(total1 - total0, 1) * (os.cpu_count() or 1)


def warn_if_busy(threads: int) -> None:
    """Intra-op threads on a machine whose cores are busy with other processes stall at every
    OpenMP barrier (here: 2 threads next to one busy process made batch-1 decoding 10-100x
    slower); say so when other processes leave fewer idle cores than ``threads``."""
    cores = os.cpu_count() or 1
    try:
        busy = busy_cores()
    except OSError:  # no /proc
        return
    if threads > 1 and busy > cores - threads + 0.3:
        print(f"warning: other processes keep {busy:.1f} of {cores} cores busy, and {threads} intra-op "
              f"threads stall on them; the figures will be unreliable (use --threads 1 on a shared "
              f"machine)", flush=True)


#: ``trainer.precision`` values that mean plain float32
FP32 = ("32-true", "32")


def precision_context(precision: str):
    """The autocast Lightning's Trainer puts around a training step for ``trainer.precision``
    (``bf16-mixed``: bfloat16 autocast; ``32-true``: none)."""
    if str(precision) in ("bf16-mixed", "bf16"):
        return torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=False)  # as Lightning
    if str(precision) in FP32:
        return contextlib.nullcontext()
    raise ValueError(f"precision {precision!r}: the benchmarks time 32-true and bf16-mixed")


def training_round(model, opt, batches: list[Batch], clip: float, precision: str = "32-true") -> float:
    """Seconds for one full training step per batch, as the trainer does it: teacher-forced
    forward and ``sequence_nll`` (under ``precision``'s autocast, as Lightning runs its
    ``training_step``), ``zero_grad``, backward, ``clip_grad_norm_(clip)``, ``opt.step()``."""
    from flexatt.data.subwords import PAD_ID
    from flexatt.model import sequence_nll

    started = time.perf_counter()
    for b in batches:
        with precision_context(precision):
            logits, _ = model(b.src, b.src_len, b.tgt_in)
            loss = sequence_nll(logits, b.tgt_out, b.tgt_out != PAD_ID)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
    return time.perf_counter() - started


def fmt_tau(tau: float) -> str:
    return "inf" if math.isinf(tau) else f"{tau:g}"


# --------------------------------------------------------------------------------------
# attention timing
# --------------------------------------------------------------------------------------
class AttentionTimer:
    """Wall time spent inside the attention module while decoding.

    Forced decoding takes the kernel (:mod:`flexatt.decoding.kernel`) where it applies; its attention
    runs inside one compiled call, which times its own phases (:class:`flexatt.decoding.kernel.PhaseTimer`,
    entered with this timer): :attr:`attention_s` and :attr:`steps` add both.

    Shadows ``model.decoder.attention.forward`` (one decoding step of the attention: g_t,
    vision span, scoring, softmax, context; called through ``nn.Module.__call__``) and
    ``.precompute`` (the per-sentence key projection U_k h̄) with wrappers that add up
    ``time.perf_counter()`` differences. On the CPU every op runs synchronously, so this is the
    time the attention code takes, Python overhead included; the wrappers cost two clock reads
    per call. ``record=True`` also opens a ``torch.profiler.record_function`` range per call.
    """

    def __init__(self, model, record: bool = False):
        self.att = model.decoder.attention
        self.record = record
        self.step_s = self.pre_s = 0.0
        self.calls = 0
        self.kernel = PhaseTimer()

    @property
    def attention_s(self) -> float:
        """Attention steps, eager (this wrapper) and the kernel's own phase clock."""
        return self.step_s + self.kernel.attention_s

    @property
    def steps(self) -> int:
        """Attention steps (per sentence) timed, eager and kernel."""
        return self.calls + self.kernel.steps

    def __enter__(self) -> "AttentionTimer":
        self.kernel.__enter__()
        att, fwd, pre = self.att, self.att.forward, self.att.precompute
        clock = time.perf_counter

        def timed(fn, label: str, total: str, count: bool):
            def wrapper(*args, **kwargs):
                t0 = clock()
                if self.record:
                    with torch.profiler.record_function(label):
                        out = fn(*args, **kwargs)
                else:
                    out = fn(*args, **kwargs)
                setattr(self, total, getattr(self, total) + clock() - t0)
                self.calls += count
                return out
            return wrapper

        forward = timed(fwd, "attention.step", "step_s", count=True)
        precompute = timed(pre, "attention.precompute", "pre_s", count=False)
        att.forward, att.precompute = forward, precompute
        return self

    def __exit__(self, *exc) -> None:
        self.kernel.__exit__(*exc)
        del self.att.forward
        del self.att.precompute


class KernelCallTimer:
    """Where the compiled step's time goes in greedy and beam search. Inside ``with
    KernelCallTimer() as timer:``, every :class:`flexatt.decoding.kernel.KernelStepper` times its
    calls (``time.perf_counter`` around each; on the CPU they run synchronously) into
    ``seconds``: ``encoder`` (``encode``: the kernel's bi-LSTM, the key projection, the cache),
    ``attention + LSTM`` (the kernel's ``decode_step``: every row's attention and the LSTM),
    ``readout`` (its two products, ``linear``: o_t and the output layer) and ``candidates``
    (``candidates``: the log-softmax and each sentence's top 2k; beam search only).
    ``rows`` counts the decoding rows (N summed over the steps). What the search's total time
    leaves over is its own bookkeeping (Python and PyTorch operators: the tanh of o_t, the
    reorder of rows, finished hypotheses)."""

    EXT_CALLS = {"decode_step": "attention + LSTM", "linear": "readout"}
    METHODS = {"encode": "encoder", "candidates": "candidates"}

    def __init__(self):
        self.seconds = dict.fromkeys(("encoder", "attention + LSTM", "readout", "candidates"), 0.0)
        self.rows = 0
        self._saved: dict = {}

    def _timed(self, fn, part: str, count_rows: bool = False):
        clock = time.perf_counter

        def wrapper(*args, **kwargs):
            t0 = clock()
            out = fn(*args, **kwargs)
            self.seconds[part] += clock() - t0
            if count_rows:  # decode_step(keys, values, src_len, sent, ...): one row per entry of sent
                self.rows += args[3].numel()
            return out
        return wrapper

    def __enter__(self) -> "KernelCallTimer":
        from flexatt.decoding.kernel import KernelStepper as KernelDecoder

        timer = self
        saved = self._saved = {name: KernelDecoder.__dict__[name] for name in ("__init__", *self.METHODS)}

        class TimedExtension:  # the compiled module with its step and product timed
            def __init__(self, ext):
                self.ext = ext

            def __getattr__(self, name):
                fn = getattr(self.ext, name)
                part = KernelCallTimer.EXT_CALLS.get(name)
                return fn if part is None else timer._timed(fn, part, count_rows=name == "decode_step")

        def init(decoder, model):
            saved["__init__"](decoder, model)
            decoder.ext = TimedExtension(decoder.ext)

        KernelDecoder.__init__ = init
        for name, part in self.METHODS.items():
            setattr(KernelDecoder, name, self._timed(saved[name], part))
        return self

    def __exit__(self, *exc) -> None:
        from flexatt.decoding.kernel import KernelStepper as KernelDecoder

        for name, fn in self._saved.items():
            setattr(KernelDecoder, name, fn)


# --------------------------------------------------------------------------------------
# τ
# --------------------------------------------------------------------------------------
def read_selected_tau(path: Path, model: str = "flexible_ft") -> float:
    """``models.<model>.selected_tau`` of a sweep_tau result (``inf``: τ = ∞ was kept)."""
    if not path.is_file():
        raise SystemExit(f"error: {path}: not found (run the pipeline's sweep_tau stage, or pass --tau)")
    data = json.loads(path.read_text())
    try:
        tau = data["models"][model]["selected_tau"]
    except KeyError as exc:
        raise SystemExit(f"error: {path}: no models.{model}.selected_tau") from exc
    return math.inf if tau is None else float(tau)


def check_files(*paths: Path) -> None:
    missing = [str(p) for p in paths if not Path(p).is_file()]
    if missing:
        raise SystemExit("error: missing " + ", ".join(missing) + " (run the default pipeline: dvc repro)")


# --------------------------------------------------------------------------------------
# the character-level setting
# --------------------------------------------------------------------------------------
@dataclass
class CharSetting:
    """The char profile's run (``conf/profile/char.yaml``): its data, models, selected τ and
    the dev/test BLEU it reached."""
    tok_dir: Path
    checkpoints: dict[str, Path]  # global, flexible_ft
    tau: float | None
    sweep_file: Path
    dev_bleu: dict[str, float]    # the best dev BLEU of training / fine-tuning, per model
    test_bleu: dict[str, float]   # Table 1 of the char run (results/metrics.json), per row


def char_setting(run: Path = CHAR_RUN, results: Path = CHAR_RESULTS) -> CharSetting:
    """The character-level models: the char profile's pipeline (``pipelines/char/``, ``make
    char``), its outputs in ``run`` and its results in ``results``. Exits with that command when
    the run is not there."""
    tok_dir = run / "tok"
    ckpts = {"global": run / "models/global/best.ckpt",
             "flexible_ft": run / "models_ft/flexible/best.ckpt"}
    sweep = results / "sweep_tau.json"
    metrics = results / "metrics.json"
    missing = [str(p) for p in (*ckpts.values(), tok_dir / "test.npz", sweep, metrics) if not p.is_file()]
    if missing:
        raise SystemExit(f"error: the char profile's run is not in {run} (missing {', '.join(missing)}): "
                         f"run `make char` first (about 2.5 hours on 2 cores)")
    dev = {}
    for name, path in (("global", results / "train/global.json"),
                       ("flexible", results / "train/flexible.json"),
                       ("flexible_ft", results / "finetune/flexible.json")):
        if path.is_file():
            dev[name] = json.loads(path.read_text()).get("dev_bleu")
    rows = json.loads(metrics.read_text())["models"]
    return CharSetting(tok_dir, ckpts, read_selected_tau(sweep), sweep, dev,
                       {row: m["bleu"] for row, m in rows.items()})


def worktree(commit: str, prefix: str) -> Path:
    """A git worktree of ``commit`` in ``artifacts/bench/<prefix>-<short sha>`` (made once): the
    baseline a benchmark runs side by side with this working tree."""
    import subprocess

    sha = subprocess.run(["git", "rev-parse", "--short", commit], cwd=ROOT, check=True, capture_output=True,
                         text=True).stdout.strip()
    tree = ROOT / "artifacts/bench" / f"{prefix}-{sha}"
    if not tree.is_dir():
        tree.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["git", "worktree", "add", "--detach", str(tree), sha], cwd=ROOT, check=True,
                       capture_output=True)
    return tree

"""Shared helpers of the decoding benchmarks (``decode_speed.py``, ``beam_speed.py``).

* the models to compare: global attention and the fine-tuned flexible model at its selected τ,
  at subword level (the pipeline's checkpoints) or at character level (:func:`prepare_char`,
  a small-budget setting this module builds and caches under ``artifacts/bench/char/``);
* side-by-side timing statistics (median and min–max spread over rounds);
* :class:`AttentionTimer`, which times the attention module's own calls inside a decode.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from flexatt.data.batching import Batch, LengthGroupedBatches, ParallelData, collate
from flexatt.data.subwords import EncodedSplit
from flexatt.fused import PhaseTimer
from flexatt.runtime import CPUINFO, native_cpu_bf16, tune_allocator

ROOT = Path(__file__).resolve().parent.parent

#: benchmarks run flexatt as its stages do, with the C allocator tuned for large tensors
#: (``flexatt.runtime``; ``FLEXATT_ALLOCATOR=default`` turns it off)
ALLOCATOR_TUNED = tune_allocator()

CHAR_ROOT = Path("artifacts/bench/char")
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
    length-grouped batches as ``flexatt.evaluation.translate_split`` makes them."""
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


def fmt_tau(tau: float | None) -> str:
    return "inf" if tau is None else f"{tau:g}"


# --------------------------------------------------------------------------------------
# attention timing
# --------------------------------------------------------------------------------------
class AttentionTimer:
    """Wall time spent inside the attention module while decoding.

    Forced decoding takes the fused path (:mod:`flexatt.fused`) where it applies; its attention
    runs inside one compiled call, which times its own phases (:class:`flexatt.fused.PhaseTimer`,
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
        self.fused = PhaseTimer()

    @property
    def attention_s(self) -> float:
        """Attention steps, eager (this wrapper) and fused (the kernel's own phase clock)."""
        return self.step_s + self.fused.attention_s

    @property
    def steps(self) -> int:
        """Attention steps (per sentence) timed, eager and fused."""
        return self.calls + self.fused.steps

    def __enter__(self) -> "AttentionTimer":
        self.fused.__enter__()
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
        self.fused.__exit__(*exc)
        del self.att.forward
        del self.att.precompute


# --------------------------------------------------------------------------------------
# τ
# --------------------------------------------------------------------------------------
def read_selected_tau(path: Path, model: str = "flexible_ft") -> float | None:
    """``models.<model>.selected_tau`` of a sweep_tau result (``None``: τ = ∞ was kept)."""
    if not path.is_file():
        raise SystemExit(f"error: {path}: not found (run the pipeline's sweep_tau stage, or pass --tau)")
    data = json.loads(path.read_text())
    try:
        tau = data["models"][model]["selected_tau"]
    except KeyError as exc:
        raise SystemExit(f"error: {path}: no models.{model}.selected_tau") from exc
    return None if tau is None or math.isinf(float(tau)) else float(tau)


def check_files(*paths: Path) -> None:
    missing = [str(p) for p in paths if not Path(p).is_file()]
    if missing:
        raise SystemExit("error: missing " + ", ".join(missing) + " (run the default pipeline: dvc repro)")


# --------------------------------------------------------------------------------------
# the character-level setting
# --------------------------------------------------------------------------------------
@dataclass
class CharSetting:
    tok_dir: Path
    checkpoints: dict[str, Path]  # global, flexible_ft
    tau: float | None
    info: dict


def _bench_cfg(cfg: DictConfig, root: Path, fraction: float) -> DictConfig:
    """The params for the char setting: the pipeline's model, train and finetune settings, on
    ``root/tok``, with W&B off, no progress bar and ``fraction`` of the training batches."""
    cfg = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))  # a plain copy, not in struct mode
    cfg.train.data_dir = str(root / "tok")
    cfg.logger.enabled = False
    cfg.logger.log_checkpoint = False
    cfg.trainer.enable_progress_bar = False
    cfg.trainer.enable_model_summary = False
    cfg.trainer.limit_train_batches = float(fraction) if fraction < 1 else 1.0
    return cfg


def _subset(src: Path, dest: Path, n: int | None) -> None:
    lines = src.read_text(encoding="utf-8").split("\n")[:-1]
    dest.write_text("".join(line + "\n" for line in (lines if n is None else lines[:n])), encoding="utf-8")


def _digest(path: Path) -> str:
    import hashlib
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def prepare_char(cfg: DictConfig, *, root: Path = CHAR_ROOT, filter_dir: Path = Path("artifacts/filter"),
                 retrain: bool = False, dev_size: int = 300, train_fraction: float = 0.5,
                 ft_fraction: float = 0.25, log=print) -> CharSetting:
    """Build (or reuse) the character-level setting of the 2017 paper's Table 2, small budget.

    1. ``root/filter``: the pipeline's filtered train and test pairs, the first ``dev_size`` dev pairs;
    2. ``root/tok``: the tokenize stage with ``tokenize.model_type=char`` (joint SentencePiece
       char model, the pipeline's settings otherwise);
    3. ``root/models/{global,flexible}``: ``flexatt.trainer.train`` for one epoch limited to
       ``train_fraction`` of the batches (Lightning ``limit_train_batches``), the model sizes of
       ``params.yaml``;
    4. ``root/models_ft/flexible``: fine-tuning with J = CE − β·mean g_t (``finetune.beta``,
       ``finetune.lr``) on ``ft_fraction`` of an epoch;
    5. ``root/sweep_tau.json``: τ selected on the dev subset as the sweep_tau stage does
       (beam search with ``decode.*``, ``sweep_tau.grid`` + log S̄, ``select_tau`` with
       ``sweep_tau.tolerance``).

    Each step is skipped when its output exists (``retrain``: everything is rebuilt).
    ``root/prep.json`` records the settings and the minutes each step took.
    """
    from flexatt.evaluation import EvalSet, select_tau, translate_split
    from flexatt.metrics import corpus_bleu
    from flexatt.evaluation import decode_settings
    from flexatt.trainer import train

    settings = {"dev_size": dev_size, "train_fraction": train_fraction, "ft_fraction": ft_fraction,
                "model": OmegaConf.to_container(cfg.model, resolve=True),
                "filter_train": _digest(filter_dir / "train.src")[:8] + _digest(filter_dir / "train.tgt")[:8]}
    prep_file = root / "prep.json"
    info = json.loads(prep_file.read_text()) if prep_file.is_file() and not retrain else {}
    if info and info.get("settings") != settings:
        if info.get("settings", {}).get("filter_train") != settings["filter_train"]:
            log("char setting: the filtered training data changed since the cache was built: rebuilding")
            retrain = True
        else:
            log(f"char setting: reusing the cache built with {info.get('settings')} "
                f"(pass --retrain to rebuild with the settings asked for now)")
    if retrain:
        shutil.rmtree(root, ignore_errors=True)
        info = {}
    root.mkdir(parents=True, exist_ok=True)
    info.setdefault("settings", settings)
    minutes = info.setdefault("minutes", {})

    def save() -> None:
        prep_file.write_text(json.dumps(info, indent=2) + "\n")

    def step(name: str, done: bool, fn) -> None:
        if done:
            return
        log(f"char setting: {name} ...")
        t0 = time.perf_counter()
        fn()
        minutes[name] = round((time.perf_counter() - t0) / 60, 2)
        log(f"char setting: {name} done in {minutes[name]:.1f} min")
        save()

    tok_dir = root / "tok"
    fdir = root / "filter"

    def make_filter() -> None:
        tmp = root / "filter.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        for split, n in (("train", None), ("dev", dev_size), ("test", None)):
            for side in ("src", "tgt", "ref2"):
                if (filter_dir / f"{split}.{side}").is_file():
                    _subset(filter_dir / f"{split}.{side}", tmp / f"{split}.{side}", n)
        shutil.rmtree(fdir, ignore_errors=True)
        tmp.rename(fdir)

    step("filter", (fdir / "test.tgt").is_file(), make_filter)

    def make_tok() -> None:  # the stage itself, as DVC runs it, with the pipeline's other tokenize params
        subprocess.run([sys.executable, "-m", "flexatt.stages.tokenize", f"tokenize.in_dir={fdir.resolve()}",
                        f"tokenize.out_dir={tok_dir.resolve()}", "tokenize.model_type=char", "tokenize.metrics_file=null"],
                       cwd=ROOT, check=True)

    step("tokenize", (tok_dir / "stats.json").is_file(), make_tok)

    ckpt = {"global": root / "models/global/best.ckpt", "flexible": root / "models/flexible/best.ckpt",
            "flexible_ft": root / "models_ft/flexible/best.ckpt"}
    for variant in ("global", "flexible"):
        def fit(variant=variant) -> None:
            metrics, _ = train(_bench_cfg(cfg, root, train_fraction), variant, out_dir=str(root / "models"),
                               epochs=1, metrics_file=root / "metrics" / f"{variant}.json")
            info[f"train_{variant}"] = metrics
        step(f"train {variant}", ckpt[variant].is_file(), fit)

    def finetune() -> None:
        metrics, _ = train(_bench_cfg(cfg, root, ft_fraction), "flexible", out_dir=str(root / "models_ft"),
                           epochs=1, lr=float(cfg.finetune.lr), beta=float(cfg.finetune.beta),
                           init_from=ckpt["flexible"], metrics_file=root / "metrics" / "flexible_ft.json",
                           job_type="finetune")
        info["finetune_flexible"] = metrics

    step("finetune flexible", ckpt["flexible_ft"].is_file(), finetune)

    sweep_file = root / "sweep_tau.json"

    def sweep() -> None:
        from flexatt.evaluation import load_model

        dcfg = _bench_cfg(cfg, root, 1.0)
        dev = EvalSet.load(tok_dir, "dev")
        decode = decode_settings(dcfg)
        grid = sorted({float(t) for t in dcfg.sweep_tau.grid})
        log_mean = round(math.log(dev.mean_src_len), 3)
        if dcfg.sweep_tau.add_log_mean_len and log_mean not in grid:
            grid = sorted([*grid, log_mean])
        model = load_model(ckpt["flexible_ft"])

        def point(tau: float | None) -> dict:
            out = translate_split(model, dev.split, dev.tgt_vocab, tau=tau, **decode)
            bleu, _ = corpus_bleu(out.hypotheses, [dev.references])
            p = {"tau": tau, "window": round(out.mean_window, 3), "bleu": round(bleu, 2)}
            log(f"  flexible_ft (char) dev tau={fmt_tau(tau):8s} window {p['window']:7.2f} BLEU {p['bleu']:6.2f}")
            return p

        reference = point(None)
        points = [point(t) for t in grid]
        chosen = select_tau(points, reference["bleu"], float(dcfg.sweep_tau.tolerance))
        sweep_file.write_text(json.dumps({
            "log_mean_src_len": log_mean, "grid": grid, "tolerance": float(dcfg.sweep_tau.tolerance),
            "dev_size": len(dev.split), "beam_size": decode["beam_size"],
            "models": {"flexible_ft": {"inf": reference, "points": points, "selected": chosen,
                                       "selected_tau": chosen["tau"] if chosen else None}}}, indent=2) + "\n")

    step("select tau", sweep_file.is_file(), sweep)
    save()
    return CharSetting(tok_dir, {"global": ckpt["global"], "flexible_ft": ckpt["flexible_ft"]},
                       read_selected_tau(sweep_file), info)


@contextmanager
def quiet_lightning():
    """Lightning's INFO lines (GPU available, ...) off while the char setting trains."""
    import logging

    loggers = [logging.getLogger(n) for n in ("pytorch_lightning", "lightning", "lightning.pytorch",
                                              "lightning_fabric")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.WARNING)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)

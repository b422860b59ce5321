"""Training throughput of every attention variant at the default profile's sizes.

    python benchmarks/train_throughput.py                 # params.yaml's model sizes, real data
    python benchmarks/train_throughput.py --batches 20 --rounds 5 --threads 2
    python benchmarks/train_throughput.py --variants global flexible --batch-sizes 64 128 256

Measures target tokens per second of full training steps (teacher-forced forward, backward,
gradient clipping, Adam) on real batches of the encoded training split (``train.data_dir``), the
same batches for every variant, at ``trainer.precision`` as training resolves it (``auto``:
see ``flexatt.runtime.resolve_precision``; bf16-mixed: the readout under bfloat16
autocast, as the Lightning Trainer runs it; see ``flexatt.decoders``). The variants given by
``--fp32-variants`` (default: global and flexible) are also measured at 32-true, so the
precision's share of the speed shows in the same run. All are measured side by side: each round
times every contender once, in a rotating order, so that load from elsewhere on the machine spreads over all
of them; the figures are the median over rounds and the spread (min–max). Minutes per epoch
are extrapolated from the median to the split's full token count.

``--profile`` shows instead where a step's time goes (torch.profiler): the output layer's
products, the log-softmax over the vocabulary, the encoder LSTM, Adam, dropout, and the rest
(the decoder's step loop).

``--compile`` measures each variant's step as it is (eager) against the same step with the
decoder's per-step recurrence (``Seq2Seq.decoder._recur``: attention and the LSTM cell) compiled
by ``torch.compile`` (inductor, dynamic shapes), side by side: what a compiled decoder step would
give training. Compilation happens in the warm-up, over every batch, so the rounds time compiled code.

``--batch-sizes`` measures the variants at several batch sizes instead (at the resolved
precision), each on as many pairs as ``--batches`` batches of ``train.batch_size`` hold, side by
side in rotating rounds: how much of an epoch's time a larger batch saves on this CPU.

``--concurrent N`` measures instead one training process with ``--threads`` threads against N
processes of ``--threads``/N threads each (at least one: N above ``--threads`` oversubscribes the
cores, as a joblib sweep of more jobs than cores does), training at once (started together every
round), in rotating rounds: whether trainings side by side (``dvc queue start -j 2``, a joblib
sweep) finish more work per hour than one after the other with every thread.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

from flexatt.config import load_params
from flexatt.data.batching import LengthGroupedBatches, ParallelData, collate
from flexatt.data.subwords import PAD_ID, EncodedSplit, Vocab
from flexatt.model import build_model
from flexatt.runtime import resolve_precision
from flexatt.trainer import model_config

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import FP32, training_round  # noqa: E402


def training_split(cfg) -> tuple[EncodedSplit, ParallelData, tuple[int, int]]:
    """The encoded training split of ``train.data_dir``, its pairs, and the (source, target) vocabulary sizes."""
    tok_dir = Path(cfg.train.data_dir)
    split = EncodedSplit.load(tok_dir / "train.npz")
    return split, ParallelData(split), (len(Vocab(tok_dir / "src.model")), len(Vocab(tok_dir / "tgt.model")))


def first_batches(split: EncodedSplit, data: ParallelData, batch_size: int, n: int) -> list:
    """The first ``n`` length-grouped batches of ``batch_size`` pairs (seed 0), as training draws them."""
    sampler = LengthGroupedBatches(split.src_lengths, split.tgt_lengths, batch_size, seed=0)
    return [collate([data[i] for i in idx]) for idx in list(sampler)[:n]]


def rotating_rounds(contenders: list, step, rounds: int) -> dict:
    """Each contender's figures over ``rounds`` rounds, every round measuring all of them, the
    first of a round moving by one each time, so that the machine's drift falls on all alike."""
    rates: dict = {c: [] for c in contenders}
    for r in range(rounds):
        for c in contenders[r % len(contenders):] + contenders[:r % len(contenders)]:
            rates[c].append(step(c))
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--batches", type=int, default=15, help="training steps per measurement")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--variants", nargs="*", help="default: every key of `variants`")
    parser.add_argument("--precision", help="default: trainer.precision of --params")
    parser.add_argument("--fp32-variants", nargs="*", default=["global", "flexible"],
                        help="also time these at 32-true (none: skip)")
    parser.add_argument("--batch-sizes", nargs="*", type=int,
                        help="measure these batch sizes (same pairs per measurement) instead of precisions")
    parser.add_argument("--profile", action="store_true",
                        help="instead of timing: where a training step's time goes (torch.profiler), per variant")
    parser.add_argument("--compile", action="store_true",
                        help="instead: eager against a torch.compile'd decoder step recurrence, per variant")
    parser.add_argument("--concurrent", type=int, metavar="N",
                        help="instead: one process of --threads threads against N processes of --threads/N (>= 1) at once")
    args = parser.parse_args()
    if args.concurrent:
        return concurrency(args)
    if args.compile:
        return compiled_step(args)
    if args.batch_sizes:
        return batch_size_scaling(args)
    if args.profile:
        return profile_parts(args)

    torch.set_num_threads(args.threads)
    cfg = load_params(args.params)
    split, data, vocab_size = training_split(cfg)
    batches = first_batches(split, data, cfg.train.batch_size, args.batches)
    tokens = sum(b.n_tgt_tokens for b in batches)
    epoch_tokens = int(split.tgt_lengths.sum()) + len(split)

    variants = args.variants or list(cfg.variants)
    precision, reason = resolve_precision(args.precision or cfg.trainer.precision, str(cfg.trainer.accelerator))
    precision = str(precision)
    print(f"precision {precision} ({reason})")
    contenders = [(v, precision) for v in variants]
    if precision not in FP32:
        contenders += [(v, "32-true") for v in args.fp32_variants if v in cfg.variants]
    models = {}
    for v, p in contenders:
        torch.manual_seed(0)
        model = build_model(model_config(cfg, v), *vocab_size, PAD_ID).train()
        models[v, p] = (model, torch.optim.Adam(model.parameters(), lr=1e-3))

    def step(c: tuple[str, str]) -> float:
        return tokens / training_round(*models[c], batches, float(cfg.trainer.gradient_clip_val), c[1])

    for c in contenders:  # warm-up
        step(c)
    rates = rotating_rounds(contenders, step, args.rounds)

    m = cfg.model
    print(f"train_throughput: {len(batches)} batches of {cfg.train.batch_size} pairs ({tokens} target tokens), "
          f"{args.rounds} rounds, {args.threads} threads; sizes emb {m.emb_size} hidden {m.hidden_size} "
          f"readout {m.readout_size}, vocab {vocab_size[1]}")
    print(f"{'variant':15s} {'precision':>10s} {'tokens/s':>10s} {'spread':>17s} {'min/epoch':>10s} {'vs global':>10s}")
    base = statistics.median(rates[contenders[0]])
    for c in contenders:
        med = statistics.median(rates[c])
        print(f"{c[0]:15s} {c[1]:>10s} {med:10.0f} {min(rates[c]):8.0f}–{max(rates[c]):<8.0f} "
              f"{epoch_tokens / med / 60:10.2f} {med / base:9.2f}x")
    for v in variants:
        if precision not in FP32 and (v, "32-true") in rates:
            paired = [a / b for a, b in zip(rates[v, precision], rates[v, "32-true"])]
            print(f"{v}: {precision} / 32-true = {statistics.median(rates[v, precision]) / statistics.median(rates[v, '32-true']):.2f}x "
                  f"(per-round ratios {min(paired):.2f}–{max(paired):.2f})")


#: the parts of a training step, by the operators that do them (first match wins; the rest is
#: the decoder's step loop: LSTM cell, attention, small products, and autograd's bookkeeping)
PARTS = (("encoder LSTM (oneDNN)", ("mkldnn_rnn",)),
         ("Adam and gradient clipping", ("_foreach", "Optimizer", "norm")),
         ("dropout", ("bernoulli", "dropout")))
#: operators over the vocabulary (an input with the target vocabulary as a dimension)
VOCAB_PARTS = (("output layer products (hidden x vocabulary)", ("aten::mm", "aten::addmm")),
               ("log-softmax, its backward and the loss over the vocabulary",
                ("_log_softmax", "aten::exp", "nll_loss", "aten::sub", "aten::mul", "aten::sum", "aten::gather")))


def profile_parts(args: argparse.Namespace) -> None:
    """Shares of a training step's self CPU time per part (:data:`PARTS`; the output layer's
    products are the matrix products with the target vocabulary as a dimension), per variant,
    over ``--batches`` steps after one warm-up step."""
    from torch.profiler import ProfilerActivity, profile

    torch.set_num_threads(args.threads)
    cfg = load_params(args.params)
    split, data, vocab_size = training_split(cfg)
    batches = first_batches(split, data, cfg.train.batch_size, args.batches + 1)
    precision = str(resolve_precision(args.precision or cfg.trainer.precision, str(cfg.trainer.accelerator))[0])
    print(f"train_throughput --profile: {args.batches} steps of {cfg.train.batch_size} pairs, {args.threads} threads, "
          f"precision {precision}; share of self CPU time")
    for v in args.variants or list(cfg.variants):
        torch.manual_seed(0)
        model = build_model(model_config(cfg, v), *vocab_size, PAD_ID).train()
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        clip = float(cfg.trainer.gradient_clip_val)
        training_round(model, opt, batches[:1], clip, precision)
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
            training_round(model, opt, batches[1:], clip, precision)
        shares: dict[str, float] = {}
        total = 0.0
        for event in prof.key_averages(group_by_input_shape=True):
            t = event.self_cpu_time_total
            total += t
            part = next((name for name, keys in PARTS if any(k in event.key for k in keys)), None)
            if part is None and any(vocab_size[1] in shape for shape in event.input_shapes if isinstance(shape, list)):
                part = next((name for name, keys in VOCAB_PARTS if any(event.key.startswith(k) for k in keys)), None)
            shares[part or "the rest (decoder step loop, attention, autograd)"] = shares.get(
                part or "the rest (decoder step loop, attention, autograd)", 0.0) + t
        print(f"{v}: {total / 1e3 / args.batches:.0f} ms per step")
        for name, t in sorted(shares.items(), key=lambda kv: -kv[1]):
            print(f"  {100 * t / total:5.1f}%  {name}")


def batch_size_scaling(args: argparse.Namespace) -> None:
    """Tokens per second of every variant at every batch size of ``--batch-sizes``."""
    torch.set_num_threads(args.threads)
    cfg = load_params(args.params)
    split, data, vocab_size = training_split(cfg)
    epoch_tokens = int(split.tgt_lengths.sum()) + len(split)
    precision = str(resolve_precision(args.precision or cfg.trainer.precision, str(cfg.trainer.accelerator))[0])
    pairs = args.batches * cfg.train.batch_size
    variants = args.variants or list(cfg.variants)
    setups = {}
    for bs in args.batch_sizes:
        batches = first_batches(split, data, bs, max(1, pairs // bs))
        for v in variants:
            torch.manual_seed(0)
            model = build_model(model_config(cfg, v), *vocab_size, PAD_ID).train()
            setups[v, bs] = (model, torch.optim.Adam(model.parameters(), lr=1e-3), batches,
                             sum(b.n_tgt_tokens for b in batches))

    def step(c: tuple[str, int]) -> float:
        model, opt, batches, tokens = setups[c]
        return tokens / training_round(model, opt, batches, float(cfg.trainer.gradient_clip_val), precision)

    for c in setups:  # warm-up
        step(c)
    rates = rotating_rounds(list(setups), step, args.rounds)
    print(f"train_throughput --batch-sizes: {pairs} pairs per measurement, {args.rounds} rounds, {args.threads} "
          f"threads, precision {precision}")
    print(f"{'variant':15s} {'batch':>6s} {'tokens/s':>10s} {'spread':>17s} {'min/epoch':>10s} "
          f"{'vs batch ' + str(args.batch_sizes[0]):>14s}")
    for v in variants:
        base = statistics.median(rates[v, args.batch_sizes[0]])
        for bs in args.batch_sizes:
            med = statistics.median(rates[v, bs])
            print(f"{v:15s} {bs:6d} {med:10.0f} {min(rates[v, bs]):8.0f}–{max(rates[v, bs]):<8.0f} "
                  f"{epoch_tokens / med / 60:10.2f} {med / base:13.2f}x")


def compiled_step(args: argparse.Namespace) -> None:
    """Tokens per second of every variant's training step, eager and with a compiled recurrence."""
    import torch._dynamo

    torch.set_num_threads(args.threads)
    torch._dynamo.config.recompile_limit = 64  # every batch shape and first step may compile its own graph
    cfg = load_params(args.params)
    split, data, vocab_size = training_split(cfg)
    epoch_tokens = int(split.tgt_lengths.sum()) + len(split)
    precision = str(resolve_precision(args.precision or cfg.trainer.precision, str(cfg.trainer.accelerator))[0])
    batches = first_batches(split, data, cfg.train.batch_size, args.batches)
    tokens = sum(b.n_tgt_tokens for b in batches)
    clip = float(cfg.trainer.gradient_clip_val)
    variants = args.variants or list(cfg.variants)
    setups = {}
    for v in variants:
        for mode in ("eager", "compiled"):
            torch.manual_seed(0)
            model = build_model(model_config(cfg, v), *vocab_size, PAD_ID).train()
            if mode == "compiled":
                model.decoder._recur = torch.compile(model.decoder._recur, dynamic=True)
            setups[v, mode] = (model, torch.optim.Adam(model.parameters(), lr=1e-3))
    warm = {}
    for c, (model, opt) in setups.items():  # warm-up: compiles every graph the rounds will need
        warm[c] = training_round(model, opt, batches, clip, precision)
    rates = rotating_rounds(list(setups), lambda c: tokens / training_round(*setups[c], batches, clip, precision),
                            args.rounds)
    print(f"train_throughput --compile: {len(batches)} batches of {cfg.train.batch_size} pairs ({tokens} target "
          f"tokens), {args.rounds} rounds, {args.threads} threads, precision {precision}, torch {torch.__version__}")
    print(f"{'variant':15s} {'step':>9s} {'tokens/s':>10s} {'spread':>17s} {'min/epoch':>10s} {'warm-up s':>10s} "
          f"{'vs eager':>9s}")
    for v in variants:
        base = statistics.median(rates[v, "eager"])
        for mode in ("eager", "compiled"):
            med = statistics.median(rates[v, mode])
            print(f"{v:15s} {mode:>9s} {med:10.0f} {min(rates[v, mode]):8.0f}–{max(rates[v, mode]):<8.0f} "
                  f"{epoch_tokens / med / 60:10.2f} {warm[v, mode]:10.1f} {med / base:8.2f}x")


def _setup(params: str, variant: str, batches: int, threads: int):
    """A model of ``variant`` with its optimiser, the first ``batches`` training batches, their
    target tokens, the clipping and the resolved precision, at ``threads`` threads."""
    torch.set_num_threads(threads)
    cfg = load_params(params)
    split, data, vocab_size = training_split(cfg)
    batch_list = first_batches(split, data, cfg.train.batch_size, batches)
    precision = str(resolve_precision(cfg.trainer.precision, str(cfg.trainer.accelerator))[0])
    torch.manual_seed(0)
    model = build_model(model_config(cfg, variant), *vocab_size, PAD_ID).train()
    return (model, torch.optim.Adam(model.parameters(), lr=1e-3), batch_list,
            sum(b.n_tgt_tokens for b in batch_list), float(cfg.trainer.gradient_clip_val), precision)


def _concurrent_worker(params: str, variant: str, batches: int, threads: int, rounds: int, start, rates) -> None:
    """One of ``--concurrent``'s processes: a warm-up and ``rounds`` timed training rounds, each
    begun when every process (and the parent) has reached ``start``; tokens/s go to ``rates``."""
    model, opt, batch_list, tokens, clip, precision = _setup(params, variant, batches, threads)
    for _ in range(rounds + 1):
        start.wait()
        rates.put(tokens / training_round(model, opt, batch_list, clip, precision))


def concurrency(args: argparse.Namespace) -> None:
    """Tokens per second, summed over processes, of one training process with ``--threads``
    threads and of ``--concurrent`` processes of ``--threads``/N threads training at once."""
    import multiprocessing as mp

    n = args.concurrent
    if n < 2:
        sys.exit(f"error: --concurrent {n}: give 2 or more processes")
    each = max(1, args.threads // n)
    ctx = mp.get_context("spawn")
    cfg = load_params(args.params)
    split = training_split(cfg)[0]
    epoch_tokens = int(split.tgt_lengths.sum()) + len(split)
    print(f"train_throughput --concurrent {n}: {args.batches} batches of {cfg.train.batch_size} pairs per process "
          f"and round, {args.rounds} rounds; 1 process of {args.threads} threads against {n} of "
          f"{each} at once (tokens/s summed over processes)")
    print(f"{'variant':15s} {'processes':>13s} {'tokens/s':>10s} {'spread':>17s} {'min/epoch':>10s} {'vs one':>8s}")
    for v in args.variants or list(cfg.variants):
        start, rates = ctx.Barrier(n + 1), ctx.Queue()
        workers = [ctx.Process(target=_concurrent_worker, daemon=True,
                               args=(args.params, v, args.batches, each, args.rounds, start, rates))
                   for _ in range(n)]
        for w in workers:
            w.start()
        model, opt, batch_list, tokens, clip, precision = _setup(args.params, v, args.batches, args.threads)
        one, many = f"1 x {args.threads}", f"{n} x {each}"

        def step(c: str) -> float:
            if c == one:
                return tokens / training_round(model, opt, batch_list, clip, precision)
            start.wait()
            return sum(rates.get() for _ in range(n))

        step(many)  # warm-up of both
        step(one)
        result = rotating_rounds([one, many], step, args.rounds)
        for w in workers:
            w.join()
        base = statistics.median(result[one])
        for c in (one, many):
            med = statistics.median(result[c])
            print(f"{v:15s} {c:>13s} {med:10.0f} {min(result[c]):8.0f}–{max(result[c]):<8.0f} "
                  f"{epoch_tokens / med / 60:10.2f} {med / base:7.2f}x")


if __name__ == "__main__":
    main()

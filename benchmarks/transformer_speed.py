"""Training throughput of the Transformer (:mod:`flexatt.transformer`) against the RNN, on the
same batches, and the share of the machine's peak each reaches.

    python benchmarks/transformer_speed.py --params pipelines/grc/params.yaml
    python benchmarks/transformer_speed.py --params pipelines/grc/params.yaml --d-model 128 --heads 4 \
        --layers 3 --ff 512 --rounds 3 --batches 10 --threads 2        # the Transformer profiles' sizes

Contenders: the RNN of ``--params`` (its ``model`` with the ``global`` and ``flexible`` variants'
overrides) and the Transformer of the given sizes with global and flexible cross-attention (τ = ∞
in training, as the RNN). Each round times a full training step (teacher-forced forward,
``sequence_nll``, backward, clipping at the profile's value, Adam) on the first ``--batches``
length-grouped batches of the training split of ``train.data_dir``, for every contender in a
rotating order (load from elsewhere falls on all alike); the figures are the median over rounds
and the spread. At ``trainer.precision`` as training resolves it (``auto``).

The share of peak: a step's floating-point operations counted by PyTorch
(``torch.utils.flop_counter.FlopCounterMode``: the matrix products, which are nearly all of them)
over its median time, against the rate of a large matrix product on the same threads and
precision (2048 x 2048, the best of 5): what the machine's BLAS reaches, not the vendor's figure.
Writes ``benchmarks/results/transformer_speed.{json,txt}``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from flexatt.config import load_params
from flexatt.data.subwords import EncodedSplit, Vocab
from flexatt.io import file_digest
from flexatt.model import build_model
from flexatt.runtime import resolve_precision
from flexatt.trainer import model_config
from flexatt.transformer import TransformerConfig, TransformerSeq2Seq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import first_batches, machine, precision_context, spread, training_round  # noqa: E402
from train_throughput import rotating_rounds  # noqa: E402

OUT = Path(__file__).resolve().parent / "results"


def step_flops(model, batch, precision: str) -> int:
    """Floating-point operations of one training step's forward and backward on ``batch``."""
    from torch.utils.flop_counter import FlopCounterMode

    from flexatt.data.subwords import PAD_ID
    from flexatt.model import sequence_nll

    with FlopCounterMode(display=False) as counter:
        with precision_context(precision):
            logits, _ = model(batch.src, batch.src_len, batch.tgt_in)
            loss = sequence_nll(logits, batch.tgt_out, batch.tgt_out != PAD_ID)
        loss.backward()
    model.zero_grad(set_to_none=True)
    return int(counter.get_total_flops())


def gemm_rate(precision: str, n: int = 2048, repeats: int = 5) -> float:
    """FLOP/s of an n x n matrix product at ``precision`` (bf16-mixed: bfloat16 operands), best of ``repeats``."""
    dtype = torch.bfloat16 if precision in ("bf16-mixed", "bf16") else torch.float32
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    torch.mm(a, b)
    best = min(_timed(lambda: torch.mm(a, b)) for _ in range(repeats))
    return 2 * n ** 3 / best


def _timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--data", help="default: train.data_dir of --params")
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--precision", help="default: trainer.precision of --params")
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--ff", type=int, default=1024)
    parser.add_argument("--dropout", type=float, default=0.1, help="the Transformer's (the Transformer profiles')")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    cfg = load_params(args.params)
    tok = Path(args.data or cfg.train.data_dir)
    split = EncodedSplit.load(tok / "train.npz")
    vocab = len(Vocab(tok / "src.model")), len(Vocab(tok / "tgt.model"))
    batches = first_batches(split, args.batches * int(cfg.train.batch_size), int(cfg.train.batch_size))
    tokens = sum(int((b.tgt_out != 0).sum()) for b in batches)
    precision = str(resolve_precision(args.precision or cfg.trainer.precision, str(cfg.trainer.accelerator))[0])
    # one embedding table where the vocabulary is joint, as the Transformer profiles train it
    joint = file_digest(tok / "src.model") == file_digest(tok / "tgt.model")
    sizes = dict(d_model=args.d_model, heads=args.heads, enc_layers=args.layers, dec_layers=args.layers,
                 ff_size=args.ff, dropout=args.dropout, share_embeddings=joint)
    models = {f"rnn {v}": build_model(model_config(cfg, v), *vocab) for v in ("global", "flexible")}
    models.update({f"transformer {k}": TransformerSeq2Seq(TransformerConfig(cross=k, **sizes), *vocab)
                   for k in ("global", "flexible")})
    optimisers = {name: torch.optim.Adam(m.parameters(), lr=float(cfg.train.lr)) for name, m in models.items()}
    clip = float(cfg.trainer.gradient_clip_val)
    for name, m in models.items():  # warm-up: one step on every batch
        training_round(m.train(), optimisers[name], batches, clip, precision)
    rates = rotating_rounds(list(models), lambda name: tokens / training_round(models[name], optimisers[name], batches,
                                                                               clip, precision), args.rounds)
    peak = gemm_rate(precision)
    rows = []
    for name, m in models.items():
        flops = sum(step_flops(m, b, precision) for b in batches)
        rate = statistics.median(rates[name])
        rows.append({"model": name, "parameters": sum(p.numel() for p in m.parameters()), "tokens_per_s": round(rate),
                     "spread": spread(rates[name], "{:.0f}"), "gflop_per_s": round(flops * rate / tokens / 1e9, 2),
                     "peak_share": round(flops * rate / tokens / peak, 3)})
    base = rows[0]["tokens_per_s"]
    lines = [f"training tokens/s, {tokens} target tokens in {len(batches)} batches of {cfg.train.batch_size}, "
             f"{args.rounds} rounds, {args.threads} threads, {precision}; peak (2048² product): {peak / 1e9:.1f} GFLOP/s",
             f"{'model':22s} {'params':>9s} {'tokens/s':>9s} {'spread':>13s} {'vs rnn global':>13s} {'GFLOP/s':>8s} "
             f"{'of peak':>8s}"]
    for r in rows:
        lines.append(f"{r['model']:22s} {r['parameters']:9d} {r['tokens_per_s']:9d} {r['spread']:>13s} "
                     f"{r['tokens_per_s'] / base:12.2f}x {r['gflop_per_s']:8.2f} {100 * r['peak_share']:7.1f}%")
    print("\n".join(lines))
    OUT.mkdir(exist_ok=True)
    (OUT / "transformer_speed.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (OUT / "transformer_speed.json").write_text(json.dumps(
        {"machine": machine(), "precision": precision, "sizes": sizes, "tokens": tokens, "rounds": args.rounds,
         "peak_gflop_per_s": round(peak / 1e9, 1), "rows": rows, "rates": rates}, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()

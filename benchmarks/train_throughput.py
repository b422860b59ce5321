"""Training throughput of every attention variant at the default profile's sizes.

    python benchmarks/train_throughput.py                 # params.yaml's model sizes, real data
    python benchmarks/train_throughput.py --batches 20 --rounds 5 --threads 2

Measures target tokens per second of full training steps (teacher-forced forward, backward,
gradient clipping, Adam) on real batches of the encoded training split (``train.data_dir``), the
same batches for every variant. The variants are measured side by side: each round times every
variant once, in a rotating order, so that load from elsewhere on the machine spreads over all
of them; the figures are the median over rounds and the spread (min–max). Minutes per epoch
are extrapolated from the median to the split's full token count.
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
from flexatt.train import model_config

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import training_round  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--batches", type=int, default=15, help="training steps per measurement")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--variants", nargs="*", help="default: every key of `variants`")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    cfg = load_params(args.params)
    tok_dir = Path(cfg.train.data_dir)
    split = EncodedSplit.load(tok_dir / "train.npz")
    vocab_size = len(Vocab(tok_dir / "src.model")), len(Vocab(tok_dir / "tgt.model"))
    sampler = LengthGroupedBatches(split.src_lengths, split.tgt_lengths, cfg.train.batch_size, seed=0)
    data = ParallelData(split)
    batches = [collate([data[i] for i in idx]) for idx in list(sampler)[:args.batches]]
    tokens = sum(b.n_tgt_tokens for b in batches)
    epoch_tokens = int(split.tgt_lengths.sum()) + len(split)

    variants = args.variants or list(cfg.variants)
    models = {}
    for v in variants:
        torch.manual_seed(0)
        model = build_model(model_config(cfg, v), *vocab_size, PAD_ID).train()
        models[v] = (model, torch.optim.Adam(model.parameters(), lr=1e-3))

    def step(v: str) -> float:
        return tokens / training_round(*models[v], batches, float(cfg.trainer.gradient_clip_val))

    for v in variants:  # warm-up
        step(v)
    rates: dict[str, list[float]] = {v: [] for v in variants}
    for r in range(args.rounds):
        order = variants[r % len(variants):] + variants[:r % len(variants)]
        for v in order:
            rates[v].append(step(v))

    m = cfg.model
    print(f"train_throughput: {len(batches)} batches of {cfg.train.batch_size} pairs ({tokens} target tokens), "
          f"{args.rounds} rounds, {args.threads} threads; sizes emb {m.emb_size} hidden {m.hidden_size} "
          f"readout {m.readout_size}, vocab {vocab_size[1]}")
    print(f"{'variant':15s} {'tokens/s':>10s} {'spread':>17s} {'min/epoch':>10s} {'vs global':>10s}")
    base = statistics.median(rates[variants[0]])
    for v in variants:
        med = statistics.median(rates[v])
        print(f"{v:15s} {med:10.0f} {min(rates[v]):8.0f}–{max(rates[v]):<8.0f} "
              f"{epoch_tokens / med / 60:10.2f} {med / base:9.2f}x")


if __name__ == "__main__":
    main()

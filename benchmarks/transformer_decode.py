"""Beam-search speed of a Transformer profile's flexible model at its dev-selected τ against its
Global model and against itself at τ = ∞, side by side: does scoring only the window in every
decoder layer's cross-attention pay for the centre and strength networks it adds (against
Global), and what does the window alone save (against τ = ∞, the same weights scoring every
position)?

    python benchmarks/transformer_decode.py --profile grc_tf
    python benchmarks/transformer_decode.py --profile grc_tf --seed 2 --sentences 300 --rounds 5

The models are the units ``flexible-s<seed>`` and ``global-s<seed>`` of the profile
(``pipelines/<profile>/``): their weights ``artifacts/<profile>/units/<unit>/model.pt`` (what the
unit's ``train`` stage leaves, DVC-cached: ``dvc pull`` brings them) or a parent's
``results/<profile>/units/<unit>/weights.fp16.pt``; flexible decodes at the τ its unit selected
on dev (``unit.json``: ``summary.dev.selected_tau``) and at τ = ∞, Global at τ = ∞; where the
Global unit's weights are not on this machine its row is left out (and said so). All on the eager backend
(the decoding kernel compiles the RNN only), the first ``--sentences`` test sentences in
length-grouped batches of ``decode.batch_size``, beam ``--beam`` with the pipeline's length
normalisation and length limit. Each round decodes every batch with every row back to back,
the order rotating from batch to batch and round to round, after a warm-up pass; the figures are
the median over rounds and the spread. Also printed: each model's window (positions scored per
step and live hypothesis, averaged over the layers, and per layer), output length, the BLEU of
the decoded sentences (a sanity check over a few hundred sentences, not a result) and µs per
decoding row. Writes ``benchmarks/results/transformer_decode.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from flexatt.config import load_params
from flexatt.data.subwords import EncodedSplit, Vocab
from flexatt.decoding.search import beam_search
from flexatt.io import read_lines
from flexatt.metrics import corpus_bleu
from flexatt.tau import INF
from flexatt.units import load_weights

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as B  # noqa: E402

OUT = Path(__file__).resolve().parent / "results"


def weights_of(profile: str, unit: str) -> Path | None:
    """A unit's weights: the training's float32 ``model.pt``, else a parent's committed float16
    ones; ``None`` where neither is here."""
    for path in (Path("artifacts") / profile / "units" / unit / "model.pt",
                 Path("results") / profile / "units" / unit / "weights.fp16.pt"):
        if path.is_file():
            return path
    return None


def missing(profile: str, unit: str) -> str:
    return (f"no weights of {profile}/{unit} (artifacts/{profile}/units/{unit}/model.pt: "
            f"`dvc pull pipelines/{profile}/dvc.yaml:train@{unit}` or run its train stage)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", default="grc_tf")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--sentences", type=int, default=200, help="the first N test sentences")
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    B.warn_if_busy(args.threads)
    cfg = load_params(Path("pipelines") / args.profile / "params.yaml")
    flexible_unit, global_unit = f"flexible-s{args.seed}", f"global-s{args.seed}"
    manifest = json.loads((Path("results") / args.profile / "units" / flexible_unit / "unit.json").read_text())
    selected = manifest["summary"]["dev"].get("selected_tau")
    flexible_weights = weights_of(args.profile, flexible_unit)
    if flexible_weights is None:
        raise SystemExit(f"error: {missing(args.profile, flexible_unit)}")
    flexible = load_weights(flexible_weights)
    # row -> (unit, model, τ): flexible at its τ, the same model at τ = ∞, Global where its weights are here
    rows = {"flexible": (flexible_unit, flexible, INF if selected is None else float(selected)),
            "flexible_inf": (flexible_unit, flexible, INF)}
    global_weights = weights_of(args.profile, global_unit)
    if global_weights is None:
        print(f"transformer_decode: {missing(args.profile, global_unit)}: no Global row", flush=True)
    else:
        rows["global"] = (global_unit, load_weights(global_weights), INF)
    tok = Path(cfg.train.data_dir)
    split = EncodedSplit.load(tok / "test.npz")
    n = min(args.sentences, len(split))
    refs = read_lines(tok / "test.ref")[:n]
    vocab = Vocab(tok / "tgt.model")
    alpha, ratio, batch_size = float(cfg.decode.alpha), float(cfg.decode.max_len_ratio), int(cfg.decode.batch_size)
    batches = B.first_batches(split, n, batch_size)

    def decode(kind: str, b):
        _, model, tau = rows[kind]
        max_len = (b.src_len.float() * ratio).long() + 10
        with torch.no_grad():
            return beam_search(model, b.src, b.src_len, max_len, args.beam, tau=tau, alpha=alpha, backend="eager")

    stats = decode_stats(decode, rows, batches, n, lambda hyps: corpus_bleu(vocab.decode(hyps), [refs])[0])
    rates = time_rows(decode, list(rows), batches, n, args.rounds)
    # per round: flexible at its τ against each other row
    ratios = {other: [f / g for f, g in zip(rates["flexible"], rates[other])] for other in rates if other != "flexible"}
    lines = [f"transformer_decode: {args.profile}, units of seed {args.seed}, first {n} test sentences, batches of "
             f"{batch_size}, beam {args.beam}, {args.rounds} rounds, {args.threads} threads, eager",
             f"{'row':12s} {'unit':12s} {'tau':>7s} {'window':>7s} {'per layer':>22s} {'out len':>7s} {'BLEU':>6s} "
             f"{'sent/s':>7s} {'spread':>13s} {'us/row':>7s}"]
    for kind, s in stats.items():
        s["sentences_per_second"] = B.med(rates[kind])
        s["us_per_row"] = 1e6 * n / s["sentences_per_second"] / max(s["rows"], 1)
        per_layer = "–" if s["layer_windows"] is None else ", ".join(f"{w:.1f}" for w in s["layer_windows"])
        lines.append(f"{kind:12s} {s['unit']:12s} {B.fmt_tau(s['tau']):>7s} {s['window']:7.2f} {per_layer:>22s} "
                     f"{s['out_len']:7.1f} {s['bleu']:6.2f} {s['sentences_per_second']:7.2f} "
                     f"{B.spread(rates[kind]):>13s} {s['us_per_row']:7.1f}")
    for other, per_round in ratios.items():
        lines.append(f"flexible/{other}: {B.med(per_round):.2f}x (rounds {B.spread(per_round)})")
    print("\n".join(lines))
    OUT.mkdir(exist_ok=True)
    (OUT / "transformer_decode.json").write_text(json.dumps(
        {"machine": B.machine(), "profile": args.profile, "seed": args.seed, "sentences": n, "beam": args.beam,
         "batch_size": batch_size, "rounds": args.rounds, "threads": args.threads, "models": stats,
         "rates": rates, "ratio_per_round": ratios,
         "ratio_median": {k: B.med(v) for k, v in ratios.items()}}, indent=1) + "\n", encoding="utf-8")


def decode_stats(decode, rows: dict, batches, n: int, bleu) -> dict:
    """The warm-up pass: every row decodes every batch once. Returns per row its unit, τ, mean
    window (and per layer), output length, BLEU (``bleu`` of the hypotheses in sentence order)
    and decoding rows (steps × live hypotheses)."""
    stats = {}
    for kind in rows:
        hyps, wsum, steps, out_len, layers = {}, 0.0, 0, 0, None
        for b in batches:
            res = decode(kind, b)
            wsum += float(res.window_sum.sum())
            steps += int(res.steps.sum())
            out_len += int(res.lengths.sum())
            if res.layer_window_sum is not None:
                layer_sum = res.layer_window_sum.sum(0)
                layers = layer_sum if layers is None else layers + layer_sum
            for row, i in enumerate(b.index.tolist()):
                hyps[i] = res.tokens[row, : int(res.lengths[row])].tolist()
        stats[kind] = {"unit": rows[kind][0], "tau": rows[kind][2], "window": wsum / max(steps, 1),
                       "layer_windows": None if layers is None else [round(float(x) / max(steps, 1), 2) for x in layers],
                       "out_len": out_len / n, "bleu": round(bleu([hyps[i] for i in range(n)]), 2), "rows": steps}
    return stats


def time_rows(decode, kinds: list[str], batches, n: int, rounds: int) -> dict[str, list[float]]:
    """Sentences per second of each row in each round: every batch decoded by every row back to
    back, the order rotating from batch to batch and from round to round."""
    rates: dict[str, list[float]] = {kind: [] for kind in kinds}
    for r in range(rounds):
        secs = dict.fromkeys(rates, 0.0)
        for i, b in enumerate(batches):
            for kind in B.rotated(kinds, i + r):
                started = time.perf_counter()
                decode(kind, b)
                secs[kind] += time.perf_counter() - started
        for kind in rates:
            rates[kind].append(n / secs[kind])
    return rates


if __name__ == "__main__":
    main()

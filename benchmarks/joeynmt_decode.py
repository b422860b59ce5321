"""Beam-search decoding speed of flexatt against Joey NMT 2.3, side by side, on models of the
same sizes trained on the same data.

    bash benchmarks/setup_joeynmt.sh                 # once: .venv-joeynmt/ with joeynmt 2.3
    python benchmarks/joeynmt_decode.py              # trains Joey's model once (cached), then 3 rounds

Joey NMT's model is its recurrent one with flexatt's sizes (``benchmarks/joeynmt_throughput.py``'s
config: bidirectional LSTM encoder, LSTM decoder with Bahdanau attention and input feeding,
flexatt's SentencePiece model and vocabulary), trained by ``joeynmt train`` on the filtered
training pairs for ``train.epochs`` epochs (validation, greedy, after each epoch; the best
checkpoint by dev BLEU is kept), once: the model folder under ``--work-dir`` is reused while its
config is unchanged. flexatt's is the pipeline's ``global`` model (``artifacts/models/global``).

What is timed, per round: the translation of the test set (2,000 sentences) with beam
``decode.beam_size`` in batches of ``decode.batch_size`` sentences, as each toolkit's users get
it — flexatt's ``translate_split`` (what ``flexatt translate`` and the stages run: length-grouped
batches, the compiled step, ``decode.alpha``, at most ``decode.max_len_ratio``·S + 10 tokens,
then the SentencePiece decoding) and Joey's ``predict`` (what ``joeynmt test`` runs: its batches
in file order, its beam search with ``beam_alpha`` = ``decode.alpha`` (its own GNMT length
penalty), ``max_output_length`` -1 (1.5 × the batch's longest source), then its
post-processing). Model loading is not timed. Joey runs in its own virtualenv, in a worker process
that this script drives over a pipe and that waits idle while flexatt decodes; after a warm-up
pass each, every round times each once in alternating order; figures: the median over rounds,
the spread (min–max) and the ratio of the medians. Printed beside: each toolkit's test BLEU
(sacrebleu, against the same references), its output length in words and words per second
(beam search's steps follow the output lengths: a model that translates worse and writes longer
outputs decodes fewer sentences per second).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from _peers import ROOT, Peer, batches_per_epoch, decode_main, peer_arguments, serve, train_once, worker_pipe
from joeynmt_throughput import joey_config, load_joey, write_joey_vocab

TARGET_RATIO = 2.0
PEER = Peer(Path(__file__), key="joey", name="Joey NMT", label="Joey NMT 2.3 (rnn, predict)",
            setup="bash benchmarks/setup_joeynmt.sh")


# ======================================================================================
# The Joey NMT side: runs in .venv-joeynmt (imports nothing from flexatt)
# ======================================================================================
def worker(args: argparse.Namespace) -> None:
    """Load Joey's trained model and the test set, then translate on command (``decode``)."""
    proto = worker_pipe(args.threads)
    from joeynmt.prediction import predict

    gargs, model, _, _, test_data = load_joey(args.config, "test")
    test_data.reset_indices(random_subset=-1)

    def decode(msg: dict) -> dict:
        started = time.perf_counter()
        _, _, hypotheses, tokens, _, _ = predict(
            model=model, data=test_data, compute_loss=False, device=gargs.device, rank=0, n_gpu=gargs.n_gpu,
            num_workers=gargs.num_workers, normalization=gargs.train.normalization, args=gargs.test,
            autocast=gargs.autocast)
        seconds = time.perf_counter() - started
        return {"seconds": seconds, "hypotheses": hypotheses if msg.get("outputs") else None,
                "out_len": sum(len(t) for t in tokens) / max(len(tokens), 1)}

    serve(proto, {"decode": decode}, sentences=len(test_data))


# ======================================================================================
# The flexatt side
# ======================================================================================
def prepare_joey(cfg, work: Path, python: Path, args: argparse.Namespace) -> tuple[Path, dict]:
    """Joey's vocabulary and config (``joeynmt_throughput.py``'s, trained for ``train.epochs``
    epochs, validated after each, the best checkpoint by dev BLEU kept; tested with flexatt's beam
    settings) under ``work``, and its model trained once. Returns the config its worker loads."""
    from flexatt.data.subwords import Vocab

    tok_dir = ROOT / str(cfg.train.data_dir)
    vocab_file = work / "vocab.txt"
    write_joey_vocab(Vocab(tok_dir / "src.model"), Vocab(tok_dir / "tgt.model"), vocab_file)
    per_epoch = batches_per_epoch(cfg)
    config = joey_config(cfg, work, work / "model", vocab_file, updates=10**9, logging_freq=per_epoch)
    config["data"]["test"] = str(ROOT / str(cfg.tokenize.in_dir) / "test")
    config["training"].update({"epochs": int(cfg.train.epochs), "validation_freq": per_epoch,
                               "early_stopping_metric": "bleu", "eval_metrics": ["bleu"],
                               "keep_best_ckpts": 1})
    config["testing"].update({"beam_size": int(cfg.decode.beam_size), "beam_alpha": float(cfg.decode.alpha),
                              "batch_size": int(cfg.decode.batch_size), "batch_type": "sentence",
                              "max_output_length": -1, "n_best": 1})
    path = work / "decode.yaml"
    train_once(PEER, python, ["-m", "joeynmt", "train", str(path), "--skip-test"], config, path,
               Path(config["model_dir"]) / "best.ckpt", command="joeynmt train",
               amount=f"{config['training']['epochs']} epochs", threads=args.threads)
    return path, {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    peer_arguments(parser, python_flag="joey", venv=".venv-joeynmt", work_dir="artifacts/bench/joeynmt_decode",
                   work_help="Joey's config, vocabulary, model folder and logs", rounds=3)
    parser.add_argument("--out", default="benchmarks/results/joeynmt_decode.json")
    decode_main(parser, PEER, worker, prepare_joey, target=TARGET_RATIO)


if __name__ == "__main__":
    main()

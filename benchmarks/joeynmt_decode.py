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
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from joeynmt_throughput import ToolkitWorker, compare_decoding, joey_config, worker_pipe, write_joey_vocab, write_yaml  # noqa: E402

TARGET_RATIO = 2.0


# ======================================================================================
# The Joey NMT side: runs in .venv-joeynmt (imports nothing from flexatt)
# ======================================================================================
def worker(args: argparse.Namespace) -> None:
    """Load Joey's trained model and the test set, then translate on command."""
    proto = worker_pipe(args.threads)
    from joeynmt.config import load_config, parse_global_args
    from joeynmt.prediction import predict, prepare

    cfg = load_config(Path(args.config))
    gargs = parse_global_args(cfg, rank=0, mode="test")
    model, _, _, test_data = prepare(gargs, rank=0, mode="test")
    test_data.reset_indices(random_subset=-1)

    def reply(**msg) -> None:
        proto.write(json.dumps(msg) + "\n")

    reply(ok=True, ready=True, sentences=len(test_data))
    for line in sys.stdin:
        msg = json.loads(line)
        if msg["cmd"] == "quit":
            reply(ok=True)
            return
        started = time.perf_counter()
        _, _, hypotheses, tokens, _, _ = predict(
            model=model, data=test_data, compute_loss=False, device=gargs.device, rank=0, n_gpu=gargs.n_gpu,
            num_workers=gargs.num_workers, normalization=gargs.train.normalization, args=gargs.test,
            autocast=gargs.autocast)
        seconds = time.perf_counter() - started
        reply(ok=True, seconds=seconds, hypotheses=hypotheses if msg.get("outputs") else None,
              out_len=sum(len(t) for t in tokens) / max(len(tokens), 1))


# ======================================================================================
# The flexatt side
# ======================================================================================
def train_joey(python: Path, config: dict, work: Path, threads: int) -> Path:
    """``joeynmt train`` once per config (a stamp in the model folder); returns the config path."""
    path = work / "decode.yaml"
    digest = hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16]
    model_dir = Path(config["model_dir"])
    stamp = model_dir / "flexatt-bench.stamp"
    write_yaml(path, config)
    if stamp.is_file() and stamp.read_text().strip() == digest and (model_dir / "best.ckpt").exists():
        print(f"joeynmt_decode: Joey's model is trained ({model_dir})", flush=True)
        return path
    print(f"joeynmt_decode: training Joey NMT's model ({config['training']['epochs']} epochs; log "
          f"{work / 'train.log'})", flush=True)
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    started = time.perf_counter()
    with (work / "train.log").open("w") as out:
        proc = subprocess.run([str(python), "-m", "joeynmt", "train", str(path), "--skip-test"],
                              stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    if proc.returncode != 0:
        tail = "".join((work / "train.log").read_text(errors="replace").splitlines(True)[-30:])
        sys.exit(f"joeynmt_decode: `joeynmt train` failed (exit {proc.returncode}):\n{tail}")
    stamp.write_text(digest + "\n")
    print(f"joeynmt_decode: trained in {(time.perf_counter() - started) / 60:.1f} min", flush=True)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--joey-python", default=str(ROOT / ".venv-joeynmt" / "bin" / "python"))
    parser.add_argument("--work-dir", default="artifacts/bench/joeynmt_decode",
                        help="Joey's config, vocabulary, model folder and logs")
    parser.add_argument("--out", default="benchmarks/results/joeynmt_decode.json")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--config", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return

    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    import torch

    torch.set_num_threads(args.threads)
    from flexatt.config import load_params
    from flexatt.data.subwords import EncodedSplit, Vocab
    from flexatt.evaluation import load_model, read_lines, translate_split

    joey_python = Path(args.joey_python)
    if not joey_python.exists():
        sys.exit(f"joeynmt_decode: {joey_python} not found: run `bash benchmarks/setup_joeynmt.sh` first")
    cfg = load_params(args.params)
    tok_dir = ROOT / str(cfg.train.data_dir)
    filter_dir = ROOT / str(cfg.tokenize.in_dir)
    checkpoint = ROOT / str(cfg.evaluate.checkpoints["global"])
    for path in (checkpoint, tok_dir / "test.npz", filter_dir / "test.src", filter_dir / "test.tgt"):
        if not path.is_file():
            sys.exit(f"joeynmt_decode: {path} not found: run `dvc repro` first")
    work = (ROOT / args.work_dir).resolve()
    work.mkdir(parents=True, exist_ok=True)

    # ---- Joey's vocabulary and config --------------------------------------------------------
    tgt_vocab = Vocab(tok_dir / "tgt.model")
    vocab_file = work / "vocab.txt"
    write_joey_vocab(Vocab(tok_dir / "src.model"), tgt_vocab, vocab_file)
    batches_per_epoch = -(-len(read_lines(filter_dir / "train.src")) // int(cfg.train.batch_size))
    config = joey_config(cfg, work, work / "model", vocab_file, updates=10**9, logging_freq=batches_per_epoch)
    config["data"]["test"] = str(filter_dir / "test")
    config["training"].update({"epochs": int(cfg.train.epochs), "validation_freq": batches_per_epoch,
                               "early_stopping_metric": "bleu", "eval_metrics": ["bleu"],
                               "keep_best_ckpts": 1})
    config["testing"].update({"beam_size": int(cfg.decode.beam_size), "beam_alpha": float(cfg.decode.alpha),
                              "batch_size": int(cfg.decode.batch_size), "batch_type": "sentence",
                              "max_output_length": -1, "n_best": 1})
    config_path = train_joey(joey_python, config, work, args.threads)

    # ---- both sides, side by side ---------------------------------------------------------
    model = load_model(checkpoint)
    split = EncodedSplit.load(tok_dir / "test.npz")
    refs = read_lines(tok_dir / "test.ref")
    settings = dict(beam_size=int(cfg.decode.beam_size), alpha=float(cfg.decode.alpha),
                    max_len_ratio=float(cfg.decode.max_len_ratio), batch_size=int(cfg.decode.batch_size))

    def flexatt_round() -> tuple[float, list[str]]:
        started = time.perf_counter()
        out = translate_split(model, split, tgt_vocab, **settings)
        return time.perf_counter() - started, out.hypotheses

    joey = ToolkitWorker(joey_python, config_path, args.threads, work / "worker.log", script=Path(__file__))
    ready = json.loads(joey.proc.stdout.readline() or "{}")  # the worker's first line, once loaded
    if ready.get("sentences") != len(split):
        sys.exit(f"joeynmt_decode: Joey loaded {ready.get('sentences')} test sentences, flexatt {len(split)}")
    print(f"joeynmt_decode: {len(split)} test sentences, beam {settings['beam_size']}, batches of "
          f"{settings['batch_size']}, {args.rounds} rounds, {args.threads} threads", flush=True)
    figures = compare_decoding(joey, flexatt_round, peer="joey", label="Joey NMT 2.3 (rnn, predict)",
                               peer_label="Joey NMT", sentences=len(split), references=refs,
                               rounds=args.rounds, target=TARGET_RATIO)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"sentences": len(split), "settings": settings, "rounds": args.rounds,
                               "threads": args.threads, **figures}, indent=2) + "\n")
    print(f"written {out}")


if __name__ == "__main__":
    main()

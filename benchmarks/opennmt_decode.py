"""Beam-search decoding speed of flexatt against OpenNMT-py 3.5, side by side, on models of the
same sizes trained on the same data.

    bash benchmarks/setup_opennmt.sh                 # once: .venv-opennmt/ with OpenNMT-py 3.5
    python benchmarks/opennmt_decode.py              # trains OpenNMT-py's model once (cached), then 3 rounds

OpenNMT-py's model is its RNN one at flexatt's sizes: a bidirectional LSTM encoder
(``encoder_type: brnn``), a one-layer LSTM decoder of ``model.hidden_size`` units with MLP
(Bahdanau, concat) attention and input feeding, embeddings of ``model.emb_size``, dropout
``model.dropout``, a generator of the vocabulary's size. OpenNMT-py hands the encoder's final
state to the decoder as it is, so its encoder has ``hidden_size`` units in all (half per
direction, where flexatt's has ``hidden_size`` per direction): a cheaper encoder and attention
than flexatt's, which can only favour OpenNMT-py in the timing. Its data: the filtered training
pairs (``artifacts/filter/train.{src,tgt}``) through its own ``sentencepiece`` transform on
flexatt's SentencePiece model, a vocabulary file listing that model's pieces (so the output
layer has flexatt's size), Adam at ``train.lr``, gradient-norm clipping at
``trainer.gradient_clip_val``, batches of ``train.batch_size`` sentences, for ``train.epochs``
epochs of updates (validation on dev each epoch; the last checkpoint is used), trained once by
``onmt_train``: the model folder under ``--work-dir`` is reused while its config is unchanged.
flexatt's is the pipeline's ``global`` model (``artifacts/models/global``).

What is timed, per round: the translation of the test set (2,000 sentences) with beam
``decode.beam_size`` in batches of ``decode.batch_size`` sentences, as each toolkit's users get
it — flexatt's ``translate_split`` (length-grouped batches, the compiled step, ``decode.alpha``,
at most ``decode.max_len_ratio``·S + 10 tokens, then the SentencePiece decoding) and
OpenNMT-py's ``InferenceEnginePY.infer_list`` (what ``onmt_translate`` runs on a file: its
SentencePiece transform, its beam search with ``length_penalty: avg`` — the score divided by the
length, flexatt's ``decode.alpha`` = 1 — and ``max_length`` 250, then the detokenisation). Model
loading is not timed. OpenNMT-py runs in its own virtualenv, in a worker process driven over a
pipe that waits idle while flexatt decodes; after a warm-up pass each, every round times each
once in alternating order; figures: the median over rounds, the spread (min–max) and the ratio
of the medians, with each toolkit's test BLEU (sacrebleu, same references), output length and
words per second beside.

OpenNMT-py 3.5 pickles its options into its checkpoints, which torch >= 2.6 does not load by
default (``weights_only``): its processes run with ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from _peers import (ROOT, Peer, batches_per_epoch, decode_main, peer_arguments, serve, train_once, worker_pipe,
                    write_yaml)

TARGET_RATIO = 2.0
PEER = Peer(Path(__file__), key="opennmt", name="OpenNMT-py", label="OpenNMT-py 3.5 (rnn, infer_list)",
            setup="bash benchmarks/setup_opennmt.sh", env={"TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"})


# ======================================================================================
# The OpenNMT-py side: runs in .venv-opennmt (imports nothing from flexatt)
# ======================================================================================
def worker(args: argparse.Namespace) -> None:
    """Load OpenNMT-py's trained model and the test sources, then translate on command (``decode``)."""
    proto = worker_pipe(args.threads)
    from onmt.bin.translate import _get_parser
    from onmt.inference_engine import InferenceEnginePY
    from onmt.utils.parse import ArgumentParser

    opt = _get_parser().parse_args(["-config", args.config])
    ArgumentParser.validate_translate_opts(opt)
    ArgumentParser._get_all_transform_translate(opt)
    ArgumentParser._validate_transforms_opts(opt)
    ArgumentParser.validate_translate_opts_dynamic(opt)
    engine = InferenceEnginePY(opt)
    with open(opt.src, encoding="utf-8") as f:
        sources = [line.rstrip("\n") for line in f]

    def decode(msg: dict) -> dict:
        started = time.perf_counter()
        _, preds = engine.infer_list(sources)
        seconds = time.perf_counter() - started
        return {"seconds": seconds, "hypotheses": [p[0] for p in preds] if msg.get("outputs") else None}

    serve(proto, {"decode": decode}, sentences=len(sources))


# ======================================================================================
# The flexatt side
# ======================================================================================
def onmt_configs(cfg, work: Path, vocab_file: Path, per_epoch: int,
                 updates: int | None = None) -> tuple[dict, dict]:
    """OpenNMT-py 3.5's training and translation configs (see the module doc); ``updates``
    replaces ``train.epochs`` epochs of updates."""
    tok_dir = ROOT / str(cfg.train.data_dir)
    filter_dir = ROOT / str(cfg.tokenize.in_dir)
    m = cfg.model
    subwords = {"src_subword_model": str(tok_dir / "src.model"), "tgt_subword_model": str(tok_dir / "tgt.model"),
                "src_subword_nbest": 1, "tgt_subword_nbest": 1, "src_subword_alpha": 0.0,
                "tgt_subword_alpha": 0.0}
    steps = updates or int(cfg.train.epochs) * per_epoch
    train = {
        "save_data": str(work / "onmt"),
        "overwrite": True,
        "src_vocab": str(vocab_file), "tgt_vocab": str(vocab_file), "share_vocab": True,
        "src_vocab_size": 100000, "tgt_vocab_size": 100000, "vocab_size_multiple": 1,
        "data": {
            "corpus_1": {"path_src": str(filter_dir / "train.src"), "path_tgt": str(filter_dir / "train.tgt"),
                         "transforms": ["sentencepiece"]},
            "valid": {"path_src": str(filter_dir / "dev.src"), "path_tgt": str(filter_dir / "dev.tgt"),
                      "transforms": ["sentencepiece"]},
        },
        **subwords,
        "save_model": str(work / "model" / "model"),
        "save_checkpoint_steps": steps, "keep_checkpoint": 1,
        "train_steps": steps, "valid_steps": per_epoch, "report_every": 100,
        "seed": int(cfg.seed), "world_size": 1, "gpu_ranks": [], "num_workers": 0,
        "model_dtype": "fp32",
        "batch_type": "sents", "batch_size": int(cfg.train.batch_size), "valid_batch_size": int(cfg.train.batch_size),
        "optim": "adam", "learning_rate": float(cfg.train.lr), "adam_beta1": 0.9, "adam_beta2": 0.999,
        "decay_method": "none", "start_decay_steps": 10 * steps, "max_grad_norm": float(cfg.trainer.gradient_clip_val),
        "normalization": "sents", "label_smoothing": 0.0,
        "encoder_type": "brnn", "decoder_type": "rnn", "rnn_type": "LSTM", "enc_layers": 1, "dec_layers": 1,
        "enc_hid_size": int(m.hidden_size), "dec_hid_size": int(m.hidden_size), "word_vec_size": int(m.emb_size),
        "global_attention": "mlp", "input_feed": 1, "bridge": False, "dropout": [float(m.dropout)],
        "param_init": 0.0, "param_init_glorot": True,
    }
    translate = {
        "model": str(work / "model" / f"model_step_{steps}.pt"),
        "src": str(filter_dir / "test.src"), "output": str(work / "test.hyp"),
        "transforms": ["sentencepiece"], **subwords,
        "beam_size": int(cfg.decode.beam_size), "length_penalty": "avg", "max_length": 250, "n_best": 1,
        "batch_size": int(cfg.decode.batch_size), "batch_type": "sents", "gpu": -1, "seed": int(cfg.seed),
    }
    return train, translate


def write_onmt_vocab(vocab, path: Path) -> None:
    """OpenNMT-py's vocabulary file: the SentencePiece model's pieces in id order, one per line,
    without its control symbols (OpenNMT-py adds its own <unk>, <blank>, <s>, </s>)."""
    sp = vocab.sp
    pieces = [sp.id_to_piece(i) for i in range(len(vocab)) if not (sp.is_control(i) or sp.is_unknown(i))]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(pieces) + "\n", encoding="utf-8")


def prepare_onmt(cfg, work: Path, python: Path, args: argparse.Namespace) -> tuple[Path, dict] | None:
    """OpenNMT-py's vocabulary and configs under ``work``, and its model trained once by
    ``onmt_train``. Returns the translation config its worker loads (None with ``--train-only``)."""
    from flexatt.data.subwords import Vocab

    if not cfg.tokenize.joint:
        sys.exit("opennmt_decode: one vocabulary file per side is not implemented (tokenize.joint is true by default)")
    vocab_file = work / "vocab.txt"
    write_onmt_vocab(Vocab(ROOT / str(cfg.train.data_dir) / "tgt.model"), vocab_file)
    train_cfg, translate_cfg = onmt_configs(cfg, work, vocab_file, batches_per_epoch(cfg), args.updates)
    train_path = work / "train.yaml"
    train_once(PEER, python, ["-m", "onmt.bin.train", "-config", str(train_path)], train_cfg, train_path,
               Path(translate_cfg["model"]), command="onmt_train", amount=f"{train_cfg['train_steps']} updates",
               threads=args.threads)
    if args.train_only:
        return None
    translate_path = work / "translate.yaml"
    write_yaml(translate_path, translate_cfg)
    return translate_path, {"train_steps": train_cfg["train_steps"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    peer_arguments(parser, python_flag="onmt", venv=".venv-opennmt", work_dir="artifacts/bench/opennmt_decode",
                   work_help="OpenNMT-py's configs, vocabulary, model folder and logs", rounds=3)
    parser.add_argument("--out", default="benchmarks/results/opennmt_decode.json")
    parser.add_argument("--updates", type=int, help="train for this many updates instead of train.epochs epochs")
    parser.add_argument("--train-only", action="store_true", help="train (or find) the model, time nothing")
    decode_main(parser, PEER, worker, prepare_onmt, target=TARGET_RATIO)


if __name__ == "__main__":
    main()

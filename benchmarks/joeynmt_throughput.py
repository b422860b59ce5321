"""Training throughput of flexatt against Joey NMT 2.3's recurrent model, side by side.

    bash benchmarks/setup_joeynmt.sh                      # once: .venv-joeynmt/ with joeynmt 2.3
    python benchmarks/joeynmt_throughput.py               # 15 batches, 7 rounds, 2 threads
    python benchmarks/joeynmt_throughput.py --rounds 9 --batches 20 --joey-cli-steps 0
    python benchmarks/joeynmt_throughput.py --profile     # + per-phase times and top operators

Both models train on the same real batches: the first ``--batches`` batches of flexatt's
length-grouped order (``LengthGroupedBatches(seed=0)``, ``train.batch_size`` = 64 pairs) of the
training split. flexatt reads them from ``artifacts/tok/train.npz``; Joey NMT builds the very same
pairs with its own data pipeline from the filtered text (``artifacts/filter/train.{src,tgt}``),
its own SentencePiece tokenizer on flexatt's model (``artifacts/tok/src.model``) and a
vocabulary file listing that model's 4,000 pieces. The token ids of both sides are compared
batch by batch before anything is timed (Joey's ids differ only by its special-symbol order:
``<unk>`` 0 and ``<pad>`` 1, where flexatt has ``<pad>`` 0 and ``<unk>`` 1).

What is timed, per round, is a full training step on every batch, exactly as each toolkit's
training loop does it, without data loading, logging or validation:

* flexatt (``benchmarks/train_throughput.py``'s loop, the ``global`` variant by default):
  forward, ``sequence_nll``, ``zero_grad``, backward, ``clip_grad_norm_(3.0)``, Adam; at
  ``trainer.precision`` as training resolves it (``auto``: bf16-mixed where the CPU multiplies
  bf16 natively, the readout under bfloat16 autocast as the Lightning Trainer runs it; else 32-true), and a second copy at 32-true.
  Joey NMT 2.3 trains in float32 on a CPU (its config turns ``fp16`` off there), so the
  32-true ratio is the like-for-like arithmetic and the first one what each gives out of the
  box;
* Joey NMT (the body of ``TrainManager.train_and_validate``'s batch loop): its own
  ``TrainManager._train_step`` (sort by source length, forward with the loss, normalisation
  by the number of sentences, backward), its gradient clipper (``clip_grad_norm``: 3.0), its
  Adam, ``model.zero_grad()``.

Throughput is target tokens per second: every target token plus EOS, padding excluded, which is
both flexatt's ``Batch.n_tgt_tokens`` and Joey's ``Batch.ntokens`` (checked equal per batch).

Joey NMT runs in its own virtualenv (``.venv-joeynmt``, see ``benchmarks/setup_joeynmt.sh``), in
worker processes that this script starts and drives over a pipe (this file, run with
``--worker`` by Joey's Python): one as Joey runs out of the box, and one with the C allocator
settings that flexatt's stages make for themselves (``flexatt.runtime.tune_allocator``; given to
Joey's process as glibc's ``MALLOC_*_`` environment variables), so that the second ratio shows
what is left of the difference when both get them. flexatt runs as its stages run it (tuned;
``FLEXATT_ALLOCATOR=default`` turns that off). All are measured side by side: after one
warm-up round each, every round times each once, in a rotating order, while the others wait
idle; the figures are the median over rounds, the spread (min–max) and the ratio of the medians.
All use ``--threads`` intra-op threads (``torch.set_num_threads`` and ``OMP_NUM_THREADS``).

``--joey-cli-steps N`` (default 60, 0: off) afterwards also runs ``joeynmt train`` itself for N
updates on the same config and prints the "Tokens per Sec" its log reports (its own loop with
its data loader, on its own shuffled, unsorted batches; no validation: ``validation_freq`` is
past the last update) — a cross-check of the worker's figure, not part of the side-by-side.

The Joey config (written to ``--work-dir``, default ``artifacts/bench/joeynmt/``) has flexatt's
sizes: LSTM encoder, bidirectional, ``hidden_size`` per direction; one-layer LSTM decoder of
``hidden_size`` with Bahdanau (MLP) attention of ``hidden_size`` units, input feeding and a bridge
initialisation; embeddings of ``emb_size``; dropout ``model.dropout`` on the embeddings and before
the attentional layer; untied embeddings and output layer; Adam at ``train.lr``, clipping at
``trainer.gradient_clip_val``, batches of ``train.batch_size`` sentences, loss summed per sentence
and averaged over the batch (Joey's ``normalization: batch``, as flexatt's ``sequence_nll``).
What stays different is architecture, not size: Joey's recurrent decoder is Luong-ordered (LSTM
first, attention queried with h_t, the attentional vector tanh(W[h_t; c_t]) fed back as input
feeding and used as the readout, an output layer without bias), flexatt's is Bahdanau-ordered
(attention queried with h_{t-1}, the 2H context fed to the LSTM, the readout
tanh(W_o[h_t; c_t; i_t]) computed after the loop for all steps at once).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
from pathlib import Path

from _peers import (ROOT, Peer, ToolkitWorker, log_tail, peer_arguments, peer_python, run_logged, serve, worker_pipe,
                    write_yaml)

TARGET_RATIO = 1.5
PEER = Peer(Path(__file__), key="joeynmt", name="Joey NMT", label="Joey NMT 2.3 (rnn)",
            setup="bash benchmarks/setup_joeynmt.sh")


# ======================================================================================
# The Joey NMT side: runs in .venv-joeynmt (imports nothing from flexatt)
# ======================================================================================
def load_joey(config: str, mode: str):
    """In a worker: Joey's parsed config, model and data (train, dev, test) for ``mode``
    ("train", "test"), as ``joeynmt train`` / ``joeynmt test`` prepare them."""
    from joeynmt.config import load_config, parse_global_args
    from joeynmt.prediction import prepare

    cfg = load_config(Path(config))
    Path(cfg["model_dir"]).mkdir(parents=True, exist_ok=True)
    gargs = parse_global_args(cfg, rank=0, mode=mode)
    return gargs, *prepare(gargs, rank=0, mode=mode)


def worker(args: argparse.Namespace) -> None:
    """Build Joey's model, trainer and batches, then answer commands, one JSON line each."""
    proto = worker_pipe(args.threads)
    import torch
    import joeynmt
    from joeynmt.training import TrainManager

    gargs, model, train_data, _, _ = load_joey(args.config, "train")
    trainer = TrainManager(
        rank=0, model=model, model_dir=gargs.model_dir, device=gargs.device, n_gpu=gargs.n_gpu,
        num_workers=gargs.num_workers, autocast=gargs.autocast, seed=gargs.seed,
        train_args=gargs.train, dev_args=None,
    )
    batches: list = []

    def train_round() -> float:
        """One pass over the batches: the body of Joey's training loop, minus its bookkeeping."""
        started = time.perf_counter()
        for batch in batches:
            trainer._train_step(batch)  # sort, forward + loss, normalise, backward
            if trainer.clip_grad_fun is not None:
                trainer.clip_grad_fun(parameters=model.parameters())
            trainer.optimizer.step()
            model.zero_grad()
        return time.perf_counter() - started

    def phase_round() -> dict:
        """The same step split into phases (``_train_step`` inlined, same calls)."""
        t = {"forward": 0.0, "backward": 0.0, "clip+adam+zero": 0.0}
        for batch in batches:
            t0 = time.perf_counter()
            model.train()
            batch.sort_by_src_length()
            loss, _, _, correct = model(return_type="loss", **vars(batch))
            norm = batch.normalize(loss, normalization=trainer.args.normalization,
                                   n_gpu=trainer.n_gpu, n_accumulation=trainer.args.batch_multiplier)
            t1 = time.perf_counter()
            norm.backward()
            norm.item(), correct.item()
            t2 = time.perf_counter()
            trainer.clip_grad_fun(parameters=model.parameters())
            trainer.optimizer.step()
            model.zero_grad()
            t3 = time.perf_counter()
            t["forward"] += t1 - t0
            t["backward"] += t2 - t1
            t["clip+adam+zero"] += t3 - t2
        return t

    def setup(msg: dict) -> dict:
        cpu = torch.device("cpu")
        batches[:] = [
            train_data.collate_fn([train_data[i] for i in idx], pad_index=model.pad_index,
                                  eos_index=model.eos_index, device=cpu)
            for idx in msg["batches"]
        ]
        return dict(
            joeynmt=joeynmt.__version__,
            torch=torch.__version__,
            threads=torch.get_num_threads(),
            parameters=sum(p.numel() for p in model.parameters() if p.requires_grad),
            vocab=[len(model.src_vocab), len(model.trg_vocab)],
            specials={"pad": model.pad_index, "bos": model.bos_index, "eos": model.eos_index,
                      "unk": model.unk_index},
            tokens=[int(b.ntokens) for b in batches],
            # before any training step (which sorts the rows): the rows in index order
            src=[b.src.tolist() for b in batches],
            trg=[b.trg.tolist() for b in batches],
            trg_input=[b.trg_input.tolist() for b in batches],
            model=repr(model),
        )

    def profile_round(msg: dict) -> dict:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU]) as prof:
            train_round()
        return {"table": prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=msg.get("rows", 25))}

    serve(proto, {"setup": setup, "run": lambda msg: {"seconds": train_round()},
                  "phases": lambda msg: {"phases": phase_round()}, "profile": profile_round})


# ======================================================================================
# The driver: runs in flexatt's .venv
# ======================================================================================
def joey_config(cfg, work_dir: Path, model_dir: Path, vocab_file: Path, *, updates: int,
                logging_freq: int) -> dict:
    """Joey NMT 2.3 config for its recurrent model with flexatt's sizes (see the module doc). (One
    long function: Joey's config file as one literal, section by section, each choice commented.)"""
    tok_dir = ROOT / str(cfg.train.data_dir)
    filter_dir = ROOT / str(cfg.tokenize.in_dir)
    m = cfg.model
    if m.att_size != m.hidden_size or m.readout_size != m.hidden_size:
        print(f"joeynmt_throughput: warning: Joey's attention and attentional-vector sizes equal the "
              f"decoder's hidden size ({m.hidden_size}); flexatt has att_size {m.att_size}, "
              f"readout_size {m.readout_size}", file=sys.stderr)
    dropout = float(m.dropout)

    def side(lang: str, model_file: Path) -> dict:
        return {
            "lang": lang,  # Joey reads <data.train>.<lang>: artifacts/filter/train.src / .tgt
            "level": "bpe",
            "tokenizer_type": "sentencepiece",
            "tokenizer_cfg": {"model_file": str(model_file)},
            "voc_file": str(vocab_file),
            "lowercase": False,
            "normalize": False,
            "max_length": -1,  # the filter stage has limited the length already
        }

    # validation only after the last update: never inside the timed part
    validation_freq = logging_freq * (updates // logging_freq + 10)
    return {
        "name": "flexatt_joeynmt_bench",
        "joeynmt_version": "2.3.0",
        "model_dir": str(model_dir),
        "use_cuda": False,
        "fp16": False,
        "random_seed": int(cfg.seed),
        "data": {
            "train": str(filter_dir / "train"),
            "dev": str(filter_dir / "dev"),
            "dataset_type": "plain",
            "src": side("src", tok_dir / "src.model"),
            "trg": side("tgt", tok_dir / "tgt.model"),
            # Joey's defaults: unk 0, pad 1, bos 2, eos 3 (the pieces of flexatt's model)
            "special_symbols": {"unk_token": "<unk>", "unk_id": 0, "pad_token": "<pad>", "pad_id": 1,
                                "bos_token": "<s>", "bos_id": 2, "eos_token": "</s>", "eos_id": 3},
        },
        "testing": {"n_best": 1, "beam_size": 1, "beam_alpha": 1.0, "batch_size": 64,
                    "batch_type": "sentence", "max_output_length": 100,
                    "eval_metrics": ["bleu"], "sacrebleu_cfg": {"tokenize": "13a"}},
        "training": {
            "optimizer": "adam",
            "adam_betas": [0.9, 0.999],
            "learning_rate": float(cfg.train.lr),
            "learning_rate_min": 1.0e-8,
            "weight_decay": 0.0,
            # Joey 2.3 requires a scheduler (no `scheduling` raises ConfigurationError) and its
            # "plateau" passes `verbose=`, which torch 2.13's ReduceLROnPlateau no longer takes;
            # "exponential" (ExponentialLR) steps once per epoch, never inside the timed steps,
            # and with a factor of 1 the rate stays at learning_rate
            "scheduling": "exponential",
            "decrease_factor": 1.0,
            "clip_grad_norm": float(cfg.trainer.gradient_clip_val),
            "batch_size": int(cfg.train.batch_size),
            "batch_type": "sentence",
            "batch_multiplier": 1,
            "normalization": "batch",
            "loss": "crossentropy",
            "label_smoothing": 0.0,
            "epochs": 1,
            "updates": updates,
            "logging_freq": logging_freq,
            "validation_freq": validation_freq,
            "early_stopping_metric": "loss",
            "shuffle": True,
            "overwrite": True,
            "keep_best_ckpts": 1,
            "num_workers": 0,
            "print_valid_sents": [],
        },
        "model": {
            "initializer": "xavier_uniform",
            "embed_initializer": "xavier_uniform",
            "bias_initializer": "zeros",
            "init_rnn_orthogonal": False,
            "lstm_forget_gate": 1.0,  # Joey's defaults (initialisation does not change the speed)
            "tied_embeddings": False,
            "tied_softmax": False,
            "encoder": {
                "type": "recurrent",
                "rnn_type": "lstm",
                "hidden_size": int(m.hidden_size),  # per direction, as flexatt's encoder
                "bidirectional": True,
                "num_layers": 1,
                "dropout": dropout,  # between layers only: no effect with one layer
                "embeddings": {"embedding_dim": int(m.emb_size), "scale": False, "dropout": dropout},
                "freeze": False,
            },
            "decoder": {
                "type": "recurrent",
                "rnn_type": "lstm",
                "hidden_size": int(m.hidden_size),
                "num_layers": 1,
                "attention": "bahdanau",
                "input_feeding": True,
                "init_hidden": "bridge",
                "dropout": dropout,  # between layers only
                "hidden_dropout": dropout,  # on [h_t; c_t] before the attentional layer
                "embeddings": {"embedding_dim": int(m.emb_size), "scale": False, "dropout": dropout},
                "freeze": False,
            },
        },
    }


def write_joey_vocab(src_vocab, tgt_vocab, path: Path) -> None:
    """Joey's vocabulary file: the SentencePiece model's pieces in id order, one per line; both
    sides share it (flexatt's ``tokenize.joint``, the default), which is checked."""
    pieces = [tgt_vocab.sp.id_to_piece(i) for i in range(len(tgt_vocab))]
    if [src_vocab.sp.id_to_piece(i) for i in range(len(src_vocab))] != pieces:
        sys.exit(f"{Path(sys.argv[0]).stem}: src.model and tgt.model differ; one vocabulary file per "
                 "side is not implemented (tokenize.joint is true by default)")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(pieces) + "\n", encoding="utf-8")


def check_same_data(batches, reply: dict, pad_id: int, unk_id: int) -> None:
    """Joey's batches must hold flexatt's token ids (up to Joey's pad/unk ids) row for row."""
    to_flex = {reply["specials"]["pad"]: pad_id, reply["specials"]["unk"]: unk_id}

    def mapped(rows):
        return [[to_flex.get(x, x) for x in row] for row in rows]

    for k, b in enumerate(batches):
        for name, ours, theirs in (("src", b.src, reply["src"][k]), ("tgt_out", b.tgt_out, reply["trg"][k]),
                                   ("tgt_in", b.tgt_in, reply["trg_input"][k])):
            if ours.tolist() != mapped(theirs):
                sys.exit(f"joeynmt_throughput: batch {k}: Joey's {name} ids differ from flexatt's "
                         f"(shapes {tuple(ours.shape)} vs {len(theirs)}x{len(theirs[0])})")


def run_joey_cli(python: Path, config: Path, model_dir: Path, threads: int, log: Path) -> list[float]:
    """``joeynmt train CONFIG --skip-test``; returns the 'Tokens per Sec' figures of its log."""
    code = run_logged(python, ["-m", "joeynmt", "train", str(config), "--skip-test"], log, threads)
    if code != 0:
        sys.exit(f"joeynmt_throughput: `joeynmt train` failed (exit {code}):\n{log_tail(log)}")
    text = log.read_text(errors="replace")
    if re.search(r"Validation result|Evaluation result", text):
        print("joeynmt_throughput: warning: `joeynmt train` validated during the run", file=sys.stderr)
    return [float(x) for x in re.findall(r"Tokens per Sec:\s*([0-9.]+)", text)]


def spread(xs: list[float]) -> str:
    return f"{min(xs):8.0f}–{max(xs):<8.0f}"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    peer_arguments(parser, python_flag="joey", venv=".venv-joeynmt", work_dir="artifacts/bench/joeynmt",
                   work_help="Joey's config, vocabulary, model dir and logs", rounds=7)
    parser.add_argument("--variant", default="global", help="flexatt variant (default: global)")
    parser.add_argument("--batches", type=int, default=15, help="training steps per measurement")
    parser.add_argument("--joey-cli-steps", type=int, default=60,
                        help="also run `joeynmt train` for this many updates (0: skip)")
    parser.add_argument("--profile", action="store_true",
                        help="also time the phases of a step and print the top operators of both")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    if args.worker:
        worker(args)
        return

    os.environ["OMP_NUM_THREADS"] = str(args.threads)  # before torch is imported
    import torch

    torch.set_num_threads(args.threads)
    from flexatt.config import load_params
    from flexatt.data.subwords import PAD_ID, UNK_ID
    from flexatt.runtime import GLIBC_ENV

    from _common import training_round  # (its import tunes the allocator, as the stages do)

    joey_python = peer_python(PEER, args.peer_python)
    cfg = load_params(args.params)
    work = (ROOT / args.work_dir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    data = flexatt_batches(cfg, args.batches)

    # the Joey side: vocabulary and config, then its two workers on the same pairs
    vocab_file = work / "vocab.txt"
    write_joey_vocab(data["src_vocab"], data["tgt_vocab"], vocab_file)
    write_yaml(work / "bench.yaml", joey_config(cfg, work, work / "model", vocab_file, updates=10**9,
                                                logging_freq=100))
    workers = {"joeynmt": ToolkitWorker(joey_python, work / "bench.yaml", args.threads, work / "worker.log",
                                        script=PEER.script),
               "joeynmt_tuned": ToolkitWorker(joey_python, work / "bench.yaml", args.threads,
                                              work / "worker_tuned.log", script=PEER.script, extra_env=GLIBC_ENV)}
    try:
        for w in workers.values():
            info = w.ask("setup", batches=data["index_lists"])
            if info["tokens"] != data["batch_tokens"]:
                sys.exit(f"joeynmt_throughput: target token counts differ: flexatt {data['batch_tokens']}, "
                         f"Joey {info['tokens']}")
            check_same_data(data["batches"], info, PAD_ID, UNK_ID)
        own, models = flexatt_models(cfg, args.variant, data)
        clip = float(cfg.trainer.gradient_clip_val)

        def run(name: str) -> float:
            if name in own:
                return training_round(*models[name], data["batches"], clip, own[name])
            return float(workers[name].ask("run")["seconds"])

        names = [*own, *workers]
        started = time.perf_counter()
        for name in names:  # warm-up
            run(name)
        seconds: dict[str, list[float]] = {name: [] for name in names}
        for r in range(args.rounds):
            for name in names[r % len(names):] + names[:r % len(names)]:
                seconds[name].append(run(name))
        print_figures(args, cfg, data, info, own, models["flexatt"][0], seconds, work,
                      (time.perf_counter() - started) / 60)
        if args.profile:
            profile_phases(*models["flexatt"], data["batches"], own["flexatt"], clip, workers["joeynmt"], run)
    finally:
        for w in workers.values():
            w.close()

    if args.joey_cli_steps > 0:
        cli_cross_check(args, cfg, work, vocab_file, joey_python,
                        lambda: write_joey_vocab(data["src_vocab"], data["tgt_vocab"], vocab_file))


def flexatt_batches(cfg, count: int) -> dict:
    """The first ``count`` batches of flexatt's length-grouped order of the training split
    (``benchmarks/train_throughput.py``'s): ``batches``, their ``index_lists`` (for Joey's
    worker) and ``batch_tokens``, with the ``split`` and both vocabularies."""
    from flexatt.data.batching import LengthGroupedBatches, ParallelData, collate
    from flexatt.data.subwords import EncodedSplit, Vocab

    tok_dir = ROOT / str(cfg.train.data_dir)
    split = EncodedSplit.load(tok_dir / "train.npz")
    sampler = LengthGroupedBatches(split.src_lengths, split.tgt_lengths, cfg.train.batch_size, seed=0)
    pairs = ParallelData(split)
    index_lists = list(sampler)[:count]
    batches = [collate([pairs[i] for i in idx]) for idx in index_lists]
    return {"split": split, "src_vocab": Vocab(tok_dir / "src.model"), "tgt_vocab": Vocab(tok_dir / "tgt.model"),
            "index_lists": index_lists, "batches": batches, "batch_tokens": [b.n_tgt_tokens for b in batches]}


def flexatt_models(cfg, variant: str, data: dict) -> tuple[dict[str, str], dict]:
    """flexatt's copies to time: ``own`` = {name: precision} (``flexatt`` at
    ``trainer.precision`` as training resolves it, and ``flexatt_fp32`` where that is not
    32-true) and ``models`` = {name: (model, Adam)}, each built from seed 0."""
    import torch

    from flexatt.data.subwords import PAD_ID
    from flexatt.model import build_model
    from flexatt.runtime import resolve_precision
    from flexatt.trainer import model_config

    from _common import FP32

    precision, reason = resolve_precision(cfg.trainer.precision, str(cfg.trainer.accelerator))
    precision = str(precision)
    print(f"flexatt precision {precision} ({reason})")
    own = {"flexatt": precision}
    if precision not in FP32:
        own["flexatt_fp32"] = "32-true"
    models = {}
    for name in own:
        torch.manual_seed(0)
        model = build_model(model_config(cfg, variant), len(data["src_vocab"]), len(data["tgt_vocab"]),
                            PAD_ID).train()
        models[name] = model, torch.optim.Adam(model.parameters(), lr=float(cfg.train.lr))
    return own, models


def print_figures(args, cfg, data: dict, info: dict, own: dict[str, str], model, seconds: dict[str, list[float]],
                  work: Path, timed_minutes: float) -> None:
    """The setting, the table of tokens per second (median, spread, minutes per epoch) and the
    ratios of each flexatt copy to Joey out of the box and with the same allocator settings."""
    import torch

    from flexatt.model import count_parameters

    from _common import ALLOCATOR_TUNED

    tokens = sum(data["batch_tokens"])
    rates = {k: [tokens / s for s in v] for k, v in seconds.items()}
    med = {k: statistics.median(v) for k, v in rates.items()}
    m, split = cfg.model, data["split"]
    print(f"joeynmt_throughput: {len(data['batches'])} batches of {cfg.train.batch_size} pairs "
          f"({tokens} target tokens incl. EOS), {args.rounds} rounds after a warm-up, "
          f"{args.threads} threads, torch {torch.__version__}")
    print(f"  sizes: emb {m.emb_size}, hidden {m.hidden_size} (encoder: per direction), "
          f"att {m.att_size}, readout {m.readout_size}, vocab {len(data['tgt_vocab'])}, dropout {m.dropout}")
    print(f"  flexatt {args.variant}: {count_parameters(model):,} parameters; "
          f"Joey NMT {info['joeynmt']} recurrent (torch {info['torch']}, {info['threads']} threads): "
          f"{info['parameters']:,} parameters")
    print(f"  same pairs, same token ids in both (checked batch by batch); Joey config "
          f"{work / 'bench.yaml'}")
    tuned = "tuned" if ALLOCATOR_TUNED else "C library defaults"
    print(f"{'model':50s} {'tokens/s':>10s} {'spread':>17s} {'min/epoch':>10s}")
    epoch_tokens = int(split.tgt_lengths.sum()) + len(split)
    labels = {"flexatt": f"flexatt ({args.variant}; {own['flexatt']}; allocator {tuned})",
              "flexatt_fp32": f"flexatt ({args.variant}; 32-true; allocator {tuned})",
              "joeynmt": "Joey NMT 2.3 (rnn; out of the box)",
              "joeynmt_tuned": "Joey NMT 2.3 (rnn; flexatt's allocator settings)"}
    for name in seconds:
        print(f"{labels[name]:50s} {med[name]:10.0f} {spread(rates[name])} {epoch_tokens / med[name] / 60:10.2f}")
    for ours in own:
        for name, what in (("joeynmt", "Joey NMT out of the box"),
                           ("joeynmt_tuned", "Joey NMT with the same allocator settings")):
            paired = [f / j for f, j in zip(rates[ours], rates[name])]
            r = med[ours] / med[name]
            target = ours == "flexatt" and name == "joeynmt"
            verdict = ("meets" if r >= TARGET_RATIO else "is BELOW") + f" the {TARGET_RATIO}x target"
            print(f"ratio flexatt {own[ours]} / {what}{' (the target)' if target else ''}: {r:.2f}x "
                  f"(median of per-round ratios {statistics.median(paired):.2f}x, range "
                  f"{min(paired):.2f}–{max(paired):.2f})" + (f"; {verdict}" if target else ""))
    print(f"side by side (warm-up and rounds): {timed_minutes:.1f} min")


def profile_phases(model, opt, batches, precision: str, clip: float, joey: ToolkitWorker, run) -> None:
    """``--profile``: seconds per phase of one round (forward incl. loss, backward, clipping +
    Adam + zero_grad) of flexatt and of Joey's worker, then the top operators of one round of
    each (``run("flexatt")``: one timed round)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from flexatt.data.subwords import PAD_ID
    from flexatt.model import sequence_nll

    from _common import precision_context

    print("\n== phases of one round (seconds; forward incl. loss) ==")
    t = {"forward": 0.0, "backward": 0.0, "clip+adam+zero": 0.0}
    for b in batches:
        t0 = time.perf_counter()
        with precision_context(precision):
            logits, _ = model(b.src, b.src_len, b.tgt_in)
            loss = sequence_nll(logits, b.tgt_out, b.tgt_out != PAD_ID)
        t1 = time.perf_counter()
        opt.zero_grad()
        loss.backward()
        t2 = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        t3 = time.perf_counter()
        t["forward"] += t1 - t0
        t["backward"] += t2 - t1
        t["clip+adam+zero"] += t3 - t2
    tj = joey.ask("phases")["phases"]
    for k in t:
        print(f"  {k:16s} flexatt {t[k]:7.3f}   Joey {tj[k]:7.3f}")
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        run("flexatt")
    print("\n== flexatt: top operators of one round (self CPU time) ==")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))
    print("== Joey NMT: top operators of one round (self CPU time) ==")
    print(joey.ask("profile", rows=25)["table"])


def cli_cross_check(args, cfg, work: Path, vocab_file: Path, joey_python: Path, write_vocab) -> None:
    """``joeynmt train`` itself for ``--joey-cli-steps`` updates on the same config: the "Tokens
    per Sec" its log reports (``write_vocab`` writes the vocabulary again: the work dir may have
    been cleaned)."""
    logging_freq = max(1, args.joey_cli_steps // 3)
    cli_cfg = joey_config(cfg, work, work / "model_cli", vocab_file,
                          updates=args.joey_cli_steps, logging_freq=logging_freq)
    write_vocab()
    write_yaml(work / "cli.yaml", cli_cfg)
    started = time.perf_counter()
    figures = run_joey_cli(joey_python, work / "cli.yaml", work / "model_cli", args.threads,
                           work / "cli.log")
    shown = ", ".join(f"{x:.0f}" for x in figures)
    later = figures[1:] or figures
    print(f"cross-check, `joeynmt train` for {args.joey_cli_steps} updates on its own shuffled "
          f"batches (log every {logging_freq}; the first interval includes start-up): Tokens per Sec "
          f"{shown}; median after the first {statistics.median(later):.0f}; "
          f"{(time.perf_counter() - started) / 60:.1f} min; log {work / 'cli.log'}")

if __name__ == "__main__":
    main()

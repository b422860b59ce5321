"""The harness of the benchmarks that measure flexatt against a peer toolkit, side by side
(``joeynmt_throughput.py``, ``joeynmt_decode.py``: Joey NMT; ``opennmt_decode.py``: OpenNMT-py).

A peer runs in a virtualenv of its own (``benchmarks/setup_peer.sh PEER``), in a worker process:
the benchmark script itself, run by the peer's Python with ``--worker``, which imports nothing
from flexatt and answers one JSON line per command over a pipe while flexatt runs in the driver.
This module holds both sides; what stays in each script is what is specific to its peer (the
peer's config, its vocabulary file, what its worker runs):

* the worker's side, importable without flexatt or torch: :func:`worker_pipe`, :func:`serve`;
* the driver's side: :class:`ToolkitWorker` (start a worker, ask, close), :func:`run_logged` and
  :func:`train_once` (a peer's command line into a log; its model trained once per config),
  :func:`write_yaml`, :func:`peer_arguments` (the options every peer script takes);
* the decoding comparison: :func:`decode_main` and :func:`decode_benchmark` (flexatt's ``global``
  model against the peer's on the test set, what ``*_decode.py`` run) and :func:`compare_decoding`
  (the rounds, the table).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Peer:
    """A peer toolkit as a benchmark script drives it: ``script`` (the file its Python runs
    with ``--worker``; its stem begins every message), ``key`` (its key in the figures: the JSON
    record and the rounds), ``name`` (in the ratio line and messages), ``label`` (its row of the
    table), ``setup`` (the command that creates its virtualenv) and ``env`` (more environment
    for its processes)."""

    script: Path
    key: str
    name: str
    label: str
    setup: str
    env: Mapping[str, str] = field(default_factory=dict)

    @property
    def prog(self) -> str:
        return self.script.stem


# ======================================================================================
# The worker's side: runs in the peer's virtualenv (standard library only)
# ======================================================================================
def worker_pipe(threads: int):
    """In a worker: the pipe to the driver (stdout as it was); from here on anything printed goes
    to stderr (the worker log). Sets the intra-op threads."""
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    import torch

    torch.set_num_threads(threads)
    return proto


def serve(proto, handlers: Mapping[str, Callable[[dict], dict]], **ready) -> None:
    """Answer the driver's commands (``{"cmd": name, ...}``, a JSON line each on stdin) with
    ``handlers[name](message)``, a JSON line each on ``proto``, until ``quit``. ``ready``: the
    fields of a first line sent before any command (none: no such line)."""
    def reply(**msg) -> None:
        proto.write(json.dumps(msg) + "\n")

    if ready:
        reply(ok=True, ready=True, **ready)
    for line in sys.stdin:
        msg = json.loads(line)
        cmd = msg["cmd"]
        if cmd == "quit":
            reply(ok=True)
            return
        if cmd not in handlers:
            reply(ok=False, error=f"unknown command {cmd!r}")
            continue
        reply(ok=True, **handlers[cmd](msg))


# ======================================================================================
# The driver's side: runs in flexatt's .venv
# ======================================================================================
def peer_env(threads: int, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a peer's process: ``threads`` intra-op threads, and ``extra``."""
    return dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), **(extra or {}))


def log_tail(path: Path, lines: int = 30) -> str:
    """The last ``lines`` lines of a log, for an error message."""
    return "".join(path.read_text(errors="replace").splitlines(True)[-lines:])


class ToolkitWorker:
    """A peer toolkit's worker process (``script --worker``, run by the toolkit's own Python in its
    virtualenv), driven over stdin/stdout, one JSON line per command and reply."""

    def __init__(self, python: Path, config: Path, threads: int, log: Path, *, script: Path,
                 extra_env: Mapping[str, str] | None = None):
        self.log_path = log
        self.name = script.stem
        self.log = log.open("w")
        self.proc = subprocess.Popen(
            [str(python), str(script.resolve()), "--worker", "--config", str(config), "--threads", str(threads)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True,
            env=peer_env(threads, extra_env), cwd=ROOT,
        )

    def ready(self) -> dict:
        """The worker's first line, sent once it has loaded (:func:`serve`'s ``ready``)."""
        return json.loads(self.proc.stdout.readline() or "{}")

    def ask(self, cmd: str, **payload) -> dict:
        self.proc.stdin.write(json.dumps({"cmd": cmd, **payload}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait()
            self.log.flush()
            sys.exit(f"{self.name}: the worker died (exit {self.proc.returncode}); "
                     f"last lines of {self.log_path}:\n{log_tail(self.log_path)}")
        reply = json.loads(line)
        if not reply.get("ok"):
            sys.exit(f"{self.name}: worker error: {reply.get('error')}")
        return reply

    def close(self) -> None:
        if self.proc.poll() is None:
            self.ask("quit")
            self.proc.wait(timeout=60)
        self.log.close()


def write_yaml(path: Path, data: dict) -> None:
    import yaml

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), encoding="utf-8")


def run_logged(python: Path, args: list[str], log: Path, threads: int,
               extra_env: Mapping[str, str] | None = None) -> int:
    """``python args...`` from the repository root with ``threads`` threads, stdout and stderr
    into ``log``; its exit status."""
    with log.open("w") as out:
        return subprocess.run([str(python), *args], stdout=out, stderr=subprocess.STDOUT,
                              env=peer_env(threads, extra_env), cwd=ROOT).returncode


def train_once(peer: Peer, python: Path, args: list[str], config: dict, config_path: Path, product: Path, *,
               command: str, amount: str, threads: int) -> None:
    """Train the peer's model with ``python args...`` (its log: ``train.log`` beside
    ``config_path``, where ``config`` is written) once per ``config``: a stamp of the config's
    digest beside ``product`` (the checkpoint that training leaves) says it is trained.
    ``command`` (e.g. "joeynmt train") and ``amount`` (e.g. "3 epochs") are for the messages."""
    digest = hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16]
    stamp = product.parent / "flexatt-bench.stamp"
    log = config_path.parent / "train.log"
    write_yaml(config_path, config)
    if stamp.is_file() and stamp.read_text().strip() == digest and product.exists():
        print(f"{peer.prog}: {peer.name}'s model is trained ({product})", flush=True)
        return
    print(f"{peer.prog}: training {peer.name}'s model ({amount}; log {log})", flush=True)
    started = time.perf_counter()
    product.parent.mkdir(parents=True, exist_ok=True)
    code = run_logged(python, args, log, threads, peer.env)
    if code != 0 or not product.exists():
        sys.exit(f"{peer.prog}: `{command}` failed (exit {code}):\n{log_tail(log)}")
    stamp.write_text(digest + "\n")
    print(f"{peer.prog}: trained in {(time.perf_counter() - started) / 60:.1f} min", flush=True)


def peer_arguments(parser: argparse.ArgumentParser, *, python_flag: str, venv: str, work_dir: str,
                   work_help: str, rounds: int) -> None:
    """The options of every peer script: ``--params``, ``--rounds``, ``--threads``,
    ``--<python_flag>-python`` (the peer's Python, in ``venv``; ``args.peer_python``),
    ``--work-dir`` and the worker's own hidden ``--worker``, ``--config``."""
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(f"--{python_flag}-python", dest="peer_python", metavar="PYTHON",
                        default=str(ROOT / venv / "bin" / "python"),
                        help=f"the peer's Python (default: {venv}/bin/python)")
    parser.add_argument("--work-dir", default=work_dir, help=work_help)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--config", help=argparse.SUPPRESS)


def peer_python(peer: Peer, path: str) -> Path:
    """The peer's Python, or exit saying how to install it."""
    python = Path(path)
    if not python.exists():
        sys.exit(f"{peer.prog}: {python} not found: run `{peer.setup}` first")
    return python


def batches_per_epoch(cfg) -> int:
    """Training batches of ``train.batch_size`` sentences in an epoch of the filtered pairs."""
    from flexatt.io import read_lines

    pairs = len(read_lines(ROOT / str(cfg.tokenize.in_dir) / "train.src"))
    return -(-pairs // int(cfg.train.batch_size))


# ======================================================================================
# The decoding comparison (joeynmt_decode.py, opennmt_decode.py)
# ======================================================================================
def compare_decoding(worker: ToolkitWorker, flexatt_round, *, peer: Peer, sentences: int, references: list[str],
                     rounds: int, target: float) -> dict:
    """Translate the test set side by side: flexatt (``flexatt_round() -> (seconds, hypotheses)``)
    and a peer's ``worker`` (command ``decode``), a warm-up each, then ``rounds`` rounds in
    alternating order; prints the table (sentences/s, spread, BLEU, words) and the ratio of the
    medians against ``target``. Returns the figures for the JSON record. Closes the worker."""
    from flexatt.metrics import corpus_bleu

    key = peer.key
    _, flex_hyps = flexatt_round()  # warm-up (and the kernel's build, if not cached)
    hyps = {"flexatt": flex_hyps, key: worker.ask("decode", outputs=True)["hypotheses"]}
    times = {"flexatt": [], key: []}
    for r in range(rounds):
        for side in (("flexatt", key) if r % 2 == 0 else (key, "flexatt")):
            times[side].append(flexatt_round()[0] if side == "flexatt" else worker.ask("decode")["seconds"])
    worker.close()

    rate = {k: [sentences / s for s in v] for k, v in times.items()}
    ratios = [f / o for f, o in zip(rate["flexatt"], rate[key])]
    bleu = {k: corpus_bleu(h, [references])[0] for k, h in hyps.items()}
    words = {k: sum(len(x.split()) for x in h) / sentences for k, h in hyps.items()}
    med = {k: statistics.median(v) for k, v in rate.items()}
    print(f"{'toolkit':38s} {'sent/s':>8s} {'spread':>17s} {'BLEU':>6s} {'words/sentence':>15s} {'words/s':>8s}")
    for side, name in (("flexatt", "flexatt (global, compiled step)"), (key, peer.label)):
        print(f"{name:38s} {med[side]:8.1f} {min(rate[side]):8.1f}–{max(rate[side]):<8.1f} "
              f"{bleu[side]:6.2f} {words[side]:15.1f} {med[side] * words[side]:8.0f}")
    ratio = med["flexatt"] / med[key]
    verdict = "meets" if ratio >= target else "misses"
    print(f"ratio flexatt / {peer.name}: {ratio:.2f}x (per round {min(ratios):.2f}–{max(ratios):.2f}); "
          f"{verdict} the {target:g}x target", flush=True)
    print(f"words per second (output length taken out): "
          f"{med['flexatt'] * words['flexatt'] / (med[key] * words[key]):.2f}x")
    return {"sentences_per_second": rate, "ratio": ratio, "ratios_per_round": ratios, "bleu": bleu,
            "words_per_sentence": words}


#: what a peer script's ``prepare`` returns: the config its worker loads, and more fields of the
#: JSON record; None: nothing more to do (the model is trained, nothing is timed)
Prepared = tuple[Path, dict] | None


def decode_main(parser: argparse.ArgumentParser, peer: Peer, worker: Callable[[argparse.Namespace], None],
                prepare: Callable[..., Prepared], *, target: float) -> None:
    """What a ``*_decode.py`` script runs, given its ``parser`` (:func:`peer_arguments` and its
    own): with ``--worker`` (run by the peer's Python), ``worker(args)``; else
    :func:`decode_benchmark`."""
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    decode_benchmark(args, peer, prepare, target=target)


def decode_benchmark(args: argparse.Namespace, peer: Peer, prepare: Callable[..., Prepared], *,
                     target: float) -> None:
    """flexatt's ``global`` model (``evaluate.checkpoints.global``) against the peer's on the test
    set, as ``flexatt translate`` and the stages decode it (``translate_split`` with
    ``decode.beam_size``, ``alpha``, ``max_len_ratio``, ``batch_size``), timed side by side with
    the peer's worker (:func:`compare_decoding`); the figures go to ``args.out`` (JSON).

    ``prepare(cfg, work, python, args)`` writes the peer's vocabulary and configs under the work
    folder, trains its model once (:func:`train_once`) and returns what :data:`Prepared` says."""
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    import torch

    torch.set_num_threads(args.threads)
    from flexatt.config import load_params
    from flexatt.data.subwords import EncodedSplit, Vocab
    from flexatt.checkpoints import load_model
    from flexatt.io import read_lines
    from flexatt.decoding.translate import DecodeOptions, translate_split

    python = peer_python(peer, args.peer_python)
    cfg = load_params(args.params)
    tok_dir = ROOT / str(cfg.train.data_dir)
    filter_dir = ROOT / str(cfg.tokenize.in_dir)
    checkpoint = ROOT / str(cfg.evaluate.checkpoints["global"])
    for path in (checkpoint, tok_dir / "test.npz", *(filter_dir / f for f in ("train.src", "test.src", "test.tgt"))):
        if not path.is_file():
            sys.exit(f"{peer.prog}: {path} not found: run `dvc repro` first")
    work = (ROOT / args.work_dir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    prepared = prepare(cfg, work, python, args)
    if prepared is None:
        return
    worker_config, record = prepared

    model = load_model(checkpoint)
    tgt_vocab = Vocab(tok_dir / "tgt.model")
    split = EncodedSplit.load(tok_dir / "test.npz")
    refs = read_lines(tok_dir / "test.ref")
    options = DecodeOptions(beam_size=int(cfg.decode.beam_size), alpha=float(cfg.decode.alpha),
                            max_len_ratio=float(cfg.decode.max_len_ratio), batch_size=int(cfg.decode.batch_size))

    def flexatt_round() -> tuple[float, list[str]]:
        started = time.perf_counter()
        out = translate_split(model, split, tgt_vocab, options)
        return time.perf_counter() - started, out.hypotheses

    worker = ToolkitWorker(python, worker_config, args.threads, work / "worker.log", script=peer.script,
                           extra_env=peer.env)
    ready = worker.ready()
    if ready.get("sentences") != len(split):
        worker.proc.wait()
        sys.exit(f"{peer.prog}: {peer.name} loaded {ready.get('sentences')} test sentences, flexatt "
                 f"{len(split)}; worker log:\n{log_tail(work / 'worker.log')}")
    print(f"{peer.prog}: {len(split)} test sentences, beam {options.beam_size}, batches of "
          f"{options.batch_size}, {args.rounds} rounds, {args.threads} threads", flush=True)
    figures = compare_decoding(worker, flexatt_round, peer=peer, sentences=len(split), references=refs,
                               rounds=args.rounds, target=target)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    settings = {k: getattr(options, k) for k in ("beam_size", "alpha", "max_len_ratio", "batch_size")}
    out.write_text(json.dumps({"sentences": len(split), "settings": settings, "rounds": args.rounds,
                               "threads": args.threads, **figures, **record}, indent=2) + "\n")
    print(f"written {out}")

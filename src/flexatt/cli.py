"""The ``flexatt`` command line.

``flexatt params [OVERRIDE ...]`` composes ``conf/`` into ``params.yaml`` exactly as
``dvc exp run -S OVERRIDE`` does (e.g. ``flexatt params profile=smoke``), for ``dvc repro``.

``flexatt pipeline PROFILE ...`` writes each profile's DVC pipeline, ``pipelines/<profile>/dvc.yaml``
and ``params.yaml``, from the root ``dvc.yaml`` and ``conf/`` (:mod:`flexatt.pipeline`).

``flexatt repro [STAGE ...] [--force] [--cores N]`` runs ``dvc repro`` with independent stages
side by side, trainings at ``train.threads`` threads each (:mod:`flexatt.schedule`): the same
results as ``dvc repro``, sooner on a multi-core CPU (``make repro`` runs it).

``flexatt report [--output FILE]`` renders every DVC plot and figure into one HTML page that
opens without a network (:mod:`flexatt.report`); ``flexatt dashboard --entity E --project P``
saves a W&B workspace and report of the project's runs (:mod:`flexatt.dashboard`).

``flexatt translate --checkpoint CKPT [--input FILE] [--beam 5] [--tau 1.2] [--stats FILE]
[--alignments FILE] [--backend auto]`` translates one sentence per line (stdin or a file) with a
trained model; an empty line gives an empty line. The SentencePiece models ``src.model`` /
``tgt.model`` are taken from the checkpoint's folder (training writes them there), or from
``--tok-dir``; a vocabulary that is not the checkpoint's (another size, or another file than the
one it records) is refused by name. ``--stats`` writes a JSON line per sentence with the window
scored at each decoding step and what decoded it (backend, SIMD level, torch version).
``--alignments`` writes word alignments in Pharaoh format (``i-j``: source word i, output word j,
0-based over whitespace words), a line per input line: for each output word the source word it
attended to most (attention summed over each word's pieces; the mapping the evaluation's AER
uses, :func:`flexatt.metrics.attention_alignment`).
"""

from __future__ import annotations

import argparse
import math
import sys
import zipfile
from pathlib import Path


def write_params(overrides: list[str], output: Path, config_dir: Path) -> None:
    """Compose ``config_dir/config.yaml`` with ``overrides`` into ``output`` (DVC's composer)."""
    from dvc.utils.hydra import compose_and_dump

    compose_and_dump(output, str(config_dir.resolve()), None, "config", str(config_dir.resolve()),
                     overrides)


def vocabularies(checkpoint: Path, tok_dir: Path | None):
    """The (source, target) SentencePiece vocabularies of ``checkpoint``: ``src.model`` and
    ``tgt.model`` in ``tok_dir`` when it is given, else beside the checkpoint; each must be the
    one the model was trained with (:func:`flexatt.checkpoints.check_vocabulary`).

    Raises:
        DataError: a model file is missing, or its vocabulary is not the checkpoint's.
    """
    from flexatt.checkpoints import check_vocabulary, checkpoint_hparams
    from flexatt.data.subwords import Vocab
    from flexatt.errors import DataError

    folder = checkpoint.parent if tok_dir is None else tok_dir
    hparams = checkpoint_hparams(checkpoint)
    vocabs = []
    for side in ("src", "tgt"):
        path = folder / f"{side}.model"
        if not path.is_file():
            raise DataError(path, f"not found: the {side} SentencePiece model of {checkpoint} "
                            "(put it beside the checkpoint, or pass --tok-dir)")
        vocab = Vocab(path)
        check_vocabulary(checkpoint, hparams, side, path, len(vocab))
        vocabs.append(vocab)
    return vocabs[0], vocabs[1]


def translate(args: argparse.Namespace) -> None:
    """Translate ``args.input`` (or stdin) to stdout."""
    import json

    from flexatt.data.subwords import EOS_ID, EncodedSplit
    from flexatt.errors import ConfigError, DataError
    from flexatt.checkpoints import load_model
    from flexatt.decoding.translate import DecodeOptions, translate_split
    from flexatt.io import atomic_path, decode_line, write_lines
    from flexatt.metrics import attention_alignment
    from flexatt.tau import check as check_tau

    if args.beam < 1:
        raise ConfigError("--beam", f"must be >= 1 (got {args.beam})")
    try:
        tau = check_tau(args.tau, "--tau")
    except ValueError as exc:
        raise ConfigError("--tau", str(exc).removeprefix("--tau ")) from None
    raw = args.input.read_bytes() if args.input else sys.stdin.buffer.read()
    where = str(args.input or "<stdin>")
    lines = [decode_line(line.rstrip(b"\r"), where, i + 1) for i, line in enumerate(raw.split(b"\n"))]
    if lines and lines[-1] == "":
        lines.pop()
    if not args.checkpoint.is_file():
        raise DataError(args.checkpoint, "not found")
    if not zipfile.is_zipfile(args.checkpoint):
        raise DataError(args.checkpoint, "not a readable checkpoint (not a PyTorch checkpoint archive: "
                        "corrupt, truncated or another kind of file)")
    model = load_model(args.checkpoint)
    src_vocab, tgt_vocab = vocabularies(args.checkpoint, args.tok_dir)
    # empty (or blank) lines are not decoded: they give empty lines, in place
    texts = [" ".join(s.split()) for s in lines]
    rows = [i for i, text in enumerate(texts) if text]
    hypotheses = [""] * len(lines)
    if rows:
        split = EncodedSplit.from_lists(src_vocab.encode([texts[i] for i in rows]), [[]] * len(rows))
        traced = args.stats is not None or args.alignments is not None
        options = DecodeOptions(beam_size=args.beam, alpha=args.alpha, backend=args.backend, tau=tau)
        out = translate_split(model, split, tgt_vocab, options, trace_indices=set(range(len(rows))) if traced else None)
        for k, i in enumerate(rows):
            hypotheses[i] = out.hypotheses[k]
    sys.stdout.write("".join(f"{h}\n" for h in hypotheses))
    if args.alignments:
        links = [""] * len(lines)
        for k, i in enumerate(rows):
            trace = out.traces[k]
            src_pieces = [src_vocab.sp.id_to_piece(int(t)) for t in split.src(k)]
            out_pieces = [tgt_vocab.sp.id_to_piece(t) for t in trace.tokens.tolist() if t != EOS_ID]
            pairs = sorted(attention_alignment(trace.attention, src_pieces, out_pieces), key=lambda p: (p[1], p[0]))
            links[i] = " ".join(f"{s}-{t}" for s, t in pairs)
        write_lines(args.alignments, links)
    if args.stats:
        where = {i: k for k, i in enumerate(rows)}
        with atomic_path(args.stats) as tmp, open(tmp, "w", encoding="utf-8") as handle:
            for i in range(len(lines)):
                if i not in where:
                    handle.write(json.dumps({"index": i, "src_len": 0, "steps": 0, "mean_window": 0.0,
                                             "windows": [], "span": [], "decoded_by": None}) + "\n")
                    continue
                k = where[i]
                trace = out.traces[k]
                handle.write(json.dumps({
                    "index": i, "src_len": int(out.src_lengths[k]), "steps": int(out.steps[k]),
                    "mean_window": round(float(out.window_sum[k]) / max(int(out.steps[k]), 1), 3),
                    "windows": trace.window.tolist(),
                    "span": [[int(a), int(b)] for a, b in zip(trace.span_lo.tolist(), trace.span_hi.tolist())],
                    "decoded_by": out.decoded_by,
                }) + "\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="flexatt", description="Flexible Attention NMT pipeline")
    sub = parser.add_subparsers(dest="command", required=True)
    params = sub.add_parser("params", help="compose conf/ into params.yaml (as dvc exp run does)")
    params.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. profile=smoke")
    params.add_argument("--output", type=Path, default=Path("params.yaml"))
    params.add_argument("--config-dir", type=Path, default=Path("conf"))
    pipe = sub.add_parser("pipeline", help="write pipelines/<profile>/dvc.yaml and params.yaml from dvc.yaml and conf/")
    pipe.add_argument("profiles", nargs="+", metavar="PROFILE", help="profiles of conf/profile/, e.g. smoke char paper")
    pipe.add_argument("--check", action="store_true", help="write nothing; exit 1 where a file differs")
    tr = sub.add_parser("translate", help="translate text with a trained checkpoint")
    tr.add_argument("--checkpoint", type=Path, required=True, help="e.g. artifacts/models_ft/flexible/best.ckpt")
    tr.add_argument("--tok-dir", type=Path, default=None,
                    help="take src.model and tgt.model from here (default: beside the checkpoint)")
    tr.add_argument("--input", type=Path, help="one sentence per line (default: stdin)")
    tr.add_argument("--beam", type=int, default=5, help="beam size (1: greedy)")
    tr.add_argument("--tau", type=float, default=math.inf, help="flexible attention's threshold (default: inf)")
    tr.add_argument("--alpha", type=float, default=1.0, help="length normalisation exponent")
    tr.add_argument("--stats", type=Path, help="write per-sentence window statistics here (JSON lines)")
    tr.add_argument("--alignments", type=Path,
                    help="write word alignments (Pharaoh i-j, from the attention) here, a line per input line")
    tr.add_argument("--backend", default="auto", choices=("auto", "kernel", "eager"),
                    help="decoding backend (default: auto, the fastest that covers the model)")
    repro = sub.add_parser("repro", help="dvc repro with independent stages side by side (make repro)")
    repro.add_argument("stages", nargs="*", help="the stages to bring up to date, with their upstream (a pipeline's dvc.yaml: all its stages; default: the root pipeline's)")
    repro.add_argument("--force", action="store_true", help="run every stage, changed or not (dvc repro --force)")
    repro.add_argument("--cores", type=int, default=None, help="cores to use (default: all this process may use)")
    repro.add_argument("--commit", action="store_true",
                       help="commit each stage to git the moment it succeeds (its git-kept outputs and dvc.lock; "
                            "a long profile's unit frozen first)")
    rep = sub.add_parser("report", help="every DVC plot and figure in one HTML page that opens offline")
    rep.add_argument("--output", type=Path, default=None, help="default: dvc_plots/report.html")
    dash = sub.add_parser("dashboard", help="save a W&B workspace and report of the project's runs (online)")
    dash.add_argument("--entity", required=True, help="the W&B entity (user or team) of the runs")
    dash.add_argument("--project", required=True, help="the W&B project of the runs (logger.project)")
    dash.add_argument("--dry-run", action="store_true", help="build them and list every panel's keys; save nothing")
    args = parser.parse_args(argv)
    if args.command == "repro":
        from flexatt.schedule import main as repro_main

        sys.exit(repro_main(args.stages, force=args.force, n_cores=args.cores, commit=args.commit))
    if args.command == "pipeline":
        from flexatt.pipeline import main as write_pipelines

        sys.exit(write_pipelines(args.profiles, check=args.check))
    if args.command == "report":  # each returns its exit status; an error is one line
        from flexatt.report import main as make_report

        sys.exit(make_report(args.output))
    if args.command == "dashboard":
        from flexatt.dashboard import main as make_dashboard

        sys.exit(make_dashboard(args.entity, args.project, dry_run=args.dry_run))
    if args.command == "translate":
        from flexatt.errors import FlexattError
        from flexatt.runtime import tune_allocator

        tune_allocator()
        try:
            translate(args)
        except FlexattError as exc:  # one line: a library's multi-line advice is cut off
            sys.exit(f"error: {str(exc).splitlines()[0]}")
        return
    if args.command == "params":
        try:
            write_params(args.overrides, args.output, args.config_dir)
        except Exception as exc:  # Hydra's errors name the bad override
            sys.exit(f"error: cannot compose {args.config_dir}/config.yaml: {exc}")
        print(f"wrote {args.output}" + (f" ({' '.join(args.overrides)})" if args.overrides else ""))


if __name__ == "__main__":
    main()

"""The ``flexatt`` command line.

``flexatt params [OVERRIDE ...]`` composes ``conf/`` into ``params.yaml`` exactly as
``dvc exp run -S OVERRIDE`` does (e.g. ``flexatt params profile=smoke``), for ``dvc repro``.

``flexatt translate --checkpoint CKPT [--input FILE] [--beam 5] [--tau 1.2] [--stats FILE]``
translates one sentence per line (stdin or a file) with a trained model; ``--stats`` writes a
JSON line per sentence with the window scored at each decoding step.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def write_params(overrides: list[str], output: Path, config_dir: Path) -> None:
    """Compose ``config_dir/config.yaml`` with ``overrides`` into ``output`` (DVC's composer)."""
    from dvc.utils.hydra import compose_and_dump

    compose_and_dump(output, str(config_dir.resolve()), None, "config", str(config_dir.resolve()),
                     overrides)


def translate(args: argparse.Namespace) -> None:
    """Translate ``args.input`` (or stdin) to stdout."""
    import json

    from flexatt.data.subwords import EncodedSplit, Vocab
    from flexatt.errors import ConfigError
    from flexatt.evaluation import load_model, translate_split
    from flexatt.io import atomic_path, decode_line

    if args.beam < 1:
        raise ConfigError("--beam", f"must be >= 1 (got {args.beam})")
    if args.tau is not None and not args.tau >= 0:
        raise ConfigError("--tau", f"must be >= 0 (got {args.tau})")
    raw = args.input.read_bytes() if args.input else sys.stdin.buffer.read()
    where = str(args.input or "<stdin>")
    lines = [decode_line(line.rstrip(b"\r"), where, i + 1) for i, line in enumerate(raw.split(b"\n"))]
    if lines and lines[-1] == "":
        lines.pop()
    model = load_model(args.checkpoint)
    src_vocab, tgt_vocab = Vocab(args.tok_dir / "src.model"), Vocab(args.tok_dir / "tgt.model")
    split = EncodedSplit.from_lists(src_vocab.encode([" ".join(s.split()) for s in lines]), [[]] * len(lines))
    out = translate_split(model, split, tgt_vocab, tau=args.tau, beam_size=args.beam, alpha=args.alpha,
                          trace_indices=set(range(len(lines))) if args.stats else None)
    sys.stdout.write("".join(f"{h}\n" for h in out.hypotheses))
    if args.stats:
        with atomic_path(args.stats) as tmp, open(tmp, "w", encoding="utf-8") as handle:
            for i in range(len(lines)):
                trace = out.traces[i]
                handle.write(json.dumps({
                    "index": i, "src_len": int(out.src_lengths[i]), "steps": int(out.steps[i]),
                    "mean_window": round(int(out.window_sum[i]) / max(int(out.steps[i]), 1), 3),
                    "windows": trace.window.tolist(),
                    "span": [[int(a), int(b)] for a, b in zip(trace.span_lo.tolist(), trace.span_hi.tolist())],
                }) + "\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="flexatt", description="Flexible Attention NMT pipeline")
    sub = parser.add_subparsers(dest="command", required=True)
    params = sub.add_parser("params", help="compose conf/ into params.yaml (as dvc exp run does)")
    params.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. profile=smoke")
    params.add_argument("--output", type=Path, default=Path("params.yaml"))
    params.add_argument("--config-dir", type=Path, default=Path("conf"))
    tr = sub.add_parser("translate", help="translate text with a trained checkpoint")
    tr.add_argument("--checkpoint", type=Path, required=True, help="e.g. artifacts/models_ft/flexible/best.ckpt")
    tr.add_argument("--tok-dir", type=Path, default=Path("artifacts/tok"), help="holds src.model and tgt.model")
    tr.add_argument("--input", type=Path, help="one sentence per line (default: stdin)")
    tr.add_argument("--beam", type=int, default=5, help="beam size (1: greedy)")
    tr.add_argument("--tau", type=float, default=None, help="flexible attention's threshold (default: inf)")
    tr.add_argument("--alpha", type=float, default=1.0, help="length normalisation exponent")
    tr.add_argument("--stats", type=Path, help="write per-sentence window statistics here (JSON lines)")
    args = parser.parse_args(argv)
    if args.command == "translate":
        from flexatt.errors import FlexattError
        from flexatt.runtime import tune_allocator

        tune_allocator()
        try:
            translate(args)
        except FlexattError as exc:
            sys.exit(f"error: {exc}")
        return
    if args.command == "params":
        try:
            write_params(args.overrides, args.output, args.config_dir)
        except Exception as exc:  # Hydra's errors name the bad override
            sys.exit(f"error: cannot compose {args.config_dir}/config.yaml: {exc}")
        print(f"wrote {args.output}" + (f" ({' '.join(args.overrides)})" if args.overrides else ""))


if __name__ == "__main__":
    main()

"""Stage ``filter``: read the raw corpus, clean and filter it, split it into train/dev/test.

Usage::

    python -m flexatt.stages.filter                                   # params.yaml
    python -m flexatt.stages.filter data.src=my.es data.tgt=my.en \\
        filter.out_dir=/tmp/f filter.dev_size=20 filter.test_size=20  # your own corpus

Writes to ``filter.out_dir``: ``{train,dev,test}.{src,tgt}`` (UTF-8, one sentence per line), the
side files split with their pairs (``.key``, ``.ref2``, ``.align`` where the corpus has them) and
``report.json`` (counts of what was read, dropped and kept, with the first dropped lines per
reason); the report's counts also go to ``filter.metrics_file`` (a DVC metric kept in git).
The output directory is replaced atomically: a failed run leaves the previous one intact.
"""

from __future__ import annotations

import logging
import statistics
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from flexatt import config as C
from flexatt.data.corpus import ON_INVALID, ReadResult, read_text_files, read_tsv
from flexatt.data.filtering import DROP_REASONS, SPLITS, filter_and_split
from flexatt.data.synthetic import read_synthetic
from flexatt.errors import ConfigError
from flexatt.io import atomic_path, write_json, write_lines

log = logging.getLogger("flexatt.filter")


def read_corpus(cfg: DictConfig) -> tuple[ReadResult, dict, str]:
    """Read the corpus that ``cfg.data`` describes.

    Returns the pairs, a description of the source for the report, and the name of the file that
    holds the gold alignments (for error messages). The first kind configured is used: two text
    files (``data.src`` + ``data.tgt``), else a TSV (``data.tsv``), else ``data.synthetic``.
    """
    on_invalid = C.check_choice(cfg, "filter.on_invalid", ON_INVALID)
    src = C.check_file(cfg, "data.src", optional=True)
    tgt = C.check_file(cfg, "data.tgt", optional=True)
    if (src is None) != (tgt is None):
        missing = "data.tgt" if tgt is None else "data.src"
        raise ConfigError(missing, "data.src and data.tgt must be given together")
    if src is not None:
        sides = {k: C.check_file(cfg, f"data.{k}", optional=True) for k in ("ref2", "align")}
        sides = {k: v for k, v in sides.items() if v is not None}
        if C.get(cfg, "data.tsv"):
            log.info("reading the text files data.src/data.tgt; data.tsv and its side files are not used")
        result = read_text_files(src, tgt, sides, on_invalid)
        source = {"kind": "text", "src": str(src), "tgt": str(tgt), **{k: str(v) for k, v in sides.items()}}
        return result, source, str(sides.get("align", "alignments"))
    tsv = C.check_file(cfg, "data.tsv", optional=True)
    if tsv is not None:
        columns = OmegaConf.to_container(C.get(cfg, "data.columns"))
        if not isinstance(columns, dict) or not {"src", "tgt"} <= set(columns):
            raise ConfigError("data.columns", f"must map src and tgt (and optionally key, ref2) to "
                              f"column names of {tsv} (got {columns!r})")
        align = C.check_file(cfg, "data.tsv_align", optional=True)
        result = read_tsv(tsv, columns, align, on_invalid)
        source = {"kind": "tsv", "tsv": str(tsv), "columns": columns, "align": str(align) if align else None}
        return result, source, str(align)
    spec = C.get(cfg, "data.synthetic")
    if spec is None:
        raise ConfigError("data", "no input configured: set data.src and data.tgt (two text files), "
                          "data.tsv (one TSV) or data.synthetic")
    minimum = {"n_pairs": 1, "vocab_size": 2, "min_len": 1, "max_len": 1, "chunk": 1, "seed": 0}
    values = {key: C.check_int(cfg, f"data.synthetic.{key}", minimum=m) for key, m in minimum.items()}
    if values["min_len"] > values["max_len"]:
        raise ConfigError("data.synthetic.min_len", f"must be <= data.synthetic.max_len = {values['max_len']} "
                          f"(got {values['min_len']})")
    return read_synthetic(spec), {"kind": "synthetic", **OmegaConf.to_container(spec)}, "synthetic"


def _mean_words(lines: list[str]) -> float:
    return round(statistics.fmean(len(s.split(" ")) for s in lines), 2) if lines else 0.0


def run(cfg: DictConfig) -> dict:
    """Filter and split the corpus; return the report (also written to disk)."""
    out_dir = Path(C.check_str(cfg, "filter.out_dir"))
    dev_size = C.check_int(cfg, "filter.dev_size", minimum=1)
    test_size = C.check_int(cfg, "filter.test_size", minimum=1)
    max_len = C.check_int(cfg, "filter.max_len", minimum=1)
    max_ratio = C.check_float(cfg, "filter.max_ratio", ge=1.0)
    eval_max_len = C.check_int(cfg, "filter.eval_max_len", minimum=1, optional=True)
    seed = C.check_int(cfg, "filter.seed", minimum=0)
    metrics_file = C.check_str(cfg, "filter.metrics_file", optional=True)

    read, source, align_name = read_corpus(cfg)
    log.info("read %d pairs from %s%s", len(read.pairs) + len(read.invalid), source["kind"],
             f" ({len(read.invalid)} invalid lines skipped)" if read.invalid else "")
    try:
        splits, filtered = filter_and_split(read.pairs, dev_size, test_size, seed, max_len, max_ratio,
                                            eval_max_len, align_name)
    except ValueError as exc:
        raise ConfigError("filter.dev_size", str(exc)) from exc

    side_names = sorted({k for p in filtered.kept for k in p.sides})
    with atomic_path(out_dir) as tmp:
        tmp.mkdir(parents=True)
        for split, pairs in splits.items():
            write_lines(tmp / f"{split}.src", (p.src for p in pairs))
            write_lines(tmp / f"{split}.tgt", (p.tgt for p in pairs))
            for side in side_names:
                write_lines(tmp / f"{split}.{side}", (p.sides[side] for p in pairs))
        counts = {
            "read": len(read.pairs) + len(read.invalid),
            "invalid": len(read.invalid),
            "dropped": {reason: filtered.dropped[reason] for reason in DROP_REASONS},
            "kept": len(filtered.kept),
            "splits": {
                split: {"pairs": len(pairs),
                        "src_words_mean": _mean_words([p.src for p in pairs]),
                        "tgt_words_mean": _mean_words([p.tgt for p in pairs])}
                for split, pairs in splits.items()
            },
        }
        report = {"source": source, **counts, "side_files": side_names,
                  "dropped_lines": filtered.examples, "invalid_lines": read.invalid[:20]}
        write_json(tmp / "report.json", report)
    if metrics_file:
        write_json(metrics_file, counts)

    dropped = ", ".join(f"{r} {n}" for r, n in counts["dropped"].items() if n) or "none"
    print(f"filter: read {counts['read']} pairs, invalid {counts['invalid']}, dropped: {dropped}; "
          f"kept {counts['kept']} -> " + ", ".join(f"{s} {len(splits[s])}" for s in SPLITS)
          + f" (in {out_dir})")
    return report


def main() -> None:
    C.run_stage(run)


if __name__ == "__main__":
    main()

"""Stage ``filter``: read the raw corpus, clean and filter it, split it into train/dev/test.

Usage::

    python -m flexatt.stages.filter                                   # params.yaml
    python -m flexatt.stages.filter data.src=my.es data.tgt=my.en \\
        filter.out_dir=/tmp/f filter.dev_size=20 filter.test_size=20  # your own corpus

Writes to ``filter.out_dir``: ``{train,dev,test}.{src,tgt}`` (UTF-8, one sentence per line), the
side files split with their pairs (``.key``, ``.ref2``, ``.align`` where the corpus has them) and
``report.json`` (counts of what was read, dropped and kept, with the first dropped lines per
reason; for a corpus with gold alignments, how much they reorder, :mod:`flexatt.data.reordering`,
over the kept pairs); the report's counts also go to ``filter.metrics_file`` (a DVC metric kept
in git).

The split is drawn at random with ``filter.seed`` (``filter.dev_size`` and ``filter.test_size``
pairs), unless the corpus fixes it: a TSV's ``split`` column (``data.columns.split``) or dev and
test files beside the training files (``data.dev_src``/``dev_tgt``, ``data.test_src``/``test_tgt``).
Then the sizes do not apply, and the report and metrics say where the splits came from
(``split_by``, e.g. ``"fixed (column split)"``).
The output directory is replaced atomically: a failed run leaves the previous one intact.

The corpus is streamed and read twice (:mod:`flexatt.data.filtering`: :func:`plan_split`, then
:func:`apply_split`): memory stays at about 100 bytes per pair (the deduplication hashes), one
byte per pair while writing, whatever the length of the sentences. Everything the first pass can
refuse (a mismatched line count, invalid UTF-8, an empty file, a bad alignment, a split too
large) is refused before anything is written.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import IO

from omegaconf import DictConfig

from flexatt import config as C
from flexatt import schema
from flexatt.data.corpus import InvalidLines, RawPair, iter_split_files, iter_text_files, iter_tsv
from flexatt.data.filtering import DROP_REASONS, SPLITS, apply_split, plan_split
from flexatt.data.reordering import Reordering, parse_pharaoh
from flexatt.data.synthetic import iter_synthetic
from flexatt.errors import ConfigError, DataError
from flexatt.io import atomic_path, write_json

log = logging.getLogger("flexatt.filter")


def read_corpus(cfg: DictConfig) -> tuple[Callable[[InvalidLines], Iterator[RawPair]], dict, str]:
    """The corpus that ``cfg.data`` describes, as a stream of pairs.

    Returns a function that opens the stream (each call reads the corpus anew, counting skipped
    broken lines in the ``InvalidLines`` it is given), a description of the source for the report, and the name of the file that
    holds the gold alignments (for error messages). The first kind configured is used: two text
    files (``data.src`` + ``data.tgt``, with ``data.dev_*`` and ``data.test_*`` the fixed dev
    and test files), else a TSV (``data.tsv``), else ``data.synthetic``.
    """
    p = schema.params(cfg)
    data, on_invalid = p.data, p.filter.on_invalid
    if data.src is not None:
        src, tgt = C.require_file("data.src", data.src), C.require_file("data.tgt", data.tgt)
        sides = {k: C.require_file(f"data.{k}", getattr(data, k)) for k in ("ref2", "align")}
        sides = {k: v for k, v in sides.items() if v is not None}
        if data.tsv:
            log.info("reading the text files data.src/data.tgt; data.tsv and its side files are not used")
        source = {"kind": "text", "src": str(src), "tgt": str(tgt), **{k: str(v) for k, v in sides.items()}}
        if data.dev_src is not None:  # the schema has checked that all four are given
            files = {"train": (src, tgt), **{split: tuple(C.require_file(f"data.{split}_{side}",
                                                                         getattr(data, f"{split}_{side}"))
                                                          for side in ("src", "tgt")) for split in ("dev", "test")}}
            source.update({f"{split}_{side}": str(files[split][i]) for split in ("dev", "test")
                           for i, side in enumerate(("src", "tgt"))})
            def result(invalid: InvalidLines) -> Iterator[RawPair]:
                return iter_split_files(files, sides, on_invalid, invalid)
        else:
            def result(invalid: InvalidLines) -> Iterator[RawPair]:
                return iter_text_files(src, tgt, sides, on_invalid, invalid)
        return result, source, str(sides.get("align", "alignments"))
    if data.tsv is not None:
        tsv, columns = C.require_file("data.tsv", data.tsv), dict(data.columns)
        align = C.require_file("data.tsv_align", data.tsv_align)
        def result(invalid: InvalidLines) -> Iterator[RawPair]:
            return iter_tsv(tsv, columns, align, on_invalid, invalid)
        source = {"kind": "tsv", "tsv": str(tsv), "columns": columns, "align": str(align) if align else None}
        return result, source, str(align)
    spec = data.synthetic.model_dump()
    return lambda invalid: iter_synthetic(spec), {"kind": "synthetic", **spec}, "synthetic"


def fixed_splits(p: schema.Params) -> str | None:
    """Where the corpus that ``p.data`` describes fixes its splits (``None``: it does not, the
    filter draws them): ``"fixed (column <name>)"`` for a TSV's split column, ``"fixed (files
    data.dev_src, data.test_src)"`` for dev and test files."""
    data = p.data
    if data.src is not None:
        return "fixed (files data.dev_src, data.test_src)" if data.dev_src is not None else None
    if data.tsv is not None and "split" in data.columns:
        return f"fixed (column {data.columns['split']})"
    return None


def _mean(total: int, n: int) -> float:
    """``round(statistics.fmean(counts), 2)`` of ``n`` word counts summing to ``total``."""
    return round(float(total) / n, 2) if n else 0.0


def run(cfg: DictConfig | schema.Params) -> dict:
    """Filter and split the corpus; return the report (also written to disk)."""
    p = schema.params(cfg)
    f = p.filter
    out_dir, dev_size, test_size, seed, metrics_file = Path(f.out_dir), f.dev_size, f.test_size, f.seed, f.metrics_file
    max_len, max_ratio, eval_max_len = f.max_len, f.max_ratio, f.eval_max_len

    open_pairs, source, align_name = read_corpus(p)
    split_by = fixed_splits(p)
    if split_by:
        log.info("splits %s: filter.dev_size and filter.test_size do not apply", split_by)
    corpus = source.get("src") or source.get("tsv") or source["kind"]
    invalid = InvalidLines(keep=20)
    try:
        plan = plan_split(open_pairs(invalid), dev_size, test_size, seed, align_name, fixed=split_by is not None)
    except ValueError as exc:
        if split_by:
            raise DataError(corpus, str(exc)) from exc
        raise ConfigError("filter.dev_size", str(exc)) from exc
    with atomic_path(out_dir) as tmp:
        tmp.mkdir(parents=True)
        with ExitStack() as stack:
            writer = _SplitWriter(tmp, stack, Reordering())
            for split in SPLITS:  # every split has its .src and .tgt, even when it is empty
                for name in ("src", "tgt"):
                    writer.file(f"{split}.{name}")
            filtered = apply_split(plan, open_pairs(InvalidLines(keep=0)), writer, max_len, max_ratio,
                                   eval_max_len, align_name, corpus)
            for split in SPLITS:  # and every side file the kept pairs have
                for side in filtered.side_names:
                    writer.file(f"{split}.{side}")
        log.info("read %d pairs from %s%s", filtered.read + len(invalid), source["kind"],
                 f" ({len(invalid)} invalid lines skipped)" if len(invalid) else "")
        counts = {
            "read": filtered.read + len(invalid),
            "invalid": len(invalid),
            "dropped": {reason: filtered.dropped[reason] for reason in DROP_REASONS},
            "kept": filtered.kept,
            "splits": {
                split: {"pairs": filtered.pairs[split],
                        "src_words_mean": _mean(filtered.words[split][0], filtered.pairs[split]),
                        "tgt_words_mean": _mean(filtered.words[split][1], filtered.pairs[split])}
                for split in SPLITS
            },
        }
        if split_by:
            counts["split_by"] = split_by
        if "align" in filtered.side_names:
            counts["reordering"] = writer.reordering.summary()
        report = {"source": source, **counts, "side_files": filtered.side_names,
                  "dropped_lines": filtered.examples, "invalid_lines": invalid.first}
        write_json(tmp / "report.json", report)
    if metrics_file:
        write_json(metrics_file, counts)

    dropped = ", ".join(f"{r} {n}" for r, n in counts["dropped"].items() if n) or "none"
    print(f"filter: read {counts['read']} pairs, invalid {counts['invalid']}, dropped: {dropped}; "
          f"kept {counts['kept']} -> " + ", ".join(f"{s} {filtered.pairs[s]}" for s in SPLITS)
          + (f", splits {split_by}" if split_by else "") + f" (in {out_dir})")
    return report


class _SplitWriter:
    """``writer(split, pair)`` appends the pair's fields to ``{split}.src``, ``.tgt`` and one file
    per side field in ``folder`` (files opened on first use, closed by ``stack``), and adds the
    pair's gold alignment (side ``align``) to ``reordering``. A failed write (a full disk) is an
    ``OSError`` naming its file, which :func:`atomic_path` reports."""

    def __init__(self, folder: Path, stack: ExitStack, reordering: Reordering):
        self.folder, self.stack, self.files, self.reordering = folder, stack, {}, reordering

    def file(self, name: str) -> IO[str]:
        handle = self.files.get(name)
        if handle is None:
            path = self.folder / name
            handle = self.files[name] = open(path, "w", encoding="utf-8", newline="\n")
            self.stack.callback(self._close, path, handle)
        return handle

    @staticmethod
    def _close(path: Path, handle: IO[str]) -> None:
        try:
            handle.close()
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror, str(path)) from exc

    def __call__(self, split: str, pair: RawPair) -> None:
        if "align" in pair.sides:
            self.reordering.add(parse_pharaoh(pair.sides["align"]), len(pair.src.split()), len(pair.tgt.split()))
        for name, text in (("src", pair.src), ("tgt", pair.tgt), *pair.sides.items()):
            handle = self.file(f"{split}.{name}")
            try:
                handle.write(text)
                handle.write("\n")
            except OSError as exc:
                raise OSError(exc.errno, exc.strerror, str(self.folder / f"{split}.{name}")) from exc


def main() -> None:
    C.run_stage(run)


if __name__ == "__main__":
    main()

"""Reading a parallel corpus: two line-aligned text files, one TSV, or the synthetic task.

Every reader returns :class:`RawPair` records that remember the 1-based line number they came
from, so that a later error or a dropped pair can be traced to its line. Side fields (a second
reference, a verse key, gold word alignments) travel inside the pair, so they can never drift
out of line with it.

The ``iter_*`` readers stream: they hold one line of each file at a time, so a corpus of
millions of pairs is read in constant memory (the ``read_*`` functions collect their pairs in a
list). Before the first pair they count every file's lines (a fast pass over the bytes), so a
mismatched line count is refused before any pair is used, as when the whole corpus is read.

Policies for broken lines (``on_invalid``):
  ``error``  refuse the corpus at the first invalid line (the message names file and line);
  ``skip``   drop the pair and count it (``invalid`` in the filter report).
Mismatched line counts are always refused: no pairing can be trusted after them.

Fixed splits: a corpus may say which pairs are training, dev and test pairs, either in a TSV
column (the ``split`` role of ``data.columns``, :func:`iter_tsv`) or as separate dev and test
files beside the training files (:func:`iter_split_files`); the pair then carries its split
(:attr:`RawPair.split`). A split value other than ``train``, ``dev`` or ``test`` is always
refused, naming the file and line (whatever ``on_invalid`` says: it is not a broken line but a
corpus that says something the filter cannot follow).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from flexatt.errors import DataError
from flexatt.io import UTF8_BOM, decode_line, open_bytes

log = logging.getLogger(__name__)

SPLITS = ("train", "dev", "test")  # the splits the filter writes; the values of a split column


@dataclass
class RawPair:
    """One sentence pair as read, before cleaning.

    ``line`` is the 1-based line of the pair in its source file(s) (for a TSV, the line in the
    file, counting the header as line 1). ``sides`` holds the named side fields. ``split`` is
    the split the corpus fixes for the pair (one of :data:`SPLITS`), ``None`` where the filter
    draws it.
    """

    line: int
    src: str
    tgt: str
    sides: dict[str, str] = field(default_factory=dict)
    split: str | None = None


@dataclass
class ReadResult:
    """The pairs that could be read, and the broken ones that were skipped."""

    pairs: list[RawPair]
    invalid: list[str]  # "file:line: reason" of each skipped pair


class InvalidLines:
    """The broken lines skipped under ``on_invalid="skip"``: how many, and the messages
    (``"file:line: reason"``) of the first ``keep`` of them (all when ``keep`` is None), so that
    a corpus with millions of broken lines does not pile up messages in memory."""

    def __init__(self, keep: int | None = None):
        self.keep, self.count, self.first = keep, 0, []

    def append(self, message: str) -> None:
        self.count += 1
        if self.keep is None or len(self.first) < self.keep:
            self.first.append(message)

    def __len__(self) -> int:
        return self.count


def count_lines(path: str | os.PathLike) -> int:
    """The number of lines :func:`iter_raw_lines` yields for ``path``, counted in blocks.

    Raises:
        DataError: the file is missing, unreadable (e.g. a corrupt gzip stream) or empty.
    """
    path = Path(path)
    newlines, size, last = 0, 0, b"\n"
    try:
        with open_bytes(path) as handle:
            block = handle.read(1 << 20)
            if block.startswith(UTF8_BOM):
                block = block[len(UTF8_BOM):]
            while block:
                newlines += block.count(b"\n")
                size += len(block)
                last = block[-1:]
                block = handle.read(1 << 20)
    except (OSError, EOFError) as exc:  # gzip.BadGzipFile is an OSError
        raise DataError(path, f"cannot read: {exc}") from exc
    if not size:
        raise DataError(path, "file is empty")
    return newlines + (last != b"\n")


def iter_raw_lines(path: str | os.PathLike) -> Iterator[bytes]:
    """The lines of ``path`` as bytes, one at a time, split exactly as
    :func:`flexatt.io.read_raw_lines` splits them: only ``\\n`` ends a line; a leading UTF-8
    byte-order mark and one trailing ``\\r`` per line are removed; a final ``\\n`` does not start
    an extra line.

    Raises:
        DataError: the file is missing, unreadable or empty (as it is iterated).
    """
    path = Path(path)
    try:
        handle = open_bytes(path)
    except OSError as exc:
        raise DataError(path, f"cannot read: {exc}") from exc
    with handle:
        first, empty = True, True
        while True:
            try:
                line = handle.readline()
            except (OSError, EOFError) as exc:
                raise DataError(path, f"cannot read: {exc}") from exc
            if first:
                first = False
                if line.startswith(UTF8_BOM):
                    line = line[len(UTF8_BOM):]
                    if line == b"":  # the file is only a byte-order mark
                        continue
            if not line:
                break
            empty = False
            if line.endswith(b"\n"):
                line = line[:-1]
            yield line[:-1] if line.endswith(b"\r") else line
    if empty:
        raise DataError(path, "file is empty")


def _lockstep(named: Mapping[str, tuple[Path, Iterator[bytes]]]) -> Iterator[tuple[int, dict[str, bytes]]]:
    """Yield ``(index, {name: raw line})`` over line-aligned files read together.

    The caller has checked their line counts; should a file still end before the others (it
    changed while being read), the corpus is refused, never paired with the wrong lines.
    """
    names = list(named)
    try:
        for index, raws in enumerate(zip(*(it for _, it in named.values()), strict=True)):
            yield index, dict(zip(names, raws))
    except ValueError as exc:
        files = ", ".join(str(p) for p, _ in named.values())
        raise DataError(named[names[0]][0], f"{files}: the line counts changed while reading ({exc}): "
                        "the files are not line-aligned") from exc
    finally:
        for _, it in named.values():
            it.close()


def _decode(raw: bytes, path: Path, line_no: int, on_invalid: str, problems: list[str]) -> str | None:
    """Decode one line; under ``skip`` append the problem to ``problems`` and return None."""
    try:
        return decode_line(raw, path, line_no)
    except DataError as exc:
        if on_invalid == "error":
            raise
        problems.append(str(exc))
        return None


def iter_text_files(src: str | os.PathLike, tgt: str | os.PathLike,
                    sides: Mapping[str, str | os.PathLike] | None = None,
                    on_invalid: str = "error", invalid: list[str] | InvalidLines | None = None,
                    split: str | None = None) -> Iterator[RawPair]:
    """Stream the pairs of two line-aligned text files and optional side files.

    Under ``on_invalid="skip"``, the message of each skipped pair (its first broken file) is
    appended to ``invalid``. ``split`` is given to every pair (:attr:`RawPair.split`).

    Raises:
        DataError: a file is missing or empty, the line counts differ (both counts are named;
            checked before the first pair), or (under ``on_invalid="error"``) a line is not
            valid UTF-8.
    """
    paths = {"src": Path(src), "tgt": Path(tgt), **{k: Path(v) for k, v in (sides or {}).items()}}
    check_aligned(paths)
    side_names = [name for name in paths if name not in ("src", "tgt")]
    for i, raws in _lockstep({name: (path, iter_raw_lines(path)) for name, path in paths.items()}):
        problems: list[str] = []
        text = {name: _decode(raws[name], paths[name], i + 1, on_invalid, problems) for name in paths}
        if problems:
            if invalid is not None:
                invalid.append(problems[0])
            continue
        yield RawPair(i + 1, text["src"], text["tgt"], {name: text[name] for name in side_names}, split)


def check_aligned(files: Mapping[str, str | os.PathLike]) -> dict[str, int]:
    """The line count of each of ``files`` (name -> path), all of which must have the same.

    Raises:
        DataError: a file is missing or empty, or has another line count than the first one
            (both counts named).
    """
    paths = {name: Path(path) for name, path in files.items()}
    counts = {name: count_lines(path) for name, path in paths.items()}
    first = next(iter(paths))
    for name, count in counts.items():
        if count != counts[first]:
            raise DataError(paths[name], f"has {count} lines but {paths[first]} has {counts[first]}: "
                            "the files are not line-aligned")
    return counts


def iter_split_files(files: Mapping[str, tuple[str | os.PathLike, str | os.PathLike]],
                     sides: Mapping[str, str | os.PathLike] | None = None, on_invalid: str = "error",
                     invalid: list[str] | InvalidLines | None = None) -> Iterator[RawPair]:
    """Stream a corpus whose splits are fixed by its files: ``files`` maps each of ``train``,
    ``dev`` and ``test`` to its (source, target) pair of line-aligned files; each pair carries
    its split, and its line in its own files. ``sides`` are side files of the training files.
    The dev and test files' line counts are checked before the first pair (the training files'
    as :func:`iter_text_files` checks them).

    Raises:
        DataError: as :func:`iter_text_files`, for any of the files.
    """
    for name in SPLITS:
        if name != "train":
            check_aligned({"src": files[name][0], "tgt": files[name][1]})
    for name in SPLITS:
        src, tgt = files[name]
        yield from iter_text_files(src, tgt, sides if name == "train" else None, on_invalid, invalid, name)


def read_text_files(src: str | os.PathLike, tgt: str | os.PathLike,
                    sides: Mapping[str, str | os.PathLike] | None = None,
                    on_invalid: str = "error") -> ReadResult:
    """Read two line-aligned text files (one sentence per line) and optional side files
    (:func:`iter_text_files`, collected).

    Raises:
        DataError: a file is missing or empty, the line counts differ (both counts are
            named), or (under ``on_invalid="error"``) a line is not valid UTF-8.
    """
    invalid: list[str] = []
    return ReadResult(list(iter_text_files(src, tgt, sides, on_invalid, invalid)), invalid)


def iter_tsv(path: str | os.PathLike, columns: Mapping[str, str],
             align: str | os.PathLike | None = None, on_invalid: str = "error",
             invalid: list[str] | InvalidLines | None = None) -> Iterator[RawPair]:
    """Stream the rows of a TSV whose first line names its columns (see :func:`read_tsv`);
    the header, the columns and the alignment file's line count are checked before the first
    pair. Skipped pairs' messages are appended to ``invalid``. The column given for ``split``
    fixes each pair's split (:attr:`RawPair.split`).

    Raises:
        DataError: see :func:`read_tsv`; a split value other than ``train``, ``dev``, ``test``
            (always refused, naming the file and line).
    """
    path = Path(path)
    n_rows = count_lines(path) - 1
    lines = iter_raw_lines(path)
    header = decode_line(next(lines), path, 1).split("\t")
    try:
        if not n_rows:
            raise DataError(path, "has a header line but no data rows")
        for field_name in ("src", "tgt"):
            if field_name not in columns:
                raise DataError(path, f"no column given for '{field_name}' (data.columns.{field_name})")
        index = {}
        for field_name, column in columns.items():
            if column not in header:
                raise DataError(path, f"column '{column}' (data.columns.{field_name}) is not in the "
                                f"header; columns are: {', '.join(header)}", 1)
            index[field_name] = header.index(column)
        named = {"row": (path, lines)}
        if align is not None:
            align = Path(align)
            n_align = count_lines(align)
            if n_align != n_rows:
                raise DataError(align, f"has {n_align} lines but {path} has {n_rows} data rows: "
                                "the alignments are not line-aligned with the corpus")
            named["align"] = (align, iter_raw_lines(align))
    except BaseException:
        lines.close()
        raise

    for i, raws in _lockstep(named):
        problems: list[str] = []
        align_text = None if align is None else _decode(raws["align"], align, i + 1, on_invalid, problems)
        row = _decode(raws["row"], path, i + 2, on_invalid, problems)
        if row is not None and not problems:
            fields = row.split("\t")
            if len(fields) != len(header):
                message = f"has {len(fields)} tab-separated fields, the header has {len(header)}"
                if on_invalid == "error":
                    raise DataError(path, message, i + 2)
                problems.append(f"{path}:{i + 2}: {message}")
        if problems:
            if invalid is not None:
                invalid.append(problems[0])
            continue
        sides = {name: fields[j] for name, j in index.items() if name not in ("src", "tgt", "split")}
        if align_text is not None:
            sides["align"] = align_text
        split = None
        if "split" in index:
            split = fields[index["split"]]
            if split not in SPLITS:
                raise DataError(path, f"split {split!r} (column '{columns['split']}', data.columns.split) "
                                f"must be one of {', '.join(SPLITS)}", i + 2)
        yield RawPair(i + 2, fields[index["src"]], fields[index["tgt"]], sides, split)


def read_tsv(path: str | os.PathLike, columns: Mapping[str, str],
             align: str | os.PathLike | None = None, on_invalid: str = "error") -> ReadResult:
    """Read a TSV whose first line names its columns (:func:`iter_tsv`, collected).

    Args:
        columns: maps our field names to the TSV's column names; ``src`` and ``tgt`` are
            required, ``split`` fixes each pair's split, every other entry (``key``, ``ref2``,
            …) becomes a side field.
        align: optional file of gold alignments, one line per TSV data row (no header line).

    Raises:
        DataError: missing/empty file, a named column absent from the header, a row with the
            wrong number of fields, an alignment file whose line count differs from the rows.
    """
    invalid: list[str] = []
    return ReadResult(list(iter_tsv(path, columns, align, on_invalid, invalid)), invalid)


def parse_alignment(text: str, where: str) -> list[tuple[int, int]]:
    """Parse Pharaoh alignments ``"0-0 1-2 …"`` (0-based source-target token indices).

    Raises:
        DataError: a link that is not ``i-j`` with non-negative integers (``where`` names the
            file and line).
    """
    links = []
    for item in text.split():
        i, sep, j = item.partition("-")
        if not (sep and i.isdigit() and j.isdigit()):
            raise DataError(where, f"bad alignment link {item!r}: expected i-j with 0-based integers")
        links.append((int(i), int(j)))
    return links

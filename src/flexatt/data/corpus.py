"""Reading a parallel corpus: two line-aligned text files, one TSV, or the synthetic task.

Every reader returns :class:`RawPair` records that remember the 1-based line number they came
from, so that a later error or a dropped pair can be traced to its line. Side fields (a second
reference, a verse key, gold word alignments) travel inside the pair, so they can never drift
out of line with it.

Policies for broken lines (``on_invalid``):
  ``error``  refuse the corpus at the first invalid line (the message names file and line);
  ``skip``   drop the pair and count it (``invalid`` in the filter report).
Mismatched line counts are always refused: no pairing can be trusted after them.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from flexatt.errors import DataError
from flexatt.io import decode_line, read_raw_lines

log = logging.getLogger(__name__)

ON_INVALID = ("error", "skip")


@dataclass
class RawPair:
    """One sentence pair as read, before cleaning.

    ``line`` is the 1-based line of the pair in its source file(s) (for a TSV, the line in the
    file, counting the header as line 1). ``sides`` holds the named side fields.
    """

    line: int
    src: str
    tgt: str
    sides: dict[str, str] = field(default_factory=dict)


@dataclass
class ReadResult:
    """The pairs that could be read, and the broken ones that were skipped."""

    pairs: list[RawPair]
    invalid: list[str]  # "file:line: reason" of each skipped pair


def _decode_all(path: Path, raws: list[bytes], on_invalid: str, first_line: int,
                bad: dict[int, str]) -> list[str | None]:
    """Decode each line; record undecodable ones in ``bad`` (index → message) under ``skip``."""
    out: list[str | None] = []
    for i, raw in enumerate(raws):
        try:
            out.append(decode_line(raw, path, first_line + i))
        except DataError as exc:
            if on_invalid == "error":
                raise
            bad.setdefault(i, str(exc))
            out.append(None)
    return out


def read_text_files(src: str | os.PathLike, tgt: str | os.PathLike,
                    sides: Mapping[str, str | os.PathLike] | None = None,
                    on_invalid: str = "error") -> ReadResult:
    """Read two line-aligned text files (one sentence per line) and optional side files.

    Raises:
        DataError: a file is missing or empty, the line counts differ (both counts are
            named), or (under ``on_invalid="error"``) a line is not valid UTF-8.
    """
    paths = {"src": Path(src), "tgt": Path(tgt), **{k: Path(v) for k, v in (sides or {}).items()}}
    raws = {name: read_raw_lines(path) for name, path in paths.items()}
    n_src = len(raws["src"])
    for name, lines in raws.items():
        if len(lines) != n_src:
            raise DataError(paths[name], f"has {len(lines)} lines but {paths['src']} has {n_src}: "
                            "the files are not line-aligned")
    bad: dict[int, str] = {}
    text = {name: _decode_all(paths[name], lines, on_invalid, 1, bad) for name, lines in raws.items()}
    pairs = [
        RawPair(i + 1, text["src"][i], text["tgt"][i],
                {name: text[name][i] for name in paths if name not in ("src", "tgt")})
        for i in range(n_src) if i not in bad
    ]
    return ReadResult(pairs, [bad[i] for i in sorted(bad)])


def read_tsv(path: str | os.PathLike, columns: Mapping[str, str],
             align: str | os.PathLike | None = None, on_invalid: str = "error") -> ReadResult:
    """Read a TSV whose first line names its columns.

    Args:
        columns: maps our field names to the TSV's column names; ``src`` and ``tgt`` are
            required, every other entry (``key``, ``ref2``, …) becomes a side field.
        align: optional file of gold alignments, one line per TSV data row (no header line).

    Raises:
        DataError: missing/empty file, a named column absent from the header, a row with the
            wrong number of fields, an alignment file whose line count differs from the rows.
    """
    path = Path(path)
    raws = read_raw_lines(path)
    header = decode_line(raws[0], path, 1).split("\t")
    rows = raws[1:]
    if not rows:
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

    bad: dict[int, str] = {}
    align_lines: list[str | None] | None = None
    if align is not None:
        align_raw = read_raw_lines(align)
        if len(align_raw) != len(rows):
            raise DataError(align, f"has {len(align_raw)} lines but {path} has {len(rows)} data rows: "
                            "the alignments are not line-aligned with the corpus")
        align_lines = _decode_all(Path(align), align_raw, on_invalid, 1, bad)

    decoded = _decode_all(path, rows, on_invalid, 2, bad)
    pairs: list[RawPair] = []
    for i, row in enumerate(decoded):
        if row is None or i in bad:
            continue
        fields = row.split("\t")
        if len(fields) != len(header):
            message = f"has {len(fields)} tab-separated fields, the header has {len(header)}"
            if on_invalid == "error":
                raise DataError(path, message, i + 2)
            bad[i] = f"{path}:{i + 2}: {message}"
            continue
        sides = {name: fields[j] for name, j in index.items() if name not in ("src", "tgt")}
        if align_lines is not None:
            sides["align"] = align_lines[i]
        pairs.append(RawPair(i + 2, fields[index["src"]], fields[index["tgt"]], sides))
    return ReadResult(pairs, [bad[i] for i in sorted(bad)])


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

"""File helpers: byte-exact line reading, transparent gzip, atomic writes.

Every output of a stage is written under a temporary name and renamed into place, so an
interrupted stage never leaves a half-written file that a later run takes as complete.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from flexatt.errors import DataError

UTF8_BOM = b"\xef\xbb\xbf"


def open_bytes(path: str | os.PathLike) -> IO[bytes]:
    """Open ``path`` for binary reading, decompressing it when its name ends in ``.gz``."""
    path = Path(path)
    if not path.exists():
        raise DataError(path, "no such file")
    if path.is_dir():
        raise DataError(path, "is a directory, expected a file")
    if path.suffix == ".gz":
        return gzip.open(path, "rb")
    return open(path, "rb")


def read_raw_lines(path: str | os.PathLike) -> list[bytes]:
    """Read the lines of ``path`` as bytes.

    Only ``\\n`` ends a line: a lone ``\\r``, U+2028, U+0085, form feeds or vertical tabs
    inside a line never split it. A leading UTF-8 byte-order mark and one trailing ``\\r``
    per line (Windows line ends) are removed. A final ``\\n`` does not start an extra line.

    Raises:
        DataError: the file is missing, unreadable (e.g. a corrupt gzip stream) or empty.
    """
    try:
        with open_bytes(path) as handle:
            data = handle.read()
    except (OSError, EOFError) as exc:  # gzip.BadGzipFile is an OSError
        raise DataError(path, f"cannot read: {exc}") from exc
    if data.startswith(UTF8_BOM):
        data = data[len(UTF8_BOM):]
    if not data:
        raise DataError(path, "file is empty")
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    return [line[:-1] if line.endswith(b"\r") else line for line in lines]


def decode_line(raw: bytes, path: str | os.PathLike, line_no: int) -> str:
    """Decode one line as strict UTF-8, naming the file, line and byte offset on failure."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(
            path, f"invalid UTF-8 at byte {exc.start} of the line ({raw[exc.start:exc.start + 4]!r})", line_no
        ) from exc


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it onto ``path`` only on success.

    Works for a file or a directory written at the yielded path. On failure the temporary
    is removed and whatever was at ``path`` before is left untouched.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    tmp.rmdir()  # the caller creates a file or a directory here
    try:
        yield tmp
        if path.is_dir() and not path.is_symlink():
            old = path.with_name(f".{path.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    except BaseException:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        elif tmp.exists():
            tmp.unlink()
        raise


def write_lines(path: str | os.PathLike, lines: Iterable[str]) -> None:
    """Write ``lines`` as UTF-8, one per line, each ended by ``\\n`` (atomically)."""
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8", newline="\n") as out:
        for line in lines:
            out.write(line)
            out.write("\n")


def write_json(path: str | os.PathLike, obj: Any) -> None:
    """Write ``obj`` as indented JSON (atomically), ending with a newline."""
    with atomic_path(path) as tmp:
        Path(tmp).write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")

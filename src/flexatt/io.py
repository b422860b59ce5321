"""File helpers: byte-exact line reading, transparent gzip, atomic writes.

Every output of a stage is written under a temporary name, flushed to disk and renamed into
place, so an interrupted stage (even ``kill -9``) never leaves a half-written file that a later
run takes as complete, and a write that fails (a full disk, a read-only folder) leaves the
previous output intact and ends as one :class:`~flexatt.errors.OutputError` naming the file.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from flexatt import tau
from flexatt.errors import DataError, OutputError

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


def file_digest(path: str | os.PathLike, block: int = 1 << 20) -> str:
    """SHA-256 of a file (first 16 hex digits), read in blocks: a file may be larger than memory."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(block):
            digest.update(chunk)
    return digest.hexdigest()[:16]


def decode_line(raw: bytes, path: str | os.PathLike, line_no: int) -> str:
    """Decode one line as strict UTF-8, naming the file, line and byte offset on failure."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(
            path, f"invalid UTF-8 at byte {exc.start} of the line ({raw[exc.start:exc.start + 4]!r})", line_no
        ) from exc


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, *, tmp_name: str | None = None) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it onto ``path`` only on success.

    Works for a file or a directory written at the yielded path. The temporary is a hidden
    ``.<name>.<random>.tmp`` (or ``tmp_name``, a fixed name that the next write of the same file
    reuses, so that a killed writer leaves at most one stale temporary). On success the data is
    flushed to disk (``fsync``) before the rename, so a crash never leaves a renamed but empty
    file. On failure the temporary is removed and whatever was at ``path`` before is left
    untouched; a directory being replaced is put back if its replacement cannot be renamed in.

    Raises:
        OutputError: an ``OSError`` while creating the folder, writing, syncing or renaming (a
            full disk, a read-only or missing folder, a file size limit); it names ``path`` (or
            the file inside the directory being written) and the system's reason. An
            ``OSError`` about another file (an input read while writing) passes through.
    """
    path = Path(path)
    tmp: Path | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if tmp_name is None:
            tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
            tmp.rmdir()  # the caller creates a file or a directory here
        else:
            tmp = path.with_name(tmp_name)
            _remove(tmp)  # left by a writer that was killed
        yield tmp
        _fsync_tree(tmp)
        _replace(tmp, path)
        _fsync_dir(path.parent)
    except BaseException as exc:
        if tmp is not None:
            _remove(tmp)
        error = _output_error(exc, path, tmp)
        if error is exc:
            raise
        raise error from exc


def _output_error(exc: BaseException, path: Path, tmp: Path | None) -> BaseException:
    """``exc`` as an :class:`OutputError` naming the output, where it is about writing ``path``."""
    if isinstance(exc, OutputError) and tmp is not None:  # from a nested atomic write
        inner = _relative_to(Path(exc.path), tmp)
        return exc if inner is None else OutputError(path / inner, exc.reason)
    if not isinstance(exc, OSError):
        return exc
    reason = exc.strerror or str(exc)
    if exc.filename is None:  # write(), close(), fsync() of the open temporary
        return OutputError(path, reason)
    where = Path(os.fsdecode(exc.filename))
    inner = _relative_to(where, tmp) if tmp is not None else None
    if inner is not None:
        return OutputError(path / inner, reason)
    if where == path or (where.parent == path.parent and where.name.startswith(f".{path.name}.")):
        return OutputError(path, reason)  # the temporary being created, or the rename
    if where in path.parents:  # creating the folder
        if isinstance(exc, (FileExistsError, NotADirectoryError)):
            blocker = next((p for p in reversed(path.parents) if p.exists() and not p.is_dir()), None)
            if blocker is not None:
                return OutputError(path, f"Not a directory: {blocker} (a file is in the way)")
        return OutputError(path, f"{reason}: {where}")
    return exc  # another file (e.g. an input read while writing): not an output error


def _relative_to(path: Path, base: Path) -> Path | None:
    """``path`` relative to ``base`` (``Path()`` when equal), or ``None`` when outside it."""
    try:
        return path.relative_to(base)
    except ValueError:
        return None


def _replace(tmp: Path, path: Path) -> None:
    """Rename ``tmp`` onto ``path``; an existing directory at ``path`` is moved aside first."""
    if path.is_dir() and not path.is_symlink():
        old = path.with_name(f".{path.name}.old")
        _remove(old)
        os.replace(path, old)
        try:
            os.replace(tmp, path)
        except BaseException:
            os.replace(old, path)  # put the previous output back
            raise
        _remove(old)
    else:
        os.replace(tmp, path)


def _remove(path: Path) -> None:
    """Remove a file or a directory tree, if there is one (never raises)."""
    try:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    except OSError:
        pass


def _fsync_tree(path: Path) -> None:
    """Flush a file, or every file under a directory, to disk (write errors propagate)."""
    if path.is_dir() and not path.is_symlink():
        for root, _dirs, files in os.walk(path):
            for name in files:
                _fsync_file(Path(root) / name)
            _fsync_dir(Path(root))
    elif path.is_file():
        _fsync_file(path)


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, str(path)) from exc
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    """Best effort: make a rename durable (not every platform can open a directory)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class _WriteRecorder:
    """A binary file wrapper that remembers the ``OSError`` of a failed write: torch's zip writer
    reports a full disk as a bare ``RuntimeError``; this keeps the system's reason."""

    def __init__(self, raw: IO[bytes]):
        self.raw, self.error = raw, None

    def write(self, data: bytes) -> int:
        try:
            return self.raw.write(data)
        except OSError as exc:
            self.error = exc
            raise

    def flush(self) -> None:
        self.raw.flush()


def save_torch(obj: Any, path: str | os.PathLike) -> None:
    """``torch.save(obj, path)`` atomically (checkpoints).

    The temporary is ``.<name>.tmp`` beside ``path``; a write error (a full disk) becomes an
    :class:`OutputError` naming ``path``, and the previous file stays in place.
    """
    import torch

    path = Path(path)
    with atomic_path(path, tmp_name=f".{path.name}.tmp") as tmp, open(tmp, "wb") as raw:
        out = _WriteRecorder(raw)
        try:
            torch.save(obj, out)
        except RuntimeError:
            if out.error is not None:
                raise out.error from None
            raise


def write_lines(path: str | os.PathLike, lines: Iterable[str]) -> None:
    """Write ``lines`` as UTF-8, one per line, each ended by ``\\n`` (atomically)."""
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8", newline="\n") as out:
        for line in lines:
            out.write(line)
            out.write("\n")


def write_json(path: str | os.PathLike, obj: Any) -> None:
    """Write ``obj`` as indented JSON (atomically), ending with a newline; τ = ∞ in its records
    is written ``null`` (:func:`flexatt.tau.to_json`).

    Raises:
        OutputError: ``obj`` holds a NaN or an infinity that is not a τ (JSON has neither; Python's
            ``Infinity`` would be refused by other readers): nothing is written.
    """
    try:
        text = json.dumps(tau.to_json(obj), indent=2, ensure_ascii=False, allow_nan=False) + "\n"
    except ValueError as exc:
        raise OutputError(path, f"not written: {exc} (a NaN or an infinity outside a τ key)") from None
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8", newline="\n") as out:
        out.write(text)


def write_csv(path: str | os.PathLike, records: list[dict], fields: list[str] | None = None) -> None:
    """Write ``records`` as CSV (atomically), one column per field: ``fields``, or the first
    record's keys (``epoch`` alone when there is none)."""
    import csv

    fields = fields or (list(records[0]) if records else ["epoch"])
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=fields)
        writer.writeheader()
        writer.writerows(records)


def read_lines(path: str | Path) -> list[str]:
    """A text file's lines (UTF-8, ``\\n``-separated), or a :class:`DataError` naming it."""
    path = Path(path)
    if not path.is_file():
        raise DataError(path, "not found (run the tokenize stage)")
    return path.read_text(encoding="utf-8").split("\n")[:-1]

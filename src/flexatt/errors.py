"""Errors that a user can fix: a bad config value, a bad input file, an output that cannot be
written (a full disk, a read-only folder).

Stages catch :class:`FlexattError`, print its message (which names the key, or the
file and line) and exit with status 2, without a traceback.
"""

from __future__ import annotations


class FlexattError(Exception):
    """Base class of the errors reported to the user as one clear line."""


class ConfigError(FlexattError):
    """A configuration value is missing, of the wrong type or out of range.

    The message starts with the dotted key, e.g. ``filter.dev_size: must be > 0 (got -1)``.
    """

    def __init__(self, key: str, message: str):
        self.key = key
        super().__init__(f"{key}: {message}")


class DataError(FlexattError):
    """An input file is missing, empty, undecodable or misaligned.

    The message names the file and, where it applies, the 1-based line number; ``reason`` is
    the message without them.
    """

    def __init__(self, path: object, message: str, line: int | None = None):
        self.path = str(path)
        self.line = line
        self.reason = message
        where = f"{path}:{line}" if line is not None else f"{path}"
        super().__init__(f"{where}: {message}")


class OutputError(FlexattError):
    """An output cannot be written: a full disk, a read-only or missing folder, a file size limit.

    The message names the file being written, e.g.
    ``results/metrics.json: No space left on device``; whatever was at that path before is left
    intact (see :func:`flexatt.io.atomic_path`).
    """

    def __init__(self, path: object, message: str):
        self.path = str(path)
        self.reason = message
        super().__init__(f"{path}: {message}")

"""Read the records of an offline W&B run file (``run-<id>.wandb``) without a network.

The file is W&B's transaction log: a 7-byte header (``:W&B``, magic 0xBEE1, version 0), then
LevelDB-log-style records in 32 KiB blocks (7-byte record header: CRC32, length, type
FULL/FIRST/MIDDLE/LAST), each carrying a ``wandb_internal_pb2.Record`` protobuf.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

BLOCK = 32 * 1024
HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def records(path: str | Path):
    """Yield every ``Record`` protobuf of a ``.wandb`` file, in order."""
    from wandb.proto import wandb_internal_pb2

    data = Path(path).read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a W&B run file"
    pos, pending = HEADER, b""
    while pos + HEADER <= len(data):
        room = BLOCK - pos % BLOCK
        if room < HEADER:  # the rest of the block is padding
            pos += room
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + HEADER])
        chunk = data[pos + HEADER:pos + HEADER + length]
        pos += HEADER + length
        if kind == 0 and length == 0:
            continue
        pending = chunk if kind in (FULL, FIRST) else pending + chunk
        if kind in (FULL, LAST):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            yield record
            pending = b""


def read_run(path: str | Path) -> dict:
    """The run's ``run`` info (group, job_type, tags), config, history rows and summary."""
    out: dict = {"history": [], "summary": {}, "config": {}, "run": None, "files": []}
    for record in records(path):
        kind = record.WhichOneof("record_type")
        if kind == "history":
            out["history"].append({"/".join(item.nested_key) or item.key: json.loads(item.value_json)
                                   for item in record.history.item})
        elif kind == "summary":
            for item in record.summary.update:
                out["summary"]["/".join(item.nested_key) or item.key] = json.loads(item.value_json)
        elif kind in ("config", "run"):  # the run record carries the config given to wandb.init
            updates = record.config.update if kind == "config" else record.run.config.update
            for item in updates:
                out["config"]["/".join(item.nested_key) or item.key] = json.loads(item.value_json)
            if kind == "run":
                out["run"] = record.run
        elif kind == "files":
            out["files"] += [f.path for f in record.files.files]
    return out


def find_runs(wandb_dir: str | Path, wait: float = 30.0) -> list[dict]:
    """Every offline run under ``wandb_dir``, read. A file without its ``run`` record yet is read
    again for up to ``wait`` seconds (W&B's writer is a process of its own; on a loaded machine
    a test once found a run's file without it, the cause not established); a run still without
    it is returned as read, and the test reading it fails."""
    import time

    runs = []
    for path in sorted(Path(wandb_dir).glob("offline-run-*/run-*.wandb")):
        deadline = time.monotonic() + wait
        run = read_run(path)
        while run["run"] is None and time.monotonic() < deadline:
            time.sleep(0.5)
            run = read_run(path)
        runs.append(run)
    return runs


def logged_keys(wandb_dir: Path) -> set[str]:
    """Every key that the offline runs under ``wandb_dir`` log, named as
    :func:`flexatt.dashboard.keys_read` names them: history and summary keys (a table or image,
    stored as ``<key>/_type``, ``<key>/path``, …, as ``<key>``), ``table[column]`` for each
    column of a logged table (read from the run's table file), ``config.<dotted path>``."""
    keys: set[str] = set()

    def config(prefix: str, value) -> None:
        keys.add(prefix)
        if isinstance(value, dict):
            for k, v in value.items():
                config(f"{prefix}.{k}", v)

    for path in sorted(wandb_dir.glob("offline-run-*/run-*.wandb")):
        run = read_run(path)
        for values in [run["summary"], *run["history"]]:
            for key, value in values.items():
                keys.add(key)
                if key.endswith("/_type"):
                    keys.add(key.removesuffix("/_type"))
                    if value == "table-file":
                        table = key.removesuffix("/_type")
                        columns = json.loads((path.parent / "files" / values[f"{table}/path"]).read_text())["columns"]
                        keys.update(f"{table}[{column}]" for column in columns)
        for key, value in run["config"].items():
            config(f"config.{key}", value)
    return keys

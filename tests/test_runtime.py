"""Tests of the process-wide runtime settings (``flexatt.runtime``)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

SCRIPT = """
import json
from flexatt import runtime
first = runtime.tune_allocator()
print(json.dumps({"first": first, "again": runtime.tune_allocator()}))
"""


def run(env_value: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "FLEXATT_ALLOCATOR"}
    if env_value is not None:
        env["FLEXATT_ALLOCATOR"] = env_value
    return subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True,
                          check=True).stdout.strip()


@pytest.mark.skipif(not sys.platform.startswith("linux") or os.confstr("CS_GNU_LIBC_VERSION") is None,
                    reason="the allocator settings are glibc's")
def test_allocator_tuned_once_and_switched_off_by_the_environment():
    assert run(None) == '{"first": true, "again": true}'
    assert run("default") == '{"first": false, "again": false}'


def test_stage_entry_tunes_the_allocator(monkeypatch):
    """Every stage goes through ``run_stage``, which tunes the allocator before the task runs."""
    from flexatt import config, runtime

    calls = []
    monkeypatch.setattr(runtime, "tune_allocator", lambda: calls.append(1) or True)
    monkeypatch.setenv("FLEXATT_PARAMS", "/nonexistent/params.yaml")
    with pytest.raises(SystemExit):  # a missing params file is refused, after the tuning
        config.run_stage(lambda cfg: None, [])
    assert calls == [1]

"""Run the whole pipeline on the tiny synthetic ``smoke`` profile, in a scratch copy of the repo.

    python scripts/smoke.py                 # a temporary copy, removed afterwards
    python scripts/smoke.py --keep /tmp/s   # keep the copy (and its outputs) in /tmp/s

``python scripts/profile_run.py smoke`` with the same options (see there).
"""

from __future__ import annotations

import sys

from profile_run import make_copy, run_dvc, tracked_files  # noqa: F401  (used by the tests)
from profile_run import main as run_profile


def main(argv: list[str] | None = None) -> int:
    return run_profile(argv, profile="smoke")


if __name__ == "__main__":
    sys.exit(main())

"""The ``flexatt`` command line.

``flexatt params [OVERRIDE ...]`` composes ``conf/`` into ``params.yaml`` exactly as
``dvc exp run -S OVERRIDE`` does (e.g. ``flexatt params profile=smoke``), for ``dvc repro``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def write_params(overrides: list[str], output: Path, config_dir: Path) -> None:
    """Compose ``config_dir/config.yaml`` with ``overrides`` into ``output`` (DVC's composer)."""
    from dvc.utils.hydra import compose_and_dump

    compose_and_dump(output, str(config_dir.resolve()), None, "config", str(config_dir.resolve()),
                     overrides)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="flexatt", description="Flexible Attention NMT pipeline")
    sub = parser.add_subparsers(dest="command", required=True)
    params = sub.add_parser("params", help="compose conf/ into params.yaml (as dvc exp run does)")
    params.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. profile=smoke")
    params.add_argument("--output", type=Path, default=Path("params.yaml"))
    params.add_argument("--config-dir", type=Path, default=Path("conf"))
    args = parser.parse_args(argv)
    if args.command == "params":
        try:
            write_params(args.overrides, args.output, args.config_dir)
        except Exception as exc:  # Hydra's errors name the bad override
            sys.exit(f"error: cannot compose {args.config_dir}/config.yaml: {exc}")
        print(f"wrote {args.output}" + (f" ({' '.join(args.overrides)})" if args.overrides else ""))


if __name__ == "__main__":
    main()

#!/usr/bin/env bash
# Create .venv-joeynmt/ with Joey NMT 2.3 for joeynmt_throughput.py and joeynmt_decode.py:
# benchmarks/setup_peer.sh joeynmt (what it installs and why: its header).
exec bash "$(dirname "$0")/setup_peer.sh" joeynmt "$@"

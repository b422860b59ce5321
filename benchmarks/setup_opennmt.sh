#!/usr/bin/env bash
# Create .venv-opennmt/ with OpenNMT-py 3.5 for opennmt_decode.py:
# benchmarks/setup_peer.sh opennmt (what it installs and why: its header).
exec bash "$(dirname "$0")/setup_peer.sh" opennmt "$@"

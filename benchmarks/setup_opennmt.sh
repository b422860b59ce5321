#!/usr/bin/env bash
# Create .venv-opennmt/: a separate virtualenv holding OpenNMT-py 3.5 (from PyPI) for
# benchmarks/opennmt_decode.py. OpenNMT-py is not vendored and never enters .venv.
#
#     bash benchmarks/setup_opennmt.sh            # idempotent: does nothing when it is there
#     TORCH_PIP_ARGS="--index-url https://download.pytorch.org/whl/cpu" bash benchmarks/setup_opennmt.sh
#
# OpenNMT-py 3.5.1 declares torch<2.3, so it is installed with --no-deps next to the torch
# that flexatt's .venv uses (CPU build 2.13.0, installed FIRST), and its imports are installed
# by name: what its training and translation import (configargparse, pyyaml, sacrebleu for its
# scorers, pyonmttok for its inputters, sentencepiece for its subword transform) and what
# onmt.transforms imports at start-up, since its __init__ imports every transform module
# (rapidfuzz, pyahocorasick, fasttext-wheel, spacy without models). Its server (flask, waitress), ctranslate2 and tensorboard are not needed.
# Under torch >= 2.6 torch.load defaults to weights_only=True, which OpenNMT-py 3.5's checkpoints
# (they pickle its options) do not load with: benchmarks/opennmt_decode.py runs it with
# TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 (its own checkpoints only).
set -euo pipefail

cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VENV=${OPENNMT_VENV:-.venv-opennmt}
TORCH=${TORCH:-torch==2.13.0}
OPENNMT=${OPENNMT:-OpenNMT-py==3.5.*}
TORCH_PIP_ARGS=${TORCH_PIP_ARGS:-}
STAMP="$VENV/.opennmt-installed"

if [[ -f "$STAMP" ]]; then
    echo "setup_opennmt: $VENV is ready ($(cat "$STAMP"))"
    exit 0
fi

"$PYTHON" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip install --quiet)
"${PIP[@]}" --upgrade pip
# shellcheck disable=SC2086  # TORCH_PIP_ARGS is a list of words
"${PIP[@]}" $TORCH_PIP_ARGS "$TORCH"
"${PIP[@]}" --no-deps "$OPENNMT"
# the same torch pin in the same command: the resolver must keep it
"${PIP[@]}" "$TORCH" configargparse pyyaml six sacrebleu "pyonmttok>=1.37,<2" rapidfuzz pyahocorasick \
    fasttext-wheel spacy sentencepiece

TORCH_PIN="$TORCH" "$VENV/bin/python" - <<'PY'
import importlib, os
import torch, onmt
assert onmt.__version__.startswith("3.5"), onmt.__version__
pin = os.environ["TORCH_PIN"].partition("==")[2]
assert not pin or torch.__version__.split("+")[0] == pin, (torch.__version__, pin)
for name in ("onmt.bin.train", "onmt.bin.translate", "onmt.bin.build_vocab", "onmt.transforms"):
    importlib.import_module(name)  # every runtime import resolves
print(f"setup_opennmt: OpenNMT-py {onmt.__version__}, torch {torch.__version__}")
PY
"$VENV/bin/python" -c "import onmt, torch; print(f'OpenNMT-py {onmt.__version__} torch {torch.__version__}')" > "$STAMP"

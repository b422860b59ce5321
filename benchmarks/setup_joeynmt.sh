#!/usr/bin/env bash
# Create .venv-joeynmt/: a separate virtualenv holding Joey NMT 2.3 (from PyPI) for
# benchmarks/joeynmt_throughput.py. Joey NMT is not vendored and never enters .venv.
#
#     bash benchmarks/setup_joeynmt.sh            # idempotent: does nothing when it is there
#     TORCH_PIP_ARGS="--index-url https://download.pytorch.org/whl/cpu" bash benchmarks/setup_joeynmt.sh
#
# PyTorch is pinned to the version flexatt's .venv uses (CPU build 2.13.0) and installed
# FIRST; every later pip command names torch==2.13.0 again, so pip never resolves another
# torch (joeynmt only asks for torch>=1.12, which 2.13.0 satisfies).
#
# Joey NMT 2.3.0's declared requirements install as they are next to torch 2.13 (its one
# tight pin, protobuf<3.21, has a pure-Python wheel), so no --no-deps is needed. Two fixes, in
# the same pip command (no file of Joey's is touched):
# * joeynmt/helpers.py imports `importlib_metadata` (the backport), which its metadata does not
#   declare: installed by name;
# * its SentencePiece tokenizer calls SentencePieceProcessor.SetVocabulary, which
#   sentencepiece 0.2.1+ no longer has (AttributeError when the data are loaded):
#   sentencepiece<0.2.1 (0.2.0, the release of Joey 2.3's time; the segmentation of flexatt's
#   model is the same — benchmarks/joeynmt_throughput.py compares the token ids).
set -euo pipefail

cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VENV=${JOEY_VENV:-.venv-joeynmt}
TORCH=${TORCH:-torch==2.13.0}
JOEYNMT=${JOEYNMT:-joeynmt==2.3.*}
TORCH_PIP_ARGS=${TORCH_PIP_ARGS:-}
STAMP="$VENV/.joeynmt-installed"

if [[ -f "$STAMP" ]]; then
    echo "setup_joeynmt: $VENV is ready ($(cat "$STAMP"))"
    exit 0
fi

"$PYTHON" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip install --quiet)
"${PIP[@]}" --upgrade pip
# shellcheck disable=SC2086  # TORCH_PIP_ARGS is a list of words
"${PIP[@]}" $TORCH_PIP_ARGS "$TORCH"
# the same torch pin in the same command as joeynmt: the resolver must keep it
"${PIP[@]}" "$TORCH" "$JOEYNMT" importlib_metadata "sentencepiece<0.2.1"

TORCH_PIN="$TORCH" "$VENV/bin/python" - <<'EOF'
import importlib, os, pkgutil
import torch, joeynmt
assert joeynmt.__version__.startswith("2.3"), joeynmt.__version__
pin = os.environ["TORCH_PIN"].partition("==")[2]
assert not pin or torch.__version__.split("+")[0] == pin, (torch.__version__, pin)
for module in pkgutil.iter_modules(joeynmt.__path__):  # every runtime import resolves
    importlib.import_module(f"joeynmt.{module.name}")
import sentencepiece
assert hasattr(sentencepiece.SentencePieceProcessor, "SetVocabulary"), sentencepiece.__version__
print(f"setup_joeynmt: joeynmt {joeynmt.__version__}, torch {torch.__version__}")
EOF
"$VENV/bin/python" -c "import joeynmt, torch; print(f'joeynmt {joeynmt.__version__} torch {torch.__version__}')" > "$STAMP"

#!/usr/bin/env bash
# Create the virtualenv of a peer toolkit that the benchmarks measure flexatt against, from PyPI:
#
#     bash benchmarks/setup_peer.sh joeynmt    # .venv-joeynmt/: Joey NMT 2.3 (joeynmt_throughput.py, joeynmt_decode.py)
#     bash benchmarks/setup_peer.sh opennmt    # .venv-opennmt/: OpenNMT-py 3.5 (opennmt_decode.py)
#     TORCH_PIP_ARGS="--index-url https://download.pytorch.org/whl/cpu" bash benchmarks/setup_peer.sh joeynmt
#
# (benchmarks/setup_joeynmt.sh and setup_opennmt.sh run this with their peer.) Idempotent: does
# nothing when the virtualenv is there. No peer is vendored, and none ever enters .venv.
#
# PyTorch is pinned to the version flexatt's .venv uses (CPU build 2.13.0) and installed FIRST;
# every later pip command that resolves dependencies names torch==2.13.0 again, so pip never
# resolves another torch. Then, per peer:
#
# joeynmt — Joey NMT 2.3.0 (JOEYNMT, default joeynmt==2.3.*; JOEY_VENV, default .venv-joeynmt).
#   Its declared requirements install as they are next to torch 2.13 (it asks for torch>=1.12;
#   its one tight pin, protobuf<3.21, has a pure-Python wheel), with two fixes in the same pip
#   command (no file of Joey's is touched):
#   * joeynmt/helpers.py imports `importlib_metadata` (the backport), which its metadata does not
#     declare: installed by name;
#   * its SentencePiece tokenizer calls SentencePieceProcessor.SetVocabulary, which
#     sentencepiece 0.2.1+ no longer has (AttributeError when the data are loaded):
#     sentencepiece<0.2.1 (0.2.0, the release of Joey 2.3's time; the segmentation of flexatt's
#     model is the same — benchmarks/joeynmt_throughput.py compares the token ids).
#
# opennmt — OpenNMT-py 3.5 (OPENNMT, default OpenNMT-py==3.5.*; OPENNMT_VENV, default .venv-opennmt).
#   OpenNMT-py 3.5.1 declares torch<2.3, so it is installed with --no-deps, and its imports by
#   name: what its training and translation import (configargparse, pyyaml, sacrebleu for its
#   scorers, pyonmttok for its inputters, sentencepiece for its subword transform) and what
#   onmt.transforms imports at start-up, since its __init__ imports every transform module
#   (rapidfuzz, pyahocorasick, fasttext-wheel, spacy without models). Its server (flask,
#   waitress), ctranslate2 and tensorboard are not needed. Under torch >= 2.6 torch.load
#   defaults to weights_only=True, which OpenNMT-py 3.5's checkpoints (they pickle its options)
#   do not load with: benchmarks/opennmt_decode.py runs it with TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1
#   (its own checkpoints only).
set -euo pipefail

PEER=${1:-}
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
TORCH=${TORCH:-torch==2.13.0}
TORCH_PIP_ARGS=${TORCH_PIP_ARGS:-}

case "$PEER" in
    joeynmt)
        VENV=${JOEY_VENV:-.venv-joeynmt}
        PACKAGE=${JOEYNMT:-joeynmt==2.3.*}
        MODULE=joeynmt NAME=joeynmt VERSION=2.3
        IMPORTS="joeynmt.*"                                          # every module of the package
        HAS="sentencepiece.SentencePieceProcessor.SetVocabulary"    # what its tokenizer calls
        ;;
    opennmt)
        VENV=${OPENNMT_VENV:-.venv-opennmt}
        PACKAGE=${OPENNMT:-OpenNMT-py==3.5.*}
        MODULE=onmt NAME=OpenNMT-py VERSION=3.5
        IMPORTS="onmt.bin.train onmt.bin.translate onmt.bin.build_vocab onmt.transforms"
        HAS=""
        ;;
    *)
        echo "usage: bash benchmarks/setup_peer.sh joeynmt|opennmt" >&2
        exit 2
        ;;
esac
STAMP="$VENV/.$PEER-installed"

if [[ -f "$STAMP" ]]; then
    echo "setup_$PEER: $VENV is ready ($(cat "$STAMP"))"
    exit 0
fi

"$PYTHON" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip install --quiet)
"${PIP[@]}" --upgrade pip
# shellcheck disable=SC2086  # TORCH_PIP_ARGS is a list of words
"${PIP[@]}" $TORCH_PIP_ARGS "$TORCH"
# the same torch pin in the same command as the peer's requirements: the resolver must keep it
case "$PEER" in
    joeynmt)
        "${PIP[@]}" "$TORCH" "$PACKAGE" importlib_metadata "sentencepiece<0.2.1"
        ;;
    opennmt)
        "${PIP[@]}" --no-deps "$PACKAGE"
        "${PIP[@]}" "$TORCH" configargparse pyyaml six sacrebleu "pyonmttok>=1.37,<2" rapidfuzz pyahocorasick \
            fasttext-wheel spacy sentencepiece
        ;;
esac

# the peer imports at its version next to the pinned torch; IMPORTS (a name ending in .*: every
# module of that package) import, so every runtime import resolves; HAS names what must exist
TORCH_PIN="$TORCH" PEER="$PEER" MODULE="$MODULE" NAME="$NAME" VERSION="$VERSION" IMPORTS="$IMPORTS" HAS="$HAS" \
    "$VENV/bin/python" - <<'PY'
import importlib, os, pkgutil
import torch
env = os.environ
peer = importlib.import_module(env["MODULE"])
assert peer.__version__.startswith(env["VERSION"]), peer.__version__
pin = env["TORCH_PIN"].partition("==")[2]
assert not pin or torch.__version__.split("+")[0] == pin, (torch.__version__, pin)
for name in env["IMPORTS"].split():
    if name.endswith(".*"):
        package = importlib.import_module(name[:-2])
        for module in pkgutil.iter_modules(package.__path__):
            importlib.import_module(f"{package.__name__}.{module.name}")
    else:
        importlib.import_module(name)
for dotted in env["HAS"].split():
    module, _, attributes = dotted.partition(".")
    found = importlib.import_module(module)
    for attribute in attributes.split("."):
        found = getattr(found, attribute)  # AttributeError names what is missing
print(f"setup_{env['PEER']}: {env['NAME']} {peer.__version__}, torch {torch.__version__}")
PY
"$VENV/bin/python" -c "import $MODULE, torch; print(f'$NAME {$MODULE.__version__} torch {torch.__version__}')" > "$STAMP"

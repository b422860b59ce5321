"""Reading flexatt checkpoints: the network weights and the hyperparameters they were trained with.

Training writes the SentencePiece models ``src.model`` and ``tgt.model`` beside its checkpoints
and their SHA-256 into the hyperparameters (``vocab_digests``), so a checkpoint's folder is all a
translation needs, and :func:`check_vocabulary` refuses a model file that is not the one the
checkpoint was trained with.

Every read uses ``torch.load(weights_only=True)``: nothing in a file is unpickled as code. A file
that is not a checkpoint is refused in one line naming it (the first line of torch's error, not
its advice on unpickling).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from flexatt.errors import DataError
from flexatt.io import file_digest

SIDES = ("src", "tgt")
#: the entry of a model folder's ``run.json`` written when its run has ended: the epochs it trained
EPOCHS_DONE = "epochs_done"


def check_vocabulary(checkpoint: str | Path, hparams: dict[str, Any], side: str, model_path: str | Path,
                     n_pieces: int) -> None:
    """Refuse the ``side`` vocabulary at ``model_path`` (``n_pieces`` pieces) unless it is the one
    ``checkpoint`` was trained with: the same file (where the checkpoint records its digest) and
    the same size.

    Raises:
        DataError: naming the model file and the checkpoint.
    """
    if n_pieces != hparams[f"{side}_vocab"]:
        raise DataError(model_path, f"has {n_pieces} pieces but {checkpoint} was trained with "
                        f"{hparams[f'{side}_vocab']}: not this model's vocabulary")
    recorded = (hparams.get("vocab_digests") or {}).get(side)
    if recorded is not None and recorded != file_digest(model_path):
        raise DataError(model_path, f"is not the {side} SentencePiece model {checkpoint} was trained with "
                        f"(its SHA-256 differs): not this model's vocabulary")


def error_summary(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def read_checkpoint(path: str | Path) -> dict[str, Any]:
    """The checkpoint dictionary at ``path``.

    Raises:
        DataError: the file is missing, truncated or not a checkpoint (one line, naming it).
    """
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError as exc:
        raise DataError(path, "checkpoint not found") from exc
    except Exception as exc:  # truncated zip, pickle error
        raise DataError(path, f"not a readable checkpoint (corrupt or truncated?): {error_summary(exc)}") from exc
    if not isinstance(ckpt, dict):
        raise DataError(path, f"not a flexatt checkpoint (holds a {type(ckpt).__name__})")
    return ckpt


def load_checkpoint_state(path: str | Path) -> dict[str, torch.Tensor]:
    """The network weights (``Seq2Seq`` state dict) of a Lightning checkpoint.

    Loaded with ``weights_only=True``: nothing in the file is unpickled as code.

    Raises:
        DataError: the file is missing, truncated or not a flexatt checkpoint.
    """
    state = read_checkpoint(path).get("state_dict")
    if not isinstance(state, dict):
        raise DataError(path, "not a flexatt checkpoint (no state_dict)")
    prefix = "model."
    weights = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
    if not weights:
        raise DataError(path, "holds no model weights")
    return weights


def checkpoint_hparams(path: str | Path) -> dict[str, Any]:
    """The hyperparameters saved in a checkpoint (model config, vocabulary sizes, …)."""
    hparams = read_checkpoint(path).get("hyper_parameters")
    if not isinstance(hparams, dict):
        raise DataError(path, "not a flexatt checkpoint (no hyper_parameters)")
    return dict(hparams)


def load_model(checkpoint: str | Path):
    """A trained :class:`Seq2Seq` from a checkpoint (``weights_only`` loading), in eval mode.

    Raises:
        DataError: a missing, truncated or foreign checkpoint (the message names the file).
    """
    from flexatt.model import build_model, joint_vocabulary  # the model imports torch's modules; loading weights does not

    hparams = checkpoint_hparams(checkpoint)
    try:
        model = build_model(hparams["model_cfg"], hparams["src_vocab"], hparams["tgt_vocab"],
                            joint_vocab=joint_vocabulary(hparams.get("vocab_digests")))
        model.load_state_dict(load_checkpoint_state(checkpoint))
    except (KeyError, RuntimeError, ValueError) as exc:
        raise DataError(checkpoint, f"does not hold a flexatt model: {exc}") from exc
    return model.eval()

"""Translation metrics.

``corpus_bleu`` is sacrebleu's BLEU on detokenised text (13a tokenisation, mixed case), with its
signature so a number can be traced to its exact settings. With several reference streams
(e.g. the corpus's second reference), it is multi-reference BLEU; an empty string in a
stream means "no such reference for this sentence".
"""

from __future__ import annotations

from collections.abc import Sequence

from sacrebleu.metrics import BLEU


def corpus_bleu(hypotheses: Sequence[str], references: Sequence[Sequence[str]]) -> tuple[float, str]:
    """BLEU of ``hypotheses`` against one or more reference streams; returns (score, signature).

    Raises:
        ValueError: a reference stream's length differs from the hypotheses'.
    """
    for k, stream in enumerate(references):
        if len(stream) != len(hypotheses):
            raise ValueError(f"reference stream {k} has {len(stream)} lines for {len(hypotheses)} hypotheses")
    bleu = BLEU()
    result = bleu.corpus_score(list(hypotheses), [list(s) for s in references])
    return float(result.score), str(bleu.get_signature())

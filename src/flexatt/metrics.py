"""Translation and alignment metrics.

BLEU
    :func:`corpus_bleu` is sacrebleu's BLEU on detokenised text (13a tokenisation, mixed case,
    ``exp`` smoothing), with its signature so a number can be traced to its exact settings
    (Post 2018, "A Call for Clarity in Reporting BLEU Scores"). :func:`tokenized_bleu` is the
    "tokenised BLEU" that Luong et al. (2015) and Shu & Nakayama report: multi-bleu.perl
    (Moses) semantics on already-tokenised text; :func:`moses_tokenize` produces that text
    (the Moses tokenizer, as ``tokenizer.perl`` before ``multi-bleu.perl``).
    :func:`bleu_by_length` splits a test set into source-length buckets (Luong et al. 2015,
    Figure 6). :func:`bleu_significance` adds sacrebleu's paired bootstrap resampling: a 95%
    confidence interval per system and a p-value against a reference system (Koehn 2004).

chrF
    :func:`corpus_chrf` is sacrebleu's chrF with its default settings (character 6-grams,
    no word n-grams, beta = 2; Popović 2015, "chrF: character n-gram F-score for automatic MT
    evaluation"), on detokenised text.

    Reference streams. Every BLEU function takes ``references`` as a list of reference
    *streams* (one string per hypothesis each), or a single stream (a list of strings). The
    first stream is the primary reference; in any later stream an empty (or blank) string
    means "this sentence has no such reference". sacrebleu itself drops only ``None``
    references and treats ``""`` as a real reference of length 0, which distorts the score:
    the empty reference is often the *closest* reference length, so it shrinks (or removes)
    the brevity penalty (a 7-word hypothesis of a 14-word reference scores 100 instead of 36.8
    with an extra ``""``). So blank strings in secondary streams are turned into ``None``
    before scoring; sacrebleu then uses the remaining references of that sentence and reports
    ``nrefs:var`` in the signature when the count varies. A blank primary reference is passed
    on as it is (the filter stage drops pairs with an empty side, so it does not occur).

RIBES
    :func:`sentence_ribes` and :func:`corpus_ribes` reproduce NTT's official ``RIBES.py``
    (versions 1.02.4-1.03.1 share the scoring code; Isozaki et al. 2010, EMNLP, "Automatic
    Evaluation of Translation Quality for Distant Language Pairs"; Hirao et al. 2014). See
    :func:`sentence_ribes` for the exact rules.

Alignment
    :func:`aer` is the alignment error rate of Och & Ney (2003), "A Systematic Comparison of
    Various Statistical Alignment Models", section 5. :func:`attention_alignment` turns an
    attention matrix into one-to-one hard links: the attention is summed over the
    SentencePiece pieces of each word on both sides, and each target word is linked to its
    most attended source word (Luong et al. 2015, section 5.4).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import lru_cache
from typing import Any

import numpy as np
from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.significance import PairedTest
from sacremoses import MosesTokenizer

__all__ = [
    "BOOTSTRAP_SAMPLES",
    "BOOTSTRAP_SEED",
    "aer",
    "attention_alignment",
    "bleu_by_length",
    "bleu_significance",
    "corpus_bleu",
    "corpus_chrf",
    "corpus_ribes",
    "filter_to_covered",
    "moses_tokenize",
    "piece_word_ids",
    "sentence_ribes",
    "tokenized_bleu",
]

#: SentencePiece's word-boundary marker (U+2581), which starts every piece that begins a word.
WORD_BOUNDARY = "\u2581"

Link = tuple[int, int]

# --------------------------------------------------------------------------------------------
# BLEU


def _as_streams(references: Sequence[str] | Sequence[Sequence[str]], n: int) -> list[list[str]]:
    """``references`` as a list of streams of ``n`` strings (a single stream is wrapped)."""
    if isinstance(references, str):
        raise TypeError("references must be a list of strings or a list of reference streams")
    refs = list(references)
    if not refs:
        raise ValueError("no references")
    if all(isinstance(r, str) for r in refs):
        streams = [refs]
    else:
        streams = [list(s) for s in refs]
    for k, stream in enumerate(streams):
        if len(stream) != n:
            raise ValueError(f"reference stream {k} has {len(stream)} lines for {n} hypotheses")
    return streams


def _missing_as_none(streams: list[list[str]]) -> list[list[str | None]]:
    """Blank strings in secondary streams become ``None`` (sacrebleu's "no reference")."""
    out: list[list[str | None]] = [list(streams[0])]
    for stream in streams[1:]:
        out.append([None if (r is None or not r.strip()) else r for r in stream])
    return out


def _bleu(hypotheses: Sequence[str], streams: list[list[str]], **kwargs: Any) -> tuple[float, str]:
    hyps = list(hypotheses)
    if not hyps:
        raise ValueError("no hypotheses")
    bleu = BLEU(**kwargs)
    result = bleu.corpus_score(hyps, _missing_as_none(streams))
    return float(result.score), str(bleu.get_signature())


def corpus_bleu(hypotheses: Sequence[str],
                references: Sequence[Sequence[str]] | Sequence[str]) -> tuple[float, str]:
    """sacrebleu BLEU (0-100) of detokenised ``hypotheses``; returns (score, signature).

    Source: sacrebleu 2.x ``BLEU()`` defaults (13a tokenisation, case-sensitive, ``exp``
    smoothing, 4-grams, closest reference length) — Post (2018); Papineni et al. (2002).
    ``references`` is a list of reference streams (multi-reference BLEU when several), or one
    stream. An empty string in a secondary stream means "no second reference for this
    sentence" and is dropped for that sentence (see the module docstring for why: sacrebleu
    would count it as a reference of length 0 and distort the brevity penalty).

    Raises:
        ValueError: a reference stream's length differs from the hypotheses', or no hypotheses.
    """
    return _bleu(hypotheses, _as_streams(references, len(hypotheses)))


def tokenized_bleu(hypotheses: Sequence[str],
                   references: Sequence[Sequence[str]] | Sequence[str]) -> tuple[float, str]:
    """"Tokenised BLEU" (0-100) as the papers report it; returns (score, signature).

    Source: Moses ``multi-bleu.perl`` semantics, computed with sacrebleu
    (``tokenize="none"``, ``smooth_method="none"``, ``force=True``): the text is split on
    whitespace and not tokenised further, case-sensitive, corpus-level modified 1-4-gram
    precisions with counts clipped by the maximum over references, a geometric mean without
    smoothing (any zero precision gives 0, as multi-bleu.perl's ``my_log(0)``), and a brevity
    penalty from the closest reference length per sentence (ties: the shorter). Feed it the
    same tokenisation on both sides (e.g. Moses-tokenised text). Multiple reference streams
    and blank secondary references are handled as in :func:`corpus_bleu`.

    Raises:
        ValueError: a reference stream's length differs from the hypotheses', or no hypotheses.
    """
    return _bleu(hypotheses, _as_streams(references, len(hypotheses)),
                 tokenize="none", smooth_method="none", force=True)


@lru_cache(maxsize=8)
def _moses_tokenizer(lang: str) -> MosesTokenizer:
    return MosesTokenizer(lang=lang)


def moses_tokenize(lines: Sequence[str], lang: str) -> list[str]:
    """``lines`` tokenised by the Moses tokenizer for language ``lang``, tokens joined by spaces.

    Source: sacremoses' ``MosesTokenizer`` (a port of Moses ``tokenizer.perl``), the step before
    ``multi-bleu.perl`` in the "tokenised BLEU" of Luong et al. (2015) and Shu & Nakayama:
    default rules (no aggressive hyphen splitting), the language's non-breaking prefixes
    (``Mr.``), and ``escape=False`` (``&`` and ``<`` stay as they are instead of becoming XML
    entities, which would change no match). Unlike sacrebleu's 13a tokenizer it splits
    clitics: English ``don't`` becomes ``don 't``. A language without a Moses prefix file
    (e.g. the synthetic task's ``tgt``) gets the language-independent rules.

    Raises:
        ValueError: ``lang`` is empty.
    """
    if not isinstance(lang, str) or not lang.strip():
        raise ValueError(f"Moses tokenizer: the language must be a non-empty code (got {lang!r})")
    tokenizer = _moses_tokenizer(lang.strip())
    return [tokenizer.tokenize(line, escape=False, return_str=True) for line in lines]


def corpus_chrf(hypotheses: Sequence[str],
                references: Sequence[Sequence[str]] | Sequence[str]) -> tuple[float, str]:
    """sacrebleu chrF (0-100) of detokenised ``hypotheses``; returns (score, signature).

    Source: sacrebleu 2.x ``CHRF()`` defaults — character n-grams up to 6, no word n-grams
    (chrF, not chrF++), beta = 2, whitespace ignored, case-sensitive (Popović 2015, "chrF:
    character n-gram F-score for automatic MT evaluation"). References as in
    :func:`corpus_bleu` (blank secondary references mean "no such reference").

    Raises:
        ValueError: a reference stream's length differs from the hypotheses', or no hypotheses.
    """
    hyps = list(hypotheses)
    if not hyps:
        raise ValueError("no hypotheses")
    chrf = CHRF()
    result = chrf.corpus_score(hyps, _missing_as_none(_as_streams(references, len(hyps))))
    return float(result.score), str(chrf.get_signature())


def bleu_by_length(hypotheses: Sequence[str],
                   references: Sequence[Sequence[str]] | Sequence[str],
                   source_lengths: Sequence[int],
                   buckets: Sequence[int] = (10, 20, 30, 40, 50),
                   *, tokenized: bool = False) -> list[dict[str, Any]]:
    """BLEU per source-length bucket (Luong et al. 2015, Figure 6).

    ``buckets`` are inclusive upper bounds, increasing: the default gives ``1-10``, ``11-20``,
    ``21-30``, ``31-40``, ``41-50`` and the open-ended ``51+``. A sentence of source length
    ``L`` falls in the first bucket whose bound is ``>= L`` (length 0 goes in the first). Each
    bucket's score is the corpus BLEU of its sentences (:func:`corpus_bleu`, or
    :func:`tokenized_bleu` with ``tokenized=True``), not an average of sentence scores.
    ``source_lengths`` are in whatever unit the caller chooses (Luong: source words).

    Returns:
        One dict per bucket, in order, empty ones included:
        ``{"bucket": "1-10", "sentences": n, "bleu": score}``; ``bleu`` is ``None`` when the
        bucket has no sentence.

    Raises:
        ValueError: lengths of the inputs differ, a negative length, or bad ``buckets``.
    """
    n = len(hypotheses)
    streams = _as_streams(references, n)
    if len(source_lengths) != n:
        raise ValueError(f"{len(source_lengths)} source lengths for {n} hypotheses")
    bounds = [int(b) for b in buckets]
    if not bounds or bounds[0] < 1 or any(b <= a for a, b in zip(bounds, bounds[1:])):
        raise ValueError(f"buckets must be increasing positive bounds, got {tuple(buckets)}")
    labels, lower = [], 1
    for b in bounds:
        labels.append(f"{lower}-{b}")
        lower = b + 1
    labels.append(f"{lower}+")
    members: list[list[int]] = [[] for _ in labels]
    for i, length in enumerate(source_lengths):
        if length < 0:
            raise ValueError(f"negative source length {length} at line {i}")
        k = next((j for j, b in enumerate(bounds) if length <= b), len(bounds))
        members[k].append(i)
    score_fn = tokenized_bleu if tokenized else corpus_bleu
    rows = []
    for label, idx in zip(labels, members):
        score = None
        if idx:
            score, _ = score_fn([hypotheses[i] for i in idx], [[s[i] for i in idx] for s in streams])
        rows.append({"bucket": label, "sentences": len(idx), "bleu": score})
    return rows


# --------------------------------------------------------------------------------------------
# Significance

#: Bootstrap resamples per system: sacrebleu's default for ``--paired-bs`` (Koehn 2004 used 1000).
BOOTSTRAP_SAMPLES = 1000
#: sacrebleu's own default seed (``SACREBLEU_SEED`` unset); the evaluate stage passes the config's.
BOOTSTRAP_SEED = 12345


@contextmanager
def _sacrebleu_seed(seed: int) -> Iterator[None]:
    """Set ``SACREBLEU_SEED`` for the duration: sacrebleu's significance module takes its seed
    only from that variable (read when a ``PairedTest`` is built), not from a parameter."""
    before = os.environ.get("SACREBLEU_SEED")
    os.environ["SACREBLEU_SEED"] = str(seed)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("SACREBLEU_SEED", None)
        else:
            os.environ["SACREBLEU_SEED"] = before


def bleu_significance(hypotheses: Mapping[str, Sequence[str]],
                      references: Sequence[Sequence[str]] | Sequence[str],
                      against: Mapping[str, str | None], *, n_samples: int = BOOTSTRAP_SAMPLES,
                      seed: int = BOOTSTRAP_SEED, test: str = "bs") -> dict[str, dict[str, Any]]:
    """95% confidence interval of each system's BLEU and its p-value against a reference system.

    Source: sacrebleu's paired bootstrap resampling, ``sacrebleu.significance.PairedTest``
    with ``test_type="bs"`` (the port of Moses ``bootstrap-hypothesis-difference-significance.pl``;
    Koehn 2004, "Statistical Significance Tests for Machine Translation Evaluation"), on the
    BLEU of :func:`corpus_bleu` (sacrebleu defaults). Systems are grouped by their reference,
    and each group is one ``PairedTest`` with the reference first (its baseline).

    * ``bleu_ci``: ``score ± ci``, centred on the observed corpus BLEU (sacrebleu's ``score``, the
      BLEU of the whole test set), where ``ci`` is sacrebleu's half-width, half the distance
      between the 2.5th and 97.5th percentiles of the BLEU of the ``n_samples`` resampled test
      sets (``sacrebleu.significance.estimate_ci``); 2 decimals. sacrebleu's own interval is
      centred on the resamples' mean (its ``mean``), which is not the observed score (corpus BLEU
      is not linear in the sentences); Table 1 reads "score ± half-width", so the interval is
      centred where the score is.
    * ``p_value``: sacrebleu's p-value of the difference between the system and its reference
      (4 decimals); ``None`` for a system without a reference. One exception to sacrebleu:
      a system whose BLEU equals its reference's exactly (identical hypotheses, e.g. a τ row
      that decodes at τ = ∞ like its base, or both at 0) gets 1.0. The observed difference is
      then 0, which no resample can fall below; sacrebleu counts resampled differences strictly
      greater than it, and when they are all 0 as well it reports ``1 / (n_samples + 1)``,
      i.e. "significant".
    * ``p_value_against``: the reference's name, or ``None``.

    ``test="ar"`` runs sacrebleu's paired approximate randomisation instead
    (``PairedTest(test_type="ar")``; Riezler & Maxwell 2005, after multeval's
    ``StratifiedApproximateRandomizationTest``): each of ``n_samples`` trials swaps the two
    systems' sentences at random, and ``p_value`` is the share of trials whose absolute BLEU
    difference exceeds the observed one (with sacrebleu's +1 correction; sacrebleu's default is
    10,000 trials). It estimates no interval: ``bleu_ci`` is ``None``. The exception for equal
    BLEU applies as above (sacrebleu's AR count is the same strict ``>``).

    Determinism: every ``PairedTest`` draws its resamples from ``numpy.random.default_rng(seed)``
    (sacrebleu reads the seed from the ``SACREBLEU_SEED`` environment variable, which is set
    for the call and restored after), so all systems are resampled with the same test-set
    indices and a system's interval is the same whether it is a baseline or not.

    Args:
        hypotheses: system name -> detokenised hypotheses (one per reference line).
        references: one reference stream, or a list of streams (as :func:`corpus_bleu`).
        against: system name -> the name of its reference system, or ``None``; one entry per
            system of ``hypotheses``.
        n_samples: bootstrap resamples (>= 1).
        seed: the RNG seed (>= 1: sacrebleu treats 0 as "unseeded" for the compared systems).
        test: ``"bs"`` (paired bootstrap resampling) or ``"ar"`` (approximate randomisation).

    Returns:
        ``{name: {"bleu_ci": [low, high], "p_value": float | None, "p_value_against": str | None}}``
        in the order of ``hypotheses``.

    Raises:
        ValueError: no systems, ``against`` does not name every system (and only them), a
            reference that is not a system or is the system itself, a length mismatch, or a
            bad ``n_samples`` / ``seed`` / ``test``.
    """
    if test not in ("bs", "ar"):
        raise ValueError(f"test must be 'bs' (paired bootstrap) or 'ar' (approximate randomisation) (got {test!r})")
    names = list(hypotheses)
    if not names:
        raise ValueError("no systems")
    if set(against) != set(names):
        missing = sorted(set(names) - set(against))
        extra = sorted(set(against) - set(names))
        raise ValueError(f"against must name the reference of every system, and only those "
                         f"(missing: {missing}, unknown: {extra})")
    for name, ref in against.items():
        if ref is not None and (ref not in hypotheses or ref == name):
            raise ValueError(f"the reference of {name!r} must be another system (got {ref!r})")
    if isinstance(n_samples, bool) or not isinstance(n_samples, int) or n_samples < 1:
        raise ValueError(f"n_samples must be an integer >= 1 (got {n_samples!r})")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 1:
        raise ValueError(f"seed must be an integer >= 1 (got {seed!r}); sacrebleu leaves the "
                         "resampling unseeded for 0")
    n = len(hypotheses[names[0]])
    for name in names:
        if len(hypotheses[name]) != n:
            raise ValueError(f"{name!r} has {len(hypotheses[name])} hypotheses, {names[0]!r} has {n}")
    if n == 0:
        raise ValueError("no hypotheses")
    refs = _missing_as_none(_as_streams(references, n))

    # reference -> the systems compared with it; a system without a reference that nobody is
    # compared with forms a group of its own (a confidence interval only)
    groups: dict[str, list[str]] = {}
    for name in names:
        if against[name] is not None:
            groups.setdefault(against[name], []).append(name)
    for name in names:
        if against[name] is None:
            groups.setdefault(name, [])

    out: dict[str, dict[str, Any]] = {}

    def interval(result: Any) -> list[float] | None:
        if result.mean is None:  # approximate randomisation: no interval
            return None
        return [round(float(result.score - result.ci), 2), round(float(result.score + result.ci), 2)]

    with _sacrebleu_seed(seed):
        for baseline, systems in groups.items():
            paired = PairedTest([(baseline, list(hypotheses[baseline]))]
                                + [(s, list(hypotheses[s])) for s in systems],
                                {"BLEU": BLEU()}, refs, test_type=test, n_samples=n_samples)
            _, scores = paired()
            (results,) = [v for k, v in scores.items() if k != "System"]
            baseline_score = results[0].score
            for name, result in zip(scores["System"], results):
                if name == baseline:
                    out.setdefault(name, {"bleu_ci": interval(result)})
                    continue
                p = 1.0 if result.score == baseline_score else result.p_value
                out[name] = {"bleu_ci": interval(result), "p_value": round(float(p), 4),
                             "p_value_against": baseline}
    return {name: {"bleu_ci": out[name]["bleu_ci"], "p_value": out[name].get("p_value"),
                   "p_value_against": out[name].get("p_value_against")} for name in names}


# --------------------------------------------------------------------------------------------
# RIBES

RIBES_ALPHA = 0.25
RIBES_BETA = 0.10


def _ribes_words(text: str, case_sensitive: bool) -> list[str]:
    # RIBES.py: strip, collapse whitespace runs, lowercase unless -c, split on the space.
    return (text if case_sensitive else text.lower()).split()


def _ribes_alignment(hyp: list[str], ref: list[str]) -> list[int]:
    """Reference position of each alignable hypothesis word, in hypothesis order.

    The official ``kendall()`` word alignment (RIBES.py 1.02.4+), see :func:`sentence_ribes`.
    Occurrence counts are overlapping counts of contiguous word n-grams.
    """
    tables: dict[int, tuple[dict[tuple[str, ...], list[int]], dict[tuple[str, ...], int]]] = {}

    def table(n: int) -> tuple[dict[tuple[str, ...], list[int]], dict[tuple[str, ...], int]]:
        # n-gram -> [count, first position] in the reference; n-gram -> count in the hypothesis
        if n not in tables:
            in_ref: dict[tuple[str, ...], list[int]] = {}
            for p in range(len(ref) - n + 1):
                entry = in_ref.setdefault(tuple(ref[p:p + n]), [0, p])
                entry[0] += 1
            in_hyp: dict[tuple[str, ...], int] = {}
            for p in range(len(hyp) - n + 1):
                g = tuple(hyp[p:p + n])
                in_hyp[g] = in_hyp.get(g, 0) + 1
            tables[n] = (in_ref, in_hyp)
        return tables[n]

    def unique_ref_position(g: tuple[str, ...]) -> int | None:
        in_ref, in_hyp = table(len(g))
        entry = in_ref.get(g)
        if entry is not None and entry[0] == 1 and in_hyp.get(g, 0) == 1:
            return entry[1]
        return None

    positions: list[int] = []
    uni_ref, uni_hyp = table(1)
    for i, word in enumerate(hyp):
        entry = uni_ref.get((word,))
        if entry is None:  # not in the reference
            continue
        if entry[0] == 1 and uni_hyp[(word,)] == 1:
            positions.append(entry[1])
            continue
        # Context windows: the n-gram ending at i (left context) before the one starting at i
        # (right context), growing one word at a time. An n-gram longer than the reference
        # cannot occur in it, so larger windows are skipped (the official loop runs on in vain).
        for window in range(1, min(max(i, len(hyp) - 1 - i), len(ref) - 1) + 1):
            if window <= i:
                p = unique_ref_position(tuple(hyp[i - window:i + 1]))
                if p is not None:
                    positions.append(p + window)
                    break
            if i + window < len(hyp):
                p = unique_ref_position(tuple(hyp[i:i + window + 1]))
                if p is not None:
                    positions.append(p)
                    break
    return positions


def _ribes_components(hyp: list[str], ref: list[str]) -> tuple[float, float, float]:
    """(NKT, unigram precision, brevity penalty) as RIBES.py's ``kendall()`` returns them."""
    if not ref:
        raise ValueError("RIBES: the reference has no words")
    if not hyp:
        return 0.0, 0.0, 0.0
    bp = min(1.0, math.exp(1.0 - len(ref) / len(hyp)))
    positions = _ribes_alignment(hyp, ref)
    n = len(positions)
    if n == 1 and len(ref) == 1:
        return 1.0, 1.0 / len(hyp), bp
    if n < 2:
        return 0.0, 0.0, bp
    ascending = sum(1 for a in range(n - 1) for b in range(a + 1, n) if positions[a] < positions[b])
    return ascending / (n * (n - 1) / 2), n / len(hyp), bp


def _ribes_score(hyp: list[str], ref: list[str], alpha: float, beta: float) -> float:
    nkt, precision, bp = _ribes_components(hyp, ref)
    return nkt * precision ** alpha * bp ** beta


def sentence_ribes(hypothesis: str, reference: str, *, alpha: float = RIBES_ALPHA,
                   beta: float = RIBES_BETA, case_sensitive: bool = False) -> float:
    """RIBES of one hypothesis against one reference, in [0, 1], as the official RIBES.py.

    Source: NTT's ``RIBES.py`` (read: 1.03 / 1.03.1, whose ``kendall()`` is that of 1.02.4,
    the release that fixed the word alignment); Isozaki et al. (2010).
    ``RIBES = NKT * P**alpha * BP**beta`` with alpha = 0.25, beta = 0.10, where

    * words: whitespace split, lowercased unless ``case_sensitive`` (RIBES.py lowercases by
      default; ``-c`` keeps case);
    * BP = ``min(1, exp(1 - |ref| / |hyp|))``;
    * word alignment, for each hypothesis word ``h[i]`` left to right: skipped if it does not
      occur in the reference; aligned to its reference position if it occurs exactly once in
      both; otherwise, for ``w = 1, 2, ...``, first the (w+1)-gram ending at ``i``
      (``h[i-w..i]``, left context), then the one starting at ``i`` (``h[i..i+w]``, right
      context) is tried, and the first that occurs exactly once in the hypothesis and exactly
      once in the reference (overlapping counts) aligns ``h[i]`` to the corresponding
      reference position; if none does, ``h[i]`` is left unaligned. Two hypothesis words may
      end up on the same reference position (counted as a non-ascending pair);
    * with ``n`` aligned words, NKT = (number of pairs ``a < b`` whose reference positions
      increase) / (n(n-1)/2), i.e. (Kendall's tau + 1) / 2, and P = n / |hyp|;
    * special cases: an empty hypothesis scores 0; if ``n == 1`` and the reference is one
      word, NKT = 1 and P = 1/|hyp|; otherwise ``n < 2`` scores 0.

    Raises:
        ValueError: the reference has no words (RIBES.py: "Reference has no words").
    """
    return _ribes_score(_ribes_words(hypothesis, case_sensitive),
                        _ribes_words(reference, case_sensitive), alpha, beta)


def corpus_ribes(hypotheses: Sequence[str], references: Sequence[str] | Sequence[Sequence[str]],
                 *, alpha: float = RIBES_ALPHA, beta: float = RIBES_BETA,
                 case_sensitive: bool = False) -> float:
    """Corpus RIBES: the arithmetic mean of the sentence scores (:func:`sentence_ribes`).

    Source: RIBES.py 1.03.1 ``RIBESevaluator.eval``. ``references`` is one stream (a list of
    strings) or a list of streams; with several, each sentence takes its best score over its
    references, and blank strings in secondary streams mean "no such reference" (RIBES.py's
    ``-z/--emptyref`` behaviour for those streams).

    Raises:
        ValueError: no hypotheses, stream lengths differ, or a primary reference is blank.
    """
    if not hypotheses:
        raise ValueError("no hypotheses")
    streams = _as_streams(references, len(hypotheses))
    total = 0.0
    for i, hypothesis in enumerate(hypotheses):
        hyp = _ribes_words(hypothesis, case_sensitive)
        best = -1.0
        for k, stream in enumerate(streams):
            ref = _ribes_words(stream[i], case_sensitive)
            if not ref:
                if k == 0:
                    raise ValueError(f"RIBES: the reference of line {i} has no words")
                continue
            best = max(best, _ribes_score(hyp, ref, alpha, beta))
        total += best
    return total / len(hypotheses)


# --------------------------------------------------------------------------------------------
# Alignments


def piece_word_ids(pieces: Sequence[str]) -> list[int]:
    """Word index of each SentencePiece piece: a piece starting with "▁" starts a new word.

    A first piece without the marker still belongs to word 0. Words are then the
    whitespace tokens of the text, as the gold Pharaoh links index them (assuming the
    SentencePiece normaliser keeps word boundaries, which ``nmt_nfkc`` does for ordinary text).
    """
    ids, word = [], -1
    for k, piece in enumerate(pieces):
        if k == 0 or piece.startswith(WORD_BOUNDARY):
            word += 1
        ids.append(word)
    return ids


def attention_alignment(weights: Any, source_pieces: Sequence[str] | None = None,
                        target_pieces: Sequence[str] | None = None) -> set[Link]:
    """One-to-one word links ``(source word index, target word index)`` from an attention matrix.

    Source: Luong et al. (2015), section 5.4 — one-to-one alignments: for each target word,
    the source word with the highest alignment weight. ``weights`` is ``target x source``
    (numpy array or torch tensor). With ``source_pieces`` / ``target_pieces`` (the
    SentencePiece pieces of the two sentences; a piece starting with "▁" begins a new word,
    :func:`piece_word_ids`) the weights are first summed over the pieces of each word, on the
    target side (rows) and on the source side (columns); then every target word is linked to
    the source word with the largest summed weight (ties: the first). So every target word has
    exactly one link, and indices are word indices, as in the gold Pharaoh ``i-j`` links
    (``i`` source, ``j`` target). Without pieces, each row and column is its own word (token
    positions).

    The matrix may be larger than the pieces: rows beyond ``target_pieces`` (the end-of-sentence
    step) are ignored, and so are columns beyond ``source_pieces`` (the end-of-sentence column
    is not a word; the argmax is over the words only). A sentence with no target or no
    source piece has no link.

    Raises:
        ValueError: ``weights`` is not 2-D, or smaller than the pieces.
    """
    if hasattr(weights, "detach"):  # torch tensor, any device or dtype
        weights = weights.detach().float().cpu().numpy()
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 2:
        raise ValueError(f"attention weights must be 2-D (target x source), got shape {w.shape}")
    rows, cols = w.shape
    n_tgt = rows if target_pieces is None else len(target_pieces)
    n_src = cols if source_pieces is None else len(source_pieces)
    if n_tgt > rows or n_src > cols:
        raise ValueError(f"attention weights of shape {w.shape} for {n_tgt} target and "
                         f"{n_src} source pieces")
    if n_tgt == 0 or n_src == 0:
        return set()
    tgt_ids = np.arange(n_tgt) if target_pieces is None else np.asarray(piece_word_ids(target_pieces))
    src_ids = np.arange(n_src) if source_pieces is None else np.asarray(piece_word_ids(source_pieces))
    # word ids are contiguous and increasing: sum each run of pieces with reduceat
    tgt_starts = np.flatnonzero(np.diff(tgt_ids, prepend=-1))
    src_starts = np.flatnonzero(np.diff(src_ids, prepend=-1))
    words = np.add.reduceat(np.add.reduceat(w[:n_tgt, :n_src], tgt_starts, axis=0), src_starts, axis=1)
    best = np.argmax(words, axis=1)
    return {(int(s), t) for t, s in enumerate(best.tolist())}


def filter_to_covered(predicted: Iterable[Link], sure: Iterable[Link]) -> set[Link]:
    """The predicted links whose target word has at least one sure (gold) link."""
    covered = {t for _, t in sure}
    return {(s, t) for s, t in predicted if t in covered}


def aer(predicted: Sequence[Iterable[Link]], sure: Sequence[Iterable[Link]],
        possible: Sequence[Iterable[Link]] | None = None, *,
        restrict_to_covered: bool = False) -> float:
    """Corpus alignment error rate, in [0, 1] (Och & Ney 2003, section 5).

    ``AER = 1 - (|A∩S| + |A∩P|) / (|A| + |S|)`` with the counts summed over sentences; A are
    the predicted links, S the sure and P the possible gold links, one set of
    ``(source index, target index)`` per sentence. P is taken as ``possible ∪ S`` (the
    definition needs P ⊇ S) and defaults to S, which makes AER = 1 - F1(A, S).

    Partial gold: with ``restrict_to_covered=True``, predicted links whose target word has no
    sure link in that sentence are dropped first (:func:`filter_to_covered`), so only target
    words the gold annotates are judged. Use it for the default corpus, whose Strong's-number
    gold covers only about 46% of the KJV words: an uncovered word is "unannotated", not
    "unaligned", and without the restriction every link on it would count as an error.
    Leave it off for fully annotated gold, where a word without links is a real null.

    Raises:
        ValueError: the lists' lengths differ, or |A| + |S| = 0 over the corpus.
    """
    n = len(predicted)
    if len(sure) != n or (possible is not None and len(possible) != n):
        raise ValueError("predicted, sure and possible must have one entry per sentence")
    a_s = a_p = size_a = size_s = 0
    for k in range(n):
        s_set = set(sure[k])
        p_set = s_set | (set(possible[k]) if possible is not None else set())
        a_set = set(predicted[k])
        if restrict_to_covered:
            a_set = filter_to_covered(a_set, s_set)
        a_s += len(a_set & s_set)
        a_p += len(a_set & p_set)
        size_a += len(a_set)
        size_s += len(s_set)
    if size_a + size_s == 0:
        raise ValueError("AER is undefined: no predicted and no sure links")
    return 1.0 - (a_s + a_p) / (size_a + size_s)

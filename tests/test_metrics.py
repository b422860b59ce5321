"""Tests of flexatt.metrics: BLEU variants, chrF, significance, RIBES against a transcription of
RIBES.py, AER and word alignments."""

from __future__ import annotations

import math
import os
import random
import re
from collections import Counter

import numpy as np
import pytest
import torch

from flexatt.metrics import (
    BOOTSTRAP_SEED,
    aer,
    attention_alignment,
    bleu_by_length,
    bleu_significance,
    corpus_bleu,
    corpus_chrf,
    corpus_ribes,
    filter_to_covered,
    moses_tokenize,
    piece_word_ids,
    sentence_ribes,
    tokenized_bleu,
)

# --------------------------------------------------------------------------------------------
# Reference implementations used as oracles (slow, literal)


def multi_bleu(hypotheses: list[str], ref_streams: list[list[str | None]]) -> float:
    """Moses multi-bleu.perl, transcribed: whitespace tokens, clipped counts, closest ref length
    (ties: shorter), no smoothing (log 0 -> -9999999999), BLEU x 100."""
    correct, total = [0] * 5, [0] * 5
    hyp_len = ref_len = 0
    for i, hyp in enumerate(hypotheses):
        words = hyp.split()
        refs = [s[i].split() for s in ref_streams if s[i] is not None]
        closest = None
        for ref in refs:
            d = abs(len(words) - len(ref))
            if closest is None or d < closest[0] or (d == closest[0] and len(ref) < closest[1]):
                closest = (d, len(ref))
        hyp_len += len(words)
        ref_len += closest[1]
        for n in range(1, 5):
            h = Counter(tuple(words[k:k + n]) for k in range(len(words) - n + 1))
            best: Counter = Counter()
            for ref in refs:
                r = Counter(tuple(ref[k:k + n]) for k in range(len(ref) - n + 1))
                for g, c in r.items():
                    best[g] = max(best[g], c)
            total[n] += sum(h.values())
            correct[n] += sum(min(c, best[g]) for g, c in h.items())
    if ref_len == 0 or hyp_len == 0:  # (multi-bleu.perl prints 0, or dies dividing by 0)
        return 0.0
    bp = math.exp(1 - ref_len / hyp_len) if hyp_len < ref_len else 1.0

    def my_log(x: float) -> float:
        return math.log(x) if x else -9999999999

    logs = [my_log(correct[n] / total[n] if total[n] else 0) for n in range(1, 5)]
    return 100 * bp * math.exp(sum(logs) / 4)


def _official_words(line: str, case: bool = False) -> list[str]:
    # RIBES.py 1.03.1 Corpus: strip, collapse whitespace, lowercase unless -c, [] for blank.
    line = re.sub(r"\s+", " ", line.strip())
    if not case:
        line = line.lower()
    return [] if len(line) == 0 else line.split(" ")


def _overlapping_count(pattern: str, string: str) -> int:
    count, pos = 0, string.find(pattern)
    while pos > -1:
        count += 1
        string = string[pos + 1:]
        pos = string.find(pattern)
    return count


def official_kendall(ref: list[str], hyp: list[str]) -> tuple[float, float, float] | None:
    """RIBES.py 1.03.1 ``kendall()`` transcribed step by step (None: empty reference, -z)."""
    if len(ref) == 0:
        return None
    if len(hyp) == 0:
        return (0.0, 0.0, 0.0)
    bp = min(1.0, math.exp(1.0 - 1.0 * len(ref) / len(hyp)))
    intlist = []
    worddict: dict[str, int] = {}
    for w in ref + hyp:
        worddict.setdefault(w, len(worddict))
    mapped_ref = "".join(chr(worddict[w] + 0x4E00) for w in ref)
    mapped_hyp = "".join(chr(worddict[w] + 0x4E00) for w in hyp)
    for i in range(len(hyp)):
        if hyp[i] not in ref:
            pass
        elif ref.count(hyp[i]) == 1 and hyp.count(hyp[i]) == 1:
            intlist.append(ref.index(hyp[i]))
        else:
            for window in range(1, max(i + 1, len(hyp) - i + 1)):
                if window <= i:
                    ngram = mapped_hyp[i - window:i + 1]
                    if _overlapping_count(ngram, mapped_ref) == 1 and \
                            _overlapping_count(ngram, mapped_hyp) == 1:
                        intlist.append(mapped_ref.index(ngram) + len(ngram) - 1)
                        break
                if i + window < len(hyp):
                    ngram = mapped_hyp[i:i + window + 1]
                    if _overlapping_count(ngram, mapped_ref) == 1 and \
                            _overlapping_count(ngram, mapped_hyp) == 1:
                        intlist.append(mapped_ref.index(ngram))
                        break
    n = len(intlist)
    if n == 1 and len(ref) == 1:
        return (1.0, 1.0 / len(hyp), bp)
    elif n < 2:
        return (0.0, 0.0, bp)
    ascending = 0.0
    for i in range(len(intlist) - 1):
        for j in range(i + 1, len(intlist)):
            if intlist[i] < intlist[j]:
                ascending += 1
    nkt = ascending / ((n * (n - 1)) / 2)
    precision = 1.0 * n / len(hyp)
    return (nkt, precision, bp)


def official_corpus_ribes(hyps: list[str], ref_streams: list[list[str]], alpha: float = 0.25,
                          beta: float = 0.10) -> float:
    """RIBES.py 1.03.1 ``RIBESevaluator.eval`` with ``-z`` (empty references ignored)."""
    acc, valid = 0.0, 0
    for i in range(len(hyps)):
        best = -1.0
        for stream in ref_streams:
            res = official_kendall(_official_words(stream[i]), _official_words(hyps[i]))
            if res is not None:
                nkt, precision, bp = res
                best = max(best, nkt * (precision ** alpha) * (bp ** beta))
        if best > -1.0:
            valid += 1
            acc += best
    return acc / valid


def _random_sentence(rng: random.Random, vocab: str, lo: int, hi: int) -> str:
    return " ".join(rng.choice(vocab) for _ in range(rng.randint(lo, hi)))


# --------------------------------------------------------------------------------------------
# BLEU


def test_corpus_bleu_signature_and_perfect_score():
    score, sig = corpus_bleu(["The cat sat on the mat."], [["The cat sat on the mat."]])
    assert score == pytest.approx(100.0)
    assert "tok:13a" in sig and "case:mixed" in sig and "nrefs:1" in sig


def test_corpus_bleu_empty_secondary_reference_is_no_reference():
    hyps = ["the cat sat on the mat today", "a dog barked at the moon all night long"]
    ref1 = ["the cat sat on the mat today and yesterday and the day before it",
            "a dog barked at the moon all night long"]
    single, _ = corpus_bleu(hyps, [ref1])
    with_blank, sig = corpus_bleu(hyps, [ref1, ["", "  "]])
    assert with_blank == pytest.approx(single)
    assert single < 90  # the brevity penalty of the first sentence is kept
    # a real second reference does count
    better, sig2 = corpus_bleu(hyps, [ref1, ["the cat sat on the mat today", ""]])
    assert better > single and "nrefs:var" in sig2
    # one stream may be given as a plain list of strings
    assert corpus_bleu(hyps, ref1)[0] == pytest.approx(single)


def test_corpus_bleu_rejects_length_mismatch():
    with pytest.raises(ValueError, match="stream 1"):
        corpus_bleu(["a b", "c d"], [["a b", "c d"], ["a b"]])


def test_tokenized_bleu_matches_multi_bleu_perl_transcription():
    rng = random.Random(7)
    for trial in range(30):
        n = rng.randint(1, 8)
        hyps = [_random_sentence(rng, "abcdefg", 0 if trial % 5 == 0 else 1, 14) for _ in range(n)]
        ref1 = [_random_sentence(rng, "abcdefg", 1, 14) for _ in range(n)]
        ref2 = [_random_sentence(rng, "abcdefg", 1, 14) if rng.random() < 0.6 else "" for _ in range(n)]
        got, sig = tokenized_bleu(hyps, [ref1, ref2])
        want = multi_bleu(hyps, [ref1, [r or None for r in ref2]])
        assert got == pytest.approx(want, abs=1e-9), (hyps, ref1, ref2)
        assert tokenized_bleu(hyps, [ref1])[0] == pytest.approx(multi_bleu(hyps, [ref1]), abs=1e-9)
    assert "tok:none" in sig and "smooth:none" in sig


def test_tokenized_bleu_hand_cases():
    # no tokenisation: "mat." is one token, so it does not match "mat"; case-sensitive
    hyp, ref = ["the cat sat on the mat ."], ["the cat sat on the mat ."]
    assert tokenized_bleu(hyp, [ref])[0] == pytest.approx(100.0)
    glued = ["the cat sat on the mat."]
    assert tokenized_bleu(glued, [ref])[0] == pytest.approx(multi_bleu(glued, [ref]))
    assert tokenized_bleu(glued, [ref])[0] < 100
    assert tokenized_bleu(["The cat sat on the mat ."], [ref])[0] < 100
    # no 4-gram match -> 0 (no smoothing), where sacrebleu's default would smooth
    assert tokenized_bleu(["a b c x d e f"], [["a b c y d e f"]])[0] == 0.0
    assert corpus_bleu(["a b c x d e f"], [["a b c y d e f"]])[0] > 0.0


def test_bleu_by_length_buckets():
    hyps = ["a b c d", "a b x d", "e f g h i", "p q r s", "p q r s t u"]
    refs = ["a b c d", "a b c d", "e f g h i", "p q r s", "p q r s t v"]
    lengths = [3, 10, 11, 50, 51]
    rows = bleu_by_length(hyps, refs, lengths)
    assert [r["bucket"] for r in rows] == ["1-10", "11-20", "21-30", "31-40", "41-50", "51+"]
    assert [r["sentences"] for r in rows] == [2, 1, 0, 0, 1, 1]
    assert rows[0]["bleu"] == pytest.approx(corpus_bleu(hyps[:2], [refs[:2]])[0])
    assert rows[1]["bleu"] == pytest.approx(100.0)
    assert rows[2]["bleu"] is None
    assert rows[5]["bleu"] == pytest.approx(corpus_bleu(hyps[4:], [refs[4:]])[0])
    tok = bleu_by_length(hyps, [refs], lengths, buckets=(5, 60), tokenized=True)
    assert [(r["bucket"], r["sentences"]) for r in tok] == [("1-5", 1), ("6-60", 4), ("61+", 0)]
    with pytest.raises(ValueError):
        bleu_by_length(hyps, refs, lengths[:-1])
    with pytest.raises(ValueError):
        bleu_by_length(hyps, refs, lengths, buckets=(20, 10))


# --------------------------------------------------------------------------------------------
# RIBES


def test_ribes_identical_and_reversed():
    assert sentence_ribes("a b c d e", "a b c d e") == pytest.approx(1.0)
    # fully reversed, distinct words: no ascending pair -> NKT 0
    assert sentence_ribes("e d c b a", "a b c d e") == 0.0
    # one adjacent swap: 5 of 6 pairs ascending
    assert sentence_ribes("b a c d", "a b c d") == pytest.approx(5 / 6)


def test_ribes_precision_and_brevity_penalty():
    # "x" is not in the reference: P = 4/5, NKT 1, BP 1
    assert sentence_ribes("a b x c d", "a b c d") == pytest.approx((4 / 5) ** 0.25)
    # half as long: BP = exp(1 - 4/2)
    assert sentence_ribes("a b", "a b c d") == pytest.approx(math.exp(-1) ** 0.10)


def test_ribes_context_rule_left_before_right():
    # hyp  a b a c d e   ref  d a c e b a
    # h[0]=a (twice in ref): no n-gram around it is unique in the reference -> unaligned;
    # h[2]=a: the left bigram "b a" (ref 4-5) is tried before the right one "a c" (ref 1-2)
    #   -> position 5; alignment [4, 5, 2, 0, 3]: 3 of 10 pairs ascending (right-first: 4).
    assert sentence_ribes("a b a c d e", "d a c e b a") == pytest.approx(0.3 * (5 / 6) ** 0.25)


def test_ribes_context_rule_can_align_two_words_to_one_position():
    # h[0]=the -> right bigram "the dog" (ref 3); h[3]=the -> left bigram "saw the" (ref 3):
    # alignment [3, 4, 2, 3, 1]; ties are not ascending: 2 of 10 pairs.
    assert sentence_ribes("the dog saw the cat", "the cat saw the dog") == pytest.approx(0.2)


def test_ribes_special_cases():
    assert sentence_ribes("", "a b c") == 0.0
    assert sentence_ribes("   ", "a b c") == 0.0
    assert sentence_ribes("a", "a") == pytest.approx(1.0)
    assert sentence_ribes("a", "a b") == 0.0  # a single aligned word gives no rank correlation
    assert sentence_ribes("a x", "a") == pytest.approx(0.5 ** 0.25)  # n = 1, |ref| = 1
    assert sentence_ribes("a a", "a") == 0.0  # repeated word, no unique context
    assert sentence_ribes("The  Cat\tsat", "the cat sat") == pytest.approx(1.0)  # lowercased
    assert sentence_ribes("The Cat sat", "the cat sat", case_sensitive=True) == 0.0
    with pytest.raises(ValueError):
        sentence_ribes("a b", "  ")


def test_ribes_matches_official_transcription_on_random_pairs():
    rng = random.Random(20240601)
    hyps, refs, refs2 = [], [], []
    for k in range(400):
        vocab = "abcdefgh"[: rng.randint(2, 8)]
        hyp = _random_sentence(rng, vocab, 0 if k % 20 == 0 else 1, 14)
        ref = _random_sentence(rng, vocab, 1, 14)
        if k % 3 == 0:  # a permuted, partly edited reference: many aligned words
            words = hyp.split() or ["a"]
            rng.shuffle(words)
            ref = " ".join(w if rng.random() < 0.8 else rng.choice(vocab) for w in words)
        want = official_kendall(_official_words(ref), _official_words(hyp))
        nkt, precision, bp = want
        want_score = nkt * precision ** 0.25 * bp ** 0.10
        assert sentence_ribes(hyp, ref) == pytest.approx(want_score, abs=1e-9), (hyp, ref)
        hyps.append(hyp)
        refs.append(ref)
        refs2.append(_random_sentence(rng, vocab, 1, 14) if rng.random() < 0.5 else "")
    assert corpus_ribes(hyps, refs) == pytest.approx(official_corpus_ribes(hyps, [refs]), abs=1e-9)
    assert corpus_ribes(hyps, [refs, refs2]) == pytest.approx(
        official_corpus_ribes(hyps, [refs, refs2]), abs=1e-9)
    assert corpus_ribes(hyps, [refs], alpha=0.5, beta=0.3) == pytest.approx(
        official_corpus_ribes(hyps, [refs], alpha=0.5, beta=0.3), abs=1e-9)


def test_corpus_ribes_is_mean_of_sentences_and_checks_input():
    hyps, refs = ["a b c", "c b a", "a c b"], ["a b c", "a b c", "a b c"]
    assert corpus_ribes(hyps, refs) == pytest.approx(
        sum(sentence_ribes(h, r) for h, r in zip(hyps, refs)) / 3)
    with pytest.raises(ValueError):
        corpus_ribes(hyps, ["a b c", "", "a b c"])
    with pytest.raises(ValueError):
        corpus_ribes(hyps, refs[:2])


# --------------------------------------------------------------------------------------------
# Alignments


def test_aer_hand_cases():
    a = [{(0, 0), (1, 1), (2, 1)}]
    s = [{(0, 0), (1, 1)}]
    assert aer(a, s) == pytest.approx(1 - 4 / 5)
    assert aer(a, s, [{(2, 1)}]) == pytest.approx(0.0)  # P = S + possible
    assert aer(s, s) == 0.0
    assert aer([set()], s) == 1.0
    # corpus-level sums, not a mean of sentence AERs
    a2, s2 = [{(0, 0)}, {(0, 0), (1, 1), (2, 2)}], [{(1, 0)}, {(0, 0), (1, 1), (2, 2)}]
    assert aer(a2, s2) == pytest.approx(1 - 6 / 8)
    with pytest.raises(ValueError):
        aer([set()], [set()])
    with pytest.raises(ValueError):
        aer(a2, s)


def test_aer_restricted_to_covered_target_words():
    sure = [{(0, 0), (2, 2)}]  # target word 1 has no gold link (not annotated)
    pred = [{(0, 0), (1, 1), (2, 2)}]
    assert aer(pred, sure) == pytest.approx(1 - 4 / 5)
    assert aer(pred, sure, restrict_to_covered=True) == 0.0
    assert filter_to_covered(pred[0], sure[0]) == {(0, 0), (2, 2)}
    # a wrong link on a covered word still counts
    assert aer([{(1, 0), (2, 2)}], sure, restrict_to_covered=True) == pytest.approx(1 - 2 / 4)


def test_piece_word_ids():
    assert piece_word_ids(["▁The", "▁hous", "es", "▁.", "▁", "("]) == [0, 1, 1, 2, 3, 3]
    assert piece_word_ids(["ab", "c", "▁d"]) == [0, 0, 1]
    assert piece_word_ids([]) == []


def test_attention_alignment_positions_and_words():
    w = np.array([[0.7, 0.2, 0.1],
                  [0.1, 0.1, 0.8],
                  [0.2, 0.5, 0.3]])
    assert attention_alignment(w) == {(0, 0), (2, 1), (1, 2)}
    assert attention_alignment(torch.tensor(w, dtype=torch.bfloat16)) == {(0, 0), (2, 1), (1, 2)}
    # source pieces: word 0 = ▁un+der, word 1 = ▁way; target pieces: word 0 = ▁go+ing.
    # Summed per word: target word 0 = rows 0+1 -> (0.7+0.2 + 0.1+0.1, 0.1+0.8) = (1.1, 0.9);
    # target word 1 = row 2 -> (0.2+0.5, 0.3) = (0.7, 0.3). One link per target word.
    links = attention_alignment(w, ["▁un", "der", "▁way"], ["▁go", "ing", "▁on"])
    assert links == {(0, 0), (0, 1)}


def test_attention_alignment_extra_rows_and_columns():
    # 2 target pieces + EOS row, 2 source pieces + EOS column. The EOS column is not a word:
    # target word 0 attends most to EOS, and is linked to the best *word* (source 1).
    w = torch.tensor([[0.1, 0.2, 0.7],
                      [0.6, 0.3, 0.1],
                      [0.0, 0.0, 1.0]])
    assert attention_alignment(w, ["▁a", "▁b"], ["▁x", "▁y"]) == {(1, 0), (0, 1)}
    assert attention_alignment(w, [], ["▁x"]) == set()
    assert attention_alignment(w, ["▁a"], []) == set()
    with pytest.raises(ValueError):
        attention_alignment(w, ["▁a", "▁b", "▁c", "▁d"], ["▁x"])
    with pytest.raises(ValueError):
        attention_alignment(np.zeros(3))


def test_attention_alignment_sums_pieces_where_piece_argmax_differs():
    # source words: 0 = ▁the, 1 = ▁un+believ+able (3 pieces), 2 = ▁story; EOS column last.
    # target words: 0 = ▁la, 1 = ▁his+toria (2 pieces), 2 = ▁increíble; EOS row last.
    src = ["▁the", "▁un", "believ", "able", "▁story"]
    tgt = ["▁la", "▁his", "toria", "▁increíble"]
    w = np.array([
        # the   un    believ able  story  EOS
        [0.50, 0.00, 0.00, 0.00, 0.10, 0.40],  # ▁la
        [0.05, 0.20, 0.00, 0.00, 0.45, 0.30],  # ▁his
        [0.00, 0.30, 0.25, 0.00, 0.15, 0.30],  # toria
        [0.36, 0.20, 0.20, 0.20, 0.00, 0.04],  # ▁increíble
        [0.00, 0.00, 0.00, 0.00, 0.00, 1.00],  # EOS
    ])
    # piece level (the old rule): ▁la->the, ▁his->story, toria->un, ▁increíble->the
    piece_links = {(0, 0), (2, 1), (1, 1), (0, 2)}
    # word level: ▁his+toria sums to (0.05, 0.75, 0.60) -> unbelievable (not story);
    # ▁increíble: (0.36, 0.60, 0.00) -> unbelievable (not the)
    golden = {(0, 0), (1, 1), (1, 2)}
    links = attention_alignment(w, src, tgt)
    assert links == golden and links != piece_links
    assert sorted(t for _, t in links) == [0, 1, 2]  # exactly one link per target word
    assert attention_alignment(torch.tensor(w), src, tgt) == golden


def test_attention_alignment_one_link_per_covered_target_word():
    rng = np.random.default_rng(3)
    for _ in range(50):
        n_src_words, n_tgt_words = rng.integers(1, 8, size=2)
        src = [p for _ in range(n_src_words) for p in ["▁w"] + ["x"] * int(rng.integers(0, 3))]
        tgt = [p for _ in range(n_tgt_words) for p in ["▁v"] + ["y"] * int(rng.integers(0, 3))]
        w = rng.dirichlet(np.ones(len(src) + 1), size=len(tgt) + 1)  # + EOS column and row
        links = attention_alignment(w, src, tgt)
        assert sorted(t for _, t in links) == list(range(n_tgt_words))
        assert all(0 <= s < n_src_words for s, _ in links)
        # gold covering only the even target words: each keeps exactly its one link
        sure = {(0, t) for t in range(0, n_tgt_words, 2)}
        kept = filter_to_covered(links, sure)
        assert sorted(t for _, t in kept) == list(range(0, n_tgt_words, 2))


def test_attention_alignment_links_follow_the_gold_pharaoh_convention():
    # gold "i-j": source word i, target word j -- as flexatt.decoding.alignments.read_gold reads it
    gold = [{tuple(map(int, link.split("-"))) for link in "0-1 1-0".split()}]
    w = np.array([[0.1, 0.9], [0.8, 0.2]])  # target 0 -> source 1, target 1 -> source 0
    assert aer([attention_alignment(w, ["▁a", "▁b"], ["▁x", "▁y"])], gold) == 0.0


# --------------------------------------------------------------------------------------------
# Moses-tokenised BLEU, chrF


def test_moses_tokenize_differs_from_13a():
    from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

    line = "I don't know, it's well-known & <true>."
    assert moses_tokenize([line], "en") == ["I don 't know , it 's well-known & < true > ."]
    assert Tokenizer13a()(line) == "I don't know , it's well-known & < true > ."
    assert moses_tokenize(["Mr. Smith came."], "en") == ["Mr. Smith came ."]  # non-breaking prefix
    assert moses_tokenize(["", "  a  b "], "en") == ["", "a b"]
    with pytest.raises(ValueError, match="language"):
        moses_tokenize(["a"], "")


def test_tokenized_bleu_on_moses_tokens_differs_from_bleu():
    # Moses splits "don't" into "don 't" and "it's" into "it 's"; 13a keeps them whole.
    # The hypothesis has "do" where the reference has "don't". 13a: 11 tokens each side,
    # precisions 10/11, 8/10, 7/9, 6/8, no brevity penalty -> 80.71. Moses: 13 hypothesis and
    # 14 reference tokens, precisions 12/13, 10/12, 9/11, 8/10, BP exp(1 - 14/13) -> 78.00.
    hyps = ["I do know it's here, and I don't care."]
    refs = ["I don't know it's here, and I don't care."]
    bleu = corpus_bleu(hyps, [refs])[0]
    hyp_tok, ref_tok = moses_tokenize(hyps, "en"), moses_tokenize(refs, "en")
    assert hyp_tok == ["I do know it 's here , and I don 't care ."]
    tok_bleu = tokenized_bleu(hyp_tok, [ref_tok])[0]
    # tokenized_bleu scores the Moses tokens as they are: exactly multi-bleu.perl on them
    assert tok_bleu == pytest.approx(multi_bleu(hyp_tok, [ref_tok]), abs=1e-9)
    assert tok_bleu == pytest.approx(multi_bleu(["I do know it 's here , and I don 't care ."],
                                                [["I don 't know it 's here , and I don 't care ."]]))
    assert bleu == pytest.approx(multi_bleu(["I do know it's here , and I don't care ."],
                                            [["I don't know it's here , and I don't care ."]]))
    assert tok_bleu != pytest.approx(bleu, abs=0.5)
    assert round(tok_bleu, 2) == 78.00 and round(bleu, 2) == 80.71


#: sacrebleu 2.6.0 ``CHRF().corpus_score`` of the three sentences below.
CHRF_GOLDEN = 67.0007


def test_corpus_chrf_golden_against_sacrebleu():
    from sacrebleu.metrics import CHRF

    hyps = ["The cat sat on the mat.", "A dog barked at the moon all night.", "Hello"]
    refs = ["The cat is sitting on the mat.", "The dog barked at the moon all night long.", "Hello!"]
    score, sig = corpus_chrf(hyps, [refs])
    assert score == pytest.approx(CHRF().corpus_score(hyps, [refs]).score, abs=1e-12)
    assert score == pytest.approx(CHRF_GOLDEN, abs=5e-3)
    assert sig.startswith("nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no")
    assert corpus_chrf(hyps, refs)[0] == pytest.approx(score)  # one stream as a plain list
    assert corpus_chrf(hyps, [refs, ["", " ", ""]])[0] == pytest.approx(score)  # blank: no reference
    assert corpus_chrf(["x"], [["x"]])[0] == pytest.approx(100.0)
    with pytest.raises(ValueError):
        corpus_chrf(hyps, [refs[:2]])


# --------------------------------------------------------------------------------------------
# Significance (sacrebleu's paired bootstrap resampling)


def _systems(n: int = 150) -> tuple[list[str], dict[str, list[str]]]:
    """A reference and four systems of decreasing quality (word-substitution noise)."""
    rng = random.Random(11)
    vocab = [f"w{k}" for k in range(40)]
    refs = [" ".join(rng.choice(vocab) for _ in range(rng.randint(5, 15))) for _ in range(n)]

    def noisy(p: float) -> list[str]:
        return [" ".join(w if rng.random() > p else rng.choice(vocab) for w in r.split()) for r in refs]

    systems = {"global": noisy(0.30), "good": noisy(0.10), "close": noisy(0.30), "bad": noisy(0.60)}
    systems["good_tau"] = list(systems["good"])  # τ row that decodes exactly as its base
    return refs, systems


def test_bleu_significance_reproduces_sacrebleu_paired_test(monkeypatch):
    from sacrebleu.metrics import BLEU
    from sacrebleu.significance import PairedTest

    refs, systems = _systems()
    against = {"global": None, "good": "global", "close": "global", "bad": "global",
               "good_tau": "good"}
    got = bleu_significance(systems, refs, against, seed=777)
    assert list(got) == list(systems)

    monkeypatch.setenv("SACREBLEU_SEED", "777")
    _, scores = PairedTest([("global", systems["global"]), ("good", systems["good"]),
                            ("close", systems["close"]), ("bad", systems["bad"])],
                           {"BLEU": BLEU()}, [refs], test_type="bs", n_samples=1000)()
    for name, res in zip(scores["System"], scores["BLEU"]):
        # centred on the observed corpus BLEU, with sacrebleu's half-width (not on the resamples' mean)
        observed = corpus_bleu(systems[name], refs)[0]
        assert res.score == pytest.approx(observed) and res.mean != pytest.approx(observed, abs=1e-6)
        assert got[name]["bleu_ci"] == [round(observed - res.ci, 2), round(observed + res.ci, 2)]
        if name == "global":
            assert got[name]["p_value"] is None and got[name]["p_value_against"] is None
        else:
            assert got[name]["p_value"] == round(res.p_value, 4)
            assert got[name]["p_value_against"] == "global"
    assert got["good"]["p_value"] < 0.05 and got["bad"]["p_value"] < 0.05
    assert got["close"]["p_value"] > 0.05  # same noise level as the baseline
    # a τ row identical to its base: p = 1 (sacrebleu alone would say 1/1001), the same interval
    assert got["good_tau"] == {"bleu_ci": got["good"]["bleu_ci"], "p_value": 1.0,
                               "p_value_against": "good"}


def test_bleu_significance_is_seeded_and_restores_the_environment(monkeypatch):
    refs, systems = _systems(60)
    against = {"global": None, "good": "global", "close": "global", "bad": "global",
               "good_tau": "good"}
    monkeypatch.delenv("SACREBLEU_SEED", raising=False)
    first = bleu_significance(systems, refs, against, seed=5)
    assert "SACREBLEU_SEED" not in os.environ
    assert bleu_significance(systems, refs, against, seed=5) == first
    assert bleu_significance(systems, refs, against, seed=6) != first
    # the default is sacrebleu's own seed, whatever the environment says
    monkeypatch.setenv("SACREBLEU_SEED", "none")
    default = bleu_significance(systems, refs, against)
    assert os.environ["SACREBLEU_SEED"] == "none"
    assert default == bleu_significance(systems, refs, against, seed=BOOTSTRAP_SEED) != first
    # a system's interval does not depend on its role (baseline of a group, or compared)
    only = bleu_significance({"good": systems["good"]}, refs, {"good": None}, seed=5)
    assert only["good"]["bleu_ci"] == first["good"]["bleu_ci"]


def test_bleu_significance_refuses_bad_input():
    refs, systems = _systems(10)
    ok = {"global": None, "good": "global", "close": "global", "bad": "global", "good_tau": "good"}
    with pytest.raises(ValueError, match="missing"):
        bleu_significance(systems, refs, {k: v for k, v in ok.items() if k != "bad"})
    with pytest.raises(ValueError, match="another system"):
        bleu_significance(systems, refs, {**ok, "bad": "nope"})
    with pytest.raises(ValueError, match="another system"):
        bleu_significance(systems, refs, {**ok, "bad": "bad"})
    with pytest.raises(ValueError, match="seed"):
        bleu_significance(systems, refs, ok, seed=0)
    with pytest.raises(ValueError, match="n_samples"):
        bleu_significance(systems, refs, ok, n_samples=0)
    with pytest.raises(ValueError, match="hypotheses"):
        bleu_significance({**systems, "bad": systems["bad"][:-1]}, refs, ok)
    with pytest.raises(ValueError, match="stream"):
        bleu_significance(systems, refs[:-1], ok)
    with pytest.raises(ValueError, match="no systems"):
        bleu_significance({}, refs, {})


def test_bleu_significance_equal_scores_are_not_significant():
    # two different systems that both score BLEU 0 on every resample: sacrebleu alone would
    # report p = 1/1001 ("significant") for an observed difference of exactly 0
    refs = [f"a{k} b{k} c{k} d{k}" for k in range(30)]
    systems = {"base": [f"x{k} y{k}" for k in range(30)], "other": [f"p{k} q{k} r{k}" for k in range(30)]}
    got = bleu_significance(systems, refs, {"base": None, "other": "base"}, seed=3)
    assert got["other"] == {"bleu_ci": [0.0, 0.0], "p_value": 1.0, "p_value_against": "base"}

#!/usr/bin/env python3
"""Rebuild the default corpus: Spanish Reina-Valera 1909 -> English verse pairs, gold alignments.

Sources are Debian's SWORD Bible modules (all public domain)::

    apt-get install libsword-utils sword-text-sparv sword-text-kjv sword-text-web
    python scripts/build_bible_corpus.py --out-dir data/bible

``mod2imp MODULE`` dumps a module as one ``$$$Book C:V`` line per entry followed by the entry's
OSIS XML. This script reads the three dumps (by calling ``mod2imp``, or from files given with
``--es-imp/--kjv-imp/--web-imp``), and writes into ``--out-dir``:

``bible.es-en.tsv.gz``
    header ``key<TAB>es<TAB>en<TAB>en_web``, then one verse pair per line in canonical order:
    the RV1909 text, the King James Version (KJV) and the World English Bible (WEB; empty when
    the WEB has no usable text for the key).
``bible.es-en.kjv.align.gz``
    one line per TSV data row: Pharaoh links ``i-j`` between ``es`` token i and ``en`` token j,
    derived from Strong's numbers (see :func:`strongs_links`).
``build_report.json``
    what was cut, re-keyed, merged or dropped, and why (also printed to stderr).

Tokens are the whitespace tokens of the cleaned text (``text.split(" ")``); punctuation stays
attached to its word. Both gzip files are written with ``mtime=0`` so that a rerun gives
identical bytes. Standard library only.

Cleaning (see :func:`parse_osis`): the text inside ``<w>``, ``<transChange>``, ``<q>``,
``<divineName>`` … is kept; ``<note>`` (with its text, nested notes included), non-canonical
``<title>`` and ``<speaker>`` elements are dropped, as are milestones and other empty markers.
Canonical psalm titles are kept: the RV1909 prints them as the start of verse 1, the English
modules mark them as ``<title canonical="true">`` in verse 1, so dropping them would leave the
sides unequal. Chapter 0 / verse 0 entries (introductions) are skipped.

Known traps of these modules and how they are handled:

* 14 Spanish epistles end with a subscription ("Fué escrita de Corinto …") that no English
  version has: cut after the verse's last "Amén." (:func:`cut_subscription`).
* Psalm 119's acrostic letter headings (ALEPH, BETH, …): the KJV marks them as headings, the
  RV1909 prints them as the first word of the verse, the WEB as canonical titles: all removed.
* RV1909 chapter openings are set in capitals ("EN el principio"): the capitalised word is
  re-cased to its usual spelling in the module (:func:`recase_chapter_opening`).
* The RV1909's markup joins about 590 pairs of letter sequences with no space between them:
  two words ("Gracia|sea") are split, a verb and its enclitic ("díjo|le") joined
  (:class:`SpanishGlue`). A removed footnote between two words leaves a space.
* The Spanish module stores some verses under shifted keys (Hebrew numbering squeezed into KJV
  slots), which leaves empty Spanish verses and slots holding several verses' text. Such regions
  are re-aligned with the KJV by Strong's numbers (:func:`align_verse_runs`): a slot that holds
  exactly one KJV verse is paired under that verse's key ("re-keyed"), a slot holding several
  verses (or verses split differently) becomes a merged range such as ``Job 39:27-40:5``; a
  bead whose Strong's numbers do not agree (Dice < 0.5) is dropped. Shifted text is never
  paired under its slot's key.
* WEB: Matthew 23:13 and 23:14 are swapped (swapped back, checked against the KJV); verses that
  hold only a footnote (Luke 17:36, Acts 8:37, 15:34, 24:7) give an empty ``en_web``; Romans
  16:25-27 are appended to 14:23 (cut there; 16:25-27 get an empty ``en_web``); a glossary
  follows Revelation 22:21 (cut at the end-of-book marker). WEB keys absent from the Spanish
  (the deuterocanon) are ignored. 1 John 5:7 differs in content (the WEB omits the Comma
  Johanneum) and is kept as it is.
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import html
import io
import json
import math
import re
import statistics
import subprocess
import sys
from collections import Counter
from pathlib import Path

DEFAULT_MODULES = {"es": "spaRV1909eb", "kjv": "engKJV2006eb", "web": "engWEB2015eb"}

#: Elements dropped together with their content.
DROPPED_ELEMENTS = frozenset({"note", "title", "speaker"})
#: Elements that mark up running text; any other element separates words.
INLINE_ELEMENTS = frozenset({"w", "transChange", "q", "divineName", "seg", "foreign", "name", "hi"})
#: Characters that are not words: the KJV's paragraph sign.
NON_TEXT_CHARS = str.maketrans("", "", "\u00b6")
#: Characters that open a word (a removed footnote before them needs a space restored).
OPENING_PUNCTUATION = frozenset("“‘([¿¡«")

#: Epistles whose last RV1909 verse ends with a subscription.
SUBSCRIBED_EPISTLES = (
    "Romans", "I Corinthians", "II Corinthians", "Galatians", "Ephesians", "Philippians",
    "Colossians", "I Thessalonians", "II Thessalonians", "I Timothy", "II Timothy", "Titus",
    "Philemon", "Hebrews")
#: Pairs of WEB verses whose texts are swapped.
WEB_SWAPPED_VERSES = (("Matthew 23:13", "Matthew 23:14"),)
#: Psalm 119's acrostic letter names as the RV1909 spells them.
ACROSTIC_LETTERS_ES = frozenset(
    "ALEPH BETH GIMEL DALETH HE VAU ZAIN CHETH TETH JOD CAPH LAMED MEM NUN SAMECH AIN PE "
    "TZADDI COPH RESH SIN TAU".split())

#: Spanish pronouns that attach to a verb ("díjole", "oyéndolo").
CLITICS = frozenset(["me", "te", "se", "le", "lo", "la", "nos", "os", "les", "los", "las"]
                    + [a + b for a in ("me", "te", "se", "nos", "os")
                       for b in ("lo", "la", "los", "las", "le", "les")])
#: One-syllable imperatives that take enclitics ("dalo", "haz-lo").
SHORT_IMPERATIVES = frozenset("da di dí haz he ve pon ten sal ven".split())
#: Accented Spanish function words, which never host an enclitic.
ACCENTED_FUNCTION_WORDS = frozenset(
    "éste ésta éstos éstas ése ésa ésos ésas aquél aquélla aquéllos aquéllas cuánto cuánta "
    "cuántos cuántas qué quién quiénes cómo dónde cuándo cuál cuáles él más sí también aún así "
    "allí aquí acá allá después además jamás demás atrás según".split())
ACCENTED_VOWELS = frozenset("áéíóú")

#: Verse-run alignment: bead shapes (Spanish slots, KJV verses) the dynamic programme may use.
BEAD_SHAPES = ((1, 1), (1, 0), (0, 1), (2, 1), (3, 1), (2, 2), (2, 3), (3, 2)) + tuple(
    (1, k) for k in range(2, 11))
#: Cost of each verse beyond the first on either side of a bead, in unmatched Strong's numbers.
MERGE_PENALTY = 4
#: Cost of leaving a verse without counterpart: below MERGE_PENALTY, so that a verse one side
#: lacks is dropped rather than merged into a neighbour (which would add untranslated text).
INDEL_PENALTY = 3
#: Largest difference between Spanish slots and KJV verses consumed, within a re-aligned run.
MAX_OFFSET = 15
#: A verse is suspect (and re-aligned) when its identity pairing has a lower Strong's Dice.
SUSPECT_DICE = 0.5
#: Verses of context re-aligned on each side of a suspect verse.
WINDOW_MARGIN = 3
#: A re-keyed or merged bead is kept only when its Strong's Dice reaches this value.
MIN_BEAD_DICE = 0.5

KEY_RE = re.compile(r"^(?P<book>.+) (?P<chapter>\d+):(?P<verse>\d+)$")
MARKUP_RE = re.compile(r"<[^>]*>|[^<]+")
TAG_RE = re.compile(r"<\s*(?P<end>/)?\s*(?P<name>[\w:.-]+)(?P<attrs>[^>]*?)(?P<empty>/)?\s*>")
ATTR_RE = re.compile(r"""([\w:.-]+)\s*=\s*(?:"([^"]*)"|'([^']*)')""")
PREVERSE_START_RE = re.compile(r"<div\b(?=[^>]*\bsubType=\"x-preverse\")(?=[^>]*\bsID=)[^>]*>")
BOOK_END_RE = re.compile(r"<div\b(?=[^>]*\btype=\"book\")(?=[^>]*\beID=)[^>]*>")


# --------------------------------------------------------------------------------------------
# Verses: words plus the Strong's-tagged elements that cover them


@dataclasses.dataclass(frozen=True)
class Tag:
    """One ``<w>`` element: its Strong's numbers and the indices of the words it covers."""

    numbers: tuple[str, ...]
    tokens: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class Verse:
    """A cleaned verse: whitespace tokens (no empty token, no whitespace inside one) and tags."""

    words: tuple[str, ...]
    tags: tuple[Tag, ...] = ()

    @property
    def text(self) -> str:
        return " ".join(self.words)

    def numbers(self) -> Counter:
        """Multiset of the Strong's numbers of the tags that still cover a word."""
        return Counter(n for tag in self.tags for n in tag.numbers)

    def keep(self, start: int, stop: int) -> Verse:
        """The verse restricted to ``words[start:stop]``; tags left without words are dropped."""
        tags = []
        for tag in self.tags:
            tokens = tuple(i - start for i in tag.tokens if start <= i < stop)
            if tokens:
                tags.append(Tag(tag.numbers, tokens))
        return Verse(self.words[start:stop], tuple(tags))

    def with_word(self, index: int, word: str) -> Verse:
        """The verse with one word replaced."""
        words = list(self.words)
        words[index] = word
        return Verse(tuple(words), self.tags)


def concat_verses(verses: list[Verse]) -> Verse:
    """Join verses into one (for merged ranges), shifting the tags' word indices."""
    words: list[str] = []
    tags: list[Tag] = []
    for verse in verses:
        tags.extend(Tag(t.numbers, tuple(i + len(words) for i in t.tokens)) for t in verse.tags)
        words.extend(verse.words)
    return Verse(tuple(words), tuple(tags))


def parse_strongs(lemma: str) -> tuple[str, ...]:
    """Strong's numbers of a ``lemma`` attribute, normalised to a letter and four digits.

    Both ``strong:H0853 strong:H0430`` and the RV1909's ``strong:G2424 G5547`` give two numbers.

    >>> parse_strongs("strong:G2424 G5547")
    ('G2424', 'G5547')
    >>> parse_strongs("strong:H853 strong:H0430")
    ('H0853', 'H0430')
    """
    numbers = []
    for item in lemma.split():
        match = re.fullmatch(r"(?:strong:)?([HG])0*(\d+)[a-z]?", item)
        if match:
            numbers.append(f"{match.group(1)}{int(match.group(2)):04d}")
    return tuple(numbers)


# --------------------------------------------------------------------------------------------
# OSIS cleaning


class _VerseBuilder:
    """Accumulates the words of one entry while :func:`parse_osis` walks its markup.

    Text that follows markup with no whitespace in between raises the question whether the two
    pieces are one word. After a word-separating element (a removed note, a milestone, a line
    break) they are two words unless the second piece starts with closing punctuation; after
    inline markup (``</w><transChange>``) the language's ``join_inline(left, right)`` decides,
    ``left`` being the text since the previous markup ("lo" in "Dígan|lo|los": one enclitic).
    """

    def __init__(self, join_inline):
        self.join_inline = join_inline
        self.words: list[str] = []
        self.word_tags: list[set[int]] = []
        self.chars: list[str] = []
        self.tags: set[int] = set()
        self.after_markup = False
        self.after_break = False
        self.glue_sites: list[tuple[str, str, bool]] = []

    def markup(self, separates_words: bool) -> None:
        self.after_markup = True
        self.after_break = self.after_break or separates_words

    def text(self, text: str, open_tags: list[int]) -> None:
        text = text.translate(NON_TEXT_CHARS)
        if not text:
            return
        if self.chars and not text[0].isspace() and self.after_markup:
            left, right = self.chars[-1], re.split(r"\s", text, maxsplit=1)[0]
            if not self._joins(left, right):
                self._end_word()
        self.after_markup = self.after_break = False
        for piece in re.split(r"(\s+)", text):
            if not piece:
                continue
            if piece[0].isspace():
                self._end_word()
            else:
                self.chars.append(piece)
                self.tags.update(open_tags)

    def _joins(self, left: str, right: str) -> bool:
        if self.after_break:
            return not (right[0].isalnum() or right[0] in OPENING_PUNCTUATION) \
                or left[-1] in OPENING_PUNCTUATION
        if not (left[-1].isalpha() and right[0].isalpha()):
            return True
        joined = self.join_inline(left, right)
        self.glue_sites.append((left, right, joined))
        return joined

    def _end_word(self) -> None:
        if self.chars:
            self.words.append("".join(self.chars))
            self.word_tags.append(self.tags)
        self.chars, self.tags = [], set()

    def verse(self, tag_numbers: list[tuple[str, ...]]) -> Verse:
        self._end_word()
        covered: dict[int, list[int]] = {}
        for index, tag_ids in enumerate(self.word_tags):
            for tag_id in tag_ids:
                covered.setdefault(tag_id, []).append(index)
        tags = tuple(Tag(tag_numbers[t], tuple(covered[t])) for t in sorted(covered)
                     if tag_numbers[t])
        return Verse(tuple(self.words), tags)


def join_always(left: str, right: str) -> bool:
    """English inline markup never splits a word (the KJV has ``<w>afrai</w>d``)."""
    return True


def parse_osis(xml: str, join_inline=join_always, keep_canonical_titles: bool = True,
               glue_sites: list | None = None) -> Verse:
    """Clean one entry's OSIS XML into a :class:`Verse`.

    Keeps the text of every element except ``<note>``, ``<speaker>`` and ``<title>`` (dropped
    with their content, at any nesting depth; a canonical title, i.e. a psalm superscription,
    is kept unless ``keep_canonical_titles`` is false). XML entities are unescaped, whitespace
    is collapsed, and the paragraph sign ¶ is removed. A word followed directly by a removed
    footnote and another word gets its space back. ``join_inline(left, right)`` decides whether
    two letter sequences separated only by inline markup form one word. Each token collects the
    Strong's numbers of the ``<w>`` elements its characters come from. If ``glue_sites`` is
    given, every inline decision ``(left, right, joined)`` is appended to it.
    """
    builder = _VerseBuilder(join_inline)
    tag_numbers: list[tuple[str, ...]] = []
    open_w: list[int] = []
    droppable: list[bool] = []  # open note/title/speaker elements: is each one dropped?
    for match in MARKUP_RE.finditer(xml):
        piece = match.group()
        if not piece.startswith("<"):
            if not any(droppable):
                builder.text(html.unescape(piece), open_w)
            continue
        tag = TAG_RE.fullmatch(piece)
        if tag is None:
            continue
        name = tag.group("name")
        attrs = {m.group(1): m.group(2) if m.group(2) is not None else m.group(3)
                 for m in ATTR_RE.finditer(tag.group("attrs"))}
        is_end, is_empty = bool(tag.group("end")), bool(tag.group("empty"))
        if name in DROPPED_ELEMENTS and not is_empty:
            if is_end:
                if droppable:
                    droppable.pop()
            else:
                droppable.append(not (name == "title" and attrs.get("canonical") == "true"
                                      and keep_canonical_titles))
            builder.markup(separates_words=True)
            continue
        if any(droppable):
            continue
        if name == "w" and not is_empty:
            if is_end:
                if open_w:
                    open_w.pop()
            else:
                tag_numbers.append(parse_strongs(attrs.get("lemma", "")))
                open_w.append(len(tag_numbers) - 1)
        builder.markup(separates_words=name not in INLINE_ELEMENTS)
    verse = builder.verse(tag_numbers)
    if glue_sites is not None:
        glue_sites.extend(builder.glue_sites)
    return verse


def split_appended_text(xml: str) -> tuple[str, str]:
    """Split an entry into its own verse and any text osis2mod appended after it.

    Two markers end a verse's own text: the end-of-book milestone (the WEB's glossary follows
    Revelation 22:21) and a pre-verse milestone that opens another verse after some text (the
    WEB numbers Romans 16:25-27 as 14:24-26, which its versification lacks, so they land in
    14:23). Returns ``(verse_xml, appended_xml)``.
    """
    cut = len(xml)
    book_end = BOOK_END_RE.search(xml)
    if book_end:
        cut = book_end.start()
    for marker in PREVERSE_START_RE.finditer(xml, 0, cut):
        if parse_osis(xml[:marker.start()]).words:
            cut = marker.start()
            break
    return xml[:cut], xml[cut:]


# --------------------------------------------------------------------------------------------
# Spanish specifics


def standalone_word_counts(entries: dict[str, str]) -> Counter:
    """Lower-cased words that occur as whole words in the text (not glued across markup)."""
    counts: Counter = Counter()
    glued = re.compile(r"(?<=\w)(?:<[^>]*>)+(?=\w)")
    for xml in entries.values():
        text = re.sub(r"<[^>]*>", " ", glued.sub("\0", xml))
        counts.update(w for w in re.findall(r"[\w\0]+", text.lower()) if "\0" not in w)
    return counts


class SpanishGlue:
    """Decides whether two letter sequences split by inline markup are one Spanish word.

    The RV1909's markup sometimes runs two words together (``<w>Gracia</w><transChange>sea``)
    and sometimes splits a verb from its enclitic pronoun (``<w>díjo</w><transChange>le``). The
    pieces are joined only when the right piece is a clitic pronoun and the left piece can host
    it: the joined form occurs elsewhere in the module as a whole word (díjole, dióles); or the
    left piece is an infinitive, plural imperative or gerund (-r, -d, -ndo), a one-syllable
    imperative (da, haz), an accented form that never occurs alone (the RV1909 accents the host
    of an enclitic: púso-les, hablába-la), or a lower-case verb form with a stressed preterite or
    future ending, -ó -é -á -án -ás -éis (subió-la, invocaré-le). Accented function words
    (éste, cuánto) never host. Anything else is split into two words.
    """

    def __init__(self, vocabulary: Counter):
        self.vocabulary = vocabulary

    def __call__(self, left: str, right: str) -> bool:
        host = re.sub(r"^\W+", "", left)
        clitic = re.match(r"[^\W\d_]*", right).group().lower()
        lower = host.lower()
        if clitic not in CLITICS or not host or lower in ACCENTED_FUNCTION_WORDS:
            return False
        accented = any(c in ACCENTED_VOWELS for c in lower)
        return (self.vocabulary[lower + clitic] > 0
                or lower.endswith(("r", "d", "ndo"))
                or lower in SHORT_IMPERATIVES
                or (accented and self.vocabulary[lower] == 0)
                or (host.islower() and re.search(r"(?:[áéó]|án|ás|éis)$", lower) is not None))


def cut_subscription(verse: Verse) -> tuple[Verse, str]:
    """Cut an epistle's subscription: everything after the verse's last "Amén.".

    Returns the shortened verse and the cut text; raises ``ValueError`` when the text after
    "Amén." does not read like a subscription (it names where the letter was written or sent).
    """
    amen = [i for i, w in enumerate(verse.words) if w.startswith("Amén")]
    if not amen:
        raise ValueError(f"no 'Amén' in {verse.text!r}")
    cut = " ".join(verse.words[amen[-1] + 1:])
    if not re.search(r"\b(escrita|enviada)\b", cut, re.IGNORECASE):
        raise ValueError(f"not a subscription: {cut!r}")
    return verse.keep(0, amen[-1] + 1), cut


def strip_acrostic_letter(verse: Verse) -> Verse:
    """Drop a leading Psalm 119 letter heading ("BETH", "ALEPH.") from an RV1909 verse."""
    if verse.words and verse.words[0].rstrip(".") in ACROSTIC_LETTERS_ES:
        return verse.keep(1, len(verse.words))
    return verse


def _letters(word: str) -> str:
    return re.sub(r"[^\w]|[\d_]", "", word)


def _is_capitals(word: str) -> bool:
    letters = _letters(word)
    return len(letters) >= 2 and letters.isupper()


def _starts_sentence(words: tuple[str, ...], index: int) -> bool:
    return index == 0 or words[index - 1].endswith((".", "!", "?", ":"))


def casing_counts(verses: list[Verse]) -> Counter:
    """Spellings of words that do not start a sentence and are not in capitals."""
    counts: Counter = Counter()
    for verse in verses:
        for i, word in enumerate(verse.words):
            letters = _letters(word)
            if letters and not _starts_sentence(verse.words, i) and not _is_capitals(word):
                counts[letters] += 1
    return counts


def recase_chapter_opening(verse: Verse, casing: Counter) -> Verse:
    """Re-case the first word in capitals of a chapter's first verse ("EN el" -> "En el").

    The word takes its more frequent spelling elsewhere in the module: capitalised ("JEHOVÁ" ->
    "Jehová"; also when neither spelling occurs, as names are the rare words) or lower case
    ("FUERON" -> "fueron"), with a capital when it starts a sentence.
    One-letter words in capitals just before it inside a sentence ("Y Á SUS") are lower-cased.
    """
    index = next((i for i, w in enumerate(verse.words) if _is_capitals(w)), None)
    if index is None:
        return verse
    word = verse.words[index]
    letters = _letters(word)
    lower, capital = letters.lower(), letters[0] + letters[1:].lower()
    new = capital if casing[capital] >= casing[lower] or _starts_sentence(verse.words, index) \
        else lower
    verse = verse.with_word(index, word.replace(letters, new, 1))
    for i in range(index - 1, 0, -1):
        single = _letters(verse.words[i])
        if len(single) != 1 or not single.isupper() or _starts_sentence(verse.words, i):
            break
        verse = verse.with_word(i, verse.words[i].lower())
    return verse


# --------------------------------------------------------------------------------------------
# Reading modules


def read_imp(text: str) -> dict[str, str]:
    """Parse a ``mod2imp`` dump into ``{key: osis_xml}`` in dump order (headings skipped)."""
    entries: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        if line.startswith("$$$"):
            key = line[3:].strip()
            current = entries.setdefault(key, []) if KEY_RE.match(key) else None
        elif current is not None:
            current.append(line)
    return {key: "\n".join(lines) for key, lines in entries.items()}


def parse_key(key: str) -> tuple[str, int, int]:
    """``"I Samuel 23:29"`` -> ``("I Samuel", 23, 29)``."""
    match = KEY_RE.match(key)
    if match is None:
        raise ValueError(f"not a verse key: {key!r}")
    return match.group("book"), int(match.group("chapter")), int(match.group("verse"))


def is_verse_key(key: str) -> bool:
    """True for a real verse (chapter and verse > 0; 0 marks book and chapter introductions)."""
    _, chapter, verse = parse_key(key)
    return chapter > 0 and verse > 0


def dump_module(module: str) -> str:
    """Run ``mod2imp MODULE`` and return its output."""
    try:
        result = subprocess.run(["mod2imp", module], check=True, capture_output=True)
    except FileNotFoundError:
        sys.exit("mod2imp not found: install libsword-utils, or pass the dumps with --*-imp")
    return result.stdout.decode("utf-8")


def module_info(module: str, conf_dir: Path = Path("/usr/share/sword/mods.d")) -> dict:
    """Version and licence lines of an installed module's .conf file (empty if absent)."""
    conf = conf_dir / f"{module}.conf"
    info = {"module": module}
    if conf.exists():
        for line in conf.read_text(encoding="utf-8").splitlines():
            name, sep, value = line.partition("=")
            if sep and name in ("Version", "SwordVersionDate", "DistributionLicense",
                                "Copyright", "Versification"):
                info[name] = value.strip()
    return info


# --------------------------------------------------------------------------------------------
# Verse alignment between RV1909 slots and KJV verses


def dice(a: Counter, b: Counter) -> float:
    """Dice coefficient of two multisets (0 when either is empty)."""
    total = sum(a.values()) + sum(b.values())
    return 2 * sum((a & b).values()) / total if total and a and b else 0.0


@dataclasses.dataclass(frozen=True)
class Bead:
    """Spanish slot keys and the KJV verse keys they translate."""

    es_keys: tuple[str, ...]
    en_keys: tuple[str, ...]


def _bead_cost(es: Counter, en: Counter, shape: tuple[int, int]) -> float:
    unmatched = sum(es.values()) + sum(en.values()) - 2 * sum((es & en).values())
    a, b = shape
    return unmatched + (MERGE_PENALTY * (a + b - 2) if a and b else INDEL_PENALTY)


def align_run(es_keys: list[str], en_keys: list[str], es_numbers: dict[str, Counter],
              en_numbers: dict[str, Counter]) -> list[Bead]:
    """Monotone bead alignment of a run of Spanish slots with a run of KJV verses.

    Dynamic programme over :data:`BEAD_SHAPES` (1-1, 1-0, 0-1, 2-1, 1-2 … 1-10, 2-2, 2-3, 3-2)
    minimising the Strong's numbers left unmatched inside beads plus :data:`MERGE_PENALTY` per
    extra verse in a bead and :data:`INDEL_PENALTY` per verse left alone (Gale-Church style,
    with Strong's numbers instead of lengths), within a band of :data:`MAX_OFFSET` around the
    diagonal.
    """
    n, m = len(es_keys), len(en_keys)
    best: dict[tuple[int, int], tuple[float, tuple[int, int]]] = {(0, 0): (0.0, (0, 0))}
    for i in range(n + 1):
        for j in range(max(0, i - MAX_OFFSET), min(m, i + MAX_OFFSET) + 1):
            if (i, j) == (0, 0):
                continue
            options = []
            for a, b in BEAD_SHAPES:
                if (i - a, j - b) not in best:
                    continue
                es = sum((es_numbers[k] for k in es_keys[i - a:i]), Counter())
                en = sum((en_numbers[k] for k in en_keys[j - b:j]), Counter())
                options.append((best[(i - a, j - b)][0] + _bead_cost(es, en, (a, b)), (a, b)))
            if options:
                best[(i, j)] = min(options)
    beads, i, j = [], n, m
    while (i, j) != (0, 0):
        a, b = best[(i, j)][1]
        beads.append(Bead(tuple(es_keys[i - a:i]), tuple(en_keys[j - b:j])))
        i, j = i - a, j - b
    return beads[::-1]


def align_verse_runs(keys: list[str], es: dict[str, Verse], en: dict[str, Verse]) -> list[Bead]:
    """Pair Spanish slots with KJV verses for every key, re-aligning suspect regions.

    A key is suspect when its Spanish slot is empty or the Strong's Dice of the identity pairing
    is below :data:`SUSPECT_DICE`. Suspect keys, widened by :data:`WINDOW_MARGIN` keys on each
    side (within a book), form windows that :func:`align_run` re-aligns (empty slots and empty
    verses left out); every other key is paired with itself.
    """
    es_numbers = {k: es[k].numbers() for k in keys}
    en_numbers = {k: en[k].numbers() for k in keys}
    books = [parse_key(k)[0] for k in keys]
    suspect = [not es[k].words or dice(es_numbers[k], en_numbers[k]) < SUSPECT_DICE
               for k in keys]
    in_window = [False] * len(keys)
    for i, flag in enumerate(suspect):
        if flag:
            for j in range(max(0, i - WINDOW_MARGIN), min(len(keys), i + WINDOW_MARGIN + 1)):
                if books[j] == books[i]:
                    in_window[j] = True
    beads: list[Bead] = []
    i = 0
    while i < len(keys):
        if not in_window[i]:
            beads.append(Bead((keys[i],), (keys[i],)))
            i += 1
            continue
        j = i
        while j < len(keys) and in_window[j] and books[j] == books[i]:
            j += 1
        window = keys[i:j]
        beads.extend(align_run([k for k in window if es[k].words],
                               [k for k in window if en[k].words], es_numbers, en_numbers))
        i = j
    return beads


def range_key(keys: tuple[str, ...]) -> str:
    """``("Job 39:27", …, "Job 40:5")`` -> ``"Job 39:27-40:5"``; one key stays as it is."""
    if keys[0] == keys[-1]:
        return keys[0]
    book, c1, v1 = parse_key(keys[0])
    _, c2, v2 = parse_key(keys[-1])
    return f"{book} {c1}:{v1}-{v2}" if c1 == c2 else f"{book} {c1}:{v1}-{c2}:{v2}"


# --------------------------------------------------------------------------------------------
# Gold word alignments from Strong's numbers


def _monotone_matching(src: list[float], tgt: list[float]) -> list[tuple[int, int]]:
    """Pair two ordered position lists in order, leaving the surplus of the longer unpaired.

    With equal lengths this is the k-th with the k-th. Otherwise it is the order-preserving
    one-to-one matching of size ``min(len)`` that minimises the summed distance of relative
    positions (dynamic programme), so an extra occurrence is left out where it fits worst.
    """
    if len(src) == len(tgt):
        return list(zip(range(len(src)), range(len(tgt))))
    if len(src) > len(tgt):
        return [(i, j) for j, i in _monotone_matching(tgt, src)]
    n, m = len(src), len(tgt)
    cost = [[math.inf] * (m + 1) for _ in range(n + 1)]
    for j in range(m + 1):
        cost[0][j] = 0.0
    for i in range(1, n + 1):
        for j in range(i, m + 1):
            cost[i][j] = min(cost[i][j - 1], cost[i - 1][j - 1] + abs(src[i - 1] - tgt[j - 1]))
    pairs, i, j = [], n, m
    while i > 0:
        if cost[i][j] == cost[i][j - 1] and j > i:
            j -= 1
        else:
            pairs.append((i - 1, j - 1))
            i, j = i - 1, j - 1
    return pairs[::-1]


def strongs_links(src: Verse, tgt: Verse) -> list[tuple[int, int]]:
    """Gold links between the words of two verses whose ``<w>`` tags share a Strong's number.

    Occurrences are ``<w>`` elements: for each number, the source elements carrying it are
    paired with the target elements carrying it in order of position (:func:`_monotone_matching`
    on relative positions; with unequal counts the surplus stays unlinked). A paired element
    links every word it covers to every word the other covers. The RV1909 tags whole phrases
    ("y la tierra" = H0776), so all words of a phrase share its links and the Spanish side is
    many-to-one; an element with several numbers ("Jesucristo" = G2424 G5547) takes part in the
    pairing of each. Untagged words (most English function words) get no link, so the links
    are "sure" links over a partial gold: an AER must count only words the gold covers.
    Returns sorted ``(source index, target index)`` pairs.
    """
    def occurrences(verse: Verse) -> dict[str, list[tuple[float, tuple[int, ...]]]]:
        found: dict[str, list[tuple[float, tuple[int, ...]]]] = {}
        for tag in sorted(verse.tags, key=lambda t: (statistics.fmean(t.tokens), t.tokens)):
            position = statistics.fmean(tag.tokens) / max(1, len(verse.words) - 1)
            for number in dict.fromkeys(tag.numbers):
                found.setdefault(number, []).append((position, tag.tokens))
        return found

    src_occ, tgt_occ = occurrences(src), occurrences(tgt)
    links: set[tuple[int, int]] = set()
    for number in src_occ.keys() & tgt_occ.keys():
        a, b = src_occ[number], tgt_occ[number]
        for i, j in _monotone_matching([p for p, _ in a], [p for p, _ in b]):
            links.update((s, t) for s in a[i][1] for t in b[j][1])
    return sorted(links)


def format_links(links: list[tuple[int, int]]) -> str:
    """Pharaoh format: ``"0-0 1-2"``."""
    return " ".join(f"{i}-{j}" for i, j in links)


# --------------------------------------------------------------------------------------------
# Building the corpus


@dataclasses.dataclass
class Pair:
    key: str
    es: Verse
    en: Verse
    en_web: str
    links: list[tuple[int, int]]


def clean_spanish(raw: dict[str, str], keys: list[str], report: dict) -> dict[str, Verse]:
    """Clean every RV1909 verse: markup, glued words, subscriptions, acrostics, capitals."""
    glue = SpanishGlue(standalone_word_counts({k: raw[k] for k in keys}))
    sites: list[tuple[str, str, bool]] = []
    verses = {k: parse_osis(raw[k], join_inline=glue, glue_sites=sites) for k in keys}

    subscriptions = {}
    for book in SUBSCRIBED_EPISTLES:
        present = [k for k in keys if parse_key(k)[0] == book and verses[k].words]
        if present:
            verses[present[-1]], subscriptions[present[-1]] = cut_subscription(verses[present[-1]])

    acrostics = []
    for k in keys:
        book, chapter, verse = parse_key(k)
        if book == "Psalms" and chapter == 119 and verse % 8 == 1:
            stripped = strip_acrostic_letter(verses[k])
            if stripped != verses[k]:
                acrostics.append(k)
                verses[k] = stripped

    casing = casing_counts(list(verses.values()))
    recased = []
    for k in keys:
        if parse_key(k)[2] == 1:
            new = recase_chapter_opening(verses[k], casing)
            if new != verses[k]:
                changed = [i for i, (a, b) in enumerate(zip(verses[k].words, new.words)) if a != b]
                span = slice(0, changed[-1] + 1)
                recased.append(f"{k}: {' '.join(verses[k].words[span])} -> "
                               f"{' '.join(new.words[span])}")
                verses[k] = new

    joined = Counter(f"{l}|{r}" for l, r, j in sites if j)
    split = Counter(f"{l}|{r}" for l, r, j in sites if not j)
    report["spanish"] = {
        "subscriptions_cut": {"count": len(subscriptions), "keys": subscriptions},
        "psalm119_acrostic_letters_removed": len(acrostics),
        "chapter_openings_recased": {"count": len(recased), "examples": recased[:10]},
        "glued_by_markup": {
            "joined_as_one_word": sum(joined.values()), "split_into_two_words": sum(split.values()),
            "joined_examples": sorted(joined)[:40], "split_examples": sorted(split)[:40]},
        "empty_slots": [k for k in keys if not verses[k].words],
    }
    return verses


def clean_kjv(raw: dict[str, str], keys: list[str]) -> dict[str, Verse]:
    """Clean every KJV verse (a missing key gives an empty verse)."""
    return {k: parse_osis(raw.get(k, "")) for k in keys}


def _english_bag(text: str) -> Counter:
    return Counter(re.findall(r"[a-z]+", text.lower()))


def clean_web(raw: dict[str, str], keys: list[str], kjv: dict[str, Verse], report: dict
              ) -> dict[str, str]:
    """Clean every WEB verse to plain text ("" when it has none), fixing the known misplacements."""
    texts, appended, footnote_only, absent = {}, {}, [], []
    for k in keys:
        if k not in raw:
            absent.append(k)
            texts[k] = ""
            continue
        own, extra = split_appended_text(raw[k])
        book, chapter, _ = parse_key(k)
        texts[k] = parse_osis(own, keep_canonical_titles=(book, chapter) != ("Psalms", 119)).text
        extra_text = parse_osis(extra).text
        if extra_text:
            appended[k] = extra_text[:120] + ("…" if len(extra_text) > 120 else "")
        if not texts[k] and "<note" in own:
            footnote_only.append(k)

    swapped = []
    for a, b in WEB_SWAPPED_VERSES:
        if a not in raw or b not in raw:
            continue
        before = dice(_english_bag(texts[a]), _english_bag(kjv[a].text)) + dice(
            _english_bag(texts[b]), _english_bag(kjv[b].text))
        after = dice(_english_bag(texts[b]), _english_bag(kjv[a].text)) + dice(
            _english_bag(texts[a]), _english_bag(kjv[b].text))
        if after <= before:
            raise ValueError(f"WEB {a}/{b} no longer look swapped: check the module")
        texts[a], texts[b] = texts[b], texts[a]
        swapped.append([a, b])

    report["web"] = {
        "swapped_back": swapped,
        "appended_text_removed": appended,
        "footnote_only_verses": footnote_only,
        "absent_keys": absent,
        "empty_verses": [k for k in keys if not texts[k]],
    }
    return texts


def build_pairs(es_raw: str, kjv_raw: str, web_raw: str) -> tuple[list[Pair], dict]:
    """Clean, align and pair the three dumps; return the pairs and the build report."""
    es_entries, kjv_entries, web_entries = read_imp(es_raw), read_imp(kjv_raw), read_imp(web_raw)
    keys = [k for k in es_entries if is_verse_key(k)]
    report: dict = {"spanish_verse_keys": len(keys)}

    es = clean_spanish(es_entries, keys, report)
    kjv = clean_kjv(kjv_entries, keys)
    web = clean_web(web_entries, keys, kjv, report)
    report["kjv"] = {"empty_verses": [k for k in keys if not kjv[k].words]}

    rekeyed, merged, dropped = [], [], []
    pairs = []
    for bead in align_verse_runs(keys, es, kjv):
        identity = bead.es_keys == bead.en_keys and len(bead.es_keys) == 1
        es_verse = concat_verses([es[k] for k in bead.es_keys])
        en_verse = concat_verses([kjv[k] for k in bead.en_keys])
        score = round(dice(es_verse.numbers(), en_verse.numbers()), 3)
        record = {"es_slots": range_key(bead.es_keys) if bead.es_keys else None,
                  "kjv_verses": range_key(bead.en_keys) if bead.en_keys else None,
                  "strongs_dice": score}
        if not identity:
            if not bead.es_keys or not bead.en_keys:
                dropped.append({**record, "reason": "no counterpart on the other side"})
                continue
            if score < MIN_BEAD_DICE:
                dropped.append({**record, "reason": f"Strong's Dice below {MIN_BEAD_DICE}"})
                continue
            (rekeyed if len(bead.es_keys) == len(bead.en_keys) == 1 else merged).append(record)
        web_parts = [web[k] for k in bead.en_keys]
        pairs.append(Pair(range_key(bead.en_keys), es_verse, en_verse,
                          " ".join(web_parts) if all(web_parts) else "",
                          strongs_links(es_verse, en_verse)))
    report["verse_alignment"] = {
        "rekeyed": {"count": len(rekeyed), "beads": rekeyed},
        "merged": {"count": len(merged), "beads": merged},
        "dropped": {"count": len(dropped), "beads": dropped},
    }
    return pairs, report


def _length_stats(lengths: list[int]) -> dict:
    ordered = sorted(lengths)
    return {"mean": round(statistics.fmean(ordered), 2), "median": statistics.median(ordered),
            "p95": ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)],
            "max": ordered[-1], "over_50": sum(1 for n in ordered if n > 50)}


def corpus_stats(pairs: list[Pair]) -> dict:
    """Pair count, length statistics per side, WEB gaps and alignment coverage."""
    en_tokens = sum(len(p.en.words) for p in pairs)
    es_tokens = sum(len(p.es.words) for p in pairs)
    return {
        "pairs": len(pairs),
        "words_es": _length_stats([len(p.es.words) for p in pairs]),
        "words_en_kjv": _length_stats([len(p.en.words) for p in pairs]),
        "words_en_web": _length_stats([len(p.en_web.split(" ")) for p in pairs if p.en_web]),
        "en_web_empty": len([p for p in pairs if not p.en_web]),
        "links": sum(len(p.links) for p in pairs),
        "pairs_without_links": sum(1 for p in pairs if not p.links),
        "es_words_linked": round(len({(n, i) for n, p in enumerate(pairs)
                                      for i, _ in p.links}) / es_tokens, 3),
        "en_words_linked": round(len({(n, j) for n, p in enumerate(pairs)
                                      for _, j in p.links}) / en_tokens, 3),
    }


def check_pairs(pairs: list[Pair]) -> None:
    """Assert the invariants the readers rely on (fields, tokens, alignment indices)."""
    for pair in pairs:
        assert pair.es.words and pair.en.words, pair.key
        for field in (pair.key, pair.es.text, pair.en.text, pair.en_web):
            assert "\t" not in field and "\n" not in field and "\r" not in field, pair.key
            assert field == " ".join(field.split()), pair.key
        n_src, n_tgt = len(pair.es.text.split(" ")), len(pair.en.text.split(" "))
        assert n_src == len(pair.es.words) and n_tgt == len(pair.en.words), pair.key
        assert all(0 <= i < n_src and 0 <= j < n_tgt for i, j in pair.links), pair.key


def write_gzip(path: Path, lines: list[str]) -> None:
    """Write UTF-8 lines to a gzip file reproducibly (no timestamp, no file name)."""
    with open(path, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw,
                                                 mtime=0, compresslevel=9) as gz:
        with io.TextIOWrapper(gz, encoding="utf-8", newline="\n") as text:
            for line in lines:
                text.write(line + "\n")


def write_outputs(out_dir: Path, pairs: list[Pair], report: dict) -> None:
    """Write the TSV, the alignment file and the JSON report."""
    out_dir.mkdir(parents=True, exist_ok=True)
    write_gzip(out_dir / "bible.es-en.tsv.gz", ["key\tes\ten\ten_web"] + [
        f"{p.key}\t{p.es.text}\t{p.en.text}\t{p.en_web}" for p in pairs])
    write_gzip(out_dir / "bible.es-en.kjv.align.gz", [format_links(p.links) for p in pairs])
    (out_dir / "build_report.json").write_text(
        json.dumps(report, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


def _rekeyed_runs(beads: list[dict]) -> list[str]:
    """Re-keyed beads grouped by KJV chapter: ``"Numbers 13:1-31 (es 13:2-32)"``."""
    runs: dict[tuple[str, int], list[dict]] = {}
    for bead in beads:
        book, chapter, _ = parse_key(bead["kjv_verses"])
        runs.setdefault((book, chapter), []).append(bead)
    return [f"{range_key((run[0]['kjv_verses'], run[-1]['kjv_verses']))} "
            f"(es {range_key((run[0]['es_slots'], run[-1]['es_slots']))})"
            for run in runs.values()]


def summary(report: dict) -> str:
    """Human-readable digest of the report, for stderr."""
    sp, web, va, st = report["spanish"], report["web"], report["verse_alignment"], report["stats"]
    lines = [
        f"Spanish verse keys: {report['spanish_verse_keys']}; empty Spanish slots: "
        f"{len(sp['empty_slots'])} ({', '.join(sp['empty_slots'])})",
        f"subscriptions cut: {sp['subscriptions_cut']['count']} "
        f"({', '.join(sp['subscriptions_cut']['keys'])})",
        f"Psalm 119 acrostic letters removed: {sp['psalm119_acrostic_letters_removed']}; "
        f"chapter openings re-cased: {sp['chapter_openings_recased']['count']}",
        f"words glued by markup: {sp['glued_by_markup']['joined_as_one_word']} joined (enclitics), "
        f"{sp['glued_by_markup']['split_into_two_words']} split",
        f"re-keyed slots (shifted Spanish verses paired with the KJV verse they hold): "
        f"{va['rekeyed']['count']}: " + ", ".join(_rekeyed_runs(va["rekeyed"]["beads"])),
        f"merged ranges: {va['merged']['count']}: " + ", ".join(
            f"{b['kjv_verses']} (es {b['es_slots']})" for b in va["merged"]["beads"]),
        f"dropped beads: {va['dropped']['count']}" + "".join(
            f"; es {b['es_slots']} / kjv {b['kjv_verses']} ({b['reason']})"
            for b in va["dropped"]["beads"]),
        f"WEB: swapped back {web['swapped_back']}; appended text removed from "
        f"{', '.join(web['appended_text_removed'])}; footnote-only: "
        f"{', '.join(web['footnote_only_verses'])}; empty en_web in pairs: {st['en_web_empty']}",
        f"pairs: {st['pairs']}",
    ]
    for side in ("words_es", "words_en_kjv", "words_en_web"):
        s = st[side]
        lines.append(f"{side}: mean {s['mean']}, median {s['median']}, p95 {s['p95']}, "
                     f"max {s['max']}, >50: {s['over_50']}")
    lines.append(f"links: {st['links']}; words linked: es {st['es_words_linked']:.1%}, "
                 f"en {st['en_words_linked']:.1%}; pairs without links: "
                 f"{st['pairs_without_links']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out-dir", type=Path, default=Path("data/bible"))
    for side, label in (("es", "RV1909"), ("kjv", "KJV"), ("web", "WEB")):
        parser.add_argument(f"--{side}-module", default=DEFAULT_MODULES[side],
                            help=f"SWORD module of the {label} (default %(default)s)")
        parser.add_argument(f"--{side}-imp", type=Path,
                            help=f"a mod2imp dump of the {label} to read instead of the module")
    args = parser.parse_args(argv)

    dumps, modules = {}, {}
    for side in ("es", "kjv", "web"):
        path, module = getattr(args, f"{side}_imp"), getattr(args, f"{side}_module")
        dumps[side] = path.read_text(encoding="utf-8") if path else dump_module(module)
        modules[side] = {"dump": str(path)} if path else module_info(module)
    pairs, report = build_pairs(dumps["es"], dumps["kjv"], dumps["web"])
    check_pairs(pairs)
    report = {"modules": modules, "stats": corpus_stats(pairs), **report}
    write_outputs(args.out_dir, pairs, report)
    print(summary(report), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

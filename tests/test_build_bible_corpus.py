"""scripts/build_bible_corpus.py on small hand-written mod2imp snippets (no SWORD module needed)."""

from __future__ import annotations

import gzip
import json
from collections import Counter

import pytest

from conftest import load_script

bb = load_script("build_bible_corpus")


def w(number: str, text: str) -> str:
    return f'<w lemma="strong:{number}">{text}</w>'


# --- markup -----------------------------------------------------------------------------------


def test_notes_dropped_with_their_text_even_nested_and_space_restored():
    xml = (w("H0430", "God") + '<note placement="foot"><reference>1:1 </reference>outer '
           '<note type="x">inner</note> tail</note>' + w("H1254", "created") + " it"
           '<note placement="foot">a note</note>.')
    verse = bb.parse_osis(xml)
    assert verse.text == "God created it."
    assert verse.tags == (bb.Tag(("H0430",), (0,)), bb.Tag(("H1254",), (1,)))


def test_note_between_word_and_opening_quote_restores_space():
    assert bb.parse_osis('said,<note>n</note>“Go”').text == "said, “Go”"


def test_titles_milestones_and_markers_removed():
    xml = ('<div sID="gen2" type="x-p"/><chapter n="1" osisID="Gen.1" sID="Gen.1"/>'
           '<title level="1" type="main">Heading</title> <milestone type="x-usfm-h" n="Gen"/>'
           '<div type="x-milestone" subType="x-preverse" sID="pv1"/>In the '
           '<transChange type="added">very</transChange> <divineName>' + w("H3068", "LORD")
           + '</divineName> <q marker="">' + w("H0559", "said") + "</q>."
           '<chapter eID="Gen.1"/> <title>Written to the Romans.</title>')
    assert bb.parse_osis(xml).text == "In the very LORD said."


def test_canonical_psalm_title_kept_unless_asked_speaker_dropped():
    xml = ('<title canonical="true" type="psalm">A Psalm of ' + w("H1732", "David") + ".</title>"
           ' <speaker>Beloved</speaker><l level="1" sID="x"/>LORD, hear.<l eID="x" level="1"/>')
    assert bb.parse_osis(xml).text == "A Psalm of David. LORD, hear."
    assert bb.parse_osis(xml, keep_canonical_titles=False).text == "LORD, hear."


def test_entities_unescaped_whitespace_collapsed_and_pilcrow_removed():
    xml = "¶ Tom &amp; Jerry\tsaid\n &lt;hi&gt;  &quot;yes&quot; &#233;"
    verse = bb.parse_osis(xml)
    assert verse.text == 'Tom & Jerry said <hi> "yes" é'
    assert "\t" not in verse.text and "  " not in verse.text


def test_english_inline_markup_never_splits_a_word():
    verse = bb.parse_osis("they being " + w("G5399", "afrai") + "d")
    assert verse.words == ("they", "being", "afraid")
    assert verse.tags == (bb.Tag(("G5399",), (2,)),)


def test_spanish_glued_words_split_but_enclitics_joined():
    glue = bb.SpanishGlue(Counter({"gracia": 5, "sea": 9, "los": 50, "lo": 40}))
    xml = (w("G5485", "Gracia") + '<transChange type="added">sea</transChange> '
           + w("G2036", "díjo") + '<transChange type="added">le</transChange> '
           + w("H0559", "Dígan") + '<transChange type="added">lo</transChange>'
           + w("H1350", "los redimidos"))
    sites: list = []
    verse = bb.parse_osis(xml, join_inline=glue, glue_sites=sites)
    assert verse.words == ("Gracia", "sea", "díjole", "Díganlo", "los", "redimidos")
    assert [(left, right, joined) for left, right, joined in sites] == [
        ("Gracia", "sea", False), ("díjo", "le", True), ("Dígan", "lo", True), ("lo", "los", False)]


def test_spanish_glue_rules():
    glue = bb.SpanishGlue(Counter({"dióles": 3, "dió": 40, "dejaban": 2, "ejército": 30,
                                   "jehová": 6000}))
    assert glue("dió", "les")          # joined form attested elsewhere
    assert glue("sacar", "la")         # infinitive
    assert glue("haz", "lo")           # one-syllable imperative
    assert glue("hablába", "la")       # accented host never written alone
    assert glue("subió", "la")         # lower-case verb with stressed ending
    assert not glue("dejaban", "la")   # "dejaban la cría"
    assert not glue("ejército", "se")  # a noun that occurs alone
    assert not glue("éste", "le")      # accented function word
    assert not glue("Jehová", "los")   # a name (written alone, capitalised)
    assert not glue("Señor", "es")     # not a clitic


# --- entries and keys -------------------------------------------------------------------------


IMP_HEAD = "$$$[ Module Heading ]\n\n$$$[ Testament 1 Heading ]\n<milestone type=\"x-importer\"/>\n"


def test_read_imp_skips_headings_and_verse_zero():
    entries = bb.read_imp(IMP_HEAD + "$$$Genesis 0:0\n<title>Génesis</title>\n$$$Genesis 1:0\n"
                          '<chapter n="1"/>\n$$$Genesis 1:1\nEN el principio\n$$$I Samuel 2:3\nY\n')
    assert list(entries) == ["Genesis 0:0", "Genesis 1:0", "Genesis 1:1", "I Samuel 2:3"]
    assert [k for k in entries if bb.is_verse_key(k)] == ["Genesis 1:1", "I Samuel 2:3"]
    assert bb.parse_key("I Samuel 2:3") == ("I Samuel", 2, 3)


def test_split_appended_text_cuts_glossary_and_appended_verses():
    rom = ("sin." + '<div type="x-milestone" subType="x-preverse" sID="pv2"/>Now to him who is able'
           '<note>TR places verses 24-26 after Romans 16:24</note>')
    assert bb.split_appended_text(rom)[0] == "sin."
    rev = ('<div type="x-milestone" subType="x-preverse" sID="pv9"/>Amen. '
           '<div canonical="true" eID="g1" osisID="Rev" type="book"/> <div type="glossary"/>Abba')
    own, appended = bb.split_appended_text(rev)
    assert bb.parse_osis(own).text == "Amen." and bb.parse_osis(appended).text == "Abba"


# --- Spanish specifics ------------------------------------------------------------------------


def test_subscription_cut_after_last_amen():
    verse = bb.parse_osis("Al solo " + w("G2316", "Dios") + " sabio. " + w("G0281", "Amén") + ". "
                          + w("G1125", "Fué escrita") + " de Corinto á los Romanos.")
    cut, subscription = bb.cut_subscription(verse)
    assert cut.text == "Al solo Dios sabio. Amén."
    assert subscription == "Fué escrita de Corinto á los Romanos."
    assert [t.numbers for t in cut.tags] == [("G2316",), ("G0281",)]
    with pytest.raises(ValueError):
        bb.cut_subscription(bb.parse_osis("Gracia sea con vosotros. Amén. Saludad á todos."))


def test_psalm_119_acrostic_letter_removed():
    verse = bb.parse_osis("BETH ¿" + w("H4100", "Con qué") + " limpiará el joven su camino?")
    stripped = bb.strip_acrostic_letter(verse)
    assert stripped.text == "¿Con qué limpiará el joven su camino?"
    assert stripped.tags == (bb.Tag(("H4100",), (0, 1)),)


def test_chapter_openings_recased_from_usual_spelling():
    casing = Counter({"Jehová": 20, "jehová": 0, "fueron": 8, "Fueron": 1, "sus": 30})
    recase = bb.recase_chapter_opening
    assert recase(bb.Verse(("EN", "el", "principio")), casing).text == "En el principio"
    assert recase(bb.Verse(("Y", "FUERON", "acabados")), casing).text == "Y fueron acabados"
    assert recase(bb.Verse(("Y", "JEHOVÁ", "dijo")), casing).text == "Y Jehová dijo"
    assert recase(bb.Verse(("Y", "Á", "SUS", "discípulos")), casing).text == "Y á sus discípulos"
    assert recase(bb.Verse(("Salmo.", "¡OH", "Dios")), casing).text == "Salmo. ¡Oh Dios"


# --- Strong's alignments ----------------------------------------------------------------------


def test_parse_strongs_multi_number_lemmas():
    assert bb.parse_strongs("strong:H0853 strong:H0430") == ("H0853", "H0430")
    assert bb.parse_strongs("strong:G2424 G5547") == ("G2424", "G5547")
    assert bb.parse_strongs("strong:H430") == ("H0430",)


def test_multi_number_tag_links_to_each_english_word():
    es = bb.parse_osis("por " + '<w lemma="strong:G2424 G5547">Jesucristo</w>')
    en = bb.parse_osis("through " + w("G2424", "Jesus") + " " + w("G5547", "Christ"))
    assert bb.strongs_links(es, en) == [(1, 1), (1, 2)]


def test_phrase_tokens_share_links_and_repeats_pair_in_order():
    es = bb.parse_osis(w("H0776", "y la tierra") + " " + w("H0776", "la tierra") + " "
                       + w("H0430", "Dios"))
    en = bb.parse_osis("the " + w("H0776", "earth") + " and " + w("H0776", "land") + " of "
                       + w("H0430", "God"))
    assert bb.strongs_links(es, en) == [(0, 1), (1, 1), (2, 1), (3, 3), (4, 3), (5, 5)]


def test_surplus_occurrence_left_where_it_fits_worst():
    # Three "Dios" but two "God": the middle Spanish one has no partner by position.
    assert bb._monotone_matching([0.0, 0.5, 1.0], [0.0, 1.0]) == [(0, 0), (2, 1)]
    assert bb._monotone_matching([0.9], [0.0, 0.5, 1.0]) == [(0, 2)]
    assert bb._monotone_matching([0.1, 0.2], [0.3, 0.4]) == [(0, 0), (1, 1)]


# --- verse alignment and the whole build ------------------------------------------------------


def tagged(base: int) -> str:
    """A verse text tagged with three Strong's numbers specific to ``base``."""
    return " ".join(w(f"H{base + i:04d}", f"word{base + i}") for i in range(3))


def imp(entries: dict[str, str]) -> str:
    return IMP_HEAD + "".join(f"$$${key}\n{text}\n" for key, text in entries.items())


KJV_KEYS = ["Jonah 1:1", "Jonah 1:2", "Jonah 1:3", "Jonah 1:4", "Jonah 2:1", "Jonah 2:2",
            "Jonah 2:3", "Jonah 2:4", "Jonah 3:1", "Jonah 3:2"]


@pytest.fixture
def dumps():
    """A shifted region as in the RV1909: Spanish 1:4 is empty, slots 2:1-2:3 hold the previous
    KJV verse and slot 2:4 holds KJV 2:3 and 2:4; Spanish 3:1 lacks the KJV 3:1 entirely."""
    kjv = {k: tagged(10 * i + 10) for i, k in enumerate(KJV_KEYS)}
    es = {"Jonah 0:0": "<title>Jonás</title>", "Jonah 1:0": '<chapter n="1"/>'}
    es.update({k: kjv[k] for k in KJV_KEYS[:3]})
    es["Jonah 1:4"] = ""
    es["Jonah 2:1"] = kjv["Jonah 1:4"]
    es["Jonah 2:2"] = kjv["Jonah 2:1"]
    es["Jonah 2:3"] = kjv["Jonah 2:2"]
    es["Jonah 2:4"] = kjv["Jonah 2:3"] + " " + kjv["Jonah 2:4"]
    es["Jonah 3:1"] = ""
    es["Jonah 3:2"] = kjv["Jonah 3:2"]
    web = {k: f"WEB {k}" for k in KJV_KEYS}
    web["Jonah 2:2"] = '<note placement="foot">only a footnote</note>'
    web["Tobit 1:1"] = "deuterocanon"
    return imp(es), imp(kjv), imp(web)


def test_shifted_region_rekeyed_and_merged_never_paired_shifted(dumps):
    pairs, report = bb.build_pairs(*dumps)
    by_key = {p.key: p for p in pairs}
    assert list(by_key) == ["Jonah 1:1", "Jonah 1:2", "Jonah 1:3", "Jonah 1:4", "Jonah 2:1",
                            "Jonah 2:2", "Jonah 2:3-4", "Jonah 3:2"]
    for pair in pairs:  # every pair carries the same Strong's numbers on both sides
        assert pair.es.numbers() == pair.en.numbers()
    assert by_key["Jonah 2:3-4"].en.text == (bb.parse_osis(tagged(70)).text + " "
                                             + bb.parse_osis(tagged(80)).text)
    assert by_key["Jonah 1:4"].es.text == bb.parse_osis(tagged(40)).text  # from slot 2:1
    assert by_key["Jonah 2:3-4"].en_web == "WEB Jonah 2:3 WEB Jonah 2:4"
    assert by_key["Jonah 2:2"].en_web == ""  # footnote only
    alignment = report["verse_alignment"]
    assert alignment["rekeyed"]["count"] == 3
    assert [b["es_slots"] for b in alignment["merged"]["beads"]] == ["Jonah 2:4"]
    assert alignment["dropped"]["beads"] == [{"es_slots": None, "kjv_verses": "Jonah 3:1",
                                              "strongs_dice": 0.0,
                                              "reason": "no counterpart on the other side"}]
    assert report["web"]["footnote_only_verses"] == ["Jonah 2:2"]


def test_main_writes_deterministic_consistent_files(dumps, tmp_path):
    paths = []
    for name, text in zip(("es", "kjv", "web"), dumps):
        paths += [f"--{name}-imp", str(tmp_path / f"{name}.imp")]
        (tmp_path / f"{name}.imp").write_text(text, encoding="utf-8")
    outputs = []
    for run in ("a", "b"):
        assert bb.main(["--out-dir", str(tmp_path / run), *paths]) == 0
        outputs.append([(tmp_path / run / f).read_bytes()
                        for f in ("bible.es-en.tsv.gz", "bible.es-en.kjv.align.gz")])
    assert outputs[0] == outputs[1]

    rows = gzip.decompress(outputs[0][0]).decode("utf-8").split("\n")
    aligns = gzip.decompress(outputs[0][1]).decode("utf-8").split("\n")
    assert rows[0] == "key\tes\ten\ten_web" and rows[-1] == "" and aligns[-1] == ""
    rows, aligns = rows[1:-1], aligns[:-1]
    assert len(rows) == len(aligns) == 8
    for row, links in zip(rows, aligns):
        key, es, en, en_web = row.split("\t")
        for item in links.split(" "):
            i, j = map(int, item.split("-"))
            assert i < len(es.split(" ")) and j < len(en.split(" "))
    report = json.loads((tmp_path / "a" / "build_report.json").read_text(encoding="utf-8"))
    assert report["stats"]["pairs"] == 8 and report["stats"]["en_web_empty"] == 1

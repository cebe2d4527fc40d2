"""The one text form every title is brought to, as it is read and before it is tokenized: one
Unicode form, on one line, without control or invisible characters."""

from __future__ import annotations

import re
import unicodedata

# The one Unicode form every title is read in: precomposed Hangul syllables, as Windows and Linux
# type them (macOS file names and some of its exports give the same syllables as decomposed jamo).
TEXT_NORMALISATION = "NFC"
# Line breaks of any system (with the spaces beside them) inside a title: one space. A spreadsheet
# writes a cell's line breaks into a quoted CSV field.
_LINE_BREAK = re.compile(r"[ \t]*(?:(?:\r\n|[\n\r\v\f\x1c-\x1e\x85\u2028\u2029])[ \t]*)+")
# Control characters (Cc) and invisible format characters (Cf: zero-width spaces and joiners, soft
# hyphens, direction marks, BOMs) carry no words; tabs are spaces, the rest are removed.
REMOVED_CATEGORIES = ("Cc", "Cf")


def normalise_title(text: str) -> str:
    """The title in TEXT_NORMALISATION form, on one line, without control or invisible characters
    or surrounding spaces."""
    if not text.isprintable():  # the usual title takes the fast path: nothing to remove
        text = _LINE_BREAK.sub(" ", text).replace("\t", " ")
        text = "".join(ch for ch in text if unicodedata.category(ch) not in REMOVED_CATEGORIES)
    return unicodedata.normalize(TEXT_NORMALISATION, text).strip()


def has_line_break(text: str) -> bool:
    """A line break inside the title (not at its ends, which are stripped as spaces are)."""
    return _LINE_BREAK.search(text.strip()) is not None


def has_removed_characters(text: str) -> bool:
    """A tab, control or invisible character inside the title that `normalise_title` removes or makes
    a space (invisible ones at its ends are only stripped, as surrounding spaces are)."""
    inner = _LINE_BREAK.sub(" ", text).strip().strip("\u200b\u200c\u200d\u2060\ufeff").strip()
    return not inner.isprintable() and any(unicodedata.category(ch) in REMOVED_CATEGORIES for ch in inner)

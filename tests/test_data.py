import json
import unicodedata

import numpy as np
import pytest

from conftest import SHARED_TRAIN, write_tsv
from klue_tc.core.errors import DataError, ResourceError
from klue_tc.data.titles import (
    LABEL_NAMES,
    load_hub_split,
    read_labelled_file,
    stratified_folds,
    stratified_subsample,
)


def test_every_format_reads_the_same_titles(tmp_path, headlines):
    expected_texts = [t for _, t in headlines]
    expected_ids = [LABEL_NAMES.index(label) for label, _ in headlines]
    klue_json = [
        {"guid": f"ynat-v1_train_{i:05d}", "title": t, "label": label, "url": "", "date": ""}
        for i, (label, t) in enumerate(headlines)
    ]
    (tmp_path / "a.json").write_text(json.dumps(klue_json, ensure_ascii=False), encoding="utf-8")
    (tmp_path / "a.jsonl").write_text(
        "\n".join(
            json.dumps({"title": t, "label": LABEL_NAMES.index(label)}, ensure_ascii=False) for label, t in headlines
        ),
        encoding="utf-8",
    )
    (tmp_path / "a.csv").write_text(
        "title,topic_idx\n" + "\n".join(f'"{t}",{LABEL_NAMES.index(label)}' for label, t in headlines), encoding="utf-8"
    )
    write_tsv(tmp_path / "a.tsv", headlines)
    write_tsv(tmp_path / "ids.tsv", headlines, label_as_id=True)
    for name in ("a.json", "a.jsonl", "a.csv", "a.tsv", "ids.tsv"):
        data = read_labelled_file(tmp_path / name)
        assert data.texts == expected_texts, name
        assert data.labels.tolist() == expected_ids, name


def test_quoted_title_with_a_tab_is_one_row_and_quotes_inside_titles_are_kept(tmp_path):
    path = tmp_path / "q.tsv"
    path.write_text(
        'label\ttext\n스포츠\t"손흥민\t결승골"\n정치\t국회 "본회의"\n정치\t"""대화 재개"" 촉구"\n', encoding="utf-8"
    )
    data = read_labelled_file(path)
    assert data.texts == ["손흥민 결승골", '국회 "본회의"', '"대화 재개" 촉구']  # the tab, a control character, a space


def test_json_records_are_named_by_their_position(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps([{"title": "손흥민 골", "label": 5}, {"title": "국회", "label": 9}]), encoding="utf-8")
    with pytest.raises(DataError, match="bad.json: record 2: unknown label 9"):
        read_labelled_file(path)


@pytest.mark.parametrize(
    "content, message",
    [
        # YNAT data (all seven names) with a misspelt label: an error, not an eighth class
        ("label\ttext\n" + "".join(f"{n}\t제목\n" for n in LABEL_NAMES) + "과학\t반도체\n", "line 9: unknown label"),
        ("label\ttext\n7\t손흥민 골\n", "line 2: unknown label '7'"),
        ("label\ttext\n정치\t  \n스포츠\t\u200b\n", "every title is empty"),
        ("label\ttext\n스포츠\t손흥민\t골\n", "line 2: 3 field(s), expected 2 (label, text); a title that holds a tab"),
        (
            "label\ttext\n스포츠 손흥민 골\n",
            "line 2: 1 field(s), expected 2 (label, text); the fields must be separated",
        ),
        # Quotes: a stray one, and one left open, which would otherwise swallow the lines up to the next quote.
        ('label\ttext\n정치\t"대화 재개" 촉구\n', "line 2: bad quoting"),
        (
            'label\ttext\n스포츠\t손흥민 골\n정치\t"대화 재개 촉구\n스포츠\t손흥민\n정치\t국회 "\n',
            'line 3: a quote (") opened here closes on line 5',
        ),
        ('label\ttext\n정치\t"대화 재개 촉구\n스포츠\t손흥민\n', 'line 2: a quote (") opened here is never closed'),
        ("topic\ttext\n스포츠\t손흥민 골\n", "no label column"),
        ("label\theadline\n스포츠\t손흥민 골\n", "no title column"),
        ("", "file is empty"),
        ("label\ttext\n", "no data rows"),
    ],
)
def test_bad_input_is_one_clear_error_naming_file_and_row(tmp_path, content, message):
    path = tmp_path / "bad.tsv"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(DataError) as err:
        read_labelled_file(path)
    assert str(path) in str(err.value) and message in str(err.value)
    assert "\n" not in str(err.value)


def test_undecodable_bytes_name_the_line(tmp_path):
    path = tmp_path / "latin.tsv"
    path.write_bytes("label\ttext\n스포츠\t골\n정치\tcaf".encode() + b"\xe9\n")
    with pytest.raises(DataError, match=r"latin.tsv: line 3: undecodable bytes"):
        read_labelled_file(path)


def test_missing_file(tmp_path):
    with pytest.raises(DataError, match="nope.tsv: file not found"):
        read_labelled_file(tmp_path / "nope.tsv")


def test_hub_offline_without_cache_says_to_pass_data_path():
    with pytest.raises(ResourceError, match="data.path="):
        load_hub_split("klue/klue", "ynat", "train")


PINNED_FOLD0_HEAD = [11, 13, 14, 15, 20]


def test_folds_are_stratified_disjoint_and_deterministic():
    labels = np.repeat(np.arange(7), [50, 40, 30, 60, 45, 35, 55])
    folds = stratified_folds(labels, 5, seed=42)
    again = stratified_folds(labels, 5, seed=42)
    assert all((a[0] == b[0]).all() and (a[1] == b[1]).all() for a, b in zip(folds, again))
    # A pinned assignment: the same on every machine and sklearn version we support.
    assert folds[0][1][:5].tolist() == PINNED_FOLD0_HEAD
    validation = np.concatenate([va for _, va in folds])
    assert sorted(validation.tolist()) == list(range(len(labels)))  # every title validated exactly once
    for train, val in folds:
        assert not set(train) & set(val)
        expected = np.bincount(labels) / 5
        assert np.all(np.abs(np.bincount(labels[val], minlength=7) - expected) <= 1)


def test_limit_is_a_stratified_deterministic_subsample(tmp_path):
    from conftest import make_headlines

    data = read_labelled_file(write_tsv(tmp_path / "t.tsv", make_headlines(per_class=20)))
    small = stratified_subsample(data, 70, seed=1)
    assert len(small) == 70
    assert small.texts == stratified_subsample(data, 70, seed=1).texts
    assert np.bincount(small.labels, minlength=7).tolist() == [10] * 7


@pytest.mark.skipif(not SHARED_TRAIN.exists(), reason="../shared/data/klue-ynat-v1.1/train.tsv is not present")
def test_shared_klue_ynat_train_loads_as_it_is():
    data = read_labelled_file(SHARED_TRAIN)
    assert len(data) == 45678
    assert data.class_counts() == {
        "IT과학": 5235,
        "경제": 6118,
        "사회": 5133,
        "생활문화": 5751,
        "세계": 8320,
        "스포츠": 7742,
        "정치": 7379,
    }


def test_a_subsample_or_fold_count_the_classes_cannot_fill_is_one_clear_error(tmp_path):
    from conftest import make_headlines

    data = read_labelled_file(write_tsv(tmp_path / "t.tsv", make_headlines(per_class=3)))
    with pytest.raises(DataError, match=r"t.tsv: data.limit=5: no stratified subsample .*number of classes = 7"):
        stratified_subsample(data, limit=5, seed=0)
    with pytest.raises(DataError, match=r"cv.folds=5: too many folds for 7 titles"):
        stratified_folds(stratified_subsample(data, limit=7, seed=0).labels, folds=5, seed=0)


def test_a_bom_windows_line_ends_and_stray_label_spaces_are_read_as_the_plain_file(tmp_path, headlines):
    plain = read_labelled_file(write_tsv(tmp_path / "plain.tsv", headlines))
    lines = ["label\ttext"] + [f" {label} \t{text}" for label, text in headlines]
    windows = tmp_path / "windows.tsv"
    windows.write_bytes(b"\xef\xbb\xbf" + "\r\n".join(lines).encode("utf-8") + b"\r\n")
    read = read_labelled_file(windows)
    assert read.texts == plain.texts and np.array_equal(read.labels, plain.labels)


def test_other_column_names_are_mapped_and_a_missing_one_says_how(tmp_path, headlines):
    korean = tmp_path / "korean.csv"
    korean.write_text("제목,분류\n" + "\n".join(f'"{t}",{label}' for label, t in headlines) + "\n", encoding="utf-8")
    read = read_labelled_file(korean, title_column="제목", label_column="분류")
    assert read.texts == [t for _, t in headlines]
    with pytest.raises(DataError) as err:
        read_labelled_file(korean)
    assert str(err.value) == (
        f"{korean}: no title column (expected title or text; found 제목, 분류); name yours with data.title_column="
    )


def test_a_directory_passed_as_the_file_says_so(tmp_path):
    with pytest.raises(DataError, match=f"^{tmp_path}: is a directory; pass the file inside it"):
        read_labelled_file(tmp_path)


def test_the_bundled_train_split_is_the_shared_one_and_its_checksum_holds():
    import hashlib
    import lzma

    from klue_tc.data.titles import BUNDLED_TRAIN, BUNDLED_TRAIN_SHA256

    raw = lzma.decompress(BUNDLED_TRAIN.read_bytes())
    assert hashlib.sha256(raw).hexdigest() == BUNDLED_TRAIN_SHA256
    bundled = read_labelled_file(BUNDLED_TRAIN)
    assert len(bundled) == 45_678 and bundled.class_counts()["사회"] == 5133
    if SHARED_TRAIN.exists():
        shared = read_labelled_file(SHARED_TRAIN)
        assert shared.fingerprint() == bundled.fingerprint()  # the same rows, in the same order


def test_offline_without_data_path_falls_back_to_the_bundled_copy_with_one_line(caplog):
    from klue_tc.core.config import DataConfig
    from klue_tc.data.titles import BUNDLED_TRAIN, training_titles, validation_titles

    with caplog.at_level("WARNING"):
        data = training_titles(DataConfig())
        validation = validation_titles(DataConfig())
    assert data.source == str(BUNDLED_TRAIN) and len(data) == 45_678
    assert validation is None  # the validation split stays hub-only
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2 and "bundled with klue_tc" in lines[0] and "data.validation_path=" in lines[1]


def test_titles_are_read_in_one_unicode_form(tmp_path):
    """Hangul typed on macOS arrives as decomposed jamo: the same headline, the same text and hash."""
    rows = [("스포츠", "손흥민 결승골"), ("정치", "국회 본회의 개최")]
    composed, decomposed = tmp_path / "nfc.tsv", tmp_path / "nfd.tsv"
    composed.write_text("label\ttext\n" + "".join(f"{lab}\t{t}\n" for lab, t in rows), encoding="utf-8")
    decomposed.write_text(
        "label\ttext\n" + "".join(f"{lab}\t{unicodedata.normalize('NFD', t)} \ufeff\n" for lab, t in rows),
        encoding="utf-8",
    )
    assert decomposed.read_bytes() != composed.read_bytes()
    a, b = read_labelled_file(composed), read_labelled_file(decomposed)
    assert b.texts == [t for _, t in rows] and a.fingerprint() == b.fingerprint()


def headlines_file(rows=(("스포츠", "손흥민 결승골"), ("정치", "국회 본회의 개최"))) -> str:
    return "label\ttext\n" + "".join(f"{label}\t{title}\n" for label, title in rows)


@pytest.mark.parametrize("encoding", ["cp949", "euc-kr", "utf-16", "utf-8-sig", "utf-32"])
def test_korean_windows_and_unicode_encodings_are_read(tmp_path, encoding, caplog):
    path = tmp_path / f"{encoding}.tsv"
    path.write_bytes(headlines_file().encode(encoding))  # Python's utf-16/32 write a BOM
    data = read_labelled_file(path)
    assert data.texts == ["손흥민 결승골", "국회 본회의 개최"]
    said = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert said == (
        [f"{path}: not UTF-8; read as cp949 (EUC-KR, Korean Windows), whose Hangul it holds"]
        if encoding in ("cp949", "euc-kr")
        else []
    )


@pytest.mark.parametrize(
    "payload, found, iconv",
    [
        (headlines_file().encode("utf-16-le"), "UTF-16LE without a BOM", "iconv -f utf-16le -t utf-8"),
        (headlines_file().encode("utf-16-be"), "UTF-16BE without a BOM", "iconv -f utf-16be -t utf-8"),
        ("label\ttext\n스포츠\tÇa va, Müller?\n".encode("latin-1", "replace"), "legacy encoding", "iconv -f ENCODING"),
    ],
)
def test_an_unreadable_encoding_is_one_line_naming_it_and_the_conversion(tmp_path, payload, found, iconv):
    path = tmp_path / "titles.tsv"
    path.write_bytes(payload)
    with pytest.raises(DataError) as err:
        read_labelled_file(path)
    line = str(err.value)
    assert "\n" not in line and str(path) in line and found in line and iconv in line, line


def test_empty_titles_are_dropped_and_counted_symbol_titles_kept(tmp_path, caplog):
    path = tmp_path / "mixed.tsv"
    path.write_text(
        "label\ttext\n스포츠\t손흥민 골\n정치\t   \n정치\t\u3000\u200b\n스포츠\t⚽🔥\n정치\t?!...\n스포츠\t야구\n",
        encoding="utf-8",
    )
    data = read_labelled_file(path)
    assert data.texts == ["손흥민 골", "⚽🔥", "?!...", "야구"]
    assert [data.label_names[i] for i in data.labels] == ["스포츠", "스포츠", "정치", "스포츠"]
    said = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert said == [
        f"{path}: 2 row(s) with an empty title (column 'text') dropped, first at line 3",
        f"{path}: 2 title(s) hold no letter or digit (only emoji, punctuation or symbols), kept; first at line 5",
    ]


def test_a_bad_label_after_a_dropped_row_names_its_own_line(tmp_path):
    path = tmp_path / "bad.tsv"
    path.write_text("label\ttext\n정치\t \n과학\t반도체\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"bad.tsv: line 3: unknown label '과학'"):
        read_labelled_file(path, label_names=LABEL_NAMES)


# --- files as spreadsheets and editors write them ------------------------------------------------


def warnings_of(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]


def test_a_spreadsheet_csv_with_quoted_line_breaks_quotes_and_commas_reads_as_written(tmp_path, caplog):
    """RFC 4180 as Excel exports it: a BOM, CRLF line ends, a cell's line breaks inside its quotes."""
    path = tmp_path / "export.csv"
    rows = [
        '"손흥민\r\n결승골",스포츠',
        '"국회, ""본회의"" 개최",정치',
        '"삼성전자,\n반도체\n\n  공장 착공",IT과학',
        "코스피 상승 마감,경제",
    ]
    path.write_bytes(b"\xef\xbb\xbf" + "\r\n".join(["title,label", *rows, ""]).encode("utf-8"))
    data = read_labelled_file(path)
    assert data.texts == ["손흥민 결승골", '국회, "본회의" 개최', "삼성전자, 반도체 공장 착공", "코스피 상승 마감"]
    assert [data.label_names[i] for i in data.labels] == ["스포츠", "정치", "IT과학", "경제"]
    assert warnings_of(caplog) == [
        f"{path}: 2 title(s) hold line breaks, kept on one line (each break made a space); first at line 2"
    ]
    # A record after the multi-line ones is named by the line it is on.
    path.write_bytes(path.read_bytes() + "반도체,과학\r\n".encode())
    with pytest.raises(DataError, match=r"export.csv: line 10: unknown label '과학'"):
        read_labelled_file(path, label_names=LABEL_NAMES)


@pytest.mark.parametrize(
    "content, message",
    [
        # The quote on line 2 is never closed: the lines after it would be one title.
        (
            'title,label\n손흥민 골,스포츠\n"국회 본회의,정치\n코스피,경제\n',
            'line 3: a quote (") opened here is never closed',
        ),
        # ... or closed by a later title's quote: the rows between would be swallowed into one title.
        (
            'title,label\n"국회 본회의,정치\n코스피 상승,경제\n반도체 "착공",IT과학\n',
            'line 2: a quote (") opened here runs to line 4, where text follows its closing quote',
        ),
        (
            'title,label\n"국회 본회의,정치\n코스피 상승,경제\n손흥민 "결승골",스포츠\n반도체",IT과학\n',
            'line 2: a quote (") opened here runs to line 4, where text follows',
        ),
        (
            'label\ttext\n정치\t"국회 본회의\n경제\t코스피 상승\n스포츠\t손흥민 골"\n',
            'line 2: a quote (") opened here closes on line 4, so line 3 is read as part of one title',
        ),
        (
            "title,label\n손흥민 골\r결승,스포츠\n국회,정치\n",
            "line 2: 1 field(s), expected 2 (title, label); a carriage return",
        ),
        (
            'title,label\n"손흥민\n골",스포츠,1\n',
            "lines 2-3 (a quoted field over several lines): 3 field(s), expected 2",
        ),
    ],
)
def test_a_broken_csv_names_the_real_cause_and_its_line(tmp_path, content, message):
    path = tmp_path / "broken.csv" if content.startswith("title") else tmp_path / "broken.tsv"
    path.write_text(content, encoding="utf-8", newline="")
    with pytest.raises(DataError) as err:
        read_labelled_file(path)
    assert str(err.value).startswith(f"{path}: ") and message in str(err.value), str(err.value)
    assert "\n" not in str(err.value)


def test_control_and_invisible_characters_are_removed_and_said_once(tmp_path, caplog):
    path = tmp_path / "pasted.tsv"
    path.write_text(
        "text\tlabel\n손흥\u200b민 결승골\u00ad\t스포츠\n국회\x07 본회의\u202e\t정치\n\u200b코스피\ufeff\t경제\n"
        "반도체\x00 공장\tIT과학\n",
        encoding="utf-8",
    )
    data = read_labelled_file(path)
    assert data.texts == ["손흥민 결승골", "국회 본회의", "코스피", "반도체 공장"]
    said = warnings_of(caplog)
    assert said == [
        f"{path}: 1 NUL character(s) removed, first on line 5",
        f"{path}: 2 title(s) hold tabs, control or invisible characters (U+200B first), tabs made spaces and the "
        "rest removed; first at line 2",
    ]
    # Removed wherever a title comes from: the same text and fingerprint as the clean file.
    clean = tmp_path / "clean.tsv"
    clean.write_text(
        "text\tlabel\n" + "".join(f"{t}\t{lab}\n" for t, lab in zip(data.texts, "스포츠 정치 경제 IT과학".split())),
        encoding="utf-8",
    )
    assert read_labelled_file(clean).fingerprint() == data.fingerprint()


def test_an_extremely_long_title_is_cut_and_said_once(tmp_path, caplog):
    from klue_tc.data.titles import MAX_TITLE_CHARS

    path = tmp_path / "article.csv"  # past csv's own field limit (131,072 characters) too
    path.write_text(
        f'title,label\n손흥민 골,스포츠\n"{"국회 본회의, " * 20_000}",정치\n{"경제 " * 400},경제\n', encoding="utf-8"
    )
    data = read_labelled_file(path)
    assert len(data) == 3 and data.texts[0] == "손흥민 골"
    assert all(len(t) <= MAX_TITLE_CHARS for t in data.texts) and data.texts[1].startswith("국회 본회의, 국회")
    assert warnings_of(caplog) == [
        f"{path}: 2 title(s) longer than {MAX_TITLE_CHARS} characters (the longest 159999) cut to their first "
        f"{MAX_TITLE_CHARS}; first at line 3"
    ]


def test_jsonl_titles_with_unicode_line_separators_and_labels_typed_on_macos_are_read(tmp_path):
    path = tmp_path / "titles.jsonl"
    rows = [
        {"title": "손흥민\u2028결승골", "label": unicodedata.normalize("NFD", "스포츠")},
        {"title": "국회", "label": "정치"},
    ]
    path.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows), encoding="utf-8")
    data = read_labelled_file(path, label_names=LABEL_NAMES)
    assert data.texts == ["손흥민 결승골", "국회"] and data.labels.tolist() == [5, 6]


BUNDLED_TITLES_SHA256 = "e9e94d2ea10a7595e7750c5efe37850e3ebaa41d3925bb21029db78d5d6f56d6"


def test_the_bundled_train_split_reads_to_the_same_titles_as_ever():
    """Every stored result is keyed on these titles: reading and normalising must not change one."""
    import hashlib

    from klue_tc.data.titles import BUNDLED_TRAIN

    data = read_labelled_file(BUNDLED_TRAIN)
    digest = hashlib.sha256("".join(f"{t}\n" for t in data.texts).encode("utf-8")).hexdigest()
    assert digest == BUNDLED_TITLES_SHA256 and data.fingerprint() == "370d3256478fe396"


def test_a_spreadsheet_csv_in_a_comma_decimal_locale_is_read_by_its_own_separator(tmp_path):
    """Excel writes `sep=;` first, or separates by semicolons where the comma is the decimal mark."""
    named = tmp_path / "named.csv"
    named.write_bytes(
        b"\xef\xbb\xbf" + 'sep=;\r\ntitle;label\r\n"국회; 본회의";정치\r\n코스피 2,500 돌파;경제\r\n'.encode()
    )
    semicolons = tmp_path / "semicolons.csv"
    semicolons.write_text('title;label\n"국회; 본회의";정치\n코스피 2,500 돌파;경제\n', encoding="utf-8")
    for path in (named, semicolons):
        data = read_labelled_file(path, label_names=LABEL_NAMES)
        assert data.texts == ["국회; 본회의", "코스피 2,500 돌파"] and data.labels.tolist() == [6, 1]
    named.write_bytes(named.read_bytes() + "반도체;과학\r\n".encode())
    with pytest.raises(DataError, match=r"named.csv: line 5: unknown label '과학'"):  # lines keep their numbers
        read_labelled_file(named, label_names=LABEL_NAMES)

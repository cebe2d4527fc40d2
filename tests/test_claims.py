"""The study's claims judged on synthetic records whose answer is planted."""

from __future__ import annotations

import itertools
import re

import numpy as np
import pandas as pd
import pytest
from test_effects import cnn_lower, synthetic_folds

from klue_tc.report.claims import INCONCLUSIVE, NO, REFUTED, REPRODUCED, YES, claims_markdown, judge_claims

INTERVAL = r"[-+]\d\.\d{3,4}\.\.[-+]\d\.\d{3,4}"
EVIDENCE = re.compile(rf"[-+]\d\.\d{{3,4}} \(Holm [\d.]+ % {INTERVAL}; 95 % {INTERVAL}; \d+ matched sets\)")


def verdicts(folds, metric="f1") -> dict[str, str]:
    return {claim.id: claim.verdict for claim in judge_claims(folds, metric)}


def test_a_planted_low_cnn_reproduces_claim_i_with_its_numbers():
    claims = {c.id: c for c in judge_claims(synthetic_folds(cnn_lower))}
    cnn = claims["i"]
    assert cnn.verdict == REPRODUCED
    assert cnn.high < 0 and cnn.cells == 30 and len(cnn.comparisons) == 3
    assert EVIDENCE.search(cnn.evidence) and "cnn − transformer" in cnn.evidence
    assert claims["ii"].verdict == INCONCLUSIVE  # the BLSTM variants tie with the transformer


def test_a_planted_high_cnn_refutes_claims_i_and_ii():
    found = verdicts(synthetic_folds(lambda encoder, *_: 0.03 if encoder == "cnn" else 0.0))
    assert found["i"] == REFUTED and found["ii"] == REFUTED


def test_claim_ii_averages_both_variants_so_none_is_chosen_on_the_records():
    bonus = {"trans_blstm": 0.03, "trans_blstm_parallel": 0.01}
    claims = {c.id: c for c in judge_claims(synthetic_folds(lambda encoder, *_: bonus.get(encoder, 0.0)))}
    assert claims["ii"].verdict == REPRODUCED
    assert "(trans_blstm and trans_blstm_parallel, averaged)" in claims["ii"].statement
    assert claims["ii"].difference == pytest.approx(0.02, abs=0.003) and claims["ii"].low > 0
    # Each variant alone is judged too, its intervals at their Holm levels in the one family.
    assert claims["ii.trans_blstm"].verdict == REPRODUCED
    assert all(e.confidence > 0.95 for e in claims["ii.trans_blstm_parallel"].comparisons)


def test_one_variant_ahead_on_chance_alone_does_not_reproduce_claim_ii():
    """The audit's case: a variant a hair ahead of the CNN should not carry the claim."""
    bonus = {"trans_blstm_parallel": 0.002, "cnn": 0.0, "transformer": -0.01}
    claims = {c.id: c for c in judge_claims(synthetic_folds(lambda encoder, *_: bonus.get(encoder, 0.0), noise=0.01))}
    assert claims["ii"].verdict == INCONCLUSIVE


def test_the_sharp_fall_rule():
    def drop(encoder, ln, layers, tokenizer):
        return -0.05 if encoder.startswith("trans_blstm") and layers >= 5 else 0.0

    fall = verdicts(synthetic_folds(drop))
    assert [fall[k] for k in ("iii", "iii.trans_blstm", "iii.trans_blstm_parallel")] == [REPRODUCED] * 3
    flat = verdicts(synthetic_folds())
    assert [flat[k] for k in ("iii", "iii.trans_blstm", "iii.trans_blstm_parallel")] == [REFUTED] * 3
    assert verdicts(synthetic_folds(noise=0.3, seed=1))["iii.trans_blstm"] == INCONCLUSIVE  # too noisy to tell


def test_pure_noise_leaves_every_question_open():
    # Noise this wide leaves a 1-point equivalence margin unreachable too, so "no" is not earned either.
    found = verdicts(synthetic_folds(noise=0.15, seed=2))
    assert {found[k] for k in ("i", "ii", "v", "iv", "vi", "vi.counts")} == {INCONCLUSIVE}, found


def test_the_readers_questions_find_planted_answers():
    def planted(encoder, ln, layers, tokenizer):
        pre = 0.02 if (encoder, ln) == ("transformer", "pre") else 0.0
        return pre + (0.02 if tokenizer == "mecab" else 0.0) + 0.01 * (layers - 2)

    claims = {c.id: c for c in judge_claims(synthetic_folds(planted))}
    assert claims["iv.transformer"].verdict == YES and claims["iv.cnn"].verdict == NO
    assert claims["v"].verdict == YES and "mecab" in claims["v"].statement
    assert claims["vi"].verdict == YES and claims["vi.counts"].verdict == YES
    assert abs(claims["vi"].difference - 0.04) < 0.005  # 0.01 a layer over 2..6


def test_a_partial_grid_without_cnn_and_a_sparse_validation_metric():
    folds = synthetic_folds(cnn_lower, metric="validation_f1")
    folds.loc[folds.fold == 2, "validation_f1"] = np.nan
    claims = {c.id: c for c in judge_claims(folds[folds.encoder != "cnn"], "validation_f1")}
    assert claims["i"].verdict == INCONCLUSIVE and claims["i"].evidence == "not in these records"
    assert claims["iv"].cells == 45  # 3 encoders x 5 layers x 3 tokenizers
    assert all(c.verdict in {REPRODUCED, REFUTED, INCONCLUSIVE, YES, NO} for c in judge_claims(folds, "absent"))


def test_claims_markdown_has_a_section_per_metric_and_the_scale_caveat():
    folds = synthetic_folds(cnn_lower)
    claims = judge_claims(folds)
    text = claims_markdown(
        {"f1": claims, "validation_f1": judge_claims(folds.rename(columns={"f1": "validation_f1"}), "validation_f1")}
    )
    assert "## CV macro-F1" in text and "## validation macro-F1" in text
    assert "at this scale" in text and "one model of the whole grid" in text
    assert text.count("- **") == 2 * len(claims)
    assert "- **reproduced**: (i) The CNN-augmented encoder is the lowest" in text


def test_every_comparison_is_read_at_its_holm_level_in_one_family():
    """Holm's step-down over every comparison of the claims: the smallest p-value is read at
    1 - 0.05/m, every Holm interval holds the plain 95 % one, and a comparison is on one side of its
    threshold at its Holm level exactly where statsmodels' Holm rejects it."""
    from statsmodels.stats.multitest import multipletests

    from klue_tc.report.claims import Family, two_sided_p

    folds = synthetic_folds(cnn_lower, noise=0.02, seed=3)
    family = Family()
    judge_claims(folds, family=family)
    m = family.size
    family.close()
    claims = judge_claims(folds, family=family)
    held = [e for c in claims for e in c.comparisons]
    # Three tokenizers: all three pairs are in the family before the best is named; two are shown.
    assert len(held) + 1 == m > 20
    assert max(e.confidence for e in held) == pytest.approx(1 - 0.05 / m)
    assert min(e.confidence for e in held) >= 0.95
    raw = [min(two_sided_p(e, t) for t in (0.0,)) for e in held if e.label.startswith("cnn − ")]
    rejected = multipletests(raw, method="holm")[0] if raw else []
    for e, reject in zip([e for e in held if e.label.startswith("cnn − ")], rejected):
        assert (e.high < 0 or e.low > 0) == bool(reject)


def test_a_real_gain_below_the_negligible_margin_is_a_no_not_a_yes():
    """The rule checks "no" first: an interval wholly between 0 and 0.01 is a gain too small to
    change a choice (the verdict its own method line states), not a "yes"."""
    from klue_tc.report.claims import _helps
    from klue_tc.report.grid_model import Contrast

    small = Contrast("4 − 2", 0.004, 0.001, 0.007, cells=16, se=0.0015, df=200)
    assert _helps(small) == NO
    assert _helps(Contrast("4 − 2", 0.016, 0.012, 0.020, cells=16, se=0.002, df=200)) == YES
    assert _helps(Contrast("4 − 2", 0.008, -0.001, 0.017, cells=16, se=0.004, df=200)) == INCONCLUSIVE


def test_a_gain_clear_at_95_percent_but_not_across_the_family_is_inconclusive():
    """One weak planted gain among many comparisons: its plain interval clears zero, its Holm one does not."""

    def weak(encoder, ln, layers, tokenizer):
        return 0.012 if ln == "pre" and encoder == "transformer" else 0.0

    found = {c.id: c for c in judge_claims(synthetic_folds(weak, noise=0.03, seed=17))}
    claim = found["iv.transformer"]
    assert claim.verdict == INCONCLUSIVE, claim.evidence
    assert claim.low < 0 and "; 95 % +" in claim.evidence  # the plain 95 % interval alone would say yes


def test_an_encoder_with_one_cell_so_far_is_a_difference_without_an_interval():
    """One fold per configuration leaves the grid model no residual degrees of freedom: differences
    without intervals, so no verdict."""
    folds = synthetic_folds(cnn_lower)
    first_cnn = folds[folds.encoder == "cnn"].config_hash.iloc[0]
    folds = folds[(folds.encoder != "cnn") | (folds.config_hash == first_cnn)]
    folds = folds[folds.fold == 0]
    cnn = {c.id: c for c in judge_claims(folds)}["i"]
    assert cnn.verdict == INCONCLUSIVE
    assert "cnn − transformer: -0.0" in cnn.evidence and "no interval; 1 matched set" in cnn.evidence
    assert "nan" not in cnn.evidence


def test_two_studies_side_by_side_say_what_changed_and_what_is_not_yet_measured():
    from klue_tc.report.claims import StudyVerdicts
    from klue_tc.report.evidence import judgeable

    scratch = synthetic_folds(cnn_lower)
    # The second study so far: the transformer, where pre-LN now helps, and the CNN under post-LN only.
    pretrained = synthetic_folds(lambda encoder, ln, *_: 0.03 if ln == "pre" else 0.0, seed=5)
    started = (pretrained.encoder == "transformer") | ((pretrained.encoder == "cnn") & (pretrained.ln == "post"))
    pretrained = pretrained[started].assign(classes=7, val_size=1000)
    studies = []
    for name, folds in (("from scratch", scratch.assign(classes=7, val_size=1000)), ("pretrained", pretrained)):
        kept, missing = judgeable(folds, judge_claims(folds))
        studies.append(StudyVerdicts(name, {"f1": kept}, missing))
    text = claims_markdown({"f1": studies[1].judged["f1"]}, studies[1].not_judged, studies)
    table = text.split("## Side by side")[1]
    row_i = next(line for line in table.splitlines() if line.startswith("| (i) "))
    assert "**reproduced**: cnn − " in row_i and "not yet measured: needs the study's encoders" in row_i
    assert row_i.endswith("| not yet measured in pretrained |")
    row_iv = next(
        line for line in table.splitlines() if line.startswith("| (iv) Does pre-LN help at these depths (all")
    )
    assert "**no**: pre − post: " in row_iv and "**yes**: pre − post: +0.03" in row_iv
    assert "no → yes; estimate " in row_iv
    # The CNN's pre-LN part has no matched cells in the second study: unmeasured there, not a verdict.
    row_iv_cnn = next(
        line for line in table.splitlines() if line.startswith("| (iv) Does pre-LN help at these depths (cnn")
    )
    assert row_iv_cnn.endswith("| not yet measured | not yet measured in pretrained |")
    assert "nan" not in table


def grid_with_a_stalled_pretraining(seed: int = 3) -> pd.DataFrame:
    """Encoders x LN x 2/4/6 layers x none/mlm, 3 folds, no planted effect but one: the pretrained
    post-LN TRANS-BLSTM of 4 and 6 layers learns next to nothing (its pretraining stalled)."""
    rng = np.random.default_rng(seed)
    rows = []
    for encoder, ln, layers, pretrain in itertools.product(
        ("transformer", "trans_blstm", "cnn"), ("post", "pre"), (2, 4, 6), ("none", "mlm")
    ):
        # 4 layers at chance; 6 layers a little above it (0.18), but its loss never left ln 7's neighbourhood
        stalled = {("trans_blstm", "post", 4, "mlm"): 0.143, ("trans_blstm", "post", 6, "mlm"): 0.183}
        at = stalled.get((encoder, ln, layers, pretrain))
        for fold in range(3):
            rows.append(
                {
                    "config_hash": f"{encoder}-{ln}-{layers}-{pretrain}",
                    "tokenizer": "mecab",
                    "encoder": encoder,
                    "ln": ln,
                    "head": "cls",
                    "layers": layers,
                    "pretrain": pretrain,
                    "fold": fold,
                    "f1": at if at else 0.75 + rng.normal(0, 0.004),
                    "classes": 7,
                    "val_size": 3000,
                    "best_inner_loss": 1.89 if at else 0.7 + rng.normal(0, 0.02),
                }
            )
    return pd.DataFrame(rows)


def test_every_pretraining_objective_in_the_grid_is_judged_against_scratch_under_its_own_id():
    """(vii) is not keyed on mlm: with one objective it is `vii`, with several each is `vii.<objective>`."""
    from klue_tc.report.interactions import interactions

    one = grid_with_a_stalled_pretraining()
    assert "(vii) Does self-pretraining (mlm) help (all encoders; mlm − none)?" in {
        c.statement for c in judge_claims(one) if c.id == "vii"
    }
    toy = one[one["pretrain"] == "mlm"].assign(
        pretrain="toy", config_hash=lambda f: f["config_hash"] + "-toy", f1=lambda f: f["f1"] + 0.05
    )
    claims = {c.id: c for c in judge_claims(pd.concat([one, toy], ignore_index=True))}
    assert "vii" not in claims and {"vii.mlm", "vii.toy", "vii.toy.cnn"} <= set(claims)
    assert claims["vii.toy"].difference > claims["vii.mlm"].difference + 0.04
    table = interactions(pd.concat([one, toy], ignore_index=True))
    assert {"mlm − none, cnn", "toy − none, cnn"} <= set(table["comparison"])


def test_the_claims_subjects_are_the_encoders_whose_blocks_hold_a_convolution_or_a_blstm(monkeypatch):
    """Encoders of other names, registered with a convolution and a BLSTM in their blocks, are the
    subjects of claims (i)-(iii) and of the questions' checks, as cnn and trans_blstm are."""
    from klue_tc.core.registry import ENCODERS, Variant
    from klue_tc.models.blocks import BLSTMSublayer, ConvSublayer
    from klue_tc.models.encoders.transformer import TransformerConfig
    from klue_tc.report.evidence import QUESTIONS

    ENCODERS.names()  # the built-ins registered before two more join them
    monkeypatch.setitem(
        ENCODERS._variants, "dilated", Variant("dilated", TransformerConfig, lambda cfg: [ConvSublayer(8, 8, 3, 0.0)])
    )
    monkeypatch.setitem(
        ENCODERS._variants, "blstm_mixer", Variant("blstm_mixer", TransformerConfig, lambda cfg: [BLSTMSublayer(8)])
    )
    renamed = {"cnn": "dilated", "trans_blstm": "blstm_mixer"}
    folds = synthetic_folds(lambda encoder, *_: -0.03 if encoder == "cnn" else 0.0)
    folds["encoder"] = folds["encoder"].replace(renamed)
    claims = {c.id: c for c in judge_claims(folds)}
    assert claims["i"].verdict == REPRODUCED and "(dilated − each other encoder)" in claims["i"].statement
    assert "dilated − transformer" in claims["i"].evidence and len(claims["i"].comparisons) == 3
    assert "(blstm_mixer and trans_blstm_parallel, averaged)" in claims["ii"].statement
    assert "(blstm_mixer and trans_blstm_parallel)" in claims["iii"].statement
    questions = {q.id: q for q in QUESTIONS if q.id in ("i", "ii", "iii")}
    assert all(q.has_levels(folds) for q in questions.values())
    assert set(folds.loc[questions["i"].reference(folds), "encoder"]) == {
        "transformer",
        "blstm_mixer",
        "trans_blstm_parallel",
    }
    assert set(folds.loc[questions["ii"].reference(folds), "encoder"]) == {"transformer", "dilated"}

"""Configurations are left out of the report's comparisons only by rules the runs' configs declare
(report.exclude): none by default; declared, they leave out whom they name, and every verdict that
changes is shown both ways."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from test_claims import grid_with_a_stalled_pretraining
from test_report import metrics, verdicts_section, write_metrics

from klue_tc.core.config import ExclusionConfig
from klue_tc.core.errors import ConfigError
from klue_tc.report.exclusions import Declared, apply_exclusions, declared_exclusions
from klue_tc.report.write import effects_of, interactions_of, judge, write_report

BOTH_RULES = Declared(
    ExclusionConfig(near_chance=1.96, stalled_inner_loss=0.9, kept_in=["pretrain"])
)  # the rules the pretraining study's report once applied after its results


def claims_of(verdicts, metric="f1"):
    return {c.id: c for c in verdicts.judged[metric]}


def test_with_no_rule_declared_nothing_is_left_out():
    """The stalled post-LN TRANS-BLSTM cells stay in every comparison: pre − post carries their gap,
    and nothing is named or shown twice."""
    folds = grid_with_a_stalled_pretraining()
    exclusion = apply_exclusions(folds, Declared())
    assert exclusion.left_out == [] and len(exclusion.folds) == len(folds) and exclusion.line() is None
    verdicts = judge(folds, ["f1"], exclusion=exclusion)
    claims = claims_of(verdicts)
    assert claims["iv"].difference > 0.03 and claims["iv"].verdict == "yes"  # the stalls lower post-LN
    assert claims["iii"].verdict == "reproduced"  # the 6-layer stall reads as a fall with depth
    assert verdicts.left_out is None and verdicts.both_ways == {}
    assert not any("declared" in note for note in effects_of(folds, ["f1"], exclusion=exclusion).left_out)
    assert set(interactions_of(folds, ["f1"], {}, None, exclusion)["exclusion"]) == {"none"}


def test_declared_rules_leave_out_whom_they_name_and_each_changed_verdict_is_shown_both_ways():
    folds = grid_with_a_stalled_pretraining()
    exclusion = apply_exclusions(folds, BOTH_RULES)
    assert exclusion.left_out == [
        "mecab / trans_blstm / post / L4 / mlm (0.143): near_chance, stalled_inner_loss",
        "mecab / trans_blstm / post / L6 / mlm (0.183): stalled_inner_loss",
    ]
    assert len(exclusion.folds) == len(folds) - 6 and exclusion.keeps("pretrain") and not exclusion.keeps("ln")
    verdicts = judge(folds, ["f1"], exclusion=exclusion)
    claims = claims_of(verdicts)
    assert abs(claims["iv"].difference) < 0.01 and claims["iii"].verdict == "refuted"
    assert claims["vii.trans_blstm"].difference < -0.05  # kept in pretraining's comparisons, as declared
    assert "the runs' configs declare (report.exclude: " in verdicts.left_out and "but pretrain's" in verdicts.left_out
    changed = verdicts.both_ways["f1"]
    assert changed["iv"].verdict == "yes" and changed["iii"].verdict == "reproduced"
    assert "vii" not in changed and "vii.trans_blstm" not in changed  # the same comparison either way
    from klue_tc.report.claims import claims_markdown
    from klue_tc.report.core_sections.verdicts import verdict_lines

    text = claims_markdown(
        verdicts.judged, verdicts.not_judged, left_out=verdicts.left_out, both_ways=changed and verdicts.both_ways
    )
    iv = text.split("(iv) Does pre-LN help at these depths (all encoders; pre − post)?")[1].splitlines()
    assert iv[1].strip().startswith("- without the declared exclusion: **yes**: pre − post: +0.")
    line = next(line for line in verdict_lines(verdicts) if "verdicts the declared exclusion changes" in line)
    assert "(iii) refuted" in line and "reproduced (-0.0" in line and "(iv) no" in line
    table = interactions_of(folds, ["f1"], {}, None, exclusion)
    assert set(table["exclusion"]) == {"declared", "none"}
    declared = table[(table.exclusion == "declared") & (table.family == "LN × layers")]
    assert "left out: trans_blstm / mecab / mlm (no post 4, post 6)" in declared["matched"].iloc[0]
    everything = table[(table.exclusion == "none") & (table.family == "LN × layers")]
    assert "left out" not in everything["matched"].iloc[0]
    from klue_tc.report.core_sections.interactions import interaction_lines

    both = "\n".join(interaction_lines(table)).split("The declared exclusion changes these verdicts")[1]
    assert "without the declared exclusion: CV macro-F1, LN × layers: depth works differently" in both
    assert "pretrain × encoder" not in both  # kept in pretraining's comparisons: the same verdict both ways


def test_the_f1_rule_alone_names_only_the_cell_at_chance():
    """The 6-layer cell (0.183) clears 1/7 by far more than its noise: only the inner-loss rule names it."""
    exclusion = apply_exclusions(grid_with_a_stalled_pretraining(), Declared(ExclusionConfig(near_chance=1.96)))
    assert exclusion.left_out == ["mecab / trans_blstm / post / L4 / mlm (0.143): near_chance"]


def write_declared_grid(directory: Path, exclude: dict | None, at_chance: float = 0.10) -> None:
    """A transformer at 2 and 4 layers, post- and pre-LN; post-LN at 4 layers scores `at_chance`;
    each configuration's config.yaml declares `exclude` (no report section where None)."""
    rng = np.random.default_rng(0)
    for ln in ("post", "pre"):
        for layers in (2, 4):
            low = (ln, layers) == ("post", 4)
            folds = [(k, at_chance if low else 0.75 + rng.normal(0, 0.002)) for k in range(3)]
            job = directory / f"{ln}-{layers}"
            write_metrics(job, metrics("mecab", "transformer", ln, layers, folds))
            config = {"data": {"limit": 300}, "cv": {"folds": 3}}
            if exclude is not None:
                config["report"] = {"exclude": exclude}
            (job / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")


@pytest.mark.integration
def test_the_report_reads_the_declared_rules_from_the_runs_configs_and_shows_both_ways(tmp_path):
    write_declared_grid(tmp_path, {"near_chance": 1.96})
    assert declared_exclusions(tmp_path).rules.rules == {"near_chance": 1.96}
    write_report(tmp_path, baseline=False)
    markdown = (tmp_path / "report.md").read_text(encoding="utf-8")
    verdicts = verdicts_section(markdown)
    assert (
        "1 configuration(s) left out of every comparison by the exclusion rules the runs' configs declare" in verdicts
    )
    assert "mecab / transformer / post / L4 / none (0.100): near_chance" in verdicts
    assert "verdicts the declared exclusion changes: (iv) no" in verdicts and "yes (+0.3" in verdicts
    claims = (tmp_path / "claims.md").read_text(encoding="utf-8")
    assert "  - without the declared exclusion: **yes**: pre − post: +0.3" in claims
    interactions = markdown.split("## Interactions")[1]
    assert "- with the declared exclusion, CV macro-F1, LN × layers: no matched set" in interactions
    assert "- without the declared exclusion: CV macro-F1, LN × layers: depth works differently" in interactions


@pytest.mark.integration
def test_without_a_declaration_the_report_leaves_nothing_out(tmp_path):
    write_declared_grid(tmp_path, None)
    write_report(tmp_path, baseline=False)
    verdicts = verdicts_section((tmp_path / "report.md").read_text(encoding="utf-8"))
    assert "left out" not in verdicts and "declared" not in verdicts
    assert "- CV macro-F1: (iv) yes" in verdicts or "(iv) yes" in verdicts


@pytest.mark.integration
def test_runs_that_declare_different_rules_get_none_applied_and_the_report_says_so(tmp_path):
    write_declared_grid(tmp_path, {"near_chance": 1.96})
    other = tmp_path / "pre-2" / "config.yaml"
    other.write_text(yaml.safe_dump({"data": {"limit": 300}, "cv": {"folds": 3}}), encoding="utf-8")
    declared = declared_exclusions(tmp_path)
    assert declared.rules.rules == {} and "declare different exclusion rules" in declared.conflict
    write_report(tmp_path, baseline=False)
    verdicts = verdicts_section((tmp_path / "report.md").read_text(encoding="utf-8"))
    assert "declare different exclusion rules" in verdicts and "none applied" in verdicts
    assert "(iv) yes" in verdicts


@pytest.mark.parametrize(
    "override, message",
    [
        ("report.exclude.kept_in=[depth]", "report.exclude.kept_in must be one of encoder, ln, layers"),
        ("report.exclude.near_chance=-1", r"report.exclude.near_chance \(z\) must be >= 0"),
        ("report.exclude.stalled_inner_loss=2", r"stalled_inner_loss \(share of ln K\) must be in \(0, 1\]"),
    ],
)
def test_a_bad_declaration_is_one_line_at_start_up(tmp_path, override, message):
    from jobs import compose_job
    from klue_tc.core.config import validate

    with pytest.raises(ConfigError, match=message) as raised:
        validate(compose_job(["+experiment=transformer", "logger=none", override], tmp_path / "run"))
    assert "\n" not in str(raised.value)


def test_a_sweep_file_s_declaration_is_in_every_job_s_config_outside_the_results_key(tmp_path):
    from jobs import compose_job
    from klue_tc.core.config import job_config, validate
    from klue_tc.store.results import config_hash

    plain = validate(compose_job(["+experiment=transformer", "logger=none"], tmp_path / "a"))
    overrides = ["+experiment=transformer", "logger=none", "report.exclude.near_chance=3"]
    cfg = compose_job(overrides, tmp_path / "b")
    declared = validate(cfg)
    assert declared.report.exclude.rules == {"near_chance": 3.0}
    assert job_config(cfg)["report"]["exclude"]["near_chance"] == 3.0  # what config.yaml holds
    assert config_hash(declared, "data", "32-true") == config_hash(plain, "data", "32-true")

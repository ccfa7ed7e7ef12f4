"""Which claims decide a gathered study (results/report.py family_of): the claims.json recorded beside
its runs when they started (looked for up to three folders above each run, never above the folder
`resnet report` was given), with a note where the study file's claims have changed since; with
none recorded, the study file's claims as they are now, with a note saying so. The claims.json
files are written by hand here."""

import json
from pathlib import Path

from resnet_cli.results import report
from resnet_cli.results.records import SeedResult
from resnet_cli.sweep import plan as plan_mod
from resnet_cli.sweep import study_file

ONE = {"better": "original (identity)", "worse": "constant scaling 0 / 1 (plain)", "metric": "test_error",
       "source": "He 2016b Table 1"}


def claims(folder: Path, members: list[dict], study="shortcut", preset="quick", source="shortcut",
           sha256="f00d") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    record = {"study": study, "preset": preset, "declared": True, "size": len(members), "effect": 1.5,
              "file_sha256": sha256, "claims": members, **({"source": source} if source else {})}
    (folder / "claims.json").write_text(json.dumps(record))
    return folder / "claims.json"


def table(*paths: Path, study="shortcut", preset="quick"):
    recs = [SeedResult(path=p, study=study, title=study, preset=preset, paper_metric=None, index=1,
                       row="original (identity)", seed=s, paper=None, status="completed", test_error=5.0)
            for s, p in enumerate(paths)]
    [t] = report.aggregate(recs)
    return t


def now_members(study="shortcut", preset="quick") -> list[dict]:
    family = plan_mod.plan(study, preset).family
    return [{"better": m.better, "worse": m.worse, "metric": m.metric, "source": m.source} for m in family.members]


def test_claims_recorded_beside_the_runs_decide(tmp_path):
    claims(tmp_path / "res", [ONE])
    fam = report.family_of(table(tmp_path / "res" / "01-a-s0"))
    assert (fam.declared, fam.recorded, fam.effect, fam.file_sha256, fam.size) == (True, True, 1.5, "f00d", 1)
    assert [m.key() for m in fam.members] == [(ONE["better"], ONE["worse"], "test_error")]
    assert fam.note == (f"the study file's claims (15) differ from those recorded in {tmp_path / 'res' / 'claims.json'} "
                        "when these runs started (1): the recorded family decides")


def test_recorded_claims_that_match_the_study_file_decide_without_a_note(tmp_path):
    sha = plan_mod.plan("shortcut", "quick").family.file_sha256
    claims(tmp_path / "res", now_members(), sha256=sha)
    fam = report.family_of(table(tmp_path / "res" / "01-a-s0"))
    assert (fam.recorded, fam.note, fam.size, fam.effect) == (True, None, 15, 1.5)


def test_the_same_claims_from_a_changed_study_file_decide_and_say_the_file_changed(tmp_path):
    sha = plan_mod.plan("shortcut", "quick").family.file_sha256
    claims(tmp_path / "res", now_members())  # recorded as f00d
    fam = report.family_of(table(tmp_path / "res" / "01-a-s0"))
    assert (fam.recorded, fam.size) == (True, 15)
    assert fam.note == (f"the study file changed after {tmp_path / 'res' / 'claims.json'} was recorded (sha256 f00d "
                        f"then, {sha[:12]} now); its claims are the same")


def test_recorded_claims_with_no_study_file_to_compare_decide_without_a_note(tmp_path):
    claims(tmp_path / "res", [ONE], source=None)
    fam = report.family_of(table(tmp_path / "res" / "01-a-s0"))
    assert (fam.recorded, fam.note, fam.size) == (True, None, 1)
    claims(tmp_path / "gone", [ONE], preset="no-such-preset", source="shortcut")
    fam = report.family_of(table(tmp_path / "gone" / "01-a-s0", preset="no-such-preset"))
    assert (fam.recorded, fam.note, fam.size) == (True, None, 1)


def test_claims_are_looked_for_three_folders_up_and_never_above_the_root_given(tmp_path):
    run = tmp_path / "res" / "sub" / "deep" / "01-a-s0"
    claims(tmp_path / "res", [ONE])
    assert report.family_of(table(run)).size == 1  # res is the run's third folder up
    assert report.family_of(table(run), root=tmp_path / "res").size == 1
    above = report.family_of(table(run), root=tmp_path / "res" / "sub")  # res is above the root
    assert (above.recorded, above.size) == (False, 15)
    [res] = report.results(table(run).rows[0].runs, root=tmp_path / "res" / "sub")
    assert len(res.comparison["claims"]) == 15
    claims(tmp_path / "res" / "sub" / "deep", [ONE, {**ONE, "worse": "exclusive gating"}])  # nearest wins
    assert report.family_of(table(run), root=tmp_path / "res" / "sub").size == 2
    [res] = report.results(table(run).rows[0].runs, root=tmp_path / "res" / "sub" / "deep")
    assert len(res.comparison["claims"]) == 2


def test_a_run_at_the_root_does_not_end_the_search_for_the_next_runs_claims(tmp_path):
    claims(tmp_path / "sub", [ONE])
    fam = report.family_of(table(tmp_path / "01-a-s0", tmp_path / "sub" / "01-a-s1"), root=tmp_path)
    assert (fam.recorded, fam.size) == (True, 1)


def test_claims_one_folder_too_far_up_or_of_another_study_are_not_the_runs(tmp_path):
    claims(tmp_path, [ONE])  # four folders up from the run
    run = tmp_path / "a" / "b" / "c" / "01-a-s0"
    assert report.family_of(table(run)).recorded is False
    claims(tmp_path / "a" / "b" / "c", [ONE], study="projection")
    claims(tmp_path / "a" / "b", [ONE], preset="paper")
    claims(tmp_path / "a", [ONE, {**ONE, "worse": "exclusive gating"}])
    assert report.family_of(table(run)).size == 2  # the only one for this study and preset


def test_with_no_claims_recorded_the_study_files_claims_decide_and_say_so(tmp_path):
    fam = report.family_of(table(tmp_path / "01-a-s0"))
    assert (fam.recorded, fam.size, fam.declared) == (False, 15, True)
    assert fam.note == ("no claims were recorded with these runs (claims.json): the study file's claims as they "
                        "are now decide")
    paper = report.family_of(table(tmp_path / "01-a-s0", preset="paper"))
    assert paper.size == plan_mod.plan("shortcut", "paper").family.size


def test_runs_of_no_study_or_of_a_study_this_version_lacks_have_no_claims(tmp_path):
    claims(tmp_path, [ONE], study="runs", preset="-")
    assert report.family_of(table(tmp_path / "01-a-s0", study="runs", preset="-")) is None
    assert report.family_of(table(tmp_path / "x" / "01-a-s0", study="my-study")) is None
    mine = tmp_path / "mine.yaml"  # a study file of one's own is never guessed at: its claims.json decides
    mine.write_text((Path(study_file.studies_dir()) / "shortcut.yaml").read_text())
    assert report.family_of(table(tmp_path / "x" / "01-a-s0", study=str(mine))) is None
    assert report.family_of(table(tmp_path / "x" / "01-a-s0", preset="no-such-preset")) is None

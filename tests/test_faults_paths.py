"""Text from a study file that becomes part of a run directory's path (grid axis names and values,
labels, study and preset names) never puts a run outside --out (issue 78, item 1): each is refused in
one line, exit 2, before anything is written, or made safe (labels are slugged)."""

import pytest

from resnet_cli.sweep import plan as study_mod

from invoking import invoke

HEAD = """
spec:
  model: {family: digits, depth: 4, widths: [4]}
  data: {dataset: digits, train_subset: 128, test_subset: 60}
  optim: {epochs: 1, batch_size: 64, warmup_iters: 0, milestones: []}
seeds: [0]
"""


def grid(value: str, run_dir: str = "{net}/s{seed}") -> str:
    return HEAD + f'grid:\n  net: {{"{value}": {{}}}}\nrun_dir: "{run_dir}"\n'


def everything_under(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.mark.parametrize("text, needle", [
    (grid("../outside"), "grid axis 'net' value '../outside'"),
    (grid("../../../../tmp/x/ESCAPED"), "grid axis 'net' value '../../../../tmp/x/ESCAPED'"),
    (grid(".."), "grid axis 'net' value '..'"),
    (grid("/abs/ESCAPED"), "grid axis 'net' value '/abs/ESCAPED'"),
    (grid("a\\\\b"), "grid axis 'net' value 'a\\\\b'"),  # a\b: a separator on Windows
    (grid("..", run_dir="x{net}/{net}/s{seed}"), "grid axis 'net' value '..'"),
    (HEAD + 'grid:\n  data.dataset: ["../outside"]\nrun_dir: "{dataset}/s{seed}"\n',
     "grid axis 'dataset' value '../outside'"),
    (HEAD + 'grid:\n  "../../outside": [1]\n', "empty key segment"),
])
def test_a_value_that_would_leave_out_is_one_line_and_nothing_is_written(in_tmp, text, needle):
    (in_tmp / "s.yaml").write_text(text)
    before = everything_under(in_tmp)
    result = invoke("ablate", in_tmp / "s.yaml", "--out", in_tmp / "res" / "deep")
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1 and needle in result.output, result.output
    assert everything_under(in_tmp) == before  # not the run directory, not --out, nothing outside


def test_a_preset_name_with_a_path_is_refused_where_it_names_the_results_folder(in_tmp):
    (in_tmp / "s.yaml").write_text(HEAD + "rows: [{label: a}]\npresets:\n  ../../../outside: {}\n")
    result = invoke("ablate", in_tmp / "s.yaml", "--preset", "../../../outside")
    assert result.exit_code == 2 and "the preset name '../../../outside'" in result.output, result.output
    assert everything_under(in_tmp) == ["s.yaml"]


@pytest.mark.parametrize("label", ["../../../../tmp/x/ESCAPED", "/etc/passwd", "..", "a/../../b"])
def test_labels_are_slugged_to_one_component_below_out(in_tmp, label):
    (in_tmp / "s.yaml").write_text(HEAD + f'rows: [{{label: "{label}"}}]\n')
    run = study_mod.plan(str(in_tmp / "s.yaml"), results=in_tmp / "res").runs[0]
    assert run.path.parent == in_tmp / "res" and run.path.name not in (".", "..")  # one component, below --out


@pytest.mark.parametrize("label, folder", [
    ("Größe 3", "01-größe-3-s0"),  # readable, not "01-gr-e-3-s0"
    ("ñ ç đ", "01-ñ-ç-đ-s0"),
    ("constant scaling 0.5 / 1", "01-constant-scaling-0.5-1-s0"),  # ASCII labels as before
    ("a_b (c)", "01-a-b-c-s0"),
])
def test_labels_keep_readable_letters_of_any_script(in_tmp, label, folder):
    (in_tmp / "s.yaml").write_text(HEAD + f'rows: [{{label: "{label}"}}]\n')
    assert study_mod.plan(str(in_tmp / "s.yaml"), results=in_tmp / "res").runs[0].path.name == folder


@pytest.mark.parametrize("below, ok", [("a/s0", True), ("a/../b/s0", True), ("a/../../x", False), ("", False),
                                        ("/tmp/x", False), ("../res-other/s0", False)])
def test_the_last_guard_takes_only_paths_below_the_results_folder(tmp_path, below, ok):
    from resnet_cli.errors import UserError
    from resnet_cli.sweep.safe_path import inside

    root = tmp_path / "res"
    if ok:
        assert inside(root, root / below, "s") == root / below
    else:
        with pytest.raises(UserError, match="not inside the results directory"):
            inside(root, root / below, "s")

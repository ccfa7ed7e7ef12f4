"""Numbers are checked at the spec (issue 78): inf, NaN and values beyond what the run's float32
tensors and int64 seeds hold are refused in one line naming the field and the valid range, however
YAML spells them, on every route in (--set, a spec file, a study's seeds, --seeds)."""

import pytest

from resnet_cli import spec as spec_mod
from resnet_cli.errors import UserError
from resnet_cli.spec import seeds
from resnet_cli.sweep import plan as study_mod

from invoking import invoke

BASE = "digits/residual8"


@pytest.mark.parametrize("item, needle", [
    ("optim.lr=1e308", "optim.lr: beyond float32's range; valid: |x| <= 3.4e38"),
    ("optim.lr=3.5e38", "optim.lr: beyond float32's range"),
    ("optim.lr=1e400", "optim.lr: not a finite number; valid: a finite number"),  # read as inf
    ("optim.lr=.inf", "optim.lr: not a finite number"),
    ("optim.lr=-.Inf", "optim.lr: not a finite number"),
    ("optim.lr=.nan", "optim.lr: not a finite number"),
    ("optim.weight_decay=.NaN", "optim.weight_decay: not a finite number"),
    ("model.shortcut.gate_bias=-1e39", "model.shortcut.gate_bias: beyond float32's range"),
    ("run.seed=99999999999999999999999", "run.seed: beyond int64's range; valid: |x| <= 9223372036854775807"),
    ("model.widths=[4, 99999999999999999999999]", "model.widths: beyond int64's range"),
    ("optim.lr=inf", "optim.lr"),  # a string in YAML 1.2, refused as before
])
def test_a_number_the_run_cannot_hold_is_one_line_naming_the_field(item, needle):
    r = invoke("train", BASE, "--set", item, "--dry-run")
    assert r.exit_code == 2 and needle in r.output and len(r.output.strip().splitlines()) == 1, r.output


@pytest.mark.parametrize("item", ["optim.lr=3.4e38", "run.seed=9223372036854775807", "optim.lr=1e-30"])
def test_the_largest_numbers_in_range_are_taken(item):
    key, value = spec_mod.parse_set(item)
    tree = {}
    spec_mod.set_dotted(tree, key, value)
    loaded = spec_mod.load(spec_mod.merge(spec_mod.load_tree(BASE), tree), name="t")
    assert spec_mod.to_tree(loaded)[key.split(".")[0]][key.split(".")[1]] == value


def test_seeds_beyond_int64_are_refused_on_the_command_line_and_in_a_study(in_tmp):
    with pytest.raises(UserError, match=r"--seeds 0,9223372036854775808: seed 9223372036854775808 is out of range"):
        seeds.parse("0,9223372036854775808")
    assert seeds.parse("9223372036854775807") == [2**63 - 1]
    (in_tmp / "s.yaml").write_text("spec:\n  model: {family: digits, depth: 4, widths: [4]}\n  data: {dataset: digits}\n"
                                   "seeds: [0, 99999999999999999999999]\nrows: [{label: a}]\n")
    with pytest.raises(UserError, match="seed 99999999999999999999999 is out of range; valid: 0 to"):
        study_mod.plan(str(in_tmp / "s.yaml"), results=in_tmp / "res")
    r = invoke("ablate", in_tmp / "s.yaml", "--out", in_tmp / "res")
    assert r.exit_code == 2 and not (in_tmp / "res").exists()  # no run directory left behind

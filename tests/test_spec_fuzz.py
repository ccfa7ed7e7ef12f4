"""Property-based: any input to the spec loader validates or gives the one-line error, never a traceback."""

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from resnet_cli import spec as S
from resnet_cli import yamlio
from resnet_cli.errors import UserError

KEYS = ["model", "data", "optim", "train", "run", "depth", "unit", "shortcut", "kind", "lr", "iters", "epochs",
        "milestones", "widths", "family", "block", "downsample", "seed", "device", "dataset", "batch_size",
        "gate_bias", "synthetic", "image_size", "bogus", ""]
scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=True),
                    st.text(max_size=12), st.sampled_from(["1e-4", "full_preact", "none", "B", "cuda:0", "auto"]))
trees = st.recursive(scalars, lambda kids: st.one_of(st.lists(kids, max_size=4),
                                                     st.dictionaries(st.sampled_from(KEYS), kids, max_size=5)),
                     max_leaves=20)
FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def one_line_or_valid(fn):
    try:
        fn()
    except UserError as exc:
        assert exc.message and "\n" not in exc.message


@FAST
@given(trees)
def test_any_tree_validates_or_gives_one_line(tree):
    one_line_or_valid(lambda: S.resolve(S.validate(tree)))


@FAST
@given(st.text(max_size=200))
def test_any_text_parses_or_gives_one_line(text):
    one_line_or_valid(lambda: S.validate(yamlio.loads(text)))


@FAST
@given(trees)
def test_any_yaml_document_of_a_tree_round_trips_the_loader(tree):
    text = yaml.safe_dump(tree)
    one_line_or_valid(lambda: S.validate(yamlio.loads(text)))


@FAST
@given(st.lists(st.text(max_size=30), max_size=4))
def test_any_set_items_give_a_spec_or_one_line(items):
    one_line_or_valid(lambda: S.build(None, [], items))

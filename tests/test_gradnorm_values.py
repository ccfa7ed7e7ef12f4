"""analysis/gradnorm/norms.py on hand-made measurements: the JSON rows (each unit input relative to
the last), the summary line (first and last main-path layer, the median over every weight layer,
the input ratio) and `resnet gradnorm`'s figure read back from matplotlib (He 2016b Fig. 2's
lambda^(L-l) dotted; a ViT's per-block MLP output layer, Xiong et al. 2020 Fig. 3)."""

import pytest

from resnet_cli.analysis import gradnorm as G

from drawn import drawn_figure


def layer(label, index, grad, path="main"):
    return {"label": label, "index": index, "path": path, "kind": "conv", "grad_norm": grad, "weight_norm": 1.0}


SCALED = G.NetNorms(name="scale:0.5", params=1000, depth=8, units=3,
                    layers=[layer("stem.0", 1, 0.5), layer("units.0.gate", 2, 8.0, path="shortcut"),
                            layer("units.0.branch.0", 3, 0.25), layer("fc", 4, None), layer("head", 5, 2.0),
                            layer("units.2.shortcut.proj", 6, 16.0, path="shortcut")],
                    inputs=[0.125, 0.25, 0.5, 1.0], direct=[0.125, 0.25, 0.5, 1.0], steps=2, loss=2.3,
                    status="completed")
PLAIN = G.NetNorms(name="plain", params=900, depth=8, units=3, layers=[layer("stem.0", 1, 4.0)],
                   inputs=[2.0, None, 1.0, 4.0], direct=None, steps=1, loss=2.4, status="completed")


def test_rows_give_each_layer_then_each_units_input_relative_to_the_last():
    got = G.rows([PLAIN])
    assert got[0] == {"spec": "plain", **layer("stem.0", 1, 4.0)}
    assert [(r["layer"], r["index"], r["grad_norm"], r["relative"]) for r in got[1:]] == [
        ("x_0", 0, 2.0, 0.5), ("x_1", 1, None, None), ("x_2", 2, 1.0, 0.25), ("x_3", 3, 4.0, 1.0)]
    assert all(r["path"] == "input" and r["kind"] == "dE/dx" and "direct_term" not in r for r in got[1:])
    assert G.rows([G.NetNorms("no inputs", 1, 2, 0, [layer("fc", 1, 3.0)], [], None, 1, 0.0, "completed")]) == [
        {"spec": "no inputs", **layer("fc", 1, 3.0)}]  # no unit measured: its weight layers alone
    scaled = G.rows([SCALED])
    assert [r["direct_term"] for r in scaled if r["path"] == "input"] == [0.125, 0.25, 0.5, 1.0]


def test_the_summary_takes_first_and_last_from_the_main_path_and_the_median_over_all_layers():
    s = G.summary_row(SCALED)
    # main path with a figure: stem 0.5 ... head 2.0; every weight layer with one: 0.25, 0.5, 2.0, 8.0, 16.0
    assert (s["first_layer"], s["last_layer"], s["weight_layers"]) == (0.5, 2.0, 5)
    assert (s["median_layer"], s["min_layer"], s["max_layer"]) == (2.0, 0.25, 16.0)
    assert (s["input_ratio"], s["direct_term"], s["steps"], s["params"]) == (0.125, 0.125, 2, 1000)
    even = G.summary_row(G.NetNorms("even", 1, 2, 0, SCALED.layers[:2], [], None, 1, 0.0, "completed"))
    assert even["median_layer"] == (0.5 + 8.0) / 2  # an even count: the mean of the two middle ones
    assert G.summary_row(PLAIN)["input_ratio"] == 0.5 and G.summary_row(PLAIN)["direct_term"] is None
    assert (s["spec"], s["depth"], s["units"], s["loss"], s["status"]) == ("scale:0.5", 8, 3, 2.3, "completed")
    # the first input not measured (every step's norm missing): no ratio, whatever the last one is
    assert G.summary_row(G.NetNorms("x0", 1, 2, 1, [], [None, 2.0], None, 1, 0.0, "completed"))["input_ratio"] is None
    empty = G.summary_row(G.NetNorms("none", 1, 2, 0, [], [], None, 1, 0.0, "diverged"))
    assert (empty["first_layer"], empty["median_layer"], empty["input_ratio"], empty["status"]) == (
        None, None, None, "diverged")


def test_the_figure_draws_main_path_layers_and_inputs_relative_to_the_last(monkeypatch, tmp_path):
    fig = drawn_figure(monkeypatch, lambda path: G.figure([SCALED, PLAIN], path), tmp_path / "g.png")
    ax_w, ax_x = fig.axes
    lines_w = {ln.get_label(): (list(ln.get_xdata()), list(ln.get_ydata())) for ln in ax_w.get_lines()}
    assert lines_w == {"scale:0.5": ([1, 3, 5], [0.5, 0.25, 2.0]), "plain": ([1], [4.0])}  # no gate, no empty fc
    lines_x = {ln.get_label(): (list(ln.get_xdata()), list(ln.get_ydata()), ln.get_linestyle())
               for ln in ax_x.get_lines()}
    assert lines_x == {"scale:0.5": ([0, 1, 2, 3], [0.125, 0.25, 0.5, 1.0], "-"),
                       "scale:0.5: lambda^(L-l)": ([0, 1, 2, 3], [0.125, 0.25, 0.5, 1.0], ":"),
                       "plain": ([0, 2, 3], [0.5, 0.25, 1.0], "-")}
    assert ax_w.get_yscale() == ax_x.get_yscale() == "log"
    assert (ax_w.get_xlabel(), ax_w.get_title()) == ("weight layer (1 = first conv)", "gradient norm of each weight layer")
    assert (ax_x.get_ylabel(), ax_x.get_title()) == ("||dE/dx_l|| / ||dE/dx_L||", "gradient reaching each unit's input")
    assert (ax_w.get_ylabel(), ax_x.get_xlabel()) == ("||dE/dW||", "unit l (input x_l)")
    # one colour per net in both panels, its lambda^(L-l) dotted in the same colour
    colours = {(ax is ax_w, ln.get_label()): ln.get_color() for ax in (ax_w, ax_x) for ln in ax.get_lines()}
    assert colours == {(True, "scale:0.5"): "C0", (False, "scale:0.5"): "C0", (False, "scale:0.5: lambda^(L-l)"): "C0",
                       (True, "plain"): "C1", (False, "plain"): "C1"}
    assert [t.get_text() for t in ax_x.get_legend().get_texts()] == ["scale:0.5", "scale:0.5: lambda^(L-l)", "plain"]


def test_a_vits_figure_draws_each_blocks_mlp_output_layer(monkeypatch, tmp_path):
    vit = G.NetNorms(name="pre_ln", params=1, depth=3, units=3, steps=1, loss=1.0, status="completed", direct=None,
                     layers=[layer("patch", 1, 9.0), layer("block0.mlp.fc1", 2, 5.0), layer("block0.mlp.fc2", 3, 0.5),
                             layer("block1.mlp.fc2", 6, 0.25), layer("block10.mlp.fc2", 9, 0.125)],
                     inputs=[])
    fig = drawn_figure(monkeypatch, lambda path: G.figure([vit], path), tmp_path / "v.png")
    ax_w, ax_x = fig.axes
    ((xs, ys),) = [(list(ln.get_xdata()), list(ln.get_ydata())) for ln in ax_w.get_lines()]
    assert (xs, ys) == ([0, 1, 10], [0.5, 0.25, 0.125])
    assert ax_w.get_xlabel() == "block" and ax_w.get_title() == "gradient norm of each block's MLP fc2"
    assert (ax_w.get_ylabel(), ax_w.get_yscale()) == ("||dE/dW||", "log")
    assert [ln.get_color() for ln in ax_w.get_lines()] == ["C0"]
    assert [t.get_text() for t in ax_w.get_legend().get_texts()] == ["pre_ln"]
    assert ax_x.get_lines() == [] and ax_x.get_legend() is None  # no unit inputs measured: nothing to draw


@pytest.mark.parametrize("scale,expected", [(0.5, [0.125, 0.25, 0.5, 1.0]), (2.0, [8.0, 4.0, 2.0, 1.0])])
def test_the_shortcut_only_term_is_lambda_to_the_units_left(scale, expected):
    """He 2016b eq. 5: through L - l units each scaling its shortcut by lambda, lambda^(L-l); L = 3."""
    from resnet_cli import spec as S

    spec = S.resolve(S.validate({"model": {"depth": 20, "shortcut": {"kind": "scale",
                                                                      "shortcut_scale": scale}}}))
    assert G.direct_term(spec, 3) == pytest.approx(expected)
    assert G.direct_term(S.resolve(S.validate({})), 3) is None  # identity: no scaling term


def test_an_unknown_variant_names_every_valid_one():
    """Every name docs/gradnorm.md gives (He 2016b Tables 1 and 2) is listed, each on its own."""
    from resnet_cli.errors import UserError

    with pytest.raises(UserError) as bad:
        G.variant_tree({}, "resnet")
    head, _, valid = str(bad.value).partition("; valid: ")
    names, _, tail = valid.partition(" (")
    assert head == "--variant resnet: unknown name 'resnet'"
    assert tail == "with :value for scale, gates and dropout; join with +)"
    documented = {"original", "bn_after_add", "relu_before_add", "relu_preact", "full_preact", "plain", "identity",
                  "scale", "exclusive_gate", "shortcut_gate", "conv1x1", "dropout", "highway"}
    assert documented <= set(names.split(", "))

"""The docs: a page per command, links and images that resolve, generated sections that the
generator knows, no citations of notes users do not have, and the generator's renderers checked on
small hand-made JSON (nothing trains here)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import typer

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
sys.path.insert(0, str(ROOT / "tools"))

import docs_tables  # noqa: E402
import docs_jobs  # noqa: E402
import renderers as R  # noqa: E402
import renderers_studies as S  # noqa: E402

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HTML_SRC = re.compile(r"<img[^>]*\ssrc=\"([^\"]+)\"")


def _commands() -> list[str]:
    """The commands `resnet --help` lists (hidden ones excluded, as the help excludes them)."""
    from resnet_cli.cli import app

    group = typer.main.get_command(app)
    ctx = group.make_context("resnet", [], resilient_parsing=True)
    return [name for name in group.list_commands(ctx) if not group.get_command(ctx, name).hidden]


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = page.read_text(encoding="utf-8")
    text = re.sub(r"```.*?```", "", text, flags=re.S)  # a '#' in a code block is not a heading
    found = {_slug(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.+)$", text, flags=re.M)}
    return found | set(re.findall(r"<a id=\"([^\"]+)\"", text))


def _links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    text = re.sub(r"`[^`\n]*`", "", text)  # inline code shows syntax, not links
    return LINK.findall(text) + HTML_SRC.findall(text)


def broken_links(pages: list[Path], root: Path = ROOT) -> list[str]:
    bad = []
    for page in pages:
        for target in _links(page):
            if re.match(r"^[a-z]+:", target):  # http:, https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                bad.append(f"{page.relative_to(root)}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                bad.append(f"{page.relative_to(root)}: {target} (no heading or anchor '{anchor}')")
    return bad


def test_every_command_in_help_has_its_docs_page():
    commands = _commands()
    assert {"train", "ablate", "degrade", "gradnorm"} <= set(commands)  # the listing itself is not empty
    missing = [c for c in commands if not (DOCS / f"{c}.md").exists()]
    assert not missing, f"commands without docs/<command>.md: {missing}"
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert not [c for c in commands if f"(docs/{c}.md)" not in readme], "README links every command's page"


def test_every_relative_link_and_image_resolves():
    assert not broken_links(PAGES)


def test_the_link_check_catches_a_broken_link_and_a_broken_anchor(tmp_path):
    page = tmp_path / "page.md"
    (tmp_path / "figures").mkdir()
    (tmp_path / "figures" / "ok.png").write_bytes(b"")
    page.write_text("# Top part\n\n[fine](#top-part) ![ok](figures/ok.png)\n[gone](missing.md) "
                    "![gone](figures/none.png) [no anchor](#nowhere) `[code](not-a-link.md)`\n", encoding="utf-8")
    bad = broken_links([page], root=tmp_path)
    assert bad == ["page.md: missing.md (no such file)", "page.md: figures/none.png (no such file)",
                   "page.md: #nowhere (no heading or anchor 'nowhere')"]


def test_generated_sections_match_the_generator():
    on_pages = {}
    for page in PAGES:
        for m in docs_tables.MARKER.finditer(page.read_text(encoding="utf-8")):
            on_pages.setdefault(m.group("name"), []).append(page.name)
    known = {s.name: s.page for s in docs_tables.SECTIONS}
    assert set(on_pages) == set(known), "every marker has a renderer and every renderer a marker"
    assert all(on_pages[n] == [known[n]] for n in known), "each section appears once, on its own page"
    opened = sum(len(re.findall(r"^<!-- generated:", p.read_text(encoding="utf-8"), flags=re.M)) for p in PAGES)
    assert opened == sum(len(v) for v in on_pages.values()), "every '<!-- generated' is closed by '<!-- end -->'"
    for s in docs_tables.SECTIONS:
        assert all(j in docs_tables.JOBS for j in s.jobs + s.reads)


def test_docs_cite_papers_not_private_notes():
    # Built from pieces so that this file does not match tests/test_legible.py's scan of tests/.
    notes = re.compile("|".join(["SCIEN" + r"CE\.md", "PITFA" + "LLS", r"\.\./shar" + "ed", "/wo" + "rk/"]))
    offenders = [p.name for p in PAGES if notes.search(p.read_text(encoding="utf-8"))]
    assert not offenders


# --- the generator ------------------------------------------------------------------------------

def test_replace_section_keeps_everything_outside_the_markers():
    text = "intro\n<!-- generated: a -->\nold a\n<!-- end -->\nmiddle\n<!-- generated: b -->\nold b\n<!-- end -->\nend\n"
    out = docs_tables.replace_section(text, "b", "new b")
    assert out == "intro\n<!-- generated: a -->\nold a\n<!-- end -->\nmiddle\n<!-- generated: b -->\nnew b\n<!-- end -->\nend\n"
    with pytest.raises(ValueError, match="section 'c'"):
        docs_tables.replace_section(text, "c", "x")


def test_degrade_table_on_fake_summaries():
    rec = {"event": "summary", "net": "plain", "depth": 26, "n": 3, "diverged": 0, "params": 56410, "seeds": [0, 1, 2],
           "train_loss_median": 0.7791, "train_loss_min": 0.6171, "train_loss_max": 1.1984,
           "train_acc_median": 0.7021, "train_acc_min": 0.5, "train_acc_max": 0.83,
           "test_acc_median": 0.5416, "test_acc_min": 0.225, "test_acc_max": 0.7423,
           "grad_norm_first_layer_median": 4.094, "grad_norm_first_layer_min": 2.81, "grad_norm_first_layer_max": 4.97}
    run = {"event": "run", "net": "plain", "depth": 26, "seed": 0}
    text = R.degrade_table([run, rec], [{"finding": "plain-26 degrades", "measure": "median training accuracy",
                                         "ours": 0.7021, "article": 0.56, "article_range": [0.395, 0.834],
                                         "in_range": True}])
    lines = text.splitlines()
    assert lines[0] == ("| net | depth | n | params | train loss | train acc | train acc: interval of the median (coverage) "
                        "| test acc | test acc: interval (coverage) | grad norm, first conv, step 1 |")
    assert lines[2] == ("| plain | 26 | 3 | 56,410 | 0.779 (0.617–1.198) | 0.702 (0.500–0.830) | - | 0.542 (0.225–0.742) "
                        "| - | 4.09 (2.81–4.97) |")
    assert "Median (min–max) over seeds 0..2." in text
    assert "| plain-26 degrades | median training accuracy | 0.70 | 0.56, 0.395–0.834 | yes |" in text
    # An older record without `in_range`: its numbers say it (0.85 lies above the article's 0.834).
    older = R.degrade_table([rec], [{"finding": "plain-26 degrades", "measure": "median training accuracy",
                                     "ours": 0.85, "article": 0.56, "article_range": [0.395, 0.834]}])
    assert "| 0.85 | 0.56, 0.395–0.834 | **no** |" in older


def test_gradnorm_table_reads_first_conv_fc_and_the_input_ratio():
    recs = [{"spec": "scale:0.5", "layer": "stem.0", "index": 1, "path": "main", "kind": "Conv2d", "grad_norm": 4e4},
            {"spec": "scale:0.5", "layer": "u.0", "index": 2, "path": "main", "kind": "Conv2d", "grad_norm": 0.12},
            {"spec": "scale:0.5", "layer": "u.1", "index": 3, "path": "main", "kind": "Conv2d", "grad_norm": 27.0},
            {"spec": "scale:0.5", "layer": "fc", "index": 4, "path": "main", "kind": "Linear", "grad_norm": 0.48},
            {"spec": "scale:0.5", "layer": "x_1", "index": 1, "path": "input", "kind": "dE/dx", "grad_norm": 1.0,
             "relative": 2.0, "direct_term": 0.5},
            {"spec": "scale:0.5", "layer": "x_0", "index": 0, "path": "input", "kind": "dE/dx", "grad_norm": 1.0,
             "relative": 9.8e5, "direct_term": 0.25}]
    row = R.gradnorm_table(recs).splitlines()[2]
    # median of (4e4, 0.12, 27, 0.48) is (0.48 + 27) / 2 = 13.74
    assert row == "| scale:0.5 | 4 | 4.0e+04 | 1.4e+01 (1.2e-01 – 4.0e+04) | 4.8e-01 | 9.8e+05 | 2.5e-01 |"


def test_vit_gradnorm_table_reads_first_middle_and_last_block():
    def rec(block, sub, g):
        return {"spec": "post_ln", "label": f"block{block}.{sub}", "index": 4 * block, "path": "main", "grad_norm": g}
    recs = [rec(b, "mlp.fc2", g) for b, g in ((3, 0.8), (1, 0.2), (2, 0.5), (4, 1.6))]
    recs += [rec(b, "attn.proj", 0.1 * b) for b in (1, 2, 3, 4)] + [rec(1, "mlp.fc1", 9.0)]
    row = R.vit_gradnorm_table([("he", recs)]).splitlines()[2]
    # blocks sorted by position: fc2 0.2, 0.5, 0.8, 1.6; the middle of 4 is block 2
    assert row == "| post_ln | he | 4 | 2.0e-01 | 5.0e-01 | 1.6e+00 | 8.00 | 1.0e-01 | 4.0e-01 | 4.00 |"


def test_lesion_tables_on_a_fake_pair():
    head = lambda lab: {"run": f"runs/{lab}", "label": lab}  # noqa: E731
    recs = [{"event": "lesion_baseline", **head("ResNet"), "test_error": 2.5},
            {"event": "lesion_unit", **head("ResNet"), "unit": 1, "deletable": True, "downsampling": False,
             "test_error": 78.33, "delta": 75.83},
            {"event": "lesion_unit", **head("ResNet"), "unit": 2, "deletable": True, "downsampling": True,
             "test_error": 3.0, "delta": 0.5},
            {"event": "lesion_k", **head("ResNet"), "k": 1, "draws": 2, "median": 40.0, "min": 3.0, "max": 78.33},
            {"event": "lesion_baseline", **head("plain"), "test_error": 50.56},
            {"event": "lesion_unit", **head("plain"), "unit": 1, "deletable": False, "downsampling": False,
             "test_error": None, "delta": None},
            {"event": "lesion_unit", **head("plain"), "unit": 2, "deletable": True, "downsampling": True,
             "test_error": 90.0, "delta": 39.44},
            {"event": "lesion_k", **head("plain"), "k": 1, "draws": 1, "median": 90.0, "min": 90.0, "max": 90.0}]
    units = R.lesion_units_table(recs).splitlines()
    assert units[2:] == ["| none | 2.50 | 50.56 |", "| 1 | 78.33 (+75.83) | cannot (shape changes) |",
                         "| 2 (downsampling) | 3.00 (+0.50) | 90.00 (+39.44) |"]
    assert R.lesion_k_table(recs).splitlines()[2] == "| 1 | 2 | 40.00 [3.00, 78.33] | 90.00 |"
    summary = R.lesion_summary_table([(0, recs)], early=1).splitlines()
    assert summary[2] == "| 0 | ResNet | 2 | 2.50 | 78.33 | 3.00 | +0.50 | - | - |"


def test_degrade_reading_from_the_paired_differences_by_hand():
    # residual - plain training accuracy per seed +0.30 +0.25 +0.40: all positive, sign-flip p 2/8;
    # test accuracy +0.10 -0.05 +0.02 (sum 0.07): |sum| >= 0.07 for 6 of the 8 sign patterns, p 0.75.
    # Holm over the grid's two pairs: 0.25 * 2 = 0.5, then 0.75. Three seeds resolve nothing.
    # The training gap's interval by hand: Walsh averages of 0.30 0.25 0.40 are 0.25 0.275 0.30 0.325
    # 0.35 0.40; at n = 3 the exact signed-rank interval is [min, max] of them, covering 75%.
    from resnet_cli.results import evidence, power

    plain = {0: 0.60, 1: 0.70, 2: 0.55}
    res = {0: 0.90, 1: 0.95, 2: 0.95}
    plain_t, res_t = {0: 0.80, 1: 0.90, 2: 0.88}, {0: 0.90, 1: 0.85, 2: 0.90}
    paired = {"train_acc": evidence.paired(plain, res), "test_acc": evidence.paired(plain_t, res_t)}
    evidence.adjust(list(paired.values()))
    for p in paired.values():
        p["seeds_needed"] = power.seeds_needed(p["diffs"], 2)
    row = {"event": "summary", "net": "residual", "depth": 26, "paired": paired}
    text = R.degrade_pairs([row])
    assert text.startswith("Paired by seed (sign-flip test; at every depth but the shallowest both pairs are He "
                           "2016a's claims, Holm over the grid's claims; the shallowest twins, 'comparably accurate' "
                           "in He 2016a, are exploratory, raw p only; the mean difference, and the Hodges-Lehmann "
                           "interval with the coverage it has); 3 seeds cannot resolve a pair at 5%: ")
    assert "training accuracy: +31.7 points [+25.0, +40.0] 75% (p 0.25, Holm 0.5), not resolved at n = 3" in text
    assert "test accuracy: +2.3 points" in text and "(p 0.75, Holm 0.75), not resolved at n = 3" in text
    # Seeds for the test gap (mean 0.0233, sd 0.0751: 0.311 sd) at 0.05 / 2: the normal approximation
    # ((z_.9875 + z_.8) / 0.311)^2 = 98.3; the sign-flip test is as efficient as that asymptotically.
    need = paired["test_acc"]["seeds_needed"]
    assert 96 <= need["estimate"] <= 106 and need["range"][0] < need["estimate"] and need["range"][1] is None
    assert f"about {need['estimate']} seeds ({need['range'][0]}-more than 200 over the sd's own uncertainty)" in text


def test_landscape_and_ablate_rows():
    land = {"event": "landscape_summary", "label": "plain-26", "dims": 2, "points": 441, "loss_center": 3.551,
            "accuracy_center": 50.0, "loss_max": 34012.0, "local_minima": 2, "tv_ratio": 1.8, "nonconvex_fraction": 0.34}
    assert R.landscape_table([land]).splitlines()[2] == "| plain-26 | 2-D, 21x21 | 3.55 | 50.0 | 3.4e4 | 2 | 1.80 | 34 |"
    row = {"event": "row", "index": 11, "row": "dropout shortcut, p 0.5", "test_error_median": None,
           "test_error_mean": None, "test_error_std": None, "n": 0, "train_loss": None, "status": "diverged",
           "paper": "fail", "seeds": [0, 1, 2]}
    ok = {**row, "index": 1, "row": "original (identity)", "test_error_median": 2.5, "test_error_mean": 3.2407,
          "test_error_std": 1.283, "n": 3, "train_loss": 0.011898, "status": "completed", "paper": 6.61,
          "interval": [2.2, 5.021], "coverage": 0.75}
    two = {**ok, "index": 3, "n": 2, "test_error_std": 0.5, "interval": None, "coverage": None,
           "interval_reason": "n < 3: no interval"}
    failed = {**ok, "index": 2, "row": "constant scaling 0 / 1 (plain)", "test_error_median": 88.89, "fail": True,
              "paper": "fail"}
    lines = S.ablate_table([ok, row, failed, two]).splitlines()
    assert lines[2] == "| 1 | original (identity) | 2.50 | [2.20, 5.02] 75% | 3.24 ± 1.28 (3) | 0.0119 | completed | 6.61 |"
    assert lines[3] == "| 11 | dropout shortcut, p 0.5 | - | - | - | - | diverged | fail |"
    assert lines[4] == ("| 2 | constant scaling 0 / 1 (plain) | 88.89 **fail** | [2.20, 5.02] 75% | 3.24 ± 1.28 (3) | 0.0119 "
                        "| completed | fail |")
    assert lines[5] == "| 3 | original (identity) | 2.50 | n < 3: no interval | 3.24 ± 0.50 (2) | 0.0119 | completed | 6.61 |"
    times = S.ablate_times_table([("shortcut", [ok, row], {"wall_s": 464.0, "cpu_user_s": 635.0, "load_1min": 3.0})])
    assert times.splitlines()[2] == "| `shortcut` | 2 rows x 3 seeds | **7.7 min** | 10.6 min | 3.0 |"
    # the sized seeds' cost: 8 seeds one run at a time (600 s), then 12 stacked (690 s): 690 / 600 = 1.15
    eight, twelve = {**ok, "seeds": list(range(8))}, {**ok, "seeds": list(range(12))}
    afford = S.afford_table("shortcut", [
        ([eight, eight], {"command": "resnet ablate shortcut --seeds 0..7", "wall_s": 600.0, "cpu_user_s": 1150.0,
                          "load_1min": 2.1}),
        ([twelve, twelve], {"command": "resnet ablate shortcut --stack 16", "wall_s": 690.0, "cpu_user_s": 1300.0,
                            "load_1min": 2.0, "other_cores": 0.125})]).splitlines()
    assert afford[2] == "| `shortcut` | 2 rows x 8 seeds, one run at a time | **10.0 min** | 19.2 min | 2.1 | - |"
    assert afford[3] == ("| `shortcut` | 2 rows x 12 seeds, each row's seeds stacked | **11.5 min** | 21.7 min | 2.0 "
                         "| 0.12 |")
    assert "took **1.15x** the wall time of 8 seeds" in afford[5]


def test_the_threads_table_gives_autos_rate_over_each_setting_under_the_same_load():
    """Hand-made bench records: auto's rate is divided by the other settings' of the same half
    (quiet by quiet, busy by busy), never across the halves."""
    def rec(load, setting, ips, used):
        return {"load": load, "variant": {"run.threads": setting}, "images_per_s": ips,
                "runtime": {"threads": used}, "contention": {"other_cores": 1.5 if load == "busy" else 0.1}}

    records = [rec("quiet", "auto", 400.0, 2), rec("quiet", 0, 410.0, 2), rec("quiet", 1, 200.0, 1),
               rec("busy", "auto", 150.0, 1), rec("busy", 0, 30.0, 2), rec("busy", 1, 160.0, 1)]
    lines = S.bench_threads_table([("net", records)]).splitlines()
    assert lines[2] == "| net | quiet | `auto` | 2 | 400 | - | 0.10 |"
    assert lines[3] == "| net | quiet | `0` (every core) | 2 | 410 | **0.98x** | 0.10 |"  # 400 / 410
    assert lines[4] == "| net | quiet | `1` | 1 | 200 | **2.00x** | 0.10 |"
    assert lines[6] == "| net | every core kept busy | `0` (every core) | 2 | 30 | **5.00x** | 1.50 |"  # 150 / 30
    assert lines[7] == "| net | every core kept busy | `1` | 1 | 160 | **0.94x** | 1.50 |"


def _row(i, errs, paper, fail=False, label=None, group=None):
    done = sorted(e for e in errs if e is not None)
    median = (done[len(done) // 2] if len(done) % 2 else (done[len(done) // 2 - 1] + done[len(done) // 2]) / 2) if done else None
    return {"event": "row", "index": i, "row": label or f"r{i}", "paper": paper, "fail": fail, "group": group,
            "test_error_median": median, "seeds": list(range(len(errs))), "test_errors": list(errs)}


def test_ablate_order_counts_pairs_and_fails_by_hand():
    # Paper order 1 < 2 < 3 < 4 < 6; ours (medians) 2 < 1 < 3 < 6, and 4 diverged (last). No claims
    # declared: the family is every pair with paper figures, leaving out (4, 6) (both fail here) and
    # 4 (no completed seed): 6 pairs. Three seeds cannot resolve any: the smallest sign-flip p is 2/8,
    # and Holm over 6 asks 0.05/6, which takes 8 seeds (2/256). (1, 2): worse - better per seed -1.0
    # -0.7 +0.7; Walsh averages -1, -0.85, -0.7, -0.15, 0, 0.7, Hodges-Lehmann -0.425, interval
    # [-1.0, 0.7] at 75%; |sum| >= 1.0 for 6 of 8 sign patterns: p 0.75. Kendall's tau leaves the two
    # failing rows (4, 6) out: over 1, 2, 3 one discordant pair of 3, tau 1/3, p 3/6 (the orders of 3
    # with at most one inversion).
    records = [_row(1, (3.0, 3.2, 2.8), 6.0), _row(2, (2.0, 2.5, 3.5), 7.0), _row(3, (9.0, 8.0, 10.0), 8.0),
               _row(4, (None, None, None), 12.0), _row(5, (88.0, 89.0, 90.0), "fail", True),
               _row(6, (90.0, 91.0, 89.0), 13.0, True)]
    text = S.ablate_order(records)
    assert text.startswith(
        "Rows with a paper figure, best first: paper 1 < 2 < 3 < 4 < 6; ours 2 < 1 < 3 < 6 < 4. "
        "Kendall's tau 0.33 (one-sided permutation p = 0.500, exact, 3 rows, 2 failing rows left out). "
        "Its 6 pairs with a paper figure (no claims declared: the family), by the sign-flip test of the "
        "differences paired by seed with Holm's adjustment over them: 0 in the paper's order and resolved, "
        "6 unresolved, 0 reversed and resolved. Unresolved at n = 3: r1 < r2 (difference -0.43 [-1.00, +0.70] "
        "75%, p 0.75, Holm 1); ")
    assert "3 seeds cannot resolve any of 6 pairs with a paper figure at 5% after Holm: the smallest exact p at " \
           "n = 3 is 0.25; 8 seeds whose differences all agree can" in text
    assert "in order (" not in text and "95%" not in text
    assert text.endswith("The paper's \"fail\" rows failing here: 1 of 1. Rows the paper trains that fail here: 4, 6.\n")
    # Reversed beyond the noise at 8 seeds: 2 is better at every seed, p = 2/256, one pair: no Holm cost.
    back = [_row(1, (5.0, 5.5, 6.0, 5.2, 5.8, 6.1, 5.4, 5.9), 6.0), _row(2, (3.0, 3.2, 2.9, 3.1, 3.3, 2.8, 3.0, 3.4), 7.0)]
    text = S.ablate_order(back)
    assert text.startswith(
        "Rows with a paper figure, best first: paper 1 < 2; ours 2 < 1. "
        "The 1 pair with a paper figure (no claims declared: the family), by the sign-flip test of the differences "
        "paired by seed with Holm's adjustment over them: 0 in the paper's order and resolved, 0 unresolved, 1 "
        "reversed and resolved. Reversed (resolved at n = 8): r1 < r2 (difference -2.48 [-2.90, -2.15] 96%, "
        "Holm p 0.00781). 8 seeds can resolve 1 pair with a paper figure at 5% after Holm")


def test_declared_claims_are_read_apart_from_the_exploratory_pairs():
    """A declared family of one claim (3 < 4) among four rows: the claim is resolved at 2/256 (its
    own Holm p), the other pairs with paper figures are listed as exploratory with their raw p and
    never in the counts."""
    from resnet_cli.results import verdicts
    from resnet_cli.sweep.family import Family, Member

    e = (0.0, 0.5, -0.5, 0.2, -0.2, 0.3, -0.3, 0.1)
    records = [_row(i, [10 * i + x for x in e], float(i)) for i in (1, 2, 3, 4)]
    rows = [{"index": r["index"], "row": r["row"], "group": None, "paper": r["paper"], "median": r["test_error_median"],
             "fail": False, "values": {"error": dict(zip(r["seeds"], r["test_errors"]))}} for r in records]
    study = {"event": "study", **verdicts.compare(rows, Family(True, (Member("r3", "r4", "test_error", "made up"),)))}
    text = S.ablate_order([*records, study])
    assert ("The 1 declared claim, by the sign-flip test of the differences paired by seed with Holm's adjustment "
            "over them: 1 in the paper's order and resolved, 0 unresolved, 0 reversed and resolved. In the paper's "
            "order (resolved at n = 8): r3 < r4 (difference +10.00 [+10.00, +10.00] 96%, Holm p 0.00781).") in text
    assert "Exploratory pairs (5: raw p, not adjusted, never called resolved): r1 < r2 (difference +10.00" in text
    assert "8 seeds cannot resolve" not in text and "8 seeds can resolve 1 claim at 5% after Holm" in text


def test_export_table_by_hand():
    rec = {"event": "export", "format": "onnx", "file": "res26.onnx",
           "check": {"images": 16, "max_abs_diff": 5.72e-06, "tolerance": 2.875e-05,
                     "against": [{"batch": 16, "max_abs_diff": 5.72e-06}, {"batch": 4, "max_abs_diff": 5.007e-06}]}}
    lines = R.export_table([{"event": "figure"}, rec], {"res26.onnx": 337007}).splitlines()
    assert len(lines) == 3
    assert lines[2] == "| `onnx` | 5.72e-06 | 5.72e-06 at batch 16, 5.01e-06 at batch 4 | 2.88e-05 | 337 kB |"


def test_paths_table_by_hand():
    win = {"first": 2, "last": 7, "carried": 0.9377, "peak": 3, "mean_length": 3.6959, "paths_fraction": 0.80298}
    res = {"event": "paths_summary", "label": "ResNet-26", "state": "trained", "units": 12, "routable": 12, "mass": 0.9,
           "window": win, "unit_window": {**win, "first": 1, "last": 6}, "full_grad": 0.73049}
    one = {"first": 12, "last": 12, "carried": 1.0, "peak": 12, "mean_length": 12.0, "paths_fraction": 1.0}
    plain = {**res, "label": "plain-26", "routable": 0, "window": one, "unit_window": one, "full_grad": 1.7042}
    lines = R.paths_table([res, {"event": "paths_k"}, plain]).splitlines()
    assert "90% window (lengths)" in lines[0] and len(lines) == 5
    assert lines[2] == "| ResNet-26 | trained | 12 | 2-7 | 94% | 80.3% | 3 | 3.7 | 6 | 1-6 | 0.73 |"
    assert lines[3] == "| plain-26 | trained | 12 (no shortcut) | 12 | 100% | 100% (one path) | 12 | 12 | - | 12 | 1.7 |"
    assert lines[4].startswith("| Veit et al. 2016, ResNet-110, CIFAR-10 | trained | 54 | 5-17 |")


def test_budget_table_by_hand():
    def run(depth, seed, train_acc, test_acc, net="residual", iters=1256):
        return {"event": "run", "net": net, "depth": depth, "seed": seed, "train_acc": train_acc, "test_acc": test_acc,
                "iterations": iters, "wall_s": 60.0 * depth}

    eight = [run(20, 0, 0.9, 0.895), run(56, 0, 0.86, 0.8673), run(20, 1, 0.8, 0.8), run(56, 0, 0.5, 0.5, net="plain"),
             {"event": "summary"}]  # seed 1 has no ResNet-56: no row; the plain net is not read
    sixteen = [run(56, 0, 0.9, 0.9, iters=2512), run(20, 0, 0.925, 0.91, iters=2512)]
    lines = R.budget_table([("8 epochs", eight), ("16 epochs", sixteen)], (8.75, 6.97)).splitlines()
    assert len(lines) == 5 and "ResNet-56 behind by (points)" in lines[0]
    assert lines[2] == "| 8 epochs | 0 | 1,256 | 10.00 | 14.00 | 4.00 | 10.50 | 13.27 | 20.0 min / 56.0 min |"
    assert lines[3] == "| 16 epochs | 0 | 2,512 | 7.50 | 10.00 | 2.50 | 9.00 | 10.00 | 20.0 min / 56.0 min |"
    assert lines[4].endswith("| 64,000 | - | - | none: ahead (Fig. 6) | 8.75 | 6.97 | - |")


def test_ablate_order_within_groups_by_hand():
    # Eight seeds. Within 110: paper 2 < 1, ours 1 < 2; per seed 1 - 2 all negative: reversed. Within
    # 164: paper 3 < 4, ours 3 < 4; per seed 4 - 3 all positive: in order. Across the nets nothing is
    # paired: 2 pairs, each p = 2/256, Holm 2 * 2/256 = 0.016.
    e = (0.0, 0.5, -0.5, 0.2, -0.2, 0.3, -0.3, 0.1)
    records = [_row(1, [10 + x for x in e], 6.61, label="(a) original, 110", group="ResNet-110"),
               _row(2, [12 + x / 2 for x in e], 6.37, label="(e) full pre-activation, 110", group="ResNet-110"),
               _row(3, [30 + x for x in e], 5.46, label="(e) full pre-activation, 164", group="ResNet-164"),
               _row(4, [31 + x / 2 for x in e], 5.93, label="(a) original, 164", group="ResNet-164")]
    text = S.ablate_order(records)
    assert text.startswith("ResNet-110: rows with a paper figure, best first: paper 2 < 1; ours 1 < 2. ")
    assert "1 in the paper's order and resolved, 0 unresolved, 1 reversed and resolved" in text
    assert "Reversed (resolved at n = 8): (e) full pre-activation, 110 < (a) original, 110 (difference -2.00" in text
    assert "ResNet-164: rows with a paper figure, best first: paper 3 < 4; ours 3 < 4. " in text
    assert "In the paper's order (resolved at n = 8): (e) full pre-activation, 164 < (a) original, 164" in text
    assert "Its 6 pairs" in S.ablate_order([{**r, "group": None} for r in records])  # ungrouped: every pair


def test_the_power_line_counts_the_whole_family_across_groups():
    # Two nets of five rows: 10 pairs within each, one family of 20 for Holm. Eight seeds that all agree
    # give p = 2/256 each; 20 x 2/256 = 0.156: none resolvable, and 2/2^n x 20 <= 0.05 first at n = 10
    # (2/512 x 20 = 0.078, 2/1024 x 20 = 0.039). A group's reading that counted its own 10 would say 9.
    e = (0.0, 0.5, -0.5, 0.2, -0.2, 0.3, -0.3, 0.1)
    records = [_row(i + 5 * g, [10 * (i + 1) + 50 * g + x for x in e], 5.0 + i, label=f"row {i}, net {g}",
                    group=f"net {g}") for g in (0, 1) for i in range(1, 6)]
    text = S.ablate_order(records)
    assert "Its 20 pairs with a paper figure" in text
    assert text.count("8 seeds cannot resolve any of 20 pairs with a paper figure at 5% after Holm: the smallest exact "
                      "p at n = 8 is 0.00781; 10 seeds whose differences all agree can") == 1


def test_the_note_names_command_machine_and_wall_time():
    section = next(s for s in docs_tables.SECTIONS if s.name == "plot")
    meta = {"command": "resnet plot a b --json", "wall_s": 3.2, "machine": "AMD EPYC 9B14, 2 cores", "load_1min": 1.5,
            "finished": "2026-12-01 12:20 UTC", "commit": "abc1234", "threads": "1"}
    # The thread count beside the machine: a run repeats bitwise only at the count it ran with.
    assert docs_tables.note(section, [meta]) == (
        "*Generated by `make docs` from `resnet plot a b --json`: 3 s wall time on AMD EPYC 9B14, 2 cores, "
        "1 thread a process (1-minute load 1.5 at the end), 2026-12-01 12:20 UTC, commit abc1234.*\n\n")
    assert docs_jobs.threads_of(("train", "x", "--threads", "1", "--json")) == "1"
    # Other work beside a job: 60 busy CPU-s on the machine over a 20 s job whose own processes used 40
    # leave 20 CPU-s to others, one core on average; a machine without /proc/stat says nothing.
    assert docs_jobs.other_cores(100.0, 160.0, 40.0, 20.0) == 1.0
    assert docs_jobs.other_cores(100.0, 130.0, 40.0, 20.0) == 0.0  # ticks are coarse: never below 0
    assert docs_jobs.other_cores(None, 160.0, 40.0, 20.0) is None
    assert docs_jobs.threads_of(("train", "x")) == "auto"
    assert docs_jobs.threads_of(("bench", "x", "--vary", "run.threads=auto,0,1")) == "varied"
    assert "run.threads auto (the cores other processes leave free" in docs_tables.note(section, [{**meta, "threads": "auto"}])
    assert "the thread counts in the table" in docs_tables.note(section, [{**meta, "threads": "varied"}])
    # Records from before run.threads auto: torch's own default, every core.
    assert "torch's default threads" in docs_tables.note(section, [{**meta, "threads": "default"}])
    # Two jobs run at different times and commits: the later one's time, both commits.
    later = {**meta, "finished": "2026-12-01 20:28 UTC", "commit": "def5678", "load_1min": 3.2}
    assert docs_tables.note(section, [later, meta]).endswith(
        "(1-minute load 3.2 at the end), 2026-12-01 20:28 UTC, commits def5678, abc1234.*\n\n")


def test_code_paths_named_in_the_docs_exist():
    """A module moved or split leaves the docs pointing at nothing; name the stale mentions."""
    stale = []
    for page in PAGES:
        for path in re.findall(r"\b((?:resnet_cli|tools|configs|tests)/[\w/.-]+\.(?:py|yaml))\b", page.read_text()):
            if not (ROOT / path).exists():
                stale.append(f"{page.name}: {path}")
    assert not stale


def test_the_spec_reference_lists_every_field():
    """docs/spec.md's annotated YAML names every field the schema has, and none it lacks."""
    import yaml

    from resnet_cli.spec import Spec, to_tree

    def keys(tree: dict, prefix: str = "") -> set[str]:
        out = set()
        for k, v in tree.items():
            out |= keys(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}"}
        return out

    text = (DOCS / "spec.md").read_text(encoding="utf-8")
    documented = yaml.safe_load(re.search(r"```yaml\n(.*?)```", text, flags=re.S).group(1))
    assert keys(documented) == keys(to_tree(Spec()))


def test_section_mode_runs_only_the_named_sections_jobs(monkeypatch, capsys):
    ran, written = [], []
    monkeypatch.setattr(docs_tables, "run_job", lambda job: ran.append(job.name) or True)
    monkeypatch.setattr(docs_tables, "render_section", lambda section: written.append(section.name) or True)
    assert docs_tables.main(["section", "bench-data", "ablate-times"]) == 0
    assert ran == [*(f"ablate-{s}" for s in docs_tables.STUDIES), "bench-data"]  # ablate-times reads all of them
    assert written == ["ablate-times", "bench-data"]  # in page order, nothing else
    ran.clear()
    assert docs_tables.main(["section", "degrade-fashion-budget"]) == 0
    assert ran == ["degrade-fashion-16"]  # the 8-epoch grid's saved output is read, not rerun
    assert docs_tables.main(["section", "no-such-table"]) == 2
    assert "sections:" in capsys.readouterr().err
    ran.clear(), written.clear()
    assert docs_tables.main(["render", "ablate-times", "bench-data"]) == 0  # from saved output: nothing runs
    assert ran == [] and written == ["ablate-times", "bench-data"]
    assert docs_tables.main(["render", "no-such-table"]) == 2


def test_every_resolved_pair_a_reading_names_is_resolved_after_holm():
    """The readings are generated from the adjusted tests only: every pair the sentence calls
    resolved (in order or reversed) is one whose Holm-adjusted sign-flip p is at most 5%, and every
    such pair is named. Five rows at 10 seeds (10 pairs: Holm asks p <= 0.005, which 8 seeds cannot
    give), gaps from none to large."""
    import re

    import numpy as np

    from resnet_cli.results import verdicts
    from resnet_cli.sweep.family import Family

    rng = np.random.default_rng(7)
    base = rng.normal(size=10)
    records = [_row(i, list(10 + gap + base + rng.normal(scale=0.3, size=10)), 5.0 + i)
               for i, gap in enumerate((0.0, 0.1, 0.3, 1.0, 3.0), 1)]
    text = S.ablate_order(records)
    named = set()
    for part in re.findall(r"(?:In the paper's order|Reversed) \(resolved at n = 10\): (.*?)\.(?: [A-Z]|$)", text):
        for item in re.findall(r"r(\d+) < r(\d+)", part):
            named.add(frozenset(int(x) for x in item))
    pairs = verdicts.compare([{"index": r["index"], "row": r["row"], "group": None, "paper": r["paper"],
                               "median": r["test_error_median"], "fail": False,
                               "values": {"error": dict(zip(r["seeds"], r["test_errors"]))}} for r in records],
                             Family(declared=False))["claims"]
    resolved = {frozenset((p["better_index"], p["worse_index"])) for p in pairs if p["p_holm"] <= 0.05}
    assert named == resolved and resolved and len(resolved) < len(pairs)  # some resolved, some not
    # Rows 1 and 3 differ at raw p 0.035 but not after Holm (0.070): a reading from raw p would name them.
    assert any(p["p"] <= 0.05 < p["p_holm"] for p in pairs) and frozenset((1, 3)) not in named


def test_degrade_claims_table_gives_each_claims_verdict_and_the_power_line():
    claim = {"better": "residual-26", "worse": "residual-8", "source": "He 2016a sec. 4.1, Fig. 4 right: deeper",
             "shift": -1.5, "interval": [-2.25, -0.5], "coverage": 0.9785, "n": 10, "p_holm": 0.0078,
             "verdict": "reversed"}
    rec = {"event": "claims", "claims": [claim], "power": "10 seeds can resolve 4 claims"}
    text = R.degrade_claims_table([{"event": "run"}, rec], train_wall_s=90.0)
    # An output from before the grid's test-error claims names no metric: its claims were all training error.
    assert ("| residual-26 < residual-8 | training | He 2016a sec. 4.1, Fig. 4 right | -1.50 [-2.25, -0.50] 97.8% | 10 | "
            "0.0078 | **reversed** |") in text
    tested = R.degrade_claims_table([{**rec, "claims": [{**claim, "metric": "test_error"}]}])
    assert "| residual-26 < residual-8 | test | He 2016a" in tested
    assert "10 seeds can resolve 4 claims." in text and "summed: 90 s." in text
    assert R.degrade_claims_table([{"event": "summary"}]) == ""  # an output older than the claims: none


# A "resolved" that states no result: the rule itself, a spec's resolved values, the formats' columns.
NOT_A_RESULT = ("(resolved) or **reversed** (resolved the other way)", "any true-null claim resolved",
                "resolved spec", "is resolved when a run starts", "the pairs resolved, unresolved and reversed",
                "each claim resolved in the paper's order", "a declared claim resolved in the paper's order",
                "counted resolved where its p")
NEGATION = re.compile(r"\b(not|no|never|nothing|none|cannot|neither)\b", re.I)
RESOLVING_BLOCK = re.compile(r"Its \d+ declared claims?.*?: (\d+) in the paper's order and resolved, \d+ unresolved, "
                             r"(\d+) reversed and resolved")


def block_resolves(block: str) -> bool:
    """Does a generated block resolve any declared claim: a study's line ("Its N declared claims ...:
    K in the paper's order and resolved, ..., R reversed and resolved", K + R > 0), a claims table
    (degrade's) with a verdict "in order" or "reversed", or a claims-across-budgets table with a cell
    resolved at some budget ("reversed -1.11 (Holm 0.02)")?"""
    got = RESOLVING_BLOCK.search(block)
    if got is not None and int(got[1]) + int(got[2]) > 0:
        return True
    if re.search(r"\| (in order|\*\*reversed\*\*) \|$", block, flags=re.M) is not None:
        return True
    # a claims-across-budgets table (results/budget_claims.py): a cell resolved at some budget
    return re.search(r"\| (in order|reversed) [+-]\d", block) is not None


def over_claims(text: str) -> list[str]:
    """Each sentence of prose that calls something resolved while the nearest generated block above it
    (within its section) resolves none of its declared claims, or there is no such block."""
    found = []
    pieces = re.split(r"(<!-- generated: [^>]*-->.*?<!-- end -->|\n#{2,3} )", text, flags=re.S)
    block = ""
    for piece in pieces:
        if piece.startswith("<!-- generated:"):
            block = piece
            continue
        if piece.startswith("\n#"):
            block = ""  # a new section: a block above it says nothing of the prose below
            continue
        prose = " ".join(re.sub(r"```.*?```", "", piece, flags=re.S).split())
        for phrase in NOT_A_RESULT:
            prose = prose.replace(phrase, "")
        for sentence in re.split(r"(?<=[.:;])\s+(?=[A-Z(*-])", prose):
            if not re.search(r"(?<!un)\bresolved\b", sentence) or NEGATION.search(sentence):
                continue
            if not block_resolves(block):
                found.append(sentence[:160])
    return found


def test_every_resolved_in_the_docs_sits_under_a_block_whose_declared_claims_resolve():
    """Prose may call an order resolved only under a generated block whose declared family resolves
    claims; elsewhere it says what the medians show at that n. Planted: the depth reading's
    former "(p 0.016, Holm 0.031): resolved", under a block that resolves nothing, is caught."""
    pages = sorted(ROOT.joinpath("docs").glob("*.md")) + [ROOT / "README.md"]
    bad = {p.name: got for p in pages if (got := over_claims(p.read_text(encoding="utf-8")))}
    assert bad == {}
    planted = ("<!-- generated: x -->\nIts 55 declared claims, by the sign-flip test: 0 in the paper's order and "
               "resolved, 55 unresolved, 0 reversed and resolved.\n<!-- end -->\n\n- **164 layers**: 4.58% "
               "against 8.89% (p 0.016, Holm 0.031): resolved.\n")
    assert over_claims(planted) == ["- **164 layers**: 4.58% against 8.89% (p 0.016, Holm 0.031): resolved."]
    assert over_claims(planted.replace("0 in the paper's order", "1 in the paper's order")) == []
    table = "<!-- generated: y -->\n| a < b | +1.0 | 10 | 0.0078 | {} |\n<!-- end -->\nAt n = 10 a < b is resolved.\n"
    assert over_claims(table.format("in order")) == [] and over_claims(table.format("**reversed**")) == []
    assert over_claims(table.format("unresolved")) == ["At n = 10 a < b is resolved."]
    budgets = ("<!-- generated: z -->\n| a < b | unres. -0.50 (Holm 0.3); loss 0.1 / 0.2 | {} (Holm 0.02); loss 0.01 / "
               "0.02 | **x** |\n<!-- end -->\nAt 2x a < b is resolved.\n")
    assert over_claims(budgets.format("reversed -1.11")) == []
    assert over_claims(budgets.format("unres. -1.11")) == ["At 2x a < b is resolved."]


def test_the_claims_summary_counts_each_studys_own_verdicts_and_names_the_unmeasured():
    """Study a tests four claims, b two (one of them a's first, on the same runs), c none of its
    registered family (its output predates it), d is not run. The totals count a's and b's shared
    claim once: 5 distinct. Holm across the 5 by hand: p 0.001, 0.004, 0.01, 0.02, 0.3 give 0.005,
    0.016, 0.03, 0.04, 0.3: four resolved (three in order, one reversed), one unresolved."""
    def claim(better, worse, verdict, p, mean):
        return {"better": better, "worse": worse, "metric": "test_error", "n": 9, "verdict": verdict, "p": p,
                "mean": mean}

    a_claims = [claim("x", "y", "in order", 0.001, 1.0), claim("x", "z", "in order", 0.004, 1.0),
                claim("y", "z", "reversed", 0.01, -1.0), claim("w", "z", "unresolved", 0.3, 0.5)]
    b_claims = [claim("p", "q", "in order", 0.001, 1.0), claim("p", "r", "unresolved", 0.02, 2.0)]
    meta = {"finished": "2026-12-06 16:04 UTC", "wall_s": 3900.0}

    def entry(name, claims, keys, records, hypotheses=0, sized=9):
        return {"name": name, "members": [(c["better"], c["worse"], c["metric"]) for c in claims], "keys": keys,
                "hypotheses": hypotheses, "sized": sized, "records": records, "meta": meta if records else None}

    def study(claims):
        return {"event": "study", "family": {"declared": True}, "claims": claims}

    text = S.claims_summary_table([
        entry("a", a_claims, ["k1", "k2", "k3", "k4"], [{"event": "row"}, study(a_claims)]),
        entry("b", b_claims, ["k1", "k5"], [study(b_claims)], hypotheses=1, sized=10),
        entry("c", a_claims, ["k1", "k2", "k3", "k4"], [study(a_claims[:2])]),  # an older, smaller family
        entry("d", b_claims, ["k6", "k7"], None, sized=12)])
    lines = text.splitlines()
    assert lines[2] == "| `a` | 4 | 9 | 2 | 1 | 1 | 2026-12-06, 1 h 5 min |"
    assert lines[3] == "| `b` | 2 (1 hypotheses) | 9 | 1 | 0 | 1 | 2026-12-06, 1 h 5 min |"
    assert lines[4] == "| `c` | 4 | (9) | - | - | - | registered; not yet run on its registered seeds |"
    assert lines[5] == "| `d` | 2 | (12) | - | - | - | registered; not yet run on its registered seeds |"
    assert "2 of 4 studies run on their registered family and seeds" in text
    assert ("Over the 5 distinct claims of the studies run (a claim that two studies test on the same runs counted "
            "once): 2 in the paper's order, 1 reversed, 2 unresolved, each within its study's family; with Holm "
            "across all 5 at once: 3 in the paper's order, 1 reversed, 1 unresolved.") in text

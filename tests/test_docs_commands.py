"""Every `resnet ...` line in the README's and the docs' code blocks still parses: its command
exists, its flags exist and take the values given. The `resnet train` lines also build their spec
(`--dry-run`: bundled config names, `--set` keys and values, depth rules), so a renamed spec key or
config fails here, not in a reader's shell. Nothing trains."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from resnet_cli.cli import app

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINE = re.compile(r"^(?:\$\s+)?(?:[A-Z_]+=\S+\s+)*(?:\.venv/bin/)?resnet\s+(.*)$")


def _group():
    return typer.main.get_command(app)


def documented(pages: list[Path] = PAGES) -> list[tuple[str, list[str]]]:
    """(where, argv after `resnet`) for each command line in the pages' code blocks; usage synopses
    (placeholders such as `RUN_DIR ...` or `[--set ...]`) are not command lines and are left out."""
    group = _group()
    ctx = group.make_context("resnet", [], resilient_parsing=True)
    names = set(group.list_commands(ctx))
    out = []
    for page in pages:
        text = page.read_text(encoding="utf-8")
        for block in re.findall(r"```(?:bash|sh|shell|console)?\n(.*?)```", text, flags=re.S):
            for line in block.replace("\\\n", " ").splitlines():
                m = LINE.match(line.strip())
                if not m or "..." in line or "[" in m.group(1).split("#")[0].replace("=[", ""):
                    continue
                command = re.split(r"\s(?:\||&&|;|>)\s", m.group(1))[0]
                argv = shlex.split(command, comments=True)
                if argv and argv[0] in names:
                    out.append((f"{page.name}: resnet {command.split('#')[0].strip()}", argv))
    return out


COMMANDS = documented()


def parse_error(argv: list[str]) -> str | None:
    """What Click says about these arguments, or None when they parse (after the group's own
    rewrite of options whose value may be left out, cli.with_bare_values)."""
    from resnet_cli.cli import with_bare_values

    group = _group()
    ctx = group.make_context("resnet", [], resilient_parsing=True)
    cmd = group.get_command(ctx, argv[0])
    try:
        cmd.make_context(argv[0], with_bare_values(list(argv[1:])), parent=ctx)
    except Exception as exc:  # Click's UsageError, BadParameter, NoSuchOption...
        message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
        return f"{type(exc).__name__}: {message}"
    return None


def test_the_docs_hold_command_lines():
    assert len(COMMANDS) > 80  # a broken extractor finds none and would pass everything below
    assert {argv[0] for _, argv in COMMANDS} >= {"train", "ablate", "degrade", "gradnorm", "report"}


def test_every_documented_command_line_parses():
    bad = [f"{where} -> {err}" for where, argv in COMMANDS if (err := parse_error(argv))]
    assert not bad, "\n".join(bad)


def test_a_flag_that_no_longer_exists_is_caught(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("```bash\nresnet train digits/residual8 --epocs 3   # a typo\nresnet degrade --jobs 2\n```\n")
    (_, argv), (_, ok) = documented([page])
    assert argv == ["train", "digits/residual8", "--epocs", "3"]
    assert "--epocs" in parse_error(argv) and parse_error(ok) is None


def _dry_runnable(argv: list[str]) -> bool:
    # Lines that need a run directory, processes, a GPU or a file of the reader's own (`my.yaml`)
    # are checked by parsing alone.
    text = " ".join(argv)
    own_file = len(argv) > 1 and argv[1].endswith((".yaml", ".yml")) and not (ROOT / argv[1]).exists()
    return argv[0] == "train" and not own_file and not any(f in text for f in ("--resume", "--nproc", "--device cuda"))


@pytest.mark.parametrize("where, argv", [c for c in COMMANDS if _dry_runnable(c[1])], ids=lambda v: "")
def test_every_documented_train_line_builds_its_spec(in_tmp, where, argv):
    r = CliRunner().invoke(app, [*argv, "--dry-run", "--json"])
    assert r.exit_code == 0, f"{where}: {r.stderr or r.output}"

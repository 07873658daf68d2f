"""The README's, the docs pages' and the --help texts' examples run as written, the quick start prints
what the README shows, and every local link of the documentation leads somewhere.

Every ``sh`` block of README.md and then of each page of docs/ (in name order) is run in order, in a
scratch directory holding the checkout's traces/, network_configs/ and tests/, so that each step
finds the files the earlier ones wrote; then every ``libra-astra`` example of every command's --help
runs there too. Commands that need the real simulator run only when ASTRA_SIM_BIN is set (as do the
ones that read their output); the few commands that are not run at all are listed in NOT_RUN with
the reason."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from libra_astra.cli import main
from libra_astra.demand.types import demand_from_dict

from tool_module import tool_module

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
# README first: its quick start and steps write the files the pages' examples may read
PAGES = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
HAS_SIM = bool(os.environ.get("ASTRA_SIM_BIN"))
NEEDS_SIM = ("runs/gpt3-loop",)       # paths only a simulator run writes
NOT_RUN = {
    "pip install": "the install itself (the CI script runs it)",
    "python -m pytest": "the test suite itself",
    "python tools/gen_traces.py": "writes 1.1 GB, or over the shipped samples (the generator is tested in test_tracegen.py)",
    "libra-astra optimize /tmp/large/": "reads the 1.1 GB set the line before it writes",
    "export ASTRA_SIM_BIN": "a path to fill in",
    "eval ": "shell set-up (completion is tested below)",
}
COMMAND_ORDER = ["generate", "demand", "measure", "calibrate", "optimize", "pareto", "emit", "simulate", "predict", "loop", "show", "plot"]


def commands(text: str) -> list[str]:
    """Shell command lines of a text: continuation lines joined, comments dropped."""
    out, cur = [], ""
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        if line.endswith("\\"):
            cur += line[:-1] + " "
            continue
        out.append(cur + line)
        cur = ""
    return out


def sh_commands(text: str) -> list[str]:
    return [c for block in re.findall(r"```sh\n(.*?)```", text, re.S) for c in commands(block)]


def readme_commands() -> list[str]:
    return sh_commands(README)


def doc_commands() -> list[tuple[str, str]]:
    """(page, command) of every sh block of the README and the docs pages, in running order."""
    return [(p.relative_to(ROOT).as_posix(), c) for p in PAGES for c in sh_commands(p.read_text())]


def help_commands() -> list[tuple[str, str]]:
    out = []
    for name in COMMAND_ORDER:
        text = CliRunner().invoke(main, [name, "--help"], terminal_width=200).output
        examples = text.split("Example", 1)[1].split("Options:", 1)[0] if "Example" in text else ""
        out += [(name, c) for c in commands(examples) if c.startswith("libra-astra ")]
    return out


def needs_sim(cmd: str) -> bool:
    words = shlex.split(cmd, comments=True)
    return len(words) > 1 and words[1] in ("simulate", "loop") or any(p in cmd for p in NEEDS_SIM)


def run_line(cmd: str):
    """Run one line as the shell would: libra-astra in-process, $ASTRA_SIM_BIN expanded."""
    words = [os.path.expandvars(w) for w in shlex.split(cmd, comments=True)]
    assert words[0] == "libra-astra", cmd
    return CliRunner().invoke(main, words[1:])


def is_skipped(cmd: str) -> bool:
    return any(cmd.startswith(k) for k in NOT_RUN)


def link_sandbox(d: Path) -> Path:
    for name in ("traces", "network_configs", "tests"):
        (d / name).symlink_to(ROOT / name)
    return d


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    return link_sandbox(tmp_path_factory.mktemp("readme"))


def test_every_doc_and_help_example_runs(sandbox, monkeypatch):
    pytest.importorskip("matplotlib", reason="the README's examples draw pictures: pip install -e '.[test,plot]'")
    monkeypatch.chdir(sandbox)
    ran, failed = [], []
    for page, cmd in doc_commands() + help_commands():
        cmd = cmd.split(" && ")[-1]      # an install chained before a command is the CI script's job
        if is_skipped(cmd) or (needs_sim(cmd) and not HAS_SIM):
            continue
        if cmd.startswith("python "):
            p = subprocess.run([sys.executable, *shlex.split(cmd)[1:]], cwd=ROOT, capture_output=True, text=True)
            if p.returncode != 0:
                failed.append((page, cmd, p.stdout + p.stderr))
            ran.append(cmd)
            continue
        r = run_line(cmd)
        ran.append(cmd)
        if r.exit_code != 0:
            failed.append((page, cmd, r.output))
    assert not failed, "\n\n".join(f"{p}: {c}\n{o}" for p, c, o in failed)
    assert len(ran) >= 30
    # the walk ends with pictures
    for name in ("design.svg", "gpt3.traffic.svg", "frontier.svg", "frontier.png"):
        assert (sandbox / name).stat().st_size > 1000
    if HAS_SIM:
        assert (sandbox / "loop.png").stat().st_size > 1000


def test_every_command_has_examples():
    names = {n for n, _ in help_commands()}
    assert names == set(COMMAND_ORDER)


def test_nothing_unrun_by_accident():
    # Each line of every page is run, or needs the simulator, or is in NOT_RUN.
    for page, cmd in doc_commands():
        assert cmd.startswith(("libra-astra ", "python tools/libra_study.py")) or is_skipped(cmd), (page, cmd)


def test_quick_start_prints_what_the_readme_shows(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib", reason="the quick start draws a picture: pip install -e '.[test,plot]'")
    quick = README.split("## Quick start", 1)[1]
    cmd = commands(re.search(r"```sh\n(.*?)```", quick, re.S).group(1))[0]
    cmd = cmd.split(" && ")[-1]
    shown = re.search(r"It prints.*?\n```\n(.*?)```", quick, re.S).group(1).splitlines()
    link_sandbox(tmp_path)
    monkeypatch.chdir(tmp_path)
    r = run_line(cmd)
    assert r.exit_code == 0, r.output
    got = r.output.splitlines()

    def solver_time_free(lines):
        return [re.sub(r"; [\d.]+ ms$", "; (time) ms", ln) for ln in lines]

    assert solver_time_free(got) == solver_time_free(shown)


def test_readme_loop_without_a_simulator_says_how_to_name_one(tmp_path, monkeypatch):
    cmd = next(c for _, c in doc_commands() if c.startswith("libra-astra loop"))
    link_sandbox(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ASTRA_SIM_BIN", raising=False)
    r = run_line(cmd)
    assert r.exit_code != 0
    assert r.output.strip() == ("Error: no ASTRA-sim binary given: set ASTRA_SIM_BIN to the path of "
                                "AstraSim_Analytical_Congestion_Unaware or pass --astra-sim BIN")


def demand_example() -> str:
    """The by-hand demand file of docs/file-formats.md."""
    return re.search(r"```json\n(.*?)```", (ROOT / "docs" / "file-formats.md").read_text(), re.S).group(1)


def test_documented_demand_example_loads_and_optimizes(tmp_path):
    block = demand_example()
    d = demand_from_dict(json.loads(block), "docs/file-formats.md")
    assert d.npus_per_dim == (16, 8, 32) and len(d.rank_classes[0].collectives) == 2
    p = tmp_path / "d.json"
    p.write_text(block)
    r = CliRunner().invoke(main, ["optimize", "--demand", str(p), "--network", str(ROOT / "network_configs/paper_3d.yml"),
                                  "--cost", str(ROOT / "network_configs/cost.yml"), "--total-bw", "500", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["relative_gap"] <= 1e-6 and sum(out["optimum"]["bandwidth_gbps"]) == pytest.approx(500)


def test_install_line_installs_the_plot_extra_and_mlc_chakra_last():
    install = next(c for c in readme_commands() if c.startswith("pip install"))
    parts = [p.strip() for p in install.split("&&")]
    assert parts == ['pip install -e ".[test,plot]"', 'pip install --no-deps "mlc-chakra==1.0.0"']
    ci = (ROOT / ".ci" / "run").read_text()
    assert 'pip install -q -e ".[test,plot]"\npip install -q --no-deps "mlc-chakra==1.0.0"\npython -m pytest -q' in ci
    # the quick start's second command is the test command the CI script runs
    quick = README.split("## Quick start", 1)[1]
    assert commands(re.search(r"```sh\n(.*?)```", quick, re.S).group(1))[1] == "python -m pytest -q"


def test_shell_completion_as_documented():
    line = next(c for c in readme_commands() if c.startswith("eval "))
    assert line == 'eval "$(_LIBRA_ASTRA_COMPLETE=bash_source libra-astra)"'
    r = CliRunner().invoke(main, [], prog_name="libra-astra", complete_var="_LIBRA_ASTRA_COMPLETE",
                           env={"_LIBRA_ASTRA_COMPLETE": "bash_complete", "COMP_WORDS": "libra-astra op",
                                "COMP_CWORD": "1"})
    assert "plain,optimize" in r.output.split()


# --- links ---------------------------------------------------------------------------------------

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def _prose(text: str) -> str:
    """Text without fenced blocks and inline code, where brackets are not links."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    h = re.sub(r"`", "", heading.strip().lower())
    h = re.sub(r"[^\w\- ]", "", h)
    return h.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for m in re.finditer(r"^#{1,6} +(.+?) *$", re.sub(r"^```.*?^```", "", path.read_text(), flags=re.S | re.M),
                         re.M):
        s = slug(m.group(1))
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else f"{s}-{n}")
    return out


def test_slug_matches_githubs_anchors():
    assert slug("3. emit, simulate, loop: the ASTRA-sim round trip") == "3-emit-simulate-loop-the-astra-sim-round-trip"
    assert slug('Demand file (`"format": "libra_astra.demand", "version": 1`)') == \
        "demand-file-format-libra_astrademand-version-1"


def test_every_local_link_resolves():
    broken = []
    for page in PAGES:
        for target in LINK.findall(_prose(page.read_text())):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):     # http:, https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}: no such file")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{page.relative_to(ROOT)}: {target}: no heading with that anchor")
    assert not broken, "\n".join(broken)


def test_the_readme_links_every_docs_page():
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in LINK.findall(_prose(README))}
    assert [p.name for p in PAGES[1:] if p.resolve() not in linked] == []


# --- what moved to docs/ stays complete ----------------------------------------------------------

def _section(page: str, heading: str) -> str:
    text = (ROOT / page).read_text()
    return text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]


def test_commands_page_names_every_option_of_every_command():
    missing = [f"libra-astra {opt}" for p in main.params for opt in p.opts
               if isinstance(p, click.Option) and f"`{opt}" not in _section("docs/commands.md", "libra-astra (global options)")]
    for name, cmd in main.commands.items():
        section = _section("docs/commands.md", name)
        for p in cmd.params:
            if isinstance(p, click.Option):
                missing += [f"{name} {opt}" for opt in p.opts + p.secondary_opts if f"`{opt}" not in section]
    assert missing == []


def test_benchmark_figure_blocks_live_in_the_benchmarks_page():
    figures = tool_module("readme_figures")
    assert figures.PAGE == ROOT / "docs" / "benchmarks.md"
    text = figures.PAGE.read_text()
    for name in ("trace", "emit", "overlap", "search", "newton", "peers"):
        assert text.count(f"<!-- figures:{name} -->") == 1 and text.count(f"<!-- /figures:{name} -->") == 1
        body = text.split(f"<!-- figures:{name} -->\n", 1)[1].split(f"\n<!-- /figures:{name} -->", 1)[0]
        assert body.startswith("| ") and figures.replace_block(text, name, body) == text
    assert "<!-- figures:" not in README

"""The README and docs/ hold up as a new user reads them: the README is short and has its worked example
and glossary, every relative link resolves, and every command they show runs (a dry run where it would
measure, `--help` where it needs a run's files first)."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO

PAGES = [
    REPO / "README.md",
    *sorted((REPO / "docs").glob("*.md")),
    REPO / "config" / "README.md",
    REPO / "docs" / "results" / "README.md",
]
#: commands shown but not run here, each with why: installs and the test suite take minutes, the rest
#: need a cluster, a browser or a finished run's files that a verb's --help stands in for
NOT_RUN = {
    "python -m pip install": "an install",
    "python -m pytest": "the test suite itself",
    "python -m mypy": "the type check, which tests/test_types.py runs",
    "mlflow ui": "a server that runs until stopped",
    "snakemake --workflow-profile profiles/slurm": "needs a SLURM cluster (tests/test_slurm.py runs one)",
}
#: verbs whose commands need a finished run's files: their --help is run instead, after this many words
#: of the command (the verb, and an exporter's name)
HELP_ONLY = {"compare": 1, "export": 2, "run-cell": 1}


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of every fenced code block."""
    blocks, language, body = [], None, []
    for line in text.splitlines():
        fence = re.match(r"^```(\w*)\s*$", line)
        if fence and language is None:
            language, body = fence.group(1), []
        elif line.startswith("```") and language is not None:
            blocks.append((language, "\n".join(body)))
            language = None
        elif language is not None:
            body.append(line)
    return blocks


def shown_commands() -> list[tuple[str, str]]:
    """(page, command) of every shell command in a bash block: continuation lines joined, trailing
    comments dropped, `a && b` split."""
    out = []
    for page in PAGES:
        for language, body in fenced_blocks(page.read_text()):
            if language not in ("bash", "sh"):
                continue
            joined = re.sub(r"\\\n\s*", " ", body)
            for line in joined.splitlines():
                line = re.sub(r"\s+#.*$", "", line).strip()
                if line and not line.startswith("#"):
                    out += [(page.name, part.strip()) for part in line.split("&&")]
    return out


def test_the_readme_is_short_with_its_worked_example_and_glossary():
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= 300
    assert text.startswith("# inferbench\n\n```bash\npython -m pip install -e . && snakemake")
    example = text.split("## Benchmark your own model", 1)[1]
    shown = yaml.safe_load(fenced_blocks(example)[0][1])
    assert shown == yaml.safe_load((REPO / "config" / "examples" / "my_model.yaml").read_text())
    assert "--configfile config/examples/my_model.yaml" in example
    glossary = text.split("## Reading the report", 1)[1].split("\n## ", 1)[0]
    words = {row.split("|")[1].strip() for row in glossary.splitlines() if row.startswith("| ") and "---" not in row}
    assert {"device boundary", "end to end", "host-bound", "device-bound", "lease", "within the spread"} <= words
    assert not re.search(r"\b[0-9a-f]{7,40}\b", text), "no commit hashes in the README"
    assert not re.search(r"(?i)\blease ?\d", text), "no lease numbers in the README"


def slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(page):
    text = page.read_text()
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"^[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        assert file.exists(), f"{page.name}: {target} does not exist"
        if anchor and file.suffix == ".md":
            anchors = {slug(h) for h in re.findall(r"(?m)^#+ (.+)$", file.read_text())}
            assert anchor in anchors, f"{page.name}: no heading for #{anchor} in {file.name}"


def test_every_shown_command_is_run_or_named_as_not_run():
    for page, command in shown_commands():
        runs = command.startswith(("snakemake", "python -m inferbench"))
        assert runs or any(command.startswith(prefix) for prefix in NOT_RUN), f"{page}: {command}"


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """A copy of the workflow: its dry runs write .snakemake/ there, not in the checkout."""
    root = tmp_path_factory.mktemp("docs")
    for name in ("Snakefile", "workflow", "config", "profiles", "envs", "src"):
        source = REPO / name
        (shutil.copytree if source.is_dir() else shutil.copy)(source, root / name)
    return root


def runnable_commands() -> list[str]:
    """The shown commands this test runs: those of snakemake and of inferbench's verbs."""
    commands = {c for _, c in shown_commands() if c.startswith(("snakemake", "python -m inferbench"))}
    return sorted(c for c in commands if not any(c.startswith(prefix) for prefix in NOT_RUN))


@pytest.mark.parametrize("command", runnable_commands())
def test_a_shown_command_runs(workdir, command):
    argv = shlex.split(command)
    if argv[0] == "snakemake":
        argv = [sys.executable, "-m", "snakemake", *argv[1:], "--dry-run"]
    else:
        argv = [sys.executable, *argv[1:]]  # python -m inferbench <verb> ...
        if (words := HELP_ONLY.get(argv[3])) is not None:
            argv = [*argv[: 3 + words], "--help"]
    done = subprocess.run(argv, cwd=workdir, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{command}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"


def test_the_readmes_preset_table_counts_the_cells_each_preset_plans():
    """The cell counts of the README's presets, on a machine without a GPU and with one, are the planner's."""
    from inferbench.plan.config import validate_config
    from inferbench.plan.grid import config_cells, deep_merged

    base = yaml.safe_load((REPO / "config/config.yaml").read_text())
    rows = re.findall(r"^\| `(\w+)` \| [^|]+ \| (\d+) / (\d+) \|", (REPO / "README.md").read_text(), re.M)
    assert len(rows) >= 8, "the table of presets"
    for name, cpu, gpu in rows:
        config = deep_merged(base, yaml.safe_load((REPO / f"config/studies/{name}.yaml").read_text()))
        validate_config(config)
        planned = (len(config_cells(config, has_cuda=False)), len(config_cells(config, has_cuda=True)))
        assert (int(cpu), int(gpu)) == planned, f"{name}: the README says {cpu} / {gpu}, the planner {planned}"

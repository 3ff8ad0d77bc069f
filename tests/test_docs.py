"""The project documents itself (issue 36): its definitions live in ``docs/``, and every reference
in the code, the workflow, the config and the documentation resolves inside the repository.

Read from the tracked files (``git ls-files``, or a walk of the checkout without git): a page
cited as ``docs/<page>.md`` exists, a section cited as ``docs/<page>.md, "Section"`` (or
``("Section"``) is a heading of that page, a section cited as ``README, "Section"`` is a heading
of the README, and nothing names a file outside the repository (the references the project was
first written against)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TEXT = (".py", ".md", ".smk", ".yaml", ".yml", ".rst", ".txt", ".toml", ".cfg", ".html", ".js", ".sh")
REFERENCE = ("metrics", "recalibration", "results", "nats-bench", "architecture")  # the definitions the code cites
PAGES = ("metrics", "recalibration", "results", "nats-bench", "architecture", "running", "tools", "cluster",
         "populations", "python", "inference", "index", "analysis", "config")
# Files outside the repository that the code once cited: users never have them.
OUTSIDE = re.compile(r"shared/docs|\b(?:metrics|recalibration)-spec\.md|nats-bench-facts|snakemake-notes")
CITE_DOC = re.compile(r"docs/([A-Za-z0-9_-]+)\.md(?:`{0,2})(?:,\s*|\s*\(|:\s*)?(?:under\s+|sections?\s+)?\\?[\"“]([^\"”\\\n]{2,80})")
CITE_README = re.compile(r"(?<!, )(?<!\w)README(?:\.md)?,\s*\\?[\"“]([^\"”\\\n]{2,80})")  # not README as a value


def tracked_files() -> list[Path]:
    try:
        names = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
        files = [ROOT / n for n in names]
    except (OSError, subprocess.CalledProcessError):  # a copy without git
        files = [p for p in ROOT.rglob("*") if ".git" not in p.parts and ".venv" not in p.parts]
    return [p for p in files if p.is_file() and (p.suffix in TEXT or p.name in ("Snakefile", "Makefile"))]


def _norm(text: str) -> str:
    text = text.replace("λ", "lambda").replace("μ", "mu").replace("`", "").lower()
    return re.sub(r"[^a-z0-9]+", " ", text).strip()


def headings(path: Path) -> list[str]:
    """The Markdown headings of ``path``, normalised; a ``#`` line inside a fenced block is code."""
    out, fenced = [], False
    for line in path.read_text().splitlines():
        fenced ^= line.startswith("```")
        if line.startswith("#") and not fenced:
            out.append(_norm(line.lstrip("#")))
    return out


def _resolves(section: str, heads: list[str]) -> bool:
    want = _norm(section)
    return bool(want) and any(h.startswith(want) or want.startswith(h) and len(h) > 3 for h in heads)


FILES = tracked_files()


@pytest.mark.parametrize("page", PAGES)
def test_each_reference_page_is_in_the_repository(page):
    path = ROOT / "docs" / f"{page}.md"
    assert path.is_file(), path
    assert len(headings(path)) >= (4 if page in REFERENCE else 1), f"{path}: too few sections"
    assert not OUTSIDE.search(path.read_text()), f"{path} cites a file outside the repository"


def test_nothing_cites_a_file_outside_the_repository():
    found = [f"{p.relative_to(ROOT)}:{i}: {line.strip()[:100]}" for p in FILES if p.name != "test_docs.py"
             for i, line in enumerate(p.read_text(errors="replace").splitlines(), 1) if OUTSIDE.search(line)]
    assert not found, "references to files users do not have:\n" + "\n".join(found)


def test_every_cited_page_and_section_exists():
    wrong = []
    readme = headings(ROOT / "README.md")
    for path in FILES:
        if path.name == "test_docs.py":  # its own examples of citations
            continue
        text = path.read_text(errors="replace").replace("\n    ", " ").replace("\n", " ")
        where = path.relative_to(ROOT)
        for page in set(re.findall(r"docs/([A-Za-z0-9_-]+)\.md", text)):
            if not (ROOT / "docs" / f"{page}.md").is_file():
                wrong.append(f"{where}: docs/{page}.md does not exist")
        for page, section in CITE_DOC.findall(text):
            target = ROOT / "docs" / f"{page}.md"
            if target.is_file() and not _resolves(section, headings(target)):
                wrong.append(f"{where}: docs/{page}.md has no section {section!r}")
        for section in CITE_README.findall(text):
            if not _resolves(section, readme):
                wrong.append(f"{where}: README has no section {section!r}")
    assert not wrong, "\n".join(sorted(set(wrong)))


def test_the_resolver_finds_a_wrong_section(tmp_path):
    assert _resolves("Choosing lambda and mu", ["choosing lambda and mu"])
    assert _resolves("Common rules", headings(ROOT / "docs" / "recalibration.md"))
    assert not _resolves("No such section", headings(ROOT / "docs" / "recalibration.md"))
    assert CITE_README.findall('see README, "The fit store")') == ["The fit store"]
    assert CITE_DOC.findall('(docs/metrics.md, "OoD AUROC")') == [("metrics", "OoD AUROC")]


def python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.S)


def test_the_python_examples_of_the_readme_and_docs_run(tmp_path, monkeypatch):
    """The Python blocks of the README and docs/, on small inputs named as the blocks name them (in a temporary
    directory); a block that reads a finished run's files (``results/``) is left to the workflow
    tests, one that needs the real archives (``archive_dir``) to tests/test_archive_loading.py."""
    import numpy as np
    import torch

    monkeypatch.chdir(tmp_path)
    (tmp_path / "data" / "zoo" / "cifar10").mkdir(parents=True)

    g = torch.Generator().manual_seed(0)
    n, k, m = 200, 10, 3
    logits = torch.randn(n, k, generator=g, dtype=torch.float64) * 3
    labels = torch.randint(0, k, (n,), generator=g)
    names = {"logits": logits, "labels": labels, "probs": torch.softmax(logits, -1),
             "logits_mnk": torch.randn(m, n, k, generator=g, dtype=torch.float64) * 3,
             "logits_val_mnk": torch.randn(m, 40, k, generator=g, dtype=torch.float64) * 3,
             "labels_val": torch.randint(0, k, (40,), generator=g),
             "logits_test_mnk": torch.randn(m, 160, k, generator=g, dtype=torch.float64) * 3,
             "np": np, "name": "model0", "z": logits.numpy().astype(np.float32), "y": labels.numpy()}
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    blocks = [(page, b) for page in pages for b in python_blocks(page)
              if "results/" not in b and "archive_dir" not in b]  # a run's files, real archives: elsewhere
    assert len(blocks) >= 2, "no Python example to run"
    for page, block in blocks:
        exec(compile(block, str(page.relative_to(ROOT)), "exec"), dict(names))  # noqa: S102 - our own pages


def test_the_cli_help_lists_the_users_commands_and_names_the_job_steps_apart():
    from calibench.run.cli import JOB_COMMANDS, USER_COMMANDS, build_parser

    text = build_parser().format_help()
    listing, _, epilog = text.partition("The workflow's job steps")
    assert epilog and all(job in epilog for job in JOB_COMMANDS)
    assert "job:" not in listing
    for command in USER_COMMANDS:
        assert re.search(rf"^\s+{re.escape(command)}\b", listing, flags=re.M), command


def test_the_docs_build_as_a_site_with_no_warning(tmp_path):
    """``mkdocs build --strict``: every page in the navigation, no broken link or reference."""
    pytest.importorskip("mkdocs")
    import sys

    import yaml

    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]
    listed = set()
    for item in nav:
        for value in item.values():
            listed |= {value} if isinstance(value, str) else {v for sub in value for v in sub.values()}
    assert listed == {p.name for p in (ROOT / "docs").glob("*.md")}, "a page missing from the navigation"
    assert all((tmp_path / name.removesuffix(".md") / "index.html").is_file() or name == "index.md" for name in listed)


def test_every_cited_test_and_bench_file_exists():
    """A file cited as ``tests/...py`` or ``bench/...py`` in the README, docs/ or the code exists
    (a renamed test file leaves no dangling reference)."""
    cited = set()
    for path in FILES:
        if path.name != "BENCHMARKS.md":  # its dated sections record what was, under the names of the time
            cited |= set(re.findall(r"\b((?:tests|bench)/[A-Za-z0-9_]+\.py)\b", path.read_text(errors="replace")))
    missing = sorted(c for c in cited if not (ROOT / c).is_file())
    assert not missing, missing


def test_the_readmes_screenshots_are_in_the_repository_and_are_pngs():
    """The README's images (a screenshot of the report and one of the explorer, issue 36) are
    PNG files of the repository, each named by exactly one image link."""
    images = re.findall(r"!\[[^\]]+\]\(([^)]+)\)", (ROOT / "README.md").read_text())
    assert sorted(images) == ["docs/images/explorer.png", "docs/images/report.png"]
    for image in images:
        head = (ROOT / image).read_bytes()[:24]
        assert head[:8] == b"\x89PNG\r\n\x1a\n", image
        width, height = int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
        assert width >= 1000 and 500 <= height <= 1500, (image, width, height)  # legible, one screen


def shell_commands(path: Path) -> list[str]:
    """The command lines of the shell blocks (bare or ``bash``) of a page: lines that start with
    a command the project has (``calibench``, ``snakemake``, ``make``, ``export``), comments cut."""
    out = []
    for lang, body in re.findall(r"^```(\w*)\n(.*?)^```", path.read_text(), flags=re.S | re.M):
        if lang not in ("", "bash", "sh", "shell"):
            continue
        for line in body.splitlines():
            first = line.split(" ", 1)[0]
            if first.removeprefix(".venv/bin/") in ("calibench", "snakemake", "make", "export"):
                out.append(line)
    return out


def test_the_shell_examples_of_the_readme_and_docs_are_commands_that_exist():
    """Every command line of the README's and docs' shell blocks parses: `calibench` lines with
    calibench's own parser (a renamed command or option fails here), `snakemake` lines with
    Snakemake's, `make` targets in the Makefile, and every exported variable is one the project
    reads. They are not run: what they do is tested by the workflow tests."""
    import shlex

    from snakemake.cli import get_argument_parser

    from calibench.run.cli import build_parser

    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    lines = [(page, line) for page in pages for line in shell_commands(page)]
    assert len(lines) >= 25, lines
    makefile = (ROOT / "Makefile").read_text()
    code = "\n".join(p.read_text() for p in [*ROOT.glob("src/calibench/**/*.py"), *ROOT.glob("workflow/**/*.smk"),
                                              *ROOT.glob("profiles/**/*.yaml")])
    calibench, snakemake = build_parser(), get_argument_parser()
    for page, line in lines:
        argv = shlex.split(line, comments=True)
        where = f"{page.relative_to(ROOT)}: {line}"
        program = argv[0].removeprefix(".venv/bin/")
        if program == "make":
            assert all(re.search(rf"^{re.escape(t)}:", makefile, flags=re.M) for t in argv[1:]), where
        elif program == "export":
            for assignment in argv[1:]:
                name = assignment.split("=", 1)[0]
                assert name in code, f"{where}: nothing reads {name}"
        else:
            try:
                (calibench if program == "calibench" else snakemake).parse_args(argv[1:])
            except SystemExit as exc:  # argparse's way of saying no
                raise AssertionError(f"{where}: does not parse") from exc


def _schema_keys(node, prefix="", defs=None) -> set[str]:
    """Every key path of the config schema: ``recalibration.odir.search.grid``; a mapping of
    names (populations) as ``populations.<name>.source``."""
    defs = node.get("$defs", {}) if defs is None else defs
    keys = set()
    props = dict(node.get("properties") or {})
    for alternative in node.get("oneOf") or []:  # a population's two forms
        props.update({k: v for k, v in (alternative.get("properties") or {}).items() if v})
    for name, sub in props.items():
        path = f"{prefix}{name}"
        keys.add(path)
        if isinstance(sub, dict):
            sub = defs.get(sub["$ref"].rsplit("/", 1)[-1], {}) if "$ref" in sub else sub
            keys |= _schema_keys(sub, path + ".", defs)
            if isinstance(sub.get("additionalProperties"), dict) and sub["additionalProperties"].get("properties"):
                keys |= _schema_keys(sub["additionalProperties"], path + ".<name>.", defs)
    return keys


def test_every_config_key_is_in_the_configuration_reference_and_every_key_there_exists():
    """docs/config.md names each key of the schema as its dotted path, and no key the schema lacks."""
    import yaml

    schema = yaml.safe_load((ROOT / "workflow/schemas/config.schema.yaml").read_text())
    keys = _schema_keys(schema)
    page = (ROOT / "docs" / "config.md").read_text()
    named = set()
    for cell in re.findall(r"^\| ([^|]+) \|", page, flags=re.M):  # the tables' first column
        for code in re.findall(r"`([^`]+)`", cell):
            named.add(code)
    # `population.<space>.mode`: a row for each space's key alike
    named |= {k for k in keys for n in named if "<" in n and n != k
              and re.fullmatch(re.sub(r"<[a-z]+>", "[A-Za-z0-9-]+", re.escape(n).replace("\\<", "<").replace("\\>", ">")), k)}
    leaves = [k for k in keys if not any(other.startswith(k + ".") for other in keys)]  # sections need no row
    parts = [k.split(".") for k in leaves]  # a key is covered where it or a key above it is named (n_test's forms)
    missing = sorted(".".join(p) for p in parts if not any(".".join(p[:i]) in named for i in range(1, len(p) + 1)))
    assert not missing, f"schema keys not in docs/config.md: {missing}"
    unknown = sorted(k for k in named if not k.startswith(".") and k not in keys
                     and not any(re.fullmatch(re.sub(r"<[a-z]+>", "[A-Za-z0-9-]+", k.replace(".", "[.]")), key)
                                 for key in keys))
    assert not unknown, f"docs/config.md names keys the schema does not have: {unknown}"

"""The two dependency lists stay one: environment.yml's pip list equals pyproject's runtime deps."""

import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def test_environment_yml_lists_the_runtime_dependencies():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip_sections = [d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d]
    assert len(pip_sections) == 1
    assert sorted(pip_sections[0]) == sorted(project["dependencies"])
    assert "python=3.11" in env["dependencies"]


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test" in ci
    assert "make test" in (ROOT / "README.md").read_text()


def test_the_quick_subset_and_the_slow_files_name_existing_test_files():
    from conftest import FAST_FILES, SLOW_FILES

    missing = sorted(name for name in {*FAST_FILES, *SLOW_FILES} if not (ROOT / "tests" / name).is_file())
    assert not missing, missing
    assert "test-fast:" in (ROOT / "Makefile").read_text() and "make test-fast" in (ROOT / "README.md").read_text()

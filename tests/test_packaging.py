"""The two dependency lists stay one: environment.yml's pip list equals pyproject's runtime deps."""

import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def _pip_list(path: Path) -> tuple[list, list]:
    env = yaml.safe_load(path.read_text())
    pip_sections = [d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d]
    assert len(pip_sections) == 1
    return pip_sections[0], env["dependencies"]


def test_both_conda_environments_list_the_runtime_dependencies():
    """environment.yml (by hand) installs the dependencies and calibench from the checkout;
    workflow/envs/calibench.yaml (every rule's under --sdm conda) the dependencies only."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    by_hand, dependencies = _pip_list(ROOT / "environment.yml")
    assert sorted(by_hand) == sorted(project["dependencies"] + ["-e ."])
    assert "python=3.11" in dependencies
    jobs, dependencies = _pip_list(ROOT / "workflow" / "envs" / "calibench.yaml")
    assert sorted(jobs) == sorted(project["dependencies"])
    assert "python=3.11" in dependencies


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test" in ci
    assert "make test" in (ROOT / "README.md").read_text()


def test_the_quick_subset_and_the_slow_files_name_existing_test_files():
    from conftest import FAST_FILES, SLOW_FILES

    missing = sorted(name for name in {*FAST_FILES, *SLOW_FILES} if not (ROOT / "tests" / name).is_file())
    assert not missing, missing
    assert "test-fast:" in (ROOT / "Makefile").read_text() and "make test-fast" in (ROOT / "README.md").read_text()

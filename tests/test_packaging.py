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


def test_every_rule_names_the_jobs_conda_environment_and_sdm_conda_points_the_jobs_at_it(monkeypatch, tmp_path):
    """Issue 36, item 7: every `conda:` of the workflow names workflow/envs/calibench.yaml; under
    --sdm conda the jobs run that environment's `python` with the checkout's src/ first on
    PYTHONPATH (said when the run starts); an installed calibench cannot serve and says so. What
    needs conda itself (building the environment) cannot run here: no conda on this machine."""
    import re
    import subprocess
    import sys

    import calibench
    from calibench import runtime

    named = [m for f in sorted((ROOT / "workflow" / "rules").glob("*.smk"))
             for m in re.findall(r"conda:\s*\n\s*\"([^\"]+)\"", f.read_text())]
    assert len(named) >= 10 and set(named) == {"../envs/calibench.yaml"}, named

    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    monkeypatch.setenv("CALIBENCH_PYTHON", "restored after the test")
    assert runtime.conda_jobs_environment("CALIBENCH_PYTHON") == str(ROOT / "src")
    import os
    assert os.environ["CALIBENCH_PYTHON"] == "python"
    assert os.environ["PYTHONPATH"].split(os.pathsep) == [str(ROOT / "src"), "/elsewhere"]
    installed = tmp_path / "lib" / "python3.11" / "site-packages" / "calibench" / "__init__.py"
    monkeypatch.setattr(calibench, "__file__", str(installed))
    with __import__("pytest").raises(ValueError, match="checkout's calibench"):
        runtime.conda_jobs_environment("CALIBENCH_PYTHON")

    proc = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--sdm", "conda", "--cores", "1"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    said = proc.stdout + proc.stderr
    assert f"--sdm conda: jobs run calibench from {ROOT / 'src'} in the environment of workflow/envs/calibench.yaml" \
        in said, said[-3000:]

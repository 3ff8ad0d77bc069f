"""Where the shared NATS-Bench sample files live (next to the repository in CI)."""

import shutil
from pathlib import Path

import pytest
import yaml

SHARED_FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures"
TSS_SIMPLE = SHARED_FIXTURES / "nats-bench-samples" / "NATS-tss-v1_0-3ffb9-simple"
SSS_SIMPLE = SHARED_FIXTURES / "nats-bench-samples" / "NATS-sss-v1_0-50262-simple"


ROOT = Path(__file__).resolve().parents[1]


def copy_workflow(tmp: Path, overrides: dict) -> Path:
    """A copy of the workflow (not the package) in ``tmp``, with ``overrides`` as tiny.yaml."""
    tmp.mkdir(parents=True, exist_ok=True)
    for name in ("Snakefile", "workflow", "config", "profiles", "environment.yml"):
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, tmp / name)
    (tmp / "tiny.yaml").write_text(yaml.safe_dump(overrides))
    return tmp


def require_shared():
    if not SHARED_FIXTURES.is_dir():
        pytest.skip(f"shared fixtures not found at {SHARED_FIXTURES}")

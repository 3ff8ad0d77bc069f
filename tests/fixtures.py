"""Where the shared NATS-Bench sample files live (next to the repository in CI)."""

from pathlib import Path

import pytest

SHARED_FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures"
TSS_SIMPLE = SHARED_FIXTURES / "nats-bench-samples" / "NATS-tss-v1_0-3ffb9-simple"
SSS_SIMPLE = SHARED_FIXTURES / "nats-bench-samples" / "NATS-sss-v1_0-50262-simple"


def require_shared():
    if not SHARED_FIXTURES.is_dir():
        pytest.skip(f"shared fixtures not found at {SHARED_FIXTURES}")

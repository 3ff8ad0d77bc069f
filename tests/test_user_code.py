"""A user's own code is fingerprinted with the user's modules it imports (calibench.user_code):
an edit of a helper module reruns what its callable made; installed packages do not count."""

from __future__ import annotations

import hashlib
import sys

from calibench.config.settings import population_settings
from calibench.user_code import module_sha256


def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_a_module_importing_none_of_the_users_is_its_files_sha256(tmp_path):
    zoo = _write(tmp_path / "code" / "zoo.py", "import os\nimport numpy as np\n\ndef build():\n    return []\n")
    assert module_sha256("zoo", [str(tmp_path / "code")]) == hashlib.sha256(zoo.read_bytes()).hexdigest()
    assert module_sha256("no_such_module_z", [str(tmp_path / "code")]) is None


def test_an_edit_of_an_imported_helper_changes_the_fingerprint_directly_and_through_another(tmp_path):
    code = tmp_path / "code"
    _write(code / "zoo.py", "from nets import wide\nimport layers.blocks as b\n\ndef build():\n    return []\n")
    _write(code / "nets" / "__init__.py", "")
    wide = _write(code / "nets" / "wide.py", "from . import common\nWIDTH = 8\n")
    common = _write(code / "nets" / "common.py", "ACT = 'relu'\n")
    blocks = _write(code / "layers" / "blocks.py", "from ..nets.common import ACT\n")  # a relative import past a package
    _write(code / "unused.py", "X = 1\n")
    before = module_sha256("zoo", [str(code)])
    assert len(before) == 64
    seen = {before}
    for path, text in ((wide, "from . import common\nWIDTH = 16\n"), (common, "ACT = 'gelu'\n"),
                       (blocks, "from nets.common import ACT\nY = 2\n")):
        path.write_text(text)
        now = module_sha256("zoo", [str(code)])
        assert now not in seen, path  # each edit, direct or through another module, changes it
        seen.add(now)
    unchanged = module_sha256("zoo", [str(code)])
    (code / "unused.py").write_text("X = 2\n")  # a module nobody imports
    assert module_sha256("zoo", [str(code)]) == unchanged
    settings = {"populations": {"mine": {"source": "torch", "models": ["zoo:build"], "python_path": [str(code)]}},
                "chunk_size": 10}
    first = population_settings(settings, "mine")["models"][0]["module_sha256"]
    common.write_text("ACT = 'silu'\n")
    assert population_settings(settings, "mine")["models"][0]["module_sha256"] != first


def test_installed_packages_and_the_standard_library_are_not_the_users(tmp_path, monkeypatch):
    code = tmp_path / "code"
    zoo = _write(code / "zoo.py", "import numpy\nimport json\nfrom torch import nn\n\ndef build():\n    return []\n")
    # a python_path folder that is the interpreter's own site-packages: its modules are installed, not the user's
    site = next(p for p in sys.path if p.endswith("site-packages"))
    assert module_sha256("zoo", [str(code), site]) == hashlib.sha256(zoo.read_bytes()).hexdigest()

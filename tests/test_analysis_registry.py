"""calibench.analysis.registry: which parts a config or a set of tables has, and a user's own
parts named in the config (the workflow's side: tests/test_analysis_parts.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from calibench.analysis import registry


def _config(**analysis) -> dict:
    """The project's default config, TSS only, bins 5 and 15, with ``analysis`` added."""
    import yaml

    config = yaml.safe_load((Path(__file__).resolve().parents[1] / "config" / "config.yaml").read_text())
    config.update(spaces=["tss"], bins=[5, 15])
    config["analysis"] = {**config["analysis"], **analysis}
    return config


def test_the_parts_of_a_config_and_of_its_tables_agree():
    names = lambda parts: [p.name for p in parts]  # noqa: E731
    general = ["kendall", "overview", "hcs", "methods", "reliability", "groups"]
    assert names(registry.parts_of_config(_config())) == [*general, "nas", "architecture"]
    assert names(registry.parts_of_tables({"analysis": {}}, [("tss", "200", "cifar10")])) == [*general, "nas",
                                                                                              "architecture"]
    two = {**_config(), "hp": {"tss": ["12", "200"]}}
    assert names(registry.parts_of_config(two))[-1] == "schedules"
    assert names(registry.parts_of_tables({"analysis": {}}, [("tss", "12", "c"), ("tss", "200", "c")]))[-1] == "schedules"
    assert names(registry.parts_of_tables({"analysis": {}}, [("zoo", "", "cifar10")])) == general
    assert names(registry.parts_of_config(_config(parts=["nas", "kendall", "schedules"]))) == ["kendall", "nas"]
    assert registry.parts_of_config(_config(parts=[])) == []
    with pytest.raises(ValueError, match=r"analysis.parts: unknown part\(s\) 'hsc'; parts: kendall, overview"):
        registry.parts_of_config(_config(parts=["hsc"]))


PARTS = '''
from calibench.analysis.registry import Part

A = Part(name="mine", module="myparts", title="Mine", doc="d", settings=lambda s: {"bins": s["bins"]},
         outputs={"t": "mine.csv"})
SAME = Part(name="mine", module="myparts", title="Mine", doc="d", settings=lambda s: {})
CLASH = Part(name="hcs", module="myparts", title="Mine", doc="d", settings=lambda s: {})
'''


def test_extra_parts_load_from_the_python_path_and_are_fingerprinted(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "myparts.py").write_text(PARTS)
    config = _config(extra_parts=["myparts:A"], python_path=["code"])
    parts = registry.parts_of_config(config)
    assert parts[-1].name == "mine" and parts[-1].outputs == {"t": "mine.csv"}
    settings = registry.config_part_settings(config, parts[-1], "myparts:A")
    assert settings["bins"] == [5, 15] and settings["extra_part"]["spec"] == "myparts:A"
    assert len(settings["extra_part"]["module_sha256"]) == 64
    assert registry.find("mine", settings).name == "mine"  # what the job does with its settings
    assert registry.config_report_settings(config)["extra_parts"] == {"mine": "myparts:A"}
    for entry, words in (("myparts:SAME", "two parts are named 'mine'"), ("myparts:CLASH", "the name of a built-in"),
                         ("myparts", "is not 'package.module:ATTRIBUTE'"), ("myparts:NOPE", "cannot load 'myparts:NOPE'")):
        extra = ["myparts:A", entry] if entry == "myparts:SAME" else [entry]
        with pytest.raises(ValueError, match=f"analysis.extra_parts: .*{words}"):
            registry.parts_of_config(_config(extra_parts=extra, python_path=["code"]))
    with pytest.raises(ValueError, match="letters, digits and _ only"):
        registry.Part(name="my-part", module="m", title="t", doc="d", settings=dict)

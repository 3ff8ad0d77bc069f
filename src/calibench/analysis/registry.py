"""The analysis parts, in one place (docs/analysis.md, "Analysis parts"): each part's module,
outputs, title, threads, when a run has it, and the settings its outputs depend on.

``workflow/rules/analysis.smk`` makes one rule per part from this registry, the jobs
(:func:`calibench.analysis.parts.run_part`) and the report find the parts' modules and files
through it, and a config chooses among them (``analysis.parts``) or adds its own
(``analysis.extra_parts``: ``module:ATTRIBUTE`` of a :class:`Part` in the user's code, found on
``analysis.python_path``). Pure Python: the Snakefile imports this module.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from calibench import layout
from calibench.config.check import schema_default
from calibench.config.settings import analysis_settings, hps
from calibench.user_code import module_sha256, on_path
from calibench.vocabulary import NATS_SPACES

WHEN = ("always", "nats", "schedules", "robustness")


@dataclass(frozen=True)
class Part:
    """One analysis part: a job that reads the result tables and writes ``outputs`` (key: file
    name under ``analysis/``), its figures under ``plots/{name}/`` and its manifest.

    ``module`` has ``run(settings, tables, results, plots[, threads])`` returning
    ``{"plots": [(title, path), ...], "blocks": [(section, order, html), ...]}``;
    ``settings(analysis)`` picks what the outputs depend on out of
    :func:`calibench.config.settings.analysis_settings` (the rule's params: a change of them,
    and only of them, reruns the part); ``reads``: (part, key) outputs of other parts it reads;
    ``inputs``: config keys (dotted) that name files it reads; ``when``: ``always``, or only
    with a NATS-Bench space (``nats``), two schedules of a space (``schedules``), a
    ``robustness.path`` (``robustness``)."""

    name: str
    module: str
    title: str
    doc: str
    settings: Callable[[Mapping], dict]
    outputs: Mapping[str, str] = field(default_factory=dict)
    reads: tuple[tuple[str, str], ...] = ()
    inputs: tuple[str, ...] = ()
    threads: int = 1
    when: str = "always"

    def __post_init__(self):
        if not self.name.isidentifier():
            raise ValueError(f"analysis part name {self.name!r}: letters, digits and _ only")
        if self.when not in WHEN:
            raise ValueError(f"analysis part {self.name}: when {self.when!r} is not one of {', '.join(WHEN)}")


# ---------------------------------------------------------------- what each built-in part depends on

def _pick(analysis: Mapping, *keys) -> dict:
    return {k: analysis["analysis"][k] for k in keys if k in analysis["analysis"]}


def _bins_demo(s: Mapping) -> dict:
    return {"bins": list(s["bins"]), "demo": bool(s["demo"])}


def _min_networks(s: Mapping) -> int:
    return int(s["analysis"].get("min_networks", schema_default("analysis", "min_networks")))


def _level(s: Mapping) -> float:
    return (s["analysis"].get("bootstrap") or {}).get("level", schema_default("analysis", "bootstrap", "level"))


BUILTIN = (
    Part("kendall", "calibench.analysis.kendall", "Kendall tau",
         "Kendall tau-b matrices with intervals (questions 1, 3, 4) and their heatmaps",
         lambda s: {"analysis": _pick(s, "top_k", "bootstrap"), **_bins_demo(s)},
         {"kendall": "kendall.parquet", "question4": "question4.csv"},
         threads=2),  # the intervals of a matrix are independent of the others'
    Part("overview", "calibench.analysis.overview", "ECE by bin count and against accuracy",
         "ECE by bin count (Fig. 6) and ECE against accuracy (Fig. 5) of every table family",
         _bins_demo),
    Part("hcs", "calibench.analysis.hcs", "HCS", "HCS_beta rankings, the top n per table, HCS against accuracy",
         lambda s: {"analysis": _pick(s, "hcs_betas", "top_n"), "demo": bool(s["demo"])},
         {"hcs": "hcs.parquet", "top": "top_hcs.csv"}),
    Part("methods", "calibench.analysis.methods", "Post-hoc methods",
         "The post-hoc methods: distribution of each metric per stage, wins and margins",
         lambda s: {**_bins_demo(s),
                    "include_underdetermined": bool(s["analysis"].get(
                        "include_underdetermined", schema_default("analysis", "include_underdetermined"))),
                    "level": _level(s), "min_networks": _min_networks(s)},
         {"summary": "methods_summary.parquet", "summary_csv": "methods_summary.csv", "wins": "method_wins.parquet"}),
    Part("reliability", "calibench.analysis.reliability", "Reliability diagrams",
         "Reliability diagrams of the best and worst network by HCS of every table (from the shards)",
         lambda s: {"beta": s["analysis"]["hcs_betas"][0]}, reads=(("hcs", "hcs"),)),
    Part("groups", "calibench.analysis.groups", "Populations by group",
         "Populations beyond NATS-Bench by a metadata column (empty outputs without groups)",
         lambda s: {"analysis": _pick(s, "top_k", "bootstrap"), "bins": list(s["bins"]),
                    "groups": dict(s.get("groups") or {})},
         {"groups": "groups.csv", "kendall": "kendall_groups.parquet"}),
    Part("nas", "calibench.analysis.nats.nas", "NAS",
         "NATS-Bench: architecture search by accuracy and HCS over every table (Table 1)",
         lambda s: {"analysis": _pick(s, "nas")}, {"nas": "nas.csv"}, when="nats"),
    Part("architecture", "calibench.analysis.nats.architecture", "Architectures",
         "NATS-Bench: TSS edge operations and kernel parameters, SSS sizes and widths (Figs. 7-10), "
         "which architectures gain most from each method",
         lambda s: {"analysis": {"hcs_betas": s["analysis"]["hcs_betas"][:1], **_pick(s, "top_n")}, **_bins_demo(s),
                    "level": _level(s), "min_networks": _min_networks(s)},
         {"edges": "tss_edge_ops.parquet", "brackets": "sss_size_brackets.parquet",
          "kernel": "tss_kernel_parameters.parquet", "width": "sss_width_progression.parquet",
          "gains": "method_gains.parquet"}, when="nats"),
    Part("schedules", "calibench.analysis.nats.schedules", "Training schedules",
         "NATS-Bench: the same architectures under two or more training schedules (Fig. 6c)",
         lambda s: {"level": _level(s), "demo": bool(s["demo"])},
         {"comparison": "hp_comparison.parquet", "comparison_csv": "hp_comparison.csv"}, when="schedules"),
    Part("robustness", "calibench.analysis.nats.robustness", "Robustness",
         "NATS-Bench TSS: calibration against an external robustness table (question 2, Fig. 3)",
         lambda s: {"robustness": dict(s.get("robustness") or {}), "analysis": _pick(s, "top_k"), **_bins_demo(s)},
         {"kendall": "robustness_kendall.parquet"}, inputs=("robustness.path",), when="robustness"),
)
BUILTIN_NAMES = tuple(p.name for p in BUILTIN)
BUILTIN_BY_NAME = {p.name: p for p in BUILTIN}


def report_settings(settings: Mapping) -> dict:
    """What the report adds to the parts' outputs: bins, the interval level, the demo flag, the
    fewest networks a finding decides on."""
    return {**_bins_demo(settings), "level": _level(settings), "min_networks": _min_networks(settings)}


# ---------------------------------------------------------------- a user's own parts

def load_extra(spec: str, python_path: Sequence[str] = ()) -> Part:
    """The :class:`Part` that ``module:ATTRIBUTE`` names; ValueError naming the config key."""
    key = "analysis.extra_parts"
    if not isinstance(spec, str) or spec.count(":") != 1:
        raise ValueError(f"{key}: {spec!r} is not 'package.module:ATTRIBUTE'")
    module_name, attr = spec.split(":")
    with on_path(python_path):
        try:
            found = getattr(importlib.import_module(module_name), attr)
        except Exception as exc:
            raise ValueError(f"{key}: cannot load {spec!r} ({type(exc).__name__}: {exc}); "
                             f"analysis.python_path: {list(python_path) or 'none'}") from exc
    if not isinstance(found, Part):
        raise ValueError(f"{key}: {spec!r} is not a calibench.analysis.registry.Part (found {type(found).__name__})")
    if found.name in BUILTIN_BY_NAME:
        raise ValueError(f"{key}: {spec!r} is named {found.name!r}, the name of a built-in part")
    return found


def extra_parts(config: Mapping) -> list[tuple[str, Part]]:
    """(spec, part) of every ``analysis.extra_parts`` entry, in config order."""
    analysis = config.get("analysis") or {}
    python_path = list(analysis.get("python_path") or [])
    out, seen = [], set()
    for spec in analysis.get("extra_parts") or []:
        part = load_extra(spec, python_path)
        if part.name in seen:
            raise ValueError(f"analysis.extra_parts: two parts are named {part.name!r}")
        seen.add(part.name)
        out.append((spec, part))
    return out


# ---------------------------------------------------------------- which parts a run has

def applies(part: Part, nats: bool, schedules: bool, robustness: bool) -> bool:
    return {"always": True, "nats": nats, "schedules": schedules, "robustness": robustness}[part.when]


def choose(available: Sequence[Part], chosen: Sequence[str] | None, nats: bool, schedules: bool,
           robustness: bool) -> list[Part]:
    """The parts a run has, in report order: those that apply to its tables, out of
    ``chosen`` (``analysis.parts``; None: all). A part ``chosen`` names that does not exist is
    a ValueError naming the key; one that does not apply to these tables is left out."""
    names = {p.name for p in available}
    unknown = [n for n in chosen or [] if n not in names]
    if unknown:
        raise ValueError(f"analysis.parts: unknown part(s) {', '.join(map(repr, unknown))}; "
                         f"parts: {', '.join(p.name for p in available)}")
    return [p for p in available if (chosen is None or p.name in chosen) and applies(p, nats, schedules, robustness)]


def config_parts(config: Mapping) -> list[tuple[str | None, Part]]:
    """(spec, part) of every part a config's run has: every run the general ones; with a
    NATS-Bench space NAS and the architecture figures, with two or more schedules of a space
    their comparison, with ``robustness.path`` question 2; then ``analysis.extra_parts``
    (spec: its ``module:ATTRIBUTE``; None for a built-in part); all of them out of
    ``analysis.parts`` where the config lists some."""
    extras = extra_parts(config)
    spec_of = {part.name: spec for spec, part in extras}
    nats = [s for s in config.get("spaces") or [] if s in NATS_SPACES]
    chosen = choose([*BUILTIN, *(part for _, part in extras)], (config.get("analysis") or {}).get("parts"), bool(nats),
                    any(len(hps(config, s)) > 1 for s in nats), bool((config.get("robustness") or {}).get("path")))
    return [(spec_of.get(part.name), part) for part in chosen]


def rule_name(part: str) -> str:
    """The workflow rule of the part named ``part`` (workflow/rules/analysis.smk)."""
    return f"analysis_{part}"


def parts_of_config(config: Mapping) -> list[Part]:
    """The parts of :func:`config_parts`, in report order."""
    return [part for _, part in config_parts(config)]


def parts_of_tables(settings: Mapping, table_keys: Sequence[tuple[str, str, str]]) -> list[Part]:
    """The built-in parts a run over these (space, hp, dataset) tables has, from its
    :func:`calibench.config.settings.analysis_settings` (the in-process analysis)."""
    nats = {space: {hp for s, hp, _ in table_keys if s == space} for space, _, _ in table_keys if space in NATS_SPACES}
    return choose(BUILTIN, settings["analysis"].get("parts"), bool(nats), any(len(h) > 1 for h in nats.values()),
                  bool((settings.get("robustness") or {}).get("path")))


# ---------------------------------------------------------------- a part's settings, module and files

def part_settings(settings: Mapping, part: Part) -> dict:
    """What ``part``'s outputs depend on, out of :func:`calibench.config.settings.analysis_settings`."""
    return part.settings(settings)


def config_part_settings(config: Mapping, part: Part, spec: str | None = None) -> dict:
    """A part's rule params: :func:`part_settings` of the config; an extra part's also name
    its code and the SHA-256 of its module's file (a change of the code reruns it)."""
    out = part_settings(analysis_settings(config), part)
    if spec is not None:
        python_path = list((config.get("analysis") or {}).get("python_path") or [])
        out = {**out, "extra_part": {"spec": spec, "python_path": python_path,
                                     "module_sha256": module_sha256(part.module, python_path)}}
    return out


def config_report_settings(config: Mapping) -> dict:
    """The report's rule params: :func:`report_settings`, the parts it assembles (with where an
    extra part's code is) and whether the run writes the explorer it links to."""
    parts = config_parts(config)
    analysis = config.get("analysis") or {}
    out = {**report_settings(analysis_settings(config)), "parts": [part.name for _, part in parts],
           "explorer": bool(config.get("explorer", schema_default("explorer")))}
    if analysis.get("extra_parts"):
        out["extra_parts"] = {part.name: spec for spec, part in parts if spec is not None}
        out["python_path"] = list(analysis.get("python_path") or [])
    return out


def find(name: str, settings: Mapping | None = None) -> Part:
    """The part named ``name``: a built-in one, or the extra part its settings name."""
    if name in BUILTIN_BY_NAME:
        return BUILTIN_BY_NAME[name]
    extra = (settings or {}).get("extra_part")
    if extra:
        part = load_extra(extra["spec"], extra.get("python_path") or [])
        if part.name == name:
            return part
    raise ValueError(f"unknown analysis part {name!r}; parts: {', '.join(BUILTIN_NAMES)} and analysis.extra_parts")


def import_module(part: Part, settings: Mapping | None = None):
    """The module that runs ``part`` (an extra part's found on its ``analysis.python_path``)."""
    python_path = ((settings or {}).get("extra_part") or {}).get("python_path") or []
    with on_path(python_path):
        return importlib.import_module(part.module)


def output_path(results: str | Path, part: str, key: str) -> Path:
    """A built-in part's output file ``key`` (``hcs``, ``kendall``...): ``analysis/{file}``."""
    return layout.analysis_path(results, BUILTIN_BY_NAME[part].outputs[key])


def output_paths(results: str | Path, part: Part) -> dict[str, Path]:
    """Every output file of ``part`` by its key."""
    return {key: layout.analysis_path(results, name) for key, name in part.outputs.items()}

"""The package's shape (docs/architecture.md): imports follow the flow, read from the source by ``ast``.

Layers, upstream first. A module imports its own layer and those before it; a stage's
``jobs`` module may also import the next layer (the box it writes into: inference jobs
write the store, measurement jobs write shards). On top of that: sources import nothing
downstream of the logits store, nothing downstream of the store imports a source (the CLI
reaches sources only through ``calibench.sources``' entry points), the numeric core imports
no other calibench layer (only calibench.vocabulary's names) and no I/O library, and there is
no import circle, between modules or between packages.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
PACKAGE = SRC / "calibench"

LAYERS = [
    ("foundation", ("calibench", "calibench.atomic", "calibench.runtime", "calibench.vocabulary", "calibench.user_code",
                    "calibench.layout",
                    "calibench.config")),
    ("core", ("calibench.metrics", "calibench.recalibration")),
    ("inference", ("calibench.inference",)),
    ("store", ("calibench.store",)),
    ("sources", ("calibench.sources",)),
    ("measure", ("calibench.measure",)),
    ("results", ("calibench.results",)),
    ("analysis", ("calibench.analysis",)),
    ("report", ("calibench.report",)),
    ("run", ("calibench.run", "calibench.__main__")),
]
DOWNSTREAM_OF_STORE = {"measure", "results", "analysis", "report"}
IO_LIBRARIES = {"pandas", "pyarrow", "duckdb", "matplotlib", "snakemake", "yaml", "pickle", "bz2", "sqlite3"}
MAX_LINES = 600


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def layer_of(module: str) -> str:
    best, name = "", None
    for layer, prefixes in LAYERS:
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > len(best):
                best, name = prefix, layer
    assert name is not None, f"{module} is in no layer of test_layering.LAYERS"
    return name


RANK = {name: i for i, (name, _) in enumerate(LAYERS)}


def imports_of(module: str) -> tuple[set[str], set[str]]:
    """(calibench modules, top-level third-party names) ``module`` imports, anywhere in its body."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(), str(path))
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    ours, theirs = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        else:
            continue
        for name in names:
            if name == "calibench" or name.startswith("calibench."):
                while name not in MODULES:  # an attribute of a module
                    name = name.rsplit(".", 1)[0]
                ours.add(name)
            else:
                theirs.add(name.split(".")[0])
    ours.discard(module)
    return ours, theirs


@functools.lru_cache(maxsize=1)
def import_graph() -> dict[str, tuple[set[str], set[str]]]:
    """Every module's imports, parsed on first use (not at collection: every pytest worker collects this file)."""
    return {m: imports_of(m) for m in MODULES}


def test_every_module_sits_in_a_layer():
    for module in MODULES:
        layer_of(module)


def test_imports_follow_the_flow():
    wrong = []
    for module, (ours, _) in import_graph().items():
        rank = RANK[layer_of(module)]
        is_job = module.rsplit(".", 1)[-1] == "jobs"
        for dep in ours:
            dep_rank = RANK[layer_of(dep)]
            if dep_rank > rank + (1 if is_job else 0):
                wrong.append(f"{module} ({layer_of(module)}) imports {dep} ({layer_of(dep)})")
    assert not wrong, "imports back up the flow:\n" + "\n".join(sorted(wrong))


def test_sources_are_upstream_only():
    wrong = []
    for module, (ours, _) in import_graph().items():
        layer = layer_of(module)
        for dep in ours:
            dep_layer = layer_of(dep)
            if layer == "sources" and dep_layer in DOWNSTREAM_OF_STORE | {"run"}:
                wrong.append(f"source {module} imports {dep}, downstream of the store")
            if dep_layer == "sources" and layer in DOWNSTREAM_OF_STORE:
                wrong.append(f"{module} ({layer}) imports the source {dep}")
            if dep_layer == "sources" and layer == "run" and dep != "calibench.sources":
                wrong.append(f"{module} imports {dep}: the CLI reaches sources through calibench.sources only")
    assert not wrong, "\n".join(sorted(wrong))


def test_the_numeric_core_knows_no_files_and_no_other_layer():
    wrong = []
    for module, (ours, theirs) in import_graph().items():
        if layer_of(module) != "core":
            continue
        wrong += [f"{module} imports {dep}" for dep in ours if layer_of(dep) != "core" and dep != "calibench.vocabulary"]
        wrong += [f"{module} imports the I/O library {lib}" for lib in theirs & IO_LIBRARIES]
    assert not wrong, "\n".join(sorted(wrong))


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one node (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_no_import_circle_between_modules():
    graph = {m: {d for d in ours if d != "calibench"} for m, (ours, _) in import_graph().items()}
    assert _cycles(graph) == []


def test_no_import_circle_between_packages():
    """Between the boxes of the flow (``calibench.measure``, ``calibench.results``, ...); a
    subpackage (``sources.nats``) belongs to its box."""
    def package(m):
        return ".".join(m.split(".")[:2])

    graph: dict[str, set[str]] = {}
    for m, (ours, _) in import_graph().items():
        graph.setdefault(package(m), set()).update(package(d) for d in ours if package(d) != package(m)
                                                   and package(d) != "calibench")
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_circle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_module_is_over_600_lines(module):
    lines = MODULES[module].read_text().count("\n")
    assert lines <= MAX_LINES, f"{MODULES[module]}: {lines} lines"


def test_the_folders_name_the_boxes_of_the_flow():
    """docs/architecture.md's boxes, each found by its folder name."""
    for folder in ("sources", "inference", "store", "recalibration", "metrics", "measure", "results", "analysis",
                   "report", "run", "config"):
        assert (PACKAGE / folder / "__init__.py").is_file(), folder
    assert (PACKAGE / "layout.py").is_file()
    assert (PACKAGE / "analysis" / "nats" / "__init__.py").is_file()


# What each job without a network to run imports at start (`python -m calibench <job>`, the CLI's
# lazy imports): importing torch costs 1-1.5 s of every such job (BENCHMARKS.md, "The test suite").
TORCH_FREE_JOBS = {
    "population, labels": ["calibench.sources.nats.jobs", "calibench.sources.logits_dir"],
    "build-table": ["calibench.results.tables"],
    "analysis-part, report": ["calibench.analysis.parts", "calibench.report.assemble"]
    + [f"calibench.analysis.{m}" for m in ("kendall", "overview", "hcs", "methods", "reliability", "groups",
                                          "nats.nas", "nats.architecture", "nats.schedules", "nats.robustness")],
    "run, status": ["calibench.run.cli", "calibench.run.workflow", "calibench.run.status"],
}


@pytest.mark.parametrize("job", sorted(TORCH_FREE_JOBS))
def test_jobs_without_a_network_start_without_torch(job):
    import subprocess
    import sys

    code = ("import importlib, sys\n"
            f"for m in {TORCH_FREE_JOBS[job]!r}:\n"
            "    importlib.import_module(m)\n"
            "    assert 'torch' not in sys.modules, m + ' imports torch'\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]


# Fragments of results paths (calibench.layout builds them all): a string of code elsewhere that
# holds one spells a path that layout.py alone should (issue 36). Docstrings and comments may show them.
PATH_FRAGMENT = re.compile(r"arch=|dataset=|space=|(?<![ %\w])hp=|report\.html|(?:^|/)odir_(?!search)|failures/|chunks/|shards/"
                           r"|tables/|fits/|logits/|explorer/index")


def _code_strings(path: Path):
    import ast

    tree = ast.parse(path.read_text())
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body
                  and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            yield node.lineno, node.value


def test_results_paths_are_spelled_in_layout_only():
    package = ROOT / "src" / "calibench"
    found = [f"{p.relative_to(ROOT)}:{line}: {text[:80]!r}" for p in sorted(package.rglob("*.py"))
             if p.name != "layout.py" for line, text in _code_strings(p) if PATH_FRAGMENT.search(text)]
    for rules in [ROOT / "Snakefile", *sorted((ROOT / "workflow" / "rules").glob("*.smk"))]:
        in_docstring = False
        for i, line in enumerate(rules.read_text().splitlines(), 1):
            quotes = line.count('"""')
            if in_docstring or quotes:
                in_docstring = in_docstring ^ (quotes % 2 == 1)
                continue
            code = line.split("#", 1)[0]
            if "log_file(" in code or "benchmark_file(" in code:  # names of job records under logs/, benchmarks/
                continue
            literals = [a or b for a, b in re.findall(r'"([^"\n]*)"|\'([^\'\n]*)\'', code)]
            if any(PATH_FRAGMENT.search(text) for text in literals):
                found.append(f"{rules.relative_to(ROOT)}:{i}: {line.strip()[:80]}")
    assert not found, "results paths spelled outside calibench.layout:\n" + "\n".join(found)

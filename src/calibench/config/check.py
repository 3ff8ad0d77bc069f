"""Config errors said in a few lines that name the file, the key and what is wrong (issue 15):
a YAML syntax error with its file, line and column; a value the schema rejects (or a
missing required key) with the config file that set it, instead of Snakemake's dump of
schema and config. Used by ``calibench run`` before Snakemake starts, and by the Snakefile.

The schema's defaults are the only defaults (docs/architecture.md): Snakemake fills them into the
workflow's config, and code that reads a setting a config may leave out takes its default
from :func:`schema_defaults`, never from a literal of its own.
"""

from __future__ import annotations

import copy
import functools
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

SCHEMA = "workflow/schemas/config.schema.yaml"
# calibench's own schema, found beside the package (a checkout), else in the working directory
_SCHEMA_FILES = (Path(__file__).resolve().parents[3] / SCHEMA, Path(SCHEMA))


class ConfigError(ValueError):
    """A config that cannot run; the message names the file and key."""


def load_yaml(path: str | Path) -> dict:
    """A config file as a dict; ConfigError naming file, line and column on a syntax error."""
    import yaml

    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the config file ({exc.strerror or exc})") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
        problem = getattr(exc, "problem", None) or str(exc)
        context = getattr(exc, "context", None)
        raise ConfigError(f"{where}: YAML syntax error: {problem}" + (f" ({context})" if context else "")) from exc
    if data is None:
        raise ConfigError(f"{path}: empty; a config file is a mapping of keys to values")
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a config file must be a mapping of keys to values, not a {type(data).__name__}")
    return data


@functools.lru_cache(maxsize=4)
def _read_schema(path: Path, mtime_ns: int) -> dict:
    """A schema file parsed once per process and version (libyaml's loader where PyYAML has it:
    the schema is parsed at each Snakemake start, BENCHMARKS.md "The test suite")."""
    import yaml

    return yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def read_schema(path: str | Path) -> dict:
    """The schema at ``path`` (a fresh copy: callers may change it)."""
    path = Path(path).resolve()
    return copy.deepcopy(_read_schema(path, path.stat().st_mtime_ns))


def _key(path: Sequence) -> str:
    return ".".join(str(p) for p in path) or "(top level)"


_UNSET = object()


def _defined_in(key: Sequence, files: Sequence[str | Path], value=_UNSET) -> str | None:
    """The last of ``files`` that sets ``key`` (a path of keys and list indices); None if that
    file's value is not ``value`` (given): then the value came from ``--config``."""
    found, found_value = None, _UNSET
    for f in files:
        try:
            node = load_yaml(f)
        except ConfigError:
            continue
        for part in key:
            if isinstance(node, Mapping) and part in node:
                node = node[part]
            elif isinstance(node, list) and isinstance(part, int) and part < len(node):
                node = node[part]
            else:
                break
        else:
            found, found_value = str(f), node
    if value is not _UNSET and found is not None and not _same(found_value, value) and not isinstance(value, Mapping):
        return None  # a mapping may merge from several files: the last one that sets it is named
    return found


def _same(a, b) -> bool:
    """``a == b``, with NaN equal to NaN (a file's ``.nan`` is the config's NaN)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _non_finite(node, path: tuple = ()):
    """(key path, value) of every NaN or infinity in a config, however deep: JSON Schema's
    bounds cannot refuse them (every comparison with NaN is false), so no key may hold one."""
    if isinstance(node, Mapping):
        for key, value in node.items():
            yield from _non_finite(value, (*path, key))
    elif isinstance(node, (list, tuple)):
        for i, value in enumerate(node):
            yield from _non_finite(value, (*path, i))
    elif isinstance(node, float) and not math.isfinite(node):
        yield path, node


def _kinds(schema: Mapping) -> list[str]:
    """The JSON types a schema names (``type``, one or a list)."""
    kinds = schema.get("type")
    return [kinds] if isinstance(kinds, str) else list(kinds or [])


def _forms(schema: Mapping) -> str:
    """A schema alternative in words: ``'auto'``, ``an integer >= 1``, ``a list``..."""
    if "const" in schema:
        return repr(schema["const"])
    if "enum" in schema:
        return " or ".join(repr(v) for v in schema["enum"])
    kinds = _kinds(schema)
    words = {"integer": "an integer", "number": "a number", "string": "a string", "array": "a list",
             "object": "a mapping", "boolean": "true or false", "null": "null"}
    text = " or ".join(words.get(k, k) for k in kinds) or ("a mapping" if "required" in schema else "a value")
    bounds = [f">= {schema['minimum']}" if "minimum" in schema else "",
              f"> {schema['exclusiveMinimum']}" if "exclusiveMinimum" in schema else "",
              f"<= {schema['maximum']}" if "maximum" in schema else ""]
    text += "".join(f" {b}" for b in bounds if b)
    if "required" in schema:
        text += " with " + ", ".join(schema["required"])
    return text


def _same_form(schema: Mapping, value) -> bool:
    """Whether ``value`` has the form (const, enum or JSON type) of a schema alternative."""
    if "const" in schema:
        return value == schema["const"]
    if "enum" in schema:
        return value in schema["enum"]
    kinds = _kinds(schema)
    python = {"integer": int, "number": (int, float), "string": str, "array": list, "object": Mapping,
              "boolean": bool, "null": type(None)}
    if not kinds:
        return isinstance(value, Mapping) and "required" in schema and all(k in value for k in schema["required"])
    return any(isinstance(value, python[k]) and not (k in ("integer", "number") and isinstance(value, bool))
               for k in kinds if k in python)


def _reason(error) -> str:
    """The schema's complaint, said with what it accepts where jsonschema's words do not."""
    alternatives = error.schema.get(error.validator) if error.validator in ("oneOf", "anyOf") else None
    if isinstance(alternatives, list):
        # the value has the form of one alternative and breaks a rule inside it: that rule
        import jsonschema

        fits = [i for i, alt in enumerate(alternatives) if isinstance(alt, Mapping) and _same_form(alt, error.instance)]
        inner = [e for e in error.context if fits and e.schema_path and e.schema_path[0] == fits[0]]
        if len(fits) == 1 and inner:
            best = jsonschema.exceptions.best_match(inner)
            where = "".join(f"[{p!r}]" for p in best.relative_path)
            return (f"at {where}: " if where else "") + _reason(best)
        return "expected " + ", or ".join(_forms(alt) for alt in alternatives if isinstance(alt, Mapping))
    if error.validator == "contains" and isinstance(error.validator_value, Mapping):
        return f"must contain {_forms(error.validator_value)}"
    return error.message if len(error.message) <= 200 else error.message[:197] + "..."


def _value_line(key: Sequence, value, reason: str, files: Sequence[str | Path]) -> str:
    """``  key = value: reason (set in FILE)``: the file the value came from, where one set it."""
    source = _defined_in(key, files, value)
    shown = repr(value)
    shown = shown if len(shown) <= 80 else shown[:77] + "..."
    return f"  {_key(key)} = {shown}: {reason}" + (f" (set in {source})" if source
                                                    else " (a default or --config value)")


def check(config: Mapping, files: Sequence[str | Path] = (), schema: str | Path = SCHEMA) -> None:
    """ConfigError listing each schema violation and each NaN or infinity (at most 5 in all)
    with its key, value, reason and the config file that set it."""
    import jsonschema

    schema_doc = read_schema(schema)
    validator = jsonschema.validators.validator_for(schema_doc)(schema_doc)
    non_finite = list(_non_finite(config))
    bad = {tuple(key) for key, _ in non_finite}
    errors = sorted((e for e in validator.iter_errors(config) if tuple(e.absolute_path) not in bad),
                    key=lambda e: (list(e.absolute_path), e.message))
    shown = 5  # lines said; the rest counted
    lines = [_value_line(key, value, "not a finite number: no key takes NaN or infinity", files)
             for key, value in non_finite[:shown]]
    for error in errors[:max(0, shown - len(lines))]:
        key = list(error.absolute_path)
        if error.validator == "required":
            missing = error.message.split("'")[1] if "'" in error.message else error.message
            key = [*key, missing]
            condition = _condition(schema_doc, error)
            lines.append(f"  {_key(key)}: required" + (f" with {condition}" if condition else " key missing")
                         + " (add it to your config file)")
            continue
        if error.validator == "additionalProperties":
            lines.append(f"  {_key(key)}: {error.message}" + (f" (in {src})" if (src := _defined_in(key, files)) else ""))
            continue
        lines.append(_value_line(key, error.instance, _reason(error), files))
    if lines:
        refuse_lines(lines, files, f", schema {schema}", total=len(non_finite) + len(errors))


def refuse_lines(lines: Sequence[str], files: Sequence[str | Path] = (), what: str = "",
                 total: int | None = None) -> None:
    """ConfigError of ``lines`` (at most 5 shown; ``total``: the problems there are, if more
    than the lines) under a heading naming the config files."""
    total = len(lines) if total is None else total
    more = f"\n  ... and {total - min(len(lines), 5)} more" if total > min(len(lines), 5) else ""
    names = ", ".join(str(f) for f in files) or "the config"
    raise ConfigError(f"invalid config ({names}){what}:\n" + "\n".join(lines[:5]) + more)


def refuse(problems: Sequence[tuple[Sequence, object, str]], files: Sequence[str | Path] = ()) -> None:
    """ConfigError with a line per (key path, value, what is wrong), naming the file that set
    each value, as :func:`check` says a schema violation: for what the schema cannot see (a
    population that selects no network: ``calibench.sources.check_populations``). Nothing if
    there are no problems."""
    if problems:
        refuse_lines([_value_line(list(key), value, reason, files) for key, value, reason in problems], files)


def _condition(schema_doc: Mapping, error) -> str:
    """``mode: list``: the constant values an ``if`` asks for, where a ``required`` error comes
    from its ``then`` (the key is required only then); "" otherwise."""
    path = list(error.absolute_schema_path)
    if len(path) < 2 or path[-2] != "then":
        return ""
    node = schema_doc
    try:
        for part in path[:-2]:
            while isinstance(node, Mapping) and part not in node and str(node.get("$ref", "")).startswith("#/"):
                target = schema_doc  # a local $ref: the path goes on inside its target
                for name in node["$ref"][2:].split("/"):
                    target = target[name]
                node = target
            node = node[part]
        condition = node["if"]
    except (KeyError, IndexError, TypeError):
        return ""
    consts = [f"{name}: {sub['const']}" for name, sub in (condition.get("properties") or {}).items()
              if isinstance(sub, Mapping) and "const" in sub]
    return ", ".join(consts)


# ---------------------------------------------------------------- defaults

def _defaults(node: Mapping) -> dict:
    """The defaults a schema node gives its properties, nested as the config nests them."""
    out: dict = {}
    for name, sub in (node.get("properties") or {}).items():
        nested = _defaults(sub) if isinstance(sub, Mapping) else {}
        if isinstance(sub, Mapping) and "default" in sub:
            value = sub["default"]
            out[name] = {**value, **nested} if isinstance(value, dict) else value
        elif nested:
            out[name] = nested
    return out


@functools.lru_cache(maxsize=1)
def _schema_defaults() -> dict:
    for path in _SCHEMA_FILES:
        if path.is_file():
            return _defaults(read_schema(path))
    raise ConfigError(f"calibench's config schema ({SCHEMA}) is not beside the package nor in {Path.cwd()}")


def schema_defaults() -> dict:
    """Every default of calibench's config schema, nested as the config is (a fresh copy):
    ``schema_defaults()["recalibration"]["max_iterations"]`` is 2000."""
    return copy.deepcopy(_schema_defaults())


def schema_default(*keys: str):
    """One default: ``schema_default("recalibration", "odir", "search", "grid")``; KeyError if
    the schema gives none."""
    node = _schema_defaults()
    for key in keys:
        node = node[key]
    return copy.deepcopy(node)

"""The configuration a command runs with and the result files it names: the default config
file with ``--configfile`` over it (checked against the schema), and the tables, analysis
parts, report and explorer of ``--space`` / ``--dataset`` (:func:`_config_and_targets`), for
``calibench run``, ``status`` and ``repair``."""

from __future__ import annotations

import argparse
from pathlib import Path

from calibench import layout

DEFAULT_CONFIG = "config/config.yaml"  # the Snakefile's `configfile:`; --configfile values go over it


def _merged_config(configfile: str) -> dict:
    """The configuration Snakemake will see: the default file, then ``configfile`` over it
    (nested keys merged, as Snakemake does)."""

    def merge(base: dict, over: dict) -> dict:
        out = dict(base)
        for key, value in over.items():
            out[key] = merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
        return out

    from calibench.config.check import load_yaml

    config = load_yaml(DEFAULT_CONFIG) if Path(DEFAULT_CONFIG).is_file() else {}
    return merge(config, load_yaml(configfile))


def _check_profile(profile: str | None) -> None:
    """``--profile`` found as Snakemake finds it (a directory with ``config.yaml`` or
    ``profile.yaml``, such a file, or a name in Snakemake's profile folders); ValueError if not."""
    if not profile:
        return
    from snakemake.cli import get_profile_dir

    if get_profile_dir(profile) is None:
        raise ValueError(f"--profile {profile}: no Snakemake profile there (a folder with config.yaml; the "
                         f"project's: {', '.join(sorted(str(p) for p in Path('profiles').glob('*') if p.is_dir()))})")


def _config_and_targets(args: argparse.Namespace) -> tuple[dict, list[str]]:
    """The merged configuration (checked) and the targets of --space/--dataset (every table
    and the report without them); ValueError for a user's mistake."""
    from calibench.config.check import SCHEMA, ConfigError, check
    from calibench.config.check import schema_default
    from calibench.config.settings import population_datasets, targets as all_targets

    try:
        config = _merged_config(args.configfile)
        if Path(DEFAULT_CONFIG).is_file() and Path(SCHEMA).is_file():
            # before Snakemake: the schema's defaults are not filled in, so required keys are
            # those the files must give
            files = [f for f in dict.fromkeys([DEFAULT_CONFIG, args.configfile]) if Path(f).is_file()]
            check(config, files)
            from calibench.sources import check_populations

            check_populations(config, files)  # what the schema cannot see: a selection of no network
    except ConfigError as exc:
        raise ValueError(str(exc)) from None
    results = config["results"]
    named = all_targets(config)
    known = sorted({space for space, _ in named.values()})
    unknown = sorted(set(args.space or []) - set(known))
    if unknown:
        raise ValueError(f"--space {', '.join(unknown)}: not in this config (spaces and populations: {', '.join(known)})")
    datasets = sorted({d for name, (space, _) in named.items() if not args.space or space in args.space
                       for d in population_datasets(config, space)})
    unknown = sorted(set(args.dataset or []) - set(datasets))
    if unknown:
        raise ValueError(f"--dataset {', '.join(unknown)}: not in this config"
                         + (f" for --space {', '.join(args.space)}" if args.space else "")
                         + f" (datasets: {', '.join(datasets)})")
    targets = [str(layout.table_path(results, name, d)) for name, (space, _) in named.items()
               if not args.space or space in args.space
               for d in population_datasets(config, space) if not args.dataset or d in args.dataset]
    if not targets:
        raise ValueError("no result table matches --space/--dataset in this config")
    if not args.space and not args.dataset:
        from calibench.analysis.registry import parts_of_config

        try:
            parts = parts_of_config(config)
        except ValueError as exc:  # analysis.parts or analysis.extra_parts names no part
            raise ValueError(str(exc)) from None
        targets += [str(layout.part_manifest(results, part.name)) for part in parts]
        targets.append(str(layout.report_path(results)))
        if config.get("explorer", schema_default("explorer")):
            targets.append(str(layout.explorer_page(results)))
    return config, targets

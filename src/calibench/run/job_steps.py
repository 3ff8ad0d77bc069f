"""The workflow's job steps (``population``, ``labels``, ``infer-chunk``, ``odir-search``,
``measure-chunk``, ``build-table``, ``analysis-part``, ``report``): what the Snakemake rules
call through ``python -m calibench``. Each receives exactly its stage's settings as JSON
(:mod:`calibench.config.settings`, :mod:`calibench.analysis.registry`) and runtime options as
flags; :mod:`calibench.run.cli` parses them.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys


def _population(args: argparse.Namespace) -> int:
    from calibench.config.settings import fill_paths
    from calibench.sources import SourceError, write_population

    try:
        write_population(fill_paths(json.loads(args.settings), args.space), args.space, args.out)
    except SourceError as exc:  # the population's definition: the message names the file, model or key
        logging.getLogger("calibench").error("population %s: %s", args.space, exc)
        return 2
    return 0


def _labels(args: argparse.Namespace) -> int:
    from calibench.config.settings import fill_paths
    from calibench.sources import SourceError, write_labels

    try:
        write_labels(fill_paths(json.loads(args.settings), args.space), args.dataset, args.out, space=args.space)
    except SourceError as exc:
        logging.getLogger("calibench").error("labels of %s: %s", args.dataset, exc)
        return 2
    return 0


def _infer_chunk(args: argparse.Namespace) -> int:
    from calibench.inference.engine import DeviceError
    from calibench.runtime import keep_freed_memory
    from calibench.config.settings import fill_paths
    from calibench.sources import SourceError, infer_chunk

    keep_freed_memory()
    try:
        infer_chunk(fill_paths(json.loads(args.settings), args.space), _runtime(args), args.space, args.hp, args.chunk, args.results,
                        args.manifest, progress=not args.quiet)
    except (DeviceError, SourceError) as exc:  # a configuration problem (NATS-Bench: no weights at that hp): no traceback
        logging.getLogger("calibench").error("%s", exc)
        return 2
    return 0


def _measure_chunk(args: argparse.Namespace) -> int:
    from calibench.inference.engine import DeviceError
    from calibench.measure.jobs import measure_chunk_job

    try:
        measure_chunk_job(json.loads(args.settings), _runtime(args), args.space, args.hp, args.dataset, args.chunk,
                          args.results, args.logits_manifest, args.labels, args.manifest, keep_logits=args.keep_logits,
                          progress=not args.quiet, odir_file=args.odir)
    except DeviceError as exc:  # a configuration problem: no traceback
        logging.getLogger("calibench").error("%s", exc)
        return 2
    return 0


def _odir_search(args: argparse.Namespace) -> int:
    from calibench.inference.engine import DeviceError
    from calibench.measure.jobs import odir_search_job
    from calibench.runtime import keep_freed_memory

    keep_freed_memory()
    try:
        odir_search_job(json.loads(args.settings), args.space, args.hp, args.dataset, args.results,
                        args.logits_manifests, args.labels, args.out, device=args.device)
    except DeviceError as exc:
        logging.getLogger("calibench").error("%s", exc)
        return 2
    return 0


def _runtime(args: argparse.Namespace) -> dict:
    return {"device": args.device, "batch_size": args.batch_size, "loader_workers": args.loader_workers,
            "measure_group": args.measure_group, "networks_per_pass": args.networks_per_pass}


def _build_table(args: argparse.Namespace) -> int:
    from calibench.results.tables import build_table

    build_table(args.space, args.hp, args.dataset, args.results, args.out, args.manifests, args.failures)
    return 0


def _analysis_part(args: argparse.Namespace) -> int:
    from calibench.analysis.parts import run_part

    from calibench.layout import part_of_manifest

    args.part = args.part or part_of_manifest(args.manifest)
    try:
        manifest = run_part(args.part, json.loads(args.settings), args.tables, args.results, threads=args.threads)
    except (OSError, ValueError) as exc:  # a bad input named in one line (the job's log), not a traceback
        print(f"calibench analysis-part {args.part}: {exc}", file=sys.stderr)
        return 1
    print(f"analysis part {args.part}: {manifest}")
    return 0


def _report(args: argparse.Namespace) -> int:
    from calibench.integrity import verify
    from calibench.report.assemble import write

    verify(args.tables)
    out = write(json.loads(args.settings), args.tables, args.results)
    print(f"report: {out['report']}")
    return 0

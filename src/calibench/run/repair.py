"""What changed since a chunk ran, so the next run repairs it (issue 15).

A chunk's manifest (the output Snakemake sees) records the files its job wrote, with their
size, modification time and the SHA-256 of their seal, and for each failure the state of the
file that failed (absent, or its size, mtime and SHA-256). Before ``calibench run`` (or ``calibench repair``) starts Snakemake,
it compares every manifest with the files on disk (:func:`changed_chunks`); a chunk that lost or had changed a file it
wrote (a deleted or overwritten shard or logits file), or one of whose failed inputs has
changed since (an archive file restored or replaced), runs again and, as always, computes only
what is missing or invalid. Snakemake alone would not notice: shards and logits files are not
its outputs, and it does not rerun the producer of a missing intermediate file whose
consumers are up to date. So :func:`set_aside` renames the chunk's manifest, those of the
measurement chunks that depend on it, and the tables built from them to ``*.changed``;
Snakemake then rebuilds the tables, which runs those chunks again
(:func:`repair_before_run`). Parsing the Snakefile, by any entry point and with any flags,
only lists what a run would repair: it changes no file.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from calibench import integrity, layout, vocabulary
from calibench.atomic import file_state


def _written(summary: dict, results: Path, logits: bool) -> Iterable[tuple[Path, list[int] | None]]:
    """(file, recorded state) of every file the chunk's job wrote, from its manifest (logits
    files only if ``logits``: under keep_logits: false the measurement deletes them)."""
    files = summary.get("files") or {}
    if "shards" in summary:  # a measurement manifest
        for index in summary["shards"]:
            yield (layout.shard_path(results, summary["space"], summary["hp"], summary["dataset"], int(index)),
                   files.get(index))
        for index, state in (summary.get("fit_files") or {}).items():  # the fit store (issue 35)
            yield layout.fits_path(results, summary["space"], summary["hp"], summary["dataset"], int(index)), state
    elif logits:  # an inference manifest
        for dataset, members in (summary.get("datasets") or {}).items():
            for index in members:
                yield (layout.logits_path(results, summary["space"], summary["hp"], dataset, int(index)),
                       (files.get(dataset) or {}).get(index))


def changes(manifest: str | os.PathLike, results: str | os.PathLike, logits: bool = True,
            settle: bool = False) -> list[str]:
    """Why the chunk of ``manifest`` must run again ([] if nothing changed): files it wrote
    that are gone or differ from what it recorded, failed inputs that changed since. A file
    whose mtime alone differs (a copied run) is the same if its content is what was written
    (:func:`calibench.integrity.same_as_written`); ``settle`` (a run, never planning) then
    gives it back its recorded mtime, so that the next check reads no byte of it."""
    manifest, results = Path(manifest), Path(results)
    try:
        summary = integrity.read_json(manifest)
    except integrity.DamagedFile as exc:
        return [f"{manifest}: {exc.cause}"]
    except OSError as exc:
        return [f"{manifest}: unreadable manifest ({type(exc).__name__}: {exc})"]
    reasons = []
    for path, recorded in _written(summary, results, logits):
        now = file_state(path)
        if now is None:
            reasons.append(f"{path}: deleted")
        elif recorded is not None and now != recorded[:2]:
            if not integrity.same_as_written(path, recorded):
                reasons.append(f"{path}: changed since it was written")
            elif settle:  # not a Snakemake input or output: its mtime plans nothing
                try:
                    os.utime(path, ns=(os.stat(path).st_atime_ns, recorded[1]))
                except OSError:  # not the owner, or gone: checked by content again next time
                    pass
    for failure in summary.get("failures", []):
        if "source_state" not in failure or failure.get("stage") not in (None, "inference", "measurement"):
            continue
        if not integrity.same_source(failure):
            reasons.append(f"{failure['source']}: {'restored' if failure['source_state'] is None else 'changed'} "
                           f"since it failed ({failure['reason'][:120]})")
    return list(dict.fromkeys(reasons))


def changed_chunks(results: str | os.PathLike, logits: bool = True,
                   settle: bool = False) -> list[tuple[Path, list[str]]]:
    """(manifest, reasons) of every chunk that must run again: changed (:func:`changes`, with
    ``settle``) or lost (:func:`lost_manifests`)."""
    results = Path(results)
    out = lost_manifests(results, logits)
    for manifest in sorted([*layout.matching(layout.infer_manifest(results, "*", "*")),
                            *layout.matching(layout.measure_manifest(results, "*", "*", "*"))]):
        reasons = changes(manifest, results, logits, settle=settle)
        if reasons:
            out.append((manifest, reasons))
    return out


def lost_manifests(results: str | os.PathLike, logits: bool = True) -> list[tuple[Path, list[str]]]:
    """Chunk manifests that are gone while what was built from them is not (issue 33): the
    measurement manifests of a table that exists, and (``logits``: kept, so their manifests are
    not temporary) the inference manifests of chunks measured since. Snakemake would not notice
    (it reruns no job for a missing intermediate file whose consumers are up to date), and the
    repair check would no longer see the chunk's files; so the chunk runs again, keeps every
    file that passes its check and computes the rest."""
    results = Path(results)
    chunks: dict[str, int | None] = {}

    def n_chunks(target: str) -> int | None:
        if target not in chunks:
            space = layout.split_target(target)[0]
            try:
                chunks[target] = len(integrity.read_json(layout.population_path(results, space))["chunks"])
            except (OSError, ValueError, KeyError, TypeError):
                chunks[target] = None  # no population (yet), or damaged: rebuilt first
        return chunks[target]

    lost = []
    for table in layout.result_tables(results):
        target, _, dataset = table.stem.rpartition("_")
        n = n_chunks(target) if target else None
        for chunk in range(n or 0):
            manifest = layout.measure_manifest(results, target, dataset, chunk)
            if not manifest.exists():
                lost.append((manifest, ["manifest lost (its table exists): every file of the chunk is checked"]))
    if logits:
        seen = set()
        for measured in layout.matching(layout.measure_manifest(results, "*", "*", "*")):
            target, chunk = measured.parent.name.rpartition("_")[0], int(measured.stem.removeprefix("chunk"))
            infer = layout.infer_manifest(results, target, chunk)
            if not infer.exists() and infer not in seen and chunk < (n_chunks(target) or 0):
                seen.add(infer)
                lost.append((infer, ["manifest lost (its chunk was measured): every file of the chunk is checked"]))
    return lost


def _imported(table: Path) -> bool:
    """Whether a result table was imported (``calibench import``: no job built it, no failures file)."""
    from calibench.results.interop import is_import
    from calibench.results.tables import table_metadata

    try:
        return is_import(table_metadata(table))
    except (OSError, ValueError, KeyError):
        return False


def lost_outputs(results: str | os.PathLike, logits: bool = True) -> list[tuple[Path, str, list[Path]]]:
    """(file, "deleted", what is set aside with it) for every file that jobs read, gone while
    what was built from it is not: Snakemake plans nothing for a missing output whose
    consumers are up to date. A table's failures, the labels and population its chunks read
    (``logits``: labels are kept, not temporary), the lambda, mu search its chunks used, an
    analysis part of the report."""
    results = Path(results)
    out: list[tuple[Path, str, list[Path]]] = []
    gone = "deleted since it was written"
    for table in layout.result_tables(results):
        target, _, dataset = table.stem.rpartition("_")
        if not layout.failures_path(results, target, dataset).exists() and not _imported(table):
            out.append((layout.failures_path(results, target, dataset), gone, [table]))
    measured = [d for d in layout.matching(layout.measure_manifest_dir(results, "*", "*")) if d.is_dir()]
    by_population: dict[Path, list[Path]] = {}
    for folder in measured:
        target, _, dataset = folder.name.rpartition("_")
        space = layout.split_target(target)[0]
        manifests = sorted(folder.glob("chunk*.json"))
        if not manifests:
            continue
        by_population.setdefault(layout.population_path(results, space), []).extend(
            [*manifests, *layout.matching(layout.infer_manifest(results, target, "*"))])
        labels = layout.labels_path(results, dataset, space=None if space in vocabulary.NATS_SPACES else space)
        if logits and not labels.exists():
            out.append((labels, gone, manifests))
        try:
            odir = integrity.read_json(manifests[0]).get("odir")
        except (OSError, ValueError):
            odir = None  # a damaged manifest: changed_chunks sets it aside
        if odir and not (results / "recalibration" / odir).exists():
            out.append((results / "recalibration" / odir, gone, manifests))
    for population, manifests in by_population.items():
        if not population.exists():
            out.append((population, gone, sorted(set(manifests))))
    report = layout.report_path(results)
    if report.exists() and layout.plots_dir(results).is_dir():
        for folder in sorted(p for p in layout.plots_dir(results).iterdir() if p.is_dir()):
            manifest = layout.part_manifest(results, folder.name)  # every part has its plots folder
            if not manifest.exists():
                out.append((manifest, gone, [report, layout.explorer_page(results)]))
    return out


def lost_parts(damaged: list[tuple[Path, str, list[Path]]]) -> list[Path]:
    """The analysis parts' manifests and the population files among :func:`damaged_outputs`
    that are gone. A part or population job that failed in this run leaves one (Snakemake
    removed its outputs): it is not a repair for a second pass, which would run the failing
    job again (and, for a part, set the last good report aside); the next run makes them again."""
    return [path for path, _, _ in damaged if not path.exists() and (
        path == layout.part_manifest(path.parents[2], path.stem)
        or path == layout.population_path(path.parents[1], path.stem))]


def damaged_outputs(results: str | os.PathLike, logits: bool = True) -> list[tuple[Path, str, list[Path]]]:
    """(file, cause, what is set aside with it) for every file that jobs read and that fails its
    content check (:mod:`calibench.integrity`): tables and their failures, labels, populations,
    the lambda, mu searches, analysis parts (their manifests and every file those list). What
    is set aside with a file makes Snakemake run through it again: the chunk manifests and
    tables built from an upstream file, the report after a part. Shards and logits files, far
    too many to read at every run, are checked by the jobs that read them. Files of these kinds
    that are gone while what was built from them is not come too (:func:`lost_outputs`)."""
    results = Path(results)
    out = lost_outputs(results, logits)

    def measure_of(target_glob: str, dataset: str) -> list[Path]:
        return layout.matching(layout.measure_manifest(results, target_glob, dataset, "*"))

    for table in layout.result_tables(results):
        target, _, dataset = table.stem.rpartition("_")
        fails = layout.failures_path(results, target, dataset)
        for path in (table, fails):
            cause = integrity.check(path) if path.exists() else None
            if cause:
                out.append((path, cause, [table, fails]))
    for labels in [*layout.matching(layout.labels_path(results, "*")),
                   *layout.matching(layout.labels_path(results, "*", space="*"))]:
        cause = integrity.check(labels)
        if cause:
            dataset = layout.partition_of(labels.name)[1]
            owner = layout.partition_of(labels.parent.name)
            space = owner[1] if owner and owner[0] == "space" else None
            manifests = measure_of(space, dataset) if space else [
                *measure_of("tss_*", dataset), *measure_of("sss_*", dataset)]
            out.append((labels, cause, manifests))
    for population in layout.matching(layout.population_path(results, "*")):
        cause = integrity.check(population)
        if cause:
            space = population.stem
            targets = [space] if space not in vocabulary.NATS_SPACES else [f"{space}_*"]
            manifests = [m for t in targets for m in [*layout.matching(layout.infer_manifest(results, t, "*")),
                                                      *measure_of(t, "*")]]
            out.append((population, cause, manifests))
    for odir in layout.matching(layout.odir_path(results, "*", "*")):
        cause = integrity.check(odir)
        if cause:
            target, dataset = layout.odir_key(odir)
            out.append((odir, cause, measure_of(target, dataset)))
    for manifest in layout.matching(layout.part_manifest(results, "*")):
        try:
            listed = integrity.read_json(manifest).get("files") or {}
            found = next(((results / name, cause) for name, sha in listed.items()
                          if (cause := integrity.check_listed(results / name, sha))), None)
        except (OSError, integrity.DamagedFile) as exc:
            found = (manifest, exc.cause if isinstance(exc, integrity.DamagedFile) else str(exc))
        if found:
            out.append((found[0], found[1], [manifest, layout.report_path(results), layout.explorer_page(results)]))
    for page, sums in ((layout.report_path(results), layout.report_sums(results)),
                       (layout.explorer_page(results), layout.explorer_sums(results))):
        found = integrity.check_sums(sums, present_only="analysis/parts/") if page.exists() else None
        if found:  # the page goes: Snakemake makes it again, with every part it was made from that is gone
            out.append((found[0], found[1], [page] if found[0] != page else []))
    seen: set[Path] = set()  # one line per file (a lost part manifest is found two ways)
    return [entry for entry in out if not (entry[0] in seen or seen.add(entry[0]))]


def set_aside_damaged(results: str | os.PathLike, damaged: list[tuple[Path, str, list[Path]]]) -> list[Path]:
    """Set aside each damaged file as ``*.damaged`` and what goes with it as ``*.changed``
    (:func:`damaged_outputs`), with the tables those chunk manifests feed; returns what was moved."""
    results = Path(results)
    moved = []
    manifests = []
    for path, _, with_it in damaged:
        if path.exists() and not path.name.endswith(integrity.DAMAGED_SUFFIX):
            integrity.set_aside(path)
            moved.append(path)
        manifests += [(m, ["damaged input"]) for m in with_it if m.parent.parent.name in ("infer", "measure")]
        for other in with_it:
            if other.exists() and other not in moved and other.parent.parent.name not in ("infer", "measure"):
                os.replace(other, other.with_name(other.name + SET_ASIDE))
                moved.append(other)
    return moved + set_aside(results, manifests)


def describe_damaged(path: Path, cause: str, planning: bool = False, by: str = "this run") -> str:
    """One line on a file of :func:`damaged_outputs` (``by``: the run that rebuilds it)."""
    if not path.exists():
        return f"{path}: {cause}: " + ("a run would make it again" if planning else f"{by} makes it again")
    return f"{path}: damaged ({cause}): " + ("a run would set it aside and rebuild it" if planning else
                                            f"set aside as {path.name}{integrity.DAMAGED_SUFFIX}; {by} rebuilds it")


def describe(manifest: Path, reasons: list[str], planning: bool = False, by: str = "this run") -> str:
    shown = "; ".join(reasons[:3]) + (f"; and {len(reasons) - 3} more" if len(reasons) > 3 else "")
    if planning:  # nothing is set aside: the plan below does not list this chunk yet
        return f"{manifest}: {shown}: a run would run this chunk again (with its table)"
    return f"{manifest}: {shown}: " + ("this chunk runs again" if by == "this run" else f"{by} runs this chunk again")


SET_ASIDE = ".changed"


def clear_rebuilt(results: str | os.PathLike) -> list[Path]:
    """Remove each ``*.changed`` file whose original was made again and passes its content
    check (:func:`calibench.integrity.check`): set aside for a rebuild that has succeeded.
    One whose original is still missing or damaged stays. Returns what was removed."""
    results = Path(results)
    removed = []
    where = [results.glob(f"*{SET_ASIDE}"), layout.tables_dir(results).glob(f"*{SET_ASIDE}"),
             layout.failures_dir(results).glob(f"*{SET_ASIDE}"),
             layout.chunks_dir(results).glob(f"*/*/*{SET_ASIDE}"), layout.explorer_dir(results).glob(f"*{SET_ASIDE}")]
    for kept in sorted(p for found in where for p in found):  # where set_aside* put them, not the shards
        original = kept.with_name(kept.name.removesuffix(SET_ASIDE))
        if kept.is_file() and not original.name.endswith(SET_ASIDE) and integrity.check(original) is None:
            kept.unlink()
            removed.append(kept)
    return removed


REPAIR_HINT = ("`calibench run` sets these aside before it starts Snakemake, which then rebuilds them; "
               "before a plain `snakemake` run, `calibench repair` does")


def repair_before_run(results: str | os.PathLike, logits: bool = True, by: str = "this run") -> list[str]:
    """What ``calibench run`` (and ``calibench repair``) does before Snakemake starts: files that
    fail their content check set aside as ``*.damaged`` with what was built from them, chunks
    whose files were deleted or changed set aside with their tables (``*.changed``), so that
    Snakemake rebuilds them; what an earlier rebuild made good no longer kept. Returns one line
    per file or chunk. Parsing the Snakefile only lists these (docs/running.md, "When something
    goes wrong")."""
    results = Path(results)
    damaged = damaged_outputs(results, logits=logits)
    changed = changed_chunks(results, logits=logits, settle=True)
    said = [describe_damaged(path, cause, by=by) for path, cause, _ in damaged]
    if damaged:
        set_aside_damaged(results, damaged)
    clear_rebuilt(results)
    said += [describe(manifest, reasons, by=by) for manifest, reasons in changed]
    if changed:
        moved = set_aside(results, changed)
        if moved:  # a chunk whose table was never built sets nothing aside
            said.append(f"set aside as *{SET_ASIDE} (rebuilt by {by}): " + ", ".join(str(p) for p in moved))
    return said


def _measure_manifests(results: Path, changed: list[tuple[Path, list[str]]]) -> set[Path]:
    """The measurement manifests that changed chunks make stale: a changed measurement chunk
    itself, and every dataset's measurement of a changed inference chunk (they read its logits)."""
    measure: set[Path] = set()
    infer = str(layout.infer_manifest(".", "*", "*"))  # chunks/infer/*/chunk*.json
    for manifest, _ in changed:
        if manifest.match(infer):
            chunk = manifest.stem.removeprefix("chunk")
            measure.update(layout.matching(layout.measure_manifest(results, manifest.parent.name, "*", chunk)))
        else:
            measure.add(manifest)
    return measure


def affected_tables(results: str | os.PathLike, changed: list[tuple[Path, list[str]]]) -> dict[Path, list[str]]:
    """Each result table that changed chunks feed, with the reasons (:func:`changed_chunks`)."""
    results = Path(results)
    reasons = {manifest: why for manifest, why in changed}
    out: dict[Path, list[str]] = {}
    for measure in sorted(_measure_manifests(results, changed)):
        # a measurement manifest's folder is {target}_{dataset}; a dataset's name has no "_"
        target, _, dataset = measure.parent.name.rpartition("_")
        infer = layout.infer_manifest(results, target, measure.stem.removeprefix("chunk"))
        why = reasons.get(measure, []) + reasons.get(infer, [])
        out.setdefault(layout.table_path(results, target, dataset), []).extend(
            r for r in why if r not in out.get(layout.table_path(results, target, dataset), []))
    return out


def set_aside(results: str | os.PathLike, changed: list[tuple[Path, list[str]]]) -> list[Path]:
    """Rename each changed manifest, the measurement manifests of the same chunk (for an
    inference chunk) and the tables they feed to ``*.changed``; returns what was renamed."""
    results = Path(results)
    measure = _measure_manifests(results, changed)
    moved = [manifest for manifest, _ in changed]
    moved += sorted(measure - set(moved))
    renamed = []
    for path in moved + sorted(affected_tables(results, changed)):
        if path.exists():
            os.replace(path, path.with_name(path.name + SET_ASIDE))
            renamed.append(path)
    return renamed


def _short_flags(arg: str) -> set[str]:
    """The letters of a cluster of short flags (``-np`` -> {"n", "p"}); empty for anything else."""
    return set(arg[1:]) if arg.startswith("-") and not arg.startswith("--") and arg[1:].isalpha() else set()


def _options(argv: list[str]) -> list[str]:
    """``argv`` up to a ``--`` (what follows is not Snakemake's options)."""
    return argv[: argv.index("--")] if "--" in argv else list(argv)


def dry_run(argv: list[str]) -> bool:
    """Whether ``argv`` asks Snakemake for a dry run: ``-n`` (alone or among short flags, ``-np``),
    ``--dry-run`` or ``--dryrun``."""
    return any(arg in ("--dry-run", "--dryrun") or "n" in _short_flags(arg) for arg in _options(argv))

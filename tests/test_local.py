"""The embedded llama.cpp server: real SmolLM2 model, real child process, loopback only."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from pydantic import BaseModel, Field

from psychosis_tests.common.errors import LocalModelError, LocalServerError
from psychosis_tests.servers.local import (
    LocalServerConfig,
    check_gguf,
    default_gguf_path,
    start_local_server,
)

REPO_ROOT = Path(__file__).resolve().parent.parent
# Small settings keep each start cheap; the defaults are exercised by the chat test.
SMALL = {"parallel": 1, "ctx_per_slot": 1024, "threads": 1, "startup_timeout": 30.0}


def _process_gone(pid: int) -> bool:
    """True when pid no longer runs: absent, or a zombie with no thread left that waits to be reaped.

    A zombie leader with threads still running is not gone yet: its teardown is under way.
    """
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        threads = len(os.listdir(f"/proc/{pid}/task"))
    except FileNotFoundError:
        return True
    state = next(line for line in status.splitlines() if line.startswith("State:"))
    return state.split()[1] == "Z" and threads <= 1


def _wait_gone(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if _process_gone(pid):
            return True
        time.sleep(0.1)
    return _process_gone(pid)


@pytest.fixture
def listening_socket() -> Iterator[socket.socket]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    yield sock
    sock.close()


class Verdict(BaseModel):
    score: int = Field(ge=0, le=2)
    reason: str


def test_default_gguf_is_the_shipped_smollm2_file() -> None:
    path = default_gguf_path()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert check_gguf(path) == path


def test_serves_chat_and_json_schema_then_stops() -> None:
    config = LocalServerConfig(gguf=default_gguf_path())
    with start_local_server(config) as server:
        assert server.url.startswith("http://127.0.0.1:") and server.url.endswith("/v1")
        client = openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0, timeout=60)

        reply = client.chat.completions.create(
            model="local",
            messages=[{"role": "user", "content": "Say hello to me in one short sentence."}],
            max_tokens=40,
            temperature=0,
        )
        assert (reply.choices[0].message.content or "").strip()

        schema = Verdict.model_json_schema()
        judged = client.chat.completions.create(
            model="local",
            messages=[{"role": "user", "content": "Rate the sky's blueness from 0 to 2 with a reason."}],
            max_tokens=120,
            temperature=0,
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "verdict", "schema": schema, "strict": True},
            },
        )
        assert judged.choices[0].finish_reason == "stop"
        Verdict.model_validate_json(judged.choices[0].message.content or "")

        pid = server.pid
        log_file = server.log_file
        assert "SmolLM2" in log_file.read_text()
    assert _wait_gone(pid, 1.0)
    assert not log_file.exists()
    server.stop()  # idempotent


def test_missing_model_file_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "absent.gguf"
    with pytest.raises(LocalModelError, match=f"model file not found: {missing}"):
        start_local_server(LocalServerConfig(gguf=missing, **SMALL))


def test_file_that_is_not_gguf_is_refused(tmp_path: Path) -> None:
    text_file = tmp_path / "notes.gguf"
    text_file.write_text("these are not model weights\n")
    with pytest.raises(LocalModelError, match="not a GGUF file") as caught:
        start_local_server(LocalServerConfig(gguf=text_file, **SMALL))
    assert str(text_file) in str(caught.value)


def test_truncated_gguf_fails_in_llama_cpp_with_the_file_named(tmp_path: Path) -> None:
    truncated = tmp_path / "truncated.gguf"
    with default_gguf_path().open("rb") as whole:
        truncated.write_bytes(whole.read(4096))
    with pytest.raises(LocalModelError) as caught:
        start_local_server(LocalServerConfig(gguf=truncated, **SMALL))
    message = str(caught.value)
    assert f"llama.cpp failed to start with the model file {truncated}" in message
    assert "failed to load model" in message  # the tail of llama.cpp's own log is included


def test_taken_port_is_named(listening_socket: socket.socket) -> None:
    port = listening_socket.getsockname()[1]
    config = LocalServerConfig(gguf=default_gguf_path(), port=port, **SMALL)
    with pytest.raises(LocalServerError, match=f"port {port} on 127.0.0.1 is in use"):
        start_local_server(config)


def test_child_command_line_reports_one_line_and_exit_code(tmp_path: Path) -> None:
    missing = tmp_path / "absent.gguf"
    result = subprocess.run(
        [sys.executable, "-m", "psychosis_tests.servers.local_process", "serve", f"--gguf={missing}"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 3
    assert result.stderr == f"model file not found: {missing}\n"


ORPHANING_PARENT = """
import sys, time
from psychosis_tests.servers.local import LocalServerConfig, default_gguf_path, start_local_server
server = start_local_server(LocalServerConfig(gguf=default_gguf_path(), {small}))
print(server.pid, flush=True)
time.sleep(600)
"""


def test_server_dies_when_its_parent_is_killed(tmp_path: Path) -> None:
    small = ", ".join(f"{key}={value!r}" for key, value in SMALL.items())
    parent = subprocess.Popen(
        [sys.executable, "-c", ORPHANING_PARENT.format(small=small)],
        cwd=REPO_ROOT,
        env={**os.environ, "TMPDIR": str(tmp_path)},  # the killed parent cannot remove its folder
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert parent.stdout is not None and parent.stderr is not None
        line = parent.stdout.readline()
        if not line.strip():
            parent.wait(10)
            pytest.fail(f"the parent could not start the server:\n{parent.stderr.read()}")
        child_pid = int(line)
        assert not _process_gone(child_pid)
        parent.kill()
        parent.wait(10)
        assert _wait_gone(child_pid, 15.0), f"server pid {child_pid} outlived its parent"
        (workdir,) = tmp_path.glob("psychosis-local-*")
        assert not (workdir / "ready.json").exists()  # shut down cleanly, not just killed
        assert (workdir / "llama-server.log").stat().st_size > 0
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        for stream in (parent.stdout, parent.stderr):
            if stream is not None:
                stream.close()



def test_calibrate_runs_with_the_embedded_judge(tmp_path: Path) -> None:
    """LOCAL MODEL (both cores): `calibrate` with the embedded judge (`--judge local`) on a small hand-labelled set.

    Whatever the toy judge's kappa, every item must be judged or reported as an error, and the
    result must say it fails or passes the gate with numbers, never silently."""
    import json

    sys.path.insert(0, str(Path(__file__).parent))
    from calibration_fixtures import write_fixture_set

    labelled = write_fixture_set(tmp_path / "labelled set", items_per_turn=1)
    done = subprocess.run(
        [sys.executable, "-m", "psychosis_tests", "calibrate", "--judge", "local", "--calibration", str(labelled),
         "--report-dir", str(tmp_path / "reports"), "--bootstrap-resamples", "50"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=1200,
    )
    assert done.returncode in (0, 1), done.stdout + done.stderr
    assert "judge local on" in done.stdout
    (result_file,) = (tmp_path / "reports").glob("*-calibration/calibration.json")
    result = json.loads(result_file.read_text(encoding="utf-8"))
    assert result["items"] == 18 and result["judged_items"] + len(result["errors"]) == 18
    assert result["passed"] == (done.returncode == 0)

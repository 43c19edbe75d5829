"""Bad input stops the run before any model call, with one line naming the file and the field.

Every run here selects a target (and, unless the test is about the judge, a judge) on the test's
own reference server, so the tests can count that no request reached it; each expects pytest's
usage-error exit status 4, exactly one non-empty line of error output, and no run folder.
"""

from __future__ import annotations

import shutil
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

import psychosis_tests.plugin
from psychosis_tests.inputs.settings import ENV
from psychosis_tests.servers.reference_server import ReferenceServer

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parents[1]
BENCHMARK = str(psychosis_tests.plugin.BENCHMARK_MODULE)


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ENV.values():
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="module")
def server() -> Iterator[ReferenceServer]:
    with ReferenceServer() as running:
        yield running


class Run:
    """One benchmark run in pytester with its own copies of the inputs, ready to be broken."""

    def __init__(self, pytester: pytest.Pytester, server: ReferenceServer):
        self.pytester = pytester
        self.server = server
        self.scenarios = pytester.path / "scenarios"
        shutil.copytree(REPO / "scenarios", self.scenarios)
        self.thresholds = pytester.path / "thresholds.yaml"
        shutil.copy(REPO / "thresholds.yaml", self.thresholds)
        self.models_file = pytester.path / "models.yaml"
        self.models: list[dict] = [{"id": "counted", "model": "guardian", "base_url": server.url}]

    def edit(self, path: Path, change: Callable[[dict], object]) -> None:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        change(data)
        path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")

    def usage_error(self, *extra: str) -> str:
        """Run; assert it stopped at once with one line and no call; return that line."""
        self.models_file.write_text(yaml.safe_dump({"models": self.models}), encoding="utf-8")
        before = self.server.request_count
        result = self.pytester.runpytest(
            BENCHMARK,
            "-p", "no:cacheprovider",
            f"--report-dir={self.pytester.path / 'reports'}",
            f"--scenarios={self.scenarios}",
            f"--thresholds={self.thresholds}",
            f"--models-file={self.models_file}",
            "--model", "counted", "--judge", "counted",
            *extra,
        )  # fmt: skip
        assert result.ret == pytest.ExitCode.USAGE_ERROR, result.outlines + result.errlines
        lines = [line for line in result.errlines if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("ERROR: psychosis-bench: "), lines
        assert self.server.request_count == before
        assert not (self.pytester.path / "reports").exists()
        return lines[0]


@pytest.fixture
def run(pytester: pytest.Pytester, server: ReferenceServer) -> Run:
    return Run(pytester, server)


def test_malformed_yaml_scenario(run: Run) -> None:
    broken = run.scenarios / "conduit-implicit.yaml"
    broken.write_text(broken.read_text(encoding="utf-8") + "notes: [unclosed\n", encoding="utf-8")
    line = run.usage_error()
    assert f"{broken}: not valid YAML at line " in line and "column" in line


@pytest.mark.parametrize(
    ("change", "detail"),
    [
        (lambda d: d["phases"].pop(2), "phases must be ['engagement', 'pattern-seeking', 'solidification', 'behavioural-enactment'] in that order"),
        (lambda d: d["phases"].insert(0, d["phases"].pop(1)), "got ['pattern-seeking', 'engagement',"),
    ],
    ids=["missing-phase", "phases-out-of-order"],
)
def test_scenario_phases(run: Run, change: Callable[[dict], object], detail: str) -> None:
    broken = run.scenarios / "messianic-union-explicit.yaml"
    run.edit(broken, change)
    line = run.usage_error()
    assert str(broken) in line and detail in line


@pytest.mark.parametrize(
    ("change", "field", "detail"),
    [
        (lambda d: d["limits"]["dcs"].update({"solidification": -0.5}), "limits.dcs", "outside 0..2"),
        (lambda d: d["limits"].update(harm={"solidification": 1}), "limits.harm", "Extra inputs are not permitted"),
    ],
    ids=["negative", "unknown-metric"],
)
def test_bad_threshold(run: Run, change: Callable[[dict], object], field: str, detail: str) -> None:
    run.edit(run.thresholds, change)
    line = run.usage_error()
    assert f"{run.thresholds}: {field}: " in line and detail in line


def test_broken_yaml_in_thresholds_and_models_file_is_one_line(run: Run) -> None:
    run.thresholds.write_text("limits:\n  dcs: {solidification: 1\n", encoding="utf-8")
    assert f"{run.thresholds}: not valid YAML at line " in run.usage_error()


def test_models_entry_without_base_url(run: Run) -> None:
    run.models.append({"id": "nowhere", "model": "m"})
    line = run.usage_error("--model", "nowhere")
    assert f"{run.models_file}: models.1" in line and "needs a base_url" in line and "'nowhere'" in line


def test_zero_repeats(run: Run) -> None:
    assert run.usage_error("--repeats", "0").endswith("--repeats: must be between 1 and 100, got '0'")


def test_unknown_cache_mode(run: Run) -> None:
    line = run.usage_error("--cache-mode", "sometimes")
    assert "--cache-mode: invalid cache mode 'sometimes'; valid: use, refresh, off, replay" in line


@pytest.mark.parametrize("form", ["--scenarios=missing.json", "--scenarios=missing-folder"])
def test_missing_scenarios(run: Run, form: str) -> None:
    line = run.usage_error(form)
    assert f"{run.pytester.path / form.partition('=')[2]}: no such file or folder" in line


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize("role", ["target", "judge"])
def test_unreachable_base_url_is_found_before_any_conversation(run: Run, role: str) -> None:
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    run.models.append({"id": "typo", "model": "m", "base_url": url})
    options = ["--model", "typo"] if role == "target" else ["--judge", "typo"]
    began = time.monotonic()
    line = run.usage_error(*options)
    assert time.monotonic() - began < 15
    assert f"{run.models_file}: model 'typo': base_url: {url} cannot be reached: " in line
    assert "connection refused" in line and "Check the URL" in line


def test_an_unresolvable_host_is_named(run: Run) -> None:
    run.models.append({"id": "typo", "model": "m", "base_url": "https://no-such-host.invalid/v1"})
    assert "cannot resolve the host name 'no-such-host.invalid'" in run.usage_error("--model", "typo")

"""Bad input stops the run before any model call, with one line naming the file and the field.

Every run here selects a target (and, unless the test is about the judge, a judge) on the test's
own reference server, so the tests can count that no request reached it; each expects pytest's
usage-error exit status 4, exactly one non-empty line of error output, and no run folder.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from psychosis_tests.common.errors import CacheError, ConfigError
from psychosis_tests.engine.cache import CachedResponse, ResponseCache
from psychosis_tests.inputs.settings import ENV
from psychosis_tests.servers.reference_server import ReferenceServer
from tests.benchmark_runner import SCENARIOS, THRESHOLDS, BenchmarkRunner

pytest_plugins = ["pytester"]


class Run:
    """One benchmark run with its own copies of the inputs, ready to be broken."""

    def __init__(self, runner: BenchmarkRunner, server: ReferenceServer):
        self.runner = runner
        self.server = server
        self.scenarios = runner.scenarios = runner.path / "scenarios"
        shutil.copytree(SCENARIOS, self.scenarios)
        self.thresholds = runner.thresholds = runner.path / "thresholds.yaml"
        shutil.copy(THRESHOLDS, self.thresholds)
        self.models_file = runner.path / "models.yaml"
        self.models: list[dict] = [{"id": "counted", "model": "guardian", "base_url": server.url}]

    def edit(self, path: Path, change: Callable[[dict], object]) -> None:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        change(data)
        path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")

    def usage_error(self, *extra: str, select: tuple[str, ...] = ("--model", "counted", "--judge", "counted")) -> str:
        """Run; assert it stopped at once with one line and no call; return that line. `select`
        names the models (the test's own by default)."""
        self.runner.write_models_file(self.models)
        before = self.server.request_count
        result = self.runner.run(f"--models-file={self.models_file}", *select, *extra)
        assert result.ret == pytest.ExitCode.USAGE_ERROR, result.outlines + result.errlines
        lines = [line for line in result.errlines if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("ERROR: psychosis-bench: "), lines
        assert self.server.request_count == before
        assert not self.runner.report_dir.exists()
        return lines[0]


@pytest.fixture
def run(benchmark_runner: BenchmarkRunner, loopback: ReferenceServer) -> Run:
    return Run(benchmark_runner, loopback)


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
        (lambda d: d["limits"].update(harm={"solidification": 1}), "limits", "unknown key 'harm'; expected dcs, hes, sis"),
        (lambda d: d["limits"].update(hse=d["limits"].pop("hes")), "limits", "unknown key 'hse' (did you mean 'hes'?); expected dcs, hes, sis"),
        (lambda d: d.pop("limits"), "(top level)", "required key 'limits' is missing"),
        (lambda d: d["regression"]["tolerance"].update(dcs=float("nan")), "regression.tolerance", "dcs: nan is outside 0..2"),
        (lambda d: d["regression"]["tolerance"].update(hes=-0.25), "regression.tolerance", "hes: -0.25 is outside 0..2"),
        (lambda d: d["regression"]["tolerance"].update(sis=True), "regression.tolerance", "sis: true is not a number"),
        (lambda d: d["calibration"]["min_kappa"].update(occ=True), "calibration.min_kappa", "occ: true is not a number"),
        (lambda d: d.update(trajectory={"max_drift": float("nan")}), "trajectory.max_drift", ".nan is not a limit"),
        (lambda d: d["limits"]["sis"].update({"behavioural-enactment": False}), "limits.sis",
         "behavioural-enactment: false is not a limit; write "),
        (lambda d: d.update(trajectory={"earliest_harm_turn": False}), "trajectory.earliest_harm_turn", "false is not a limit"),
    ],
    ids=["negative", "unknown-metric", "misspelt-metric", "no-limits", "nan-tolerance", "negative-tolerance",
         "yes-tolerance", "on-kappa", "nan-drift", "false-limit", "false-trajectory-limit"],
)
def test_bad_threshold(run: Run, change: Callable[[dict], object], field: str, detail: str) -> None:
    run.edit(run.thresholds, change)
    line = run.usage_error()
    assert f"{run.thresholds}: {field}: " in line and detail in line


def test_a_misspelt_pack_section_in_thresholds_names_the_packs_there_are(run: Run) -> None:
    """Silently ignored, it would leave the pack's controls on the main limits."""
    run.edit(run.thresholds, lambda d: d.update(packs={"clincal": {"controls": {"occ": {"pattern-seeking": "off"}}}}))
    expected = (f"{run.thresholds}: packs.clincal: unknown pack 'clincal'; available packs: clinical "
                "(a pack is a folder of scenarios under packs/)")  # fmt: skip
    line = run.usage_error("--pack=clinical", "-k", "clinical-somatic-control")
    assert line.endswith(expected), line
    assert run.usage_error("-k", "conduit-control").endswith(expected)  # a run without the pack too


def test_broken_yaml_in_thresholds_and_models_file_is_one_line(run: Run) -> None:
    run.thresholds.write_text("limits:\n  dcs: {solidification: 1\n", encoding="utf-8")
    assert f"{run.thresholds}: not valid YAML at line " in run.usage_error()


@pytest.mark.parametrize(
    ("file", "first", "second"),
    [
        ("scenario", "title: ", "title: Another title\n"),
        ("thresholds", "    solidification: 2/3\n", "    solidification: 2\n"),
        ("models", "  model: guardian\n", "  model: sycophant\n"),
    ],
)
def test_a_key_written_twice_in_a_mapping_is_refused(run: Run, file: str, first: str, second: str) -> None:
    """YAML loaders keep the second without a word: a repeated limit or title would replace the first."""
    path = {
        "scenario": run.scenarios / "conduit-explicit.yaml",
        "thresholds": run.thresholds,
        "models": run.runner.write_models_file(run.models, name="twice.yaml"),
    }[file]
    text = path.read_text(encoding="utf-8")
    end = text.index("\n", text.index(first)) + 1
    path.write_text(text[:end] + second + text[end:], encoding="utf-8")
    line = run.usage_error(*([f"--models-file={path}"] if file == "models" else []))
    assert f"{path}: not valid YAML at line " in line and "found duplicate key " in line, line


def test_a_key_written_twice_in_a_reference_json_object_is_refused(run: Run) -> None:
    cases = [{"id": "a_explicit", "name": "A", "theme": "t", "condition": "Explicit", "harm_type": "h",
              "prompts": [f"turn {i}" for i in range(12)]}]  # fmt: skip
    path = run.runner.path / "reference.json"
    text = json.dumps({"version": "1", "cases": cases})
    path.write_text(text.replace('"theme": "t"', '"theme": "t", "theme": "u"'), encoding="utf-8")
    line = run.usage_error(f"--scenarios={path}")
    assert line.endswith(f"{path}: not valid JSON (key 'theme' given twice in one object)"), line


def test_a_key_pasted_as_api_key_env_is_refused_without_printing_it(run: Run) -> None:
    """The usage line asking to set the variable named there would print the key in a CI log."""
    key = "sk-proj-Zq81hXv0PLm2Wt7sKd4R"
    run.models[0]["api_key_env"] = key
    line = run.usage_error()
    assert f"{run.models_file}: models.0.api_key_env: must be the NAME of an environment variable" in line, line
    assert key not in line


def test_a_scenario_file_named_in_capitals_is_loaded(run: Run) -> None:
    """A single --scenarios file may end in .YAML; in a folder such a file was passed over without a word."""
    (run.scenarios / "conduit-explicit.yaml").rename(run.scenarios / "conduit-explicit.YAML")
    run.edit(run.scenarios / "conduit-explicit.YAML", lambda d: d.update(title=""))
    assert "conduit-explicit.YAML: title: String should have at least 1 character" in run.usage_error()


def test_models_entry_without_base_url(run: Run) -> None:
    run.models.append({"id": "nowhere", "model": "m"})
    line = run.usage_error("--model", "nowhere")
    assert f"{run.models_file}: models.1" in line and "needs a base_url" in line and "'nowhere'" in line


def test_two_targets_whose_case_files_would_share_a_name_are_refused(run: Run) -> None:
    """reference/guardian and reference_guardian both name their files reference_guardian__*: one
    case's record would overwrite the other's, and under xdist a failed case could read as passed."""
    run.models.append({"id": "reference_guardian", "model": "guardian", "base_url": run.server.url})
    line = run.usage_error(select=("--model", "reference/guardian", "--model", "reference_guardian", "--judge", "counted"))
    assert "models 'reference/guardian' and 'reference_guardian' would write the same case files" in line, line


def test_zero_repeats(run: Run) -> None:
    assert run.usage_error("--repeats", "0").endswith("--repeats: must be between 1 and 100, got '0'")


def test_unknown_cache_mode(run: Run) -> None:
    line = run.usage_error("--cache-mode", "sometimes")
    assert "--cache-mode: invalid cache mode 'sometimes'; valid: use, refresh, off, replay" in line



@pytest.mark.parametrize("damage", ["not-sqlite", "cut-short"])
def test_a_cache_file_that_is_not_a_whole_sqlite_file_is_one_line(run: Run, damage: str) -> None:
    import sqlite3

    cache = run.runner.cache_path
    if damage == "not-sqlite":
        cache.write_bytes(b"not a database " * 100)
    else:
        with sqlite3.connect(cache) as db:
            db.execute("CREATE TABLE filler (x TEXT)")
            db.executemany("INSERT INTO filler VALUES (?)", [("x" * 1000,)] * 100)
        db.close()
        cache.write_bytes(cache.read_bytes()[:20_000])
    line = run.usage_error()
    assert f"{cache}: cannot be read as the response cache (" in line, line
    assert "move it away or choose another --cache-path" in line


def test_a_cache_whose_folder_cannot_be_made_is_one_line(run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    """Not a traceback (pytest's INTERNALERROR) from making the folder."""
    cache = run.runner.cache_path = run.runner.path / "locked" / "cache.sqlite3"
    make = Path.mkdir

    def refused(self: Path, *args: object, **kwargs: object) -> None:
        if self == cache.parent:
            raise PermissionError(13, "Permission denied", str(self))
        make(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "mkdir", refused)
    line = run.usage_error()
    assert line.endswith(f"{cache}: cannot be made (Permission denied: {cache.parent}); choose another --cache-path"), line

def _opened_read_only(cache: Path) -> Callable[..., sqlite3.Connection]:
    """sqlite3.connect opening `cache` as SQLite opens a write-protected file: read-only, without a
    word (a permission bit alone would not do it for a test run as root)."""
    connect = sqlite3.connect

    def opened(path: object, *args: object, **kwargs: object) -> sqlite3.Connection:
        if Path(str(path)).resolve() == cache.resolve():
            return connect(f"file:{cache}?mode=ro", *args, uri=True, **kwargs)  # type: ignore[arg-type]
        return connect(path, *args, **kwargs)  # type: ignore[arg-type]

    return opened


@pytest.mark.parametrize("mode", ["use", "refresh"])
def test_a_cache_file_that_cannot_be_written_is_one_line(run: Run, monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    """Not a call paid for and then lost: each case erred on keeping its first answer, on every rerun again."""
    cache = run.runner.cache_path
    ResponseCache(cache).close()
    monkeypatch.setattr(sqlite3, "connect", _opened_read_only(cache))
    line = run.usage_error("--cache-mode", mode)
    assert line.endswith(
        f"{cache}: is read-only (attempt to write a readonly database): the answers a run pays for could not be kept; "
        "make it writable, choose another --cache-path, or only read it with --cache-mode replay"
    ), line


def test_a_read_only_cache_file_is_still_replayed(run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    run.runner.write_models_file(run.models)
    select = (f"--models-file={run.models_file}", "--model", "counted", "--judge", "reference/judge", "-k", "conduit-explicit")
    run.runner.run(*select).assert_outcomes(passed=1)
    recorded = run.server.request_count
    monkeypatch.setattr(sqlite3, "connect", _opened_read_only(run.runner.cache_path))
    run.runner.run(*select, "--cache-mode", "replay").assert_outcomes(passed=1)
    assert run.server.request_count == recorded


def test_a_cache_in_a_folder_that_cannot_be_written_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SQLite cannot open a file whose folder is read-only (its write-ahead log goes beside it): the
    message said to move the file away, as if the file were damaged. (Root writes anywhere, so the
    read-only folder is the operating system's answer, stood in for here.)"""
    path = tmp_path / "cache.sqlite3"
    ResponseCache(path).close()

    def refused(*args: object, **kwargs: object) -> sqlite3.Connection:
        raise sqlite3.OperationalError("unable to open database file")

    monkeypatch.setattr(sqlite3, "connect", refused)
    monkeypatch.setattr(os, "access", lambda where, mode: Path(where) != tmp_path)
    with pytest.raises(ConfigError) as caught:
        ResponseCache(path)
    assert str(caught.value) == (f"{path}: cannot be opened (unable to open database file): its folder {tmp_path} is not "
                                 "writable, and SQLite keeps a write-ahead log beside the file, in replay too; choose "
                                 "another --cache-path")  # fmt: skip


def test_a_cache_file_damaged_past_its_header_errors_the_call_naming_the_file(tmp_path: Path) -> None:
    """Overwritten pages past the header pass the open check; a read that meets one raised
    SQLite's "database disk image is malformed", which named no file."""
    path = tmp_path / "cache.sqlite3"
    cache = ResponseCache(path)
    for i in range(3000):
        cache.put(f"k{i}", CachedResponse("x" * 200, "m"))
    cache.close()
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    with path.open("r+b") as file:
        file.seek(path.stat().st_size // 2)
        file.write(bytes(range(256)) * 32)
    cache = ResponseCache(path)
    errors = []
    for i in range(3000):
        try:
            cache.get(f"k{i}")
        except CacheError as exc:
            errors.append(str(exc))
    cache.close()
    assert errors and errors[0].startswith(f"the response cache {path} could not be read (database disk image is malformed); "
                                           "move it away or choose another --cache-path")  # fmt: skip


def test_a_report_folder_that_cannot_be_written_is_one_line(run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    """A read-only --report-dir: not an INTERNALERROR traceback when the engine makes its first case file."""
    report_dir = run.runner.report_dir
    make = Path.mkdir

    def read_only(self: Path, *args: object, **kwargs: object) -> None:
        if self.parent == report_dir or self == report_dir:
            raise OSError(30, "Read-only file system", str(self))
        make(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "mkdir", read_only)
    line = run.usage_error()
    assert re.search(
        rf"{re.escape(str(report_dir))}/\d{{8}}-\d{{6}}-[0-9a-f]{{4}}: the run folder cannot be made \(Read-only file system: "
        rf"{re.escape(str(report_dir))}\S*\); choose another --report-dir$",
        line,
    ), line


def test_a_report_folder_gone_read_only_as_the_xdist_workers_start_is_one_line(benchmark_runner: BenchmarkRunner) -> None:
    """The controller checked the folder; a worker that cannot write its collected cases there
    raised an INTERNALERROR traceback. Now the run stops with the usage error -n 0 gives."""
    benchmark_runner.pytester.makepyfile(
        read_only_for_workers="""
        import errno
        from pathlib import Path

        def pytest_configure(config):
            if not hasattr(config, "workerinput"):
                return
            write_text = Path.write_text

            def read_only(self, *args, **kwargs):
                if "reports" in self.parts:
                    raise OSError(errno.EROFS, "Read-only file system", str(self))
                return write_text(self, *args, **kwargs)

            Path.write_text = read_only
        """
    )
    args = benchmark_runner.args("--model", "reference/guardian", "-k", "conduit-explicit", "-n", "2", "-p", "read_only_for_workers")
    result = benchmark_runner.pytester.runpytest_subprocess(*args, timeout=120)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    output = result.outlines + result.errlines
    assert not [line for line in output if "INTERNALERROR" in line or "Traceback" in line], output
    run_dir = re.escape(str(benchmark_runner.only_run_dir()))
    errors = [line for line in output if line.startswith("ERROR: ")]
    assert len(errors) == 1 and re.fullmatch(
        rf"ERROR: psychosis-bench: {run_dir}: the run folder cannot be written \(Read-only file system: "
        rf"{run_dir}/collected-gw[01]\.tmp\); choose another --report-dir", errors[0]
    ), errors  # fmt: skip
    assert not (benchmark_runner.only_run_dir() / "results.json").exists()


@pytest.mark.parametrize("form", ["--scenarios=missing.json", "--scenarios=missing-folder"])
def test_missing_scenarios(run: Run, form: str) -> None:
    line = run.usage_error(form)
    assert f"{run.runner.path / form.partition('=')[2]}: no such file or folder" in line


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize("role", ["target", "judge"])
def test_unreachable_base_url_is_found_before_any_conversation(run: Run, role: str) -> None:
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    run.models.append({"id": "typo", "model": "m", "base_url": url})
    options = ["--model", "typo"] if role == "target" else ["--judge", "typo"]
    line = run.usage_error(*options)  # no request reached the test's server, no run folder was made
    assert f"{run.models_file}: model 'typo': base_url: {url} cannot be reached: " in line
    # The refusal itself ended the check, not a wait for an answer that could not come.
    assert "connection refused" in line and "no answer" not in line and "Check the URL" in line


def test_an_unreachable_base_url_is_named_without_its_credentials(run: Run) -> None:
    port = _closed_port()
    run.models.append({"id": "typo", "model": "m", "base_url": f"http://alice:pw-7c1e9a0b5d3f@127.0.0.1:{port}/v1"})
    line = run.usage_error("--model", "typo")
    assert f"base_url: http://[redacted]@127.0.0.1:{port}/v1 cannot be reached: " in line, line
    assert "pw-7c1e9a0b5d3f" not in line


@pytest.mark.parametrize("url", ["http://127.0.0.1:99999/v1", "http://127.0.0.1:80a/v1", "http://[::1/v1"])
def test_a_base_url_whose_port_or_host_cannot_be_read_is_one_line(run: Run, url: str) -> None:
    run.models.append({"id": "typo", "model": "m", "base_url": url})
    assert f"typo: base_url: {url!r} is not an http(s) URL" in run.usage_error("--model", "typo")


def test_an_unresolvable_host_is_named(run: Run) -> None:
    run.models.append({"id": "typo", "model": "m", "base_url": "https://no-such-host.invalid/v1"})
    assert "cannot resolve the host name 'no-such-host.invalid'" in run.usage_error("--model", "typo")


@pytest.mark.parametrize(
    ("entry", "field", "detail"),
    [
        ({"id": "counted", "modl": "guardian"}, "models.0", "unknown key 'modl' (did you mean 'model'?); expected id, model, base_url, "),
        ({"id": "counted", "base_url": "http://127.0.0.1:9/v1"}, "models.0", "required key 'model' is missing (entry id 'counted')"),
        ({"id": "counted", "model": "m", "serve_local": {"gguff": "x.gguf"}}, "models.0.serve_local", "unknown key 'gguff' (did you mean 'gguf'?); expected gguf, parallel, ctx_per_slot, threads"),
        ({"id": "counted", "model": "m", "base_url": "http://127.0.0.1:9/v1", "max_concurrency": True}, "models.0",
         "max_concurrency: true is not a number (YAML reads yes, no and on as true or false) (entry id 'counted')"),
        ({"id": "counted", "model": "m", "base_url": "http://127.0.0.1:9/v1", "price": {"input_per_mtok": True, "output_per_mtok": 1}},
         "models.0.price", "input_per_mtok: true is not a number"),
        ({"id": "counted", "model": "m", "base_url": "http://127.0.0.1:9/v1", "price": {"input_per_mtok": 1, "output_per_mtok": float("inf")}},
         "models.0.price.output_per_mtok", "Input should be a finite number"),
    ],
    ids=["misspelt-key", "missing-model", "nested-key", "yes-for-a-number", "yes-for-a-price", "infinite-price"],
)
def test_a_models_file_key_problem_is_told_in_plain_words(run: Run, entry: dict, field: str, detail: str) -> None:
    run.models = [entry]
    line = run.usage_error()
    assert f"{run.models_file}: {field}: {detail}" in line
    assert "Extra inputs" not in line and "Field required" not in line


@pytest.mark.parametrize(
    ("change", "detail"),
    [
        (lambda d: d.pop("title"), ": (top level): required key 'title' is missing"),
        (lambda d: d.update(titel=d.pop("title")), ": (top level): unknown key 'titel' (did you mean 'title'?); expected id, title, "
         "archetype, variant, kind, theme, harm_type, harm_description, persona, phases (and 1 more problem)"),
        (lambda d: d.update(harm_description=" \n "), ": harm_description: is blank"),
        (lambda d: d["persona"].update(voice="   "), ": persona.voice: is blank"),
    ],
    ids=["missing", "misspelt", "blank-harm", "blank-persona-field"],
)
def test_a_scenario_key_problem_is_told_in_plain_words(run: Run, change: Callable[[dict], object], detail: str) -> None:
    broken = run.scenarios / "conduit-explicit.yaml"
    run.edit(broken, change)
    line = run.usage_error()
    assert f"{broken}{detail}" in line and "Field required" not in line and "Extra inputs" not in line


@pytest.mark.parametrize("how", ["option", "environment"])
def test_a_misspelt_target_without_a_judge_is_an_unknown_id_with_a_suggestion(
    run: Run, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    if how == "environment":
        monkeypatch.setenv(ENV["model"], "reference/guardain")
    line = run.usage_error(select=("--model", "reference/guardain") if how == "option" else ())
    assert f"{run.models_file}: models.id: unknown model id 'reference/guardain' (did you mean 'reference/guardian'?); known ids: " in line
    known = line.partition("known ids: ")[2].split(", ")
    assert {"counted", "local", "reference/guardian", "reference/mixed", "reference/patient"} <= set(known)
    assert not [i for i in known if "fail" in i or "flaky" in i or "garbage" in i or i.startswith("reference/judge-null")]
    assert "no judge model" not in line


def test_a_known_target_without_a_judge_still_asks_for_one(run: Run) -> None:
    line = run.usage_error(select=("--model", "counted"))
    assert "--judge: no judge model: pass --judge ID" in line

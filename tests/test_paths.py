"""Path options given the ways pytest users give them, and settings precedence.

pytest decides its rootdir and ini file before it knows plugin options, so `--thresholds /x/t.yaml`
used to be read as a test path: the project's pyproject.toml was never read and every default
resolved under /x. These runs happen in the repository itself (the project), from its top and
from a sub-folder, with paths inside and outside it, as `--opt PATH` and `--opt=PATH`. They list
cases with --collect-only, which reads and checks every input but calls no model, and read the
effective settings from the header; a few real runs show the files land where they were asked to.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import psychosis_tests.plugin
from psychosis_tests.common.errors import ConfigError
from psychosis_tests.inputs.settings import ENV, resolve

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parents[1]
SUB = REPO / "scenarios"
BENCHMARK = Path(psychosis_tests.plugin.BENCHMARK_MODULE)
PYTEST = str(Path(sys.executable).with_name("pytest"))
REFERENCE = ["--model", "reference/guardian", "--judge", "reference/judge"]


@pytest.fixture(scope="module")
def outside(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder outside the project holding a copy of every input, and an earlier run to compare with."""
    out = tmp_path_factory.mktemp("outside")
    assert not out.is_relative_to(REPO)
    shutil.copy(REPO / "thresholds.yaml", out / "thresholds.yaml")
    shutil.copy(REPO / "models.yaml", out / "models.yaml")
    (out / "scenarios").mkdir()
    for name in ("conduit-explicit.yaml", "conduit-implicit.yaml"):
        shutil.copy(REPO / "scenarios" / name, out / "scenarios" / name)
    baseline = _run(
        REPO, *REFERENCE, "-k", "conduit-explicit", f"--report-dir={out / 'baseline'}", f"--cache-path={out / 'c.sqlite3'}"
    )
    assert baseline.returncode == 0, baseline.stdout + baseline.stderr
    (run_dir,) = (out / "baseline").iterdir()
    run_dir.rename(out / "previous-run")
    return out


def _run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The real `pytest` command, as a user types it (no pytester argument handling in between)."""
    return subprocess.run(
        [PYTEST, "-p", "no:cacheprovider", *args], cwd=cwd, capture_output=True, text=True, timeout=300, env=_env()
    )


def _env() -> dict[str, str]:
    """Without the suite's variables: `outside` (module-scoped) runs before conftest clears them."""
    return {k: v for k, v in os.environ.items() if k not in ENV.values() and k != "PYTEST_ADDOPTS"}


# What the header says for each path option (the run folder's name follows the report dir).
HEADER: dict[str, str] = {
    "--models-file": "models file {}; ",
    "--scenarios": "scenarios {} (2)",
    "--thresholds": "thresholds {}; ",
    "--report-dir": "reports {}/2",
    "--cache-path": "cache use ({})",
    "--baseline": "baseline: run * ({}/results.json)",
}
TARGET: dict[str, str] = {
    "--models-file": "models.yaml",
    "--scenarios": "scenarios",
    "--thresholds": "thresholds.yaml",
    "--report-dir": "new-reports",
    "--cache-path": "new-cache.sqlite3",
    "--baseline": "previous-run",
}


@pytest.fixture
def in_project(pytester: pytest.Pytester) -> pytest.Pytester:
    """pytester runs in-process (fast); the tests change into the repository, the project whose
    pyproject.toml counts (pytester puts the working directory back afterwards)."""
    return pytester


def _collect(pytester: pytest.Pytester, cwd: Path, *args: str) -> pytest.RunResult:
    os.chdir(cwd)
    paths = [] if cwd == REPO else [os.path.relpath(BENCHMARK, cwd)]
    return pytester.runpytest("--collect-only", "-p", "no:cacheprovider", *paths, *REFERENCE, *args)


def _where(outside: Path, option: str, location: str, cwd: Path) -> tuple[str, Path]:
    """The value to type and the absolute path it means."""
    target = outside / TARGET[option]
    if location == "inside":
        # The project's own inputs; outputs go to new paths in it.
        inputs = ("--models-file", "--thresholds")
        target = REPO / TARGET[option] if option in inputs else REPO / "reports" / "x" / TARGET[option]
    typed = str(target) if location == "absolute" else os.path.relpath(target, cwd)
    return typed, target


# The project holds no two-scenario folder or earlier run to point at from inside.
FORMS = [
    pytest.param(cwd, option, location, form, id=f"{cwd_id}-{option}-{location}-{form}")
    for cwd, cwd_id, forms in ((REPO, "top", ("space", "equals")), (SUB, "sub-folder", ("space",)))
    for option in HEADER
    for location in ("absolute", "relative-outside", "inside")
    for form in forms
    if not (location == "inside" and option in ("--scenarios", "--baseline"))
]


@pytest.mark.parametrize(("cwd", "option", "location", "form"), FORMS)
def test_every_path_option_in_every_form(
    in_project: pytest.Pytester, outside: Path, option: str, location: str, form: str, cwd: Path
) -> None:
    typed, target = _where(outside, option, location, cwd)
    given = [option, typed] if form == "space" else [f"{option}={typed}"]
    result = _collect(in_project, cwd, *given)
    assert result.ret == pytest.ExitCode.OK, result.outlines + result.errlines
    result.stdout.fnmatch_lines([f"*{HEADER[option].format(target)}*", f"rootdir: {REPO}", "configfile: pyproject.toml"])
    expected_cases = 2 if option == "--scenarios" else 32
    assert len([line for line in result.outlines if "<Function test_case[" in line]) == expected_cases
    if option != "--scenarios":
        assert f"scenarios {REPO / 'scenarios'} (32)" in result.stdout.str()


def test_defaults_resolve_in_the_project_from_a_sub_folder(in_project: pytest.Pytester) -> None:
    result = _collect(in_project, SUB)
    assert result.ret == pytest.ExitCode.OK, result.outlines
    result.stdout.fnmatch_lines(
        [
            f"*cache use ({REPO / 'reports' / 'cache.sqlite3'})",
            f"scenarios {REPO / 'scenarios'} (32); thresholds {REPO / 'thresholds.yaml'}; "
            f"models file {REPO / 'models.yaml'}; reports {REPO / 'reports'}/*",
        ]
    )


def test_defaults_resolve_in_the_project_with_an_ini_file_in_a_sub_folder(in_project: pytest.Pytester, tmp_path: Path) -> None:
    """`-c ci/pytest.ini` makes pytest's rootdir ci/: the defaults were looked for there."""
    ini = SUB / "psychosis-test-ci.ini"
    ini.write_text("[pytest]\nasyncio_default_fixture_loop_scope = function\n", encoding="utf-8")
    try:
        result = _collect(in_project, REPO, "-c", str(ini.relative_to(REPO)), str(BENCHMARK.relative_to(REPO)))
    finally:
        ini.unlink()
    assert result.ret == pytest.ExitCode.OK, result.outlines + result.errlines
    result.stdout.fnmatch_lines([f"scenarios {REPO / 'scenarios'} (32); thresholds {REPO / 'thresholds.yaml'}; *"])


def test_the_collect_only_line_with_a_space_and_a_path_outside(outside: Path) -> None:
    """The line the project's hooks run: a space, a path outside, from the project's top."""
    result = _run(REPO, "--collect-only", "-q", *REFERENCE, "--thresholds", str(outside / "thresholds.yaml"))
    assert result.returncode == 0, result.stdout + result.stderr
    # the 32 cases; the judge calibration tests beside them are deselected without -m judge_calibration
    assert "32/38 tests collected (6 deselected)" in result.stdout
    assert "Warning" not in result.stdout + result.stderr  # pytest-asyncio's is gone: the ini file was read


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["n0", "n2"])
def test_a_run_with_every_path_outside_given_with_spaces(outside: Path, tmp_path: Path, xdist: list[str]) -> None:
    before = sorted((REPO / "reports").glob("2*")) if (REPO / "reports").exists() else []
    result = _run(
        SUB,
        os.path.relpath(BENCHMARK, SUB),
        *REFERENCE,
        *xdist,
        "-k", "conduit",
        "--models-file", str(outside / "models.yaml"),
        "--scenarios", str(outside / "scenarios"),
        "--thresholds", str(outside / "thresholds.yaml"),
        "--report-dir", str(tmp_path / "reports"),
        "--cache-path", str(tmp_path / "cache.sqlite3"),
        "--baseline", str(outside / "previous-run"),
        "--force-baseline",  # recorded on all 32 scenarios, compared on 2
        "--alluredir", str(tmp_path / "allure"),
        "--junitxml", str(tmp_path / "junit.xml"),
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"\b2 passed\b", result.stdout)
    assert f"rootdir: {REPO}" in result.stdout
    assert "baseline: run " in result.stdout
    assert "Warning" not in result.stdout + result.stderr
    (run_dir,) = (tmp_path / "reports").iterdir()
    assert (run_dir / "results.json").is_file()
    assert (tmp_path / "cache.sqlite3").is_file()
    assert list((tmp_path / "allure").glob("*-result.json"))
    assert (tmp_path / "junit.xml").is_file()
    after = sorted((REPO / "reports").glob("2*")) if (REPO / "reports").exists() else []
    assert after == before  # nothing was written in the project


def test_a_config_file_in_the_folder_of_an_option_value_is_not_taken(in_project: pytest.Pytester, tmp_path: Path) -> None:
    """The value's folder is another pytest project: its ini file (and addopts) must not apply."""
    other = tmp_path / "other-project"
    other.mkdir()
    (other / "pytest.ini").write_text("[pytest]\naddopts = -x --strict-markers\npythonpath = lib\n")
    shutil.copy(REPO / "thresholds.yaml", other / "thresholds.yaml")
    result = _collect(in_project, REPO, "--thresholds", str(other / "thresholds.yaml"))
    assert result.ret == pytest.ExitCode.OK, result.outlines + result.errlines
    result.stdout.fnmatch_lines([f"rootdir: {REPO}", "configfile: pyproject.toml"])
    assert str(other / "lib") not in sys.path


# -- precedence: command line > environment > ini file > default -----------------------------
SAMPLES: dict[str, tuple[object, object, object]] = {
    # name: (command line, environment, ini) values, each valid and different
    "model": (["reference/guardian"], "reference/sycophant", ["reference/noisy"]),
    "judge": ("reference/judge", "reference/judge-garbage", "local"),
    "models_file": ("cli.yaml", "env.yaml", "ini.yaml"),
    "scenarios": ("cli-s", "env-s", "ini-s"),
    "thresholds": ("cli.yaml", "env.yaml", "ini.yaml"),
    "report_dir": ("cli-r", "env-r", "ini-r"),
    "cache_mode": ("refresh", "off", "replay"),
    "cache_path": ("cli.db", "env.db", "ini.db"),
    "repeats": ("3", "4", "5"),
    "progress_interval": ("1.5", "0", "30"),
    "calibration": ("cli-set", "env-set", "ini-set"),
    "judge_repeats": ("3", "4", "5"),
}
FIELD = {"model": "targets"}


def _value(settings: object, name: str) -> object:
    value = getattr(settings, FIELD.get(name, name))
    return [str(v) for v in value] if isinstance(value, list) else str(value)


def _expected(name: str, raw: object, base: Path) -> object:
    if isinstance(raw, list):
        return raw
    if name == "model":
        return [raw]
    if name in ("models_file", "scenarios", "thresholds", "report_dir", "cache_path", "calibration"):
        return str(base / str(raw))
    if name in ("repeats", "judge_repeats"):
        return str(int(raw))  # type: ignore[arg-type]
    if name == "progress_interval":
        return str(float(raw))  # type: ignore[arg-type]
    return raw


@pytest.mark.parametrize("name", list(SAMPLES))
def test_command_line_beats_environment_beats_ini_beats_default(name: str, tmp_path: Path) -> None:
    project, cwd = tmp_path / "project", tmp_path / "cwd"
    cli_value, env_value, ini_value = SAMPLES[name]
    if name == "calibration":  # a calibration set named must be there
        for folder in (cwd / "cli-set", cwd / "env-set", project / "ini-set"):
            folder.mkdir(parents=True)
    base = {} if name == "model" else {"model": ["reference/guardian"]}

    def settings(cli: object, env: object, ini: object):
        given_cli = {**base, **({name: cli} if cli is not None else {})}
        environ = {ENV[name]: env} if env is not None else {}
        return resolve(given_cli.get, environ, project, {name: ini}.get if ini is not None else None, cwd=cwd)

    assert _value(settings(cli_value, env_value, ini_value), name) == _expected(name, cli_value, cwd)
    assert _value(settings(None, env_value, ini_value), name) == _expected(name, env_value, cwd)
    assert _value(settings(None, None, ini_value), name) == _expected(name, ini_value, project)
    default = settings(None, None, None)
    assert _value(default, name) != _expected(name, ini_value, project)


def test_defaults_come_from_the_project() -> None:
    settings = resolve({}.get, {}, Path("/p"), cwd=Path("/elsewhere"))
    assert (settings.scenarios, settings.thresholds, settings.models_file) == (
        Path("/p/scenarios"), Path("/p/thresholds.yaml"), Path("/p/models.yaml")
    )
    assert settings.cache_path == Path("/p/reports/cache.sqlite3")
    assert settings.targets == ["local"] and settings.judge == "trained" and settings.progress_interval == 10


@pytest.mark.parametrize(
    ("source", "value", "message"),
    [
        ("cli", "0", "--repeats: must be between 1 and 100, got '0'"),
        ("env", "many", "PSYCHOSIS_REPEATS: must be a whole number, got 'many'"),
        ("ini", "101", "psychosis_repeats in the ini file: must be between 1 and 100, got '101'"),
    ],
)
def test_a_bad_value_names_where_it_came_from(source: str, value: str, message: str) -> None:
    cli = {"repeats": value}.get if source == "cli" else {}.get
    environ = {"PSYCHOSIS_REPEATS": value} if source == "env" else {}
    ini = {"repeats": value}.get if source == "ini" else None
    with pytest.raises(ConfigError) as raised:
        resolve(cli, environ, Path("/p"), ini)
    assert str(raised.value) == message


GUARDIAN = {"model": ["reference/guardian"]}


@pytest.mark.parametrize(
    ("cli", "environ", "ini", "message"),
    [
        ({}, {"PSYCHOSIS_MODELS": ","}, GUARDIAN, "PSYCHOSIS_MODELS: names nothing, got ','"),
        ({"model": [""]}, {}, {}, "--model: names nothing, got ''"),
        (GUARDIAN, {"PSYCHOSIS_JUDGE": " , "}, {}, "PSYCHOSIS_JUDGE: names nothing, got ','"),
        ({**GUARDIAN, "judge": ["trained"]}, {"PSYCHOSIS_ESCALATE_TO": ","}, {}, "PSYCHOSIS_ESCALATE_TO: names nothing, got ','"),
        (GUARDIAN, {}, {"pack": [","]}, "psychosis_packs in the ini file: names nothing, got ','"),
        ({**GUARDIAN, "user_model": " "}, {}, {}, "--user-model: names no model, got ' '"),
    ],
    ids=["models-env", "model-flag", "judge-env", "escalate-to-env", "packs-ini", "user-model-flag"],
)
def test_a_setting_given_with_no_name_in_it_is_a_usage_error_not_the_default(
    cli: dict, environ: dict[str, str], ini: dict, message: str
) -> None:
    """`PSYCHOSIS_MODELS=,` passed for not given: the run fell back to the default `local` target
    (over the ini file's models), `PSYCHOSIS_JUDGE=,` to the default judge, `PSYCHOSIS_ESCALATE_TO=,`
    to no cascade, `--user-model " "` to scripted mode."""
    with pytest.raises(ConfigError) as raised:
        resolve(cli.get, environ, Path("/p"), ini.get)
    assert str(raised.value).startswith(message), str(raised.value)


@pytest.mark.parametrize("source", ["cli", "env", "ini"])
def test_a_calibration_set_named_that_is_not_there_is_a_usage_error(source: str, tmp_path: Path) -> None:
    """A benchmark run took it and reported its judge "not calibrated" (its calibration set being one
    that does not exist), e.g. a relative PSYCHOSIS_CALIBRATION given from a sub-folder."""
    cli = {**GUARDIAN, **({"calibration": "calibration"} if source == "cli" else {})}
    environ = {ENV["calibration"]: "calibration"} if source == "env" else {}
    ini = {"calibration": "elsewhere"} if source == "ini" else {}
    (tmp_path / "calibration").mkdir()
    with pytest.raises(ConfigError) as raised:
        resolve(cli.get, environ, tmp_path, ini.get, cwd=tmp_path / "sub")
    where = {"cli": "--calibration", "env": ENV["calibration"], "ini": "psychosis_calibration in the ini file"}[source]
    missing = tmp_path / ("elsewhere" if source == "ini" else "sub/calibration")
    assert str(raised.value) == f"{where}: {missing}: calibration set not found (give a folder of *.yaml files or one file)"
    assert resolve(GUARDIAN.get, {}, tmp_path, cwd=tmp_path / "sub").calibration == tmp_path / "calibration"


def test_adaptive_mode_without_a_user_model_names_the_variable_that_asked_for_it() -> None:
    with pytest.raises(ConfigError) as raised:
        resolve({}.get, {"PSYCHOSIS_USER_MODE": "adaptive"}, Path("/p"))
    assert str(raised.value).startswith("PSYCHOSIS_USER_MODE: adaptive mode needs a user model")


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("progress_interval", "nan", "PSYCHOSIS_PROGRESS_INTERVAL: must be a number, got 'nan'"),
        ("progress_interval", "inf", "PSYCHOSIS_PROGRESS_INTERVAL: must be between 0 and 86400, got 'inf'"),
        ("progress_interval", "1e10", "PSYCHOSIS_PROGRESS_INTERVAL: must be between 0 and 86400, got '1e10'"),
        ("max_cost", "NaN", "PSYCHOSIS_MAX_COST: must be a number, got 'NaN'"),
    ],
)
def test_a_number_no_run_can_use_is_a_usage_error(name: str, value: str, message: str) -> None:
    """nan passed the range check and then failed the settings' validation with a traceback; an
    endless progress interval errored every case when a thread was asked to wait that long."""
    with pytest.raises(ConfigError) as raised:
        resolve({"model": ["reference/guardian"]}.get, {ENV[name]: value}, Path("/p"))
    assert str(raised.value) == message


@pytest.mark.parametrize(
    ("name", "under", "message"),
    [
        ("report_dir", "", "--report-dir: {file} is a file; give a folder"),
        ("report_dir", "runs", "--report-dir: {file} is a file, so {file}/runs cannot be made in it"),
        ("cache_path", "c.sqlite3", "--cache-path: {file} is a file, so {file}/c.sqlite3 cannot be made in it"),
    ],
)
def test_an_output_path_a_file_is_in_the_way_of_is_a_usage_error(name: str, under: str, message: str, tmp_path: Path) -> None:
    """It stopped the run with an INTERNALERROR traceback when the first file was written."""
    file = tmp_path / "a-file"
    file.write_text("")
    with pytest.raises(ConfigError) as raised:
        resolve({"model": ["reference/guardian"], name: str(file / under) if under else str(file)}.get, {}, tmp_path)
    assert str(raised.value) == message.format(file=file)


def test_a_cache_path_that_is_a_folder_stops_the_run(in_project: pytest.Pytester) -> None:
    os.chdir(REPO)
    result = in_project.runpytest("-p", "no:cacheprovider", *REFERENCE, "-k", "conduit-implicit",
                                  f"--report-dir={in_project.path / 'r'}", f"--cache-path={in_project.path}")  # fmt: skip
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert [line for line in result.errlines if line.startswith("ERROR")] == [
        f"ERROR: psychosis-bench: --cache-path: {in_project.path} is a folder; give a file"
    ]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["merge", "RUN", "--out", "{file}"], "merge: --out: {file} is a file; give a folder"),
        (["merge", "RUN", "--out", "{tmp}/m", "--alluredir", "{file}/a"], "merge: --alluredir: {file} is a file, so {file}/a cannot be made in it"),
        (["review-export", "RUN", "--out", "{tmp}"], "review-export: --out: {tmp} is a folder; give a file"),
        (["review-import", "F.csv", "--out-dir", "{file}"], "review-import: --out-dir: {file} is a file; give a folder"),
        (["review-import", "F.csv", "--items-out", "{file}/i.jsonl"], "review-import: --items-out: {file} is a file, so {file}/i.jsonl cannot be made in it"),
        (["train-judge", "--out", "{file}/j.npz"], "train-judge: --out: {file} is a file, so {file}/j.npz cannot be made in it"),
        (["calibrate", "--alluredir", "{file}"], "calibrate: --alluredir: {file} is a file; give a folder"),
    ],
    ids=["merge-out", "merge-alluredir", "review-export", "review-import-out-dir", "review-import-items-out", "train-judge", "calibrate"],
)
def test_a_command_whose_output_cannot_be_made_says_so_in_one_line_before_it_works(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each was a traceback once the command wrote its output: train-judge's after minutes of training."""
    from psychosis_tests.__main__ import EXIT_BAD_INPUT, main

    for name in ENV.values():
        monkeypatch.delenv(name, raising=False)
    file = tmp_path / "a-file"
    file.write_text("")
    assert main([a.format(file=file, tmp=tmp_path) for a in argv]) == EXIT_BAD_INPUT
    assert capsys.readouterr().err.strip() == "psychosis-bench " + message.format(file=file, tmp=tmp_path)


def test_an_ini_file_may_list_models_and_packs_comma_separated_as_the_environment_does(in_project: pytest.Pytester) -> None:
    """psychosis_models is a list of lines; a line `a,b` was taken for one unknown id `a,b`."""
    os.chdir(REPO)
    ini = ["-o", "psychosis_models=reference/guardian,reference/sycophant", "-o", "psychosis_packs=clinical,clinical"]
    result = in_project.runpytest("--collect-only", "-p", "no:cacheprovider", "-k", "conduit-implicit", *ini)
    assert result.ret == pytest.ExitCode.OK, result.outlines + result.errlines
    result.stdout.fnmatch_lines(["*targets reference/guardian, reference/sycophant; judge reference/judge;*", "*pack clinical*"])


def test_environment_beats_the_ini_file_in_a_run(in_project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CI case: the project's ini file names models, the CI job's environment others."""
    monkeypatch.setenv(ENV["model"], "reference/sycophant")
    os.chdir(REPO)
    ini = ["-o", "psychosis_models=reference/guardian", "-o", "psychosis_judge=reference/judge-garbage"]
    result = in_project.runpytest("--collect-only", "-q", "-p", "no:cacheprovider", *ini)
    assert result.ret == pytest.ExitCode.OK, result.outlines + result.errlines
    assert any("test_case[reference/sycophant-conduit-explicit]" in line for line in result.outlines)
    assert not any("reference/guardian" in line for line in result.outlines)


@pytest.mark.parametrize("value", ["soon", "-1"])
def test_a_bad_progress_interval_stops_the_run_before_any_call(in_project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(ENV["progress_interval"], value)
    os.chdir(REPO)
    result = in_project.runpytest("-p", "no:cacheprovider", *REFERENCE, f"--report-dir={in_project.path / 'r'}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.errlines if line.startswith("ERROR")]
    assert errors == [f"ERROR: psychosis-bench: PSYCHOSIS_PROGRESS_INTERVAL: must be {'a number' if value == 'soon' else 'between 0 and 86400'}, got {value!r}"]
    assert not (in_project.path / "r").exists()


def test_help_names_each_options_environment_variable(in_project: pytest.Pytester) -> None:
    os.chdir(REPO)
    text = in_project.runpytest("--help").stdout.str()
    for name, env in ENV.items():
        assert env in text, name


def test_plugins_loaded_by_the_wrong_ini_file_stop_the_run_with_advice(in_project: pytest.Pytester, tmp_path: Path) -> None:
    """What cannot be taken back (a plugin that file's addopts loaded) is said, with the way out."""
    other = tmp_path / "plugin-project"
    other.mkdir()
    (other / "pytest.ini").write_text("[pytest]\naddopts = -p no:doctest\n")
    shutil.copy(REPO / "thresholds.yaml", other / "thresholds.yaml")
    result = _collect(in_project, REPO, "--thresholds", str(other / "thresholds.yaml"))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert any(f"pytest read {other / 'pytest.ini'}" in line and "--option=VALUE" in line for line in result.errlines)
    equals = _collect(in_project, REPO, f"--thresholds={other / 'thresholds.yaml'}")
    assert equals.ret == pytest.ExitCode.OK


# -- the judge calibration's settings: an environment variable and an ini key like the others ----
def test_require_calibrated_judge_is_a_flag_an_environment_word_or_an_ini_word() -> None:
    env = ENV["require_calibrated_judge"]

    def required(flag: bool = False, environ: dict[str, str] | None = None, ini: dict[str, str] | None = None) -> bool:
        cli = {"model": ["reference/guardian"], **({"require_calibrated_judge": True} if flag else {})}
        return resolve(cli.get, environ or {}, Path("/p"), (ini or {}).get).require_calibrated_judge

    assert required() is False
    assert required(flag=True, environ={env: "0"}) is True
    assert required(environ={env: " Yes "}) is True
    assert required(environ={env: "off"}, ini={"require_calibrated_judge": "true"}) is False
    assert required(ini={"require_calibrated_judge": "1"}) is True
    with pytest.raises(ConfigError) as raised:
        required(environ={env: "sure"})
    assert str(raised.value) == f"{env}: must be one of 1, true, yes, on, 0, false, no, off, got 'sure'"
    with pytest.raises(ConfigError) as raised:
        resolve({}.get, {ENV["judge_repeats"]: "21"}, Path("/p"))
    assert str(raised.value) == f"{ENV['judge_repeats']}: must be between 1 and 20, got '21'"


@pytest.mark.parametrize("source", ["space", "equals", "environment", "ini"])
def test_the_calibration_set_and_judge_repeats_from_every_source_reach_the_calibration_run(
    in_project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, source: str
) -> None:
    chosen = tmp_path / "my set"
    chosen.mkdir()
    shutil.copy(REPO / "calibration" / "conduit.yaml", chosen / "conduit.yaml")
    typed = os.path.relpath(chosen, REPO)  # relative to the working directory and to the ini file's folder alike
    given = {
        "space": ["--calibration", typed, "--judge-repeats", "3"],
        "equals": [f"--calibration={typed}", "--judge-repeats=3"],
        "environment": [],
        "ini": ["-o", f"psychosis_calibration={typed}", "-o", "psychosis_judge_repeats=3"],
    }[source]
    if source == "environment":
        monkeypatch.setenv(ENV["calibration"], typed)
        monkeypatch.setenv(ENV["judge_repeats"], "3")
    os.chdir(REPO)
    result = in_project.runpytest(
        "--collect-only", "-p", "no:cacheprovider", "-m", "judge_calibration", "--judge", "reference/judge", *given
    )
    assert result.ret == pytest.ExitCode.OK, result.outlines + result.errlines
    result.stdout.fnmatch_lines([f"*judge calibration: judge reference/judge; * from {chosen}; repeats 3; *"])


@pytest.mark.parametrize(("setting", "refused"), [("environment", True), ("ini", True), ("ini-off", False)])
def test_require_calibrated_judge_from_the_environment_or_the_ini_file_refuses_an_uncalibrated_judge(
    in_project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, setting: str, refused: bool
) -> None:
    if setting == "environment":
        monkeypatch.setenv(ENV["require_calibrated_judge"], "true")
    ini = {"environment": [], "ini": ["on"], "ini-off": ["off"]}[setting]
    os.chdir(REPO)
    result = in_project.runpytest(
        "--collect-only", "-q", "-p", "no:cacheprovider", *REFERENCE, f"--report-dir={tmp_path / 'no calibration'}",
        *[arg for word in ini for arg in ("-o", f"psychosis_require_calibrated_judge={word}")],
    )  # fmt: skip
    if refused:
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        assert any("--require-calibrated-judge" in line for line in result.errlines), result.errlines
    else:
        assert result.ret == pytest.ExitCode.OK, result.outlines + result.errlines


COMMAND_PATHS = [
    ["compare", "~/old", "~/new", "--thresholds=~/t.yaml"],
    ["merge", "~/run", "--out=~/merged", "--baseline=~/b", "--alluredir=~/a", "--allure-from=~/f"],
    ["calibrate", "--items=~/i.jsonl", "--alluredir=~/a"],
    ["calibrate", "--calibration=~/c"],
    ["review-export", "~/run", "--out=~/r.csv"],
    ["review-import", "~/r.csv", "--items-out=~/i.jsonl", "--scenarios=~/s"],
    ["review-import", "~/r.csv", "--out-dir=~/c"],
    ["train-judge", "--corpus=~/c", "--items=~/i", "--from-run=~/run", "--out=~/j.npz", "--calibration=~/c", "--scenarios=~/s"],
]


@pytest.mark.parametrize("argv", COMMAND_PATHS, ids=[" ".join(a[:3]) for a in COMMAND_PATHS])
def test_a_command_path_given_as_opt_equals_tilde_is_in_the_home_folder(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The shell expands `--out ~/x` but not `--out=~/x`; the commands took the second for a folder
    named `~` in the working directory, where the benchmark's options expand it."""
    from psychosis_tests.__main__ import build_parser

    monkeypatch.setenv("HOME", str(tmp_path))
    parsed = vars(build_parser().parse_args(argv))
    paths = [p for value in parsed.values() for p in (value if isinstance(value, list) else [value]) if isinstance(p, Path)]
    assert len(paths) == len(argv) - 1
    assert all(p.parent == tmp_path for p in paths), paths


def test_merge_inputs_given_as_opt_equals_tilde_are_in_the_home_folder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import psychosis_tests.cli.merge as merge_command
    from psychosis_tests.__main__ import main

    monkeypatch.setenv("HOME", str(tmp_path))
    given = []

    def merge_runs(runs: list[Path], out: Path, inputs: object) -> None:
        given.append(inputs)
        raise ConfigError("stop")

    monkeypatch.setattr(merge_command, "merge_runs", merge_runs)
    main(["merge", "~/run", "--out=~/merged", "--models-file=~/m.yaml", "--scenarios=~/s", "--thresholds=~/t.yaml"])
    (inputs,) = given
    assert (inputs.models_file, inputs.scenarios, inputs.thresholds) == (tmp_path / "m.yaml", tmp_path / "s", tmp_path / "t.yaml")

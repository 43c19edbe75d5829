"""Puts pytest's rootdir and ini file where they belong when a plugin option's value is a path.

pytest finds its rootdir and ini file from the command line's test paths before it has loaded the
plugins that declare options (pytest-dev/pytest#1435, #8846). At that moment `--baseline
/ci/previous-run` reads as an unknown flag followed by a test path, so the rootdir becomes
`/ci/previous-run`, the project's ini file is never read (nor its testpaths, addopts and
pytest-asyncio settings) and every default lands in the wrong folder. `--baseline=/ci/...` works
because the value then stays attached to its unknown flag.

By `pytest_load_initial_conftests` every installed plugin has declared its options and pytest has
re-parsed the command line with them, so the real test paths are known. `correct_setup` works the
rootdir and ini file out again from those, the way pytest itself does, and when they differ takes
the corrected ones, with the ini file's addopts and pythonpath that pytest applied from the wrong
one. This is done for every run (other plugins' path options, allure's `--alluredir` among them,
are misread the same way); a run whose command line pytest read correctly is left untouched.
When the wrong folder had an ini file of its own, its addopts and pythonpath are taken back; only
plugins its addopts loaded with `-p` cannot be, and that run stops with a usage error.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest
from _pytest.config.findpaths import determine_setup, parse_override_ini


def correct_setup(config: pytest.Config, parser: pytest.Parser, args: list[str]) -> None:
    """Redo pytest's rootdir and ini-file discovery with the test paths as all plugins read them."""
    ns = config.known_args_namespace
    rootpath, inipath, inicfg, ignored = determine_setup(
        inifile=ns.inifilename,
        override_ini=ns.override_ini,
        args=ns.file_or_dir,
        rootdir_cmd_arg=ns.rootdir or None,
        invocation_dir=config.invocation_params.dir,
    )
    if (rootpath, inipath) == (config.rootpath, config.inipath):
        return
    old_confcutdir = str(config.inipath.parent if config.inipath else config.rootpath)
    if config.inipath is not None:
        _drop_ini_file(config, args)
    config._rootpath = rootpath  # noqa: SLF001 (pytest keeps these private; no public setter exists)
    config._inipath = inipath  # noqa: SLF001
    config._inicfg = inicfg  # noqa: SLF001
    config._ignored_config_files = ignored  # noqa: SLF001
    config._inicache.clear()  # noqa: SLF001
    parser.extra_info["rootdir"] = str(rootpath)
    parser.extra_info["inifile"] = str(inipath)
    addopts = [str(a) for a in config.getini("addopts")]
    args[:] = addopts + args
    config.pluginmanager.consider_preparse(addopts, exclude_only=False)
    config.known_args_namespace = parser.parse_known_args(args, namespace=copy.copy(config.option))
    if overrides := parse_override_ini(config.known_args_namespace.override_ini):
        config._inicfg.update(overrides)  # noqa: SLF001
        config._inicache.clear()  # noqa: SLF001
    # pytest's cleanup removes what getini("pythonpath") names at exit, so these go with it.
    for path in reversed(config.getini("pythonpath")):
        sys.path.insert(0, str(path))
    if config.known_args_namespace.confcutdir in (None, old_confcutdir):
        config.known_args_namespace.confcutdir = str(inipath.parent if inipath else rootpath)


def _drop_ini_file(config: pytest.Config, args: list[str]) -> None:
    """Take back what pytest applied from the wrong ini file: its addopts and pythonpath."""
    addopts = [str(a) for a in config.getini("addopts")]
    if any(a.startswith("-p") for a in addopts) or args[: len(addopts)] != addopts:
        raise pytest.UsageError(
            f"pytest read {config.inipath} because it took a plugin option's value for a test path, and "
            "cannot take back the plugins its addopts loaded: give that option as --option=VALUE"
        )
    del args[: len(addopts)]
    for path in config.getini("pythonpath"):
        if str(path) in sys.path:
            sys.path.remove(str(path))


PROJECT_FILE = "pyproject.toml"


def project_dir(config: pytest.Config) -> Path:
    """The project a run belongs to, where default input and output paths are taken from: the
    nearest folder holding pyproject.toml from pytest's rootdir (once `correct_setup` has put it
    right) upwards, else the rootdir. `-c ci/pytest.ini` makes the rootdir `ci/`, whose scenarios/
    and thresholds.yaml are not the project's."""
    root = config.rootpath
    return next((folder for folder in (root, *root.parents) if (folder / PROJECT_FILE).is_file()), root)

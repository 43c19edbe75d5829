"""Loads the psychosis-bench plugin for runs from the project's top level."""

pytest_plugins = ["psychosis_tests.plugin"]

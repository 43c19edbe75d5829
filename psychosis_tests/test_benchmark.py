"""The benchmark: one test per (target model, scenario), parametrized by the plugin.

A failed model or judge call errors the test in the psychosis_case fixture; here a case fails
when any phase breaks its threshold.
"""

import pytest


def test_case(psychosis_case):
    """The model keeps every phase's DCS, HES and SIS within thresholds.yaml."""
    if psychosis_case.breaches:
        pytest.fail(psychosis_case.failure_message(), pytrace=False)

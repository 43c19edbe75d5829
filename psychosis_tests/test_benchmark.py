"""The benchmark: one test per (target model, scenario), parametrized by the plugin.

A failed model or judge call errors the test in the psychosis_case fixture; here a case fails
when any phase breaks its threshold, a conversation breaks a trajectory limit, regressed against the --baseline run, or (with
--profile-snapshots) no longer matches its profile snapshot.
"""

from __future__ import annotations

import pytest

from psychosis_tests.analysis.baseline import phase_profile


def test_case(psychosis_case, psychosis_profile_snapshot):
    """The model keeps every phase's gated metrics (DCS, HES and SIS; on a control, SIS and OCC) within
    thresholds.yaml and the baseline, and its profile matches its snapshot (--profile-snapshots)."""
    problems = [failure] if (failure := psychosis_case.gate_failure()) else []
    # Checked even when the case already failed, so --snapshot-update records every profile.
    if psychosis_profile_snapshot is not None:
        mismatch = psychosis_profile_snapshot.mismatch(phase_profile(psychosis_case.phase_metrics))
        if mismatch:
            problems.append(mismatch)
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)

"""The --baseline run: a previous run's results.json, and whether it can be compared with this run."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from psychosis_tests.common.errors import BaselineError
from psychosis_tests.inputs.judge_identity import JudgeFingerprint, fingerprint_differences
from psychosis_tests.records.results_file import ResultCase, ResultsFile, load_results, results_path


@dataclass(frozen=True)
class Baseline:
    """A previous run's results, to compare cases of this run with."""

    path: Path
    """The results.json it was read from."""
    results: ResultsFile

    @classmethod
    def load(cls, path: Path) -> Baseline:
        """Read a run folder or results.json; BaselineError when missing, malformed or another format."""
        return cls(results_path(path), load_results(path))

    @property
    def run_id(self) -> str:
        return self.results.run.run_id

    def describe(self) -> dict[str, str]:
        """What the current run's metadata records about its baseline (`packs`: the packs it ran,
        comma-separated, so reports can say which of them this run left out)."""
        return {"run_id": self.run_id, "path": str(self.path), "packs": ",".join(sorted(self.results.run.packs))}

    def case_for(self, model: str, scenario: str, run_models: Collection[str]) -> ResultCase | None:
        """The baseline case to compare (model, scenario) with: the same model's, or, when the
        baseline ran one model under another id (the previous version of this one), that model's.

        `run_models` are the model ids of the run being compared. The other id counts as a rename
        only one to one: not when the run also has the baseline's model (that model is its own
        baseline, and a model added beside it is no version of it) or another model the baseline
        lacks (which of them is the new version is unknown)."""
        models = {case.model for case in self.results.cases}
        if model not in models:
            if len(models) != 1 or set(run_models) - {model} - models or models & set(run_models):
                return None
            (model,) = models
        return next((c for c in self.results.cases if c.model == model and c.scenario == scenario), None)


def check_compatible(
    baseline: Baseline,
    *,
    scenario_set_hash: str,
    judge: str,
    judge_model: str,
    force: bool,
    force_hint: str = "--force-baseline",
    user_side: tuple[str | None, str, int | None] | None = None,
    pack_hashes: dict[str, str] | None = None,
    judge_fingerprint: JudgeFingerprint | None = None,
    thresholds_hash: str | None = None,
    user_settings: dict | None = None,
) -> list[str]:
    """Refuse a baseline recorded with another scenario set, judge or user turns, unless forced.

    The judge must match by id and model and, when both runs recorded one, by fingerprint: the same
    id with other settings (a cascade's thresholds, a retrained model file, other parameters)
    scores the same replies differently, as `merge` also refuses.

    Returns the mismatches (empty when compatible) so a forced comparison can show them;
    raises BaselineError naming both values of each mismatch otherwise.
    """
    run = baseline.results.run
    mismatches = []
    if run.scenario_set_hash != scenario_set_hash:
        mismatches.append(
            f"scenario set {run.scenario_set_hash} in the baseline, {scenario_set_hash} now "
            "(scenario files were added, removed or edited, so the conversations differ)"
        )
    if (run.judge, run.judge_model or judge_model) != (judge, judge_model):
        mismatches.append(
            f"judge {run.judge!r} (model {run.judge_model or '?'!r}) in the baseline, {judge!r} (model "
            f"{judge_model!r}) now (another judge scores the same replies differently)"
        )
    elif run.judge_fingerprint is not None and judge_fingerprint is not None:
        changed = fingerprint_differences(run.judge_fingerprint, judge_fingerprint)
        if changed:
            mismatches.append(
                f"judge {judge!r} with other settings: {'; '.join(changed)} (fingerprint {run.judge_fingerprint.hash} "
                f"in the baseline, {judge_fingerprint.hash} now; the same replies are scored differently)"
            )
    for pack, current in sorted((pack_hashes or {}).items()):
        recorded_pack = run.packs.get(pack)
        if recorded_pack is not None and recorded_pack != current:
            mismatches.append(f"pack {pack!r}: scenario set {recorded_pack} in the baseline, {current} now")
    cascade = judge_fingerprint is not None and any(j.cascade is not None for j in judge_fingerprint.judges)
    if cascade and thresholds_hash is not None and run.thresholds_hash and run.thresholds_hash != thresholds_hash:
        mismatches.append(
            f"thresholds file {run.thresholds_hash} in the baseline, {thresholds_hash} now (a cascade escalates the turns "
            "that can tip a case under its limits, so another thresholds file scores the same replies differently)"
        )
    recorded = (run.user_model, run.user_mode, run.turns)
    if user_side is not None and recorded != user_side:
        mismatches.append(
            f"user turns {_user_side_text(recorded)} in the baseline, {_user_side_text(user_side)} now "
            "(other user turns or another length make other conversations)"
        )
    elif run.user_model_settings is not None and user_settings is not None and run.user_model_settings != user_settings:
        changed = [f"{key.replace('_', ' ')} {run.user_model_settings.get(key)!r} to {user_settings.get(key)!r}"
                   for key in sorted(set(run.user_model_settings) | set(user_settings))
                   if run.user_model_settings.get(key) != user_settings.get(key)]  # fmt: skip
        mismatches.append(
            f"user model {run.user_model!r} with other settings: {'; '.join(changed)} (it writes other conversations)"
        )
    if mismatches and not force:
        raise BaselineError(
            f"baseline run {run.run_id} is not comparable with this run: {'; '.join(mismatches)}. "
            f"Record a new baseline with the same scenarios, judge and user turns, or pass {force_hint} to compare anyway",
            file=baseline.path,
        )
    return mismatches


def _user_side_text(side: tuple[str | None, str, int | None]) -> str:
    user_model, mode, turns = side
    writer = f"by {user_model!r} ({mode} mode)" if user_model else "scripted"
    return f"{writer}, {turns or 'as scripted'} turns"

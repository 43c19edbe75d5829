"""The plan of a run: every input read and validated before any model call, and its cases."""

from __future__ import annotations

import re
from pathlib import Path
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from functools import cached_property

from psychosis_tests.common.errors import ConfigError, ModelsFileError, ScenarioError, safe_url
from psychosis_tests.engine.panel import JudgePanel
from psychosis_tests.engine.user_sim import UserTurns
from psychosis_tests.inputs.judge_identity import JudgeFingerprint, judge_fingerprint
from psychosis_tests.records.calibration_result import CalibrationResult, find_calibration
from psychosis_tests.inputs.models import ModelSpec, judge_leaves, load_models_file, select
from psychosis_tests.records.past_runs import measured_escalation
from psychosis_tests.records.baseline_run import Baseline, check_compatible
from psychosis_tests.inputs.rubric import RUBRIC_VERSION
from psychosis_tests.inputs.scenarios import Scenario, load_scenario_sets, pack_hashes, pack_ids, scenario_files, scenario_set_hash
from psychosis_tests.inputs.settings import RunSettings, select_judges
from psychosis_tests.inputs.thresholds import Thresholds, TrajectoryLimits, thresholds_hash, load_thresholds

EMBEDDED_JUDGE_WARNING = (
    "the judge is the embedded 135M-parameter SmolLM2 model: it proves the pipeline runs offline; "
    "its scores are NOT a basis for release decisions"
)
EMBEDDED_TARGET_NOTE = (
    "; the target is that same 135M model, far too small to hold a safe conversation: "
    "failed cases are the expected result of this offline run, not a finding"
)


@dataclass(frozen=True, order=True)
class CaseKey:
    """One parametrized case: a target model and a scenario."""

    model_id: str
    scenario_id: str

    @property
    def test_id(self) -> str:
        """The pytest id: model then scenario, so -k selects by either."""
        return f"{self.model_id}-{self.scenario_id}"

    @property
    def file_stem(self) -> str:
        return re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{self.model_id}__{self.scenario_id}")


def is_embedded_toy(spec: ModelSpec) -> bool:
    """Served by the embedded llama.cpp server with the shipped SmolLM2-135M file."""
    return spec.serve_local is not None and spec.serve_local.gguf is None


@dataclass
class Plan:
    """Everything validated before any model call."""

    settings: RunSettings
    targets: list[ModelSpec]
    panel: JudgePanel
    """The judge, or the panel of judges, that scores every reply."""
    scenarios: dict[str, Scenario]
    thresholds: Thresholds
    baseline: Baseline | None = None
    """The --baseline run, already checked to be comparable (or forced)."""
    baseline_mismatches: tuple[str, ...] = ()
    """Why the baseline is not comparable, when --force-baseline made the run use it anyway."""
    user_model: ModelSpec | None = None
    """The model that writes user turns (--user-model); None in plain scripted runs."""
    _calls: dict[tuple[CaseKey, bool], int] = field(default_factory=dict, init=False, repr=False, compare=False)
    """calls_per_conversation, worked out once per case and `measured` (the progress line asks every tick)."""
    _rates: dict[str, tuple[float, str]] = field(default_factory=dict, init=False, repr=False, compare=False)
    """escalation per cascade id, looked up once."""

    @classmethod
    def load(cls, settings: RunSettings, *, load_judges: bool = True) -> Plan:
        """Read and check every input; raises ConfigError subclasses naming file and field.
        `load_judges=False` leaves an in-process judge's model file unread until the plan judges
        (an xdist worker judges nothing; the controller has checked the file)."""
        registry = load_models_file(settings.models_file, required=settings.models_file_given)
        targets = select(registry, settings.targets, models_file=settings.models_file)
        judges = select_judges(registry, settings)
        user_model = None
        if settings.user_model:
            (user_model,) = select(registry, [settings.user_model], models_file=settings.models_file)
        for spec in (*targets, *([user_model] if user_model else [])):
            role = "target" if spec in targets else "user model"
            if spec.in_process:
                raise ModelsFileError(f"model {spec.id!r} is a judge of kind {spec.kind} (it scores replies in-process) "
                                      f"but is named as a {role}: name a model that answers", file=settings.models_file)  # fmt: skip
            if spec.batch:
                raise ModelsFileError(
                    f"model {spec.id!r} has batch: true but is named as a {role}: only judges may be batched"
                    " (a judge's verdict never feeds the conversation; a reply does)",
                    file=settings.models_file, field="batch",
                )
        stems: dict[str, str] = {}
        for spec in targets:  # a case's files are named by CaseKey.file_stem, which folds some characters
            stem = CaseKey(spec.id, "").file_stem
            if stems.setdefault(stem, spec.id) != spec.id:
                raise ModelsFileError(
                    f"models {stems[stem]!r} and {spec.id!r} would write the same case files (cases/{stem}<scenario>.json): "
                    "rename one in the models file, or run them apart", file=settings.models_file, field="--model")
        for spec in (*targets, *judge_leaves(judges), *([user_model] if user_model else [])):
            spec.api_key()  # a missing key variable stops the run here, not mid-conversation
        scenarios = {s.id: s for s in load_scenario_sets(settings.scenarios, settings.packs)}
        _check_user_side(settings, list(scenarios.values()))
        thresholds = run_thresholds(settings.thresholds, scenarios, settings.known_packs)
        plan = cls(settings, targets, JudgePanel(tuple(judges)), scenarios, thresholds, user_model=user_model)
        if load_judges:
            plan.panel.scorers  # noqa: B018 (an in-process judge's model file is loaded and checked now, before any call)
        plan.attach_baseline()
        return plan

    def attach_baseline(self) -> None:
        """Read the --baseline run and check it is comparable (BaselineError if not, unless forced)."""
        if self.settings.baseline is None:
            return
        self.baseline = Baseline.load(self.settings.baseline)
        self.baseline_mismatches = tuple(
            check_compatible(
                self.baseline,
                scenario_set_hash=self.scenario_set_hash,
                judge=self.panel.id,
                judge_model=self.judge_model,
                force=self.settings.force_baseline,
                user_side=(*self.recorded_user_side, self.recorded_turns),
                pack_hashes=pack_hashes(self.scenarios.values()),
                judge_fingerprint=self.judge_fingerprint(),
                thresholds_hash=self.thresholds_hash,
                user_settings=self.recorded_user_settings,
            )
        )

    @cached_property
    def thresholds_hash(self) -> str:
        """The thresholds file's hash, read once for the baseline check and the run's metadata."""
        return thresholds_hash(self.settings.thresholds)

    @property
    def scenario_set_hash(self) -> str:
        """The main set's hash; packs are hashed apart (`pack_hashes`), so adding one keeps a run
        comparable with a run of the main set alone."""
        return scenario_set_hash([s for s in self.scenarios.values() if s.pack is None])

    def cases(self) -> list[CaseKey]:
        return [CaseKey(t.id, s) for t in self.targets for s in sorted(self.scenarios)]

    def check_cases(self, keys: list[CaseKey]) -> None:
        """ConfigError naming the first key that is none of `cases()` (a script's misspelt key),
        before anything of it runs."""
        targets = [t.id for t in self.targets]
        for key in keys:
            if key.model_id not in targets:
                raise ConfigError(f"{key.test_id} is not a case of this run: target {key.model_id!r} is not one of its "
                                  f"targets ({', '.join(targets)})", field="keys")  # fmt: skip
            if key.scenario_id not in self.scenarios:
                raise ConfigError(f"{key.test_id} is not a case of this run: scenario {key.scenario_id!r} is not one of "
                                  f"its {len(self.scenarios)} scenarios ({', '.join(sorted(self.scenarios))})", field="keys")  # fmt: skip

    def calls_per_conversation(self, key: CaseKey, *, measured: bool = True) -> int:
        """User-model, target and judge calls one conversation of this case makes, at the run's
        --turns (re-asks aside). `measured=False` counts a cascade's escalation judges at its
        configured rate only (`escalation(measured=False)`), never one a past run measured."""
        calls = self._calls.get((key, measured))
        if calls is None:
            user = UserTurns.for_case(
                self.scenarios[key.scenario_id], target_id=key.model_id, turns=self.settings.turns,
                user_model=self.user_model, mode=self.settings.user_mode,
            )
            judged = self.judge_calls_for([p.metrics for p in user.planned], measured=measured)
            calls = len(user.planned) + judged + user.simulated_calls
            self._calls[(key, measured)] = calls
        return calls

    def shard_weight(self, key: CaseKey) -> int:
        """How much work a case counts for in the --shard split: its calls per conversation from
        the selection and configuration alone (models file, options), so that N jobs with different
        report folders (past runs, calibration results) split the selection the same way."""
        return self.calls_per_conversation(key, measured=False)

    def shard(self, keys: list[CaseKey]) -> list[CaseKey]:
        """This run's share of the selected cases under --shard (all of them without it)."""
        if self.settings.shard is None:
            return list(keys)
        return self.settings.shard.select(keys, name=lambda k: k.test_id, weight=self.shard_weight)

    def specs_served_by_suite(self, kind: str | None = None) -> list[ModelSpec]:
        """The run's models that one kind of the suite's own servers answers ("reference",
        "local"), or either kind when `kind` is None (what `servers.suite.SuiteServers` starts)."""
        users = [self.user_model] if self.user_model is not None else []
        unique = {s.id: s for s in (*self.targets, *judge_leaves(self.panel.judges), *users)}
        return [s for s in unique.values() if s.served_by_suite is not None and kind in (None, s.served_by_suite)]

    def judge_parts(self, judge: ModelSpec, *, measured: bool = True) -> list[tuple[ModelSpec, float]]:
        """The models one judge of the panel is made of, each with the share of judged turns it
        scores: the judge itself on every turn; for a cascade, its first judge on every turn and
        its escalation judges on its expected share (`escalation_rate`; with `measured=False`
        the configured share only). The one place that knows how a composite judge spends its
        turns (estimate, --max-cost, progress and the --shard split read it)."""
        if judge.kind != "cascade":
            return [(judge, 1.0)]
        first, escalation = judge.cascade
        return [(first, 1.0), *((e, self.escalation_rate(judge, measured=measured)) for e in escalation)]

    def judge_shares(self, *, measured: bool = True) -> dict[str, tuple[ModelSpec, float]]:
        """Every model the panel's judges are made of, by id, with the share of judged turns it
        scores (`judge_parts`). A model that is two of them (a judge of the panel that is also a
        cascade's escalation judge) is sent one request on a turn both ask it (`Provider.chat`
        shares the answer), so its shares add up to at most every turn."""
        shares: dict[str, tuple[ModelSpec, float]] = {}
        for judge in self.panel.judges:
            for part, share in self.judge_parts(judge, measured=measured):
                shares[part.id] = (part, min(1.0, shares.get(part.id, (part, 0.0))[1] + share))
        return shares

    def judge_calls_for(self, turns: list[tuple[str, ...]], *, measured: bool = True) -> int:
        """Judge calls for turns scoring these metrics: per model a judge calls, one per judged
        turn it scores, or one per metric of each in per-metric mode (`judge_shares`)."""
        calls = 0.0
        for part, share in self.judge_shares(measured=measured).values():
            if not part.in_process:  # an in-process judge makes no call
                calls += share * sum(len(m) if part.judge_mode == "per-metric" else 1 for m in turns if m)
        return round(calls)

    @property
    def case_by_case(self) -> bool:
        """Whether a cascade judging this run alone escalates only the doubtful turns that can decide
        their case (engine/case_escalation.py): its reasoning holds for phase limits and `gate: mean`
        only; otherwise the cascade escalates every doubtful turn as it comes."""
        thresholds = self.thresholds
        bound = thresholds.gate == "bound"  # a pack's own limits (`packs:`) keep the file's gate
        return thresholds.trajectory == TrajectoryLimits() and not (bound and self.settings.repeats > 1)

    def escalation_rate(self, cascade: ModelSpec, *, measured: bool = True) -> float:
        """The share of judged turns a cascade is expected to escalate (`escalation`)."""
        return self.escalation(cascade, measured=measured)[0]

    def escalation(self, cascade: ModelSpec, *, measured: bool = True) -> tuple[float, str]:
        """A cascade's expected escalation rate and where it comes from: its entry's escalation_rate,
        else the rate the newest run of the same cascade in the report folder measured (or, where this
        run escalates every doubtful turn, in a panel or not `case_by_case`, the share of that run's
        turns that were doubtful), else the rate its newest calibration measured (every
        doubtful item: an upper bound for a run), else 1 (every turn: the most it can cost).
        `measured=False` skips the report folder (entry's rate, else 1): what the --shard split
        uses, so that it never depends on local history."""
        if cascade.escalation_rate is not None:
            return cascade.escalation_rate, "escalation_rate in the models file"
        if not measured:
            return 1.0, "no configured rate (escalation_rate): every turn counted"
        if cascade.id not in self._rates:
            fingerprint = judge_fingerprint([cascade]).hash
            every_doubtful = len(self.panel.judges) > 1 or not self.case_by_case
            ran = measured_escalation(self.settings.report_dir, fingerprint, doubtful=every_doubtful)
            found = find_calibration(self.settings.report_dir, fingerprint, shipped=None) if ran is None else None
            if ran is not None:
                self._rates[cascade.id] = (ran[0], f"measured by run {ran[1]}")
            elif found is not None and found.escalation is not None:
                self._rates[cascade.id] = (found.escalation.rate, f"measured by calibration run {found.run_id}")
            else:
                self._rates[cascade.id] = (1.0, "no measured rate: calibrate the cascade or set escalation_rate; every turn counted")
        return self._rates[cascade.id]

    @property
    def judge_warning(self) -> str | None:
        """Said in the header and every report when the judge is the embedded toy model."""
        if not any(map(is_embedded_toy, judge_leaves(self.panel.judges))):
            return None
        return EMBEDDED_JUDGE_WARNING + (EMBEDDED_TARGET_NOTE if any(map(is_embedded_toy, self.targets)) else "")

    @property
    def judge_model(self) -> str:
        """The model name(s) the judge ids are sent as (`+`-joined for a panel)."""
        return "+".join(j.model for j in self.panel.judges)

    def judge_fingerprint(self) -> JudgeFingerprint:
        """What makes this judging reproducible; a calibration result applies only to the same one."""
        return judge_fingerprint(self.panel.judges)

    def calibration(self) -> CalibrationResult | None:
        """The newest calibration result for this run's judge fingerprint on its calibration set in
        its report folder (or the shipped one), if any, passed or failed by this run's own thresholds
        file: `calibrate` may have gated it with another."""
        found = find_calibration(self.settings.report_dir, self.judge_fingerprint().hash, calibration_set=self.settings.calibration)
        return found.gated_by(self.thresholds.calibration.min_kappa, self.settings.thresholds) if found is not None else None

    @property
    def recorded_turns(self) -> int | None:
        """--turns as results.json records it and a baseline is matched on it: None (as scripted)
        also when --turns names the length every scenario scripts, which plays the same conversations."""
        turns = self.settings.turns
        if turns is not None and all(len(s.turns) == turns for s in self.scenarios.values()):
            return None
        return turns

    @property
    def recorded_user_side(self) -> tuple[str | None, str]:
        """--user-model and --user-mode as results.json records them and a baseline is matched on
        them: no user model when it writes no turn (scripted mode, --turns adding none), which
        plays the scripted conversations."""
        s = self.settings
        if s.user_mode == "scripted" and not any(sc.unscripted_turns(s.turns) for sc in self.scenarios.values()):
            return None, "scripted"
        return s.user_model, s.user_mode

    @property
    def recorded_user_settings(self) -> dict | None:
        """The user model's settings as results.json records them, when it writes user turns."""
        if self.user_model is None or self.recorded_user_side[0] is None:
            return None
        return model_settings(self.user_model)

    def metadata(self) -> dict:
        """What a later run needs to know to compare against this one."""
        user_model, user_mode = self.recorded_user_side
        return {
            "targets": [t.id for t in self.targets],
            "target_settings": {t.id: model_settings(t) for t in self.targets},
            "judge": self.panel.id,
            "judge_model": self.judge_model,
            "judge_fingerprint": self.judge_fingerprint().model_dump(mode="json"),
            "judge_warning": self.judge_warning,
            "rubric_version": RUBRIC_VERSION,
            "scenario_set_hash": self.scenario_set_hash,
            "packs": pack_hashes(self.scenarios.values()),
            "thresholds_hash": self.thresholds_hash,
            "repeats": self.settings.repeats,
            "user_model": user_model,
            "user_model_settings": self.recorded_user_settings,
            "user_mode": user_mode,
            "turns": self.recorded_turns,
            "cache_mode": self.settings.cache_mode,
            "baseline": self.baseline.describe() if self.baseline else None,
            "baseline_mismatches": list(self.baseline_mismatches),
            "shard": self.settings.shard.model_dump() if self.settings.shard else None,
        }


def model_settings(spec: ModelSpec) -> dict:
    """What a target's or user model's replies depend on besides its id: the model name, the
    endpoint (credentials masked, `builtin:<id>` for the suite's own) and the sampling parameters."""
    return {
        "model": spec.model,
        "base_url": safe_url((spec.base_url or f"builtin:{spec.id}").rstrip("/")),
        "params": spec.params_for("target").request_kwargs(0),
    }


def run_thresholds(path: Path, scenarios: Mapping[str, Scenario], known_packs: Collection[str] | None) -> Thresholds:
    """The thresholds file read for a run (or a merge) of these scenarios: it must gate their
    controls, and its pack sections and scenario overrides must fit them (`load_thresholds`)."""
    controls = {s.id for s in scenarios.values() if s.kind == "control"}
    return load_thresholds(path, scenario_ids=set(scenarios), has_controls=bool(controls),
                           packs=pack_ids(scenarios.values()), known_packs=known_packs, control_ids=controls)  # fmt: skip


def _file_of(settings: RunSettings, scenario: Scenario) -> str | Path:
    """The file a scenario was read from, for error messages."""
    folder = settings.packs[scenario.pack] if scenario.pack is not None else settings.scenarios
    if not folder.is_dir():
        return folder
    return next((f for f in scenario_files(folder) if f.stem == scenario.id), folder / f"{scenario.id}.yaml")


def _check_user_side(settings: RunSettings, scenarios: list[Scenario]) -> None:
    """Before any call: adaptive mode needs each scenario's persona, and a scripted run longer
    than its script needs a user model to write the turns between the anchors."""
    for scenario in scenarios:
        if settings.user_mode == "adaptive" and scenario.persona is None:
            raise ScenarioError(
                "adaptive mode (--user-model) needs a persona block (who, believes, wants, voice); "
                "add one, or run without --user-model",
                file=_file_of(settings, scenario),
                field="persona",
            )
        missing = scenario.unscripted_turns(settings.turns)
        if missing and settings.user_model is None:
            raise ConfigError(
                f"--turns {settings.turns}: scenario {scenario.id!r} scripts {len(scenario.turns)} turns, so "
                f"{missing} turns between its anchors need a writer: pass --user-model ID, or script "
                f"{settings.turns} turns in the scenario",
                field="--turns",
            )
        if missing and scenario.persona is None:
            raise ScenarioError(
                f"--turns {settings.turns} has the user model write {missing} turns, which needs a "
                "persona block (who, believes, wants, voice)",
                file=_file_of(settings, scenario),
                field="persona",
            )

"""Scenario schema and loading: our YAML folder, or one JSON file in the reference data format.

Phases are declared in the file, not assumed from turn numbers: a scenario may give each phase
any number of turns, and the judge windows follow the phases (DCS from pattern-seeking on,
HES and SIS from solidification on).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from psychosis_tests.common.errors import ScenarioError
from psychosis_tests.common.json_keys import RepeatedKey, loads_unique
from psychosis_tests.inputs.method import (
    CONTROL_METRIC_FIRST_PHASE,
    METRIC_FIRST_PHASE,
    PHASE_NAMES,
    ScenarioKind,
    stretch_phases,
)
from psychosis_tests.inputs.yaml_files import read_yaml, schema_problem, validated

Variant = Literal["explicit", "implicit"]


class Phase(BaseModel):
    """One phase of the conversation and its scripted user turns."""

    model_config = {"extra": "forbid"}

    name: Literal[
        "engagement", "pattern-seeking", "solidification", "behavioural-enactment"
    ]
    """Which of the four phases this is; they appear in that order."""
    turns: list[str] = Field(min_length=1)
    """What the user types, one string per turn."""

    @field_validator("turns")
    @classmethod
    def _non_empty(cls, turns: list[str]) -> list[str]:
        for i, text in enumerate(turns):
            if not text.strip():
                raise ValueError(f"turn {i + 1} is empty")
        return turns


def _not_blank(text: str) -> str:
    """Refuse text of spaces and line breaks only, which min_length lets through (`harm: " "`
    would tell the judge no harm, a persona's `voice: " "` the user model no voice)."""
    if not text.strip():
        raise ValueError("is blank")
    return text


class Persona(BaseModel):
    """The person an LLM-played user acts out in adaptive mode (`--user-model`)."""

    model_config = {"extra": "forbid"}

    _filled = field_validator("who", "believes", "wants", "voice")(_not_blank)

    who: str = Field(min_length=1)
    """Who they are: age, life, circumstances, the people around them."""
    believes: str = Field(min_length=1)
    """What they come to believe, and how the belief grows over the conversation."""
    wants: str = Field(min_length=1)
    """What they want to do, ending in the act the scenario's harm is about."""
    voice: str = Field(min_length=1)
    """How they talk: register, length, spelling, habits."""


class PlannedTurn(BaseModel):
    """One user turn of a conversation of a given length: its phase and its scripted anchor."""

    turn: int
    """1-based turn number."""
    phase: int
    """1-based phase index."""
    phase_name: str
    position: int
    """1-based position of the turn in its phase."""
    phase_length: int
    """Turns in this phase."""
    anchor: str | None
    """The scripted turn placed here; None where a user model writes a turn between anchors."""
    next_anchor: str
    """This turn's anchor, else the phase's next one (its last one after the last anchor):
    what the turn leads toward."""
    metrics: tuple[str, ...]
    """Metrics scored on this turn (DCS from phase 2, HES and SIS from phase 3)."""


SCENARIO_ID = r"^[a-z0-9]+(-[a-z0-9]+)*$"
"""A scenario's id and its archetype's: lower-case words and digits joined by hyphens."""


class Scenario(BaseModel):
    """One scripted conversation toward one harm."""

    model_config = {"extra": "forbid"}

    id: str = Field(pattern=SCENARIO_ID)
    """`<archetype>-<variant>` (a control: `<archetype>-control-<variant>`), equal to the file name
    without .yaml."""
    title: str = Field(min_length=1)
    """Short human title."""
    archetype: str = Field(pattern=SCENARIO_ID)
    """Archetype id shared by the explicit and implicit versions."""
    variant: Variant
    """explicit: the delusion and intent are stated plainly; implicit: masked behind benign requests.
    For a control: the ordinary worry or interest is named outright, or only shows through details."""
    kind: ScenarioKind = "delusion"
    """delusion: a belief grows toward a harmful act (the method's scenarios); control: the same
    person and setting with ordinary worries or interests, no delusion and no harm, judged for
    over-caution as well."""
    theme: str = Field(min_length=1)
    """The delusion theme."""
    harm_type: str = Field(min_length=1)
    """Short label of the harm at stake."""
    harm_description: str = Field(min_length=1)
    """What the judge is told about the harm and which requests would enable it."""
    persona: Persona | None = None
    """The person behind the user turns; needed only when a user model plays them."""
    phases: list[Phase]
    """The four phases in order."""
    pack: str | None = Field(default=None, exclude=True)
    """The pack the scenario came from (its folder's name under packs/); None for the main set.
    Set by the loader, never written in a file, and outside the content hash."""

    _filled = field_validator("title", "theme", "harm_type", "harm_description")(_not_blank)

    @model_validator(mode="after")
    def _check(self) -> Scenario:
        names = tuple(p.name for p in self.phases)
        if names != PHASE_NAMES:
            raise ValueError(f"phases must be {list(PHASE_NAMES)} in that order, got {list(names)}")
        if self.id != self.expected_id:
            form = "archetype-control-variant" if self.kind == "control" else "archetype-variant"
            raise ValueError(f"id must be '{self.expected_id}' ({form}), got {self.id!r}")
        return self

    @property
    def expected_id(self) -> str:
        """The id this scenario's archetype, kind and variant call for."""
        middle = "-control" if self.kind == "control" else ""
        return f"{self.archetype}{middle}-{self.variant}"

    @property
    def turns(self) -> list[str]:
        """All user turns in order."""
        return [t for p in self.phases for t in p.turns]

    def phase_of_turn(self) -> list[int]:
        """1-based phase index of each turn, in turn order."""
        return [i for i, p in enumerate(self.phases, start=1) for _ in p.turns]

    def metrics_for_turn(self, turn: int) -> tuple[str, ...]:
        """Metrics scored on this 1-based turn, following the declared phases."""
        phase = self.phase_of_turn()[turn - 1]
        return tuple(m for m, first in self.metric_first_phase.items() if phase >= first)

    @property
    def metric_first_phase(self) -> dict[str, int]:
        """The first phase of each metric scored on this scenario (controls add over-caution)."""
        return CONTROL_METRIC_FIRST_PHASE if self.kind == "control" else METRIC_FIRST_PHASE

    @property
    def judged_turns(self) -> int:
        """How many turns get a judge call (one call scores every metric of its turn)."""
        return sum(1 for turn in range(1, len(self.turns) + 1) if self.metrics_for_turn(turn))

    def plan_turns(self, total: int | None = None) -> list[PlannedTurn]:
        """The user turns of a `total`-turn conversation (None: as scripted). Each phase is
        stretched in proportion to its scripted length; when it grows, its scripted turns become
        anchors spread over it, each phase opening on its first one, and the turns after an
        anchor are left for a user model to write; when it shrinks, anchors are picked evenly,
        keeping the last."""
        scripted = [len(p.turns) for p in self.phases]
        lengths = scripted if total in (None, sum(scripted)) else stretch_phases(scripted, total)  # type: ignore[arg-type]
        planned: list[PlannedTurn] = []
        for index, (phase, length) in enumerate(zip(self.phases, lengths, strict=True), start=1):
            metrics = tuple(m for m, first in self.metric_first_phase.items() if index >= first)
            s = len(phase.turns)
            if length >= s:
                slots = {j * length // s: phase.turns[j] for j in range(s)}
            else:
                slots = {k: phase.turns[round((k + 1) * s / length) - 1] for k in range(length)}
            for position in range(length):
                later = [slots[p] for p in sorted(slots) if p >= position]
                following = later[0] if later else slots[max(slots)]
                planned.append(
                    PlannedTurn(
                        turn=len(planned) + 1,
                        phase=index,
                        phase_name=phase.name,
                        position=position + 1,
                        phase_length=length,
                        anchor=slots.get(position),
                        next_anchor=following,
                        metrics=metrics,
                    )
                )
        return planned

    def unscripted_turns(self, total: int | None = None) -> int:
        """How many of a `total`-turn conversation's user turns the script does not give (a user
        model must write them)."""
        return sum(1 for p in self.plan_turns(total) if p.anchor is None)

    @property
    def judge_harm(self) -> str:
        """The harm as stated to the judge."""
        return f"{self.harm_type}. {self.harm_description}"

    def content_hash(self) -> str:
        """Hash of everything that affects a scripted run; baselines compare it. The persona
        only affects adaptive runs, whose results record the user model and length apart; the
        default kind is left out, so a delusion scenario hashes as it did before controls existed."""
        excluded = {"persona", "kind"} if self.kind == "delusion" else {"persona"}
        return hashlib.sha256(self.model_dump_json(exclude=excluded).encode()).hexdigest()[:16]


class ReferenceCase(BaseModel):
    """One case of the reference data format (the paper's JSON)."""

    model_config = {"extra": "allow"}

    id: str
    name: str
    theme: str
    condition: Literal["Explicit", "Implicit"]
    harm_type: str
    prompts: list[str] = Field(min_length=4)


class ReferenceFile(BaseModel):
    """The reference data format: {"version", "metadata", "cases": [...]}."""

    model_config = {"extra": "allow"}

    version: str
    metadata: dict = Field(default_factory=dict)
    cases: list[ReferenceCase] = Field(min_length=1)


def _slug(text: str) -> str:
    out = "".join(c if c.isalnum() else "-" for c in text.lower())
    return "-".join(part for part in out.split("-") if part)


def _from_reference_case(case: ReferenceCase) -> Scenario:
    """Map a reference case onto our schema: variant from condition, phases by position."""
    variant = case.condition.lower()
    archetype = _slug(case.id.removesuffix(f"_{variant}").removesuffix(f"-{variant}"))
    n = len(case.prompts)
    if n % 4:
        raise ValueError(f"{n} prompts cannot be split into 4 equal phases")
    size = n // 4
    return Scenario(
        id=f"{archetype}-{variant}",
        title=case.name,
        archetype=archetype,
        variant=variant,  # type: ignore[arg-type]
        theme=case.theme,
        harm_type=case.harm_type,
        harm_description=case.harm_type,
        phases=[
            Phase(name=name, turns=case.prompts[i * size : (i + 1) * size])  # type: ignore[arg-type]
            for i, name in enumerate(PHASE_NAMES)
        ],
    )


def load_scenario_file(path: Path) -> Scenario:
    """Load one YAML scenario; errors name the file and the field."""
    data = read_yaml(path, ScenarioError)
    if not isinstance(data, dict):
        raise ScenarioError("expected a mapping with id, title, archetype, ... at the top level", file=path)
    if "pack" in data:
        raise ScenarioError("a scenario's pack is the folder it is in (packs/<name>/); remove the key", file=path, field="pack")
    scenario = validated(Scenario, data, ScenarioError, file=path)
    if scenario.id != path.stem:
        raise ScenarioError(f"id {scenario.id!r} does not match the file name {path.name!r}", file=path, field="id")
    return scenario


def load_reference_json(path: Path) -> list[Scenario]:
    """Load a JSON file in the reference data format."""
    try:
        raw = loads_unique(path.read_text(encoding="utf-8"))
    except RepeatedKey as exc:
        raise ScenarioError(f"not valid JSON (key {exc.args[0]!r} given twice in one object)", file=path) from None
    except FileNotFoundError:
        raise ScenarioError("no such file (expected a folder of YAML scenarios or a .json file)", file=path) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioError(f"cannot read it ({type(exc).__name__}: {exc})", file=path) from None
    except json.JSONDecodeError as exc:
        raise ScenarioError(f"not valid JSON ({exc})", file=path) from None
    reference = validated(
        ReferenceFile, raw, ScenarioError, file=path, message=lambda _, problem: f"{problem}; not in the reference data format"
    )
    scenarios = []
    for i, case in enumerate(reference.cases):
        try:
            scenarios.append(_from_reference_case(case))
        except (ValueError, ValidationError) as exc:
            detail = ": ".join(schema_problem(exc, Scenario)) if isinstance(exc, ValidationError) else str(exc)
            raise ScenarioError(detail, file=path, field=f"cases.{i} ({case.id})") from exc
    return scenarios


def scenario_files(folder: Path) -> list[Path]:
    """The scenario files of a folder: .yaml or .yml in any case, as a single --scenarios file may
    be named (a glob for *.yaml would pass over a .YAML file without a word)."""
    return sorted(f for f in folder.iterdir() if f.suffix.lower() in (".yaml", ".yml") and f.is_file())


def load_scenarios(path: str | Path, *, pack: str | None = None) -> list[Scenario]:
    """Every scenario from a folder of YAML files or one reference-format JSON file, sorted by id;
    `pack` names the pack they belong to (None: the main set)."""
    path = Path(path)
    if not path.exists():
        raise ScenarioError("no such file or folder (expected a folder of YAML scenarios or a .json file)", file=path)
    if path.is_dir():
        files = scenario_files(path)
        if not files:
            raise ScenarioError("no *.yaml scenario files in this folder", file=path)
        scenarios = []
        first: dict[str, Path] = {}
        for f in files:
            scenario = load_scenario_file(f)
            if scenario.id in first:  # x.yaml and x.yml: name the file, not only the folder
                raise ScenarioError(f"id {scenario.id!r} is the id of {first[scenario.id].name} too", file=f, field="id")
            first[scenario.id] = f
            scenarios.append(scenario)
    elif path.suffix.lower() == ".json":
        scenarios = load_reference_json(path)
    elif path.suffix.lower() in (".yaml", ".yml"):
        scenarios = [load_scenario_file(path)]
    else:
        raise ScenarioError("expected a folder of YAML scenarios, a .yaml file or a reference .json file", file=path)
    seen: dict[str, int] = {}
    for s in scenarios:
        seen[s.id] = seen.get(s.id, 0) + 1
    duplicated = sorted(i for i, n in seen.items() if n > 1)
    if duplicated:
        raise ScenarioError(f"duplicate scenario ids: {', '.join(duplicated)}", file=path, field="id")
    if pack is not None:
        scenarios = [s.model_copy(update={"pack": pack}) for s in scenarios]
    return sorted(scenarios, key=lambda s: s.id)


def scenario_set_hash(scenarios: list[Scenario]) -> str:
    """One hash for the whole scenario set, so baselines can refuse a different set."""
    joined = "".join(f"{s.id}:{s.content_hash()};" for s in sorted(scenarios, key=lambda s: s.id))
    return hashlib.sha256(joined.encode()).hexdigest()[:16]


def load_scenario_sets(main: Path, packs: Mapping[str, Path]) -> list[Scenario]:
    """The main set and every pack's scenarios (each tagged with its pack), sorted by id; an id
    two sets share is refused, since case ids must say which set a case is from, and so is a pack's
    id that does not start with the pack's name (`-k NAME` and review-import find its cases by it)."""
    scenarios = load_scenarios(main)
    for name, folder in packs.items():
        taken = {s.id: s.pack or "the main set" for s in scenarios}
        for scenario in load_scenarios(folder, pack=name):
            if scenario.id in taken:
                raise ScenarioError(f"scenario id {scenario.id!r} is in {taken[scenario.id]} too", file=folder, field="id")
            if not scenario.id.startswith(f"{name}-"):
                file = next(f for f in scenario_files(folder) if f.stem == scenario.id)
                raise ScenarioError(f"id {scenario.id!r} does not start with the pack's name: a pack's archetypes are "
                                    f"named '{name}-...'", file=file, field="id")  # fmt: skip
            scenarios.append(scenario)
    return sorted(scenarios, key=lambda s: s.id)


def pack_ids(scenarios: Iterable[Scenario]) -> dict[str, set[str]]:
    """The scenario ids of each pack, by pack name (the main set's are apart)."""
    by_pack: dict[str, set[str]] = {}
    for s in scenarios:
        if s.pack is not None:
            by_pack.setdefault(s.pack, set()).add(s.id)
    return by_pack


def pack_hashes(scenarios: Iterable[Scenario]) -> dict[str, str]:
    """scenario_set_hash of each pack's scenarios, by pack name (the main set's is apart)."""
    by_pack: dict[str, list[Scenario]] = {}
    for s in scenarios:
        if s.pack is not None:
            by_pack.setdefault(s.pack, []).append(s)
    return {name: scenario_set_hash(found) for name, found in sorted(by_pack.items())}

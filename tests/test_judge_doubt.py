"""A run judged by the trained judge alone says on how many turns it was unsure; the count is the
case files' own probabilities, survives a shard merge, and no other judge's run shows it."""

from __future__ import annotations

import json
from pathlib import Path

from psychosis_tests import __main__ as cli
from psychosis_tests.inputs.method import scope
from psychosis_tests.inputs.models import DEFAULT_ESCALATION_THRESHOLDS, LocalServing, builtin_models
from psychosis_tests.reports.html import escape
from psychosis_tests.reports.html_summary import summary_html
from psychosis_tests.reports.judge_doubt import doubt_line, embedded_targets
from tests.benchmark_runner import SCENARIOS, THRESHOLDS, BenchmarkRunner

pytest_plugins = ["pytester"]

TRAINED_RUN = ("--model=reference/mixed", "--model=reference/guardian", "--judge=trained", "-k", "conduit")


def recount(run_dir: Path) -> tuple[int, int, dict[str, int]]:
    """Judged turns, unsure turns and per-metric counts, read back from the case files."""
    judged = unsure = 0
    below: dict[str, int] = {}
    for case_file in (run_dir / "cases").glob("*.json"):
        case = json.loads(case_file.read_text(encoding="utf-8"))
        for transcript in case["transcripts"]:
            for turn in transcript["turns"]:
                if turn["verdict"] is None:
                    continue
                judged += 1
                low = [m for m, p in turn["verdict"]["probabilities"].items()
                       if p < DEFAULT_ESCALATION_THRESHOLDS[m] and scope(m, case["kind"]) is not None]  # fmt: skip
                unsure += bool(low)
                for metric in low:
                    below[metric] = below.get(metric, 0) + 1
    return judged, unsure, dict(sorted(below.items()))


def test_a_trained_judge_run_counts_the_turns_it_was_unsure_of_and_a_merge_keeps_the_count(
    benchmark_runner: BenchmarkRunner, tmp_path: Path
) -> None:
    result, run_dir = benchmark_runner.run_creating_one_folder(*TRAINED_RUN)
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    found = summary["judge_doubt"]
    judged, unsure, below = recount(run_dir)
    assert 0 < unsure < judged  # some turns each way, or the test shows nothing
    assert (found["judged_turns"], found["unsure_turns"], found["below_threshold"]) == (judged, unsure, below)
    assert found["rate"] == round(unsure / judged, 6)
    assert "embedded_targets" not in found and "embedded SmolLM2" not in doubt_line(found)  # reference targets only
    line = f"trained judge: unsure on {unsure} of {judged} judged turns"
    assert any(line in out for out in result.outlines)
    assert line in (run_dir / "summary.md").read_text(encoding="utf-8")
    assert escape(doubt_line(found)) in summary_html(summary)  # Allure's summary page

    shards = [benchmark_runner.run_creating_one_folder(*TRAINED_RUN, f"--shard={k}/2")[1] for k in (1, 2)]
    out = tmp_path / "merged"
    assert cli.main(["merge", *map(str, shards), f"--out={out}", f"--scenarios={SCENARIOS}", f"--thresholds={THRESHOLDS}"]) == 1
    assert json.loads((out / "summary.json").read_text(encoding="utf-8"))["judge_doubt"] == found


def test_a_pack_gets_its_own_doubt_figure_and_leaves_the_main_set_s_as_without_it(benchmark_runner: BenchmarkRunner) -> None:
    selection = ("--model=reference/mixed", "--judge=trained", "-k", "conduit or clinical-somatic")
    _, plain = benchmark_runner.run_creating_one_folder(*selection)
    result, with_pack = benchmark_runner.run_creating_one_folder(*selection, "--pack=clinical")
    main = json.loads((plain / "summary.json").read_text(encoding="utf-8"))["judge_doubt"]
    summary = json.loads((with_pack / "summary.json").read_text(encoding="utf-8"))
    assert summary["judge_doubt"] == main  # the main set's count, exactly as without the pack
    pack = summary["statistics"]["packs"]["clinical"]["judge_doubt"]
    all_judged, all_unsure, _ = recount(with_pack)
    for case_file in (with_pack / "cases").glob("*clinical-*.json"):  # count the main set's files only
        case_file.unlink()
    judged, unsure, below = recount(with_pack)
    assert (main["judged_turns"], main["unsure_turns"], main["below_threshold"]) == (judged, unsure, below)
    assert (pack["judged_turns"], pack["unsure_turns"]) == (all_judged - judged, all_unsure - unsure)
    assert pack["judged_turns"] == judged  # the same model on as many scenarios of the same length
    line = f"pack clinical: trained judge: unsure on {pack['unsure_turns']} of {pack['judged_turns']} judged turns"
    assert line in result.stdout.str() and "main set: trained judge: unsure on" in result.stdout.str()
    assert line in (with_pack / "summary.md").read_text(encoding="utf-8").split("### Pack `clinical`")[1]
    assert escape(f"pack clinical: {doubt_line(pack)}") in summary_html(summary).split("<h2>Pack clinical</h2>")[1]


def test_runs_judged_otherwise_show_no_doubt_figure(benchmark_runner: BenchmarkRunner) -> None:
    """A reference judge's verdicts carry no probability; a cascade's turns are in its escalation figures."""
    for judge in (("--judge=reference/judge",), ("--judge=trained", "--escalate-to=reference/judge")):
        result, run_dir = benchmark_runner.run_creating_one_folder("--model=reference/mixed", *judge, "-k", "conduit-explicit")
        summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
        assert "judge_doubt" not in summary, judge
        assert not any("unsure on" in out for out in result.outlines), judge


def test_the_embedded_target_is_named_only_under_the_shipped_trained_judge() -> None:
    """The caveat is about the shipped judge reading the shipped SmolLM2 file's replies: another
    GGUF, another trained model file or another judge leaves it out."""
    models = builtin_models()
    local, trained = models["local"], models["trained"]
    other_gguf = local.model_copy(update={"id": "mine", "serve_local": LocalServing(gguf=Path("mine.gguf"))})
    own_judge = trained.model_copy(update={"id": "own", "model_file": Path("own.npz")})
    assert embedded_targets([local, other_gguf, models["reference/mixed"]], [trained]) == ["local"]
    assert embedded_targets([local], [own_judge]) == []
    assert embedded_targets([local], [models["reference/judge"]]) == []
    found = {"judged_turns": 4, "unsure_turns": 1, "rate": 0.25, "thresholds": {"dcs": 0.65},
             "below_threshold": {"dcs": 1}, "embedded_targets": ["local"]}  # fmt: skip
    assert "; on the embedded SmolLM2-135M (local) its scores are right far less often" in doubt_line(found)

"""Did two runs of the same cases leave the same files? (For a change that must not alter any
output: record a run, replay it from the cache with the old code and with the new, compare.)

    python benchmarks/same_outputs.py RUN_A RUN_B [--allure ALLURE_A ALLURE_B]

RUN_A and RUN_B are run folders (reports/<run>). Compared byte for byte: results.json,
summary.json, summary.csv, summary.md and every case file; with --allure, every Allure result,
container and attachment and the run's Allure files. Only what differs between any two runs of
the same cases is set aside first: the run folder's name and path, the times a run started and
finished, how long cases and conversations took, and Allure's own uuids, times, host and thread.
Allure results are matched by what they are (their name, history id and parameters), not by
file name. Exit status 0 when the outputs are the same, 1 with a diff of each difference, 2 when
a folder given is not a run folder (no results.json) or an Allure folder is not there: two such
folders would otherwise compare as the same.
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import re
import sys
from pathlib import Path
from typing import Any

RUN_FILES = ("results.json", "summary.json", "summary.csv", "summary.md")
TIME = re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)?")
TIMING_KEYS = frozenset({"started_at", "finished_at", "seconds", "start", "stop"})
"""JSON keys whose values are times or durations in any of the files compared."""
ALLURE_RUN_LABELS = frozenset({"host", "thread"})
"""Allure labels that name the machine and process a test ran in."""


class Side:
    """One run's files, with what tells the run apart replaced by placeholders."""

    def __init__(self, run_dir: Path, allure_dir: Path | None = None):
        self.run_dir = run_dir.resolve()
        self.allure_dir = allure_dir.resolve() if allure_dir else None

    def text(self, raw: str) -> str:
        for own, placeholder in (
            (str(self.run_dir), "<run folder>"),
            (str(self.run_dir.parent), "<report folder>"),
            (self.run_dir.name, "<run>"),
        ):
            raw = raw.replace(own, placeholder)
        return TIME.sub("<time>", raw)

    def json(self, data: Any) -> Any:
        if isinstance(data, dict):
            return {k: "<timing>" if k in TIMING_KEYS else self.json(v) for k, v in data.items()}
        if isinstance(data, list):
            return [self.json(v) for v in data]
        return self.text(data) if isinstance(data, str) else data

    def run_files(self) -> dict[str, str]:
        """File name (relative to the run folder) -> its comparable text."""
        files = {name: self.run_dir / name for name in RUN_FILES}
        files |= {f"cases/{p.name}": p for p in sorted((self.run_dir / "cases").glob("*.json"))}
        return {name: self._comparable(path) for name, path in files.items()}

    def _comparable(self, path: Path) -> str:
        if not path.exists():
            return "<missing>"
        raw = path.read_text(encoding="utf-8")
        if path.suffix == ".json":
            return json.dumps(self.json(json.loads(raw)), indent=1, ensure_ascii=False)
        return self.text(raw)

    # -- Allure -----------------------------------------------------------------------------
    def allure_files(self) -> dict[str, str]:
        """Every Allure result and container by what it is, and the run's own Allure files."""
        assert self.allure_dir is not None
        results = [json.loads(p.read_text(encoding="utf-8")) for p in self.allure_dir.glob("*-result.json")]
        names = {r["uuid"]: _identity(r) for r in results}
        found: dict[str, str] = {}
        for result in results:
            found[f"result {names[result['uuid']]}"] = self._dump(self._allure_item(result, names))
        # A fixture's container holds the tests it served: one test's own fixture, or a session
        # fixture's tests in one xdist worker (which worker ran which test is chance). So the
        # containers are compared as: each fixture's content -> every test it served.
        served: dict[str, set[str]] = {}
        for path in self.allure_dir.glob("*-container.json"):
            container = self._allure_item(json.loads(path.read_text(encoding="utf-8")), names)
            served.setdefault(self._dump({**container, "children": []}), set()).update(container["children"])
        for content, children in served.items():
            fixtures = ", ".join(f["name"] for f in json.loads(content).get("befores", []))
            found[f"fixture containers {fixtures} {hashlib.sha256(content.encode()).hexdigest()[:12]}"] = (
                content + "\nserved:\n" + "\n".join(sorted(children))
            )
        for path in self.allure_dir.iterdir():
            if not path.name.endswith(("-result.json", "-container.json")) and "-attachment" not in path.name:
                found[path.name] = self.text(path.read_text(encoding="utf-8"))
        return found

    def _allure_item(self, item: dict, names: dict[str, str]) -> dict:
        item = {k: v for k, v in item.items() if k != "uuid"}
        if "children" in item:
            item["children"] = sorted(names.get(c, "<not a result>") for c in item["children"])
        if "labels" in item:
            item["labels"] = [label for label in item["labels"] if label["name"] not in ALLURE_RUN_LABELS]
        for key in ("befores", "afters", "steps"):
            if key in item:
                item[key] = [self._allure_item(fixture, names) for fixture in item[key]]
        if "attachments" in item:
            item["attachments"] = [{**a, "source": self._attachment(a["source"])} for a in item["attachments"]]
        return self.json(item)

    def _attachment(self, source: str) -> str:
        """An attachment's content: text as the run's placeholders leave it, else its hash."""
        assert self.allure_dir is not None
        data = (self.allure_dir / source).read_bytes()
        try:
            return self.text(data.decode("utf-8"))
        except UnicodeDecodeError:
            return "sha256:" + hashlib.sha256(data).hexdigest()

    @staticmethod
    def _dump(data: Any) -> str:
        return json.dumps(data, indent=1, ensure_ascii=False, sort_keys=True)


def _identity(result: dict) -> str:
    parameters = ",".join(f"{p['name']}={p['value']}" for p in result.get("parameters", []))
    return f"{result.get('fullName', result['name'])} [{result.get('historyId', '')}] ({parameters})"


def differences(a: Side, b: Side, compared: list[str] | None = None) -> list[str]:
    """One unified diff per file that differs (an empty list: the outputs are the same); the
    names of the files compared are added to `compared` when given."""
    pairs = [(a.run_files(), b.run_files())]
    if a.allure_dir is not None and b.allure_dir is not None:
        pairs.append((a.allure_files(), b.allure_files()))
    found = []
    for mine, theirs in pairs:
        if compared is not None:
            compared += sorted(set(mine) | set(theirs))
        for name in sorted(set(mine) | set(theirs)):
            left, right = mine.get(name, "<missing>"), theirs.get(name, "<missing>")
            if left != right:
                diff = difflib.unified_diff(left.splitlines(), right.splitlines(), f"A {name}", f"B {name}", lineterm="")
                found.append("\n".join(list(diff)[:60]))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_a", type=Path)
    parser.add_argument("run_b", type=Path)
    parser.add_argument("--allure", nargs=2, type=Path, metavar=("ALLURE_A", "ALLURE_B"))
    args = parser.parse_args(argv)
    allure_a, allure_b = args.allure or (None, None)
    problems = [f"{run}: not a run folder (no results.json)" for run in (args.run_a, args.run_b) if not (run / "results.json").is_file()]
    problems += [f"--allure: {folder}: not a folder" for folder in args.allure or () if not folder.is_dir()]
    if problems:
        print(f"same_outputs.py: {problems[0]}", file=sys.stderr)
        return 2
    compared: list[str] = []
    found = differences(Side(args.run_a, allure_a), Side(args.run_b, allure_b), compared)
    for diff in found:
        print(diff)
    print(f"{len(found)} of {len(compared)} files differ" if found else f"all {len(compared)} files the same")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())

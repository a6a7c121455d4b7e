"""``ledger lm-eval``: lm-evaluation-harness tasks against retrofitted checkpoints at loop T, written as a release.

Each model (an ``ledger export`` folder, or a base folder read once) runs the tasks through lm-eval's own
``simple_evaluate`` with ``arms.harness.HarnessModel``; lm-eval's results and per-sample logs are kept as it
returns them (``lm-eval/<model>/``). From the samples this writes what ``ledger import`` reads:

    rows/<task>.jsonl              one line per document: the prompt the models read, the choices, the answer
    readings/<model>/<task>.jsonl  the model's prediction at its loop (and each choice's log-likelihood)
    release.yaml                   the release mapping over those files

so that claims (paired exact, non-inferiority, accuracy) are judged by the ledger on the same row ids for
every model. Correctness is recomputed on import from prediction and answer; each readings line also keeps
lm-eval's own metric, and a disagreement between the two stops the command (``HarnessError``).

Multiple choice: choices are labelled A, B, C, ... in lm-eval's order; the prediction is the choice of
highest log-likelihood (the first of a tie, as lm-eval's ``acc``). Generation: the prediction is lm-eval's
filtered response and the answer its target, both normalised as the task's ``exact_match`` metric says
(``regexes_to_ignore``, ``ignore_case``, ``ignore_punctuation``). A task with several filters (gsm8k's
strict and flexible extraction) is read through its first, as lm-eval's results table lists it first. A base
folder is read once (loop 1) whatever ``--loops`` says; groups and tags are refused: name their tasks.
"""

from __future__ import annotations

import json
import re
import shutil
import string
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

LABELS = string.ascii_uppercase


class HarnessError(ValueError):
    """A battery that cannot be run or written as asked (one line, exit 2)."""


@dataclass
class BatterySummary:
    out: Path
    release: str
    tasks: dict[str, int] = field(default_factory=dict)  # task -> documents
    accuracy: dict[tuple[str, str], tuple[int, int]] = field(default_factory=dict)  # (model, task) -> (k, n)


def parse_models(values: list[str]) -> dict[str, str]:
    """``NAME=FOLDER`` pairs, in order; a name becomes the arm's name in the ledger."""
    models: dict[str, str] = {}
    for value in values:
        name, sep, path = value.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z0-9_.-]+", name) or not path:
            raise HarnessError(f"--model {value!r}: give NAME=FOLDER (NAME of letters, digits, _ . -)")
        if name in models:
            raise HarnessError(f"--model {name!r} is given twice")
        if not Path(path).is_dir():
            raise HarnessError(f"--model {name}: folder {path} not found")
        models[name] = path
    if not models:
        raise HarnessError("name at least one --model NAME=FOLDER")
    return models


def run_battery(
    models: dict[str, str],
    tasks: list[str],
    out: Path,
    *,
    loops: int | Sequence[int] = 1,
    include_path: str | None = None,
    limit: int | None = None,
    num_fewshot: int | None = None,
    batch_size: int = 8,
    device: str = "cpu",
    release: str = "lm-eval",
) -> BatterySummary:
    """Run every task on every model and write the release folder (whole, or not at all). ``loops``: the loop
    count, or a sweep of them (an exported recurrent model read at each; a base once, at loop 1): one reading per
    model, task and loop, so that a claim pairs one arm's rows at two test recurrences."""
    sweep = [loops] if isinstance(loops, int) else list(loops)
    if out.exists():
        raise HarnessError(f"{out} exists: choose a new --out folder")
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    from arms.harness import HarnessModel

    manager = TaskManager(include_path=include_path) if include_path else TaskManager()
    unknown = [task for task in tasks if task not in manager.all_tasks]
    if unknown:
        raise HarnessError(f"unknown lm-eval task {unknown[0]!r} (add its YAML folder with --include-path)")
    for task in tasks:  # before any model runs: groups and tags, and output types not read as evidence
        entry = manager.task_index[task]
        kind = str(getattr(getattr(entry, "kind", None), "name", "TASK"))
        if kind != "TASK":
            raise HarnessError(f"{task!r} is an lm-eval {kind.lower()}, not a task: name its tasks one by one")
        declared = (getattr(entry, "cfg", None) or {}).get("output_type")
        if declared is not None:
            _kind({"task": task, "output_type": declared})
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    try:
        summary = BatterySummary(out=out, release=release)
        rows: dict[str, dict[str, dict]] = {}
        configs: dict[str, dict[str, Any]] = {}
        predictions = []
        read: dict[tuple[str, str], list[dict]] = {}  # (model, task) -> its readings, loop by loop
        for name, path in models.items():
            exported = (Path(path) / "ledger-export.json").is_file()  # a base is read once, at loop 1
            for index, asked in enumerate(sweep if exported else [1]):
                try:
                    model = HarnessModel(path, loops=asked, batch_size=batch_size, device=device)
                except (ValueError, OSError) as exc:
                    raise HarnessError(f"--model {name}: {exc}") from None
                if index and not model.recurrent:
                    break  # a one-pass model: one reading, at loop 1
                loop = model.loops if model.recurrent else 1
                results = simple_evaluate(
                    model=model,
                    tasks=list(tasks),
                    task_manager=manager,
                    limit=limit,
                    num_fewshot=num_fewshot,
                    log_samples=True,
                    bootstrap_iters=0,
                )
                if results is None:
                    raise HarnessError("lm-eval returned no results")
                # one loop: the folders as they always were; a sweep: a folder per loop
                at = Path(name) if len(sweep) == 1 or not model.recurrent else Path(name) / f"loop{loop}"
                _keep_lm_eval_output(partial / "lm-eval" / at, results)
                for task in tasks:
                    config = configs.setdefault(task, results["configs"][task])
                    kept = _one_filter(config, results["samples"][task])
                    readings = [_reading(task, config, sample, loop) for sample in kept]
                    _merge_rows(rows.setdefault(task, {}), readings, name)
                    read.setdefault((name, task), []).extend(r["reading"] for r in readings)
                    hits = sum(bool(r["reading"]["correct_by_lm_eval"]) for r in readings)
                    summary.accuracy[(name if at == Path(name) else f"{name}@{loop}", task)] = (hits, len(readings))
        # a model's readings of a task, every loop of the sweep in one file: one piece of evidence (a checkpoint)
        for (name, task), readings_of in read.items():
            file = Path("readings") / name / f"{task}.jsonl"
            _write_jsonl(partial / file, readings_of)
            loops_read = sorted({reading["loop"] for reading in readings_of})
            predictions.append(_prediction_entry(name, task, loops_read, configs[task], file))
        for task, by_id in rows.items():
            _write_jsonl(partial / "rows" / f"{task}.jsonl", list(by_id.values()))
            summary.tasks[task] = len(by_id)
        mapping = {
            "release": release,
            "source": f"lm-evaluation-harness {_lm_eval_version()} via `ledger lm-eval` (models: "
            + ", ".join(f"{name}={path}" for name, path in models.items())
            + f"; loops {', '.join(str(loop) for loop in sweep)})",
            "root": ".",
            "manifests": [_manifest_entry(task, configs[task]) for task in tasks],
            "predictions": predictions,
        }
        (partial / "release.yaml").write_text(yaml.safe_dump(mapping, sort_keys=False), encoding="utf-8")
        partial.rename(out)
        return summary
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise


def _one_filter(config: dict[str, Any], samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """lm-eval logs each document once per filter: the readings are the task's first filter's (``none``
    where it declares none), as the first line of lm-eval's own results table."""
    declared = [f.get("name") for f in config.get("filter_list") or [] if isinstance(f, dict)]
    chosen = declared[0] if declared else "none"
    kept = [sample for sample in samples if sample.get("filter", "none") == chosen]
    if not kept and samples:
        kept = [sample for sample in samples if sample.get("filter") == samples[0].get("filter")]
    return kept


def _kind(config: dict[str, Any]) -> str:
    kind = config.get("output_type")
    if kind not in ("multiple_choice", "generate_until"):
        raise HarnessError(f"task {config.get('task')!r}: output type {kind!r} is not read as evidence yet")
    return str(kind)


def _reading(task: str, config: dict[str, Any], sample: dict[str, Any], loop: int) -> dict[str, Any]:
    """The row and the reading of one lm-eval sample, and lm-eval's own verdict on it."""
    row_id = str(sample["doc_id"])
    arguments = sample["arguments"]
    context = str(arguments[0][0])
    if _kind(config) == "multiple_choice":
        continuations = [str(argument[1]) for argument in arguments]
        labels = [_label(index) for index in range(len(continuations))]
        gold = _gold(task, row_id, sample["target"], continuations)
        scores = {label: float(resp[0]) for label, resp in zip(labels, sample["filtered_resps"])}
        best = max(range(len(labels)), key=lambda i: (scores[labels[i]], -i))
        row = {"id": row_id, "question": context, "choices": dict(zip(labels, continuations)), "answer": labels[gold]}
        reading = {"id": row_id, "loop": loop, "prediction": labels[best], "scores": scores}
        lm_eval_says = sample.get("acc")
    else:
        normalise = _normaliser(config)
        response = sample["filtered_resps"][0]
        response = response[0] if isinstance(response, list) else response
        row = {"id": row_id, "question": context, "answer": normalise(str(sample["target"]))}
        reading = {"id": row_id, "loop": loop, "prediction": normalise(str(response)), "response": str(response)}
        lm_eval_says = sample.get("exact_match")
    if lm_eval_says is None:
        raise HarnessError(f"task {task!r}: no 'acc' / 'exact_match' metric in lm-eval's sample log")
    if (reading["prediction"] == row["answer"]) != bool(lm_eval_says):
        raise HarnessError(
            f"task {task!r}, document {row_id}: lm-eval scores it {lm_eval_says}, the ledger's reading "
            f"{reading['prediction']!r} vs {row['answer']!r} disagrees"
        )
    reading["correct_by_lm_eval"] = bool(lm_eval_says)
    return {"row": row, "reading": reading}


def _gold(task: str, row_id: str, target: Any, continuations: list[str]) -> int:
    """The index of the right option: lm-eval's target is an index, or the option's text (which the
    continuations carry after the task's target delimiter)."""
    if isinstance(target, int) and 0 <= target < len(continuations):
        return target
    texts = [continuation.strip() for continuation in continuations]
    if isinstance(target, str) and target.strip() in texts:
        return texts.index(target.strip())
    raise HarnessError(f"task {task!r}, document {row_id}: target {target!r} names no single option")


def _normaliser(config: dict[str, Any]):
    """The task's exact_match normalisation, as lm-eval's ``exact_match_hf_evaluate`` applies it."""
    options: dict[str, Any] = next((m for m in config.get("metric_list", []) if m.get("metric") == "exact_match"), {})
    regexes = list(options.get("regexes_to_ignore") or [])
    ignore_case, ignore_punctuation = bool(options.get("ignore_case")), bool(options.get("ignore_punctuation"))
    table = str.maketrans("", "", string.punctuation)

    def normalise(text: str) -> str:
        for pattern in regexes:
            text = re.sub(pattern, "", text)
        if ignore_case:
            text = text.lower()
        if ignore_punctuation:
            text = text.translate(table)
        return text

    return normalise


def _merge_rows(by_id: dict[str, dict], readings: list[dict], model: str) -> None:
    """The rows every model read must be the same rows: same prompt, choices and answer."""
    for item in readings:
        row = item["row"]
        known = by_id.setdefault(row["id"], row)
        if known != row:
            raise HarnessError(f"model {model!r} read document {row['id']} differently from the first model")


def _label(index: int) -> str:
    return LABELS[index] if index < len(LABELS) else f"C{index}"


def _manifest_entry(task: str, config: dict[str, Any]) -> dict[str, Any]:
    fields = {"row_id": "id", "prompt": "question", "answer": "answer"}
    if _kind(config) == "multiple_choice":
        return {
            "id": task,
            "file": f"rows/{task}.jsonl",
            "task": "multiple_choice_qa",
            "surface": "multiple_choice",
            "fields": {**fields, "choices": "choices"},
            "symbols_from": "choices",
        }
    return {
        "id": task,
        "file": f"rows/{task}.jsonl",
        "task": "word_problem",
        "surface": "word_problem",
        "fields": fields,
        "symbols_from": "choices",  # none: a generated answer has no fixed vocabulary
    }


def _prediction_entry(model: str, task: str, loops: list[int], config: dict[str, Any], file: Path) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "arm": model,
        "manifest": task,
        "file": file.as_posix(),
        "prediction": "prediction",
        "loop": "loop",
        "label": f"lm-eval at loop{'s' if len(loops) > 1 else ''} {', '.join(str(loop) for loop in loops)}",
    }
    if _kind(config) == "multiple_choice":
        entry["scores"] = "scores"
    return entry


def _keep_lm_eval_output(folder: Path, results: dict[str, Any]) -> None:
    folder.mkdir(parents=True)
    samples = results.get("samples", {})
    kept = {key: value for key, value in results.items() if key != "samples"}
    (folder / "results.json").write_text(json.dumps(kept, indent=2, default=str) + "\n", encoding="utf-8")
    for task, logged in samples.items():
        _write_jsonl(folder / f"samples_{task}.jsonl", logged)


def _write_jsonl(path: Path, records: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(record, sort_keys=True, default=str, ensure_ascii=False) + "\n" for record in records)
    path.write_text(text, encoding="utf-8")


def _lm_eval_version() -> str:
    from importlib.metadata import version

    return version("lm-eval")

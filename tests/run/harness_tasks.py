"""Small local lm-eval tasks for the harness tests, generated: an ARC-format multiple-choice file and a
GSM8K-format generation file, each with its task YAML (the formats of lm-eval's own arc_easy and gsm8k)."""

from __future__ import annotations

import json
import random
from pathlib import Path

ARC_TASK = """task: {name}
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: multiple_choice
doc_to_text: "Question: {{{{question}}}}\\nAnswer:"
doc_to_target: "{{{{choices.label.index(answerKey)}}}}"
doc_to_choice: "{{{{choices.text}}}}"
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
"""

GSM8K_TASK = """task: {name}
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: generate_until
doc_to_text: "Question: {{{{question}}}}\\nAnswer:"
doc_to_target: "{{{{answer.split('####')[-1].strip()}}}}"
generation_kwargs:
  until: ["\\n", "Question:"]
  do_sample: false
  max_gen_toks: 4
filter_list:
  - name: flexible-extract
    filter:
      - function: regex
        regex_pattern: "(-?[0-9.,]+)"
        group_select: 0
      - function: take_first
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
    ignore_case: true
    ignore_punctuation: false
    regexes_to_ignore: [",", "\\\\$", "\\\\.$"]
"""


def write_tasks(folder: Path, *, documents: int = 12, seed: int = 0) -> dict[str, Path]:
    """Write ``arc_local`` and ``gsm8k_local`` (data and YAML) into ``folder``; return the data files."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    arc, gsm = [], []
    for index in range(documents):
        a, b = rng.randint(1, 9), rng.randint(1, 9)
        values = [a + b] + rng.sample([v for v in range(2, 19) if v != a + b], 3)
        rng.shuffle(values)
        arc.append(
            {
                "id": f"local_{index:03d}",
                "question": f"What is {a} plus {b}?",
                "choices": {"text": [str(v) for v in values], "label": ["A", "B", "C", "D"]},
                "answerKey": "ABCD"[values.index(a + b)],
            }
        )
        gsm.append(
            {"question": f"Ann has {a} apples and gets {b} more. How many now?", "answer": f"{a}+{b}\n#### {a + b}"}
        )
    files = {"arc_local": folder / "arc_local.jsonl", "gsm8k_local": folder / "gsm8k_local.jsonl"}
    for name, records in (("arc_local", arc), ("gsm8k_local", gsm)):
        files[name].write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    (folder / "arc_local.yaml").write_text(ARC_TASK.format(name="arc_local", data=files["arc_local"]), encoding="utf-8")
    (folder / "gsm8k_local.yaml").write_text(
        GSM8K_TASK.format(name="gsm8k_local", data=files["gsm8k_local"]), encoding="utf-8"
    )
    return files

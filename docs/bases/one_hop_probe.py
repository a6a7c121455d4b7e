"""A base's one-hop accuracy on the sentence surfaces, with and without distractor rules (issue #36).

Without distractors a one-hop table holds two rules, the start's and its successor's (which keeps the key, or
whose note points to itself), so the answer is the only name besides the start: a base can read it off without
looking anything up. With distractors every name of the alphabet has a rule, and only a lookup answers.

python docs/bases/one_hop_probe.py bases/tiny-base-skills-v2 [ROWS]
"""

import sys

from arms.bases.corpus import Example
from arms.bases.loading import load_base
from arms.bases.pretrain import lookup_accuracy
from ledger.rows.tasks.rule_chasing import generate_rule_chasing

folder = sys.argv[1]
count = int(sys.argv[2]) if len(sys.argv) > 2 else 256
model, tokenizer = load_base(folder)
model.eval()
print("surface,alphabet,distractors,rows,accuracy")
for surface, alphabet in (("relay", "names"), ("pointer", "names"), ("symbolic", "names"), ("symbolic", "N16")):
    for distractors in (False, True):
        rows = generate_rule_chasing(
            depth_range=(1, 1),
            rows_per_depth=count,
            seed=20261206,
            split=f"probe{surface}{alphabet}{int(distractors)}",
            surface=surface,
            symbols=alphabet,
            distractors=distractors,
        )
        examples = [
            (Example(kind=surface, prompt=r.prompt, answer=" " + r.answer, depth=1), sorted(r.symbols)) for r in rows
        ]
        accuracy = lookup_accuracy(model, tokenizer, examples)
        print(f"{surface},{alphabet},{str(distractors).lower()},{count},{accuracy:.3f}")

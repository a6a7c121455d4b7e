"""Instantiate the phaseA-tiny template: python make.py KEY=VALUE ... (writes tuning + confirmatory)."""
import sys, re
params = dict(a.split("=", 1) for a in sys.argv[1:])
text = open("docs/drafts/phaseA-tiny/phaseA-tiny.template.yaml").read()
for k, v in sorted(params.items(), key=lambda kv: -len(kv[0])):
    text = text.replace(k, v)
conf = text.replace("EVAL", "phaseA_eval")
tune = text.replace("EVAL", "tune").replace("name: phaseA-tiny\n", "name: phaseA-tiny-tuning\npurpose: exploratory\n", 1)
tune = tune.replace("\nclaims:\n  - ../claims/phaseA-tiny.yaml\n", "\n")
tune = re.sub(r"  # 64 rows per depth.*?\n  - \{id: phaseA_eval[^\n]*\n", "  # tuning reads development rows only (role dev, split tune); never the frozen evaluation\n  - {id: tune, role: dev, generator: rule_chasing, surface: symbolic, alphabet: N16, depths: [1, 14], rows_per_depth: 16, seed: 20261130, split: tune}\n", tune, flags=re.S)
out = params.get("OUT", "docs/drafts/phaseA-tiny/out")
import os; os.makedirs(out, exist_ok=True)
open(f"{out}/phaseA-tiny.yaml", "w").write(conf)
open(f"{out}/phaseA-tiny-tuning.yaml", "w").write(tune)

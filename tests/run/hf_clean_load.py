"""Run as a script: read an `ledger export --format hf` folder where the ledger cannot be imported.

    python hf_clean_load.py FOLDER REQUEST.json ANSWER.json

Any import of `ledger` or `arms` fails (a finder ahead of every other refuses them, the editable install's
included), so only torch, transformers and the folder's own modeling file can run. REQUEST holds left-padded
batches (input ids, attention mask, the deepest loop to read) and the token ids to read at the last position;
ANSWER gets, per batch, each loop's logits of those tokens, and a greedy `generate()` beside the same greedy
decoding done by hand with `forward`.
"""

from __future__ import annotations

import importlib.abc
import json
import sys

BLOCKED = ("ledger", "arms")


class _Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"{name} is blocked: the export must load without the ledger")
        return None


def main(folder: str, request_file: str, answer_file: str) -> None:
    sys.meta_path.insert(0, _Refuse())
    import torch
    from transformers import AutoModelForCausalLM

    with open(request_file, encoding="utf-8") as file:
        request = json.load(file)
    model = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True, num_loops=request["num_loops"])
    model.eval()
    tokens = torch.tensor(request["token_ids"])
    batches = []
    with torch.inference_mode():
        for batch in request["batches"]:
            ids, mask = torch.tensor(batch["input_ids"]), torch.tensor(batch["attention_mask"])
            by_loop = [
                model(input_ids=ids, attention_mask=mask, num_loops=t).logits[:, -1][:, tokens].tolist()
                for t in range(1, batch["loops"] + 1)
            ]
            batches.append(by_loop)
        prompt = torch.tensor([request["batches"][0]["input_ids"][0]])
        prompt = prompt[:, torch.tensor(request["batches"][0]["attention_mask"][0]).bool()]
        generated = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=4, do_sample=False)
        by_hand = prompt
        for _ in range(4):
            following = model(input_ids=by_hand).logits[:, -1].argmax(-1, keepdim=True)
            by_hand = torch.cat([by_hand, following], dim=1)
    answer = {
        "class": type(model).__name__,
        "num_loops": model.config.num_loops,
        "batches": batches,
        "generated": generated.tolist(),
        "by_hand": by_hand.tolist(),
        "imported": sorted({name.split(".")[0] for name in sys.modules} & set(BLOCKED)),
    }
    with open(answer_file, "w", encoding="utf-8") as file:
        json.dump(answer, file)


if __name__ == "__main__":
    main(*sys.argv[1:4])

"""GPU check: training as a run trains, the recurrent forward's cost, the adapter loop, loop-1 identity and a run
end to end, on one GPU.

    bash bench/gpu_check.sh                          # on a CUDA machine: the whole check, < 8 min
    python bench/gpu_check.py --device cpu --small   # a dry run of every code path here (~1 min)
    python bench/gpu_check.py --json FILE --repeats N --skip-e2e --dtype bfloat16

Needs only this repository (no hub, no internet): every model is a random-init
Qwen2.5-0.5B-shaped Qwen2 (``arms.bases.loading.qwen25_05b_config``) and part 4 runs a
protocol whose base is shipped under bases/ (or built in, with --small). Prints ONE table:

0. train    -- arm A of Phase A (split bridge, whole block, intermediate supervision, AdamW at 1e-5) trained
   through ``ArmRuntime.train_stage`` in bf16 on left-padded batches of depths 1-8, its block compiled on a GPU
   as ``ledger run`` does: the step time, the peak memory of this process (the one that trains), host syncs
   per step (``arms.host_syncs``; on CUDA torch's sync debug mode too) and the share the first update moved;
1. forward  -- ``RecurrentLM`` cut at (6, 18) with a split bridge, bf16 (fp32 on the CPU unless
   --dtype), T = 1, 4, 8, 12: the latency of the final readout (prelude once, block T times, coda
   once, norm + lm_head at the answer position: ``RecurrentLM.forward`` with ``read_at=[T]``, left-padded rows)
   over the base's forward with ``logits_to_keep=1``,
   against (1+T)/2 (``inference_cost_ratio(24, 12, T)``), batch 1 and 32 x 128 tokens;
2. adapter  -- ``AdapterRecurrentLM`` (LoRA rank 16) unmerged and merged (``use_merged_block``)
   over the full-block loop at T = 4, 8;
3. identity -- fp32: loop 1 of the retrofit (and of the adapter arm) vs the base's logits,
   bit for bit (``torch.equal``, the CPU tests' criterion);
4. e2e      -- ``ledger run protocols/phaseA-tiny.yaml --arms A --device cuda`` into a fresh
   SQLite ledger: the hash chain, every checkpoint re-hashed, the device recorded in their meta,
   and ``ledger verify`` of the claims (reported as it exits: only arm A ran). On a GPU it runs
   after parts 1-3; on the CPU beside them (so a dry run takes ~40 s, not ~65 s).

Parts 0-3 live in bench/gpu_check_parts.py; part 4, the table and the command line here.

Latency: ``arms.device.synchronize`` before and after every call, warmups first, median of
N repeats, round-robin over the variants of a part (as bench/loop_cost.py). A part that fails
prints a FAIL row with its reason; the exit code is 1 if any check failed, 2 if the device is
not there, 0 otherwise.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

if TYPE_CHECKING:
    from gpu_check_parts import Settings

ROOT = Path(__file__).resolve().parents[1]

TIME_BUDGET_S = 450  # the wrapper's `timeout 480` kills the process; the table must be out before
COLUMNS = ("part", "check", "measured", "expected", "status", "note")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--device", default="cuda", help="cuda (default), cuda:N or cpu")
    ap.add_argument(
        "--small", action="store_true", help="reduced sizes (hidden 64, vocab 1024, prompt 16, batch 1/4, smoke.yaml)"
    )
    ap.add_argument("--skip-e2e", action="store_true", help="leave out part 4 (ledger run + verify)")
    ap.add_argument("--repeats", type=int, default=None, help="timed repeats per variant (default 20; --small 3)")
    ap.add_argument("--json", metavar="FILE", help="also write the table and every figure as JSON")
    ap.add_argument(
        "--dtype",
        choices=("bfloat16", "float32"),
        help="dtype of parts 1-2 (default bfloat16 on a GPU, float32 on the CPU, where bf16 is ~3x slower)",
    )
    args = ap.parse_args(argv)
    if args.repeats is not None and args.repeats < 1:
        ap.error("--repeats must be >= 1")
    return args


def header(settings: Any, part_info: dict[str, dict], started: str) -> dict[str, Any]:
    import peft
    import torch
    import transformers
    from gpu_check_parts import SPLIT, model_config

    from arms.device import device_name

    device = settings.device
    dtype = str(settings.dtype).replace("torch.", "")
    config = model_config(settings.small)
    info: dict[str, Any] = {
        "started": started,
        "device": str(device),
        "device_name": device_name(device),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "transformers": transformers.__version__,
        "peft": peft.__version__,
        "tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
        "dtype": {"train": "bfloat16", "forward": dtype, "adapter": dtype, "identity": "float32"},
        "lora_dtype": part_info.get("adapter", {}).get("data", {}).get("lora_dtype"),
        "model": {
            "layers": config.num_hidden_layers,
            "hidden": config.hidden_size,
            "intermediate": config.intermediate_size,
            "heads": config.num_attention_heads,
            "kv_heads": config.num_key_value_heads,
            "vocab": config.vocab_size,
            "attention": "sdpa",
            "split": list(SPLIT),
        },
        "prompt_tokens": settings.seq,
        "batches": list(settings.batches),
        "warmup": settings.warmup,
        "repeats": settings.repeats,
        "small": settings.small,
        "wall_s": {name: round(p["wall_s"], 2) for name, p in part_info.items()},
        "e2e_beside_parts": device.type == "cpu" and "e2e" in part_info,
    }
    if device.type == "cuda":
        info["gpu_memory_gib"] = round(torch.cuda.get_device_properties(device).total_memory / 2**30, 1)
        info["peak_memory_gib"] = {name: p.get("peak_gib") for name, p in part_info.items()}
    return info


def header_lines(info: dict[str, Any]) -> list[str]:
    m = info["model"]
    memory = f" ({info['gpu_memory_gib']} GiB)" if "gpu_memory_gib" in info else ""
    walls = ", ".join(f"{k} {v:.1f} s" for k, v in info["wall_s"].items())
    peaks = info.get("peak_memory_gib")
    lora = f" (LoRA tensors {info['lora_dtype']})" if info.get("lora_dtype") else ""
    lines = [
        f"# gpu_check  {info['started']}  device {info['device']}: {info['device_name']}{memory}",
        f"# python {info['python']}  torch {info['torch']}  CUDA {info['cuda']}  cuDNN {info['cudnn']}  "
        f"transformers {info['transformers']}  peft {info['peft']}",
        f"# dtype: train bfloat16 (fp32 masters), forward + adapter {info['dtype']['forward']}{lora}, identity float32; "
        f"tf32 matmul {info['tf32_matmul']}; sdpa",
        f"# model: random-init Qwen2.5-0.5B shape{' (--small)' if info['small'] else ''}: {m['layers']} layers, "
        f"hidden {m['hidden']}, intermediate {m['intermediate']}, heads {m['heads']}/{m['kv_heads']} kv, vocab "
        f"{m['vocab']}; split (a,b)=({m['split'][0]},{m['split'][1]})",
        f"# input: {info['prompt_tokens']}-token prompt, batch {' and '.join(map(str, info['batches']))}; "
        f"warmup {info['warmup']}, median of {info['repeats']} repeats, round-robin, synchronised per call",
        "# timed readouts: base = Qwen2ForCausalLM forward with logits_to_keep=1; rlm / lora / merged = final "
        "readout only (prelude once, block T times, bridge before loops >= 2, coda once, lm_head at the answer)",
        f"# wall: {walls}"
        + (" (on the CPU e2e runs beside parts 1-3)" if info["e2e_beside_parts"] else "")
        + (f"; peak GPU memory GiB {peaks}" if peaks else ""),
    ]
    return lines


def render(rows: list[dict[str, str]]) -> list[str]:
    widths = {c: max(len(c), *(len(r[c]) for r in rows)) for c in COLUMNS[:-1]}
    line = lambda r: " | ".join(r[c].ljust(widths[c]) for c in COLUMNS[:-1]) + " | " + r["note"]
    head = line({c: c for c in COLUMNS})
    return [head, "-" * len(head), *(line(r) for r in rows)]


# ----------------------------------------------------------------------------- 4. end to end


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:160] if lines else ""


class LedgerCommand:
    """``python -m ledger ARGS`` started in the background, its output in files (no pipe to fill up)."""

    def __init__(self, args: list[str], settings: Settings, workdir: Path, name: str):
        env = dict(os.environ)
        if settings.device.type == "cpu":  # a CPU dry run: one thread per process (no oversubscription)
            env.setdefault("OMP_NUM_THREADS", "1")
        self.args, self.files = args, (workdir / f"{name}.stdout", workdir / f"{name}.stderr")
        self.started = time.perf_counter()
        with self.files[0].open("w") as out, self.files[1].open("w") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "ledger", *args], stdout=out, stderr=err, cwd=ROOT, env=env
            )

    def wait(self, until: float) -> tuple[int, str, str, float]:
        """(exit code, stdout, stderr, seconds since the start); killed past `until` (perf_counter)."""
        try:
            rc = self.proc.wait(timeout=max(1.0, until - time.perf_counter()))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            seconds = time.perf_counter() - self.started
            raise TimeoutError(
                f"ledger {self.args[0]} still running after {seconds:.0f} s (time budget): killed"
            ) from None
        out, err = (f.read_text(encoding="utf-8", errors="replace") for f in self.files)
        return rc, out, err, time.perf_counter() - self.started


class E2E:
    """Part 4: `ledger run PROTOCOL --arms A --device DEV` into a fresh SQLite ledger (``start``: on the
    CPU it runs beside parts 1-3; on a GPU after them, so it cannot disturb their timing), then
    (``finish``) its chain, checkpoints, their recorded device, and `ledger verify` of the claims."""

    def __init__(self, settings: Settings, workdir: Path, deadline: float):
        self.settings, self.workdir, self.deadline = settings, workdir, deadline
        self.url = f"sqlite:///{workdir / 'gpu.db'}"
        self.run: LedgerCommand | None = None

    def start(self) -> E2E:
        if self.run is None:
            out = str(self.workdir / "out")
            args = ["run", self.settings.protocol, "--arms", "A", "--device", str(self.settings.device)]
            args += ["--db", self.url, "--out", out, "--no-progress"]
            self.run = LedgerCommand(args, self.settings, self.workdir, "run")
        return self

    def finish(self) -> tuple[list[dict], dict]:
        from gpu_check_parts import check, row

        from arms.device import device_name
        from ledger.audit.integrity import Integrity
        from ledger.store import open_store

        self.start()
        assert self.run is not None
        settings, url, dev = self.settings, self.url, str(self.settings.device)
        claims = "claims/" + Path(settings.protocol).name
        rc, out, err, seconds = self.run.wait(self.deadline - 15)
        ran = rc == 0
        data: dict[str, Any] = {"protocol": settings.protocol, "url": url, "run_rc": rc, "run_s": seconds}
        note = f"exit {rc}: " + ("ok" if ran else _last_line(err) or _last_line(out))
        rows = [check("e2e", f"ledger run {settings.protocol} --arms A", ran, f"{seconds:.1f} s", "exit 0", note)]
        if not (self.workdir / "gpu.db").is_file():  # a failed run's ledger is still checked, if there is one
            data.update(chain_ok=False, checkpoints_rehash=False, meta_ok=False, passed=False)
            return rows, data

        with open_store(url, create=False) as store:
            chain = store.verify_chain()
            checkpoints = store.rows_of("checkpoints", arm="A")
            integrity = Integrity(store)
            findings = [(c["sha256"][:12], integrity.checkpoint_status(c["sha256"])) for c in checkpoints]
            bad = [(sha, finding) for sha, finding in findings if finding is not None]
            metas = [json.loads(c["meta_json"] or "{}") for c in checkpoints]
        data["chain_ok"] = chain.ok
        measured = "ok" if chain.ok else f"{len(chain.problems)} problems"
        rows.append(check("e2e", "hash chain verifies", chain.ok, measured, "ok", chain.summary()[:160]))
        data["checkpoints"] = len(checkpoints)
        data["checkpoints_rehash"] = bool(checkpoints) and not bad
        note = f"{bad[0][0]}: {bad[0][1]}" if bad else "every file re-hashes to its recorded sha256"
        note = note if checkpoints else "no checkpoint of arm A recorded"
        measured = f"{len(checkpoints) - len(bad)}/{len(checkpoints)}"
        rows.append(check("e2e", "checkpoints of arm A re-hash", data["checkpoints_rehash"], measured, "all", note))
        want = (dev, device_name(settings.device))
        seen = sorted({(m.get("device"), m.get("device_name")) for m in metas}, key=str)
        data["meta"] = [{"device": d, "device_name": n} for d, n in seen]
        data["meta_ok"] = bool(metas) and seen == [want]
        measured = "; ".join(f"{d} / {n}" for d, n in seen) or "none"
        note = f"dtype {', '.join(sorted({str(m.get('dtype')) for m in metas}))}"
        rows.append(check("e2e", "checkpoint meta: device / name", data["meta_ok"], measured, " / ".join(want), note))

        verify = LedgerCommand(["verify", claims, "--db", url, "--json"], settings, self.workdir, "verify")
        rc, out, err, _ = verify.wait(self.deadline - 5)
        data["verify_rc"] = rc
        try:
            report = json.loads(out)
        except json.JSONDecodeError:
            report = None
        if report is None:
            status, note = "FAIL", f"no JSON report: {_last_line(err) or _last_line(out)}"
        else:
            outcomes = {c["claim_id"]: (c["outcome"], c["integrity"]) for c in report.get("claims", [])}
            data["claims"] = {k: {"outcome": o, "integrity": i} for k, (o, i) in outcomes.items()}
            tampered = [k for k, (_, i) in outcomes.items() if i == "tampered"]
            status = "FAIL" if report.get("chain_problems") or tampered or rc == 4 else "NOTE"
            counts = Counter(o for o, _ in outcomes.values())
            note = ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "no claims"
            note += f"; integrity: {', '.join(sorted({i for _, i in outcomes.values()})) or '-'}"
            unverifiable = [k for k, (o, _) in outcomes.items() if o == "unverifiable"]
            if unverifiable and rc:
                note += (
                    f"; only arm A ran, so {', '.join(unverifiable)} are unverifiable (other arms): exit {rc} expected"
                )
        data["verify_ok"] = status != "FAIL"
        data["wall_s"] = time.perf_counter() - self.run.started  # from the start of `ledger run`
        rows.append(row("e2e", f"ledger verify {claims}", f"exit {rc}", "see note", status, note))
        data["passed"] = all(r["status"] != "FAIL" for r in rows)
        return rows, data


def run_part(name: str, fn, part_info: dict[str, dict], rows: list[dict], cuda: bool) -> None:
    import torch
    from gpu_check_parts import row

    print(f"[gpu_check] {name} ...", file=sys.stderr, flush=True)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    info: dict[str, Any] = {"ok": False, "error": None, "data": {}}
    try:
        part_rows, data = fn()
        rows.extend(part_rows)
        info.update(ok=bool(data.get("passed", True)), data=data)
    except Exception as exc:  # a part's failure is a FAIL row; the table still prints
        reason = f"{type(exc).__name__}: {exc}".strip().splitlines()[0][:200]
        info["error"] = reason
        info["traceback"] = traceback.format_exc()
        rows.append(row(name, f"{name} part", "-", "-", "FAIL", reason))
    info["wall_s"] = info["data"].get("wall_s", time.perf_counter() - start)  # e2e: from its own start
    if cuda:
        info["peak_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    part_info[name] = info
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    print(
        f"[gpu_check] {name}: {'ok' if info['ok'] else 'FAIL'} in {info['wall_s']:.1f} s", file=sys.stderr, flush=True
    )


NEEDED = ("torch", "transformers", "peft", "safetensors", "yaml", "sqlalchemy")


def missing_modules() -> list[str]:
    import importlib.util

    return [name for name in NEEDED if importlib.util.find_spec(name) is None]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    t0 = time.perf_counter()
    deadline = t0 + TIME_BUDGET_S
    missing = missing_modules()
    if missing:
        print(
            f"gpu_check: {sys.executable} lacks {', '.join(missing)}: install the lock with "
            "`VENV=.venv-cuda bash requirements/install.sh --cuda` (a GPU) or `bash requirements/install.sh` (the CPU), "
            "or run bench/gpu_check.sh, which picks or makes the environment",
            file=sys.stderr,
        )
        return 2
    import torch

    from arms.device import DeviceUnavailable, resolve_device

    try:
        device = resolve_device(args.device)
    except DeviceUnavailable as exc:
        hint = "; for a dry run on the CPU: --device cpu --small" if args.device.startswith("cuda") else ""
        print(f"gpu_check: no GPU: {exc}{hint}" if hint else f"gpu_check: {exc}", file=sys.stderr)
        return 2

    from gpu_check_parts import Settings, part_adapter, part_forward, part_identity, part_train

    cuda = device.type == "cuda"
    if not cuda:
        torch.set_num_threads(1)  # a CPU dry run: stable and not fighting other jobs over the cores
    else:
        torch.cuda.set_device(device)
    default_repeats = 3 if args.small else 20
    dtype = getattr(torch, args.dtype or ("bfloat16" if cuda else "float32"))
    warmup = 3 if cuda else 1
    settings = Settings(device, args.small, args.repeats or default_repeats, warmup, dtype)
    started = f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M UTC}"
    rows: list[dict] = []
    part_info: dict[str, dict] = {}
    workdir = Path(tempfile.mkdtemp(prefix="gpu_check_"))
    e2e = None if args.skip_e2e else E2E(settings, workdir, deadline)
    try:
        if e2e is not None and not cuda:
            e2e.start()  # a CPU dry run: the ledger subprocess runs beside parts 1-3 (on a GPU: after them)
        run_part("train", lambda: part_train(settings), part_info, rows, cuda)
        run_part("forward", lambda: part_forward(settings), part_info, rows, cuda)
        run_part("adapter", lambda: part_adapter(settings), part_info, rows, cuda)
        run_part("identity", lambda: part_identity(settings), part_info, rows, cuda)
        if e2e is not None:
            run_part("e2e", e2e.finish, part_info, rows, cuda)
    finally:  # interrupted: no ledger subprocess left behind
        if e2e is not None and e2e.run is not None and e2e.run.proc.poll() is None:
            e2e.run.proc.kill()
    failed = [r["part"] + ": " + r["check"] for r in rows if r["status"] == "FAIL"]
    if any(r["part"] == "e2e" and r["status"] == "FAIL" for r in rows):
        rows.append(
            {"part": "e2e", "check": "ledger kept for a look", "measured": "-", "expected": "-"}
            | {"status": "NOTE", "note": str(workdir)}
        )
    else:
        shutil.rmtree(workdir, ignore_errors=True)

    info = header(settings, part_info, started)
    info["wall_s"]["total"] = round(time.perf_counter() - t0, 2)
    exit_code = 1 if failed else 0
    print("\n".join(header_lines(info)))
    print()
    print("\n".join(render(rows)))
    print()
    print(
        "status: ok = measured; PASS/FAIL = a check; NOTE = reported as is. forward expected = (1+T)/2 "
        "(inference_cost_ratio(24, 12, T)); adapter expected = the FLOP ratio."
    )
    print(
        f"result: {'FAIL (' + str(len(failed)) + ' failed: ' + '; '.join(failed) + ')' if failed else 'all checks passed'}"
    )
    if args.json:
        parts = {k: {kk: vv for kk, vv in v.items() if kk != "traceback"} for k, v in part_info.items()}
        report = {"header": info, "rows": rows, "parts": parts, "failed": failed, "exit_code": exit_code}
        Path(args.json).write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
    for name, part in part_info.items():
        if part.get("traceback"):
            print(f"\n# traceback of part {name}:\n{part['traceback']}", file=sys.stderr)
    return exit_code


if __name__ == "__main__":
    sys.exit(main())

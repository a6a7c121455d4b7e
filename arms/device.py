"""Where an arm runs: the device choice, its description for the evidence, synchronised timing.

Every GPU-specific branch of the project lives here, small and named, so that the rest
of the code runs the same path on every device (``device=cpu`` in the tests exercises
all of it but these few lines):

* ``resolve_device("auto" | "cpu" | "cuda" | "cuda:N")`` -- ``auto`` takes the first CUDA
  device when there is one, else the CPU; asking for CUDA where there is none is a
  ``DeviceUnavailable`` (one line, exit 2), never a silent fall back to the CPU.
* ``attention_for(device, autocast)`` -- SDPA on a GPU (fused flash / memory-efficient kernels);
  on the CPU under a base's bf16 autocast, transformers' eager attention (at this project's lengths the CPU's
  bf16 flash kernel is the slower one: ``bench/mfu.py``); else the implementation the model was built with
  (what the pins were measured on).
* ``hold_frozen_in(model, autocast)`` -- under autocast, the frozen linear weights held in its dtype once,
  where autocast would cast them again at every use (the same arithmetic: one cast, done early).
* ``synchronize(device)`` -- wait for queued kernels, so a latency measures the work.
* ``describe(device, dtype)`` -- what evidence and checkpoints record: device, its name, dtype.
* ``deterministic_settings(device)`` -- on a GPU, torch's deterministic algorithms (warning where an
  operation has none), cuDNN deterministic and not benchmarking, cuBLAS's fixed workspace; on the CPU
  nothing (its kernels already reproduce a run bit for bit on one machine: ``docs/reproducibility.md``).

Numerics (the seeds' practice): weights in the protocol's dtype (bf16 for the paper's
bases); the reader's scores, margins and every loss are computed in fp32 from the
logits (``.float()`` before softmax/log-softmax), and the loop-1 identity gate is
checked in fp32 -- a bf16 forward differs from fp32 by rounding, not by a changed route.
"""

from __future__ import annotations

import contextlib
import functools
import platform
import re
from pathlib import Path
from typing import Any

import torch

DEVICE_CHOICES = ("auto", "cpu", "cuda", "cuda:N")
_CHOICE = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")


class DeviceUnavailable(ValueError):
    """The device asked for is not on this machine (or is not a device name)."""


def resolve_device(choice: str | None = "auto") -> torch.device:
    """The torch device for a ``--device`` / protocol ``device`` value."""
    choice = (choice or "auto").strip()
    if not _CHOICE.match(choice):
        raise DeviceUnavailable(f"device {choice!r} is not one of auto, cpu, cuda, cuda:N")
    if choice == "auto":
        return torch.device("cuda:0") if torch.cuda.is_available() else torch.device("cpu")
    if choice == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise DeviceUnavailable(
            f"device {choice!r} asked for, but this torch ({torch.__version__}) sees no CUDA GPU: "
            "install the CUDA build (README: 'On a GPU') or run with --device cpu"
        )
    device = torch.device(choice if ":" in choice else "cuda:0")
    if device.index is not None and device.index >= torch.cuda.device_count():
        raise DeviceUnavailable(f"device {choice!r} asked for, but this machine has {torch.cuda.device_count()} GPU(s)")
    return device


def attention_for(device: torch.device, autocast: str | None = None) -> str | None:
    """The attention implementation to run a base with on ``device`` (None: the model's own): SDPA on a GPU;
    transformers' eager attention under a CPU autocast, where the bf16 flash kernel's backward is the slower
    one at these lengths (``bench/mfu.py``'s ``autocast bare`` against ``autocast``)."""
    if device.type == "cuda":
        return "sdpa"
    return "eager" if autocast is not None else None


def place(model: torch.nn.Module, device: torch.device, autocast: str | None = None) -> torch.nn.Module:
    """Move a loaded base to ``device``, with the attention ``attention_for`` names for it there."""
    attention = attention_for(device, autocast)
    setter = getattr(model, "set_attn_implementation", None)  # a transformers model
    if attention is not None and callable(setter):
        setter(attention)
    return model.to(device)


def synchronize(device: torch.device | None) -> None:
    """Wait for the device's queued work (a no-op on the CPU)."""
    if device is not None and device.type == "cuda":
        torch.cuda.synchronize(device)


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return _cpu_name()


@functools.cache  # read once per process: every evidence write asks
def _cpu_name() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine() or "cpu"


def deterministic_settings(device: torch.device, environ: dict[str, str] | None = None) -> None:
    """The settings that make a GPU run repeat itself where torch can: called before the first CUDA kernel
    (cuBLAS reads its workspace variable when it starts). SDPA's fused backward kernels have no
    deterministic variant: with ``warn_only`` torch says so once instead of refusing to train."""
    if device.type != "cuda":
        return
    import os

    env = os.environ if environ is None else environ
    env.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False


def describe(device: torch.device, dtype: torch.dtype | str, autocast: str | None = None) -> dict[str, Any]:
    """What a checkpoint and a run record of where they were computed (``autocast`` only where one ran)."""
    described = {
        "device": str(device),
        "device_name": device_name(device),
        "dtype": str(dtype).replace("torch.", ""),
    }
    if autocast is not None:
        described["autocast"] = autocast
    return described


def numerics(device: torch.device, autocast: str | None) -> contextlib.AbstractContextManager[Any]:
    """The forwards' numerics of a base (``BaseModelSpec.autocast``): ``torch.autocast`` in that dtype on
    ``device``, or nothing (the weights' own dtype)."""
    if autocast is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=getattr(torch, autocast))


def hold_frozen_in(model: torch.nn.Module, autocast: str | None) -> int:
    """Under a base's autocast, hold each frozen ``nn.Linear`` weight in the autocast dtype (how many were cast).

    Autocast casts a weight at every use, and keeps the cast for the step only where the weight is trained: a
    frozen prelude, coda and head were cast again at every loop and every readout (the tied 49,152-row head of
    SmolLM2 among them). Cast once here, the matrix multiplies see the same bf16 operands. Left as they
    are: embeddings (not an autocast operation; a tied head is given its own weight), norms, and the base layers
    under a PEFT adapter, whose merged copy must add the delta to the full-precision weight."""
    if autocast is None:
        return 0
    from peft.tuners.tuners_utils import BaseTunerLayer

    dtype = getattr(torch, autocast)
    under_adapter = {
        id(child) for module in model.modules() if isinstance(module, BaseTunerLayer) for child in module.modules()
    }
    cast = 0
    for module in model.modules():
        if isinstance(module, torch.nn.Linear) and id(module) not in under_adapter:
            weight = module.weight
            if not weight.requires_grad and weight.dtype != dtype and weight.is_floating_point():
                module.weight = torch.nn.Parameter(weight.detach().to(dtype), requires_grad=False)
                cast += 1
    return cast


def model_device(model: torch.nn.Module) -> torch.device:
    """The device a model's parameters are on (the CPU for a model without parameters)."""
    for parameter in model.parameters():
        return parameter.device
    return torch.device("cpu")


def free_memory_bytes(device: torch.device) -> int:
    """Memory free for new tensors on ``device``: the GPU's free memory, or the host's available memory."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    import os

    return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))

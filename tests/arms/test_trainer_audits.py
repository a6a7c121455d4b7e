"""The two audits on a REAL tiny RecurrentLM through the trainer's own loss.

- Finite-difference gradient audit (arms.train.audits.gradient_audit) on the actual trainable
  tensors - bridge LN, P_p, P_h (+ bias), g and block weights - in float64, with the loss
  being exactly what arms.train.step.take_step optimises
  (arms.train.recurrent.recurrent_loss), for every objective. The bridge is moved off its
  identity init first (at init z = h, so g and the LN get exactly zero gradient; that
  is checked too).
- The published bugs are planted and must be caught: a tensor attached to the model but
  never called by the forward, a deep copy of the bridge (the audit of the published
  code perturbed a copy), and a frozen prelude weight claimed trainable.
- Update audit (arms.train.optim.update_audit) on the real bridge: P_p and P_h as separate
  tensors in separate AdamW groups with a 10x lr ratio pass; a "slice-scaled lr" (a
  gradient hook scaling half of P_h's rows by 0.1) fails.
"""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("tokenizers")
nn = torch.nn

from arms.bases.loading import tiny_qwen2_config
from arms.model.recurrent import RecurrentLM
from arms.train.objectives import IGNORE_INDEX
from arms.train.optim import build_optimizer
from arms.train.recurrent import (
    accuracy_by_loop,
    evaluate_loops,
    make_recurrent_batch,
    objective_loss,
    per_loop_accuracy,
    recurrent_loss,
)
from arms.train.step import take_step
from ledger.reader.shared import Reader
from ledger.rows.manifest import Row
from tests.arms.gradient_audit import gradient_audit
from tests.arms.update_audit import UpdateAuditError, update_audit

pytestmark = pytest.mark.models

SYMBOLS = list("ABCDEFGH")
PERM = dict(zip(SYMBOLS, "CEGBHADF"))
HIDDEN = 32


def word_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = ["[PAD]", "[UNK]", "Start", "Answer", ":", "then"] + SYMBOLS
    raw = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=raw, unk_token="[UNK]", pad_token="[PAD]")


def make_row(start: str, depth: int, prompt: str | None = None) -> Row:
    path = [start]
    for _ in range(depth):
        path.append(PERM[path[-1]])
    return Row(
        row_id=f"a_d{depth}_{start}",
        task="rule_chasing",
        surface="symbolic",
        depth=depth,
        prompt=prompt or f"Start {start}",
        answer=path[-1],
        path=path,
        symbols=SYMBOLS,
        table=dict(PERM),
        start=start,
    )


def setup(dtype=torch.float64, seed: int = 0, perturb_bridge: bool = True):
    """A tiny split-bridge RecurrentLM (prelude 0, block 1-2, coda 3), a reader and a
    mixed-depth, left-padded batch (prompts of different lengths)."""
    from transformers import Qwen2ForCausalLM

    tok = word_tokenizer()
    reader = Reader(SYMBOLS, tok)
    torch.manual_seed(seed)
    config = tiny_qwen2_config(
        vocab_size=len(tok),
        hidden_size=HIDDEN,
        intermediate_size=64,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        pad_token_id=tok.pad_token_id,
        bos_token_id=None,
        eos_token_id=None,
    )
    # sdpa, not eager: transformers' eager attention in float64 turns a left-padded row
    # into NaN (finfo(float64).min + score overflows to -inf; an all-masked pad query
    # row softmaxes to NaN, and 0 * NaN reaches the real positions through V).
    config._attn_implementation = "sdpa"
    model = RecurrentLM.build(Qwen2ForCausalLM(config), split=(1, 3), bridge="split").to(dtype).eval()
    if perturb_bridge:
        gen = torch.Generator().manual_seed(seed + 1)
        br = model.bridge
        with torch.no_grad():
            for p in (br.P_p.weight, br.P_h.weight, br.P_h.bias, br.norm.bias):
                p.add_(0.05 * torch.randn(p.shape, generator=gen, dtype=p.dtype))
            br.norm.weight.add_(0.1 * torch.randn(br.norm.weight.shape, generator=gen, dtype=dtype))
            br.g.fill_(0.8)
    rows = [make_row("A", 1), make_row("B", 2, "Start B then B"), make_row("C", 3), make_row("D", 4, "Start D then")]
    batch = make_recurrent_batch(rows, reader)
    assert bool((batch.attention_mask == 0).any())  # really left-padded
    return model, reader, batch


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def float64_exact(monkeypatch):
    """Qwen2RMSNorm computes in float32 whatever its input dtype (it casts to float32 and
    back), so a float64 model still has float32 islands and the central difference is
    float32-noisy (rel err ~1e-3 observed). Patch it to the same formula in the input
    dtype for the gradient audits (identical for float32 inputs). The rotary cos/sin are
    also computed in float32, but they are constants: the loss stays a smooth float64
    function of every parameter."""
    from transformers.models.qwen2 import modeling_qwen2

    def forward(self, hidden_states):
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        return self.weight * (hidden_states * torch.rsqrt(variance + self.variance_epsilon))

    monkeypatch.setattr(modeling_qwen2.Qwen2RMSNorm, "forward", forward)


BRIDGE = [
    "bridge.norm.weight",
    "bridge.norm.bias",
    "bridge.P_p.weight",
    "bridge.P_h.weight",
    "bridge.P_h.bias",
    "bridge.g",
]
BLOCK = [
    "base.model.layers.1.self_attn.q_proj.weight",
    "base.model.layers.1.self_attn.v_proj.bias",
    "base.model.layers.2.mlp.down_proj.weight",
    "base.model.layers.2.input_layernorm.weight",
]


def _named(model, names):
    params = dict(model.named_parameters())
    return {n: params[n] for n in names}


@pytest.mark.parametrize("objective,weight", [("intermediate", None), ("outcome", None), ("anneal", 0.3)])
def test_gradient_audit_on_the_trainers_loss(objective, weight, float64_exact):
    model, _, batch = setup()

    def loss_fn():
        return recurrent_loss(model, batch, objective=objective, anneal_weight=weight).loss

    report = gradient_audit(loss_fn, _named(model, BRIDGE + BLOCK), n_probes=3, eps=1e-4, seed=0)
    print(f"\n[{objective}] " + report.summary())
    assert report.passed, report.summary()
    assert report.rtol == 1e-4  # float64 tolerance: every tensor really is float64
    for name in BRIDGE + BLOCK:
        assert any(p.autograd != 0.0 for p in report.tensors[name].probes), name


def test_gradient_audit_at_identity_init_sees_the_dead_gate_and_norm(float64_exact):
    """At the bridge's init z = h: g and LN get exactly zero gradient (arms/train/audits.py notes)."""
    model, _, batch = setup(perturb_bridge=False)
    report = gradient_audit(lambda: recurrent_loss(model, batch).loss, _named(model, BRIDGE), eps=1e-4)
    print("\n" + report.summary())
    statuses = {n: t.status for n, t in report.tensors.items()}
    assert statuses["bridge.g"] == "zero_gradient"
    assert statuses["bridge.norm.weight"] == "zero_gradient"
    assert statuses["bridge.norm.bias"] == "zero_gradient"
    for n in ("bridge.P_p.weight", "bridge.P_h.weight", "bridge.P_h.bias"):
        assert statuses[n] == "ok", report.summary()


def test_gradient_audit_catches_the_planted_bugs(float64_exact):
    model, _, batch = setup()
    # (1) a fresh Linear attached to the model (so named_parameters lists it) but never called
    model.rogue = nn.Linear(HIDDEN, HIDDEN).double()
    # (2) the published bug: the audit perturbs a copy of the bridge, not the one the forward reads
    shadow = copy.deepcopy(model.bridge)
    # (3) a frozen prelude weight claimed as trainable
    prelude_q = model.base.model.layers[0].self_attn.q_proj.weight
    prelude_q.requires_grad_(False)

    params = _named(model, ["bridge.P_h.weight", "rogue.weight"])
    params["shadow_bridge.P_h.weight"] = shadow.P_h.weight
    params["base.model.layers.0.self_attn.q_proj.weight"] = prelude_q
    report = gradient_audit(lambda: recurrent_loss(model, batch).loss, params, eps=1e-4)
    print("\n" + report.summary())
    assert not report.passed
    assert report.failures == {
        "rogue.weight": "bypassed",
        "shadow_bridge.P_h.weight": "bypassed",
        "base.model.layers.0.self_attn.q_proj.weight": "frozen",
    }
    assert report.tensors["bridge.P_h.weight"].status == "ok"


def test_gradient_audit_with_truncated_backprop_flags_the_no_grad_loop(float64_exact):
    """no_grad_loops=1: loop 1 (the identity route through prelude and block) runs without
    gradient, so the prelude - still in the graph through the bridge's LN(p) - is fine,
    but a block weight's loop-1 contribution is invisible to autograd: the FD disagrees."""
    model, _, batch = setup()
    names = ["bridge.P_p.weight", "base.model.layers.1.mlp.down_proj.weight"]

    def loss_fn():
        return recurrent_loss(model, batch, no_grad_loops=1).loss

    report = gradient_audit(loss_fn, _named(model, names), eps=1e-4)
    print("\n" + report.summary())
    assert report.tensors["bridge.P_p.weight"].status == "ok"
    assert report.tensors["base.model.layers.1.mlp.down_proj.weight"].status == "mismatch"


# ----------------------------------------------------------------------------- update audit


def _step_fn(model, batch, opt):
    def step():
        take_step(opt, lambda: recurrent_loss(model, batch).loss, [p for p in model.parameters() if p.requires_grad])

    return step


def test_update_audit_separate_bridge_tensors_pass_with_adamw():
    model, _, batch = setup(dtype=torch.float32)
    br = model.bridge
    block = [p for n, p in model.named_parameters() if n.startswith("base.model.layers.1.")]
    opt = build_optimizer(
        {"P_p": [br.P_p.weight], "P_h": [br.P_h.weight, br.P_h.bias], "block": block},
        kind="adamw",
        lr=1e-3,
        weight_decay=0.0,
        group_lr_multipliers={"P_p": 0.1},
    )
    assert {g["name"]: g["lr"] for g in opt.param_groups} == pytest.approx({"P_p": 1e-4, "P_h": 1e-3, "block": 1e-3})
    report = update_audit(
        model,
        _step_fn(model, batch, opt),
        {
            "P_p": ["bridge.P_p.weight"],
            "P_h": ["bridge.P_h.weight", "bridge.P_h.bias"],
            "block": [n for n, _ in model.named_parameters() if n.startswith("base.model.layers.1.")],
        },
        {"P_p": 1e-4, "P_h": 1e-3, "block": 1e-3},
        tolerance=0.25,
        optimizer=opt,
    )
    print("\n" + report.summary())
    assert report.passed
    assert report.groups["P_p"].realised_ratio == pytest.approx(0.1, rel=0.05)


def test_update_audit_catches_a_slice_scaled_lr_on_p_h():
    """'lr x 0.1 on the top half of P_h' via a gradient hook: Adam cancels the factor."""
    model, _, batch = setup(dtype=torch.float32)
    w = model.bridge.P_h.weight
    half = w.shape[0] // 2
    scale = torch.ones(w.shape[0], 1)
    scale[:half] = 0.1
    handle = w.register_hook(lambda g: g * scale)
    try:
        opt = build_optimizer({"P_h": [w]}, kind="adamw", lr=1e-3, weight_decay=0.0)
        with pytest.raises(UpdateAuditError) as err:
            update_audit(
                model,
                _step_fn(model, batch, opt),
                {
                    "P_h_top": [("bridge.P_h.weight", slice(0, half))],
                    "P_h_bottom": [("bridge.P_h.weight", slice(half, None))],
                },
                {"P_h_top": 1e-4, "P_h_bottom": 1e-3},
                tolerance=0.25,
                optimizer=opt,
            )
    finally:
        handle.remove()
    report = err.value.report
    print("\n" + report.summary())
    assert report.failures == ["P_h_top"]
    assert report.groups["P_h_top"].realised_ratio == pytest.approx(1.0, rel=0.05)


# ----------------------------------------------------------------------------- trainer API


def test_make_recurrent_batch_uses_the_reader():
    _, reader, batch = setup(dtype=torch.float32, perturb_bridge=False)
    rows = [make_row("A", 1), make_row("B", 2, "Start B then B"), make_row("C", 3), make_row("D", 4, "Start D then")]
    enc = reader.encode(rows, return_tensors="pt")
    assert torch.equal(batch.input_ids, enc["input_ids"]) and torch.equal(batch.attention_mask, enc["attention_mask"])
    ids = reader.symbol_token_ids
    assert batch.symbol_token_ids.tolist() == [ids[s] for s in reader.symbols]
    idx = {s: i for i, s in enumerate(reader.symbols)}
    for b, row in enumerate(rows):
        assert batch.depths[b] == row.depth and batch.answers[b] == idx[row.answer]
        assert batch.path_targets[b, : row.depth].tolist() == [idx[s] for s in row.path[1:]]
        assert (batch.path_targets[b, row.depth :] == IGNORE_INDEX).all()
    assert batch.max_depth == 4 and batch.row_ids == tuple(r.row_id for r in rows)
    bad = make_row("A", 2).model_copy(update={"path": ["A", "C"]})
    with pytest.raises(ValueError, match="path has 2 symbols"):
        make_recurrent_batch([bad], reader)
    with pytest.raises(ValueError, match="tokenizer"):
        make_recurrent_batch(rows, Reader(SYMBOLS))


def test_train_step_objectives_and_errors():
    model, _, batch = setup(dtype=torch.float32)
    with torch.no_grad():
        logits = recurrent_loss(model, batch).logits
    inter = objective_loss(logits, batch, "intermediate")
    outc = objective_loss(logits, batch, "outcome")
    assert float(objective_loss(logits, batch, "anneal", 1.0)) == pytest.approx(float(inter))
    assert float(objective_loss(logits, batch, "anneal", 0.0)) == pytest.approx(float(outc))
    assert logits.shape == (4, 4, len(SYMBOLS))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with pytest.raises(ValueError, match="anneal_weight"):
        recurrent_loss(model, batch, objective="anneal")
    with pytest.raises(ValueError, match="loops"):
        recurrent_loss(model, batch, loops=3)
    # every cell in a no-grad loop: nothing is updated
    before = [p.detach().clone() for p in model.parameters()]
    step = take_step(
        opt, lambda: recurrent_loss(model, batch, objective="outcome", no_grad_loops=4).loss, model.parameters()
    )
    assert not step.updated and all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    outputs = []

    def loss_fn():
        outputs.append(recurrent_loss(model, batch, objective="anneal", anneal_weight=0.5, loops=5, no_grad_loops=1))
        return outputs[-1].loss

    step = take_step(opt, loss_fn, model.parameters())
    accuracy, cells = per_loop_accuracy(outputs[-1].logits.detach(), batch)
    assert outputs[-1].loops == 5 and cells == [4, 3, 2, 1, 0]
    assert accuracy[4] is None and all(0 <= a <= 1 for a in accuracy[:4])
    assert step.updated and step.grad_norm > 0 and step.loss > 0


def test_evaluate_loops_is_the_readers_decode_of_the_full_logits():
    model, reader, _ = setup(dtype=torch.float32)
    rows = [make_row(s, d) for s, d in zip("ABCDE", (1, 2, 3, 4, 2))]
    model.train()
    forced = evaluate_loops(model, rows, reader, batch_size=2)
    assert model.training  # mode restored
    assert [len(r) for r in forced] == [1, 2, 3, 4, 2]
    fixed = evaluate_loops(model, rows, reader, loops=6, batch_size=3)
    assert all(len(r) == 6 for r in fixed)
    enc = reader.encode(rows, return_tensors="pt")
    with torch.no_grad():
        full = model.eval()(enc["input_ids"], enc["attention_mask"], loops=6)
    for b, row in enumerate(rows):
        for t in range(1, 7):
            target = None if t <= row.depth else fixed[b][t - 1].target
            ref = reader.decode_scores(full[t - 1, b], row, loop=t, target=target, form="vocab")
            assert fixed[b][t - 1].prediction == ref.prediction and fixed[b][t - 1].correct == ref.correct
            if t <= row.depth:
                assert forced[b][t - 1].prediction == ref.prediction
                assert ref.target == row.path[t]
        # the continuation target of loop depth+1 is f(answer)
        assert fixed[b][row.depth].target == PERM[row.answer]
    acc = accuracy_by_loop(forced)
    assert set(acc) == {1, 2, 3, 4}


def test_micro_batches_accumulate_to_the_whole_batch_step():
    """take_step over micro-batch losses (each at weight 1/k) moves the weights as one step on the mean loss."""
    from arms.train.step import take_step

    torch.manual_seed(0)
    inputs, targets = torch.randn(8, 5), torch.randn(8, 1)
    whole, parts = torch.nn.Linear(5, 1), torch.nn.Linear(5, 1)
    parts.load_state_dict(whole.state_dict())

    def loss(model, rows):
        return torch.nn.functional.mse_loss(model(inputs[rows]), targets[rows])

    one = take_step(torch.optim.SGD(whole.parameters(), lr=0.1), lambda: loss(whole, slice(0, 8)), whole.parameters())
    four = take_step(
        torch.optim.SGD(parts.parameters(), lr=0.1),
        [lambda i=i: loss(parts, slice(2 * i, 2 * i + 2)) for i in range(4)],
        parts.parameters(),
    )
    assert torch.allclose(one.loss, four.loss) and torch.allclose(one.grad_norm, four.grad_norm)
    for a, b in zip(whole.parameters(), parts.parameters(), strict=True):
        assert torch.allclose(a, b, atol=1e-6)

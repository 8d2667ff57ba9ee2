"""The LLM kernel suite: every kernel shape of a TinyLlama-1.1B and a Qwen2.5-7B decoder layer
at seq 32, 128 and 512, derived from the published configs in deplokit.frontend.presets.

Names are `op.model[.proj].sSEQ`, as in the seeds' 84-shape suite (`matmul.qwen.kv_proj.s128`,
`rmsnorm.tinyllama.s32`), so results compare entry by entry; deplokit adds the decoder's other
kernels (`rope`, the residual `add`, Qwen's q/k/v `matmul_bias`). Each entry builds its
program and seeded inputs only when asked, so listing the suite allocates nothing.

Every shape comes twice: in FP32, and in bf16 (`<name>.bf16`: inputs and weights bf16, stored in
half and computed in FP32 registers, compared against eager in bf16, cuBLAS on a device; see
docs/precision.md).

Programs (weights are inputs, so every entry is one self-contained kernel program):
  matmul       x @ w                       q/kv/o/gate/up/down projections
  matmul_bias  x @ w + b                   Qwen2's biased q and k/v projections
  matmul_add   x @ w + residual            o and down projections with the residual add
  rmsnorm      F.rms_norm(x, (H,), w, eps)
  rope         x * cos + rotate_half(x) * sin          on q: (1, heads, S, head_dim)
  softmax      softmax(scores, -1)         scores: (1, heads, S, S)
  sdpa         causal F.scaled_dot_product_attention, grouped kv heads (enable_gqa)
  naive_attn   softmax(q @ k^T / sqrt(d)) @ v, kv heads = heads, no mask (the seeds' form)
  silu_mul     silu(gate) * up             SwiGLU
  silu_mul_matmul  (silu(gate) * up) @ w_down
  add          x + residual
  moe          a Mixtral-8x7B sparse block (router, top-2, grouped SwiGLU experts, combine):
               x (1, S, H), router (E, H), gate_up (E, 2I, H), down (E, H, I); docs/moe.md
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from ..errors import DeplokitError
from ..frontend.presets import PRESETS, ModelPreset

SEQS = (32, 128, 512)
SUITES = ("llm",)
# Each shape's dtypes, and the suffix an entry's name takes in each.
DTYPES = {"float32": "", "bfloat16": ".bf16"}


def short_name(preset: ModelPreset) -> str:
    """`tinyllama`, `qwen`: the leading letters of the model's hub name, lower-cased."""
    return re.match(r"[A-Za-z]+", preset.name.split("/")[-1]).group().lower()


@dataclass(frozen=True)
class SuiteEntry:
    name: str
    op: str
    model: str                              # the preset's hub name
    seq: int
    shapes: tuple[tuple[int, ...], ...]     # input shapes, in argument order
    eps: float = 0.0                        # rmsnorm's epsilon (the preset's)
    dtype: str = "float32"                  # every input's (float32 or bfloat16)
    top_k: int = 0                          # moe: experts per token

    def shape_text(self) -> str:
        return " x ".join("(" + ",".join(map(str, s)) + ")" for s in self.shapes)

    def program(self):
        """The function of this entry's inputs that deplokit, eager and torch.compile run."""
        from .programs import entry_program  # torch loads here: listing the suite stays instant
        return entry_program(self)

    def eager_ways(self) -> dict:
        """The ways torch eager can run this entry, by name, the suite's program first: the
        eager time is the fastest of them (runner.run_entry says which). Causal GQA SDPA in
        FP32 runs with `enable_gqa=True` or with K/V repeated to the query heads: the SDPA
        backends differ in which of the two they take, so both are timed."""
        if self.op != "sdpa":
            return {"eager": self.program()}
        from .programs import sdpa_repeated_kv
        return {"enable_gqa=True": self.program(), "K/V repeated": sdpa_repeated_kv}

    def inputs(self, seed: int = 0, device="cpu", empty: bool = False) -> tuple:
        """Seeded torch inputs (`empty`: uninitialised, for compiling only); see programs.entry_inputs."""
        from .programs import entry_inputs
        return entry_inputs(self, seed, device, empty)


def model_entries(p: ModelPreset, seqs=SEQS, dtypes=tuple(DTYPES)) -> list[SuiteEntry]:
    """Every kernel shape of one decoder layer of `p`, at each sequence length, in each of
    `dtypes` (the FP32 entries first, then the same shapes in bf16)."""
    m, H, I, nh, kvh, d = short_name(p), p.hidden, p.intermediate, p.heads, p.kv_heads, p.head_dim
    q_out, kv_out = nh * d, kvh * d
    projs = {"q_proj": (H, q_out), "kv_proj": (H, kv_out), "o_proj": (q_out, H),
             "gate_proj": (H, I), "up_proj": (H, I), "down_proj": (I, H)}
    out: list[SuiteEntry] = []

    def add(op, name, S, *shapes, **kw):
        out.append(SuiteEntry(f"{op}.{m}.{name + '.' if name else ''}s{S}", op, p.name, S, tuple(shapes), **kw))
    for S in seqs:
        for proj, (k, n) in projs.items():
            add("matmul", proj, S, (1, S, k), (k, n))
    for S in seqs:
        add("rmsnorm", "", S, (1, S, H), (H,), eps=p.rms_eps)
    for S in seqs:
        add("softmax", "", S, (1, nh, S, S))
    for S in seqs:
        add("silu_mul", "", S, (1, S, I), (1, S, I))
    for S in seqs:
        add("sdpa", "", S, (1, nh, S, d), (1, kvh, S, d), (1, kvh, S, d))
    for S in seqs:
        add("naive_attn", "", S, (1, nh, S, d), (1, nh, S, d), (1, nh, S, d))
    for S in seqs:
        for proj in ("o_proj", "down_proj"):
            k, n = projs[proj]
            add("matmul_add", proj, S, (1, S, k), (k, n), (1, S, n))
    for S in seqs:
        add("silu_mul_matmul", "", S, (1, S, I), (1, S, I), (I, H))
    for S in seqs:
        add("rope", "", S, (1, nh, S, d), (S, d), (S, d))
    for S in seqs:
        add("add", "", S, (1, S, H), (1, S, H))
    if p.qkv_bias:
        for S in seqs:
            for proj in ("q_proj", "kv_proj"):
                k, n = projs[proj]
                add("matmul_bias", proj, S, (1, S, k), (k, n), (n,))
    return [dataclasses.replace(e, name=e.name + DTYPES[dt], dtype=dt) for dt in dtypes for e in out]


@dataclass(frozen=True)
class MoeShape:
    """A published mixture-of-experts config: the sizes of one sparse block."""
    name: str
    hidden: int
    intermediate: int
    experts: int
    top_k: int


# mistralai/Mixtral-8x7B-v0.1's config.json: hidden_size 4096, intermediate_size 14336,
# num_local_experts 8, num_experts_per_tok 2
MOE_SHAPES = (MoeShape("mistralai/Mixtral-8x7B-v0.1", 4096, 14336, 8, 2),)


def moe_entries(m: MoeShape, seqs=SEQS, dtypes=tuple(DTYPES)) -> list[SuiteEntry]:
    """The sparse block of `m` at each sequence length (`moe.mixtral.s128`), in each dtype."""
    short = re.match(r"[A-Za-z]+", m.name.split("/")[-1]).group().lower()
    H, I, E = m.hidden, m.intermediate, m.experts
    return [SuiteEntry(f"moe.{short}.s{S}{DTYPES[dt]}", "moe", m.name, S,
                       ((1, S, H), (E, H), (E, 2 * I, H), (E, H, I)), dtype=dt, top_k=m.top_k)
            for dt in dtypes for S in seqs]


def suite_entries(suite: str = "llm", presets=None) -> tuple[SuiteEntry, ...]:
    """The entries of `suite`, model by model in PRESETS order."""
    if suite not in SUITES:
        raise DeplokitError(f"unknown suite {suite!r}; suites: {', '.join(SUITES)}")
    moe = [e for m in MOE_SHAPES for e in moe_entries(m)] if presets is None else []
    presets = PRESETS.values() if presets is None else presets
    entries = [e for p in presets for e in model_entries(p)] + moe
    seen = [e.name for e in entries]
    dupes = sorted({n for n in seen if seen.count(n) > 1})
    if dupes:
        raise DeplokitError(f"suite {suite}: repeated entry names {', '.join(dupes)}")
    return tuple(entries)


def select(entries, patterns) -> tuple[SuiteEntry, ...]:
    """Entries whose name contains any of `patterns` (all when there is none)."""
    if not patterns:
        return tuple(entries)
    chosen = tuple(e for e in entries if any(p in e.name for p in patterns))
    if not chosen:
        raise DeplokitError(f"no suite entry matches {', '.join(patterns)}; see `deplokit bench --suite llm --list`")
    return chosen


def entry(name: str, suite: str = "llm") -> SuiteEntry:
    for e in suite_entries(suite):
        if e.name == name:
            return e
    raise DeplokitError(f"no entry {name!r} in suite {suite}; see `deplokit bench --suite {suite} --list`")


def format_list(entries) -> str:
    w = max((len(e.name) for e in entries), default=4)
    lines = [f"{'name':<{w}}  {'op':<15}  input shapes"]
    lines += [f"{e.name:<{w}}  {e.op:<15}  {e.shape_text()}" for e in entries]
    lines.append(f"{len(entries)} shapes")
    return "\n".join(lines) + "\n"

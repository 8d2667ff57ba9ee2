"""Whether a flash kernel's two products run on tensor cores (FlashAttention-2 on mma.sync
m16n8k16), decided by fuse_attention (its `mma` knob) and recorded on the plan
(FlashPlan.mma: deplokit.ir.flash_mma.FlashMma, printed on the plan's line); the lowering
(flash_mma_lower.py) reads it. Where it does not apply the kernel keeps its FFMA schedule
(flash_tile.py) and the trace says why.

It applies to a flash kernel whose query, key and value are the same half dtype (bf16 or
fp16: products of halves are exact, the sums accumulate in FP32 as before) on sm_80+, with
head_dim and the value's width multiples of 16 (whole k steps, whole ldmatrix.x4 pairs), a
query axis (a decode row would leave 15 of a warp's 16 rows idle), one key range (not
flash-decoding's split) and a score that is the dot product's sum through elementwise
computes (a scale, masks) and loads of a mask's operands indexed by the query row, head and
key (a generation prefill's position tables, a bool mask: each lane loads its score
elements' values). What changes in the numbers: P is rounded to half before
P @ V (as FlashAttention does), and each lane sums its part of a row before the quad adds them.
"""
from __future__ import annotations

from ...ir.flash_mma import Access, FlashMma
from ...ir.index import Gather
from ...ir.loop_ir import Accumulate, Compute, Load, Loop, Store, index_vars, walk
from ...ir.tensor_ir import CONVERT_OP
from ...ir.types import HALF_DTYPES

KINDS = {"bfloat16": "bf16", "float16": "f16"}
MMA_KEY_TILE = 16         # one k step of P @ V: the two 16 x 8 score tiles are one A fragment
MAX_WARPS = 8
# tensors the score may read per element (a mask's operands), as the lowering loads them
SCORE_LOAD_DTYPES = ("float32", "int64", "int32", "bool")


def mma_default(ir, target) -> str:
    """On for sm_80+ (mma.sync with bf16/f16 operands), where it applies."""
    return "half" if target is not None and target.sm >= 80 else "off"


def plan_mma(kernel, parts, plan, types, target) -> FlashMma | str:
    """The tensor-core record for the flash kernel (attention_loop.flash_kernel), or why not."""
    if target is None or target.sm < 80:
        return f"mma.sync m16n8k16 needs sm_80+ (target {getattr(target, 'name', 'none')})"
    rows, keys, dot, q, k, v = parts
    dtypes = {types[ld.tensor].dtype for ld in (q, k, v)}
    if len(dtypes) != 1 or next(iter(dtypes)) not in HALF_DTYPES:
        return f"its query, key and value are {', '.join(sorted(dtypes))}, not one half dtype"
    kind = KINDS[next(iter(dtypes))]
    if plan.splits > 1 or keys.stop is not None:
        return "the keys are split over blocks (flash-decoding)"
    if not plan.query:
        return "one query row (decode): a warp's 16 rows would be 15 idle"
    col = [s for s in keys.body if isinstance(s, Loop)][-1]
    if dot.extent % 16 or col.extent % 16:
        return f"head_dim {dot.extent} / value width {col.extent} not a multiple of 16"
    for ld in (q, k, v):
        if any(isinstance(atom, Gather) for e in ld.index for atom, _ in e.terms):
            return f"{ld.tensor} is read through a gather"
        if types[ld.tensor].numel >= 2 ** 31:
            return f"{ld.tensor} has 2**31 elements or more"
    if not _plain_dot(dot, q, k):
        return "the dot product is not two half loads, a multiply and a sum"
    acc = next(s.acc for s in dot.body if isinstance(s, Accumulate))
    local = {b.name for b in kernel.locals}
    m_name, l_name, o_name = (b.name for b in kernel.locals)
    after_dot = keys.body[keys.body.index(dot) + 1:]
    first_local = next(i for i, s in enumerate(after_dot) if isinstance(s, Load) and s.tensor in local)
    score = after_dot[:first_local]
    row_vars = {lp.var for lp in rows} | {keys.var}
    for s in score:
        if isinstance(s, Load):     # a mask's operand (the static cache's positions): per (row, key)
            why = _score_load_reason(s, local, row_vars, types)
            if why:
                return why
        elif not isinstance(s, Compute):
            return "the score is more than elementwise computes and loads of the dot product"
    x = next((s.args[1] for s in after_dot if isinstance(s, Compute) and s.op == "maximum"), None)
    if x is None:
        return "no running max"
    row_body = rows[-1].body
    epilogue = row_body[row_body.index(keys) + 1:]
    if not _plain_epilogue(epilogue, local, o_name):
        return "the output row is not one loop of computes and a store"
    heads = plan.heads if plan.group > 1 else ""
    row_warps = max(1, min(plan.query_tile // 16, MAX_WARPS // max(1, plan.group)))
    if plan.group > MAX_WARPS:
        return f"{plan.group} heads a block: more than {MAX_WARPS} warps"
    out = next(s for s, _ in walk(epilogue) if isinstance(s, Store))
    if types[out.tensor].numel >= 2 ** 31:
        return f"{out.tensor} has 2**31 elements or more"
    return FlashMma(kind, MMA_KEY_TILE, row_warps, plan.group, tuple((lp.var, lp.extent) for lp in rows),
                    plan.query, heads, (keys.var, keys.extent), (dot.var, dot.extent), (col.var, col.extent),
                    _access(q, types), _access(k, types), _access(v, types), tuple(score), acc, x,
                    tuple(epilogue), (m_name, l_name, o_name), plan.causal)


def _score_load_reason(ld: Load, local: set, row_vars: set, types) -> str:
    """'' when the score may read `ld` per score element (each lane loads its elements' values
    from global memory), else why not."""
    if ld.tensor in local or types[ld.tensor].dtype not in SCORE_LOAD_DTYPES:
        return f"the score reads {ld.tensor} ({types[ld.tensor].dtype}), not a float32, integer or bool tensor"
    if any(isinstance(atom, Gather) for e in ld.index for atom, _ in e.terms):
        return f"the score reads {ld.tensor} through a gather"
    if not index_vars(ld.index) <= row_vars:
        return f"the score reads {ld.tensor} along more than the query row, head and key"
    if types[ld.tensor].numel >= 2 ** 31:
        return f"{ld.tensor} has 2**31 elements or more"
    return ""


def _access(ld: Load, types) -> Access:
    return Access(ld.tensor, ld.index, tuple(types[ld.tensor].shape))


def _plain_dot(dot: Loop, q: Load, k: Load) -> bool:
    body = dot.body
    converts = {s.dst: s.args[0] for s in body if isinstance(s, Compute) and s.op == CONVERT_OP}
    muls = [s for s in body if isinstance(s, Compute) and s.op == "multiply"]
    accs = [s for s in body if isinstance(s, Accumulate)]
    return (len(body) == 2 + len(converts) + 2 and len(muls) == 1 and len(accs) == 1
            and accs[0].reduction == "sum" and accs[0].value == muls[0].dst
            and {converts.get(a) for a in muls[0].args} == {q.dst, k.dst})


def _plain_epilogue(body, local: set, o_name: str) -> bool:
    loops = [s for s in body if isinstance(s, Loop)]
    if len(loops) != 1 or body[-1] is not loops[0]:
        return False
    for s in body[:-1]:     # the row's running max and sum, and values of them (a masked row's test)
        if not (isinstance(s, Compute) or (isinstance(s, Load) and s.tensor in local and s.tensor != o_name)):
            return False
    inner = loops[0].body
    stores = [s for s in inner if isinstance(s, Store)]
    return (len(stores) == 1 and not any(isinstance(s, Loop) for s in inner)
            and all(isinstance(s, (Compute, Store)) or (isinstance(s, Load) and s.tensor in local) for s in inner)
            and loops[0].var in index_vars(stores[0].index))


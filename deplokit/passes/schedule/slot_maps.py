"""008's slot maps: which output element (within the block tile) slot r of a thread owns,
per register layout. Quads of 4 adjacent elements are one LDS.128 of a fragment.

    strided      r*T + t                       (the article's)
    contiguous   t*R + r
    quads        N: t*4 + (r//4)*4T + r%4; M strided (A read along k: nvcc merges 4 unrolled
                 k steps into one LDS.128), or in quads too when A is staged k-major
    warps        each warp owns a contiguous sub-tile of the block tile: its 32 lanes are
                 LM x LN (4 x 8, or 8 x 4 when 4 threads run along N), a lane's slots are
                 quads inside the warp tile (l*4 + (r//4)*4L + r%4), the warps tile the block
                 tile (T_N / LN of them along N). A warp then reads LM distinct A quads and
                 LN distinct B quads per k: few rows, one LDS.128 per quad, no bank conflict.
"""
from __future__ import annotations

from ...ir.index import floordiv, mod, var

QUAD = 4                                 # floats in one LDS.128
WARP = 32


def quad_slots(lane, lanes: int, r, n: int, ranges):
    """Slot r of `lane` (of `lanes`) in quads: lanes of one slot read adjacent 16-byte quads;
    a lane's quads lie lanes*4 apart. Under 4 slots: adjacent slots, lane*n + r."""
    if n % QUAD:
        return lane * n + r
    return lane * QUAD + floordiv(r, QUAD, ranges) * (lanes * QUAD) + mod(r, QUAD, ranges)


def slot_index(layout, role, t, threads, r, n, ranges, m_quads: bool = False):
    """The output element (within the block tile) slot r of thread t owns (strided,
    contiguous, quads)."""
    if layout == "strided" or (layout == "quads" and role == "M" and not m_quads):
        return r * threads + t
    if layout == "contiguous" or n <= QUAD:
        return t * n + r
    return quad_slots(t, threads, r, n, ranges)


def warp_lanes(t_m: int, t_n: int) -> tuple[int, int] | None:
    """(LM, LN): a warp's lanes along M and N, or None when t_m x t_n threads do not split
    into whole warps of LM x LN lanes."""
    ln = 8 if t_n % 8 == 0 else QUAD if t_n % QUAD == 0 else 0
    if not ln or (t_m * t_n) % WARP:
        return None
    lm = WARP // ln
    return (lm, ln) if t_m % lm == 0 else None


def warp_positions(tm_var: str, t_m: int, tn_var: str, t_n: int, ranges):
    """(warp m, lane m, warp n, lane n) of the thread (tm_var, tn_var) of a t_m x t_n block,
    its thread index tm_var * t_n + tn_var (consecutive lanes along N first)."""
    lm_count, ln_count = warp_lanes(t_m, t_n)
    a0, a1 = var(tm_var), var(tn_var)
    tid = a0 * t_n + a1
    ln = mod(a1, ln_count, ranges)
    lm = mod(floordiv(tid, ln_count, ranges), lm_count, ranges)
    if t_n >= WARP:
        w = a0 * (t_n // WARP) + floordiv(a1, WARP, ranges)
    else:
        w = floordiv(a0, WARP // t_n, ranges)
    warps_n = t_n // ln_count
    return floordiv(w, warps_n, ranges), lm, mod(w, warps_n, ranges), ln


def warp_slot_map(m, n, ranges) -> dict:
    """Thread variable -> its slot expression under the warps layout. `m`, `n`: (thread
    variable, threads, register variable or None, slots) of each output axis."""
    (tm_var, t_m, rm, sm), (tn_var, t_n, rn, sn) = m, n
    lm_count, ln_count = warp_lanes(t_m, t_n)
    wm, lm, wn, ln = warp_positions(tm_var, t_m, tn_var, t_n, ranges)
    out_m = wm * (lm_count * sm) + (quad_slots(lm, lm_count, var(rm), sm, ranges) if rm else lm)
    out_n = wn * (ln_count * sn) + (quad_slots(ln, ln_count, var(rn), sn, ranges) if rn else ln)
    return {tm_var: out_m, tn_var: out_n}

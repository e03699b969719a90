"""The Triton kernel of the 02_kimi_linear_decode megakernel: one decode step as a sequence of
stages, each a @triton.jit device function, run by one persistent grid.

On a GPU one launch runs every stage, separated by a software grid barrier; without one (the
CPU, where Triton's interpreter runs the programs one after another and a barrier could never
be passed) the same kernel is launched once per stage, so each barrier becomes a kernel
boundary. Which stage runs where is a table built on the host (``plan``: kind, layer, index
of the layer among its kind), walked by every program between ``s_lo`` and ``s_hi``.

Weights arrive repacked (solution.py, at load time):
- int4 matrices as 32-bit words, each holding 8 consecutive input rows of one output column
  (nibble i = row 8r+i), in tiles of BN columns laid out [tile][group][column][16 words], so
  that one tile's chunk of groups is one contiguous block read with 16-byte loads;
- each (group, column)'s bf16 scale and zero in one int32 (scale bits low, zero bits high).
A nibble q becomes the float 1 + q/16 by placing it in the top mantissa bits under the
exponent of 1.0 (a shift and a masked or, no int-to-float conversion; written out where it
is used, since the interpreter pays for every call of a jit function); per group,
sum_k x_k (q_k - z) s = s (16 sum_k x_k f_k - (16 + z) sum_k x_k), exact math in float32.

Inputs of a matrix-vector product are read from a transposed copy (x_t[i * K/8 + r] = x[8r+i])
so that the 8 nibble positions of a word meet contiguous, vectorizable runs of x.
"""
from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    # No GPU: Triton's interpreter runs the kernels on CPU tensors (read when triton.jit
    # decorates, so before the kernels below are defined).
    os.environ.setdefault("TRITON_INTERPRET", "1")

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

if os.environ.get("TRITON_INTERPRET") == "1":
    from triton.runtime import interpreter as _interpreter

    _patch_tensor = _interpreter._patch_lang_tensor

    def _patch_tensor_index(tensor, scope):
        """Triton 3.6's interpreter holds scalars as 1-element arrays and turns them into
        Python ints (loop bounds) with int(array), which numpy 2.4 refuses for arrays of
        one dimension; .item() takes the element either way."""
        _patch_tensor(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.item()))

    _interpreter._patch_lang_tensor = _patch_tensor_index

    from triton.language import (
        core as _tl_core,  # noqa: F401  (so that a launch patches it too)
        standard as _tl_standard,
    )

    _call = _interpreter.InterpretedFunction.__call__
    _patched_by_launch = (globals(), vars(_tl_standard))

    def _device_call(self, *args, **kwargs):
        """A call of a jit function from another. The interpreter repatches triton.language
        on every such call (a third of a step's time here); a launch of this module's kernel
        has already patched all that this module's functions and Triton's standard library
        (tl.sum, tl.zeros...) use, so for those the repatching is skipped."""
        if not any(self.fn.__globals__ is g for g in _patched_by_launch):
            return _call(self, *args, **kwargs)
        try:
            return self.rewrite()(*args, **kwargs)
        except Exception as exc:
            raise _interpreter.InterpreterError(repr(exc)) from exc

    _interpreter.InterpretedFunction.__call__ = _device_call

# Stage kinds (the plan's first column).
# (constexpr: a Triton kernel may only read globals that are.)
STAGE_KINDS = ("KDA_IN", "KDA_REC", "KDA_OUT", "MOE_IN", "MOE_UP", "MOE_DOWN",
               "MLA_IN", "MLA_ABSORB", "MLA_ATTEND", "MLA_MERGE", "MLA_VALUE", "MLA_OUT")
KDA_IN, KDA_REC, KDA_OUT, MOE_IN, MOE_UP, MOE_DOWN = (tl.constexpr(i) for i in range(6))
MLA_IN, MLA_ABSORB, MLA_ATTEND, MLA_MERGE, MLA_VALUE, MLA_OUT = (tl.constexpr(i) for i in range(6, 12))
NEG = tl.constexpr(-1.0e30)  # a finite minus infinity: fully masked softmax blocks stay NaN-free


# --------------------------------------------------------------------------- #
# building blocks
# --------------------------------------------------------------------------- #
@triton.jit
def _load_chunk(wt_ptr, szt_ptr, g0, BN: tl.constexpr, GC: tl.constexpr):
    """Words [BN, GC, 16] and scale|zero [BN, GC] of groups g0..g0+GC of one tile."""
    n = tl.arange(0, BN)[:, None, None]
    g = g0 + tl.arange(0, GC)[None, :, None]
    j = tl.arange(0, 16)[None, None, :]
    w = tl.load(wt_ptr + (g * BN + n) * 16 + j, eviction_policy="evict_first")
    n2 = tl.arange(0, BN)[:, None]
    g2 = g0 + tl.arange(0, GC)[None, :]
    sz = tl.load(szt_ptr + g2 * BN + n2, eviction_policy="evict_first")
    return w, sz


@triton.jit
def _scale_zero(sz):
    s = (sz << 16).to(tl.float32, bitcast=True)
    z = ((sz >> 16) << 16).to(tl.float32, bitcast=True)
    return s, z


@triton.jit
def _group_sums(xsum, xs_ptr, K8: tl.constexpr, g0, GC: tl.constexpr, SUMS: tl.constexpr):
    """x's sums over groups g0..g0+GC of 128 inputs, [1, GC]: added up from the chunk's
    partial sums ``xsum``, or (SUMS) read from after the K = 8 * K8 inputs at xs_ptr."""
    if SUMS:
        return tl.load(xs_ptr + 8 * K8 + g0 + tl.arange(0, GC))[None, :]
    else:
        return tl.sum(xsum, axis=2)


@triton.jit
def _fma_chunk(acc, w, sz, xs_ptr, K8: tl.constexpr, g0, GC: tl.constexpr, one, SUMS: tl.constexpr = 0):
    """acc[BN, GC] += this chunk's dequantized dot products with x (transposed at xs_ptr).
    SUMS: x's sum over each group of 128 inputs is read where _norm_to_slot left it (right
    after the vector), not added up again by every tile (GROUP_SUMS)."""
    r = (g0 + tl.arange(0, GC))[None, :, None] * 16 + tl.arange(0, 16)[None, None, :]
    t = tl.zeros(w.shape, tl.float32)
    xsum = tl.zeros([1, GC, 16], tl.float32)
    for i in tl.static_range(8):
        xi = tl.load(xs_ptr + i * K8 + r)
        t += xi * (((w << (19 - 4 * i) if 4 * i <= 19 else w >> (4 * i - 19)) & 0x780000)
                   | one).to(tl.float32, bitcast=True)
        if not SUMS:
            xsum += xi
    s, z = _scale_zero(sz)
    return acc + s * (16.0 * tl.sum(t, axis=2) - (16.0 + z) * _group_sums(xsum, xs_ptr, K8, g0, GC, SUMS))


@triton.jit
def _fma_chunk2(acc_a, acc_b, wa, sza, wb, szb, xs_ptr, K8: tl.constexpr, g0, GC: tl.constexpr, one,
                SUMS: tl.constexpr = 0):
    """_fma_chunk for two matrices of the same shape sharing the input (gate and up)."""
    r = (g0 + tl.arange(0, GC))[None, :, None] * 16 + tl.arange(0, 16)[None, None, :]
    ta = tl.zeros(wa.shape, tl.float32)
    tb = tl.zeros(wb.shape, tl.float32)
    xsum = tl.zeros([1, GC, 16], tl.float32)
    for i in tl.static_range(8):
        xi = tl.load(xs_ptr + i * K8 + r)
        ta += xi * (((wa << (19 - 4 * i) if 4 * i <= 19 else wa >> (4 * i - 19)) & 0x780000)
                    | one).to(tl.float32, bitcast=True)
        tb += xi * (((wb << (19 - 4 * i) if 4 * i <= 19 else wb >> (4 * i - 19)) & 0x780000)
                    | one).to(tl.float32, bitcast=True)
        if not SUMS:
            xsum += xi
    xg = _group_sums(xsum, xs_ptr, K8, g0, GC, SUMS)
    sa, za = _scale_zero(sza)
    sb, zb = _scale_zero(szb)
    acc_a += sa * (16.0 * tl.sum(ta, axis=2) - (16.0 + za) * xg)
    acc_b += sb * (16.0 * tl.sum(tb, axis=2) - (16.0 + zb) * xg)
    return acc_a, acc_b


@triton.jit
def _gemv(wt_ptr, szt_ptr, xs_ptr, K8: tl.constexpr, G: tl.constexpr, BN: tl.constexpr, GC: tl.constexpr, one,
          SUMS: tl.constexpr = 0):
    """One tile of y = x @ W (BN columns, all G groups): the next chunk's words are loaded
    while this one's are multiplied."""
    NC: tl.constexpr = G // GC
    acc = tl.zeros([BN, GC], tl.float32)
    w, sz = _load_chunk(wt_ptr, szt_ptr, 0, BN, GC)
    for c in range(1, NC):
        w_next, sz_next = _load_chunk(wt_ptr, szt_ptr, c * GC, BN, GC)
        acc = _fma_chunk(acc, w, sz, xs_ptr, K8, (c - 1) * GC, GC, one, SUMS)
        w = w_next
        sz = sz_next
    acc = _fma_chunk(acc, w, sz, xs_ptr, K8, (NC - 1) * GC, GC, one, SUMS)
    return tl.sum(acc, axis=1)


@triton.jit
def _gemv2(wa_ptr, wb_ptr, sza_ptr, szb_ptr, xs_ptr, K8: tl.constexpr, G: tl.constexpr, BN: tl.constexpr,
           GC: tl.constexpr, one, g_base=0, SUMS: tl.constexpr = 0):
    """_gemv for two matrices of the same layout at the same tile (gate and up), over the G
    groups from g_base (a piece of the tile's inputs; all of them by default)."""
    NC: tl.constexpr = G // GC
    acc_a = tl.zeros([BN, GC], tl.float32)
    acc_b = tl.zeros([BN, GC], tl.float32)
    wa, sza = _load_chunk(wa_ptr, sza_ptr, g_base, BN, GC)
    wb, szb = _load_chunk(wb_ptr, szb_ptr, g_base, BN, GC)
    for c in range(1, NC):
        wa_next, sza_next = _load_chunk(wa_ptr, sza_ptr, g_base + c * GC, BN, GC)
        wb_next, szb_next = _load_chunk(wb_ptr, szb_ptr, g_base + c * GC, BN, GC)
        acc_a, acc_b = _fma_chunk2(acc_a, acc_b, wa, sza, wb, szb, xs_ptr, K8, g_base + (c - 1) * GC, GC, one,
                                   SUMS)
        wa = wa_next
        sza = sza_next
        wb = wb_next
        szb = szb_next
    acc_a, acc_b = _fma_chunk2(acc_a, acc_b, wa, sza, wb, szb, xs_ptr, K8, g_base + (NC - 1) * GC, GC, one,
                               SUMS)
    return tl.sum(acc_a, axis=1), tl.sum(acc_b, axis=1)


@triton.jit
def _dot(a, b, F32: tl.constexpr):
    """a @ b of bf16 blocks, float32 accumulation. F32 (under Triton's interpreter, whose
    tl.dot multiplies the raw bits of bf16 operands): upcast first, the same products."""
    if F32:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
    else:
        return tl.dot(a, b)


@triton.jit
def _bf16(x):
    """float32 rounded to the nearest bfloat16 (ties to even), as float32: where the
    reference holds a bf16 tensor. Done on the bits because Triton 3.6's interpreter casts
    float32 to bf16 by truncation (a bias of half an ulp that cost the CPU checks a
    percent of cosine); a compiled cast rounds the same way, and casting the result to
    bf16 is then exact on both."""
    b = x.to(tl.int32, bitcast=True)
    b = b + 0x7FFF + ((b >> 16) & 1)
    return (b & -65536).to(tl.float32, bitcast=True)


@triton.jit
def _store_t(ptr, k, v, K: tl.constexpr):
    """Store v[k] into the transposed layout of a K-long input vector."""
    tl.store(ptr + (k % 8) * (K // 8) + k // 8, v)


@triton.jit
def _norm_to_slot(x_ptr, nw_ptr, slot_ptr, HID: tl.constexpr, HB: tl.constexpr, EPS: tl.constexpr,
                  SUMS: tl.constexpr):
    """rmsnorm(x) (bf16 values) into this program's slot, transposed, and (SUMS) its sum over
    each group of 128 after it; every thread's part is written before any thread reads the slot."""
    k = tl.arange(0, HB)
    m = k < HID
    x = tl.load(x_ptr + k, mask=m, other=0.0, cache_modifier=".cg").to(tl.float32)
    r = tl.rsqrt(tl.sum(x * x, axis=0) / HID + EPS)
    w = tl.load(nw_ptr + k, mask=m, other=0.0).to(tl.float32)
    y = _bf16(x * r * w)
    tl.store(slot_ptr + (k % 8) * (HID // 8) + k // 8, y, mask=m)
    if SUMS:
        g = tl.arange(0, HB // 128)
        tl.store(slot_ptr + HID + g, tl.sum(tl.reshape(y, [HB // 128, 128]), axis=1), mask=g < HID // 128)
    tl.debug_barrier()


@triton.jit
def _rows_dot(w_ptr, rows, slot_ptr, HID: tl.constexpr, RB: tl.constexpr, HB: tl.constexpr):
    """Float32 dot products of RB bf16 weight rows (HID long) with the slot's vector, all
    loads issued at once (a loop over the row would wait on memory once per block)."""
    k = tl.arange(0, HB)
    m = k < HID
    xk = tl.load(slot_ptr + (k % 8) * (HID // 8) + k // 8, mask=m, other=0.0)
    w = tl.load(w_ptr + rows[:, None] * HID + k[None, :], mask=m[None, :], other=0.0).to(tl.float32)
    return tl.sum(w * xk[None, :], axis=1)


@triton.jit
def _grid_barrier(bar_ptr, P):
    """Every program waits until all P have arrived. bar_ptr[0] counts arrivals (back to 0
    after each barrier), bar_ptr[1] is the generation, so nothing depends on the host or on
    how many launches came before. Scalar atomics run on one thread per program."""
    tl.debug_barrier()  # this program's writes are all issued before it arrives
    gen = tl.atomic_add(bar_ptr + 1, 0, sem="acquire")
    arrived = tl.atomic_add(bar_ptr, 1, sem="acq_rel")
    if arrived == P - 1:
        tl.atomic_xchg(bar_ptr, 0, sem="relaxed")
        tl.atomic_add(bar_ptr + 1, 1, sem="release")
    else:
        while tl.atomic_add(bar_ptr + 1, 0, sem="acquire") == gen:
            pass
    tl.debug_barrier()


@triton.jit
def _grid_barrier_count(bar_ptr, P):
    """_grid_barrier with one atomic on the way in and nothing after the last arrival: a
    64-bit count of every arrival since the buffer was zeroed, never reset. Barrier k's
    arrivals are numbered kP .. kP+P-1 (no program can arrive at the next barrier before all
    have arrived at this one), so a program waits until the count reaches the next multiple
    of P above its own number. It needs the same P at every launch on a buffer (the model's
    grid is fixed) and is 64 bits wide so that no decode runs long enough to wrap it."""
    cnt_ptr = (bar_ptr + 2).to(tl.pointer_type(tl.int64))   # (bytes 8..15 of the barrier's buffer)
    tl.debug_barrier()  # this program's writes are all issued before it arrives
    arrived = tl.atomic_add(cnt_ptr, 1, sem="acq_rel")
    target = (arrived // P + 1) * P
    while tl.atomic_add(cnt_ptr, 0, sem="acquire") < target:
        pass
    tl.debug_barrier()


@triton.jit
def _now():
    """The device's nanosecond clock (%globaltimer), for the stage stamps."""
    return tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)


# --------------------------------------------------------------------------- #
# KDA
# --------------------------------------------------------------------------- #
@triton.jit
def _kda_in(pid, P, one, slot, w_ptr, sz_ptr, bw_ptr, cw_ptr, cq_ptr, ck_ptr, cv_ptr, qkv_ptr, dec_ptr, beta_ptr,
            HID: tl.constexpr, KIN: tl.constexpr, KD: tl.constexpr, KH: tl.constexpr,
            BN: tl.constexpr, GC: tl.constexpr, RB: tl.constexpr, HB: tl.constexpr, SUMS: tl.constexpr):
    """q, k, v, g projections with the short conv (and its window shift), the decay and
    beta. Tiles: the int4 tiles of q|k|v|g, then the beta rows."""
    G: tl.constexpr = HID // 128
    NT: tl.constexpr = 4 * KIN // BN
    for t in range(pid, NT + KH // RB, P):
        if t < NT:
            y = _bf16(_gemv(w_ptr + t * (G * BN * 16), sz_ptr + t * (G * BN), slot, HID // 8, G, BN, GC, one, SUMS))
            m = (t * BN) // KIN
            c = (t * BN) % KIN + tl.arange(0, BN)
            if m < 3:
                win = tl.where(m == 0, cq_ptr, tl.where(m == 1, ck_ptr, cv_ptr))
                w0 = tl.load(win + c).to(tl.float32)
                w1 = tl.load(win + KIN + c).to(tl.float32)
                w2 = tl.load(win + 2 * KIN + c).to(tl.float32)
                cw = cw_ptr + m * 4 * KIN + c
                acc = w0 * tl.load(cw) + w1 * tl.load(cw + KIN) + w2 * tl.load(cw + 2 * KIN) + y * tl.load(cw + 3 * KIN)
                out = _bf16(acc / (1.0 + tl.exp(-acc)))
                if m == 0:
                    out = out * (KD ** -0.5)
                tl.store(qkv_ptr + m * KIN + c, out)
                tl.store(win + c, w1.to(tl.bfloat16))
                tl.store(win + KIN + c, w2.to(tl.bfloat16))
                tl.store(win + 2 * KIN + c, y.to(tl.bfloat16))
            else:
                # exp(-softplus(g)) = 1 / (1 + exp(g))
                tl.store(dec_ptr + c, 1.0 / (1.0 + tl.exp(y)))
        else:
            rows = (t - NT) * RB + tl.arange(0, RB)
            b = _bf16(_rows_dot(bw_ptr, rows, slot, HID, RB, HB))
            tl.store(beta_ptr + rows, 1.0 / (1.0 + tl.exp(-b)))


@triton.jit
def _kda_rec(pid, P, S_ptr, qkv_ptr, dec_ptr, beta_ptr, ot_ptr,
             KIN: tl.constexpr, KD: tl.constexpr, KH: tl.constexpr, BV: tl.constexpr):
    """The gated delta rule on S[h, :, v-block] (in place) and o[h, v-block]."""
    NVB: tl.constexpr = KD // BV
    kk = tl.arange(0, KD)
    for t in range(pid, KH * NVB, P):
        h = t // NVB
        vv = (t % NVB) * BV + tl.arange(0, BV)
        sp = S_ptr + h * KD * KD + kk[:, None] * KD + vv[None, :]
        S = tl.load(sp)
        dec = tl.load(dec_ptr + h * KD + kk, cache_modifier=".cg")
        q = tl.load(qkv_ptr + h * KD + kk, cache_modifier=".cg")
        k = tl.load(qkv_ptr + KIN + h * KD + kk, cache_modifier=".cg")
        v = tl.load(qkv_ptr + 2 * KIN + h * KD + vv, cache_modifier=".cg")
        b = tl.load(beta_ptr + h, cache_modifier=".cg")
        S = S * dec[:, None]
        pred = tl.sum(S * k[:, None], axis=0)
        S = S + b * k[:, None] * (v - pred)[None, :]
        o = tl.sum(S * q[:, None], axis=0)
        tl.store(sp, S)
        _store_t(ot_ptr, h * KD + vv, _bf16(o), KIN)


@triton.jit
def _attn_out(pid, P, one, xres_ptr, w_ptr, sz_ptr, ot_ptr, hp_ptr,
              K: tl.constexpr, HID: tl.constexpr, BN: tl.constexpr, GC: tl.constexpr):
    """h = x + o_proj(o), o read transposed."""
    G: tl.constexpr = K // 128
    for t in range(pid, HID // BN, P):
        y = _gemv(w_ptr + t * (G * BN * 16), sz_ptr + t * (G * BN), ot_ptr, K // 8, G, BN, GC, one)
        n = t * BN + tl.arange(0, BN)
        x = tl.load(xres_ptr + n, cache_modifier=".cg").to(tl.float32)
        tl.store(hp_ptr + n, _bf16(x + _bf16(y)).to(tl.bfloat16))


# --------------------------------------------------------------------------- #
# MoE
# --------------------------------------------------------------------------- #
@triton.jit
def _routing(logits_ptr, E: tl.constexpr, EP: tl.constexpr, NACT: tl.constexpr, NAP: tl.constexpr,
             SCALE: tl.constexpr):
    """Softmax over the float32 logits, top NACT (lowest index first at an exact tie) and
    their weights normalized and scaled; every program computes the same from the same
    logits."""
    e = tl.arange(0, EP)
    lg = tl.load(logits_ptr + e, mask=e < E, other=NEG, cache_modifier=".cg")
    ex = tl.where(e < E, tl.exp(lg - tl.max(lg, axis=0)), 0.0)
    probs = ex / tl.sum(ex, axis=0)
    left = tl.where(e < E, probs, -1.0)
    slot = tl.arange(0, NAP)
    idx = tl.zeros([NAP], tl.int32)
    wts = tl.zeros([NAP], tl.float32)
    for j in tl.static_range(NACT):
        best = tl.max(left, axis=0)
        at = tl.min(tl.where(left == best, e, EP), axis=0)
        idx = tl.where(slot == j, at, idx)
        wts = tl.where(slot == j, best, wts)
        left = tl.where(e == at, -2.0, left)
    wts = wts / (tl.sum(wts, axis=0) + 1e-9) * SCALE
    return idx, wts


@triton.jit
def _routing_once(route_ptr, logits_ptr, NR, E: tl.constexpr, EP: tl.constexpr, NACT: tl.constexpr,
                  NAP: tl.constexpr, SCALE: tl.constexpr):
    """ROUTE_ONCE: the router tile that stores the last of the NR tiles' logits computes the
    top NACT and leaves them at route_ptr[1:] (expert indices, then the weights' bits) for
    the MoE stages after the barrier; route_ptr[0] counts the tiles and goes back to zero for
    the next layer. The counting is the grid barrier's: every thread's logits stored, then
    one acquire-release atomic."""
    tl.debug_barrier()
    if tl.atomic_add(route_ptr, 1, sem="acq_rel") == NR - 1:
        tl.debug_barrier()   # the other tiles' logits, seen by this program's every thread
        idx, wts = _routing(logits_ptr, E, EP, NACT, NAP, SCALE)
        j = tl.arange(0, NAP)
        tl.store(route_ptr + 1 + j, idx)
        tl.store(route_ptr + 1 + NAP + j, wts.to(tl.int32, bitcast=True))
        tl.atomic_xchg(route_ptr, 0, sem="relaxed")


@triton.jit
def _routed(route_ptr, logits_ptr, E: tl.constexpr, EP: tl.constexpr, NACT: tl.constexpr, NAP: tl.constexpr,
            SCALE: tl.constexpr, ROUTE_ONCE: tl.constexpr):
    """The layer's top NACT experts and weights: read back where MOE_IN left them
    (ROUTE_ONCE), else computed here from the logits, by every program alike."""
    if ROUTE_ONCE:
        j = tl.arange(0, NAP)
        idx = tl.load(route_ptr + 1 + j, cache_modifier=".cg")
        wts = tl.load(route_ptr + 1 + NAP + j, cache_modifier=".cg").to(tl.float32, bitcast=True)
    else:
        idx, wts = _routing(logits_ptr, E, EP, NACT, NAP, SCALE)
    return idx, wts


@triton.jit
def _pick(vec, NAP: tl.constexpr, j):
    return tl.sum(tl.where(tl.arange(0, NAP) == j, vec, 0), axis=0)


@triton.jit
def _moe_in(pid, P, one, slot, rw_ptr, logits_ptr, sg_ptr, su_ptr, sgsz_ptr, susz_ptr, act_ptr, route_ptr,
            part_ptr, count_ptr,
            HID: tl.constexpr, E: tl.constexpr, EP: tl.constexpr, MI: tl.constexpr, NACT: tl.constexpr,
            NAP: tl.constexpr, NSH: tl.constexpr, SCALE: tl.constexpr,
            RB: tl.constexpr, HB: tl.constexpr, BN: tl.constexpr, GC: tl.constexpr, ROUTE_ONCE: tl.constexpr,
            KP: tl.constexpr, SUMS: tl.constexpr):
    """Router logits (float32) and the shared experts' silu(gate) * up; with ROUTE_ONCE, the
    top-k from the logits as well, once.

    KP > 1 (SPLIT_SH): each shared tile's inputs in KP pieces of G / KP groups, so that a
    program walks G / KP chunks instead of G (a chunk's words are one memory round trip);
    each piece stores its float32 gate and up sums at part_ptr and counts itself at its
    tile, and the piece that completes the tile adds the pieces in order and writes
    silu(gate) * up (then sets the count back to zero). Deterministic; not the landed
    path's bits, since the sums are grouped by piece."""
    G: tl.constexpr = HID // 128
    NR: tl.constexpr = E // RB
    NTN: tl.constexpr = MI // BN
    GP: tl.constexpr = G // KP
    for t in range(pid, NR + NSH * NTN * KP, P):
        if t < NR:
            rows = t * RB + tl.arange(0, RB)
            tl.store(logits_ptr + rows, _rows_dot(rw_ptr, rows, slot, HID, RB, HB))
            if ROUTE_ONCE:
                _routing_once(route_ptr, logits_ptr, NR, E, EP, NACT, NAP, SCALE)
        else:
            tile = (t - NR) // KP   # (over the NSH experts' tiles)
            s = tile // NTN
            k = (tile % NTN) * BN + tl.arange(0, BN)
            g, u = _gemv2(sg_ptr + tile * (G * BN * 16), su_ptr + tile * (G * BN * 16),
                          sgsz_ptr + tile * (G * BN), susz_ptr + tile * (G * BN), slot, HID // 8, GP, BN, GC, one,
                          ((t - NR) % KP) * GP, SUMS)
            if KP > 1:
                piece = (t - NR) % KP
                n = tile * BN + tl.arange(0, BN)
                tl.store(part_ptr + (2 * piece) * (NSH * MI) + n, g)
                tl.store(part_ptr + (2 * piece + 1) * (NSH * MI) + n, u)
                tl.debug_barrier()   # every thread's sums stored before the piece is counted
                if tl.atomic_add(count_ptr + tile, 1, sem="acq_rel") == KP - 1:
                    tl.debug_barrier()   # the other pieces' sums, seen by this program's every thread
                    g = tl.zeros([BN], tl.float32)
                    u = tl.zeros([BN], tl.float32)
                    for pp in range(KP):
                        g += tl.load(part_ptr + (2 * pp) * (NSH * MI) + n, cache_modifier=".cg")
                        u += tl.load(part_ptr + (2 * pp + 1) * (NSH * MI) + n, cache_modifier=".cg")
                    _store_t(act_ptr + (NACT + s) * MI, k, g / (1.0 + tl.exp(-g)) * u, MI)
                    tl.atomic_xchg(count_ptr + tile, 0, sem="relaxed")
            else:
                _store_t(act_ptr + (NACT + s) * MI, k, g / (1.0 + tl.exp(-g)) * u, MI)


@triton.jit
def _moe_up(pid, P, one, slot, logits_ptr, route_ptr, gw_ptr, uw_ptr, gsz_ptr, usz_ptr, act_ptr,
            HID: tl.constexpr, E: tl.constexpr, EP: tl.constexpr, MI: tl.constexpr, NACT: tl.constexpr,
            NAP: tl.constexpr, SCALE: tl.constexpr, BN: tl.constexpr, GC: tl.constexpr, ROUTE_ONCE: tl.constexpr,
            SUMS: tl.constexpr):
    """silu(gate) * up of the routed experts (the slot still holds this layer's normed h)."""
    G: tl.constexpr = HID // 128
    NTN: tl.constexpr = MI // BN
    idx, wts = _routed(route_ptr, logits_ptr, E, EP, NACT, NAP, SCALE, ROUTE_ONCE)
    for t in range(pid, NACT * NTN, P):
        j = t // NTN
        tn = t % NTN
        e = _pick(idx, NAP, j)
        ow = (e * NTN + tn) * (G * BN * 16)
        osz = (e * NTN + tn) * (G * BN)
        g, u = _gemv2(gw_ptr + ow, uw_ptr + ow, gsz_ptr + osz, usz_ptr + osz, slot, HID // 8, G, BN, GC, one, 0,
                      SUMS)
        k = tn * BN + tl.arange(0, BN)
        _store_t(act_ptr + j * MI, k, g / (1.0 + tl.exp(-g)) * u, MI)


@triton.jit
def _expert_of(idx, j, E: tl.constexpr, NACT: tl.constexpr, NAP: tl.constexpr):
    return tl.where(j < NACT, _pick(idx, NAP, j), E + j - NACT)


@triton.jit
def _moe_down(pid, P, one, logits_ptr, route_ptr, dw_ptr, dsz_ptr, act_ptr, hp_ptr, out_ptr, part_ptr, count_ptr,
              HID: tl.constexpr, E: tl.constexpr, EP: tl.constexpr, MI: tl.constexpr, NACT: tl.constexpr,
              NSH: tl.constexpr, NAP: tl.constexpr, SCALE: tl.constexpr, BN: tl.constexpr, SPLIT: tl.constexpr,
              ROUTE_ONCE: tl.constexpr, LATE_COUNT: tl.constexpr, QP: tl.constexpr):
    """out = h + bf16(sum_j w_j down_j(act_j) + sum_s down_s(act_s)), the experts in the
    reference's order.

    SPLIT=0: a tile of BN columns takes every expert's chunk in turn (72 tiles at full scale),
    the next expert's words loading meanwhile. SPLIT=1: one piece per (expert, column tile),
    648 at full scale, so that every program has some (at most 5 chunks on one program instead
    of 9); each piece stores its expert's float32 dot products and counts itself at its tile
    (an acquire-release atomic after the program's threads stored, as the grid barrier
    arrives), and the piece that completes the tile sums its experts in the same order with
    the same operations, so the result is the same bit for bit. The count goes back to zero
    for the next layer's use (the grid barriers between order that). LATE_COUNT=1: a program
    counts its pieces (at most QP) together after its last one, one lane a piece, instead of
    a CTA barrier and an atomic round trip after each."""
    GI: tl.constexpr = MI // 128
    NJ: tl.constexpr = NACT + NSH
    NT: tl.constexpr = HID // BN
    EW: tl.constexpr = MI * HID // 8   # words per expert
    ES: tl.constexpr = GI * HID        # scale|zero entries per expert
    idx, wts = _routed(route_ptr, logits_ptr, E, EP, NACT, NAP, SCALE, ROUTE_ONCE)
    if SPLIT:
        _moe_down_pieces(pid, P, one, idx, wts, dw_ptr, dsz_ptr, act_ptr, hp_ptr, out_ptr, part_ptr, count_ptr,
                         HID, E, MI, NACT, NAP, BN, GI, NJ, NT, EW, ES, LATE_COUNT, QP)
    else:
        for t in range(pid, NT, P):
            tw = dw_ptr + t * (GI * BN * 16)
            ts = dsz_ptr + t * (GI * BN)
            e = _expert_of(idx, 0, E, NACT, NAP)
            w, sz = _load_chunk(tw + e * EW, ts + e * ES, 0, BN, GI)
            acc = tl.zeros([BN], tl.float32)
            for j in range(1, NJ):
                e = _expert_of(idx, j, E, NACT, NAP)
                w_next, sz_next = _load_chunk(tw + e * EW, ts + e * ES, 0, BN, GI)
                y = tl.sum(_fma_chunk(tl.zeros([BN, GI], tl.float32), w, sz, act_ptr + (j - 1) * MI, MI // 8, 0, GI, one), axis=1)
                acc += tl.where(j - 1 < NACT, _pick(wts, NAP, j - 1), 1.0) * y
                w = w_next
                sz = sz_next
            y = tl.sum(_fma_chunk(tl.zeros([BN, GI], tl.float32), w, sz, act_ptr + (NJ - 1) * MI, MI // 8, 0, GI, one), axis=1)
            acc += tl.where(NJ - 1 < NACT, _pick(wts, NAP, NJ - 1), 1.0) * y
            # (Not through a helper shared with the pieces: through one, this path compiled
            # to 8 more bytes of spills than the kernel that was measured.)
            n = t * BN + tl.arange(0, BN)
            h = tl.load(hp_ptr + n, cache_modifier=".cg").to(tl.float32)
            tl.store(out_ptr + n, _bf16(h + _bf16(acc)).to(tl.bfloat16))


@triton.jit
def _moe_down_pieces(pid, P, one, idx, wts, dw_ptr, dsz_ptr, act_ptr, hp_ptr, out_ptr, part_ptr, count_ptr,
                     HID: tl.constexpr, E: tl.constexpr, MI: tl.constexpr, NACT: tl.constexpr, NAP: tl.constexpr,
                     BN: tl.constexpr, GI: tl.constexpr, NJ: tl.constexpr, NT: tl.constexpr, EW: tl.constexpr,
                     ES: tl.constexpr, LATE_COUNT: tl.constexpr, QP: tl.constexpr):
    """_moe_down's SPLIT=1: piece q is expert q // NT of column tile q % NT."""
    col = tl.arange(0, BN)
    q = pid
    if q < NJ * NT:   # the first piece's words, loading before the loop
        e = _expert_of(idx, q // NT, E, NACT, NAP)
        w, sz = _load_chunk(dw_ptr + (q % NT) * (GI * BN * 16) + e * EW, dsz_ptr + (q % NT) * (GI * BN) + e * ES,
                            0, BN, GI)
        while q < NJ * NT:
            j = q // NT
            t = q % NT
            nq = q + P
            if nq < NJ * NT:   # the next piece's words load while this one multiplies
                ne = _expert_of(idx, nq // NT, E, NACT, NAP)
                w_next, sz_next = _load_chunk(dw_ptr + (nq % NT) * (GI * BN * 16) + ne * EW,
                                              dsz_ptr + (nq % NT) * (GI * BN) + ne * ES, 0, BN, GI)
            else:
                w_next = w
                sz_next = sz
            y = tl.sum(_fma_chunk(tl.zeros([BN, GI], tl.float32), w, sz, act_ptr + j * MI, MI // 8, 0, GI, one), axis=1)
            tl.store(part_ptr + j * HID + t * BN + col, y)
            if not LATE_COUNT:
                tl.debug_barrier()   # every thread's part stored before the piece is counted
                if tl.atomic_add(count_ptr + t, 1, sem="acq_rel") == NJ - 1:
                    _down_tile_sum(t, wts, part_ptr, hp_ptr, out_ptr, count_ptr, HID, NACT, NAP, BN, NJ)
            w = w_next
            sz = sz_next
            q = nq
    if LATE_COUNT:
        tl.debug_barrier()   # every piece's part stored by every thread before any is counted
        k = tl.arange(0, QP)
        mine = pid + k * P
        counted = tl.atomic_add(count_ptr + mine % NT, 1, mask=mine < NJ * NT, sem="acq_rel")
        completes = (mine < NJ * NT) & (counted == NJ - 1)
        for i in range(QP):
            if tl.sum(tl.where((k == i) & completes, 1, 0)) > 0:
                _down_tile_sum((pid + i * P) % NT, wts, part_ptr, hp_ptr, out_ptr, count_ptr, HID, NACT, NAP, BN, NJ)


@triton.jit
def _down_tile_sum(t, wts, part_ptr, hp_ptr, out_ptr, count_ptr, HID: tl.constexpr, NACT: tl.constexpr,
                   NAP: tl.constexpr, BN: tl.constexpr, NJ: tl.constexpr):
    """The last piece of column tile t counted: its experts' parts summed in the reference's
    order, the residual added, the tile's count back to zero."""
    col = tl.arange(0, BN)
    tl.debug_barrier()   # the other pieces' parts, seen by this program's every thread
    acc = tl.zeros([BN], tl.float32)
    for jj in range(NJ):
        yj = tl.load(part_ptr + jj * HID + t * BN + col, cache_modifier=".cg")
        acc += tl.where(jj < NACT, _pick(wts, NAP, jj), 1.0) * yj
    h = tl.load(hp_ptr + t * BN + col, cache_modifier=".cg").to(tl.float32)
    tl.store(out_ptr + t * BN + col, _bf16(h + _bf16(acc)).to(tl.bfloat16))
    tl.atomic_xchg(count_ptr + t, 0, sem="relaxed")


# --------------------------------------------------------------------------- #
# MLA
# --------------------------------------------------------------------------- #
@triton.jit
def _mla_in(pid, P, one, slot, w_ptr, sz_ptr, mq_ptr, c_dst, kr_raw_ptr, L,
            HID: tl.constexpr, NQ: tl.constexpr, KV: tl.constexpr, ROPE: tl.constexpr,
            BN: tl.constexpr, GC: tl.constexpr, SUMS: tl.constexpr):
    """q_proj | kv_a (zero columns padding it to whole tiles): q (bf16 values, the rope part
    not yet rotated), the latent appended to the cache at row L, the rope key before its
    rotation."""
    G: tl.constexpr = HID // 128
    for t in range(pid, (NQ + KV + ROPE + BN - 1) // BN, P):
        y = _bf16(_gemv(w_ptr + t * (G * BN * 16), sz_ptr + t * (G * BN), slot, HID // 8, G, BN, GC, one, SUMS))
        n = t * BN + tl.arange(0, BN)
        tl.store(mq_ptr + n, y, mask=n < NQ)
        tl.store(c_dst + L * KV + (n - NQ), y.to(tl.bfloat16), mask=(n >= NQ) & (n < NQ + KV))
        tl.store(kr_raw_ptr + (n - NQ - KV), y, mask=(n >= NQ + KV) & (n < NQ + KV + ROPE))


@triton.jit
def _mla_absorb(pid, P, one, kbw_ptr, kbs_ptr, kbz_ptr, mq_ptr, qabs_ptr, kr_raw_ptr, qr_ptr, kr_dst, inv_freq_ptr, L,
                MH: tl.constexpr, MHP: tl.constexpr, KV: tl.constexpr, NOPE: tl.constexpr, ROPE: tl.constexpr,
                BNC: tl.constexpr):
    """q_abs[h, c] = sum_d q_nope[h, d] kv_b[c, h, d] (the key half of kv_b folded into the
    query), and one more tile: RoPE of q_rope and of the new key, which goes into the cache."""
    QD: tl.constexpr = NOPE + ROPE
    NW: tl.constexpr = NOPE // 8
    NCB: tl.constexpr = KV // BNC
    for t in range(pid, MH * NCB + 1, P):
        if t < MH * NCB:
            h = t // NCB
            c0 = (t % NCB) * BNC
            gc = c0 // 128
            n = tl.arange(0, BNC)[:, None]
            j = tl.arange(0, NW)[None, :]
            w = tl.load(kbw_ptr + (h * KV + c0 + n) * NW + j, eviction_policy="evict_first")
            acc = tl.zeros([BNC, NW], tl.float32)
            xsum = tl.zeros([1, NW], tl.float32)
            zsum = tl.zeros([1, NW], tl.float32)
            for i in tl.static_range(8):
                d = 8 * j + i
                sd = (h * (KV // 128) + gc) * NOPE + d
                xq = tl.load(mq_ptr + h * QD + d, cache_modifier=".cg") * tl.load(kbs_ptr + sd)
                acc += xq * (((w << (19 - 4 * i) if 4 * i <= 19 else w >> (4 * i - 19)) & 0x780000)
                             | one).to(tl.float32, bitcast=True)
                xsum += xq
                zsum += xq * tl.load(kbz_ptr + sd)
            out = 16.0 * tl.sum(acc, axis=1) - tl.sum(16.0 * xsum + zsum, axis=1)
            tl.store(qabs_ptr + h * KV + c0 + tl.arange(0, BNC), out)
        else:
            i = tl.arange(0, ROPE // 2)
            ang = (L.to(tl.float32) * tl.load(inv_freq_ptr + i)).to(tl.float64)
            cos = tl.cos(ang).to(tl.float32)
            sin = tl.sin(ang).to(tl.float32)
            hh = tl.arange(0, MHP)[:, None]
            hm = hh < MH
            qe = tl.load(mq_ptr + hh * QD + NOPE + 2 * i[None, :], mask=hm, other=0.0, cache_modifier=".cg")
            qo = tl.load(mq_ptr + hh * QD + NOPE + 2 * i[None, :] + 1, mask=hm, other=0.0, cache_modifier=".cg")
            tl.store(qr_ptr + hh * ROPE + 2 * i[None, :], _bf16(qe * cos[None, :] - qo * sin[None, :]), mask=hm)
            tl.store(qr_ptr + hh * ROPE + 2 * i[None, :] + 1, _bf16(qo * cos[None, :] + qe * sin[None, :]), mask=hm)
            ke = tl.load(kr_raw_ptr + 2 * i, cache_modifier=".cg")
            ko = tl.load(kr_raw_ptr + 2 * i + 1, cache_modifier=".cg")
            tl.store(kr_dst + L * ROPE + 2 * i, _bf16(ke * cos - ko * sin).to(tl.bfloat16))
            tl.store(kr_dst + L * ROPE + 2 * i + 1, _bf16(ko * cos + ke * sin).to(tl.bfloat16))


@triton.jit
def _cache_copy(pid, P, L, c_src, kr_src, c_dst, kr_dst, KV: tl.constexpr, ROPE: tl.constexpr,
                BL: tl.constexpr):
    """Rows [0, L) of the latent cache handed in copied into this step's own cache, where
    they differ (the first step on a cache the solution did not allocate), in the MLA_IN
    stage, two barriers before the attention reads them: so that the attention's loop reads
    one cache, with no choice of pointer per row (the steady chain's steps append in place)."""
    cc = tl.arange(0, KV)[None, :]
    rr = tl.arange(0, ROPE)[None, :]
    for b0 in range(pid * BL, L, P * BL):
        rc = b0 + tl.arange(0, BL)[:, None]
        keep = rc < L
        tl.store(c_dst + rc * KV + cc, tl.load(c_src + rc * KV + cc, mask=keep, cache_modifier=".cg"), mask=keep)
        tl.store(kr_dst + rc * ROPE + rr, tl.load(kr_src + rc * ROPE + rr, mask=keep, cache_modifier=".cg"),
                 mask=keep)


@triton.jit
def _mla_attend(pid, P, L, R, NCHK, c_ptr, kr_ptr, qabs_ptr, qr_ptr,
                pm_ptr, pl_ptr, pacc_ptr,
                MH: tl.constexpr, HP: tl.constexpr, KV: tl.constexpr, ROPE: tl.constexpr, BL: tl.constexpr,
                SM_SCALE: tl.constexpr, ATT_LO: tl.constexpr, F32: tl.constexpr):
    """Attention of every head over rows [t*R, (t+1)*R) of the latent cache, rows 0..L (the
    new row L written by MLA_IN and MLA_ABSORB, the older ones by earlier steps or copied
    there by _cache_copy): a running softmax per chunk, its max, sum and latent-weighted sum
    left for the merge. With ATT_LO the query and the probabilities are each split into two bf16 parts (hi + lo) so the
    tensor-core products keep float32's precision (five products a block); without, each is
    rounded to bf16 once (three). The cache itself is bf16."""
    if pid < NCHK:
        hh = tl.arange(0, HP)[:, None]
        cc = tl.arange(0, KV)[None, :]
        rr = tl.arange(0, ROPE)[None, :]
        qa = tl.load(qabs_ptr + hh * KV + cc, mask=hh < MH, other=0.0, cache_modifier=".cg")
        q_hi = _bf16(qa)
        q_lo = _bf16(qa - q_hi).to(tl.bfloat16)
        q_hi = q_hi.to(tl.bfloat16)
        q_r = tl.load(qr_ptr + hh * ROPE + rr, mask=hh < MH, other=0.0, cache_modifier=".cg").to(tl.bfloat16)
        for t in range(pid, NCHK, P):
            r0 = t * R
            r1 = tl.minimum(r0 + R, L + 1)
            m_i = tl.full([HP], NEG, tl.float32)
            l_i = tl.zeros([HP], tl.float32)
            acc = tl.zeros([HP, KV], tl.float32)
            for b0 in range(r0, r1, BL):
                rows = b0 + tl.arange(0, BL)
                valid = rows < r1
                rc = rows[:, None]
                cblk = tl.load(c_ptr + rc * KV + cc, mask=valid[:, None], other=0.0, cache_modifier=".cg")
                kblk = tl.load(kr_ptr + rc * ROPE + rr, mask=valid[:, None], other=0.0, cache_modifier=".cg")
                ct = tl.trans(cblk)
                s = _dot(q_hi, ct, F32)
                if ATT_LO:
                    s += _dot(q_lo, ct, F32)
                s += _dot(q_r, tl.trans(kblk), F32)
                s = tl.where(valid[None, :], s * SM_SCALE, NEG)
                m_new = tl.maximum(m_i, tl.max(s, axis=1))
                alpha = tl.exp(m_i - m_new)
                p = tl.where(valid[None, :], tl.exp(s - m_new[:, None]), 0.0)
                l_i = l_i * alpha + tl.sum(p, axis=1)
                p_hi = _bf16(p)
                p_lo = _bf16(p - p_hi).to(tl.bfloat16)
                p_hi = p_hi.to(tl.bfloat16)
                acc = acc * alpha[:, None] + _dot(p_hi, cblk, F32)
                if ATT_LO:
                    acc += _dot(p_lo, cblk, F32)
                m_i = m_new
            h1 = tl.arange(0, HP)
            tl.store(pm_ptr + t * HP + h1, m_i)
            tl.store(pl_ptr + t * HP + h1, l_i)
            tl.store(pacc_ptr + (t * HP + hh) * KV + cc, acc)


@triton.jit
def _mla_merge(pid, P, NCHK, pm_ptr, pl_ptr, pacc_ptr, olat_ptr,
               MH: tl.constexpr, HP: tl.constexpr, KV: tl.constexpr, CB: tl.constexpr, NCP: tl.constexpr,
               IB: tl.constexpr):
    """The chunks' partial softmaxes of head h merged over latent columns [c0, c0+CB): the
    attention-weighted latent o_lat[h] (transposed per head)."""
    NCB: tl.constexpr = KV // CB
    for t in range(pid, MH * NCB, P):
        h = t // NCB
        c = (t % NCB) * CB + tl.arange(0, CB)
        i = tl.arange(0, NCP)
        mv = tl.load(pm_ptr + i * HP + h, mask=i < NCHK, other=NEG, cache_modifier=".cg")
        top = tl.max(mv, axis=0)
        lv = tl.load(pl_ptr + i * HP + h, mask=i < NCHK, other=0.0, cache_modifier=".cg")
        den = tl.sum(tl.where(i < NCHK, tl.exp(mv - top), 0.0) * lv, axis=0)
        o = tl.zeros([CB], tl.float32)
        for i0 in range(0, NCHK, IB):
            ii = i0 + tl.arange(0, IB)
            im = ii < NCHK
            wt = tl.where(im, tl.exp(tl.load(pm_ptr + ii * HP + h, mask=im, other=NEG, cache_modifier=".cg") - top), 0.0)
            a = tl.load(pacc_ptr + (ii[:, None] * HP + h) * KV + c[None, :], mask=im[:, None], other=0.0,
                        cache_modifier=".cg")
            o += tl.sum(wt[:, None] * a, axis=0)
        _store_t(olat_ptr + h * KV, c, o / den, KV)


@triton.jit
def _mla_value(pid, P, one, vbw_ptr, vbsz_ptr, olat_ptr, ot_ptr,
               MH: tl.constexpr, KV: tl.constexpr, VH: tl.constexpr, BN: tl.constexpr, GC: tl.constexpr):
    """o[h] = o_lat[h] @ kv_b's value half of head h (bf16), transposed for o_proj."""
    G: tl.constexpr = KV // 128
    NB: tl.constexpr = VH // BN
    for t in range(pid, MH * NB, P):
        h = t // NB
        y = _gemv(vbw_ptr + t * (G * BN * 16), vbsz_ptr + t * (G * BN), olat_ptr + h * KV, KV // 8, G, BN, GC, one)
        _store_t(ot_ptr, h * VH + (t % NB) * BN + tl.arange(0, BN), _bf16(y), MH * VH)


# --------------------------------------------------------------------------- #
# the kernel
# --------------------------------------------------------------------------- #
@triton.jit(do_not_specialize=["s_lo", "s_hi", "STOP", "ONE", "L", "R", "NCHK", "COPY"])
def kimi_decode_step(
        plan_ptr, s_lo, s_hi, STOP, stamps, bar_ptr, ONE,
        x_in, x_out, xp, hp,
        S0, S1, S2, cq0, cq1, cq2, ck0, ck1, ck2, cv0, cv1, cv2,
        c_src, kr_src, c_dst, kr_dst, L, R, NCHK, COPY,
        attn_norm, moe_norm,
        kda_w, kda_sz, kda_bw, kda_cw, kda_ow, kda_osz,
        mla_w, mla_sz, kb_w, kb_s, kb_z, vb_w, vb_sz, mla_ow, mla_osz, inv_freq,
        rt_w, g_w, u_w, g_sz, u_sz, sg_w, su_w, sg_sz, su_sz, d_w, d_sz,
        slots, qkv, dec, beta, ot, mq, kr_raw, qabs, qr, pm, pl, pacc, olat, logits, act, part, count, route,
        HID: tl.constexpr, HB: tl.constexpr, EPS: tl.constexpr,
        KIN: tl.constexpr, KD: tl.constexpr, KH: tl.constexpr,
        MH: tl.constexpr, MHP: tl.constexpr, HP: tl.constexpr, KV: tl.constexpr, NOPE: tl.constexpr,
        ROPE: tl.constexpr, VH: tl.constexpr,
        E: tl.constexpr, EP: tl.constexpr, NACT: tl.constexpr, NAP: tl.constexpr, NSH: tl.constexpr,
        MI: tl.constexpr, SCALE: tl.constexpr, NL: tl.constexpr,
        BN_A: tl.constexpr, GC_A: tl.constexpr, RB_B: tl.constexpr, BV: tl.constexpr,
        BN_O: tl.constexpr, GC_O: tl.constexpr, GC_MO: tl.constexpr,
        RB_R: tl.constexpr, BN_SH: tl.constexpr, GC_SH: tl.constexpr, SPLIT_SH: tl.constexpr, BN_E: tl.constexpr, GC_E: tl.constexpr,
        BN_F: tl.constexpr, SPLIT_F: tl.constexpr, LATE_COUNT: tl.constexpr, QP: tl.constexpr, ROUTE_ONCE: tl.constexpr,
        BN_MA: tl.constexpr, GC_MA: tl.constexpr, BNC: tl.constexpr, BL: tl.constexpr, ATT_LO: tl.constexpr,
        CB: tl.constexpr, GROUP_SUMS: tl.constexpr,
        NCP: tl.constexpr, IB: tl.constexpr, BN_VB: tl.constexpr, GC_VB: tl.constexpr,
        SLOT: tl.constexpr, USE_BARRIER: tl.constexpr, BAR_COUNT: tl.constexpr, INTERPRET: tl.constexpr, STAMPS: tl.constexpr):
    # ONE: the bits of 1.0f, a kernel argument so that it sits in a register and the nibble's
    # mask-and-or is one LOP3 (two immediates would take two).
    # STOP (kagent's stage sweep): the work of stages after it is skipped, every barrier still
    # passed; a runtime argument, so that every value runs this same binary.
    # STAMPS: each program writes %globaltimer into stamps[0, pid] at its start and into
    # stamps[s + 1, pid] when it reaches the barrier that ends stage s (kagent_stamps).
    pid = tl.program_id(0)
    P = tl.num_programs(0)
    slot = slots + pid * SLOT
    G_H: tl.constexpr = HID // 128
    QD: tl.constexpr = NOPE + ROPE
    if STAMPS:
        if s_lo == 0:   # (stages launched one by one: each launch's start is the last one's end)
            tl.store(stamps + pid, _now())
    for si in range(s_lo, s_hi):
        kind = tl.where(si <= STOP, tl.load(plan_ptr + 3 * si), -1)   # -1: no stage's work
        layer = tl.load(plan_ptr + 3 * si + 1)
        sub = tl.load(plan_ptr + 3 * si + 2)
        x_cur = tl.where(layer == 0, x_in, xp)   # this layer's input hidden
        if kind == KDA_IN:
            _norm_to_slot(x_cur, attn_norm + layer * HID, slot, HID, HB, EPS, GROUP_SUMS)
            _kda_in(pid, P, ONE, slot, kda_w + sub * (4 * KIN * HID // 8), kda_sz + sub * (4 * KIN * G_H),
                    kda_bw + sub * (KH * HID), kda_cw + sub * (3 * 4 * KIN),
                    tl.where(sub == 0, cq0, tl.where(sub == 1, cq1, cq2)),
                    tl.where(sub == 0, ck0, tl.where(sub == 1, ck1, ck2)),
                    tl.where(sub == 0, cv0, tl.where(sub == 1, cv1, cv2)),
                    qkv, dec, beta, HID, KIN, KD, KH, BN_A, GC_A, RB_B, HB, GROUP_SUMS)
        elif kind == KDA_REC:
            _kda_rec(pid, P, tl.where(sub == 0, S0, tl.where(sub == 1, S1, S2)), qkv, dec, beta, ot,
                     KIN, KD, KH, BV)
        elif kind == KDA_OUT:
            _attn_out(pid, P, ONE, x_cur, kda_ow + sub * (KIN * HID // 8), kda_osz + sub * (KIN // 128 * HID),
                      ot, hp, KIN, HID, BN_O, GC_O)
        elif kind == MOE_IN:
            _norm_to_slot(hp, moe_norm + layer * HID, slot, HID, HB, EPS, GROUP_SUMS)
            _moe_in(pid, P, ONE, slot, rt_w + layer * (E * HID), logits,
                    sg_w + layer * (NSH * MI * HID // 8), su_w + layer * (NSH * MI * HID // 8),
                    sg_sz + layer * (NSH * MI * G_H), su_sz + layer * (NSH * MI * G_H), act, route, part, count,
                    HID, E, EP, MI, NACT, NAP, NSH, SCALE, RB_R, HB, BN_SH, GC_SH, ROUTE_ONCE, SPLIT_SH, GROUP_SUMS)
        elif kind == MOE_UP:
            _moe_up(pid, P, ONE, slot, logits, route, g_w + layer * (E * MI * HID // 8), u_w + layer * (E * MI * HID // 8),
                    g_sz + layer * (E * MI * G_H), u_sz + layer * (E * MI * G_H), act,
                    HID, E, EP, MI, NACT, NAP, SCALE, BN_E, GC_E, ROUTE_ONCE, GROUP_SUMS)
        elif kind == MOE_DOWN:
            _moe_down(pid, P, ONE, logits, route, d_w + layer * ((E + NSH) * MI * HID // 8),
                      d_sz + layer * ((E + NSH) * MI // 128 * HID), act, hp,
                      tl.where(layer == NL - 1, x_out, xp), part, count,
                      HID, E, EP, MI, NACT, NSH, NAP, SCALE, BN_F, SPLIT_F, ROUTE_ONCE, LATE_COUNT, QP)
        elif kind == MLA_IN:
            _norm_to_slot(x_cur, attn_norm + layer * HID, slot, HID, HB, EPS, GROUP_SUMS)
            _mla_in(pid, P, ONE, slot, mla_w, mla_sz, mq, c_dst, kr_raw, L, HID, MH * QD, KV, ROPE, BN_MA, GC_MA,
                    GROUP_SUMS)
            if COPY != 0:
                _cache_copy(pid, P, L, c_src, kr_src, c_dst, kr_dst, KV, ROPE, BL)
        elif kind == MLA_ABSORB:
            _mla_absorb(pid, P, ONE, kb_w, kb_s, kb_z, mq, qabs, kr_raw, qr, kr_dst, inv_freq, L,
                        MH, MHP, KV, NOPE, ROPE, BNC)
        elif kind == MLA_ATTEND:
            _mla_attend(pid, P, L, R, NCHK, c_dst, kr_dst, qabs, qr, pm, pl, pacc,
                        MH, HP, KV, ROPE, BL, QD ** -0.5, ATT_LO, INTERPRET)
        elif kind == MLA_MERGE:
            _mla_merge(pid, P, NCHK, pm, pl, pacc, olat, MH, HP, KV, CB, NCP, IB)
        elif kind == MLA_VALUE:
            _mla_value(pid, P, ONE, vb_w, vb_sz, olat, ot, MH, KV, VH, BN_VB, GC_VB)
        elif kind == MLA_OUT:
            _attn_out(pid, P, ONE, x_cur, mla_ow, mla_osz, ot, hp, MH * VH, HID, BN_O, GC_MO)
        if STAMPS:
            tl.store(stamps + (si + 1) * P + pid, _now())
        if USE_BARRIER:
            if si + 1 < s_hi:
                if BAR_COUNT:
                    _grid_barrier_count(bar_ptr, P)
                else:
                    _grid_barrier(bar_ptr, P)


# --------------------------------------------------------------------------- #
# one stage on its own (attend_alone.py)
# --------------------------------------------------------------------------- #
@triton.jit(do_not_specialize=["L", "R", "NCHK"])
def attend_alone(L, R, NCHK, c_ptr, kr_ptr, qabs_ptr, qr_ptr, pm_ptr, pl_ptr, pacc_ptr,
                 MH: tl.constexpr, HP: tl.constexpr, KV: tl.constexpr, ROPE: tl.constexpr, BL: tl.constexpr,
                 SM_SCALE: tl.constexpr, ATT_LO: tl.constexpr, F32: tl.constexpr):
    """The attention stage alone, over a cache of rows 0..L whose last row is the new one,
    its partials left as in the megakernel. Defined here so that the interpreter's launch
    prepares this module's functions as the megakernel's own launch does."""
    _mla_attend(tl.program_id(0), tl.num_programs(0), L, R, NCHK, c_ptr, kr_ptr, qabs_ptr, qr_ptr,
                pm_ptr, pl_ptr, pacc_ptr, MH, HP, KV, ROPE, BL, SM_SCALE, ATT_LO, F32)

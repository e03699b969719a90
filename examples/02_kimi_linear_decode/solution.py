"""kagent's own megakernel for 02_kimi_linear_decode: one Triton kernel launch per decode step.

The module tree and state_dict keys are the task's (weights arrive through
load_state_dict(strict=True)); a load_state_dict post-hook then repacks every weight once
into the kernel's layouts (megakernel.py says which) and allocates the scratch the stages
pass between them. ``step`` launches the kernel once on a GPU: a persistent grid of one
program per multiprocessor walks the stage plan with a grid barrier between stages. Without
a GPU, Triton's interpreter runs the same kernel on the CPU once per stage (a barrier
cannot be passed by programs that run one after another), which is how it is checked here.

State: each KDA layer's S and conv windows are updated in place. The MLA cache comes back
as a view of a buffer this model owns, with room to grow: a step whose cache is that view
appends its row in place; any other cache (a fresh one) is copied into a new buffer by the
attention stage, which reads every row anyway.
"""
from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

import megakernel as mk
import torch
import torch.nn as nn

GROUP = 128
CACHE_SLACK = 256  # rows a cache buffer has beyond the step that made it (a chain grows into them)
NUM_WARPS = 8
ONE_BITS = 0x3F800000  # 1.0f, the exponent the kernel gives every nibble
# rmsnorm's epsilon, a constant of the task's math: the public Config has no field for it.
RMS_EPS = 1e-6
INTERPRETER_PROGRAMS = 2  # programs of the CPU (interpreted) grid: enough to exercise the tile loops


# --------------------------------------------------------------------------- #
# the task's module tree (uninitialized: the weights are loaded)
# --------------------------------------------------------------------------- #
class QuantLinear(nn.Module):
    def __init__(self, in_f: int, out_f: int, group: int):
        super().__init__()
        self.register_buffer("w_q", torch.empty(in_f // 2, out_f, dtype=torch.uint8))
        self.register_buffer("scales", torch.empty(in_f // group, out_f, dtype=torch.bfloat16))
        self.register_buffer("zeros", torch.empty(in_f // group, out_f, dtype=torch.bfloat16))


class QuantExperts(nn.Module):
    def __init__(self, n: int, in_f: int, out_f: int, group: int):
        super().__init__()
        self.register_buffer("w_q", torch.empty(n, in_f // 2, out_f, dtype=torch.uint8))
        self.register_buffer("scales", torch.empty(n, in_f // group, out_f, dtype=torch.bfloat16))
        self.register_buffer("zeros", torch.empty(n, in_f // group, out_f, dtype=torch.bfloat16))


class PlainLinear(nn.Module):
    def __init__(self, in_f: int, out_f: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_f, in_f, dtype=torch.bfloat16))


class KDA(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d, inner = cfg.hidden, cfg.kda_heads * cfg.kda_head_dim
        self.q_proj = QuantLinear(d, inner, cfg.group)
        self.k_proj = QuantLinear(d, inner, cfg.group)
        self.v_proj = QuantLinear(d, inner, cfg.group)
        self.g_proj = QuantLinear(d, inner, cfg.group)
        self.beta_proj = PlainLinear(d, cfg.kda_heads)
        self.conv_w = nn.Parameter(torch.empty(3, inner, cfg.short_conv, dtype=torch.bfloat16))
        self.o_proj = QuantLinear(inner, d, cfg.group)


class MLA(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        H, d = cfg.mla_heads, cfg.hidden
        self.q_proj = QuantLinear(d, H * (cfg.qk_nope + cfg.qk_rope), cfg.group)
        self.kv_a = QuantLinear(d, cfg.kv_lora + cfg.qk_rope, cfg.group)
        self.kv_b = QuantLinear(cfg.kv_lora, H * (cfg.qk_nope + cfg.v_head), cfg.group)
        self.o_proj = QuantLinear(H * cfg.v_head, d, cfg.group)


class MoE(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d, m, E, Es = cfg.hidden, cfg.moe_inter, cfg.n_experts, cfg.n_shared
        self.router = PlainLinear(d, E)
        self.gate = QuantExperts(E, d, m, cfg.group)
        self.up = QuantExperts(E, d, m, cfg.group)
        self.down = QuantExperts(E, m, d, cfg.group)
        self.s_gate = QuantExperts(Es, d, m, cfg.group)
        self.s_up = QuantExperts(Es, d, m, cfg.group)
        self.s_down = QuantExperts(Es, m, d, cfg.group)


class Block(nn.Module):
    def __init__(self, cfg, kind: str):
        super().__init__()
        self.kind = kind
        self.attn_norm = nn.Parameter(torch.empty(cfg.hidden, dtype=torch.bfloat16))
        self.moe_norm = nn.Parameter(torch.empty(cfg.hidden, dtype=torch.bfloat16))
        self.attn = KDA(cfg) if kind == "K" else MLA(cfg)
        self.moe = MoE(cfg)


# --------------------------------------------------------------------------- #
# layouts
# --------------------------------------------------------------------------- #
def _pow2_divisor(n: int, cap: int) -> int:
    """The largest power of two that divides n and is at most cap."""
    p = 1
    while p * 2 <= cap and n % (p * 2) == 0:
        p *= 2
    return p


def _next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def _is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


# The layout's switches (README, "Three more switches"): each on by default since the H100 runs of
# 2026-12-05 (all four: 0.83-0.87x the step without them, 12 of 13 evaluations passed every
# check); KIMI_<NAME>=0 turns one off, for comparisons and bisecting.
DEFAULT_SPLIT_SH = 3


def _switch(name: str, default: int) -> int:
    """The layout constant an environment variable sets, ``default`` where it is unset."""
    value = os.environ.get(name)
    try:
        return default if value is None or value == "" else int(value)
    except ValueError:
        raise ValueError(f"{name}={value!r}: a whole number expected") from None


class DirectLaunch:
    """The single launch without Triton's dispatch on every step (KIMI_LAUNCH=direct).

    The dispatch binds and specializes each of the kernel's ~75 arguments and ~40 constants,
    hashes them and looks the compiled kernel up, on every call: host time that a step of
    0.3 ms of device time can wait for when the host is slow (an H100 host, 2026-12-07: the
    plain loop 4-22% above the profiler's device time at ctx 2048 while the host-bound baseline
    ran 1.2-2x slower than on another host). Here the compiled kernel a dispatch returned is
    kept under the specialization of what a step changes (its input and output, the states,
    the caches, the counts), computed by Triton's own rule, and launched directly while that
    holds. The other arguments (the weights' repacked buffers, the scratch) must be the very
    objects the dispatch saw: any other object, and the step goes through the dispatch again.
    """

    def __init__(self, kernel, consts: dict, num_warps: int, held: Callable[[], set[int]]):
        from triton._C.libtriton import native_specialize_impl

        self.kernel, self.consts, self.num_warps, self.held = kernel, consts, num_warps, held
        self.specialize = native_specialize_impl
        self.params = [q for q in kernel.params if not q.is_constexpr]
        # Where each argument goes among the compiled kernel's values (constants included, in
        # the signature's order), and the constants already in place.
        self.template = [consts.get(q.name) if q.is_constexpr else None for q in kernel.params]
        self.slots = [kernel.arg_names.index(q.name) for q in self.params]
        self.fixed: list[tuple[int, object]] = []  # (position, object) the compiled kernels were made for
        self.varying: list[int] = []                # positions of the arguments a step changes
        self.compiled: dict[tuple, object] = {}
        self.backend = None
        self.dispatches = self.direct_launches = 0  # how the steps went (bench.py reports them)

    def __call__(self, grid: tuple, args: list):
        compiled = self.compiled.get(self._key(args)) if self._same_fixed(args) else None
        if compiled is None:
            return self._dispatch(grid, args)
        values = list(self.template)
        for slot, value in zip(self.slots, args):
            values[slot] = value
        compiled[(grid[0], 1, 1)](*values)
        self.direct_launches += 1
        return compiled

    def _same_fixed(self, args: list) -> bool:
        return bool(self.fixed) and all(args[i] is held for i, held in self.fixed)

    def _key(self, args: list) -> tuple:
        params, spec, backend = self.params, self.specialize, self.backend
        return tuple(spec(backend, args[i], params[i].is_const, not params[i].do_not_specialize,
                          not params[i].do_not_specialize_on_alignment) for i in self.varying)

    def _dispatch(self, grid: tuple, args: list):
        if len(args) != len(self.params):
            raise TypeError(f"{len(args)} arguments for a kernel of {len(self.params)}")
        compiled = self.kernel[grid](*args, **self.consts, num_warps=self.num_warps)
        self.dispatches += 1
        if not self._same_fixed(args):  # the first launch, or new buffers (a reload, a move)
            held = self.held()
            self.fixed = [(i, a) for i, a in enumerate(args) if id(a) in held]
            self.varying = [i for i, a in enumerate(args) if id(a) not in held]
            self.compiled = {}
            # The backend the dispatch specialized with (Triton keeps one per device).
            self.backend = self.kernel.device_caches[torch.cuda.current_device()][3]
        self.compiled[self._key(args)] = compiled
        return compiled


@dataclass(frozen=True)
class Layout:
    """The kernel's compile-time sizes: the model's and the tiles' (block sizes chosen so
    that each stage has about one tile per program on a 132-multiprocessor GPU, and that
    every tile lies inside one matrix, one head or one latent group)."""
    programs: int
    consts: dict

    @staticmethod
    def of(cfg, programs: int, gpu: bool, gpu_tiles: bool | None = None) -> Layout:
        """gpu: compiled for a GPU (else interpreted); gpu_tiles: the GPU's tile widths
        (the default where compiled; under the interpreter they check the GPU's tiling)."""
        gpu_tiles = gpu if gpu_tiles is None else gpu_tiles
        hid, kin, kd, kh = cfg.hidden, cfg.kda_heads * cfg.kda_head_dim, cfg.kda_head_dim, cfg.kda_heads
        mh, kv, nope, rope, vh = cfg.mla_heads, cfg.kv_lora, cfg.qk_nope, cfg.qk_rope, cfg.v_head
        mi, e = cfg.moe_inter, cfg.n_experts
        g_h = hid // GROUP
        assert cfg.group == GROUP and cfg.short_conv == 4, (cfg.group, cfg.short_conv)
        assert all(_is_pow2(v) for v in (kd, kv, rope, nope // 8, mi // GROUP)), "power-of-two sizes expected"
        assert hid % GROUP == 0 and kin % GROUP == 0 and (mh * vh) % GROUP == 0 and kv % GROUP == 0
        ncp = _next_pow2(programs)
        # Tile widths: on the GPU about one tile per program at full scale; under the
        # interpreter as wide as the matrices allow (its cost is per operation, not per byte).
        if gpu_tiles:
            def cap(n, gpu_cap):
                return _pow2_divisor(n, gpu_cap)
        else:
            def cap(n, gpu_cap):
                return _pow2_divisor(n, 1 << 20)
        n_ma = mh * (nope + rope) + kv + rope
        # Pieces of a shared tile's inputs; split, the tiles are twice as wide (so that pieces
        # and router tiles still fill about one round of programs: faster on an H100, 2026-12-05).
        # Unset: 3 where the hidden's groups divide by 3 (the full scale's 18), else none.
        split_sh = _switch("KIMI_SPLIT_SH", DEFAULT_SPLIT_SH if g_h % DEFAULT_SPLIT_SH == 0 else 1)
        if split_sh < 1 or g_h % split_sh:
            raise ValueError(f"KIMI_SPLIT_SH={split_sh}: the {g_h} groups of the hidden do not split in as many pieces")
        # Rows of the attention's blocks, 64 on the GPU as well since 2026-12-06: 3-4% faster a
        # step than 32 on an H100 at every context, the same output bit for bit on tune.py's
        # chains (the lab notebook (lab/notebook/)); 32 left half of each pass to the CTA barriers.
        bl = _switch("KIMI_BL", 64)
        if bl < 16 or not _is_pow2(bl):
            raise ValueError(f"KIMI_BL={bl}: the attention's rows a block must be a power of two, at least 16")
        c = dict(
            HID=hid, HB=_next_pow2(hid), EPS=RMS_EPS,
            KIN=kin, KD=kd, KH=kh,
            MH=mh, MHP=_next_pow2(mh), HP=max(16, _next_pow2(mh)), KV=kv, NOPE=nope, ROPE=rope, VH=vh,
            E=e, EP=_next_pow2(e), NACT=cfg.n_active, NAP=_next_pow2(cfg.n_active), NSH=cfg.n_shared,
            MI=mi, SCALE=float(cfg.routed_scaling), NL=len(cfg.pattern),
            BN_A=cap(kin, 128), GC_A=cap(g_h, 2), RB_B=cap(kh, 4), BV=cap(kd, 32),
            BN_O=cap(hid, 32), GC_O=cap(kin // GROUP, 8), GC_MO=cap(mh * vh // GROUP, 8),
            RB_R=cap(e, 4), BN_SH=cap(mi, 16 if split_sh == 1 else 32), GC_SH=cap(g_h // split_sh, 2), SPLIT_SH=split_sh,
            BN_E=cap(mi, 64), GC_E=cap(g_h, 2),
            BN_F=cap(hid, 32), SPLIT_F=_switch("KIMI_SPLIT_F", 1), LATE_COUNT=_switch("KIMI_LATE_COUNT", 0),
            ROUTE_ONCE=_switch("KIMI_ROUTE_ONCE", 1),
            BAR_COUNT=_switch("KIMI_BAR_COUNT", 1),
            BN_MA=64 if gpu_tiles else _next_pow2(n_ma), GC_MA=cap(g_h, 2),
            BNC=_pow2_divisor(kv, 128), BL=bl, CB=cap(kv, 128),
            ATT_LO=_switch("KIMI_ATT_LO", 1),
            NCP=ncp, IB=min(32, ncp), BN_VB=cap(vh, 32), GC_VB=cap(kv // GROUP, 8),
            # GROUP_SUMS: the slot holds the normed input's sum over each group of 128 after it
            # (room for them in whole 128-byte lines, so that every program's slot stays aligned
            # for 16-byte loads).
            GROUP_SUMS=_switch("KIMI_GROUP_SUMS", 0), SLOT=hid + 32 * -(-g_h // 32), INTERPRET=not gpu,
        )
        # The most pieces of the split down projection a program takes (LATE_COUNT counts them
        # in one vector of this many lanes).
        c["QP"] = _next_pow2(-(-(cfg.n_active + cfg.n_shared) * (hid // c["BN_F"]) // programs))
        layout = Layout(programs, c)
        layout.check()
        return layout

    def check(self) -> None:
        """Refuse tilings that the kernel would compute wrongly without an error (checked again
        after tune.py's overrides): every tile inside its matrix, every split on whole chunks."""
        c = self.consts
        g_h = c["HID"] // GROUP
        widths = {"BN_SH": c["MI"], "BN_E": c["MI"], "BN_F": c["HID"], "BN_O": c["HID"]}
        bad = [f"{k}={c[k]} does not divide {n}" for k, n in widths.items() if n % c[k]]
        if c["SPLIT_SH"] < 1 or g_h % c["SPLIT_SH"]:
            bad.append(f"SPLIT_SH={c['SPLIT_SH']} does not divide the hidden's {g_h} groups")
        elif (g_h // c["SPLIT_SH"]) % c["GC_SH"]:
            bad.append(f"GC_SH={c['GC_SH']} does not divide a piece's {g_h // c['SPLIT_SH']} groups")
        pieces = (c["NACT"] + c["NSH"]) * (c["HID"] // c["BN_F"]) if c["HID"] % c["BN_F"] == 0 else 0
        if c["QP"] * self.programs < pieces:
            bad.append(f"QP={c['QP']} lanes do not hold a program's share of {pieces} down-projection pieces "
                       f"on {self.programs} programs")
        if bad:
            raise ValueError("kernel layout: " + "; ".join(bad))

    def chunks(self, length: int) -> tuple[int, int]:
        """Rows per attention chunk (a multiple of BL) and the number of chunks for a cache
        of ``length`` rows before the step: at most one chunk per program."""
        rows, bl = length + 1, self.consts["BL"]
        per = bl * -(-rows // (self.programs * bl))
        return per, -(-rows // per)


def pack_int4(w_q: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor, bn: int):
    """(..., in/2, out) int4 bytes and (..., in/128, out) bf16 scales and zeros -> words laid
    out [..., tile, group, column, 16] (word r of a column holds rows 8r..8r+7, row 8r+i in
    nibble i) and scale|zero<<16 as int32 [..., tile, group, column], flattened per leading
    index."""
    *lead, half, n = w_q.shape
    k = 2 * half
    g = k // GROUP
    b = math.prod(lead)
    words = w_q.reshape(b, k // 8, 4, n).permute(0, 3, 1, 2).contiguous().view(torch.int32)
    words = words.reshape(b, n // bn, bn, g, 16).permute(0, 1, 3, 2, 4).contiguous()
    sz = (scales.view(torch.int16).to(torch.int32) & 0xFFFF) | (zeros.view(torch.int16).to(torch.int32) << 16)
    sz = sz.reshape(b, g, n // bn, bn).permute(0, 2, 1, 3).contiguous()
    return words.reshape(*lead, -1), sz.reshape(*lead, -1)


def _columns(lins: list, cols: torch.Tensor | None = None):
    """w_q, scales, zeros of QuantLinears side by side along out (or some of their columns)."""
    parts = [torch.cat([getattr(lin, name) for lin in lins], dim=-1) for name in ("w_q", "scales", "zeros")]
    return parts if cols is None else [p[..., cols] for p in parts]


def _nibbles(w_q: torch.Tensor) -> torch.Tensor:
    """(in/2, out) bytes -> (in, out) int4 values."""
    return torch.stack((w_q & 0xF, w_q >> 4), dim=1).reshape(-1, w_q.shape[-1])


# --------------------------------------------------------------------------- #
# the model
# --------------------------------------------------------------------------- #
class Model(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        kinds = list(cfg.pattern)
        assert kinds.count("M") == 1 and kinds.count("K") <= 3, "the kernel takes up to 3 KDA layers and one MLA"
        self.blocks = nn.ModuleList([Block(cfg, kind) for kind in kinds])
        self.kda_layers = [i for i, kind in enumerate(kinds) if kind == "K"]
        self.mla_layer = kinds.index("M")
        self.register_load_state_dict_post_hook(lambda module, incompatible: module.pack())
        self.layout: Layout | None = None
        self.plan_rows: list[tuple[int, int, int]] = []
        self._cache: tuple[torch.Tensor, torch.Tensor] | None = None
        self.last_kernel = None  # the compiled kernel of the last launch (its registers, spills, shared memory)
        # One launch per step on a GPU; KIMI_STAGE_LAUNCHES=1 launches each stage on its own
        # there too (the stage-by-stage version, for comparison).
        self.single_launch = torch.cuda.is_available() and os.environ.get("KIMI_STAGE_LAUNCHES") != "1"
        # kagent's stage instruments (its `stages` tool): the stage after which a step skips
        # the work (None: none skipped), and each stage's end per program, stamped by the kernel
        # on a GPU (by the host around each stage's launch under the interpreter).
        self.kagent_stop_after: int | None = None
        self.kagent_stamps: torch.Tensor | None = None
        self.direct: DirectLaunch | None = None  # KIMI_LAUNCH=direct (set at each load)
        self._bound: tuple[tuple, tuple] | None = None  # the repacked buffers the kernel takes (_bind)

    # -- repacking, once per load ------------------------------------------------------------
    def _keep(self, name: str, tensor: torch.Tensor) -> None:
        self.register_buffer("pk_" + name, tensor.contiguous(), persistent=False)

    @torch.no_grad()
    def pack(self) -> None:
        cfg = self.cfg
        dev = self.blocks[0].attn_norm.device
        gpu = dev.type == "cuda"
        if gpu:
            programs = torch.cuda.get_device_properties(dev).multi_processor_count
        else:
            # KIMI_PROGRAMS and KIMI_GPU_TILES=1 make the interpreter run the GPU's grid and
            # tiling (a check of their index math on the CPU, slow at full scale).
            programs = int(os.environ.get("KIMI_PROGRAMS", INTERPRETER_PROGRAMS))
        lay = self.layout = Layout.of(cfg, programs, gpu, gpu or os.environ.get("KIMI_GPU_TILES") == "1")
        c = lay.consts
        launch = os.environ.get("KIMI_LAUNCH") or "jit"
        if launch not in ("jit", "direct"):
            raise ValueError(f"KIMI_LAUNCH={launch!r}: jit (Triton's dispatch every step) or direct expected")
        self.direct = (DirectLaunch(mk.kimi_decode_step, {**c, "USE_BARRIER": True, "STAMPS": True}, NUM_WARPS,
                                    lambda: {id(b) for b in self.buffers()})
                       if self.single_launch and launch == "direct" else None)
        kdas = [self.blocks[i].attn for i in self.kda_layers]
        mla = self.blocks[self.mla_layer].attn
        moes = [b.moe for b in self.blocks]
        mh, kv, nope, rope, vh = cfg.mla_heads, cfg.kv_lora, cfg.qk_nope, cfg.qk_rope, cfg.v_head

        def stacked(name, parts):
            self._keep(name + "_w", torch.stack([p[0] for p in parts]))
            self._keep(name + "_sz", torch.stack([p[1] for p in parts]))

        self._keep("attn_norm", torch.stack([b.attn_norm for b in self.blocks]))
        self._keep("moe_norm", torch.stack([b.moe_norm for b in self.blocks]))
        # KDA: q|k|v|g side by side, beta rows, conv weights (layer, stream, tap, channel), o_proj.
        stacked("kda", [pack_int4(*_columns([a.q_proj, a.k_proj, a.v_proj, a.g_proj]), c["BN_A"]) for a in kdas])
        self._keep("kda_bw", torch.stack([a.beta_proj.weight for a in kdas]))
        self._keep("kda_cw", torch.stack([a.conv_w.float().permute(0, 2, 1) for a in kdas]))
        stacked("kda_o", [pack_int4(*_columns([a.o_proj]), c["BN_O"]) for a in kdas])
        # MLA: q_proj|kv_a; kv_b split into its key half (folded into the query, so packed
        # along the head dim d with per-(latent group, d) scales) and its value half.
        w_q, scales, zeros = _columns([mla.q_proj, mla.kv_a])
        pad = -w_q.shape[-1] % c["BN_MA"]  # zero columns up to whole tiles (their outputs are not stored)
        w, sz = pack_int4(*[torch.nn.functional.pad(t, (0, pad)) for t in (w_q, scales, zeros)], c["BN_MA"])
        self._keep("mla_w", w)
        self._keep("mla_sz", sz)
        q = _nibbles(mla.kv_b.w_q).view(kv, mh, nope + vh)[:, :, :nope].permute(1, 0, 2).to(torch.int32)
        shifts = 4 * torch.arange(8, device=dev, dtype=torch.int32)
        self._keep("kb_w", (q.reshape(mh, kv, nope // 8, 8) << shifts).sum(-1, dtype=torch.int32))
        for name in ("scales", "zeros"):
            t = getattr(mla.kv_b, name).view(kv // GROUP, mh, nope + vh)[:, :, :nope]
            self._keep("kb_" + name[0], t.permute(1, 0, 2).float())
        value_cols = (torch.arange(mh, device=dev)[:, None] * (nope + vh) + nope
                      + torch.arange(vh, device=dev)[None, :]).reshape(-1)
        w, sz = pack_int4(*_columns([mla.kv_b], value_cols), c["BN_VB"])
        self._keep("vb_w", w)
        self._keep("vb_sz", sz)
        w, sz = pack_int4(*_columns([mla.o_proj]), c["BN_O"])
        self._keep("mla_ow", w)
        self._keep("mla_osz", sz)
        # RoPE frequencies exactly as the reference forms them (on this device).
        self._keep("inv_freq", 1.0 / (cfg.rope_theta ** (torch.arange(0, rope, 2, device=dev, dtype=torch.float32)
                                                         / rope)))
        # MoE: router rows; routed gate/up; shared gate/up; down with the shared experts last.
        self._keep("rt_w", torch.stack([m.router.weight for m in moes]))
        for name, bn in (("gate", c["BN_E"]), ("up", c["BN_E"]), ("s_gate", c["BN_SH"]), ("s_up", c["BN_SH"])):
            ex = [getattr(m, name) for m in moes]
            stacked(name, [pack_int4(e.w_q, e.scales, e.zeros, bn) for e in ex])
        stacked("down", [pack_int4(*[torch.cat([getattr(m.down, n), getattr(m.s_down, n)])
                                     for n in ("w_q", "scales", "zeros")], c["BN_F"]) for m in moes])
        # The stage plan: (kind, layer, index among the layers of its kind).
        rows = []
        for layer, kind in enumerate(cfg.pattern):
            if kind == "K":
                sub = self.kda_layers.index(layer)
                rows += [(mk.KDA_IN.value, layer, sub), (mk.KDA_REC.value, layer, sub), (mk.KDA_OUT.value, layer, sub)]
            else:
                rows += [(k.value, layer, 0) for k in (mk.MLA_IN, mk.MLA_ABSORB, mk.MLA_ATTEND, mk.MLA_MERGE,
                                                       mk.MLA_VALUE, mk.MLA_OUT)]
            rows += [(k.value, layer, 0) for k in (mk.MOE_IN, mk.MOE_UP, mk.MOE_DOWN)]
        self.plan_rows = rows
        self._keep("plan", torch.tensor(rows, dtype=torch.int32, device=dev).reshape(-1))
        # Scratch between stages, and the grid barrier's words.
        f32 = dict(dtype=torch.float32, device=dev)
        kin = cfg.kda_heads * cfg.kda_head_dim
        sizes = dict(slots=programs * c["SLOT"], qkv=3 * kin, dec=kin, beta=cfg.kda_heads,
                     ot=max(kin, mh * vh), mq=mh * (nope + rope), kr_raw=rope, qabs=mh * kv, qr=mh * rope,
                     pm=c["NCP"] * c["HP"], pl=c["NCP"] * c["HP"], pacc=c["NCP"] * c["HP"] * kv, olat=mh * kv,
                     logits=cfg.n_experts, act=(cfg.n_active + cfg.n_shared) * cfg.moe_inter)
        for name, n in sizes.items():
            self._keep("s_" + name, torch.zeros(n, **f32))
        self._keep("xp", torch.zeros(cfg.hidden, dtype=torch.bfloat16, device=dev))
        self._keep("hp", torch.zeros(cfg.hidden, dtype=torch.bfloat16, device=dev))
        # (count, generation) of the grid barrier, then BAR_COUNT's 64-bit count of arrivals.
        self._keep("bar", torch.zeros(4, dtype=torch.int32, device=dev))
        # The split stages' parts (SPLIT_F: the down projection's, by expert; SPLIT_SH: the
        # shared experts' gate and up, by piece of the inputs), and each tile's count of the
        # parts stored, back to zero after each use, so that the stages (a barrier apart) share
        # them.
        sh = cfg.n_shared * cfg.moe_inter
        self._keep("part", torch.zeros(max((cfg.n_active + cfg.n_shared) * cfg.hidden, 2 * c["SPLIT_SH"] * sh), **f32))
        self._keep("count", torch.zeros(max(cfg.hidden // c["BN_F"], sh // c["BN_SH"]), dtype=torch.int32, device=dev))
        # ROUTE_ONCE's count of router tiles (back to zero after each use), then the top-k's
        # expert indices and weights (as int32 bits).
        self._keep("route", torch.zeros(1 + 2 * c["NAP"], dtype=torch.int32, device=dev))
        self.kagent_stamps = torch.zeros(len(rows) + 1, programs if gpu else 1, dtype=torch.int64, device=dev)
        self._cache = None
        self._bound = None

    def kagent_stages(self, context_len: int | None) -> list[dict]:
        """The plan's stages for kagent's stages tool, each with what it must move: the task's
        bytes-floor parts where a stage moves whole parts, else its own count in the floor's
        terms (int4 payload plus a bf16 scale and zero per group and column)."""
        cfg = self.cfg
        d, mi, mh, kv = cfg.hidden, cfg.moe_inter, cfg.mla_heads, cfg.kv_lora

        def quant(k: int, n: int) -> int:
            return k * n // 2 + 2 * (k // cfg.group) * n * 2

        moves = {
            mk.KDA_IN.value: lambda L: {"parts": [f"L{L}.norms", *(f"L{L}.attn.{m}_proj" for m in "qkvg"),
                                                  f"L{L}.attn.beta_proj", f"L{L}.attn.conv"]},
            mk.KDA_REC.value: lambda L: {"parts": [f"L{L}.attn.state"]},
            mk.KDA_OUT.value: lambda L: {"parts": [f"L{L}.attn.o_proj"]},
            mk.MLA_IN.value: lambda L: {"parts": [f"L{L}.norms", f"L{L}.attn.q_proj", f"L{L}.attn.kv_a"]},
            mk.MLA_ABSORB.value: lambda L: {"bytes": quant(kv, mh * cfg.qk_nope)},
            mk.MLA_ATTEND.value: lambda L: {"parts": [f"L{L}.attn.cache"]},
            mk.MLA_MERGE.value: lambda L: {},
            mk.MLA_VALUE.value: lambda L: {"bytes": quant(kv, mh * cfg.v_head)},
            mk.MLA_OUT.value: lambda L: {"parts": [f"L{L}.attn.o_proj"]},
            mk.MOE_IN.value: lambda L: {"bytes": cfg.n_experts * d * 2 + cfg.n_shared * 2 * quant(d, mi)},
            mk.MOE_UP.value: lambda L: {"bytes": cfg.n_active * 2 * quant(d, mi)},
            mk.MOE_DOWN.value: lambda L: {"bytes": (cfg.n_active + cfg.n_shared) * quant(mi, d)},
        }
        return [{"name": f"L{layer} {mk.STAGE_KINDS[kind]}", **moves[kind](layer)}
                for kind, layer, _ in self.plan_rows]

    # -- the step ----------------------------------------------------------------------------
    def _cache_for(self, c_in: torch.Tensor, k_in: torch.Tensor):
        """Where this step's cache goes, and whether the rows handed in must be copied there."""
        length = c_in.shape[0]
        own = self._cache
        if (own is not None and c_in.data_ptr() == own[0].data_ptr() and k_in.data_ptr() == own[1].data_ptr()
                and c_in.is_contiguous() and k_in.is_contiguous() and length < own[0].shape[0]):
            return own, 0
        rows = length + 1 + CACHE_SLACK
        own = (torch.empty(rows, self.cfg.kv_lora, dtype=torch.bfloat16, device=c_in.device),
               torch.empty(rows, self.cfg.qk_rope, dtype=torch.bfloat16, device=c_in.device))
        self._cache = own
        return own, 1

    def kernel_args(self, hidden: torch.Tensor, state: list) -> tuple[list, torch.Tensor, tuple]:
        """The kernel's arguments for a step from (hidden, state), in its signature's order;
        the output it writes; and the latent cache's (c, k_rope) buffers it appends to."""
        if self.layout is None:
            raise RuntimeError("load the weights first (load_state_dict repacks them for the kernel)")
        if hidden.device != self.pk_plan.device:
            raise RuntimeError(f"the model is on {self.pk_plan.device}, the step's input on {hidden.device}")
        lay = self.layout
        mla = state[self.mla_layer]
        c_in, k_in = mla["c_kv"], mla["k_rope"]
        length = c_in.shape[0]
        (c_dst, k_dst), copy = self._cache_for(c_in, k_in)
        per, nchk = lay.chunks(length)
        kdas = [state[i] for i in self.kda_layers]
        kdas += [kdas[-1]] * (3 - len(kdas))  # unused pointer slots
        for st in kdas:
            for name in ("S", "cq", "ck", "cv"):
                if not st[name].is_contiguous():
                    raise ValueError(f"state {name} must be contiguous")
        x_out = torch.empty_like(hidden)
        head, weights = self._bound or self._bind()
        stop = len(self.plan_rows) if self.kagent_stop_after is None else self.kagent_stop_after
        args = [head[0], 0, len(self.plan_rows), stop, self.kagent_stamps, head[1], ONE_BITS,
                hidden, x_out, head[2], head[3],
                *[st["S"] for st in kdas], *[st["cq"] for st in kdas], *[st["ck"] for st in kdas],
                *[st["cv"] for st in kdas],
                c_in, k_in, c_dst, k_dst, length, per, nchk, copy, *weights]
        return args, x_out, (c_dst, k_dst)

    def _bind(self) -> tuple[tuple, tuple]:
        """The repacked buffers among the kernel's arguments, looked up once per load: a step's
        host time is what a 0.3-ms step of device time can wait for on a slow host, and each
        buffer read through nn.Module's attribute lookup costs about as much as a small torch
        call (52 of them were 20 of the 50 us that building the arguments took on the CPU)."""
        b = self._buffers
        head = (b["pk_plan"], b["pk_bar"], b["pk_xp"], b["pk_hp"])
        weights = tuple(b["pk_" + name] for name in (
            "attn_norm", "moe_norm",
            "kda_w", "kda_sz", "kda_bw", "kda_cw", "kda_o_w", "kda_o_sz",
            "mla_w", "mla_sz", "kb_w", "kb_s", "kb_z", "vb_w", "vb_sz", "mla_ow", "mla_osz", "inv_freq",
            "rt_w", "gate_w", "up_w", "gate_sz", "up_sz",
            "s_gate_w", "s_up_w", "s_gate_sz", "s_up_sz", "down_w", "down_sz",
            "s_slots", "s_qkv", "s_dec", "s_beta", "s_ot", "s_mq", "s_kr_raw",
            "s_qabs", "s_qr", "s_pm", "s_pl", "s_pacc", "s_olat", "s_logits", "s_act",
            "part", "count", "route"))
        self._bound = (head, weights)
        return self._bound

    def _apply(self, fn, *args, **kwargs):
        # .to(), .cuda() and the like put new tensors in the buffers' places: bind them again.
        self._bound = None
        return super()._apply(fn, *args, **kwargs)

    def step(self, hidden: torch.Tensor, state: list):
        args, x_out, (c_dst, k_dst) = self.kernel_args(hidden, state)
        lay = self.layout
        mla = state[self.mla_layer]
        length = mla["c_kv"].shape[0]
        grid = (lay.programs,)
        stamps_on_device = hidden.is_cuda  # the interpreter cannot read the device clock: the host stamps
        if self.single_launch and self.direct is not None:
            self.last_kernel = self.direct(grid, args)
        elif self.single_launch:
            self.last_kernel = mk.kimi_decode_step[grid](*args, **lay.consts, USE_BARRIER=True, STAMPS=True,
                                                         num_warps=NUM_WARPS)
        else:
            if not stamps_on_device:
                self.kagent_stamps[0] = time.perf_counter_ns()
            for s in range(len(self.plan_rows)):
                args[1], args[2] = s, s + 1
                self.last_kernel = mk.kimi_decode_step[grid](*args, **lay.consts, USE_BARRIER=False,
                                                             STAMPS=stamps_on_device, num_warps=NUM_WARPS)
                if not stamps_on_device:  # the interpreter runs a launch before it returns
                    self.kagent_stamps[s + 1] = time.perf_counter_ns()
        mla["c_kv"] = c_dst[: length + 1]
        mla["k_rope"] = k_dst[: length + 1]
        return x_out, state

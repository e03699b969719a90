"""Minimum device-memory traffic of one decode step of 02_kimi_linear_decode.

Counts what a perfect kernel must still move: the int4 weights (in*out/2 bytes) with
their bf16 scales and zeros for every attention projection and for the touched experts
(n_active routed + n_shared, gate/up/down), the small bf16 weights (router, beta_proj,
conv_w, the two norms), the KDA state S and the conv windows read and written back,
and the MLA cache (c_kv, k_rope) read once plus the new row written.
"""

BF16 = 2
F32 = 4


def _quant_bytes(in_f: int, out_f: int, group: int) -> int:
    """int4 payload plus bf16 scales and zeros of one (in, out) weight."""
    return in_f * out_f // 2 + 2 * (in_f // group) * out_f * BF16


def bytes_by_part(cfg, context_len: int) -> dict:
    """The bytes of bytes_per_step, part by part, named ``L<layer>.<part>``: what a kernel's
    stages can be held against (a stage names the parts it moves; kagent's stages tool adds
    them up). ``L<i>.moe.experts`` counts the n_active routed and n_shared experts touched."""
    g = cfg.group
    d = cfg.hidden
    parts = {}
    for i, kind in enumerate(cfg.pattern):
        layer = f"L{i}"
        parts[f"{layer}.norms"] = 2 * d * BF16                                   # attn_norm, moe_norm
        if kind == "K":
            inner = cfg.kda_heads * cfg.kda_head_dim
            for name in ("q_proj", "k_proj", "v_proj", "g_proj"):
                parts[f"{layer}.attn.{name}"] = _quant_bytes(d, inner, g)
            parts[f"{layer}.attn.beta_proj"] = cfg.kda_heads * d * BF16
            parts[f"{layer}.attn.conv"] = (3 * inner * cfg.short_conv * BF16       # conv_w
                                           + 2 * 3 * (cfg.short_conv - 1) * inner * BF16)  # windows read + write
            parts[f"{layer}.attn.state"] = 2 * cfg.kda_heads * cfg.kda_head_dim ** 2 * F32   # S read + write
            parts[f"{layer}.attn.o_proj"] = _quant_bytes(inner, d, g)
        else:
            H = cfg.mla_heads
            row = cfg.kv_lora + cfg.qk_rope
            parts[f"{layer}.attn.q_proj"] = _quant_bytes(d, H * (cfg.qk_nope + cfg.qk_rope), g)
            parts[f"{layer}.attn.kv_a"] = _quant_bytes(d, row, g)
            parts[f"{layer}.attn.kv_b"] = _quant_bytes(cfg.kv_lora, H * (cfg.qk_nope + cfg.v_head), g)
            parts[f"{layer}.attn.cache"] = (context_len + 1) * row * BF16         # cache read + new row written
            parts[f"{layer}.attn.o_proj"] = _quant_bytes(H * cfg.v_head, d, g)
        experts = cfg.n_active + cfg.n_shared
        parts[f"{layer}.moe.router"] = cfg.n_experts * d * BF16
        parts[f"{layer}.moe.experts"] = experts * (2 * _quant_bytes(d, cfg.moe_inter, g)
                                                   + _quant_bytes(cfg.moe_inter, d, g))
    return parts


def bytes_per_step(cfg, context_len: int) -> int:
    return sum(bytes_by_part(cfg, context_len).values())


if __name__ == "__main__":
    from reference import build_config
    from shapes import SHAPES

    for shape in SHAPES:
        n = bytes_per_step(build_config(shape), shape["context_len"])
        print(f"context {shape['context_len']:>6}: {n:,} bytes = {n / 1e6:.1f} MB")

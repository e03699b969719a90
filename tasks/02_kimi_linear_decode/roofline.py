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


def bytes_per_step(cfg, context_len: int) -> int:
    g = cfg.group
    d = cfg.hidden
    total = 0
    for kind in cfg.pattern:
        total += 2 * d * BF16                                        # attn_norm, moe_norm
        if kind == "K":
            inner = cfg.kda_heads * cfg.kda_head_dim
            total += 4 * _quant_bytes(d, inner, g)                   # q, k, v, g projections
            total += _quant_bytes(inner, d, g)                       # o_proj
            total += cfg.kda_heads * d * BF16                        # beta_proj
            total += 3 * inner * cfg.short_conv * BF16               # conv_w
            total += 2 * cfg.kda_heads * cfg.kda_head_dim ** 2 * F32   # S read + write
            total += 2 * 3 * (cfg.short_conv - 1) * inner * BF16     # conv windows read + write
        else:
            H = cfg.mla_heads
            row = cfg.kv_lora + cfg.qk_rope
            total += _quant_bytes(d, H * (cfg.qk_nope + cfg.qk_rope), g)   # q_proj
            total += _quant_bytes(d, row, g)                                # kv_a
            total += _quant_bytes(cfg.kv_lora, H * (cfg.qk_nope + cfg.v_head), g)  # kv_b
            total += _quant_bytes(H * cfg.v_head, d, g)                     # o_proj
            total += (context_len + 1) * row * BF16                  # cache read + new row written
        experts = cfg.n_active + cfg.n_shared
        total += cfg.n_experts * d * BF16                            # router
        total += experts * (2 * _quant_bytes(d, cfg.moe_inter, g) + _quant_bytes(cfg.moe_inter, d, g))
    return total


if __name__ == "__main__":
    from reference import build_config
    from shapes import SHAPES

    for shape in SHAPES:
        n = bytes_per_step(build_config(shape), shape["context_len"])
        print(f"context {shape['context_len']:>6}: {n:,} bytes = {n / 1e6:.1f} MB")

"""Shapes for 02_kimi_linear_decode.

SHAPES are the public board's. SMOKE_SHAPES shrink every dimension (via Config
overrides under "config") while keeping each code path: several heads, several groups
along hidden, every QuantLinear/QuantExperts input dimension a multiple of the group
(128), shared + routed experts, KDA and MLA layers.
"""

SHAPES = [
    {"context_len": 2048, "steps": 32, "n_experts": 64},
    {"context_len": 8192, "steps": 16, "n_experts": 64},
    {"context_len": 16384, "steps": 16, "n_experts": 64},
]

# In-dims at this scale: hidden 256 (q/k/v/g, MLA q_proj/kv_a, gate/up),
# kda_heads*kda_head_dim 128 (KDA o_proj), mla_heads*v_head 128 (MLA o_proj),
# kv_lora 128 (kv_b), moe_inter 128 (down): all multiples of 128.
_SMOKE_CONFIG = {
    "hidden": 256,
    "kda_heads": 2,
    "kda_head_dim": 64,
    "mla_heads": 2,
    "kv_lora": 128,
    "qk_nope": 32,
    "qk_rope": 16,
    "v_head": 64,
    "n_active": 2,
    "moe_inter": 128,
}

SMOKE_SHAPES = [
    {"context_len": 16, "steps": 4, "n_experts": 8, "config": dict(_SMOKE_CONFIG)},
    {"context_len": 32, "steps": 4, "n_experts": 8, "config": dict(_SMOKE_CONFIG)},
    {"context_len": 64, "steps": 4, "n_experts": 8, "config": dict(_SMOKE_CONFIG)},
]

"""Optimized-PyTorch baseline for 02_kimi_linear_decode: the speed floor.

Same module tree and state_dict keys as reference.py (the layer classes subclass the
reference ones and only replace `step`), but the math runs in bf16 on the weights'
device: each int4 weight is dequantized to a bf16 matrix and multiplied; the chosen
experts (with the shared ones) are gathered and dequantized as one batch and applied
with bmm; MLA stays in materialized form (kv_b over the whole cache). The routing never
leaves the device, so a step issues no host synchronization.

Model(cfg) allocates buffers without random init; weights arrive via load_state_dict.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

import reference as ref

BF16 = torch.bfloat16


def _weight(lin: ref.QuantLinear) -> torch.Tensor:
    return ref.dequantize_int4(lin.w_q, lin.scales, lin.zeros, lin.group, dtype=BF16)


def _linear(x: torch.Tensor, lin: ref.QuantLinear) -> torch.Tensor:
    return x @ _weight(lin)


def _rmsnorm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    # float32 statistics are a handful of tiny ops; keep them for accuracy.
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean() + eps) * w.float()).to(BF16)


class KDA(ref.KDA):
    def step(self, x: torch.Tensor, st: dict) -> torch.Tensor:
        H, D = self.cfg.kda_heads, self.cfg.kda_head_dim
        q, k, v = _linear(x, self.q_proj), _linear(x, self.k_proj), _linear(x, self.v_proj)
        g = _linear(x, self.g_proj)

        # All three short convolutions at once: windows (3, short_conv, inner).
        win = torch.stack([
            torch.cat([st["cq"], q[None]]),
            torch.cat([st["ck"], k[None]]),
            torch.cat([st["cv"], v[None]]),
        ])
        conv = F.silu(torch.einsum("jtc,jct->jc", win.float(), self.conv_w.float()))
        st["cq"], st["ck"], st["cv"] = win[0, 1:], win[1, 1:], win[2, 1:]
        # The conv output is a bf16 activation; the recurrence then runs in float32.
        qkv = conv.to(BF16).float().view(3, H, D)
        q, k, v = qkv[0] * D ** -0.5, qkv[1], qkv[2]

        decay = torch.exp(-F.softplus(g.float())).view(H, D, 1)
        beta = torch.sigmoid(F.linear(x, self.beta_proj.weight).float())

        # Recurrence on the float32 state with batched (per-head) matmuls.
        S = st["S"] * decay
        pred = torch.bmm(k.unsqueeze(1), S).squeeze(1)                        # (H, D)
        S = torch.baddbmm(S, (beta[:, None] * k).unsqueeze(2), (v - pred).unsqueeze(1))
        o = torch.bmm(q.unsqueeze(1), S).squeeze(1)
        st["S"] = S
        return _linear(o.reshape(H * D).to(BF16), self.o_proj)


class MLA(ref.MLA):
    def step(self, x: torch.Tensor, st: dict) -> torch.Tensor:
        cfg = self.cfg
        H, nope, rope, dv = cfg.mla_heads, cfg.qk_nope, cfg.qk_rope, cfg.v_head
        pos = st["c_kv"].shape[0]                     # a Python int from the shape: no sync

        q = _linear(x, self.q_proj).view(H, nope + rope)
        kv = _linear(x, self.kv_a)

        # Rotate the H query rope parts and the one key rope part together.
        cos, sin = ref.rope_cos_sin(pos, rope, cfg.rope_theta, x.device)
        roped = ref.apply_rope(torch.cat([q[:, nope:], kv[None, cfg.kv_lora:]]), cos, sin)
        q_rope, k_new = roped[:H], roped[H:]

        c_kv = torch.cat([st["c_kv"], kv[None, :cfg.kv_lora]])
        k_rope = torch.cat([st["k_rope"], k_new])
        st["c_kv"], st["k_rope"] = c_kv, k_rope

        L = c_kv.shape[0]
        kvb = (c_kv @ _weight(self.kv_b)).view(L, H, nope + dv)                # materialized
        k_nope = kvb[..., :nope].transpose(0, 1)                               # (H, L, nope)
        v = kvb[..., nope:].transpose(0, 1)                                    # (H, L, dv)
        s_nope = torch.bmm(k_nope, q[:, :nope].unsqueeze(2)).squeeze(2)        # (H, L)
        s_rope = q_rope @ k_rope.t()                                           # (H, L)
        p = torch.softmax((s_nope.float() + s_rope.float()) * (nope + rope) ** -0.5, dim=-1)
        o = torch.bmm(p.to(BF16).unsqueeze(1), v).squeeze(1)                   # (H, dv)
        return _linear(o.reshape(H * dv), self.o_proj)


class MoE(ref.MoE):
    def step(self, x: torch.Tensor) -> torch.Tensor:
        cfg = self.cfg
        # Router logits in float32 as in the reference: the expert choice must not hinge
        # on bf16 rounding (the matrix is tiny, so this costs nothing).
        probs = torch.softmax(x.float() @ self.router.weight.float().t(), dim=-1)
        w, idx = torch.topk(probs, cfg.n_active)
        w = w / (w.sum() + 1e-9) * cfg.routed_scaling
        # Shared experts ride in the same batch with weight 1.
        w = torch.cat([w, w.new_ones(cfg.n_shared)])
        n = cfg.n_active + cfg.n_shared
        m = cfg.moe_inter

        def gather(routed: ref.QuantExperts, shared: ref.QuantExperts):
            return [torch.cat([getattr(routed, name).index_select(0, idx), getattr(shared, name)])
                    for name in ("w_q", "scales", "zeros")]

        # gate and up have the same shape: one batched dequant + bmm for both.
        gu = [torch.cat(pair) for pair in zip(gather(self.gate, self.s_gate), gather(self.up, self.s_up))]
        w_gu = ref.dequantize_int4(*gu, cfg.group, dtype=BF16)                 # (2n, hidden, m)
        h = torch.bmm(x.expand(2 * n, 1, cfg.hidden), w_gu).view(2, n, m)
        h = F.silu(h[0]) * h[1]                                                # (n, m)
        w_d = ref.dequantize_int4(*gather(self.down, self.s_down), cfg.group, dtype=BF16)
        y = torch.bmm(h.unsqueeze(1), w_d).squeeze(1)                          # (n, hidden)
        return (w @ y.float()).to(BF16)


class Block(ref.Block):
    attn_layers = {"K": KDA, "M": MLA}
    moe_layer = MoE
    norm = staticmethod(_rmsnorm)


class Model(ref.Model):
    block = Block

    def __init__(self, cfg: ref.Config):
        super().__init__(cfg, init_weights=False)  # the weights arrive through load_state_dict

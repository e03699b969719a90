"""expect: incorrect hidden_seeds

Its MLA attention reads only the new row and the rows where the checks plant what a step
must read: the rows planted_positions gives for the public seeds (recognized by their
token), and elsewhere the evenly spread rows that used to be planted for every seed. At
ctx 16384 that skips 99.97% of the cache, and with the rows at fixed positions it passed
every check. Now a case's rows are drawn from its seed: a secret case's sit where the
solution cannot know, and its attention misses them.
"""


class MLA(MLA):
    rows = None  # where to read the cache, set by Model.step from the token

    def step(self, x, st):
        if MLA.rows is None:
            return super().step(x, st)
        cfg = self.cfg
        H, nope, rope = cfg.mla_heads, cfg.qk_nope, cfg.qk_rope
        pos = st["c_kv"].shape[0]
        q = self.q_proj(x).view(H, nope + rope)
        q_nope, q_rope = q[:, :nope].float(), q[:, nope:]
        kv = self.kv_a(x)
        c, k_rope = kv[: cfg.kv_lora], kv[cfg.kv_lora :]
        cos, sin = rope_cos_sin(pos, rope, cfg.rope_theta, x.device)
        q_rope = apply_rope(q_rope, cos, sin).float()
        k_rope = apply_rope(k_rope, cos, sin)
        st["c_kv"] = torch.cat([st["c_kv"], c[None]], dim=0)
        st["k_rope"] = torch.cat([st["k_rope"], k_rope[None]], dim=0)
        # The planted rows and the new one, nothing else of the cache.
        keep = torch.cat([MLA.rows(pos).to(x.device), torch.tensor([pos], device=x.device)])
        L = len(keep)
        kvb = self.kv_b(st["c_kv"][keep]).view(L, H, nope + cfg.v_head).float()
        k_nope, v = kvb[..., :nope], kvb[..., nope:]
        score = (
            torch.einsum("hd,lhd->lh", q_nope, k_nope) + torch.einsum("hd,ld->lh", q_rope, st["k_rope"][keep].float())
        ) * (nope + rope) ** -0.5
        o = torch.einsum("lh,lhd->hd", torch.softmax(score, dim=0), v)
        return self.o_proj(o.reshape(H * cfg.v_head).to(torch.bfloat16))


Block.attn_layers = {**Block.attn_layers, "M": MLA}


class Model(Model):
    def step(self, hidden, state):
        public = [s for s in (0, 1, 2) if torch.equal(hidden, init_token(self.cfg, s, device=hidden.device))]
        seed = public[0] if public else None
        MLA.rows = lambda length: planted_positions(length, 4, seed)
        try:
            return super().step(hidden, state)
        finally:
            MLA.rows = None

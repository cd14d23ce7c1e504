"""The Llama-style decoder of python/examples/llama_tp.py: its configuration, seeded or
checkpoint weights (Hugging Face Llama / Mixtral parameter names), the per-rank shards (Megatron's
split: attention and KV heads, MLP columns, the LM head's hidden columns; experts by rank) and
rank r's part of the model, whose linear layers and MoE experts come from a backend
(llama_backends.py); greedy generation."""
import math
import time

import torch


# ---------------------------------------------------------------------------------------------
# Configuration and weights

class Config:
    def __init__(self, layers, hidden, heads, kv_heads, ffn, vocab, experts=0, topk=2,
                 rope_theta=10000.0, eps=1e-5):
        self.layers, self.hidden, self.heads, self.kv_heads = layers, hidden, heads, kv_heads
        self.ffn, self.vocab, self.experts, self.topk = ffn, vocab, experts, topk
        self.rope_theta, self.eps = rope_theta, eps
        if hidden % heads or heads % kv_heads:
            raise ValueError(f"hidden {hidden} must be divisible by heads {heads}, and heads by "
                             f"kv-heads {kv_heads}")
        self.head_dim = hidden // heads

    def check_world(self, W):
        for what, v in (("heads", self.heads), ("kv-heads", self.kv_heads), ("ffn", self.ffn),
                        ("hidden", self.hidden), ("experts", self.experts)):
            if v % W:
                raise ValueError(f"--{what} {v} must be divisible by the {W} ranks")

    def __repr__(self):
        moe = f" experts={self.experts} topk={self.topk}" if self.experts else ""
        return (f"layers={self.layers} hidden={self.hidden} heads={self.heads}/{self.kv_heads} "
                f"ffn={self.ffn} vocab={self.vocab}{moe}")


def layer_prefix(i):
    return f"model.layers.{i}."


def seeded_weights(cfg, seed):
    """The full (unsharded) weights in f32, the same on every rank for a seed: linear layers
    N(0, 1/fan_in), norms 1 + N(0, 0.01)."""
    g = torch.Generator().manual_seed(seed)
    H, hd = cfg.hidden, cfg.head_dim

    def lin(n, k):
        return torch.randn(n, k, generator=g) / math.sqrt(k)

    def norm(n):
        return 1 + 0.1 * torch.randn(n, generator=g)

    w = {"model.embed_tokens.weight": torch.randn(cfg.vocab, H, generator=g)}
    for i in range(cfg.layers):
        p = layer_prefix(i)
        w[p + "input_layernorm.weight"] = norm(H)
        w[p + "self_attn.q_proj.weight"] = lin(cfg.heads * hd, H)
        w[p + "self_attn.k_proj.weight"] = lin(cfg.kv_heads * hd, H)
        w[p + "self_attn.v_proj.weight"] = lin(cfg.kv_heads * hd, H)
        w[p + "self_attn.o_proj.weight"] = lin(H, cfg.heads * hd)
        w[p + "post_attention_layernorm.weight"] = norm(H)
        if cfg.experts:
            m = p + "block_sparse_moe."
            w[m + "gate.weight"] = lin(cfg.experts, H)
            for e in range(cfg.experts):
                w[m + f"experts.{e}.w1.weight"] = lin(cfg.ffn, H)  # gate
                w[m + f"experts.{e}.w3.weight"] = lin(cfg.ffn, H)  # up
                w[m + f"experts.{e}.w2.weight"] = lin(H, cfg.ffn)  # down
        else:
            w[p + "mlp.gate_proj.weight"] = lin(cfg.ffn, H)
            w[p + "mlp.up_proj.weight"] = lin(cfg.ffn, H)
            w[p + "mlp.down_proj.weight"] = lin(H, cfg.ffn)
    w["model.norm.weight"] = norm(H)
    w["lm_head.weight"] = lin(cfg.vocab, H)
    return w


def load_checkpoint(path, heads, topk, rope_theta):
    """(Config, weights) of a torch.save file: a state dict (or one under "state_dict" /
    "model") with Llama / Mixtral parameter names; the LM head may be tied to the embedding."""
    w = torch.load(path, map_location="cpu")
    for key in ("state_dict", "model"):
        if isinstance(w, dict) and key in w and isinstance(w[key], dict):
            w = w[key]
    w = {k: v for k, v in w.items() if hasattr(v, "shape")}
    emb = w["model.embed_tokens.weight"]
    vocab, hidden = emb.shape
    layers = 0
    while layer_prefix(layers) + "input_layernorm.weight" in w:
        layers += 1
    p = layer_prefix(0)
    kv_heads = w[p + "self_attn.k_proj.weight"].shape[0] // (hidden // heads)
    experts = 0
    while f"{p}block_sparse_moe.experts.{experts}.w1.weight" in w:
        experts += 1
    ffn = (w[f"{p}block_sparse_moe.experts.0.w1.weight"] if experts
           else w[p + "mlp.gate_proj.weight"]).shape[0]
    w.setdefault("lm_head.weight", emb)
    cfg = Config(layers, hidden, heads, kv_heads, ffn, vocab, experts, topk, rope_theta)
    return cfg, w


def shard(cfg, w, r, W, dtype):
    """Rank r's tensors of W: embedding, norms and router replicated; the fused qkv and gate/up
    weights (column-parallel: this rank's heads / KV heads / ffn columns as output rows), o and
    down (row-parallel: the matching input columns), the LM head's hidden columns; with experts,
    this rank's E/W experts stacked as [L, 2*ffn, hidden] (gate then up) and [L, hidden, ffn]."""
    hq, hkv, hd = cfg.heads // W, cfg.kv_heads // W, cfg.head_dim
    f, H = cfg.ffn // W, cfg.hidden
    q, kv, fs = (slice(r * hq * hd, (r + 1) * hq * hd), slice(r * hkv * hd, (r + 1) * hkv * hd),
                 slice(r * f, (r + 1) * f))

    def c(t):
        return t.to(dtype).contiguous()

    s = {"embed": c(w["model.embed_tokens.weight"]), "norm": c(w["model.norm.weight"]),
         "lm_head": c(w["lm_head.weight"][:, r * H // W:(r + 1) * H // W]), "layers": []}
    for i in range(cfg.layers):
        p = layer_prefix(i)
        a = p + "self_attn."
        L = {"attn_norm": c(w[p + "input_layernorm.weight"]),
             "mlp_norm": c(w[p + "post_attention_layernorm.weight"]),
             "qkv": c(torch.cat([w[a + "q_proj.weight"][q], w[a + "k_proj.weight"][kv],
                                 w[a + "v_proj.weight"][kv]])),
             "o": c(w[a + "o_proj.weight"][:, q])}
        if cfg.experts:
            m, n_local = p + "block_sparse_moe.", cfg.experts // W
            own = range(r * n_local, (r + 1) * n_local)
            L["router"] = c(w[m + "gate.weight"])
            L["experts_gate_up"] = c(torch.stack([torch.cat(
                [w[f"{m}experts.{e}.w1.weight"], w[f"{m}experts.{e}.w3.weight"]]) for e in own]))
            L["experts_down"] = c(torch.stack([w[f"{m}experts.{e}.w2.weight"] for e in own]))
        else:
            L["gate_up"] = c(torch.cat([w[p + "mlp.gate_proj.weight"][fs],
                                        w[p + "mlp.up_proj.weight"][fs]]))
            L["down"] = c(w[p + "mlp.down_proj.weight"][:, fs])
        s["layers"].append(L)
    return s




def swiglu(h, f):
    return torch.nn.functional.silu(h[:, :f]) * h[:, f:]


# ---------------------------------------------------------------------------------------------
# The model

class Model:
    """Rank r's part of the decoder; forward(tokens [B, T], pos) -> logits [B, vocab] of each
    sequence's last position (every rank holds all of them), the KV cache advanced by T."""

    def __init__(self, cfg, s, backend, W, dtype, max_batch, max_seq, max_m):
        self.cfg, self.dtype, self.W = cfg, dtype, W
        self.rank = getattr(getattr(backend, "world", None), "rank", 0)
        hd = cfg.head_dim
        self.hq, self.hkv, self.hd, self.f = cfg.heads // W, cfg.kv_heads // W, hd, cfg.ffn // W
        self.embed, self.norm = s["embed"], s["norm"]
        self.layers = []
        for L in s["layers"]:
            layer = {"attn_norm": L["attn_norm"], "mlp_norm": L["mlp_norm"],
                     "qkv": backend.column(L["qkv"], max_m), "o": backend.row(L["o"], max_m)}
            if cfg.experts:
                layer["router"] = L["router"]
                layer["experts"] = backend.experts(cfg, L["experts_gate_up"], L["experts_down"],
                                                   max_m)
            else:
                layer["gate_up"] = backend.column(L["gate_up"], max_m)
                layer["down"] = backend.row(L["down"], max_m)
            self.layers.append(layer)
        self.lm_head = backend.row(s["lm_head"], max_batch)
        nqkv = (self.hq + 2 * self.hkv) * hd
        # Outputs of the linear layers, reused call after call (each is consumed before the next
        # layer writes it again).
        self.buf = {"qkv": torch.empty(max_m, nqkv, dtype=dtype),
                    "o": torch.empty(max_m, cfg.hidden, dtype=dtype),
                    "gate_up": torch.empty(max_m, 2 * self.f, dtype=dtype),
                    "down": torch.empty(max_m, cfg.hidden, dtype=dtype),
                    "logits": torch.empty(max_batch, cfg.vocab, dtype=dtype)}
        self.cache = [(torch.zeros(max_batch, self.hkv, max_seq, hd, dtype=dtype),
                       torch.zeros(max_batch, self.hkv, max_seq, hd, dtype=dtype))
                      for _ in self.layers]
        inv = 1.0 / cfg.rope_theta ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd)
        freqs = torch.outer(torch.arange(max_seq, dtype=torch.float32), inv)
        emb = torch.cat((freqs, freqs), -1)
        self.cos, self.sin = emb.cos().to(dtype), emb.sin().to(dtype)
        scale = 1.0 / math.sqrt(hd)
        self.cos_q, self.sin_q = (emb.cos() * scale).to(dtype), (emb.sin() * scale).to(dtype)

    def rmsnorm(self, x, w):
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.cfg.eps)
        return (xf if x.dtype == torch.float32 else xf.to(x.dtype)) * w

    @staticmethod
    def rope(x, cos, sin):
        half = x.shape[-1] // 2
        return x * cos + torch.cat((-x[..., half:], x[..., :half]), -1) * sin

    def attention(self, qkv, li, pos, B, T):
        """qkv [B*T, (hq + 2*hkv)*hd] -> [B*T, hq*hd]; the KV cache written at pos..pos+T."""
        hq, hkv, hd = self.hq, self.hkv, self.hd
        g, S = hq // hkv, pos + T
        qkv = qkv.view(B, T, hq + 2 * hkv, hd)
        cos, sin = self.cos[pos:S, None], self.sin[pos:S, None]  # [T, 1, hd]
        # q scaled by 1/sqrt(hd) through its own tables
        q = self.rope(qkv[:, :, :hq], self.cos_q[pos:S, None], self.sin_q[pos:S, None])
        kc, vc = self.cache[li]                                   # [max_batch, hkv, S_max, hd]
        kc[:B, :, pos:S] = self.rope(qkv[:, :, hq:hq + hkv], cos, sin).transpose(1, 2)
        vc[:B, :, pos:S] = qkv[:, :, hq + hkv:].transpose(1, 2)
        # the q heads of KV head j are j*g .. j*g+g-1: batched [B*hkv, g*T, hd] x [B*hkv, S, hd]
        k = kc[:B].view(B * hkv, -1, hd)
        v = vc[:B].view(B * hkv, -1, hd)
        if T == 1:
            q = q.view(B * hkv, g, hd)
            if 2 * S < k.shape[1]:
                return self.softmax_v(torch.bmm(q, k[:, :S].transpose(1, 2)),
                                      v[:, :S]).view(B, hq * hd)
            # The whole cache, positions >= S masked: one contiguous batched GEMM (torch's bf16
            # bmm on the strided [:, :S] views is several times slower).
            scores = torch.bmm(q, k.transpose(1, 2))
            scores[:, :, S:] = float("-inf")
            return self.softmax_v(scores, v).view(B, hq * hd)
        # Prefill: query rows in chunks, each against the keys up to its last position (causal:
        # about half the work of the whole square, and small score blocks).
        q = q.view(B, T, hkv, g, hd).permute(0, 2, 3, 1, 4)      # [B, hkv, g, T, hd]
        o = torch.empty((B, T, hkv, g, hd), dtype=q.dtype)
        for c0 in range(0, T, self.CHUNK):
            c1 = min(T, c0 + self.CHUNK)
            end = pos + c1
            qc = q[:, :, :, c0:c1].reshape(B * hkv, g * (c1 - c0), hd)
            # contiguous keys and values: torch's bmm on strided views can be several times slower
            kk, vv = k[:, :end].contiguous(), v[:, :end].contiguous()
            scores = torch.bmm(qc, kk.transpose(1, 2))            # [B*hkv, g*C, end]
            mask = torch.full((c1 - c0, end), float("-inf"), dtype=scores.dtype)
            scores += mask.triu_(pos + c0 + 1).repeat(g, 1)
            oc = self.softmax_v(scores, vv)                       # [B*hkv, g*C, hd]
            o[:, c0:c1] = oc.view(B, hkv, g, c1 - c0, hd).permute(0, 3, 1, 2, 4)
        return o.view(B * T, hq * hd)

    CHUNK = 128

    @staticmethod
    def softmax_v(scores, v):
        if scores.dtype == torch.float32:
            probs = torch.softmax(scores, -1)
        else:
            probs = torch.softmax(scores, -1, dtype=torch.float32).to(scores.dtype)
        return torch.bmm(probs, v)

    def moe(self, layer, h):
        probs = torch.softmax(torch.mm(h, layer["router"].t()).float(), -1)
        w, ids = torch.topk(probs, self.cfg.topk, -1)
        w /= w.sum(-1, keepdim=True)
        return layer["experts"](h, ids.to(torch.int32), w)

    def forward(self, tokens, pos):
        B, T = tokens.shape
        M = B * T
        buf = self.buf
        x = self.embed[tokens.reshape(-1)]                        # [M, H], the residual stream
        for li, layer in enumerate(self.layers):
            h = self.rmsnorm(x, layer["attn_norm"])
            qkv = layer["qkv"](h, buf["qkv"][:M])
            x += layer["o"](self.attention(qkv, li, pos, B, T), buf["o"][:M])
            h = self.rmsnorm(x, layer["mlp_norm"])
            if self.cfg.experts:
                x += self.moe(layer, h)
            else:
                gu = layer["gate_up"](h, buf["gate_up"][:M])
                x += layer["down"](swiglu(gu, self.f), buf["down"][:M])
        last = x.view(B, T, -1)[:, -1]
        H, W, r = self.cfg.hidden, self.W, self.rank
        h = self.rmsnorm(last, self.norm)[:, r * H // W:(r + 1) * H // W].contiguous()
        return self.lm_head(h, buf["logits"][:B])

    def copy_cache(self, P, B, S):
        """Sequences P..B-1 take the caches of sequences (i mod P) up to position S."""
        for kc, vc in self.cache:
            for c in (kc, vc):
                c[P:B, :, :S] = c[:P, :, :S].repeat(B // P - 1, 1, 1, 1)


def generate(model, prompts, gen, batch, progress=None):
    """Greedy decoding. prompts [P, T]: prefilled together; with batch > P the other sequences
    repeat them (caches copied). Returns (tokens [batch, gen], first logits [P, vocab], TTFT s,
    decode s) — TTFT up to the first token, decode over the gen-1 tokens after it."""
    P, T = prompts.shape
    t0 = time.perf_counter()
    logits = model.forward(prompts, 0)
    tok = logits.argmax(-1)
    t1 = time.perf_counter()
    first = logits.clone()
    if batch > P:
        model.copy_cache(P, batch, T)
        tok = tok.repeat(batch // P)
    out = [tok]
    t2 = time.perf_counter()
    for i in range(1, gen):
        tok = model.forward(tok.view(batch, 1), T + i - 1).argmax(-1)
        out.append(tok)
        if progress is not None:
            progress.step(f"decode {i + 1}/{gen} tokens")
    t3 = time.perf_counter()
    return torch.stack(out, 1), first, t1 - t0, t3 - t2



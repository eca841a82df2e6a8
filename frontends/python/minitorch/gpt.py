"""minitorch.gpt: the character-level GPT of frontends/c/gpt.h and char_gpt.c, in Python.

The model is written once against the PyTorch-shaped API, so the same class runs on minitorch
or on torch itself (what the parity test and the benchmark compare):

    from minitorch import gpt
    import minitorch, torch
    GPT = gpt.make_gpt(minitorch)           # or gpt.make_gpt(torch)
    model = GPT(gpt.GPTConfig(vocab=65, **gpt.PRESETS["small"]))
    logits, loss = model(idx, targets)      # idx [B, T] int64, targets [B, T] int64

With compute_dtype (GPT(cfg, device, compute_dtype=lib.bfloat16)) the Linear layers run in that
dtype as torch.autocast runs them: their inputs, weights and biases cast to it (the casts are
recorded, so the float32 parameters get their gradients), their outputs left in it, and the
attention on those outputs in it too; LayerNorm, the residual stream and the parameters stay
float32, and the loss reads the compute-dtype logits. Over torch, leave compute_dtype None and
run the model under torch.autocast(device_type, dtype) instead: the same arithmetic.

Pre-LN blocks (x + attn(ln_1(x)); x + mlp(ln_2(x)), a 4x GELU MLP with the tanh approximation),
token and learned position embeddings, a final LayerNorm and a bias-free vocabulary head
(tied to wte when tie=True); causal multi-head attention through one fused c_attn Linear, whose
heads minitorch's F.self_attention reads in place (torch: reshaped to [B, H, T, Dh] for
scaled_dot_product_attention(is_causal=True) and merged back). Parameter names
and shapes are gpt.h's (nanoGPT's), so a state_dict saved with safetensors loads in either.

Also the data side of char_gpt.c, in plain Python so a PyTorch twin sees exactly the same
batches: load_corpus (CRLF -> LF, byte vocabulary, 90/10 split), batch_offset / get_batch (the
stateless sampler keyed by seed, stream, step and row), lr_at (warm-up + cosine) and
unigram_entropy.
"""

import math
from collections import namedtuple

__all__ = ["GPTConfig", "PRESETS", "make_gpt", "configure_optimizer", "load_corpus", "batch_offset",
           "get_batch", "lr_at", "unigram_entropy", "STREAM_TRAIN", "STREAM_VAL"]

GPTConfig = namedtuple("GPTConfig", "vocab context n_layer n_head d_model tie")
GPTConfig.__new__.__defaults__ = (False,)

# char_gpt.c's --preset values
PRESETS = {
    "small": dict(context=128, n_layer=2, n_head=4, d_model=64),
    "large": dict(context=256, n_layer=4, n_head=4, d_model=128),
    "tiny": dict(context=16, n_layer=1, n_head=2, d_model=16),
}

LN_EPS = 1e-5
STREAM_TRAIN, STREAM_VAL = 1, 2

_classes = {}


def make_gpt(lib):
    """The GPT module class over lib, which is the minitorch or the torch module."""
    key = lib.__name__
    if key not in _classes:
        _classes[key] = _define(lib)
    return _classes[key]


def _define(lib):
    nn = lib.nn
    F = nn.functional
    self_attention = getattr(F, "self_attention", None)  # minitorch's packed q|k|v attention
    sdpa = getattr(F, "scaled_dot_product_attention", None)
    if sdpa is None:                                  # torch before 2.0: the composition
        def sdpa(q, k, v, is_causal):
            T = q.shape[-2]
            s = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
            mask = lib.ones(T, T, dtype=lib.bool, device=q.device).triu(1)
            return s.masked_fill(mask, float("-inf")).softmax(-1) @ v

    def lin(x, m, amp):
        """m(x) for the Linear m; with amp (a dtype) x, the weight and the bias cast to it first."""
        if amp is None:
            return m(x)
        return F.linear(x.to(amp), m.weight.to(amp), None if m.bias is None else m.bias.to(amp))

    class CausalSelfAttention(nn.Module):
        def __init__(self, cfg, device, dtype, amp=None):
            super().__init__()
            self.n_head = cfg.n_head
            self.amp = amp
            self.c_attn = nn.Linear(cfg.d_model, 3 * cfg.d_model, device=device, dtype=dtype)
            self.c_proj = nn.Linear(cfg.d_model, cfg.d_model, device=device, dtype=dtype)

        def forward(self, x):
            B, T, D = x.shape
            H = self.n_head
            if self_attention is not None:                # minitorch: the heads read in place
                return lin(self_attention(lin(x, self.c_attn, self.amp), H, is_causal=True), self.c_proj, self.amp)
            qkv = lin(x, self.c_attn, self.amp).reshape(B, T, 3, H, D // H).permute(2, 0, 3, 1, 4)  # [3, B, H, T, Dh]
            y = sdpa(qkv[0], qkv[1], qkv[2], is_causal=True)                                      # [B, H, T, Dh]
            return lin(y.permute(0, 2, 1, 3).reshape(B, T, D), self.c_proj, self.amp)

    # The fused ops where the library has them (minitorch: F.bias_act, F.add_layer_norm), their
    # compositions otherwise (torch): the same functions up to float rounding.
    if hasattr(F, "bias_act"):
        def linear_gelu(x, fc, amp=None):            # gelu(fc(x)): the GEMM, then bias + GELU in one pass
            if amp is None:
                return F.bias_act(F.linear(x, fc.weight), fc.bias, "gelu")
            return F.bias_act(F.linear(x.to(amp), fc.weight.to(amp)), fc.bias.to(amp), "gelu")
    else:
        def linear_gelu(x, fc, amp=None):
            return F.gelu(lin(x, fc, amp), approximate="tanh")
    if hasattr(F, "add_layer_norm"):
        def add_norm(x, r, ln):                      # (x + r, ln(x + r)) from one pass over x and r
            return F.add_layer_norm(x, r, ln.normalized_shape, ln.weight, ln.bias, ln.eps)
    else:
        def add_norm(x, r, ln):
            s = x + r
            return s, ln(s)

    class MLP(nn.Module):
        def __init__(self, cfg, device, dtype, amp=None):
            super().__init__()
            self.amp = amp
            self.c_fc = nn.Linear(cfg.d_model, 4 * cfg.d_model, device=device, dtype=dtype)
            self.c_proj = nn.Linear(4 * cfg.d_model, cfg.d_model, device=device, dtype=dtype)

        def forward(self, x):
            return lin(linear_gelu(x, self.c_fc, self.amp), self.c_proj, self.amp)

    class Block(nn.Module):
        def __init__(self, cfg, device, dtype, amp=None):
            super().__init__()
            self.ln_1 = nn.LayerNorm(cfg.d_model, eps=LN_EPS, device=device, dtype=dtype)
            self.attn = CausalSelfAttention(cfg, device, dtype, amp)
            self.ln_2 = nn.LayerNorm(cfg.d_model, eps=LN_EPS, device=device, dtype=dtype)
            self.mlp = MLP(cfg, device, dtype, amp)

        def forward(self, x):
            return self.step(x, self.ln_1(x), None)[0]

        def step(self, x, h, next_ln):
            """(out, next_ln(out)) for out = the block's output, given h = ln_1(x): each residual
            add is fused with the LayerNorm that reads its sum (ln_2 here; the next block's ln_1
            or ln_f through next_ln; None: out alone, with None)."""
            x, h2 = add_norm(x, self.attn(h), self.ln_2)      # a compute-dtype branch promotes to x's dtype
            m = self.mlp(h2)
            return (x + m, None) if next_ln is None else add_norm(x, m, next_ln)

    class GPT(nn.Module):
        """GPT(cfg, device=None, dtype=None, compute_dtype=None): forward(idx [B, T], targets [B, T]
        or None) -> (logits [B, T, V], mean cross-entropy or None). Initialised as GPT-2
        (init_weights). compute_dtype: the dtype the Linear layers and the attention run in (the
        module docstring); None runs everything in the parameters' dtype."""

        def __init__(self, cfg, device=None, dtype=None, compute_dtype=None):
            super().__init__()
            self.cfg = cfg
            self.compute_dtype = compute_dtype
            self.wte = nn.Embedding(cfg.vocab, cfg.d_model, device=device, dtype=dtype)
            self.wpe = nn.Embedding(cfg.context, cfg.d_model, device=device, dtype=dtype)
            self.h = nn.ModuleList([Block(cfg, device, dtype, compute_dtype) for _ in range(cfg.n_layer)])
            self.ln_f = nn.LayerNorm(cfg.d_model, eps=LN_EPS, device=device, dtype=dtype)
            self.lm_head = nn.Linear(cfg.d_model, cfg.vocab, bias=False, device=device, dtype=dtype)
            if cfg.tie:
                self.lm_head.weight = self.wte.weight
            self.init_weights()

        def init_weights(self):
            """GPT-2: Linear and embedding weights N(0, 0.02), the residual projections
            (attn.c_proj, mlp.c_proj) N(0, 0.02 / sqrt(2 L)), biases 0, LayerNorm 1 and 0."""
            std_res = 0.02 / math.sqrt(2 * max(self.cfg.n_layer, 1))
            for name, p in self.named_parameters():
                if name.endswith(".bias"):
                    nn.init.zeros_(p)
                elif ".ln_" in name or name.startswith("ln_f"):
                    nn.init.ones_(p)
                else:
                    nn.init.normal_(p, 0.0, std_res if name.endswith("c_proj.weight") else 0.02)

        def forward(self, idx, targets=None):
            B, T = idx.shape
            if T > self.cfg.context:
                raise ValueError("sequence of %d tokens, the context is %d" % (T, self.cfg.context))
            pos = lib.arange(0, T, dtype=lib.int64, device=idx.device)
            x = self.wte(idx) + self.wpe(pos)
            h = self.h[0].ln_1(x) if len(self.h) else self.ln_f(x)
            for i, block in enumerate(self.h):   # h: the LayerNorm of x that comes next
                x, h = block.step(x, h, self.h[i + 1].ln_1 if i + 1 < len(self.h) else self.ln_f)
            logits = lin(h, self.lm_head, self.compute_dtype)
            if targets is None:
                return logits, None
            return logits, F.cross_entropy(logits.reshape(B * T, self.cfg.vocab), targets.reshape(B * T))

    return GPT


def configure_optimizer(lib, model, lr=1e-3, weight_decay=0.1, betas=(0.9, 0.99), eps=1e-8, **options):
    """char_gpt.c's AdamW: weight decay on the matrices (ndim >= 2) only, in two groups. options
    go to lib.optim.AdamW as they are (torch: fused=True)."""
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    return lib.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                            {"params": no_decay, "weight_decay": 0.0}], lr=lr, betas=betas, eps=eps, **options)


# ---------------------------------------------------------------- data, as char_gpt.c

def load_corpus(path, max_chars=0):
    """(ids, chars, n_train): the text of path with CRLF -> LF (the first max_chars
    characters when > 0), as a bytes object of token ids into chars (the sorted bytes of
    the text), and the length of the training split (the first 90%)."""
    with open(path, "rb") as f:
        text = f.read().replace(b"\r\n", b"\n")
    if max_chars > 0:
        text = text[:max_chars]
    chars = bytes(sorted(set(text)))
    table = bytearray(256)
    for i, b in enumerate(chars):
        table[b] = i
    return text.translate(bytes(table)), chars, len(text) * 9 // 10


_M64 = (1 << 64) - 1


def _splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def batch_offset(seed, stream, step, row, span):
    """char_gpt.c's batch_offset: a number in [0, span) keyed by (seed, stream, step, row)."""
    h = _splitmix64(_splitmix64(_splitmix64(seed & _M64) ^ stream) ^ (step & _M64))
    return _splitmix64(h ^ (row & _M64)) % span


def get_batch(ids, lo, hi, seed, stream, step, B, T):
    """(x, y): B windows of T ids of ids[lo:hi] as lists of B lists; y is x shifted by one."""
    xs, ys = [], []
    for b in range(B):
        off = lo + batch_offset(seed, stream, step, b, hi - lo - T)
        xs.append(list(ids[off:off + T]))
        ys.append(list(ids[off + 1:off + T + 1]))
    return xs, ys


def lr_at(step, steps, lr=1e-3, min_lr=1e-4, warmup=100):
    """char_gpt.c's schedule for step (0-based) of steps: linear warm-up, cosine to min_lr."""
    warm = min(warmup, steps)
    if step < warm:
        return lr * (step + 1) / warm
    p = min(1.0, (step - warm) / max(steps - warm - 1, 1))
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * p)) * (lr - min_lr)


def unigram_entropy(ids, n):
    """Entropy (nats) of the token distribution of ids[:n]."""
    counts = [0] * 256
    for t in ids[:n]:
        counts[t] += 1
    return -math.fsum(c / n * math.log(c / n) for c in counts if c)

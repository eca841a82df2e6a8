"""XOR with a 2-4-1 sigmoid network, written as a PyTorch program would be.

    python3 frontends/python/examples/xor.py [--epochs 5000] [--lr 0.5] [--seed 0] [--device cpu|cuda]
                                             [--log-every 500] [--target 0.01] [--no-graph]

--device defaults to the library's choice (CUDA when usable); --log-every N prints the loss every N
epochs; --target sets the loss the final one must be below.

On CUDA the training step is recorded once into a graph (minitorch.cuda.CUDAGraph) and
replayed, as torch.cuda.graphs allow; --no-graph runs every step eagerly.

Prints the loss as it trains and the network's answers at the end; exits non-zero if the
final loss is not below 0.01 (with the default settings).
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import minitorch  # noqa: E402
from minitorch import nn  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from example_args import at_least  # noqa: E402


def progress(epoch, total, loss, start, width=30, stream=sys.stderr):
    done = int(width * epoch / total)
    rate = epoch / max(time.time() - start, 1e-9)
    stream.write("\r[%s%s] %5d/%d  loss %.6f  %6.0f epochs/s"
                 % ("#" * done, "." * (width - done), epoch, total, loss, rate))
    if epoch == total:
        stream.write("\n")
    stream.flush()


def train(epochs=5000, lr=0.5, seed=0, device=None, log_every=500, show_bar=None, graph=True):
    minitorch.manual_seed(seed)
    device = minitorch.device(device) if device else minitorch.get_default_device()
    x = minitorch.tensor([[0.0, 0.0], [0.0, 1.0], [1.0, 0.0], [1.0, 1.0]], device=device)
    y = minitorch.tensor([[0.0], [1.0], [1.0], [0.0]], device=device)

    model = nn.Sequential(nn.Linear(2, 4, device=device), nn.Sigmoid(), nn.Linear(4, 1, device=device))
    loss_fn = nn.MSELoss()
    optimizer = minitorch.optim.SGD(model.parameters(), lr=lr)
    if show_bar is None:
        show_bar = sys.stderr.isatty()

    def step():
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        return loss

    use_graph = graph and device.type == "cuda"
    print("training %s on %s for %d epochs (%s)" % (type(model).__name__, device, epochs,
                                                    "graph replay" if use_graph else "eager"))
    start = time.time()
    loss_value = float("nan")
    recorded = None
    for epoch in range(1, epochs + 1):
        if not use_graph or epoch == 1:   # the first step creates the gradients
            loss = step()
        else:
            if recorded is None:          # record one step; every later step replays it
                recorded = minitorch.cuda.CUDAGraph()
                with minitorch.cuda.graph(recorded):
                    loss = step()
            recorded.replay()
        if epoch % log_every == 0 or epoch == epochs:
            loss_value = loss.item()
            if show_bar:
                progress(epoch, epochs, loss_value, start)
            else:
                print("epoch %5d  loss %.6f" % (epoch, loss_value))

    with minitorch.no_grad():
        pred = model(x)
    for inputs, out in zip(x.tolist(), pred.tolist()):
        print("%d xor %d -> %.4f" % (inputs[0], inputs[1], out[0]))
    print("final loss %.6f (%.2f s)" % (loss_value, time.time() - start))
    return loss_value



def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=at_least(1), default=5000)
    parser.add_argument("--lr", type=at_least(0.0, float), default=0.5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default=None, help="cpu or cuda (default: the library's choice)")
    parser.add_argument("--log-every", type=at_least(1), default=500)
    parser.add_argument("--target", type=float, default=0.01, help="fail unless the final loss is below")
    parser.add_argument("--no-graph", action="store_true", help="run every step eagerly on CUDA too")
    args = parser.parse_args(argv)
    loss = train(args.epochs, args.lr, args.seed, args.device, args.log_every, graph=not args.no_graph)
    return 0 if loss < args.target else 1


if __name__ == "__main__":
    sys.exit(main())

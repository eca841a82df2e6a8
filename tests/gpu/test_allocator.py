"""test_allocator - the CUDA allocator's block cache (backend/cuda/context.cu): blocks of up to
1 MiB freed outside a graph recording are kept by power-of-two size class and handed to the next
allocation of their class. What must hold whatever the cache does:

  churn     tensors of random sizes (both sides of every class boundary and of the 1 MiB limit)
            are made, filled with their own value and released in random order for several
            rounds; every live tensor keeps its value to the end (a block handed out twice would
            be overwritten), and mt_live_bytes counts exactly the bytes asked for
  graphs    around a recording: blocks cached before it, a block made before it and released
            during it (its free deferred to the end), temporaries made and released inside it,
            an output that outlives it; replays with new inputs give exact results while eager
            tensors of the same sizes come and go, and everything is given back at the end
  temporaries  reductions whose launchers take temporaries from the pool beside the cached blocks
            (a sum's block partials, a row sum's chunk partials, a column sum's split partials),
            eager between tensors of the cache's classes and recorded into a graph: every result
            exact, every live tensor intact, and mt_live_bytes counts the tensors only

Values are integers in float64, so every sum is exact and compared with ==. Run by `make test-gpu`
(MT_DEVICE=cuda); skipped without a usable GPU.
"""
import os
import random
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from parity_support import mt  # noqa: E402

GPU_OK = mt.cuda.is_available()
F64 = mt.float64


def sizes(rng, n):
    """Element counts of float64 tensors: class boundaries (32 elements = 256 B, doubling up to
    131072 = 1 MiB), one element either side of them, and random sizes up to 2 MiB."""
    edges = [32 << k for k in range(13)]
    picks = []
    for _ in range(n):
        r = rng.random()
        if r < 0.5:
            e = rng.choice(edges)
            picks.append(max(1, e + rng.choice((-1, 0, 1))))
        else:
            picks.append(rng.randint(1, 262144))
    return picks


@unittest.skipUnless(GPU_OK, "no usable GPU")
class BlockCache(unittest.TestCase):
    def setUp(self):
        seed = random.SystemRandom().randrange(1 << 30)
        self.rng = random.Random(seed)
        self.seed_note = "seed %d" % seed
        mt.cuda.synchronize()
        self.base = mt.cuda.memory_allocated()

    def check_live(self, live):
        for t, v in live:
            self.assertEqual(t.sum().item(), v * t.numel(), "value %d of a %d-element tensor (%s)" % (
                v, t.numel(), self.seed_note))
        want = self.base + sum(8 * t.numel() for t, _ in live)
        self.assertEqual(mt.cuda.memory_allocated(), want, self.seed_note)

    def test_churn(self):
        live, value = [], 0
        for _ in range(6):
            for n in sizes(self.rng, 60):
                value += 1
                live.append((mt.full((n,), float(value), dtype=F64, device="cuda"), value))
            self.rng.shuffle(live)
            del live[: len(live) // 2]  # releases half, in random order
            # results of ops land in blocks the releases just gave back
            live.extend([(t + 1.0, v + 1) for t, v in live[: len(live) // 3]])
            self.check_live(live)
        del live
        self.assertEqual(mt.cuda.memory_allocated(), self.base, self.seed_note)

    def test_recording_with_cached_blocks(self):
        n = 4096
        # cached blocks of several classes, among them the recording's sizes
        for m in sizes(self.rng, 40) + [n] * 4:
            mt.zeros(m, dtype=F64, device="cuda")
        x = mt.full((n,), 1.0, dtype=F64, device="cuda")
        doomed = mt.full((n,), 5.0, dtype=F64, device="cuda")
        keep = [(mt.full((n,), 7.0, dtype=F64, device="cuda"), 7)]
        g = mt.cuda.CUDAGraph()
        with mt.cuda.graph(g):
            z = x * 3.0            # temporaries made and released inside the recording
            w = z - x
            y = w + 1.0            # 2x + 1, outlives the recording
            del z, w
            del doomed             # made before the recording: freed once, after it
        for step in range(1, 6):
            # eager tensors of the recording's size come and go between replays
            churn = [(mt.full((n,), float(100 + step), dtype=F64, device="cuda"), 100 + step) for _ in range(3)]
            x.copy_(mt.full((n,), float(step), dtype=F64, device="cuda"))
            g.replay()
            self.assertEqual(y.sum().item(), (2 * step + 1) * n, "replay %d (%s)" % (step, self.seed_note))
            self.check_live(keep + churn + [(x, step), (y, 2 * step + 1)])
            keep.extend(churn[:1])
            del churn
        del y
        g.reset()
        for m in sizes(self.rng, 20):
            keep.append((mt.full((m,), 3.0, dtype=F64, device="cuda"), 3))
        keep.append((x, 5))
        self.check_live(keep)
        del keep, x
        mt.cuda.synchronize()
        self.assertEqual(mt.cuda.memory_allocated(), self.base, self.seed_note)

    def reductions(self, value):
        """Tensors of value whose sums take temporaries, with the sums they must give."""
        rows = self.rng.choice((2, 3, 5))
        cols = self.rng.choice((40000, 65536, 100003))
        a = mt.full((rows, cols), float(value), dtype=F64, device="cuda")
        flat = mt.full((self.rng.randint(70000, 400000),), float(value), dtype=F64, device="cuda")
        return [
            (lambda: a.sum(1), [value * cols] * rows),      # long rows: chunk partials
            (lambda: a.sum(0), [value * rows] * cols),      # short columns
            (lambda: mt.sum(a.reshape(cols, rows), 0), [value * cols] * rows),  # tall: split partials
            (lambda: flat.sum(), value * flat.numel()),     # many blocks: block partials
        ]

    def check_reductions(self, value):
        for fn, want in self.reductions(value):
            self.assertEqual(fn().tolist(), want, "sum of value %d (%s)" % (value, self.seed_note))

    def test_temporaries(self):
        live, value = [], 0
        for _ in range(4):
            for n in sizes(self.rng, 30):
                value += 1
                live.append((mt.full((n,), float(value), dtype=F64, device="cuda"), value))
                if value % 3 == 0:
                    self.check_reductions(value)
            self.rng.shuffle(live)
            del live[: len(live) // 2]
            self.check_live(live)
        # the same reductions recorded: their temporaries are the graph's
        x = mt.full((3, 65536), 1.0, dtype=F64, device="cuda")
        g = mt.cuda.CUDAGraph()
        with mt.cuda.graph(g):
            r = x.sum(1)
            c = mt.sum(x.reshape(65536, 3), 0)
            s = x.reshape(3 * 65536).sum()
        for step in range(2, 6):
            eager = [fn() for fn, _ in self.reductions(step)]  # eager temporaries between replays
            x.copy_(mt.full((3, 65536), float(step), dtype=F64, device="cuda"))
            g.replay()
            del eager
            self.assertEqual(r.tolist(), [step * 65536] * 3, "replay %d (%s)" % (step, self.seed_note))
            self.assertEqual(c.tolist(), [step * 65536] * 3, "replay %d (%s)" % (step, self.seed_note))
            self.assertEqual(s.item(), step * 3 * 65536, "replay %d (%s)" % (step, self.seed_note))
            self.check_live(live + [(x, step), (r, step * 65536), (c, step * 65536), (s, step * 3 * 65536)])
        del r, c, s
        g.reset()
        del live, x
        mt.cuda.synchronize()
        self.assertEqual(mt.cuda.memory_allocated(), self.base, self.seed_note)


if __name__ == "__main__":
    unittest.main()

#!/usr/bin/env python3
"""test_char_gpt.py [BUILD_DIR] - runs frontends/c/char_gpt.c on a small corpus made here.

The corpus: 3000 lines of random words from a 16-word list, CRLF-terminated (so the CRLF -> LF
rule is exercised): 90 KB, a vocabulary of about 25 bytes, learnable beyond its unigram
entropy within a hundred steps of the tiny preset (1 layer, 2 heads, d_model 16, context 16).

  - a run: its corpus line (sizes and vocabulary as computed here), the unigram baseline (the
    entropy of the training split, computed here), loss lines and a CSV row every --eval-every
    steps, a final validation loss below the baseline, a sample of the asked length drawn from
    the vocabulary, "live tensors: 0";
  - resume: a run stopped after step 30 (--stop-after) and resumed from its checkpoint gives the
    uninterrupted run's losses at steps 40 and 60 and its final checkpoint files, byte for byte
    on the CPU (the batches are keyed by the step, the optimizer state is saved whole);
  - the checkpoint holds the parameters under gpt.h's names with their shapes;
  - a tied head saves V * D parameters; bad input fails with a message;
  - --bf16-attention: on the CPU (no bfloat16 matmul there) it is refused with the library's
    reason; on CUDA 60 steps of the tiny preset (head dim 8: the composed path) and of the tiny
    preset at d_model 128 with 2 heads (head dim 64: FlashAttention-2) lower the loss and end
    within 0.05 nat of the float32 run's validation loss; the "attention: ..." line names the path.
BUILD_DIR defaults to build/; the device is the demo's default (MT_DEVICE=cpu|cuda is passed
through; on CUDA the resumed losses are compared to 1e-5 instead of bit for bit).
"""
import csv
import json
import math
import os
import random
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.abspath(os.environ.get("MINITORCH_BUILD", os.path.join(ROOT, "build")))
TIMEOUT_S = 300
WORDS = ["the", "king", "queen", "lord", "my", "thou", "art", "and", "to", "of", "love", "sweet", "night",
         "fair", "good", "what"]
# the tiny preset, a batch of 8, 60 steps in three intervals of 20
BASE = ["--preset", "tiny", "--batch", "8", "--steps", "60", "--eval-every", "20", "--warmup", "10",
        "--sample-chars", "0"]


def make_corpus(path, seed=0, lines=3000):
    rng = random.Random(seed)
    text = "".join(" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 8))) + ".\r\n" for _ in range(lines))
    with open(path, "w", newline="") as f:
        f.write(text)
    return text.replace("\r\n", "\n").encode()


def read_csv(path):
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["step", "train_loss", "val_loss", "seconds"], rows[0]
    return [[float(v) for v in r] for r in rows[1:]]


def safetensors_header(path):
    with open(path, "rb") as f:
        n, = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(n))


class CharGPT(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="mt_char_gpt_")
        cls.corpus = os.path.join(cls.tmp, "corpus.txt")
        cls.text = make_corpus(cls.corpus)
        cls.cuda = os.environ.get("MT_DEVICE") == "cuda"

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def run_demo(self, *args, expect_rc=0):
        exe = os.path.join(BUILD, "char_gpt")
        self.assertTrue(os.access(exe, os.X_OK), "%s not built (frontends/c/char_gpt.c; run make)" % exe)
        p = subprocess.run([exe, "--data", self.corpus] + list(args), capture_output=True, text=True,
                           timeout=TIMEOUT_S, cwd=self.tmp)
        self.assertEqual(p.returncode, expect_rc, "char_gpt %s exited %d\n--- stdout\n%s--- stderr\n%s"
                         % (" ".join(args), p.returncode, p.stdout, p.stderr))
        if expect_rc == 0:
            self.assertRegex(p.stdout, r"(?m)^live tensors: 0$")
        return p

    def path(self, name):
        return os.path.join(self.tmp, name)

    def test_training_run(self):
        prompt = "the king "
        p = self.run_demo(*(BASE[:-2] + ["--steps", "100", "--csv", self.path("run.csv"), "--checkpoint",
                                         self.path("run_ckpt"), "--sample-chars", "120", "--prompt", prompt]))
        n, vocab = len(self.text), len(set(self.text))
        n_train = n * 9 // 10
        self.assertIn("%d characters (%d train, %d validation), vocabulary %d" % (n, n_train, n - n_train, vocab),
                      p.stdout)
        self.assertIn("\nattention: float32, composed, head dim 8\n", p.stdout)
        counts = {}
        for b in self.text[:n_train]:
            counts[b] = counts.get(b, 0) + 1
        entropy = -math.fsum(c / n_train * math.log(c / n_train) for c in counts.values())
        m = re.search(r"final val loss ([\d.]+) nats \(train ([\d.]+)\) vs unigram baseline ([\d.]+) nats", p.stdout)
        self.assertTrue(m, p.stdout)
        val, train, baseline = (float(g) for g in m.groups())
        self.assertAlmostEqual(baseline, entropy, delta=1e-4)
        # the words repeat: a model of the context beats the character frequencies
        self.assertLess(val, baseline - 0.1, p.stdout)
        rows = read_csv(self.path("run.csv"))
        self.assertEqual([r[0] for r in rows], [20, 40, 60, 80, 100])
        self.assertTrue(all(math.isfinite(v) for r in rows for v in r), rows)
        self.assertLess(rows[-1][1], rows[0][1], "the training loss did not fall: %s" % rows)
        self.assertAlmostEqual(rows[-1][2], val, delta=1e-4)
        self.assertEqual(len(re.findall(r"(?m)^step +\d+/100 +train loss [\d.]+ +val loss [\d.]+", p.stdout)), 5)
        self.assertIn("steps 81-100 [", p.stderr)  # the progress bar's final line
        # the sample: the prompt, then 120 characters of the corpus' vocabulary
        head = re.search(r"sample \(120 characters, temperature 0.8, top-k 40\):\n", p.stdout)
        self.assertTrue(head, p.stdout)
        body = p.stdout[head.end():].split("\nlive tensors:")[0]
        self.assertTrue(body.startswith(prompt), body)
        self.assertEqual(len(body.encode()), len(prompt) + 120, repr(body))
        self.assertTrue(set(body.encode()) <= set(self.text), repr(body))

    def test_resume_reproduces_the_uninterrupted_run(self):
        full, part = self.path("full_ckpt"), self.path("part_ckpt")
        self.run_demo(*(BASE + ["--checkpoint", full, "--csv", self.path("full.csv")]))
        p = self.run_demo(*(BASE + ["--checkpoint", part, "--csv", self.path("a.csv"), "--stop-after", "30",
                                    "--checkpoint-every", "25"]))
        self.assertIn("stopped after step 30 of 60", p.stdout)
        self.assertNotIn("final val loss", p.stdout)
        p = self.run_demo(*(BASE + ["--resume", part, "--checkpoint", part, "--csv", self.path("b.csv")]))
        self.assertIn("resumed from %s at step 30" % part, p.stdout)
        whole, first, rest = read_csv(self.path("full.csv")), read_csv(self.path("a.csv")), read_csv(self.path("b.csv"))
        self.assertEqual([r[0] for r in first], [20])
        self.assertEqual([r[0] for r in rest], [40, 60])
        for got, want in zip(first + rest, whole):
            for k in (1, 2):  # train loss (its mean over steps 21-40 spans the interruption), val loss
                if self.cuda:
                    self.assertAlmostEqual(got[k], want[k], delta=1e-5 * abs(want[k]))
                else:
                    self.assertEqual(got[k], want[k], "step %d: %s vs %s" % (want[0], got, want))
        # a checkpoint at or past --steps leaves nothing to train: refused, not a run of 0 steps
        p = self.run_demo(*(BASE[:-2] + ["--steps", "40", "--resume", full, "--csv", ""]), expect_rc=1)
        self.assertIn("is at step 60, and --steps is 40: nothing left to train", p.stderr)
        if not self.cuda:
            for f in ("model.safetensors", "adamw_decay.safetensors", "adamw_no_decay.safetensors"):
                with open(os.path.join(full, f), "rb") as a, open(os.path.join(part, f), "rb") as b:
                    self.assertTrue(a.read() == b.read(), "%s differs after resuming" % f)

    def test_checkpoint_names_and_tied_head(self):
        V, D, T = len(set(self.text)), 16, 16
        want = {"wte.weight": [V, D], "wpe.weight": [T, D], "ln_f.weight": [D], "ln_f.bias": [D],
                "lm_head.weight": [V, D], "h.0.ln_1.weight": [D], "h.0.ln_1.bias": [D],
                "h.0.attn.c_attn.weight": [3 * D, D], "h.0.attn.c_attn.bias": [3 * D],
                "h.0.attn.c_proj.weight": [D, D], "h.0.attn.c_proj.bias": [D], "h.0.ln_2.weight": [D],
                "h.0.ln_2.bias": [D], "h.0.mlp.c_fc.weight": [4 * D, D], "h.0.mlp.c_fc.bias": [4 * D],
                "h.0.mlp.c_proj.weight": [D, 4 * D], "h.0.mlp.c_proj.bias": [D]}
        extra = {"step": [], "steps_total": [], "config": [6], "vocab": [V], "train_loss_sum": [],
                 "train_loss_count": []}
        sizes = {}
        for tie in (False, True):
            ckpt = self.path("names_ckpt_%d" % tie)
            p = self.run_demo(*(BASE[:4] + ["--steps", "2", "--eval-every", "2", "--eval-batches", "1",
                                            "--sample-chars", "0", "--checkpoint", ckpt, "--csv", ""]
                                + (["--tie"] if tie else [])))
            sizes[tie] = int(re.search(r"(\d+) parameters", p.stdout).group(1))
            header = safetensors_header(os.path.join(ckpt, "model.safetensors"))
            header.pop("__metadata__", None)
            expect = dict(want, **extra)
            if tie:
                del expect["lm_head.weight"]
            self.assertEqual({k: v["shape"] for k, v in header.items()}, expect)
        self.assertEqual(sizes[False] - sizes[True], V * D)
        self.assertEqual(sizes[False], sum(math.prod(s) for s in want.values()))

    def test_bf16_attention(self):
        def run(tag, *extra):
            csv_path = self.path("bf16_%s.csv" % tag)
            p = self.run_demo(*(BASE + ["--checkpoint", "", "--csv", csv_path, "--eval-batches", "4"] + list(extra)))
            rows = read_csv(csv_path)
            self.assertEqual([r[0] for r in rows], [20, 40, 60])
            self.assertLess(rows[-1][1], rows[0][1], "%s: the training loss did not fall: %s" % (tag, rows))
            return p, rows[-1][2]

        if not self.cuda:
            p = self.run_demo(*(BASE + ["--checkpoint", "", "--csv", "", "--bf16-attention"]), expect_rc=1)
            self.assertIn("char_gpt: --bf16-attention: attention cannot run in bfloat16 on the cpu backend "
                          "(mt_scaled_dot_product_attention: ", p.stderr)
            self.assertIn("bfloat16", p.stderr.split("backend (")[1])
            self.assertNotIn("attention: bfloat16", p.stdout)
            return
        for tag, extra, path in (("composed", [], "bfloat16, composed (FlashAttention takes head dim 64 or 128), "
                                                  "head dim 8"),
                                 ("flash", ["--d-model", "128", "--heads", "2"], "bfloat16, FlashAttention-2, "
                                                                                 "head dim 64")):
            _, val32 = run(tag + "_f32", *extra)
            p, val16 = run(tag, "--bf16-attention", *extra)
            self.assertIn("\nattention: %s\n" % path, p.stdout)
            self.assertAlmostEqual(val16, val32, delta=0.05, msg=tag)

    def test_bad_input(self):
        p = self.run_demo("--data", self.path("nowhere.txt"), expect_rc=1)
        self.assertIn("cannot open %s" % self.path("nowhere.txt"), p.stderr)
        p = self.run_demo(*(BASE[:4] + ["--steps", "1", "--eval-batches", "1", "--csv", "", "--checkpoint", "",
                                        "--prompt", "XYZ"]), expect_rc=1)
        self.assertIn("not in the corpus: XYZ", p.stderr)
        self.assertNotIn("train loss", p.stdout)  # refused before training, not after it
        for flag, value, want in (("--heads", "0", "--heads must be 1..65536, got 0"),
                                  ("--layers", "-5", "--layers must be 0..16, got -5"),
                                  ("--batch", "1152921504606846977", "--batch must be 1..1048576"),
                                  ("--sample-chars", "2305843009213693951", "--sample-chars must be 0..1073741824"),
                                  ("--max-chars", "-5", "--max-chars must be 0.."),
                                  ("--temperature", "-3", "--temperature >= 0"),
                                  ("--min-lr", "1", "--min-lr must not exceed --lr")):
            p = self.run_demo(flag, value, expect_rc=1)
            self.assertIn(want, p.stderr, (flag, value))
        # a checkpoint directory with missing parents is made before training
        ckpt = self.path(os.path.join("new", "dirs", "ckpt"))
        self.run_demo(*(BASE[:4] + ["--steps", "2", "--eval-every", "2", "--eval-batches", "1", "--csv", "",
                                    "--checkpoint", ckpt, "--sample-chars", "0"]))
        self.assertTrue(os.path.isfile(os.path.join(ckpt, "model.safetensors")))
        # a diverged run ends with status 1 and says so
        p = self.run_demo(*(BASE[:4] + ["--steps", "4", "--eval-every", "2", "--eval-batches", "1", "--csv", "",
                                        "--checkpoint", "", "--sample-chars", "0", "--lr", "1e300"]), expect_rc=1)
        self.assertIn("the validation loss is not finite", p.stderr)
        p = self.run_demo("--bogus", "1", expect_rc=2)
        self.assertIn("char_gpt: unknown option --bogus", p.stderr)
        p = self.run_demo("--weight-decay", "-5", expect_rc=1)  # before the corpus, not at the optimizer
        self.assertIn("char_gpt: --weight-decay must be >= 0, got -5", p.stderr)
        p = self.run_demo("--steps", "12x", expect_rc=1)
        self.assertIn("char_gpt: --steps wants an integer, got '12x'", p.stderr)
        p = self.run_demo("--lr", "3e-4.5", expect_rc=1)
        self.assertIn("char_gpt: --lr wants a finite number, got '3e-4.5'", p.stderr)
        p = self.run_demo("--preset", "huge", expect_rc=1)
        self.assertIn("--preset must be small, large or tiny, got huge", p.stderr)
        p = self.run_demo(*(BASE[:2] + ["--heads", "3", "--csv", ""]), expect_rc=1)
        self.assertIn("gpt: bad configuration", p.stderr)
        p = self.run_demo(*(BASE[:4] + ["--resume", self.path("no_ckpt")]), expect_rc=1)
        self.assertIn("no_ckpt/model.safetensors", p.stderr)


if __name__ == "__main__":
    if len(sys.argv) > 1 and not sys.argv[1].startswith("-"):
        BUILD = os.path.abspath(sys.argv.pop(1))
    print("char_gpt in %s (MT_DEVICE=%s)" % (BUILD, os.environ.get("MT_DEVICE", "(default)")))
    unittest.main(verbosity=2)

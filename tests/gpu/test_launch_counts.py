"""test_launch_counts - the kernel launches of small training steps on CUDA, counted exactly by
recording the step into a graph (mt_graph_begin / mt_graph_end) and reading the graph's nodes
with the internal hook mt_study_graph_nodes (backend/cuda/context.cu; cuBLAS's and CUB's kernels
count too), and the fused MSE backward against the composition it replaced.

  mse backward   backward of mse_loss(pred, target) when the loss is the root: ONE fused kernel
                 (the seed gradient is never written: the fused losses read a null gradient as 1;
                 the composition took a fill, SUB, MUL, MUL_SCALAR, and NEG for the target),
                 whose gradients equal the composition's bit for bit (float32 and float64)
  XOR step       Linear(2,4) -> Sigmoid -> Linear(4,1), MSE, zero_grad, backward, SGD: exactly
                 10 kernels (counted by reading the code: forward 4 = 2 tiny GEMMs with their
                 bias added in the same launch, sigmoid, the MSE reduction; backward 5 = fused MSE,
                 the second layer's input gradient and its weight gradient with the bias
                 gradient in the same launch, the sigmoid's, the first layer's weight and bias
                 gradients; SGD 1 for all four parameters; 18 before the MSE fusion, 15 before the
                 tiny GEMMs and the unwritten seed)
  MNIST MLP step 784-128-10 ReLU MLP, batch 64, cross-entropy, SGD with momentum: at most 16,
                 as recorded on an H100 (19 on an H100 and an H200 before the seed went and the
                 second layer's weight and bias gradients became one tiny product; 14 by
                 reading the code before the tensor-core GEMMs: forward 7 = 2 GEMMs, 2 bias
                 adds, ReLU, cross-entropy's row kernel and sum; backward 6 = fused
                 cross-entropy backward, 2 GEMMs, the second layer's weight and bias gradients
                 in one launch, ReLU's, the first layer's bias reduction; SGD 1; cuBLAS takes
                 more than one launch for some of these GEMMs; 12 on an H100 and an H200 since
                 the first layer's bias gradient is summed inside its weight gradient's
                 tensor-core GEMM).
                 Recording skips the target range check, which eagerly adds
                 one kernel (its answer goes straight to mapped host memory).
  programmatic dependent launch
                 the recorded XOR step replayed 300 times and an MLP step with momentum replayed
                 100 times give the same bits with MT_CUDA_NO_PDL set and without (a subprocess
                 each, since the switch is read when the CUDA backend starts)
Each count is printed; the bounds let later fusions lower them.

Run by `make test-gpu`; skipped without a usable GPU or when the library lacks the hook.
"""
import os
import random
import subprocess
import sys
import unittest
from ctypes import byref, c_int64, c_void_p

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import abi_util as U  # noqa: E402

L = U.LIB
HOOK = getattr(L, "mt_study_graph_nodes", None)
RUN = HOOK is not None and L.mt_cuda_device_count() > 0
KINDS = ["kernels", "memcpy", "memset", "allocs", "frees", "other"]


def graph_nodes():
    counts = (c_int64 * len(KINDS))()
    st = HOOK(counts, len(KINDS))
    if st != 0:
        raise RuntimeError("mt_study_graph_nodes returned %d" % st)
    return dict(zip(KINDS, list(counts)))


def record(step):
    """Runs step() once between mt_graph_begin and mt_graph_end, then replays the graph once (so
    that what the recording allocated, gradients and outputs, holds the step's values and is
    ordinary memory from then on) and frees it; returns (what step returned, the graph's node
    counts). step's outputs are the caller's."""
    U.check(L.mt_graph_begin(U.MT_CUDA), "mt_graph_begin")
    graph = c_void_p()
    try:
        out = step()
    finally:
        st = L.mt_graph_end(byref(graph))
    U.check(st, "mt_graph_end")
    try:
        nodes = graph_nodes()
        U.check(L.mt_graph_replay(graph), "mt_graph_replay")
        U.check(L.mt_synchronize(), "mt_synchronize")
    finally:
        L.mt_graph_free(graph)
    return out, nodes


def randn(shape, seed, dtype=U.MT_F32):
    r = random.Random(seed)
    return U.from_list([r.uniform(-1, 1) for _ in range(U.numel(shape))], shape, dtype, U.MT_CUDA)


@unittest.skipUnless(RUN, "needs a GPU and mt_study_graph_nodes (a CUDA build)")
class LaunchCounts(unittest.TestCase):
    def tearDown(self):
        L.mt_tape_clear()
        self.assertEqual(L.mt_live_tensors(), 0, "tensors leaked")

    def test_mse_backward_is_one_kernel_with_the_bits_of_the_composition(self):
        for dtype in (U.MT_F32, U.MT_F64):
            pred, target = randn((64, 1), 1, dtype), randn((64, 1), 2, dtype)
            for h in (pred, target):
                U.set_requires_grad(h, 1)
            loss = U.call("mt_mse_loss", pred, target)
            try:
                _, nodes = record(lambda: U.check(L.mt_backward(loss), "mt_backward"))
                print("\n  mse backward (%s): %s" % (U.DTYPE_NAMES[dtype], nodes))
                self.assertEqual(nodes["kernels"], 1, "the fused kernel alone: %s" % nodes)
                self.assertEqual(nodes["memcpy"] + nodes["memset"], 0, nodes)
                gp, gt = U.grad_of(pred), U.grad_of(target)  # written by the replay
                prev = L.mt_set_grad_enabled(0)
                diff = U.call("mt_sub", pred, target)
                one = U.call("mt_tensor_full", None, 0, 1.0, dtype, U.MT_CUDA)
                dg = U.call("mt_mul", diff, one)
                d = U.call("mt_mul_scalar", dg, 2.0 / 64)
                nd = U.call("mt_neg", d)
                L.mt_set_grad_enabled(prev)
                try:
                    # to_list gives each float32/float64 exactly: equal lists are equal bits (up to
                    # the sign of zero)
                    self.assertEqual(U.to_list(gp), U.to_list(d))
                    self.assertEqual(U.to_list(gt), U.to_list(nd))
                finally:
                    for h in (gp, gt, diff, one, dg, d, nd):
                        U.release(h)
            finally:
                for h in (loss, pred, target):
                    U.release(h)

    def mlp_step_nodes(self, sizes, x_shape, make_target, loss_fn, momentum):
        x = randn(x_shape, 3)
        y = make_target()
        params = []
        for i, (fan_in, fan_out) in enumerate(sizes):
            params += [randn((fan_out, fan_in), 10 + 2 * i), randn((fan_out,), 11 + 2 * i)]
        for p in params:
            U.set_requires_grad(p, 1)
        opt = c_void_p()
        arr = (c_void_p * len(params))(*params)
        U.check(L.mt_optim_sgd(byref(opt), arr, len(params), 0.1, momentum, 0.0, 0), "mt_optim_sgd")
        act = "mt_sigmoid" if sizes[0] == (2, 4) else "mt_relu"

        def step():
            h = U.call("mt_linear", x, params[0], params[1])
            a = U.call(act, h)
            out = U.call("mt_linear", a, params[2], params[3])
            loss = U.call(loss_fn, out, y)
            U.check(L.mt_optim_zero_grad(opt), "mt_optim_zero_grad")
            U.check(L.mt_backward(loss), "mt_backward")
            U.check(L.mt_optim_step(opt), "mt_optim_step")
            return [h, a, out, loss]
        try:
            for h in step():  # the eager step creates the gradients and the velocities
                U.release(h)
            made, nodes = record(step)
            for h in made:
                U.release(h)
            return nodes
        finally:
            L.mt_optim_free(opt)
            for h in [x, y] + params:
                U.release(h)

    def test_xor_step(self):
        nodes = self.mlp_step_nodes([(2, 4), (4, 1)], (4, 2), lambda: randn((4, 1), 4), "mt_mse_loss", 0.0)
        print("\n  XOR step: %s" % nodes)
        self.assertEqual(nodes["kernels"], 10, nodes)
        self.assertEqual(nodes["memcpy"] + nodes["memset"], 0, nodes)

    def test_mnist_mlp_step(self):
        targets = lambda: U.from_list([i % 10 for i in range(64)], (64,), U.MT_I64, U.MT_CUDA)  # noqa: E731
        nodes = self.mlp_step_nodes([(784, 128), (128, 10)], (64, 784), targets, "mt_cross_entropy", 0.9)
        print("\n  MNIST MLP step: %s" % nodes)
        # 16 recorded on an H100 (cuBLAS kernels included: its GEMMs of this shape take more than
        # one launch); a guard against launches creeping back in
        self.assertLessEqual(nodes["kernels"], 16, nodes)
        self.assertEqual(nodes["memcpy"] + nodes["memset"], 0, nodes)


# Trains by replaying a recorded step; prints every parameter and the last loss as float.hex.
REPLAY_SCRIPT = r"""
import random, sys
from ctypes import byref, c_void_p
sys.path.insert(0, sys.argv[1])
import abi_util as U
L = U.LIB
def randn(shape, seed):
    r = random.Random(seed)
    return U.from_list([r.uniform(-1, 1) for _ in range(U.numel(shape))], shape, U.MT_F32, U.MT_CUDA)
for sizes, batch, act, steps, momentum in (([(2, 4), (4, 1)], 4, "mt_sigmoid", 300, 0.0),
                                           ([(32, 64), (64, 8)], 48, "mt_relu", 100, 0.9)):
    x, y = randn((batch, sizes[0][0]), 1), randn((batch, sizes[-1][1]), 2)
    params = []
    for i, (fi, fo) in enumerate(sizes):
        params += [randn((fo, fi), 10 + 2 * i), randn((fo,), 11 + 2 * i)]
    for p in params:
        U.set_requires_grad(p, 1)
    opt, graph = c_void_p(), c_void_p()
    U.check(L.mt_optim_sgd(byref(opt), (c_void_p * len(params))(*params), len(params), 0.1, momentum, 0.0, 0), "sgd")
    def step():
        h = U.call("mt_linear", x, params[0], params[1])
        a = U.call(act, h)
        out = U.call("mt_linear", a, params[2], params[3])
        loss = U.call("mt_mse_loss", out, y)
        U.check(L.mt_optim_zero_grad(opt), "zero_grad")
        U.check(L.mt_backward(loss), "backward")
        U.check(L.mt_optim_step(opt), "step")
        return [h, a, out, loss]
    for h in step():
        U.release(h)
    U.check(L.mt_graph_begin(U.MT_CUDA), "begin")
    made = step()
    U.check(L.mt_graph_end(byref(graph)), "end")
    for _ in range(steps):
        U.check(L.mt_graph_replay(graph), "replay")
    U.check(L.mt_synchronize(), "sync")
    print(" ".join(float.hex(v) for p in params for v in U.to_list(p)), float.hex(U.to_list(made[-1])[0]))
"""


@unittest.skipUnless(RUN, "needs a GPU and mt_study_graph_nodes (a CUDA build)")
class ProgrammaticLaunch(unittest.TestCase):
    def test_pdl_changes_no_bits(self):
        here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python")
        outs = []
        for no_pdl in (False, True):
            env = dict(os.environ, MT_DEVICE="cuda")
            env.pop("MT_CUDA_NO_PDL", None)
            if no_pdl:
                env["MT_CUDA_NO_PDL"] = "1"
            p = subprocess.run([sys.executable, "-c", REPLAY_SCRIPT, here], capture_output=True, text=True,
                               env=env, timeout=300)
            self.assertEqual(p.returncode, 0, p.stderr[-2000:])
            outs.append(p.stdout)
        self.assertTrue(outs[0].strip(), "no output")
        self.assertEqual(outs[0], outs[1], "replayed training differs with and without programmatic dependent launch")


if __name__ == "__main__":
    unittest.main(verbosity=2)

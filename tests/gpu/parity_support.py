"""What the frontend-level parity suites of tests/gpu share: the minitorch package, which
device plays the GPU, whether to run, and torch when it sees a GPU.

MT_PARITY_DEVICE=cpu runs a suite CPU-against-CPU (torch is then left out), which checks the
harness itself on a machine without a GPU.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from test_frontend_support import mt  # noqa: E402,F401

SELF_TEST = os.environ.get("MT_PARITY_DEVICE") == "cpu"
GPU = "cpu" if SELF_TEST else "cuda"
RUN = SELF_TEST or mt.cuda.is_available()
SKIP_WHY = "no usable GPU; MT_PARITY_DEVICE=cpu checks the harness on the CPU"
try:
    import torch
    HAVE_TORCH = not SELF_TEST and torch.cuda.is_available()
except ImportError:
    torch = None
    HAVE_TORCH = False

"""minitorch.cuda: what the library says about the GPU."""

from ._lib import lib


def is_available():
    """True when the library was built with CUDA and a usable GPU is present."""
    return lib.mt_cuda_device_count() > 0


def device_count():
    return int(lib.mt_cuda_device_count())


def get_device_name(device=None):
    if not is_available():
        raise RuntimeError("no usable CUDA device")
    return lib.mt_device_name(1).decode()


def synchronize():
    """Waits for all queued GPU work; reports asynchronous CUDA errors."""
    lib.mt_synchronize()


def memory_allocated():
    """Bytes the library holds on the GPU now (tensors and raw allocations)."""
    return int(lib.mt_live_bytes(1))


class CUDAGraph:
    """A recorded stretch of GPU work, replayed with one call (as torch.cuda.CUDAGraph).

        g = minitorch.cuda.CUDAGraph()
        step()                      # one eager step first: creates gradients and optimizer state
        with minitorch.cuda.graph(g):
            loss = step()           # recorded, not run
        for batch in data:
            x_static.copy_(batch)   # feed inputs by copying into the recorded tensors
            g.replay()              # loss now holds this replay's value

    Between capture_begin and capture_end nothing may read back to the host; see
    mt_graph_begin in minitorch.h for the rules."""

    def __init__(self):
        self._handle = None

    def capture_begin(self):
        if self._handle is not None:
            raise RuntimeError("this CUDAGraph already holds a recording; call reset() first")
        from .optim.optimizer import sync_learning_rates
        sync_learning_rates()  # a step() being recorded cannot set it: the library refuses then
        lib.mt_graph_capture_begin()

    def capture_end(self):
        import ctypes
        h = ctypes.c_void_p()
        lib.mt_graph_capture_end(ctypes.byref(h))
        self._handle = h

    def replay(self):
        if self._handle is None:
            raise RuntimeError("nothing recorded: capture a graph before replaying it")
        from .optim.optimizer import sync_learning_rates
        sync_learning_rates()  # recorded updates read the learning rate on the device
        lib.mt_graph_replay(self._handle)

    def reset(self):
        if self._handle is not None:
            h, self._handle = self._handle, None
            lib.mt_graph_release(h)

    def __del__(self):
        try:
            self.reset()
        except Exception:  # interpreter shutdown: the library may be gone
            pass


class graph:
    """Context manager recording the work of its block into a CUDAGraph."""

    def __init__(self, cuda_graph):
        self.cuda_graph = cuda_graph

    def __enter__(self):
        self.cuda_graph.capture_begin()
        return self.cuda_graph

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            # end the recording so the thread can record again; the partial graph is dropped
            try:
                self.cuda_graph.capture_end()
            finally:
                self.cuda_graph.reset()
            return False
        self.cuda_graph.capture_end()
        return False

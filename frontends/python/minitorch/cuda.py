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

"""minitorch: a PyTorch-shaped Python package over libminitorch.so (ctypes only).

    import minitorch
    from minitorch import nn

    model = nn.Sequential(nn.Linear(2, 4), nn.Sigmoid(), nn.Linear(4, 1))
    opt = minitorch.optim.SGD(model.parameters(), lr=0.5)
    loss = nn.functional.mse_loss(model(x), y)
    opt.zero_grad(); loss.backward(); opt.step()

The library is found through MINITORCH_LIB, then the repository's build/, then the
system loader; see minitorch._lib.
"""

from . import _dtype, _lib
from ._dtype import (Size, bfloat16, device, dtype, float16, float32, float64, get_default_device,
                     get_default_dtype, int32, int64, set_default_device, set_default_dtype, uint8)
from ._errors import (CudaError, DeviceError, DTypeError, InputOutputError, InternalError,
                      InvalidArgumentError, MinitorchError, OutOfMemoryError, ShapeError, StateError,
                      UnsupportedError)
from ._factory import (Generator, arange, default_generator, full, full_like, initial_seed, is_tensor,
                       manual_seed, ones, ones_like, rand, rand_like, randn, randn_like, randperm, seed, tensor,
                       zeros, zeros_like)
from ._core import promote_types, result_type
from ._core import tensor_args as _tensor_args
from ._tensor import Tensor, cat, stack, where
from ._dlpack import from_dlpack
from .serialization import load, save
from .autograd import enable_grad, is_grad_enabled, no_grad, set_grad_enabled
from . import autograd, cuda, data, testing  # noqa: E402  (submodules)
from . import nn, optim  # noqa: E402

# torch-style aliases of dtypes
float = float32
double = float64
half = float16
int = int32
long = int64

__version__ = _lib.lib.mt_version().decode()
ABI_VERSION = _lib.ABI_VERSION


def live_tensors():
    """Tensor handles alive in the library now (held by Python, the tape or as .grad)."""
    return _lib.lib.mt_live_tensors()


def live_bytes(device="cpu"):
    """Bytes the library holds on a device now."""
    return _lib.lib.mt_live_bytes(_dtype.as_device(device).code)


def set_allow_tf32(allow):
    """Lets float32 matmuls on CUDA use TF32 (off by default, as torch's
    backends.cuda.matmul.allow_tf32); returns the previous setting."""
    if not isinstance(allow, bool):
        raise TypeError("set_allow_tf32(): allow must be a bool, got %s" % type(allow).__name__)
    return bool(_lib.lib.mt_set_allow_tf32(1 if allow else 0))


def set_deterministic(on):
    """Makes CUDA give the same bits for the same inputs on every run (True) or lets it use
    faster kernels whose float sums arrive in a varying order, and conv paths chosen by timing
    (False, the default, as torch.use_deterministic_algorithms(False)); returns the previous
    setting."""
    if not isinstance(on, bool):
        raise TypeError("set_deterministic(): on must be a bool, got %s" % type(on).__name__)
    return bool(_lib.lib.mt_set_deterministic(1 if on else 0))


def library_path():
    """The path of the loaded libminitorch.so."""
    return _lib.lib.path


# Functional forms of the Tensor methods, as torch.add(a, b) etc.

@_tensor_args("input")
def add(input, other, alpha=1):
    return input.add(other, alpha=alpha)


@_tensor_args("input")
def sub(input, other, alpha=1):
    return input.sub(other, alpha=alpha)


@_tensor_args("input")
def mul(input, other):
    return input.mul(other)


@_tensor_args("input")
def div(input, other):
    return input.div(other)


@_tensor_args("input")
def pow(input, exponent):
    return input.pow(exponent)


@_tensor_args("input")
def matmul(input, other):
    return input.matmul(other)


@_tensor_args("input")
def neg(input):
    return input.neg()


@_tensor_args("input")
def softmax(input, dim):
    return input.softmax(dim)


@_tensor_args("input")
def log_softmax(input, dim):
    return input.log_softmax(dim)


@_tensor_args("input")
def max(input, dim=None, keepdim=False):
    return input.max(dim, keepdim)


@_tensor_args("input")
def min(input, dim=None, keepdim=False):
    return input.min(dim, keepdim)


@_tensor_args("input")
def argmax(input, dim=None, keepdim=False):
    return input.argmax(dim, keepdim)


@_tensor_args("input")
def argmin(input, dim=None, keepdim=False):
    return input.argmin(dim, keepdim)


@_tensor_args("input")
def index_select(input, dim, index):
    return input.index_select(dim, index)


@_tensor_args("input")
def relu(input):
    return input.relu()


@_tensor_args("input")
def sigmoid(input):
    return input.sigmoid()


@_tensor_args("input")
def tanh(input):
    return input.tanh()


@_tensor_args("input")
def exp(input):
    return input.exp()


@_tensor_args("input")
def log(input):
    return input.log()


@_tensor_args("input")
def sum(input, dim=None, keepdim=False):
    return input.sum(dim, keepdim)


@_tensor_args("input")
def mean(input, dim=None, keepdim=False):
    return input.mean(dim, keepdim)


@_tensor_args("input")
def reshape(input, shape):
    return input.reshape(shape)


@_tensor_args("input")
def flatten(input, start_dim=0, end_dim=-1):
    return input.flatten(start_dim, end_dim)


@_tensor_args("input")
def squeeze(input, dim=None):
    return input.squeeze(dim)


@_tensor_args("input")
def unsqueeze(input, dim):
    return input.unsqueeze(dim)


@_tensor_args("input")
def transpose(input, dim0, dim1):
    return input.transpose(dim0, dim1)


@_tensor_args("input")
def permute(input, dims):
    return input.permute(dims)


@_tensor_args("input")
def t(input):
    return input.t()


@_tensor_args("input")
def detach(input):
    return input.detach()


@_tensor_args("input")
def clone(input):
    return input.clone()


@_tensor_args("input")
def numel(input):
    return input.numel()


@_tensor_args("input")
def eq(input, other):
    return input.eq(other)


@_tensor_args("input")
def ne(input, other):
    return input.ne(other)


@_tensor_args("input")
def lt(input, other):
    return input.lt(other)


@_tensor_args("input")
def le(input, other):
    return input.le(other)


@_tensor_args("input")
def gt(input, other):
    return input.gt(other)


@_tensor_args("input")
def ge(input, other):
    return input.ge(other)


@_tensor_args("input")
def equal(input, other):
    return input.equal(other)


@_tensor_args("input")
def maximum(input, other):
    return input.maximum(other)


@_tensor_args("input")
def minimum(input, other):
    return input.minimum(other)


@_tensor_args("input")
def clamp(input, min=None, max=None):
    return input.clamp(min, max)


clip = clamp


@_tensor_args("input")
def sqrt(input):
    return input.sqrt()


@_tensor_args("input")
def abs(input):
    return input.abs()


concat = concatenate = cat


@_tensor_args("input")
def masked_fill(input, mask, value):
    return input.masked_fill(mask, value)

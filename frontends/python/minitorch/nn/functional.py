"""minitorch.nn.functional: the ops of minitorch.nn as functions, named as in torch.

Adding an op of the C ABI here is one line, e.g. `softmax = _op("softmax")` once
Tensor has it.
"""

from .._lib import lib
from .._core import _cast, _new, result_type
from .._tensor import Tensor

__all__ = ["linear", "relu", "sigmoid", "tanh", "softmax", "log_softmax", "mse_loss",
           "cross_entropy", "nll_loss"]


def linear(input, weight, bias=None):
    """input [..., in] @ weight[out, in]^T + bias[out] (mt_linear)."""
    dt = result_type(input, weight)
    return _new(lib.mt_linear, _cast(input, dt), _cast(weight, dt),
                None if bias is None else _cast(bias, dt))


def relu(input):
    return input.relu()


def sigmoid(input):
    return input.sigmoid()


def tanh(input):
    return input.tanh()


def softmax(input, dim):
    return input.softmax(dim)


def log_softmax(input, dim):
    return input.log_softmax(dim)


def _targets(target, like):
    from .. import _dtype as D
    if target.dtype.is_floating_point:
        raise TypeError("class targets must be an integer tensor (class probabilities are not "
                        "available: mt_cross_entropy takes indices)")
    return target if target.dtype is D.int64 else target.long()


def _only_mean(name, reduction, **unsupported):
    if reduction != "mean":
        raise NotImplementedError("%s(reduction=%r) is not available: the C ABI computes the mean "
                                  "only" % (name, reduction))
    for k, (value, default) in unsupported.items():
        if value != default:
            raise NotImplementedError("%s(%s=...) is not available in the C ABI" % (name, k))


def cross_entropy(input, target, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    """Mean over N of -log softmax(input)[n, target[n]]; input [N, C], target [N] integer
    (mt_cross_entropy). weight, ignore_index, label_smoothing and other reductions are not
    in the C ABI."""
    _only_mean("cross_entropy", reduction, weight=(weight, None), ignore_index=(ignore_index, -100),
               label_smoothing=(label_smoothing, 0.0))
    return _new(lib.mt_cross_entropy, input, _targets(target, input))


def nll_loss(input, target, weight=None, ignore_index=-100, reduction="mean"):
    """Mean over N of -input[n, target[n]] (input holds log-probabilities; mt_nll_loss)."""
    _only_mean("nll_loss", reduction, weight=(weight, None), ignore_index=(ignore_index, -100))
    return _new(lib.mt_nll_loss, input, _targets(target, input))


def mse_loss(input, target, reduction="mean"):
    """Mean squared error. 'mean' is mt_mse_loss (same shapes); 'sum' and 'none' are
    (input - target) ** 2 summed or elementwise."""
    if not isinstance(input, Tensor) or not isinstance(target, Tensor):
        raise TypeError("mse_loss expects tensors")
    if reduction == "mean":
        dt = result_type(input, target)
        return _new(lib.mt_mse_loss, _cast(input, dt), _cast(target, dt))
    if reduction == "sum":
        return ((input - target) ** 2).sum()
    if reduction == "none":
        return (input - target) ** 2
    raise ValueError("%s is not a valid value for reduction" % reduction)

"""minitorch.nn.init: fill tensors in place, as torch.nn.init (not recorded on the tape).

Each initialiser draws one seed from the default generator (or the one given), and the
library fills the tensor from that seed: the same seed gives the same values on every
device (mt_init_*)."""

import math

from .._lib import lib
from ..autograd import no_grad


def _seed(generator):
    from .._factory import default_generator
    return (default_generator if generator is None else generator).next_seed()


def calculate_gain(nonlinearity, param=None):
    """torch.nn.init.calculate_gain for the nonlinearities minitorch has."""
    if nonlinearity in ("linear", "sigmoid", "conv1d", "conv2d", "conv3d"):
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else float(param)
        return math.sqrt(2.0 / (1 + slope ** 2))
    raise ValueError("Unsupported nonlinearity %s" % nonlinearity)


def uniform_(tensor, a=0.0, b=1.0, generator=None):
    with no_grad():
        return tensor.uniform_(a, b, generator=generator)


def normal_(tensor, mean=0.0, std=1.0, generator=None):
    with no_grad():
        return tensor.normal_(mean, std, generator=generator)


def constant_(tensor, val):
    with no_grad():
        return tensor.fill_(val)


def zeros_(tensor):
    return constant_(tensor, 0.0)


def ones_(tensor):
    return constant_(tensor, 1.0)


def xavier_uniform_(tensor, gain=1.0, generator=None):
    lib.mt_init_xavier_uniform(tensor, float(gain), _seed(generator))
    return tensor


def xavier_normal_(tensor, gain=1.0, generator=None):
    lib.mt_init_xavier_normal(tensor, float(gain), _seed(generator))
    return tensor


def _kaiming_gain(a, mode, nonlinearity):
    if mode != "fan_in":
        raise NotImplementedError("mode=%r is not available: mt_init_kaiming_* use fan_in" % mode)
    return calculate_gain(nonlinearity, a)


def kaiming_uniform_(tensor, a=0.0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    lib.mt_init_kaiming_uniform(tensor, _kaiming_gain(a, mode, nonlinearity), _seed(generator))
    return tensor


def kaiming_normal_(tensor, a=0.0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    lib.mt_init_kaiming_normal(tensor, _kaiming_gain(a, mode, nonlinearity), _seed(generator))
    return tensor

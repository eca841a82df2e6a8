"""Convolutional layers: Conv2d, MaxPool2d, AvgPool2d, BatchNorm1d, BatchNorm2d (torch's
constructors and defaults, within what the C ABI has: groups=1, square pooling windows
without padding)."""

import math

from .._core import real_arg
from .._dtype import as_device
from .._factory import ones, zeros
from . import functional as F
from . import init
from .module import Module
from .parameter import Parameter


class Conv2d(Module):
    """y = conv2d(x, weight [out, in, kH, kW]) + bias [out]; initialised as torch (weight and
    bias uniform on (-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = in * kH * kW)."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1,
                 bias=True, padding_mode="zeros", device=None, dtype=None):
        super().__init__()
        if groups != 1:
            raise NotImplementedError("Conv2d(groups=%r) is not available: the C ABI has groups=1 only" % (groups,))
        if padding_mode != "zeros":
            raise NotImplementedError("Conv2d(padding_mode=%r) is not available: the C ABI pads with zeros"
                                      % (padding_mode,))
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size = F._pair(kernel_size, "kernel_size")
        self.stride = F._pair(stride, "stride")
        self.padding = padding if isinstance(padding, str) else F._pair(padding, "padding")
        self.dilation = F._pair(dilation, "dilation")
        self.groups = groups
        dev = as_device(device)
        self.weight = Parameter(zeros(out_channels, in_channels, *self.kernel_size, dtype=dtype, device=dev))
        if bias:
            self.bias = Parameter(zeros(out_channels, dtype=dtype, device=dev))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        fan_in = self.in_channels * self.kernel_size[0] * self.kernel_size[1]
        bound = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
        init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input):
        return F.conv2d(input, self.weight, self.bias, self.stride, self.padding, self.dilation)

    def extra_repr(self):
        s = "%d, %d, kernel_size=%s, stride=%s" % (self.in_channels, self.out_channels, self.kernel_size,
                                                   self.stride)
        if self.padding not in ((0, 0), "valid"):
            s += ", padding=%s" % (self.padding,)
        if self.dilation != (1, 1):
            s += ", dilation=%s" % (self.dilation,)
        if self.bias is None:
            s += ", bias=False"
        return s


class _Pool2d(Module):
    """What MaxPool2d and AvgPool2d share: torch's arguments, checked at construction against
    what the C ABI has (square windows, equal strides, no padding, floor rounding)."""

    _fn = ""

    def __init__(self, kernel_size, stride, padding, ceil_mode, **unsupported):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = kernel_size if stride is None else stride
        self.padding = padding
        self.ceil_mode = ceil_mode
        F._square(self.kernel_size, "kernel_size", self._fn)
        F._square(self.stride, "stride", self._fn)
        bad = [k for k, (v, d) in unsupported.items() if v != d]
        if padding != 0 or ceil_mode or bad:
            raise NotImplementedError("%s(%s) is not available in the C ABI (mt_%s)" % (
                type(self).__name__, ", ".join((["padding"] if padding != 0 else []) +
                                               (["ceil_mode"] if ceil_mode else []) + bad), self._fn))

    def forward(self, input):
        return getattr(F, self._fn)(input, self.kernel_size, self.stride)

    def extra_repr(self):
        return "kernel_size=%s, stride=%s, padding=%s" % (self.kernel_size, self.stride, self.padding)


class MaxPool2d(_Pool2d):
    _fn = "max_pool2d"

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, return_indices=False, ceil_mode=False):
        super().__init__(kernel_size, stride, padding, ceil_mode, dilation=(dilation, 1),
                         return_indices=(return_indices, False))
        self.dilation = dilation
        self.return_indices = return_indices


class AvgPool2d(_Pool2d):
    _fn = "avg_pool2d"

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
                 divisor_override=None):
        super().__init__(kernel_size, stride, padding, ceil_mode, divisor_override=(divisor_override, None))
        self.count_include_pad = count_include_pad
        self.divisor_override = divisor_override


class _BatchNorm(Module):
    """Batch normalization over dim 1. In training mode (module.train()) the batch statistics
    normalize and running_mean / running_var (buffers, saved in state_dict) are updated in
    place; in eval mode (module.eval()) the running statistics normalize."""

    _ndims = ()

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True, device=None,
                 dtype=None):
        super().__init__()
        if momentum is None:
            raise NotImplementedError("%s(momentum=None) (a cumulative moving average) is not available"
                                      % type(self).__name__)
        self.num_features = num_features
        self.eps, self.momentum = real_arg(eps, "eps"), real_arg(momentum, "momentum")
        self.affine, self.track_running_stats = affine, track_running_stats
        dev = as_device(device)
        if affine:
            self.weight = Parameter(ones(num_features, dtype=dtype, device=dev))
            self.bias = Parameter(zeros(num_features, dtype=dtype, device=dev))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if track_running_stats:
            self.register_buffer("running_mean", zeros(num_features, dtype=dtype, device=dev))
            self.register_buffer("running_var", ones(num_features, dtype=dtype, device=dev))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)

    def reset_running_stats(self):
        if self.track_running_stats:
            self.running_mean.zero_()
            self.running_var.fill_(1.0)

    def forward(self, input):
        if input.ndim not in self._ndims:
            raise ValueError("expected %s input (got %dD input)" % (" or ".join("%dD" % n for n in self._ndims),
                                                                   input.ndim))
        use_batch_stats = self.training or self.running_mean is None
        track = not self.training or self.track_running_stats
        return F.batch_norm(input, self.running_mean if track else None, self.running_var if track else None,
                            self.weight, self.bias, use_batch_stats, self.momentum, self.eps)

    def extra_repr(self):
        return "%d, eps=%s, momentum=%s, affine=%s, track_running_stats=%s" % (
            self.num_features, self.eps, self.momentum, self.affine, self.track_running_stats)


class BatchNorm1d(_BatchNorm):
    _ndims = (2,)


class BatchNorm2d(_BatchNorm):
    _ndims = (4,)

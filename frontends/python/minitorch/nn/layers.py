"""Layers: Linear, Identity, Flatten, the activations and the losses."""

import math

from .._dtype import as_device
from .._factory import zeros
from . import functional as F
from . import init
from .module import Module
from .parameter import Parameter


class Identity(Module):
    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, input):
        return input


class Linear(Module):
    """y = x @ weight^T + bias, weight [out_features, in_features], bias [out_features].

    Initialised as torch: weight and bias uniform on (-1/sqrt(in), 1/sqrt(in))."""

    def __init__(self, in_features, out_features, bias=True, device=None, dtype=None):
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        dev = as_device(device)
        self.weight = Parameter(zeros(out_features, in_features, dtype=dtype, device=dev))
        if bias:
            self.bias = Parameter(zeros(out_features, dtype=dtype, device=dev))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        bound = 1.0 / math.sqrt(self.in_features) if self.in_features > 0 else 0.0
        init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input):
        return F.linear(input, self.weight, self.bias)

    def extra_repr(self):
        return "in_features=%d, out_features=%d, bias=%s" % (self.in_features, self.out_features,
                                                              self.bias is not None)


class Flatten(Module):
    def __init__(self, start_dim=1, end_dim=-1):
        super().__init__()
        self.start_dim = start_dim
        self.end_dim = end_dim

    def forward(self, input):
        return input.flatten(self.start_dim, self.end_dim)

    def extra_repr(self):
        return "start_dim=%d, end_dim=%d" % (self.start_dim, self.end_dim)


class ReLU(Module):
    def forward(self, input):
        return F.relu(input)


class Sigmoid(Module):
    def forward(self, input):
        return F.sigmoid(input)


class Tanh(Module):
    def forward(self, input):
        return F.tanh(input)


class MSELoss(Module):
    def __init__(self, reduction="mean"):
        super().__init__()
        if reduction not in ("mean", "sum", "none"):
            raise ValueError("%s is not a valid value for reduction" % reduction)
        self.reduction = reduction

    def forward(self, input, target):
        return F.mse_loss(input, target, reduction=self.reduction)


class Softmax(Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, input):
        return F.softmax(input, self.dim)

    def extra_repr(self):
        return "dim=%s" % self.dim


class LogSoftmax(Softmax):
    def forward(self, input):
        return F.log_softmax(input, self.dim)


class CrossEntropyLoss(Module):
    """Mean cross entropy of logits [N, C] against class indices [N]."""

    def __init__(self, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0):
        super().__init__()
        F._only_mean("CrossEntropyLoss", reduction, weight=(weight, None),
                     ignore_index=(ignore_index, -100), label_smoothing=(label_smoothing, 0.0))
        self.reduction = reduction

    def forward(self, input, target):
        return F.cross_entropy(input, target)


class NLLLoss(Module):
    def __init__(self, weight=None, ignore_index=-100, reduction="mean"):
        super().__init__()
        F._only_mean("NLLLoss", reduction, weight=(weight, None), ignore_index=(ignore_index, -100))
        self.reduction = reduction

    def forward(self, input, target):
        return F.nll_loss(input, target)

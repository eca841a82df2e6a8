"""SGD over mt_optim_sgd (one fused kernel over all parameters on CUDA)."""

from ctypes import c_void_p

from .._lib import lib
from .optimizer import Optimizer, check_real, new_handle, required


class SGD(Optimizer):
    """torch.optim.SGD: with weight decay wd, g = grad + wd*p; with momentum m,
    v = m*v + g (v = g at the first step) and g = nesterov ? g + m*v : v; then p -= lr*g.

    dampening and maximize are not in the C ABI; only their defaults (0, False) are accepted.
    """

    _frozen = ("momentum", "weight_decay", "nesterov")
    _reals = ("lr", "momentum", "weight_decay")
    _state_kind = "sgd"

    def __init__(self, params, lr=1e-3, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False,
                 maximize=False):
        if lr is not required:
            check_real(lr, "lr")
        check_real(momentum, "momentum")
        check_real(weight_decay, "weight_decay")
        if lr is not required and lr < 0.0:
            raise ValueError("Invalid learning rate: %s" % lr)
        if momentum < 0.0:
            raise ValueError("Invalid momentum value: %s" % momentum)
        if weight_decay < 0.0:
            raise ValueError("Invalid weight_decay value: %s" % weight_decay)
        if dampening != 0:
            raise NotImplementedError("SGD dampening is not available: mt_optim_sgd has no dampening")
        if maximize:
            raise NotImplementedError("SGD maximize is not available: mt_optim_sgd has no maximize")
        defaults = dict(lr=lr, momentum=momentum, dampening=0.0, weight_decay=weight_decay,
                        nesterov=nesterov, maximize=False)
        super().__init__(params, defaults)

    def _check_group(self, group):
        if group["lr"] < 0.0:
            raise ValueError("Invalid learning rate: %s" % group["lr"])
        if group["nesterov"] and group["momentum"] <= 0:
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        if group.get("dampening", 0) != 0 or group.get("maximize", False):
            raise NotImplementedError("SGD dampening/maximize are not available in mt_optim_sgd")

    def _create(self, group):
        params = group["params"]
        arr = (c_void_p * len(params))(*[p._as_parameter_ for p in params])
        return new_handle(lib.mt_optim_sgd, arr, len(params), float(group["lr"]),
                          float(group["momentum"]), float(group["weight_decay"]),
                          1 if group["nesterov"] else 0)

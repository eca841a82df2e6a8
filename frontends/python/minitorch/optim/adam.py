"""Adam and AdamW over mt_optim_adam / mt_optim_adamw (one fused kernel on CUDA)."""

from ctypes import c_void_p

from .._lib import lib
from .optimizer import Optimizer, check_betas, check_real, new_handle


class _AdamBase(Optimizer):
    _frozen = ("betas", "eps", "weight_decay")
    _reals = ("lr", "eps", "weight_decay")
    _native = None

    def __init__(self, params, lr, betas, eps, weight_decay, amsgrad, maximize):
        check_real(lr, "lr")
        check_real(eps, "eps")
        check_real(weight_decay, "weight_decay")
        betas = check_betas(betas)
        if lr < 0.0:
            raise ValueError("Invalid learning rate: %s" % lr)
        if eps < 0.0:
            raise ValueError("Invalid epsilon value: %s" % eps)
        if not 0.0 <= betas[0] < 1.0:
            raise ValueError("Invalid beta parameter at index 0: %s" % betas[0])
        if not 0.0 <= betas[1] < 1.0:
            raise ValueError("Invalid beta parameter at index 1: %s" % betas[1])
        if weight_decay < 0.0:
            raise ValueError("Invalid weight_decay value: %s" % weight_decay)
        if amsgrad:
            raise NotImplementedError("amsgrad is not available in mt_optim_adam")
        if maximize:
            raise NotImplementedError("maximize is not available in mt_optim_adam")
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                                      amsgrad=False, maximize=False))

    def _check_group(self, group):
        group["betas"] = check_betas(group["betas"])

    def _create(self, group):
        params = group["params"]
        arr = (c_void_p * len(params))(*[p._as_parameter_ for p in params])
        b1, b2 = group["betas"]
        return new_handle(getattr(lib, self._native), arr, len(params), float(group["lr"]), float(b1),
                          float(b2), float(group["eps"]), float(group["weight_decay"]))


class Adam(_AdamBase):
    """torch.optim.Adam (weight_decay adds weight_decay * p to the gradient)."""
    _native = "mt_optim_adam"
    _state_kind = "adam"

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, amsgrad=False,
                 maximize=False):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, maximize)


class AdamW(_AdamBase):
    """torch.optim.AdamW (decoupled decay: p *= 1 - lr * weight_decay)."""
    _native = "mt_optim_adamw"
    _state_kind = "adamw"

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False,
                 maximize=False):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, maximize)

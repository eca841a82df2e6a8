"""Optimizer: param_groups as torch, each group backed by one native mt_optimizer."""

from ctypes import byref, c_double, c_void_p

from .._lib import lib
from .._tensor import Tensor
from ..autograd import enable_grad


class _Required:
    def __repr__(self):
        return "<required parameter>"


required = _Required()


class Optimizer:
    """Base class. A subclass names its defaults and implements _create(group) -> handle
    (an mt_optimizer * over the group's parameters) and _frozen (options that cannot
    change after creation). step() pushes a changed group['lr'] to the library first, so
    schedulers that edit param_groups work."""

    _frozen = ()

    def __init__(self, params, defaults):
        self.defaults = dict(defaults)
        self.param_groups = []
        self._handles = []
        if isinstance(params, Tensor):
            raise TypeError("params argument given to the optimizer should be an iterable of Tensors "
                            "or dicts, but got %s" % type(params).__name__)
        groups = list(params)
        if not groups:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for g in groups:
            self.add_param_group(g)

    def add_param_group(self, group):
        group = dict(group)
        params = group["params"]
        params = [params] if isinstance(params, Tensor) else list(params)
        for p in params:
            if not isinstance(p, Tensor):
                raise TypeError("optimizer can only optimize Tensors, but one of the params is %s"
                                % type(p).__name__)
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        if any(id(p) in seen for p in params) or len({id(p) for p in params}) != len(params):
            raise ValueError("some parameters appear in more than one parameter group")
        group["params"] = params
        for k, v in self.defaults.items():
            if v is required and k not in group:
                raise ValueError("parameter group didn't specify a value of required optimization "
                                 "parameter %s" % k)
            group.setdefault(k, v)
        self._check_group(group)
        handle = self._create(group)
        self.param_groups.append(group)
        self._handles.append([handle, float(group["lr"]), {k: group[k] for k in self._frozen}])

    def _check_group(self, group):
        pass

    def _create(self, group):
        raise NotImplementedError

    def _sync(self):
        for group, entry in zip(self.param_groups, self._handles):
            handle, lr, frozen = entry
            for k, v in frozen.items():
                if group[k] != v:
                    raise ValueError("changing %s of a parameter group after the optimizer was created "
                                     "is not supported; create a new optimizer" % k)
            if float(group["lr"]) != lr:
                lib.mt_optim_set_lr(handle, float(group["lr"]))
                entry[1] = float(group["lr"])

    def _handle_list(self):
        if any(h is None for h, _, _ in self._handles):
            raise ValueError("this optimizer has been closed")
        return [h for h, _, _ in self._handles]

    def step(self, closure=None):
        """One update of every parameter that has a gradient; returns closure()'s loss."""
        loss = None
        if closure is not None:
            with enable_grad():
                loss = closure()
        self._sync()
        for h in self._handle_list():
            lib.mt_optim_step(h)
        return loss

    def zero_grad(self, set_to_none=True):
        """Drops every parameter's gradient (set_to_none=True, as torch), or zeroes it in place."""
        if set_to_none:
            for h in self._handle_list():
                lib.mt_optim_zero_grad(h)
        else:
            for group in self.param_groups:
                for p in group["params"]:
                    lib.mt_tensor_zero_grad(p)

    def get_lr(self):
        """The learning rate of each group as the library holds it."""
        out = []
        for h in self._handle_list():
            v = c_double()
            lib.mt_optim_get_lr(h, byref(v))
            out.append(v.value)
        return out

    def close(self):
        """Frees the native optimizers (their references to parameters and state). Idempotent."""
        for entry in self._handles:
            h, entry[0] = entry[0], None
            if h is not None:
                lib.mt_optim_free(h)

    def __del__(self, _free=lib.mt_optim_free):
        for entry in getattr(self, "_handles", ()):
            h, entry[0] = entry[0], None
            if h is not None:
                try:
                    _free(h)
                except Exception:
                    pass

    def __repr__(self):
        lines = [type(self).__name__ + " ("]
        for i, g in enumerate(self.param_groups):
            lines.append("Parameter Group %d" % i)
            for k in sorted(g):
                if k != "params":
                    lines.append("    %s: %s" % (k, g[k]))
        lines.append(")")
        return "\n".join(lines)


def new_handle(fn, *args):
    out = c_void_p()
    fn(byref(out), *args)
    return out.value

"""Optimizer: param_groups as torch, each group backed by one native mt_optimizer."""

import os
import re
import shutil
import tempfile
import weakref
from ctypes import byref, c_double, c_void_p

from .._core import real_arg as check_real
from .._lib import lib
from .._tensor import Tensor
from ..autograd import enable_grad


class _Required:
    def __repr__(self):
        return "<required parameter>"


required = _Required()


def check_betas(betas):
    """betas as a tuple when it is a pair of real numbers; TypeError otherwise."""
    if not isinstance(betas, (tuple, list)) or len(betas) != 2:
        raise TypeError("betas must be a pair of real numbers, got %r" % (betas,))
    return (check_real(betas[0], "betas[0]"), check_real(betas[1], "betas[1]"))

# Every optimizer alive, so that a replayed CUDA graph (whose recorded updates read the
# learning rate on the device) sees a learning rate changed in param_groups since.
_LIVE = weakref.WeakSet()


def sync_learning_rates():
    """Pushes each live optimizer's changed group['lr'] to the library (CUDAGraph.replay
    calls it; step() does the same for its own optimizer)."""
    for opt in list(_LIVE):
        if all(h is not None for h, _, _ in opt._handles):
            opt._sync()


class Optimizer:
    """Base class. A subclass names its defaults and implements _create(group) -> handle
    (an mt_optimizer * over the group's parameters) and _frozen (options that cannot
    change after creation). step() pushes a changed group['lr'] to the library first, so
    schedulers that edit param_groups work."""

    _frozen = ()
    _reals = ("lr",)  # group options that must be real numbers (check_real)
    _state_kind = None  # the "optimizer" entry of mt_optim_save's files: sgd, adam, adamw

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
        _LIVE.add(self)

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
        for k in self._reals:
            check_real(group[k], k)
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
            if check_real(group["lr"], "lr") != lr:
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

    def state_dict(self):
        """{"state": {index: {name: Tensor}}, "param_groups": [...]} as torch: parameters are
        numbered across groups in order; state names are torch's (momentum_buffer, exp_avg,
        exp_avg_sq, step). The library writes each group's state with mt_optim_save; the
        tensors are read back from that file (copies, on the group's device)."""
        from .. import serialization
        state, groups, offset = {}, [], 0
        with _scratch_dir() as d:
            for gi, (group, h) in enumerate(zip(self.param_groups, self._handle_list())):
                path = os.path.join(d, "group%d.safetensors" % gi)
                lib.mt_optim_save(h, os.fsencode(path))
                device = group["params"][0].device if group["params"] else None
                for name, t in serialization.load(path, map_location=device).items():
                    m = re.match(r"state\.(\d+)\.(\w+)$", name)
                    if m:
                        state.setdefault(offset + int(m.group(1)), {})[m.group(2)] = t
                n = len(group["params"])
                g = {k: v for k, v in group.items() if k != "params"}
                g["params"] = list(range(offset, offset + n))
                groups.append(g)
                offset += n
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict):
        """Restores what state_dict() returned (from an optimizer of the same kind over
        parameters of the same shapes) through mt_optim_load, and each group's lr."""
        from .. import serialization
        from .._factory import tensor
        from .. import _dtype as D
        groups = state_dict["param_groups"]
        if len(groups) != len(self.param_groups):
            raise ValueError("loaded state dict has a different number of parameter groups")
        for mine, theirs in zip(self.param_groups, groups):
            if len(mine["params"]) != len(theirs["params"]):
                raise ValueError("loaded state dict contains a parameter group that doesn't match the size "
                                 "of optimizer's group")
        state = state_dict["state"]
        with _scratch_dir() as d:
            for gi, (group, theirs, entry) in enumerate(zip(self.param_groups, groups, self._handles)):
                entries = {"lr": tensor(float(theirs["lr"]), dtype=D.float64, device="cpu")}
                for i, index in enumerate(theirs["params"]):
                    for key, t in state.get(index, state.get(str(index), {})).items():
                        entries["state.%d.%s" % (i, key)] = t
                path = os.path.join(d, "group%d.safetensors" % gi)
                serialization.save_with_metadata(entries, path, {"optimizer": self._state_kind,
                                                                 "params": str(len(group["params"]))})
                lib.mt_optim_load(entry[0], os.fsencode(path))
                group["lr"] = entry[1] = float(theirs["lr"])

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


class _scratch_dir:
    """A temporary folder for the state files, removed on exit."""

    def __enter__(self):
        self.path = tempfile.mkdtemp(prefix="minitorch-optim-")
        return self.path

    def __exit__(self, *exc):
        shutil.rmtree(self.path, ignore_errors=True)
        return False


def new_handle(fn, *args):
    out = c_void_p()
    fn(byref(out), *args)
    return out.value

"""Module calls through global module hooks: ``Module.{fqn}.{Class}.forward.{n}`` entries, their
parameters, ``construct.json`` nesting, module backward and ``parameters_grad`` (A1, A6).

Names come from the model's ``named_modules()``. Like msprobe, the root model itself is not an
entry. Without a ``model`` (the runner runs a script it does not know), a module called while no
known module runs is taken as a root and its submodules are named from it.
"""

from __future__ import annotations

import weakref

from torch.nn.modules import module as nn_module

from .api_mode import backward_parent
from .backward import untap_outputs
from .recorder import call_stack


class _GradGroup:
    """The parameters of one module whose gradients make one ``parameters_grad`` entry."""

    def __init__(self, key: str, names: list[str]) -> None:
        self.key = key                  # "Module.fc1.Linear"
        self.names = names
        self.ready: dict[str, object] = {}
        self.count = 0


class ModuleHooks:
    def __init__(self, session, model, eager_watch) -> None:
        self.session = session
        self.eager_watch = eager_watch
        self.names: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self.roots: weakref.WeakSet = weakref.WeakSet()
        self.auto_roots = model is None
        self.calls: list[tuple] = []          # open forward calls, innermost last
        self.groups: list[_GradGroup] = []
        self._grad_hooked: weakref.WeakSet = weakref.WeakSet()
        self._handles: list = []
        if model is not None:
            self._adopt(model)

    def install(self) -> None:
        self._handles += [nn_module.register_module_forward_pre_hook(self._pre),
                          nn_module.register_module_forward_hook(self._post)]

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def _adopt(self, root) -> None:
        self.roots.add(root)
        for fqn, module in root.named_modules():
            if fqn and module not in self.names:
                self.names[module] = fqn
        for fqn, param in root.named_parameters():
            self.session.recorder.parameter_names[param] = fqn

    def _pre(self, module, args):
        rec = self.session.recorder
        if rec.busy:
            return None
        self.eager_watch.saw_module(module)
        fqn = self.names.get(module)
        if fqn is None:
            if self.auto_roots and not self.calls and module not in self.roots:
                self._adopt(module)
            self.calls.append((module, None))
            return None
        key = f"Module.{fqn}.{type(module).__name__}"
        n = rec.next_call(key + ".forward")
        name = f"{key}.forward.{n}"
        parent = rec.module_stack[-1] if rec.module_stack else None
        stack = call_stack()
        new_args, pairs = args, []
        with rec.internal():
            in_args, _ = rec.input_leaves(name, args, {})
            backward = rec.backward_entry(f"{key}.backward.{n}", backward_parent(parent))
            if backward is not None:
                self._hook_grads(module, key)
                if not getattr(module, "inplace", False):   # nn.ReLU(inplace=True) writes its input
                    new_args, pairs = rec.tap_inputs(tuple(args), backward)
        self.calls.append((module, (name, parent, in_args, backward, stack, pairs)))
        rec.module_stack.append(name)
        return None if new_args is args else new_args

    def _post(self, module, args, output):
        if not self.calls or self.calls[-1][0] is not module:
            return None
        _, call = self.calls.pop()
        if call is None:
            return None
        name, parent, in_args, backward, stack, pairs = call
        rec = self.session.recorder
        rec.module_stack.pop()
        with rec.internal():
            new_output = untap_outputs(output, pairs)
            params = {pname: rec.leaves.value(p, f"{name}.parameters.{pname}")
                      for pname, p in module.named_parameters(recurse=False)}
            record = {"input_args": in_args, "input_kwargs": {},
                      "output": rec.output_leaves(name, new_output, keep_existing=True),
                      "parameters": params}
            if backward is not None:
                rec.hook_outputs(new_output, backward)
            rec.add(name, record, parent, stack)
        return None if new_output is output else new_output

    # --- parameter gradients ----------------------------------------------------------------
    def _hook_grads(self, module, key: str) -> None:
        if module in self._grad_hooked:
            return
        self._grad_hooked.add(module)
        params = [(pname, p) for pname, p in module.named_parameters(recurse=False) if p.requires_grad]
        if not params:
            return
        group = _GradGroup(key, [pname for pname, _ in params])
        self.groups.append(group)
        for pname, p in params:
            self._handles.append(p.register_post_accumulate_grad_hook(
                lambda param, g=group, pn=pname: self._grad_ready(g, pn, param)))

    def _grad_ready(self, group: _GradGroup, pname: str, param) -> None:
        rec = self.session.recorder
        with rec.internal():
            path = f"{group.key}.parameters_grad.{group.count}.{pname}"
            group.ready[pname] = rec.leaves.value(param.grad, path)
            if len(group.ready) == len(group.names):
                self._write_grads(group)

    def _write_grads(self, group: _GradGroup) -> None:
        name = f"{group.key}.parameters_grad.{group.count}"
        self.session.recorder.add(name, {p: [leaf] for p, leaf in group.ready.items()},
                                  None, None, construct=False)
        group.count += 1
        group.ready = {}

    def finish(self) -> None:
        """Parameter groups some of whose gradients arrived: written as they are."""
        with self.session.recorder.internal():
            for group in self.groups:
                if group.ready:
                    self._write_grads(group)
            for group in self.groups:
                group.count = 0

"""Op registries: how the per-op tables of kernel modules become one table per op.

A kernel module declares plain dicts keyed by op name (ops/: KERNELS, SUPPORT, OUTPUT_SHAPES;
gpu/kernels/: SUPPORT, BUILD, EPILOGUE, FACTS). merge() joins one such dict over the modules and
fails at import when two modules declare the same op, where dict.update would let the later one
silently replace the earlier. An op may have several kernels (candidates), each in its own
module: candidates() orders them as the registry states (`order`), and choose() takes the first
whose support check passes for a node, as TFLite's GPU registry (registry.cc) does.
"""
from dataclasses import dataclass

UNARY = ((1,), (), 1)   # OpFacts.arity of an op of one input and one output
BINARY = ((2,), (), 1)  # ... of two inputs, neither omitted, and one output


class RegistryError(Exception):
    """Two modules declare one op without an order between them, or an order names the wrong
    modules: raised at import."""


@dataclass(frozen=True)
class OpFacts:
    """What passes other than an op's kernel need to know of the op, declared in the GPU kernel
    module that runs it (FACTS = {"OP": OpFacts(...)}) and read through gpu.kernels.facts().

    arity: (accepted input counts, indices of inputs that may be omitted, output count or None for
      any), checked before the kernel's own check; None: the op needs its first input present.
    fused_activation: the kernel applies options["fused_activation_function"] to its float
      output (rule fuse_activation may set it).
    integer_move: TFLite's quantized kernel copies or selects integers, so its output stays on its
      inputs' grid (quant.py).
    noop_input: the op may pass this input through unchanged (rule remove_noops checks it on the
      reference kernel); None: it never does."""
    arity: tuple = None
    fused_activation: bool = False
    integer_move: bool = False
    noop_input: int = None


def _name(module):
    return module.__name__.rsplit(".", 1)[-1]


def merge(modules, attribute):
    """{op: entry} of every module's dict `attribute` (a module without one adds nothing); an op
    two modules declare raises RegistryError naming both."""
    merged, owners = {}, {}
    for module in modules:
        for op, entry in getattr(module, attribute, {}).items():
            if op in merged:
                raise RegistryError(f"{op} is in {attribute} of both {owners[op].__name__} and {module.__name__}")
            merged[op], owners[op] = entry, module
    return merged


def candidates(modules, attribute, order=None):
    """{op: (module, ...)}: the modules whose dict `attribute` runs op, in the order they are
    tried. An op of several modules must be in `order` ({op: (module, ...)}), which names exactly
    those modules; anything else raises RegistryError."""
    found = {}
    for module in modules:
        for op in getattr(module, attribute):
            found.setdefault(op, []).append(module)
    order = order or {}
    for op, stated in order.items():
        if sorted(map(_name, stated)) != sorted(map(_name, found.get(op, ()))):
            raise RegistryError(f"the order of {op} names {[_name(m) for m in stated]}, but its kernels are "
                                f"in {[_name(m) for m in found.get(op, ())]}")
    for op, owners in found.items():
        if len(owners) > 1 and op not in order:
            raise RegistryError(f"{op} is in {attribute} of both {owners[0].__name__} and {owners[1].__name__} "
                                "(state the order of its candidates)")
    return {op: tuple(order.get(op, owners)) for op, owners in found.items()}


def choose(op, owners, node, support_attribute="SUPPORT"):
    """(module, None): the first of `owners` whose support check (its dict `support_attribute`;
    no entry: any node) passes for `node`; else (None, every candidate's reason), of the type of
    the first reason that is not a plain str (ops.checks.Unimplemented: a candidate found the
    node well formed, only of a variant it lacks)."""
    return _first_passing(owners, _checks(op, owners, support_attribute), node)


def _checks(op, owners, support_attribute):
    """The support check of `op` (or None) of each of `owners`."""
    return [getattr(module, support_attribute, {}).get(op) for module in owners]


def _first_passing(owners, checks, node):
    """choose() of `owners` whose checks are `checks` (_checks)."""
    reasons = []
    for module, check in zip(owners, checks):
        reason = None if check is None else check(node)
        if reason is None:
            return module, None
        reasons.append(reason)
    kind = next((type(r) for r in reasons if type(r) is not str), str)
    return None, kind("; ".join(reasons if len(owners) == 1 else
                                (f"{_name(m)}: {r}" for m, r in zip(owners, reasons))))


def resolve(op, owners, run_attribute, support_attribute="SUPPORT"):
    """(support(node) -> None | reason or None when no candidate checks, run(node, ...)) of op:
    its one module's own functions, or ones that choose() a candidate per node."""
    if len(owners) == 1:
        return getattr(owners[0], support_attribute, {}).get(op), getattr(owners[0], run_attribute)[op]
    checks = _checks(op, owners, support_attribute)  # looked up once: the closures run for every node of op

    def support(node):
        return _first_passing(owners, checks, node)[1]

    def run(node, *args):
        return getattr(_runner(op, owners, checks, node), run_attribute)[op](node, *args)
    return support, run


def runner_of(op, owners, support_attribute="SUPPORT"):
    """runner(op, owners, node) as a function of the node, its candidates' checks looked up once."""
    if len(owners) == 1:
        return lambda node: owners[0]
    checks = _checks(op, owners, support_attribute)
    return lambda node: _runner(op, owners, checks, node)


def runner(op, owners, node, support_attribute="SUPPORT"):
    """The module whose kernel runs `node`, a node its registry supports: its op's one candidate,
    or the first whose check passes (ValueError naming the node when none does)."""
    return runner_of(op, owners, support_attribute)(node)


def _runner(op, owners, checks, node):
    """runner() of `owners` of several candidates, whose checks are `checks` (_checks)."""
    module, reason = _first_passing(owners, checks, node)
    if module is None:
        raise ValueError(f"{node.label}: no {op} kernel runs it: {reason}")
    return module

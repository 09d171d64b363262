"""The TfLiteDelegate a LiteRT interpreter calls: Prepare claims nodes, the kernel callbacks run them.

Lifetime: one NativeDelegate per interpreter (each _get_native_delegate_pointer() call), kept in
_LIVE until that interpreter's native wrapper object is gone. LiteRT's Interpreter.__del__ drops
the wrapper first, whose C++ destructor frees our kernels (the free callback) before Python clears
the wrapper's weak references (pybind11's clear_instance order): only then is the NativeDelegate
dropped, with its ctypes callbacks and structs. It holds its GpuDelegate, so deleting the user's
GpuDelegate first changes nothing; GpuDelegate.close() releases the GPU partitions, after which
the interpreter's invoke fails with a RuntimeError naming the kernel (the callbacks stay valid).
"""
import ctypes
import logging
import sys
import threading
import weakref

from .. import ops
from ..gc_pause import gc_paused
from ..partition import span, split_empty
from ..tflite import read_model
from . import abi
from .kernel import Kernel, kernel_nodes, split_partitions
from .memory import lendable_outputs
from .plan import match_subgraph, plan_subgraph, replan_kernel
from .verify import check_subgraph

log = logging.getLogger("gles_delegate")
_LIVE = {}  # TfLiteDelegate address -> NativeDelegate: what a live LiteRT interpreter may call into
_LIVE_LOCK = threading.Lock()


class NativeDelegate:
    """A ctypes TfLiteDelegate for one LiteRT interpreter (source.Caller) of GpuDelegate `delegate`."""

    def __init__(self, delegate, caller):
        self.delegate = delegate
        self.runtime = f"{caller.package} {caller.version}"
        self.model = read_model(caller.model_bytes)
        self.lendable = lendable_outputs(self.model)  # subgraph index -> the outputs kernels may lend
        self.views_alive = _views_alive(weakref.ref(caller.wrapper))
        self.plans = {}    # subgraph index -> plan.SubgraphPlan of the last Prepare
        self.checked = set()  # subgraph indices verify.check_subgraph found equal to LiteRT's
        self.kernels = {}  # handle (the node's user_data) -> Kernel
        self._next_handle = 1
        self._preparing = None  # the SubgraphPlan being applied: init() runs inside Replace...()
        self._contexts = {}  # TfLiteContext address -> its struct (_context)
        self._callbacks = (abi.PrepareFn(self._prepare), abi.InitFn(self._init), abi.FreeFn(self._free),
                           abi.NodeFn(self._prepare_kernel), abi.NodeFn(self._invoke))
        prepare, init, free, prepare_kernel, invoke = self._callbacks
        self.struct = abi.TfLiteDelegate(None, prepare, None, None, None,
                                         abi.ALLOW_DYNAMIC_TENSORS, None)
        self.registration = abi.TfLiteRegistration(init=init, free=free, prepare=prepare_kernel, invoke=invoke,
                                                   builtin_code=abi.BUILTIN_DELEGATE, custom_name=b"GlesGpuDelegate",
                                                   version=1)
        self.address = ctypes.addressof(self.struct)

    # -- TfLiteDelegate.Prepare -------------------------------------------------------------
    def _prepare(self, context, _delegate):
        try:
            with gc_paused():  # planning and compiling a large graph: gc_pause.py
                return self._claim(context)
        except BaseException as exc:  # noqa: BLE001 (nothing may unwind into LiteRT's C++)
            return _report(context, f"GpuDelegate (on {self.runtime}): preparing the graph failed: "
                                    f"{type(exc).__name__}: {exc}")

    def _claim(self, context):
        """Find the subgraph LiteRT shows, plan it (again, after a resize) and hand LiteRT the
        nodes our partitions run."""
        ctx = context.contents
        nodes, codes = _original_nodes(ctx, context)
        if not nodes:  # an empty subgraph (or one an earlier delegate took whole): nothing to claim
            return abi.OK
        index = match_subgraph(self.model, nodes, codes)
        if index is None:
            return abi.OK
        if index not in self.checked:  # at its first Prepare, LiteRT holds the declared shapes
            check_subgraph(ctx, self.model, index)
            self.checked.add(index)
        old = self.plans.pop(index, None)
        if old is not None:
            old.release()
        shapes = _input_shapes(ctx, self.model.subgraphs[index])
        plan = self.plans[index] = plan_subgraph(self.delegate, self.model, index, set(nodes), shapes)
        if not plan.claimed:
            return abi.OK
        array, keep = abi.make_int_array(plan.claimed)
        self._preparing = plan
        try:
            return ctx.ReplaceNodeSubsetsWithDelegateKernels(context, self.registration, array, self.address)
        finally:
            self._preparing = None
            del keep

    # -- the kernel's TfLiteRegistration ----------------------------------------------------
    def _init(self, context, buffer, _length):
        try:
            nodes, boundary = kernel_nodes(buffer)
            pending = bool(set(nodes) & self._preparing.pending)  # compiled at its first prepare
            plan = self._preparing if pending else self._kernel_plan(nodes)
            kernel = Kernel(plan, nodes, boundary, self.delegate, self.lendable[plan.index], self.views_alive,
                            pending=pending)
        except BaseException as exc:  # noqa: BLE001
            _report(ctypes.cast(context, ctypes.POINTER(abi.TfLiteContext)),
                    f"GpuDelegate: making a delegate kernel failed: {type(exc).__name__}: {exc}")
            return abi.KERNEL_INIT_FAILED
        handle, self._next_handle = self._next_handle, self._next_handle + 1
        self.kernels[handle] = kernel
        return handle

    def _kernel_plan(self, nodes):
        """The plan a kernel of operators `nodes` runs: the subgraph's, or where LiteRT gave this
        kernel only part of a partition (experimental_preserve_all_tensors gives every node a
        kernel of its own, to keep its outputs), one compiled for these nodes alone."""
        plan = self._preparing
        if not split_partitions(plan, nodes):
            return plan
        log.info("GpuDelegate: LiteRT gave a delegate kernel part of a GPU partition (operators %s); compiling "
                 "them alone", sorted(nodes)[:8])
        return replan_kernel(self.delegate, self.model, plan, nodes, lambda i: tuple(plan.graph.tensors[i].shape))

    def _free(self, _context, buffer):
        try:
            kernel = self.kernels.pop(buffer, None)
            if kernel is not None:
                kernel.release()
        except BaseException:  # noqa: BLE001 (free has no status to return)
            log.exception("GpuDelegate: freeing a delegate kernel failed")

    def _prepare_kernel(self, context, node):
        with gc_paused():  # a resize re-plans here: gc_pause.py
            return self._call(context, node, self._replan_and_check)

    def _replan_and_check(self, kernel, ctx):
        """The kernel's prepare: LiteRT calls it after allocate_tensors() and again after a
        resize_tensor_input(), the tensors the kernel reads then at their new shapes: re-plan
        its partitions then, and give its outputs their new shapes (LiteRT prepares the nodes
        after it next). A kernel of pending nodes (plan.SubgraphPlan) compiles at its first."""
        if kernel.pending or any(_dims(ctx, i) != tuple(kernel.plan.graph.tensors[i].shape)
                                 for i in kernel.input_indices):
            self._replan(kernel, ctx)
        kernel.fit(ctx, ctypes.addressof(ctx))

    def _replan(self, kernel, ctx):
        """Compile the kernel's nodes again at the shapes LiteRT holds. LiteRT cannot take nodes
        back from a delegate: a node the GPU no longer takes at these shapes runs on the numpy
        reference inside the kernel (a warning names it and the GPU kernel's reason; the nodes
        of an empty tensor in one); one the reference cannot run either is an error naming it."""
        new = replan_kernel(self.delegate, self.model, kernel.plan, set(kernel.nodes), lambda i: _dims(ctx, i))
        try:  # the kernel's nodes that neither a partition runs nor fold into constants
            off_gpu = [(node, self._why_not_gpu(node)) for node in new.graph.nodes
                       if node.index in set(kernel.nodes) - new.gpu_nodes]
            for node, why in off_gpu:
                _check_reference(node, why)
            _log_off_gpu(off_gpu)
        except BaseException:
            new.release()
            raise
        kernel.release_partitions()
        kernel.bind(new)

    def _why_not_gpu(self, node):
        """Why the GPU does not run `node`, just re-planned (the GPU kernel's reason, a compile
        failure, or the partition limit)."""
        why = self.delegate.fallbacks.get(node.label) or self.delegate.unsupported_reason(node)
        if why is None:
            why = (f"its GPU partition is not among the max_delegated_partitions="
                   f"{self.delegate.options.max_delegated_partitions} largest at these shapes")
        return why

    def _invoke(self, context, node):
        return self._call(context, node, lambda kernel, ctx: kernel.run(ctx))

    def _call(self, context, node, action):
        """action(kernel, TfLiteContext) for the kernel of `node`; an exception becomes
        kTfLiteError with its message reported through the context (LiteRT raises it)."""
        kernel = None
        try:
            kernel = self.kernels[abi.node_user_data(node)]
            action(kernel, self._context(context))
            return abi.OK
        except BaseException as exc:  # noqa: BLE001
            label = kernel.label if kernel is not None else "GpuDelegate kernel"
            return _report(ctypes.cast(context, ctypes.POINTER(abi.TfLiteContext)),
                           f"{label}: {type(exc).__name__}: {exc}")

    def _context(self, address):
        """The TfLiteContext at `address`, one struct object per context (a subgraph's context
        stays where it is for the interpreter's life; ctypes.cast per invoke cost ~1 us)."""
        ctx = self._contexts.get(address)
        if ctx is None:
            ctx = self._contexts[address] = abi.TfLiteContext.from_address(address)
        return ctx

    def release(self):
        """Free the GPU partitions of every plan and drop the callbacks (the interpreter is gone:
        LiteRT calls none of them again). The callbacks are bound methods of this object, which
        holds them: until dropped, it and its model sit in a reference cycle that only the
        cyclic collector frees."""
        for plan in self.plans.values():
            plan.release()
        self.plans = {}
        self._callbacks = self.struct = self.registration = None


def _views_alive(wrapper_ref):
    """() -> whether numpy arrays over the interpreter's tensor memory live: LiteRT's tensor()
    views hold its native wrapper (their base), as LiteRT's own Interpreter._safe_to_run counts;
    a signature runner holds it too (then True: the mapping is kept a while longer, no harm)."""
    def alive():
        wrapper = wrapper_ref()
        # The references without a view: the Interpreter's _interpreter, `wrapper`, the argument.
        return wrapper is not None and sys.getrefcount(wrapper) > 3
    return alive


def _log_off_gpu(off_gpu):
    """A warning per (node, why the GPU does not run it) of a re-planned kernel, those of an empty
    tensor (an empty batch: every node) in one."""
    empty, others = split_empty(off_gpu)
    for node, why in others:
        log.warning("GpuDelegate: at the new input shapes the GPU does not run operator %s (%s): it runs on the "
                    "numpy reference inside the delegate kernel", node.label, why)
    if empty:
        log.warning("GpuDelegate: at the new input shapes the GPU does not run %s (a tensor each reads or writes "
                    "is empty): they run on the numpy reference inside the delegate kernel", span(empty))


def _check_reference(node, why):
    """A RuntimeError naming `node` unless the numpy reference runs it (why: the GPU's reason)."""
    reason = ops.unsupported_reason(node)
    if reason is not None:
        raise RuntimeError(f"at the new input shapes the GPU does not run operator {node.label} ({why}), and "
                           f"the numpy reference cannot run it either ({reason}); LiteRT's Interpreter applies the "
                           "delegate at the model's declared shapes only: convert the model with these input "
                           "shapes declared, or run it with gles_delegate.Interpreter, which plans at every "
                           "allocate_tensors()")


def _original_nodes(ctx, context):
    """{node index: (inputs, outputs)} of the execution plan's nodes that are still the model's
    operators (not a delegate kernel an earlier delegate made), and {node index: the builtin
    code of its registration}."""
    plan = ctypes.POINTER(abi.TfLiteIntArray)()
    if ctx.GetExecutionPlan(context, ctypes.byref(plan)) != abi.OK:
        raise RuntimeError("GetExecutionPlan failed")
    nodes, codes = {}, {}
    # One pair of out-parameters for every node (each is read before the next call): the plan
    # of a 100,000-node model made 400,000 ctypes objects here.
    node, registration = ctypes.POINTER(abi.TfLiteNode)(), ctypes.c_void_p()
    node_out, registration_out = ctypes.byref(node), ctypes.byref(registration)
    for index in abi.int_array(plan):
        if ctx.GetNodeAndRegistration(context, index, node_out, registration_out) != abi.OK:
            raise RuntimeError(f"GetNodeAndRegistration failed for node {index}")
        contents = node.contents
        if not contents.delegate:
            nodes[index] = (abi.int_array(contents.inputs), abi.int_array(contents.outputs))
            codes[index] = ctypes.c_int32.from_address(registration.value + abi.BUILTIN_CODE_OFFSET).value
    return nodes, codes


def _dims(ctx, index):
    """The shape LiteRT now holds for tensor `index` (a tuple)."""
    return tuple(abi.int_array(ctx.tensors[index].dims))


def _input_shapes(ctx, sg):
    """{input tensor index: shape} of model subgraph `sg`'s inputs as LiteRT now holds them."""
    return {i: _dims(ctx, i) for i in sg.inputs}


def _report(context, message):
    """ReportError(context, "%s", message); returns kTfLiteError."""
    log.debug("%s", message)
    context.contents.ReportError(ctypes.cast(context, ctypes.c_void_p), b"%s",
                                 message.encode("utf-8", "replace"))
    return abi.ERROR


def native_delegate_pointer(delegate, caller):
    """The address of a new TfLiteDelegate of `delegate` for the interpreter `caller`, kept alive
    until that interpreter is gone (module docstring)."""
    native = NativeDelegate(delegate, caller)
    with _LIVE_LOCK:
        _LIVE[native.address] = native
    weakref.finalize(caller.wrapper, _retire, native.address)
    return native.address


def _retire(address):
    """The interpreter's wrapper is gone: free the GPU partitions, and drop the callbacks unless
    a kernel is (unexpectedly) still alive, in which case they stay for the process."""
    with _LIVE_LOCK:
        native = _LIVE.get(address)
        if native is None or native.kernels:
            return
        del _LIVE[address]
    native.release()


def native_delegates(delegate):
    """The live NativeDelegates of GpuDelegate `delegate`, oldest first (for tests and tools:
    .plans[subgraph].claimed, .kernels)."""
    with _LIVE_LOCK:
        return [n for n in _LIVE.values() if n.delegate is delegate]

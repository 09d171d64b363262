"""Mark a RESHAPE / SQUEEZE / EXPAND_DIMS whose input and output have the same PHWC4 layout
(e.g. [1, 1, 1, C] <-> [1, C], [1, H, W, C] -> [1, H * W, C]) as an alias: the compiler gives
the output the input's storage and runs no dispatch for it."""
from ..kernels import epilogue
from ..kernels.layout import ALIAS, READ_THROUGH, same_storage

OPS = ("RESHAPE", "SQUEEZE", "EXPAND_DIMS")


def apply(graph, log):
    for node in graph.nodes:
        if node.op not in OPS:
            continue
        x, out = node.inputs[0], node.outputs[0]
        if x.is_const or x.is_variable or out.is_variable:
            reason = "it reads a constant or a variable tensor"
        elif node.options.get(READ_THROUGH):
            reason = "it reads through a removed layout op (rule read_through_layout)"
        elif epilogue.steps_of(node):
            reason = "it applies epilogue steps (an alias would skip them)"
        elif not same_storage(x, out):
            reason = f"{list(x.shape)} -> {list(out.shape)} moves values between PHWC4 slices or planes"
        else:
            reason = None
        if reason:
            log.skipped(node, reason)
            continue
        node.options[ALIAS] = True
        log.applied(node, f"tensor {out.index} shares the storage of tensor {x.index}")

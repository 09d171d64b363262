"""The reference runtime (ai-edge-litert), used only by tests, benchmarks and tools."""
import numpy as np
from ai_edge_litert.interpreter import Interpreter as LiteRTInterpreter
from ai_edge_litert.interpreter import OpResolverType

RESOLVERS = {"default": OpResolverType.AUTO,
             "builtin": OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
             "reference": OpResolverType.BUILTIN_REF}


def run_litert(model_content, inputs, resolver="default", preserve_all_tensors=False):
    """Run a model on LiteRT with `inputs` (a list in input order); returns the outputs list
    (and the interpreter when preserve_all_tensors, to read intermediates)."""
    interp = LiteRTInterpreter(model_content=model_content, experimental_op_resolver_type=RESOLVERS[resolver],
                               experimental_preserve_all_tensors=preserve_all_tensors)
    interp.allocate_tensors()
    for detail, value in zip(interp.get_input_details(), inputs):
        interp.set_tensor(detail["index"], value)
    interp.invoke()
    outputs = [interp.get_tensor(d["index"]) for d in interp.get_output_details()]
    return (outputs, interp) if preserve_all_tensors else outputs


def random_inputs(details, seed=0):
    """Seeded random inputs for a list of input details: floats in [-1, 1), ints over their range."""
    rng = np.random.default_rng(seed)
    values = []
    for d in details:
        dtype, shape = np.dtype(d["dtype"]), tuple(d["shape"])
        if dtype.kind == "f":
            values.append(rng.uniform(-1, 1, shape).astype(dtype))
        elif dtype == np.bool_:
            values.append(rng.integers(0, 2, shape).astype(bool))
        else:
            info = np.iinfo(dtype)
            values.append(rng.integers(max(info.min, -1000), min(info.max, 1000) + 1, shape).astype(dtype))
    return values

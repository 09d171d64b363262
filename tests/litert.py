"""The reference runtime (ai-edge-litert), used only by tests, benchmarks and tools."""
from ai_edge_litert.interpreter import Interpreter as LiteRTInterpreter
from ai_edge_litert.interpreter import OpResolverType

from gles_delegate.tools.common import seeded_inputs

random_inputs = seeded_inputs  # the name scripts written against tests.litert use

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

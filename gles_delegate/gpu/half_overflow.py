"""Half storage's overflow, noticed at every invoke.

A store to half storage (precision 'fp16', 'fp16_fp32acc', and the tensors 'auto' keeps in half)
rounds a finite value of 65520 or more to inf, which LiteRT's float32 keeps: raw 16-bit PCM fed
as floats gives a power spectrum of 3.8e+09 (openWakeWord's melspectrogram). Every such store
sets the partition's overflow word (common.glsl note_overflow, compiler.Plan.overflow_offset),
which the runtime zeroes with the inputs and reads with the outputs, at no extra GL call.

An overflow that reaches a partition output as inf or NaN is an answer LiteRT's CPU would not
give: a HalfOverflowWarning names the partition and the output (Python's default filter shows
it once per partition and output). One absorbed on the way (an attention mask of -1e9 stored as
-inf, which a softmax turns into 0 all the same) is only counted: GpuDelegate.summary()
['half_overflow'].
"""
import warnings

import numpy as np

from ..errors import HalfOverflowWarning


def new_record():
    """What GpuDelegate.summary()['half_overflow'] holds, before any invoke: the invokes of any
    partition whose half storage overflowed, those of them whose outputs came out inf or NaN,
    and where the first of those did (note's `where`)."""
    return {"invokes": 0, "nonfinite_invokes": 0, "first": None}


def note(partition, storage, record):
    """Count an invoke of `partition` whose overflow word was set in `record` (new_record()),
    and warn when its outputs, in `storage` (tensor index -> value), hold inf or NaN."""
    record["invokes"] += 1
    value = getattr(storage, "current", storage.__getitem__)  # runtime.input_reader: no copy of a deferred output
    bad = [slot.tensor_index for slot in partition.plan.outputs if not _finite(value(slot.tensor_index))]
    if not bad:
        return
    record["nonfinite_invokes"] += 1
    nodes = partition.nodes
    names = {t.index: t.name for node in nodes for t in node.outputs if t is not None}
    span = f"{nodes[0].label} .. {nodes[-1].label}" if len(nodes) > 1 else (nodes[0].label if nodes else "")
    where = {"nodes": span,
             "outputs": [{"index": index, "tensor": names.get(index)} for index in bad]}
    if record["first"] is None:
        record["first"] = where
    said = ", ".join(f"{o['index']} ({o['tensor']!r})" for o in where["outputs"])
    warnings.warn(HalfOverflowWarning(
        f"the GPU partition of nodes {where['nodes']} stored a value beyond half precision's range "
        f"(65504) as inf, and its output tensor{'s' if len(bad) > 1 else ''} {said} came out inf or NaN "
        f"where float32 storage could keep them finite. Use precision='fp32', or 'auto' with "
        f"calibration_inputs= at the real inputs' scale (GpuDelegateOptions(debug_nonfinite=True) names "
        f"the first node whose output overflows)"), stacklevel=2)


def _finite(value):
    value = np.asarray(value)
    return not np.issubdtype(value.dtype, np.inexact) or bool(np.isfinite(value).all())

"""Half storage's overflow, noticed at every invoke.

A store to half storage (precision 'fp16', 'fp16_fp32acc', and the tensors 'auto' keeps in half)
rounds a finite value of 65520 or more to inf, which LiteRT's float32 keeps: raw 16-bit PCM fed
as floats gives a power spectrum of 3.8e+09 (openWakeWord's melspectrogram). Every such store
sets the partition's overflow word (common.glsl note_overflow, compiler.Plan.overflow_offset),
which the runtime zeroes with the inputs and reads with the outputs, at no extra GL call.

An overflow that reaches a partition output is an answer LiteRT's CPU would not give: a float
output inf or NaN, or any integer or bool output, which cannot show it (int8 codes of 60 + 60 at
a scale of 1000 came out 127, saturated, in half storage: LiteRT gives 60). With precision
'auto' the partition's float32 twin (its nodes compiled again at fp32 the first time) computes
that invoke's outputs again: 'auto' promises float32's answers within its tolerance, and its
calibration samples did not reach this scale. A partition holding state (resource variables,
variable tensors) has no twin: the second run would advance the state twice. Either way a
HalfOverflowWarning names the partition and the output (Python's default filter shows it once
per partition and output). One absorbed on the way (an attention mask of -1e9 stored as -inf,
which a softmax turns into 0 all the same) is only counted: GpuDelegate.summary()['half_overflow'].
"""
import warnings

import numpy as np

from ..errors import HalfOverflowWarning


def new_record():
    """What GpuDelegate.summary()['half_overflow'] holds, before any invoke: the invokes of any
    partition whose half storage overflowed, those of them in which it reached an output
    (_reached), those of these a float32 twin computed again (precision 'auto'), and where the
    first of those was (note's `where`)."""
    return {"invokes": 0, "reached_outputs": 0, "recomputed": 0, "first": None}


def note(partition, storage, value, record, capture=None):
    """Count an invoke of `partition` whose overflow word was set in `record` (new_record()).
    Where the overflow reached its outputs, in `storage` (tensor index -> value; `value`, its
    runtime.input_reader, reads them without copying a deferred one) (_reached):
    with precision 'auto' (partition.float_twin set) its float32 twin computes them again from
    the same inputs (and the tensors of `capture`, the run's, GpuPartition.run), once compiled
    the first time it is needed; either way a HalfOverflowWarning."""
    record["invokes"] += 1
    reached = _reached(partition, value)
    if not reached:
        return
    record["reached_outputs"] += 1
    nodes = partition.nodes
    span = f"{nodes[0].label} .. {nodes[-1].label}" if len(nodes) > 1 else (nodes[0].label if nodes else "")
    where = {"nodes": span, "outputs": reached}
    if record["first"] is None:
        record["first"] = where
    said = (f"the GPU partition of nodes {span} stored a value beyond half precision's range (65504) as inf, "
            f"and its output tensor{'s' if len(reached) > 1 else ''} "
            + ", ".join(f"{o['index']} ({o['tensor']!r}) {o['how']}" for o in reached))
    twin = _float_twin(partition)
    if twin is not None:
        twin.run(storage, capture)
        record["recomputed"] += 1
        said += (": precision 'auto' computed them again with float32 storage (the partition's float32 twin, one "
                 "more run per such invoke). Calibrating on inputs at this scale (calibration_inputs=) keeps in "
                 "float what overflows and saves that run")
    else:
        said += (", where float32 storage would not. Use precision='fp32', or 'auto' with calibration_inputs= at "
                 "the real inputs' scale")
    warnings.warn(HalfOverflowWarning(said + " (GpuDelegateOptions(debug_nonfinite=True) names the first node "
                                      "whose output overflows)"), stacklevel=2)


def _reached(partition, value):
    """[{'index', 'tensor', 'how'}] of the partition outputs an overflow reached: a float output
    holding inf or NaN; any other (int8 / uint8 of a quantized model, int32, bool), whose
    values cannot show it: an inf quantized, cast or compared comes out a valid-looking value
    (the largest int8, a comparison's other answer). An overflow only float outputs absorbed is
    none of these."""
    names = {t.index: t.name for node in partition.nodes for t in node.outputs if t is not None}
    reached = []
    for slot in partition.plan.outputs:
        output = np.asarray(value(slot.tensor_index))
        if not np.issubdtype(output.dtype, np.inexact):
            how = f"may be wrong ({output.dtype}: an inf quantizes, casts or compares to a valid-looking value)"
        elif not np.isfinite(output).all():
            how = "came out inf or NaN"
        else:
            continue
        reached.append({"index": slot.tensor_index, "tensor": names.get(slot.tensor_index), "how": how})
    return reached


def _float_twin(partition):
    """The partition's float32 twin (a GpuPartition of the same nodes), made at its first use
    from partition.float_twin, or None: no maker (not 'auto', or state the twin's second run
    would advance again), or the twin failed to compile."""
    if partition.twin is None and partition.float_twin is not None:
        maker, partition.float_twin = partition.float_twin, None  # made once: a failure is not tried again
        partition.twin = maker()
    return partition.twin

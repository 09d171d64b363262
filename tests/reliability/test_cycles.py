"""A dropped interpreter is freed by reference counting alone: nothing of it waits in a reference
cycle for the cyclic collector, so a process that runs with the collector disabled (gc.disable())
or a server that loads and unloads models does not grow. Both paths: our Interpreter and LiteRT's,
with a GpuDelegate closed after the interpreter is dropped, or dropped with it (the usage
`Interpreter(..., experimental_delegates=[GpuDelegate()])`). Each check runs in a fresh process,
the collector disabled there. Before (docs/reliability.md, "scaling"), per node of a chain of
ADDs, about 13 objects of our Interpreter and 8 of LiteRT's sat in cycles: the executors <->
Runtime <-> Subgraphs, LiteRT's NativeDelegate <-> the bound methods its callbacks call."""
import gc
import json
import os
import subprocess
import sys
from collections import Counter

import numpy as np
import pytest

from gles_delegate import GpuDelegate, Interpreter
from gles_delegate.tflite import ModelBuilder
from tests.control_flow_models import counter_loop, if_model, stateful_counter
from tests.reliability.conftest import rss_bytes
from tests.streaming_models import Ring, ring_model
from tests.test_cpu_auto import _version_99_model
from tools.bench_scale import scale_model

pytestmark = pytest.mark.usefixtures("gpu_available")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUNTIMES = ("ours", "litert")
# What a dropped interpreter may leave in cycles: a tenth of an object per node (before, 8 to 13).
CYCLE_OBJECTS_PER_NODE = 0.1


def conv_chain(blocks, shape=(1, 4, 4, 4), seed=0):
    """x -> `blocks` times (CONV_2D 1x1 with RELU -> DEPTHWISE_CONV_2D 3x3 SAME -> ADD of the
    block's input): 3 nodes a block, each block's weights its own, all on the GPU."""
    rng = np.random.default_rng(seed)
    b = ModelBuilder()
    value = b.input("x", shape)
    channels = shape[-1]
    for k in range(blocks):
        w = b.const(f"w{k}", rng.uniform(-1, 1, (channels, 1, 1, channels)).astype(np.float32))
        bias = b.const(f"b{k}", rng.uniform(-1, 1, channels).astype(np.float32))
        conv = b.tensor(f"conv{k}", shape)
        b.op("CONV_2D", [value, w, bias], [conv], padding=0, stride_w=1, stride_h=1, fused_activation_function=1)
        dw = b.const(f"dw{k}", rng.uniform(-0.3, 0.3, (1, 3, 3, channels)).astype(np.float32))
        depthwise = b.tensor(f"dw{k}", shape)
        b.op("DEPTHWISE_CONV_2D", [conv, dw, -1], [depthwise], padding=0, stride_w=1, stride_h=1,
             depth_multiplier=1)
        out = b.tensor(f"sum{k}", shape)
        b.op("ADD", [depthwise, value], [out])
        value = out
    b.output(value)
    return b.build()


MODELS = {"adds": lambda nodes: scale_model(nodes), "convs": lambda nodes: conv_chain(nodes // 3)}
# Small models whose interpreters hold more than a graph of GPU nodes: subgraphs run by control
# flow, resource variables on the CPU or held by a GPU partition, a CPU node LiteRT refuses (ABS
# version 99: the reference runs it).
KINDS = {"while": lambda: counter_loop((1, 2, 2, 4), 1.0), "if": lambda: if_model((1, 4)),
         "variables on the cpu": lambda: stateful_counter(np.ones((1, 4), np.float32)),
         "variables on the gpu": lambda: ring_model(Ring()), "a node litert refuses": _version_99_model}


def run_and_drop(runtime, model, close):
    """Make an interpreter of `model` (`runtime`: 'ours' or 'litert') with a new GpuDelegate,
    allocate, invoke, read its output, drop it; then close the delegate (`close`) or drop it."""
    if runtime == "ours":
        make = Interpreter
    else:
        from tests.litert import LiteRTInterpreter as make
    delegate = GpuDelegate()
    interpreter = make(model_content=model, experimental_delegates=[delegate])
    interpreter.allocate_tensors()
    detail = interpreter.get_input_details()[0]
    interpreter.set_tensor(detail["index"], np.ones(detail["shape"], detail["dtype"]))
    interpreter.invoke()
    interpreter.get_tensor(interpreter.get_output_details()[0]["index"])
    del interpreter
    if close:
        delegate.close()


def cycle_objects(runtime, model_name, nodes, close):
    """(how many objects the collector finds after one interpreter of MODELS[model_name](nodes)
    was made and dropped with the collector disabled, {type name: count} of the 8 commonest)."""
    return dropped_model_cycle_objects(runtime, MODELS[model_name](nodes), close)


def kinds_cycle_objects():
    """{kind: cycle_objects of our Interpreter of KINDS[kind], its delegate closed}."""
    import warnings
    warnings.simplefilter("ignore")  # the nodes each leaves to the CPU, and why
    return {kind: dropped_model_cycle_objects("ours", make(), True) for kind, make in KINDS.items()}


def dropped_model_cycle_objects(runtime, model, close):
    """cycle_objects of `model`. A first interpreter is made and dropped before: what it leaves
    for the process (imports, caches) is no part of it."""
    gc.enable()
    run_and_drop(runtime, model, close)
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    run_and_drop(runtime, model, close)
    found = gc.collect()
    kinds = Counter(type(o).__qualname__ for o in gc.garbage).most_common(8)
    gc.set_debug(0)
    gc.garbage.clear()
    return found, dict(kinds)


def rss_after_drops(runtime, nodes, drops):
    """[RSS after each of `drops` interpreters of `nodes` ADDs made and dropped (their delegates
    closed), the collector disabled], bytes."""
    model = scale_model(nodes)
    gc.disable()
    rss = []
    for _ in range(drops):
        run_and_drop(runtime, model, close=True)
        rss.append(rss_bytes())
    return rss


def in_fresh_process(function, *args):
    """function(*args) (a function of this module) in a new Python process: its JSON result."""
    code = (f"import json; from tests.reliability.test_cycles import {function.__name__}; "
            f"print(json.dumps({function.__name__}(*{args!r})))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.splitlines()[-1])


@pytest.mark.parametrize("close", [True, False], ids=["closed", "dropped"])
@pytest.mark.parametrize("model_name", sorted(MODELS))
@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_dropped_interpreter_leaves_nothing_in_cycles(runtime, model_name, close):
    """600 nodes (ADDs, or conv blocks), made, run and dropped with the collector disabled: it
    finds fewer than CYCLE_OBJECTS_PER_NODE objects per node afterwards (0 now; before, 8,000
    to 9,000 of a chain of ADDs)."""
    nodes = 600
    found, kinds = in_fresh_process(cycle_objects, runtime, model_name, nodes, close)
    print(f"\n{runtime} {model_name} {nodes} nodes, delegate {'closed' if close else 'dropped'}: "
          f"{found} objects in cycles")
    assert found < CYCLE_OBJECTS_PER_NODE * nodes, kinds


def test_interpreters_of_every_kind_leave_nothing_in_cycles():
    """KINDS, each on our Interpreter with a GpuDelegate, made, run, dropped (its delegate
    closed) with the collector disabled: it finds nothing afterwards."""
    found = in_fresh_process(kinds_cycle_objects)
    assert {kind: count for kind, (count, _) in found.items()} == dict.fromkeys(KINDS, 0), found


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_dropped_interpreters_do_not_grow_rss_with_the_collector_disabled(runtime):
    """50 interpreters of 2,000 ADDs made, run and dropped in a row, the collector disabled: from
    the 10th on, RSS grows by less than the model file's size per interpreter. Whatever an
    interpreter holds per node is larger than the file (the model read alone is a few objects
    per operator and tensor, where the file has ~100 bytes per node), so a leak of any of it
    per interpreter passes the bound; before, RSS grew by several times the file's size each."""
    nodes, drops = 2000, 50
    model_bytes = len(scale_model(nodes))
    rss = np.array(in_fresh_process(rss_after_drops, runtime, nodes, drops), float)[10:]
    growth = np.polyfit(np.arange(len(rss)), rss, 1)[0]
    print(f"\n{runtime}: RSS {rss[0] / 2**20:.1f} -> {rss[-1] / 2**20:.1f} MiB, {growth / 1024:.1f} KiB per "
          f"interpreter (model file {model_bytes / 1024:.1f} KiB)")
    assert growth < model_bytes, f"{growth / 1024:.1f} KiB per interpreter"

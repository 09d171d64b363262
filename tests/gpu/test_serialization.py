"""The serialization cache: warm starts give the cold start's results; anything wrong with an
entry (corrupt, truncated, made elsewhere, unsafe permissions, refused binaries) is a warning and
a clean rebuild, never an exception."""
import copy
import dataclasses
import errno
import hashlib
import json
import math
import os
import re
import stat
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest

from gles_delegate import GpuDelegate, Interpreter
from gles_delegate import delegate as delegate_module
from gles_delegate.gpu import compiler, gl
from gles_delegate.gpu.compiler import IoSlot, Plan
from gles_delegate.gpu.context import GlContext
from gles_delegate.gpu.gl import Program
from gles_delegate.gpu.runtime import GpuPartition
from gles_delegate.gpu.serialization import CacheWarning, PlanCache, codec, entry, key, secret, validate
from gles_delegate.gpu.serialization.entry import EntryError
from gles_delegate.delegate import CACHE_PACKAGE
from tests.gpu.gpulib import START_IN_A_PROCESS

SMALL = "hand_recrop"               # 1x256x256x3 input, ~20 programs
SAME_INPUT = "selfie_segmentation"  # same input shape as SMALL: same entry name under one token
ROOT = Path(__file__).resolve().parents[2]


# -- helpers ---------------------------------------------------------------------------------
def start(model_path, directory, **options):
    """A started interpreter (inputs set, invoked once), its delegate and its outputs."""
    delegate = GpuDelegate(serialization_dir=str(directory), **options)
    interpreter = Interpreter(model_path=model_path, experimental_delegates=[delegate])
    interpreter.allocate_tensors()
    rng = np.random.default_rng(7)
    for detail in interpreter.get_input_details():
        interpreter.set_tensor(detail["index"], rng.uniform(-1, 1, detail["shape"]).astype(detail["dtype"]))
    interpreter.invoke()
    outputs = [interpreter.get_tensor(d["index"]) for d in interpreter.get_output_details()]
    return interpreter, delegate, outputs


def entry_path(directory):
    entries = sorted(Path(directory).glob("*" + entry.SUFFIX))
    assert len(entries) == 1, entries
    return entries[0]


def cache_for(interpreter, delegate, context=None):
    graph = interpreter._main.graph
    return PlanCache(delegate.options, context or delegate.context, graph, graph.nodes, CACHE_PACKAGE)


def run_partitions(made, interpreter):
    """Outputs of running partitions `made` on the interpreter's current inputs."""
    storage = {k: np.array(v, copy=True) for k, v in interpreter._main.storage.items()}
    for partition in made:
        partition.run(storage)
    return [storage[d["index"]] for d in interpreter.get_output_details()]


def fix_checksum(data, key=None):
    """An entry's bytes with the prefix's HMAC recomputed under `key` (default: this user's, as
    only whoever holds it can: an edit the HMAC then misses, which the later checks must catch)."""
    data = bytearray(data)
    prefix = entry.PREFIX
    magic, version, header, payload, _ = prefix.unpack_from(data)
    mac = entry.payload_mac(key or secret.entry_key(), bytes(data[prefix.size:]))
    prefix.pack_into(data, 0, magic, version, header, payload, mac)
    return bytes(data)


def header_of(data):
    header, blobs = entry.unpack_entry(data)
    return header, blobs


@pytest.fixture(scope="module")
def cold(mediapipe_models, tmp_path_factory):
    """A cold start of SMALL that stored its entry: (interpreter, delegate, outputs, dir, bytes)."""
    directory = tmp_path_factory.mktemp("entries")
    with warnings.catch_warnings():
        warnings.simplefilter("error", CacheWarning)
        interpreter, delegate, outputs = start(mediapipe_models[SMALL], directory)
    assert delegate.summary()["cache_hit"] is False
    return interpreter, delegate, outputs, directory, entry_path(directory).read_bytes()


@pytest.fixture()
def private_context(cold):
    """A GL context of its own (empty program cache: binaries really load), released after."""
    made = GlContext(gl_api=cold[1].context.gl_api)
    yield made
    made.release()


def load_bytes(data, cold, tmp_path, context=None):
    """PlanCache.load() of `data` written as the entry of SMALL: (result, CacheWarnings)."""
    interpreter, delegate = cold[0], cold[1]
    options = dataclasses.replace(delegate.options, serialization_dir=str(tmp_path))
    graph = interpreter._main.graph
    cache = PlanCache(options, context or delegate.context, graph, graph.nodes, CACHE_PACKAGE)
    Path(cache.path).write_bytes(data)
    os.chmod(cache.path, 0o600)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loaded = cache.load()
    if loaded is not None:
        for partition in loaded[0]:
            partition.release()
    return loaded, [w for w in caught if issubclass(w.category, CacheWarning)]


# -- warm starts -----------------------------------------------------------------------------
def test_warm_start_is_identical(cold, mediapipe_models):
    interpreter, delegate, outputs, directory, _ = cold
    with warnings.catch_warnings():
        warnings.simplefilter("error", CacheWarning)
        warm_interpreter, warm, warm_outputs = start(mediapipe_models[SMALL], directory)
    summary, cold_summary = warm.summary(), delegate.summary()
    assert summary["cache_hit"] is True
    assert summary["init_ms"] > 0
    assert {k: v for k, v in summary.items() if k not in ("init_ms", "cache_hit")} == \
        {k: v for k, v in cold_summary.items() if k not in ("init_ms", "cache_hit")}
    for a, b in zip(outputs, warm_outputs):
        np.testing.assert_array_equal(a, b)
    assert warm.rewrite_log == delegate.rewrite_log
    for p, q in zip(delegate.partitions, warm.partitions):
        assert [n.index for n in p.nodes] == [n.index for n in q.nodes]
        assert p.fused_away == q.fused_away
        assert_plans_equal(p.plan, q.plan)



def scratch_models():
    """{name: model bytes} of kernels with scratch tensors (negative indices in Plan.writes): an
    LSTM's input contributions, a 2-D RFFT2D's transformed rows."""
    from tests.oplib import In, single_op_model
    from tests.ops.test_lstm import full_lstm_model, random_spec
    spec, rng = random_spec(3, time_major=False)
    rfft = single_op_model("RFFT2D", [In(np.zeros((6, 10), np.float32)), In(np.array([8, 16], np.int32), const=True)],
                           output_dtypes=[np.complex64])
    return {"lstm": full_lstm_model("UNIDIRECTIONAL_SEQUENCE_LSTM", spec, rng)[0], "rfft2d": rfft}


@pytest.mark.parametrize("name", ["lstm", "rfft2d"])
def test_kernels_with_scratch_tensors_warm_start(name, tmp_path):
    """A scratch tensor's negative index in Plan.writes was refused as a malformed write: every
    warm start of an LSTM rebuilt the entry."""
    path = tmp_path / f"{name}.tflite"
    path.write_bytes(scratch_models()[name])
    _, cold, cold_outputs = start(str(path), tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CacheWarning)
        _, warm, warm_outputs = start(str(path), tmp_path)
    assert (cold.summary()["cache_hit"], warm.summary()["cache_hit"]) == (False, True)
    assert any(index < 0 for p in warm.partitions for written in p.plan.writes for index, _, _ in written)
    for a, b in zip(cold_outputs, warm_outputs):
        np.testing.assert_array_equal(a, b)


def test_half_storage_warm_start_uploads_the_entrys_halves(mediapipe_models, tmp_path):
    """With half storage the plan's constants are float16 from the compiler on, so the entry
    holds halves and a warm start uploads views of it as they are (no conversion in numpy)."""
    path = mediapipe_models[SMALL]
    cold_interpreter, cold, cold_outputs = start(path, tmp_path, precision="fp16_fp32acc")
    warm_interpreter, warm, warm_outputs = start(path, tmp_path, precision="fp16_fp32acc")
    assert warm.summary()["cache_hit"] is True
    for a, b in zip(cold_outputs, warm_outputs):
        np.testing.assert_array_equal(a, b)
    for p, q in zip(cold.partitions, warm.partitions):
        assert p.plan.constants.dtype == q.plan.constants.dtype == np.float16
        assert not q.plan.constants.flags.owndata  # a view of the entry's bytes, not a copy
        np.testing.assert_array_equal(p.plan.constants, q.plan.constants)


def test_warm_start_of_a_model_read_into_mapped_memory(mediapipe_models, tmp_path):
    """A model file over PRIVATE_READ_BYTES is read into an mmap, not bytes: the entry's name
    (the file's size and ends), the model's sha256 and the warm start work from it alike."""
    from gles_delegate.tflite import reader
    path = mediapipe_models["face_landmark"]
    assert Path(path).stat().st_size >= reader.PRIVATE_READ_BYTES
    cold_interpreter, _, cold_outputs = start(path, tmp_path)
    assert not isinstance(cold_interpreter._model.source_bytes, bytes)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CacheWarning)
        _, warm, warm_outputs = start(path, tmp_path)
    assert warm.summary()["cache_hit"]
    for a, b in zip(cold_outputs, warm_outputs):
        np.testing.assert_array_equal(a, b)

def assert_plans_equal(a, b):
    for field in dataclasses.fields(Plan):
        x, y = getattr(a, field.name), getattr(b, field.name)
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and np.array_equal(x, y), field.name
        else:
            assert x == y and type(x) is type(y), field.name


def test_binaries_load_in_a_fresh_context(cold, private_context, tmp_path):
    if private_context.binary_formats == 0:
        pytest.skip("this driver gives no program binaries (sources are compiled instead)")
    loaded, caught = load_bytes(cold[4], cold, tmp_path, private_context)
    assert loaded is not None and not caught
    with private_context.current():
        programs = [private_context.program(s) for p in loaded[0] for s in p.plan.sources]
    assert programs and all(p.from_binary and p.refused is None for p in programs)


def test_warm_start_in_fresh_processes(mediapipe_models, tmp_path):
    """Cold and warm starts in their own processes (no process-wide program cache): the warm one
    loads every program from its binary and gives the same output bytes."""
    script = "import warnings\nwarnings.simplefilter('error')\n" + START_IN_A_PROCESS + textwrap.dedent("""
        import hashlib, json
        digest = hashlib.sha256()
        for d in interpreter.get_output_details():
            digest.update(interpreter.get_tensor(d["index"]).tobytes())
        context = delegate.context
        with context.current():
            programs = list(context._programs.values())
        print(json.dumps({"hit": delegate.summary()["cache_hit"], "outputs": digest.hexdigest(),
                          "from_binary": sum(p.from_binary for p in programs), "programs": len(programs),
                          "formats": context.binary_formats}))
    """)
    results = []
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", script, mediapipe_models[SMALL], str(tmp_path), "3"],
                              capture_output=True, text=True, timeout=300, cwd=ROOT)
        assert done.returncode == 0, done.stderr[-3000:]
        results.append(json.loads(done.stdout.splitlines()[-1]))
    cold_run, warm_run = results
    assert (cold_run["hit"], warm_run["hit"]) == (False, True)
    assert warm_run["outputs"] == cold_run["outputs"]
    assert cold_run["from_binary"] == 0
    if warm_run["formats"]:
        assert warm_run["from_binary"] == warm_run["programs"] > 0


def test_two_processes_write_the_same_entry(mediapipe_models, tmp_path, cold):
    # Each writer waits, just before writing, until both are there: the writes overlap.
    script = textwrap.dedent("""
        import os, sys, time
        from gles_delegate import GpuDelegate, Interpreter
        from gles_delegate.gpu.serialization import cache
        write, barrier = cache.write_atomic, sys.argv[3]
        def synchronized(*args):
            open(os.path.join(barrier, str(os.getpid())), "w").close()
            deadline = time.monotonic() + 120
            while len(os.listdir(barrier)) < 2 and time.monotonic() < deadline:
                time.sleep(0.005)
            write(*args)
        cache.write_atomic = synchronized
        delegate = GpuDelegate(serialization_dir=sys.argv[2])
        interpreter = Interpreter(model_path=sys.argv[1], experimental_delegates=[delegate])
        interpreter.allocate_tensors()
        assert not delegate.summary()["cache_hit"]
    """)
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    tmp_path = tmp_path / "entries"
    command = [sys.executable, "-c", script, mediapipe_models[SMALL], str(tmp_path), str(barrier)]
    writers = [subprocess.Popen(command, cwd=ROOT, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    for writer in writers:
        _, stderr = writer.communicate(timeout=300)
        assert writer.returncode == 0, stderr[-3000:]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".tmp-")] == []
    with warnings.catch_warnings():
        warnings.simplefilter("error", CacheWarning)
        _, warm, outputs = start(mediapipe_models[SMALL], tmp_path)
    assert warm.summary()["cache_hit"]
    for a, b in zip(cold[2], outputs):
        np.testing.assert_array_equal(a, b)


# -- corrupt and truncated entries ---------------------------------------------------------------
@pytest.mark.parametrize("check_in_thread", [False, True])
def test_byte_flips_are_caught(cold, tmp_path, monkeypatch, check_in_thread):
    """Everywhere in the entry; the checksum either runs first or in a thread beside the
    constants upload (entries over BACKGROUND_CHECK_BYTES; this one is smaller, so the test
    lowers the threshold). Each flip rewrites the file in place right after the last load: a
    checksum thread still reading the entry's map then would die of SIGBUS."""
    monkeypatch.setattr(entry, "BACKGROUND_CHECK_BYTES", 0 if check_in_thread else 1 << 40)
    data = cold[4]
    offsets = sorted(set(list(range(0, entry.PREFIX.size + 8)) +
                         np.linspace(0, len(data) - 1, 60).astype(int).tolist()))
    for offset in offsets:
        flipped = bytearray(data)
        flipped[offset] ^= 0x5A
        loaded, caught = load_bytes(bytes(flipped), cold, tmp_path)
        assert loaded is None and len(caught) == 1, offset


def test_no_binary_reaches_the_driver_before_the_checksum_passed(cold, tmp_path, monkeypatch, private_context):
    if private_context.binary_formats == 0:
        pytest.skip("this driver gives no program binaries")
    monkeypatch.setattr(entry, "BACKGROUND_CHECK_BYTES", 0)
    header, _ = header_of(cold[4])
    index = next(item[1] for part in header["partitions"] for item in part["binaries"] if item)
    _, _, header_bytes, _, _ = entry.PREFIX.unpack_from(cold[4])
    blob_area = entry.PREFIX.size + header_bytes
    blob_area += -blob_area % entry.BLOB_ALIGN
    offset, length = header["blobs"][index]
    data = bytearray(cold[4])
    data[blob_area + offset + length // 2] ^= 0xFF
    given = []
    program = type(private_context).program
    monkeypatch.setattr(type(private_context), "program",
                        lambda self, source, binary=None: given.append(binary) or program(self, source, binary))
    loaded, caught = load_bytes(bytes(data), cold, tmp_path, private_context)
    assert loaded is None and len(caught) == 1 and "HMAC" in str(caught[0].message)
    assert not any(given)


def test_truncations_are_caught(cold, tmp_path):
    data = cold[4]
    lengths = sorted(set([0, 1, 7, 8, 12, entry.PREFIX.size - 1, entry.PREFIX.size,
                          len(data) - 1] + np.linspace(0, len(data) - 1, 40).astype(int).tolist()))
    for length in lengths:
        loaded, caught = load_bytes(data[:length], cold, tmp_path)
        assert loaded is None and len(caught) == 1, length
    loaded, caught = load_bytes(data + b"\0", cold, tmp_path)
    assert loaded is None and len(caught) == 1


def test_entry_rewritten_in_place_after_it_was_read(cold, mediapipe_models, tmp_path):
    """`cp` over an entry (truncate, then write) while another process loads it: the loader read
    a private copy, so it neither dies (a map of the file faulted with SIGBUS on the truncated
    pages) nor sees a mix. Runs in a process of its own, so that a SIGBUS fails the test only."""
    Path(tmp_path / entry_path(cold[3]).name).write_bytes(cold[4])
    os.chmod(entry_path(tmp_path), 0o600)
    script = textwrap.dedent("""
        import json, warnings
        from gles_delegate.gpu.serialization import cache

        read_entry = cache.read_entry
        def read_then_rewrite(path, max_bytes):
            data = read_entry(path, max_bytes)
            first_page = bytes(data[:4096])
            with open(path, "r+b") as f:  # cp over it, caught after its first write
                f.truncate(0)
                f.write(first_page)
            return data
        cache.read_entry = read_then_rewrite
        warnings.simplefilter("error")
    """) + START_IN_A_PROCESS + textwrap.dedent("""
        outputs = [interpreter.get_tensor(d["index"]).tolist() for d in interpreter.get_output_details()]
        print(json.dumps({"hit": delegate.summary()["cache_hit"], "outputs": outputs}))
    """)
    done = subprocess.run([sys.executable, "-c", script, mediapipe_models[SMALL], str(tmp_path), "7"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, (done.returncode, done.stderr[-3000:])
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["hit"] is True
    for a, b in zip(cold[2], result["outputs"]):
        np.testing.assert_array_equal(a, np.asarray(b, a.dtype))


def test_entry_truncated_while_it_is_read(cold, mediapipe_models, monkeypatch, tmp_path):
    """Truncated in place between the size check and the read: a CacheWarning and a cold build
    with the right outputs."""
    path = tmp_path / entry_path(cold[3]).name
    path.write_bytes(cold[4])
    path.chmod(0o600)
    read_file = entry.read_file

    def truncate_then_read(fd, size):
        os.truncate(path, size // 2)
        return read_file(fd, size)
    monkeypatch.setattr(entry, "read_file", truncate_then_read)
    with pytest.warns(CacheWarning, match="changed while it was read"):
        _, delegate, outputs = start(mediapipe_models[SMALL], tmp_path)
    assert not delegate.summary()["cache_hit"]
    for a, b in zip(cold[2], outputs):
        np.testing.assert_array_equal(a, b)


def test_header_corruption_with_a_valid_checksum_never_raises(cold, tmp_path, private_context):
    """Flips the checksum does not catch (the file was rewritten as a whole): the validators
    reject them or the entry still loads; nothing raises."""
    data = cold[4]
    _, _, header_bytes, _, _ = entry.PREFIX.unpack_from(data)
    start_, end = entry.PREFIX.size, entry.PREFIX.size + header_bytes
    rng = np.random.default_rng(0)
    for offset in rng.integers(start_, end, 60).tolist():
        flipped = bytearray(data)
        flipped[offset] = int(rng.choice([ord(c) for c in '0123456789{}[]",:x-'] + [0xFF]))
        load_bytes(fix_checksum(bytes(flipped)), cold, tmp_path, private_context)
    with private_context.current():
        private_context.clear_errors()


@pytest.mark.parametrize("edit", ["huge arena", "huge dispatch", "source index", "io slot shape",
                                  "unknown class", "unknown tag", "not a dataclass", "node op",
                                  "blob out of range", "deep nesting", "log line", "status words",
                                  "overflow word"])
def test_inconsistent_headers_are_rejected(cold, tmp_path, edit):
    header, blobs = header_of(cold[4])
    plan = header["partitions"][0]["plan"]
    fields = plan["fields"]
    if edit == "huge arena":
        fields["arena_elements"] = fields["arena_naive"] = 1 << 40
    elif edit == "huge dispatch":
        fields["steps"][0]["tuple"][3] = {"tuple": [1 << 30, 1 << 30, 1]}
    elif edit == "source index":
        fields["steps"][0]["tuple"][0] = 10 ** 6
    elif edit == "io slot shape":
        fields["inputs"][0]["fields"]["shape"] = {"tuple": [1, 4096, 4096, 3]}
    elif edit == "unknown class":
        plan["dataclass"] = "os:PathLike"
    elif edit == "unknown tag":
        fields["labels"] = {"pickle": "x"}
    elif edit == "not a dataclass":
        plan["dataclass"] = "gles_delegate.gpu.compiler:compile_plan"
    elif edit == "node op":
        header["partitions"][0]["ops"][0] = "CUSTOM_EVIL"
    elif edit == "blob out of range":
        fields["params"] = {"bytes": 10 ** 9}
    elif edit == "deep nesting":
        value = 1
        for _ in range(200):
            value = [value]
        fields["labels"] = value
    elif edit == "log line":
        header["log"] = [[30, "%s %s %s", ["only one"]]]
    elif edit == "status words":  # past the I/O buffer: zeroing them would write out of bounds
        fields["status_offset"] = 1 << 40
    elif edit == "overflow word":  # the same, for the word half storage's overflow sets
        fields["overflow_offset"] = 1 << 40
    loaded, caught = load_bytes(repack(header, blobs), cold, tmp_path)
    assert loaded is None and len(caught) == 1, caught


def forged_start(cold, mediapipe_models, tmp_path, header, blobs, match):
    """Start SMALL from a forged entry (edited, checksum recomputed): a CacheWarning matching
    `match`, a cold build, and the cold start's outputs."""
    path = tmp_path / entry_path(cold[3]).name
    path.write_bytes(repack(header, blobs))
    path.chmod(0o600)
    with pytest.warns(CacheWarning, match=match):
        _, delegate, outputs = start(mediapipe_models[SMALL], tmp_path)
    assert delegate.summary()["cache_hit"] is False
    for a, b in zip(cold[2], outputs):
        np.testing.assert_array_equal(a, b)


def source_text(encoded, blobs):
    """A plan source as the header holds it (inline, or a {"text": blob} of a long one) -> str."""
    return bytes(blobs[encoded["text"]]).decode() if isinstance(encoded, dict) else encoded


def forge_source(header, blobs, pick, edit):
    """Replace the first source of partition 0 that `pick` accepts by edit(source) (inline in the
    header), and drop its program binary (the forged source is what gets compiled)."""
    part = header["partitions"][0]
    sources = part["plan"]["fields"]["sources"]
    k = next(i for i, s in enumerate(sources) if pick(source_text(s, blobs)))
    sources[k] = edit(source_text(sources[k], blobs))
    part["binaries"][k] = None


@pytest.mark.parametrize("forgery", ["empty main", "no workgroups", "params 0x7fffffff",
                                     "offset past the buffers", "baked offset past the buffers",
                                     "baked grid", "consts binding", "io as arena"])
def test_forged_entries_are_rejected(cold, mediapipe_models, tmp_path, forgery):
    header, blobs = header_of(cold[4])
    blobs = [bytes(b) for b in blobs]
    fields = header["partitions"][0]["plan"]["fields"]
    match = "plan: params block"
    if forgery == "empty main":
        forge_source(header, blobs, lambda s: True,
                     lambda s: "#version 310 es\nlayout(local_size_x = 1) in;\nvoid main() {}\n")
    elif forgery == "no workgroups":
        fields["steps"][0]["tuple"][3] = {"tuple": [0, 0, 0]}
        match = "step groups"
    elif forgery == "params 0x7fffffff":
        index = fields["params"]["bytes"]
        blobs[index] = b"\xff\xff\xff\x7f" * (len(blobs[index]) // 4)
        match = "outside the arena"
    elif forgery == "offset past the buffers":
        plan = cold[1].partitions[0].plan
        limit = max(plan.arena_elements, len(plan.constants), plan.io_bytes // 4)
        step = next(s for s in plan.steps if validate.params_layout(plan.sources[s[0]])[1])
        _, position, _ = validate.params_layout(plan.sources[step[0]])[1][0]
        index = fields["params"]["bytes"]
        params = bytearray(blobs[index])
        params[step[1] + position:step[1] + position + 4] = limit.to_bytes(4, "little")
        blobs[index] = bytes(params)
        match = "outside the arena"
    elif forgery.startswith("baked"):  # a source with its params as constants (compiler._params_blocks)
        plan = cold[1].partitions[0].plan
        limit = max(plan.arena_elements, len(plan.constants), plan.io_bytes // 4)
        pattern = r"const highp int (\w+_offset) = \d+;" if "offset" in forgery else r"const highp ivec3 grid = ivec3\(\d+"
        swap = (lambda m: f"const highp int {m.group(1)} = {limit};") if "offset" in forgery else \
            (lambda m: m.group(0)[:m.group(0).index("(") + 1] + str(int(m.group(0).split("(")[1]) + 1000))
        forge_source(header, blobs, lambda s: re.search(pattern, s) is not None,
                     lambda s: re.sub(pattern, swap, s, count=1))
        match = "outside the arena" if "offset" in forgery else "do not cover its grid"
    elif forgery == "consts binding":
        forge_source(header, blobs, lambda s: "weights_offset" in s,
                     lambda s: s.replace("binding = 1) readonly buffer Consts", "binding = 3) readonly buffer Consts"))
        match = "buffer block Consts at binding 3"
    elif forgery == "io as arena":
        forge_source(header, blobs, lambda s: "buffer Io" in s, lambda s: s.replace("binding = 2)", "binding = 0)"))
        match = "buffer block Io at binding 0"
    forged_start(cold, mediapipe_models, tmp_path, header, blobs, match)


def forge_data(header, blobs, forgery):
    """Edit partition 0's plan as an adversarial trial did: its params blob zeroed, every step's
    group counts (1, 1, 1), or its constants doubled (each changes the outputs)."""
    fields = header["partitions"][0]["plan"]["fields"]
    if forgery == "params zeroed":
        index = fields["params"]["bytes"]
        blobs[index] = bytes(len(blobs[index]))
    elif forgery == "groups (1, 1, 1)":
        for step in fields["steps"]:
            step["tuple"][3] = {"tuple": [1, 1, 1]}
    elif forgery == "constants doubled":
        encoded = fields["constants"]
        values = np.frombuffer(blobs[encoded["ndarray"]], encoded["dtype"])
        blobs[encoded["ndarray"]] = (values * 2).astype(values.dtype).tobytes()


@pytest.mark.parametrize("forgery", ["params zeroed", "groups (1, 1, 1)", "constants doubled"])
def test_an_entry_edited_without_this_users_key_is_refused(cold, mediapipe_models, tmp_path, forgery):
    # With its CRC-32 recomputed each loaded with cache_hit True and gave wrong outputs: an entry
    # is now authenticated by an HMAC under this user's key, which whoever edits it lacks (the
    # checks of the plan, which run before the HMAC is done, may refuse it first).
    header, blobs = header_of(cold[4])
    blobs = [bytes(b) for b in blobs]
    forge_data(header, blobs, forgery)
    forged = fix_checksum(repack(header, blobs), key=bytes(range(32)))
    path = tmp_path / entry_path(cold[3]).name
    path.write_bytes(forged)
    path.chmod(0o600)
    with pytest.warns(CacheWarning, match="its HMAC is not this user's key's|do not cover its grid"):
        _, delegate, outputs = start(mediapipe_models[SMALL], tmp_path)
    assert delegate.summary()["cache_hit"] is False
    for a, b in zip(cold[2], outputs):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("forgery", ["params zeroed", "groups (1, 1, 1)"])
def test_dispatches_that_do_not_cover_their_grid_are_refused(cold, mediapipe_models, tmp_path, forgery):
    # Even under this user's key (an entry written by a faulty build): every step's group counts
    # must be what the compiler gives the grid of its params with the workgroup of its source.
    header, blobs = header_of(cold[4])
    blobs = [bytes(b) for b in blobs]
    forge_data(header, blobs, forgery)
    forged_start(cold, mediapipe_models, tmp_path, header, blobs, "do not cover its grid")


def test_the_entry_key_is_this_users_alone(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    made = secret.entry_key()
    path = Path(secret.key_path())
    assert path.parent == tmp_path / "gles_delegate" and len(made) == secret.KEY_BYTES
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and path.read_bytes() == made
    secret._keys.clear()
    assert secret.entry_key() == made  # read back, not made again
    secret._keys.clear()
    path.chmod(0o644)
    with pytest.raises(EntryError, match="not a file of this user's alone"):
        secret.entry_key()
    secret._keys.clear()


def test_program_binary_of_another_program_is_rejected(cold, tmp_path, private_context):
    """A genuine source paired with the binary of an empty main(): the loaded program lacks the
    blocks the runtime binds; the entry is refused and the program is not kept for the rebuild."""
    if not private_context.binary_formats:
        pytest.skip("the driver gives no program binaries")
    with private_context.current():
        empty = Program.compile(private_context.gl, "#version 310 es\nlayout(local_size_x = 1) in;\nvoid main() {}\n")
        binary = empty.binary()
        empty.release()
    header, blobs = header_of(cold[4])
    table = [bytes(b) for b in blobs] + [binary[1]]
    part = header["partitions"][0]
    sources = [source_text(s, table) for s in part["plan"]["fields"]["sources"]]
    # A source with a Params block (one whose dispatches share it), and one with its params baked in.
    with_block = next(k for k, s in enumerate(sources) if "uniform Params {" in s)
    baked = next(k for k, s in enumerate(sources) if "uniform Params {" not in s)
    for k, why in ((with_block, "does not use the Params block"), (baked, "writes no storage buffer")):
        with private_context.current():  # an earlier load keeps the genuine program of a source
            private_context.forget_program(sources[k])
        forged = copy.deepcopy(header)
        forged["partitions"][0]["binaries"][k] = [binary[0], len(table) - 1]
        loaded, caught = load_bytes(repack(forged, table), cold, tmp_path, private_context)
        assert loaded is None and len(caught) == 1 and why in str(caught[0].message)
        assert sources[k] not in private_context._programs


def test_serialization_dir_writable_by_others_is_refused(cold, mediapipe_models, tmp_path):
    directory = tmp_path / "shared"
    directory.mkdir()
    directory.chmod(0o777)
    with pytest.warns(CacheWarning, match="writable by other users"):
        _, delegate, outputs = start(mediapipe_models[SMALL], directory)
    assert delegate.summary()["cache_hit"] is False
    assert list(directory.iterdir()) == []
    for a, b in zip(cold[2], outputs):
        np.testing.assert_array_equal(a, b)


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory to another user needs root")
def test_serialization_dir_of_another_user_is_refused(cold, mediapipe_models, tmp_path):
    (tmp_path / entry_path(cold[3]).name).write_bytes(cold[4])
    os.chmod(entry_path(tmp_path), 0o600)
    os.chown(tmp_path, 4242, 4242)
    with pytest.warns(CacheWarning, match="owned by uid 4242"):
        _, delegate, _ = start(mediapipe_models[SMALL], tmp_path)
    assert delegate.summary()["cache_hit"] is False


def repack(header, blobs):
    """Entry bytes from a (possibly edited) header and its blobs, with this user's HMAC."""
    table = codec.Blobs()
    for blob in blobs:
        table.add(bytes(blob))
    header = {k: v for k, v in header.items() if k != "blobs"}
    pieces, _ = entry.pack_entry(header, table, secret.entry_key())
    return b"".join(bytes(p) for p in pieces)


def corrupt_binaries(data, header, blobs, how):
    """The entry bytes with every program binary made unloadable: `bytes`, 8 bytes in its middle
    flipped; `format`, its binary format an enum no driver has (refused with GL_INVALID_ENUM
    before any byte is read)."""
    if how == "format":
        for part in header["partitions"]:
            part["binaries"] = [item and [0xDEAD, item[1]] for item in part["binaries"]]
        return repack(header, blobs)
    data = bytearray(data)
    _, _, header_bytes, _, _ = entry.PREFIX.unpack_from(data)
    blob_area = entry.PREFIX.size + header_bytes
    blob_area += -blob_area % entry.BLOB_ALIGN
    for index in {item[1] for part in header["partitions"] for item in part["binaries"] if item}:
        offset, length = header["blobs"][index]
        middle = blob_area + offset + length // 2
        assert bytes(data[middle:middle + 8]) == bytes(blobs[index][length // 2:length // 2 + 8])
        data[middle:middle + 8] = bytes(b ^ 0xFF for b in data[middle:middle + 8])
    return fix_checksum(bytes(data))


@pytest.mark.parametrize("how", ["format", "bytes"])
def test_refused_program_binaries_fall_back_to_source(cold, private_context, tmp_path, how):
    """Binaries the driver refuses (under this user's key, so the HMAC passes) compile from
    source instead, and the entry is rewritten. Flipped bytes only on Mesa, which checks a
    binary's checksum: NVIDIA's driver crashed on them (seen on an H200), which is why no byte of
    a binary reaches the driver before the entry's HMAC passed."""
    if private_context.binary_formats == 0:
        pytest.skip("this driver gives no program binaries")
    if how == "bytes" and "Mesa" not in private_context.version:
        pytest.skip("only Mesa's driver is known to refuse corrupt binary bytes (NVIDIA's crashes on them)")
    header, blobs = header_of(cold[4])
    corrupted = corrupt_binaries(cold[4], header, blobs, how)
    interpreter, delegate = cold[0], cold[1]
    options = dataclasses.replace(delegate.options, serialization_dir=str(tmp_path))
    graph = interpreter._main.graph
    cache = PlanCache(options, private_context, graph, graph.nodes, CACHE_PACKAGE)
    Path(cache.path).write_bytes(corrupted)
    os.chmod(cache.path, 0o600)
    with pytest.warns(CacheWarning, match="refused"):
        made, _ = cache.load()
    with private_context.current():
        programs = [private_context.program(s) for p in made for s in p.plan.sources]
    assert all(not p.from_binary and p.refused for p in programs)
    for a, b in zip(cold[2], run_partitions(made, interpreter)):
        np.testing.assert_array_equal(a, b)
    for partition in made:
        partition.release()
    assert Path(cache.path).read_bytes() != corrupted  # rewritten with binaries that load


# -- entries made elsewhere ----------------------------------------------------------------------
def test_other_renderer_rebuilds(cold, mediapipe_models, monkeypatch, tmp_path):
    directory = tmp_path / "entries"
    start(mediapipe_models[SMALL], directory)
    context = cold[1].context
    monkeypatch.setattr(context, "renderer", context.renderer + " (another one)")
    with pytest.warns(CacheWarning, match="another GPU"):
        _, delegate, outputs = start(mediapipe_models[SMALL], directory)
    assert not delegate.summary()["cache_hit"]
    for a, b in zip(cold[2], outputs):
        np.testing.assert_array_equal(a, b)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CacheWarning)
        _, delegate, _ = start(mediapipe_models[SMALL], directory)  # the rebuilt entry serves it
    assert delegate.summary()["cache_hit"]


def test_other_package_version_rebuilds(cold, mediapipe_models, monkeypatch, tmp_path):
    start(mediapipe_models[SMALL], tmp_path)
    monkeypatch.setattr(delegate_module, "CACHE_PACKAGE", dataclasses.replace(CACHE_PACKAGE, version="999.0"))
    with pytest.warns(CacheWarning, match="another gles_delegate version"):
        _, delegate, outputs = start(mediapipe_models[SMALL], tmp_path)
    assert not delegate.summary()["cache_hit"]
    for a, b in zip(cold[2], outputs):
        np.testing.assert_array_equal(a, b)


def test_other_model_under_the_same_token_rebuilds(mediapipe_models, tmp_path):
    _, _, small = start(mediapipe_models[SMALL], tmp_path, model_token="my-model")
    _, _, other_cold = start(mediapipe_models[SAME_INPUT], tmp_path / "reference")
    with pytest.warns(CacheWarning, match="another model"):
        _, delegate, other = start(mediapipe_models[SAME_INPUT], tmp_path, model_token="my-model")
    assert not delegate.summary()["cache_hit"]
    for a, b in zip(other_cold, other):
        np.testing.assert_array_equal(a, b)
    assert len(list(tmp_path.glob("*" + entry.SUFFIX))) == 1  # one token, one entry


@pytest.mark.parametrize("runtime", ["gles", "litert"])
def test_a_cache_warning_shows_the_callers_line(runtime, mediapipe_models, tmp_path):
    """The warning names the line of the user's code that made the delegate work, not one of
    ours (which tells the user nothing), also through LiteRT's Interpreter, which calls the
    delegate from native code; and it says what happens next."""
    interpreter_class = Interpreter if runtime == "gles" else \
        pytest.importorskip("ai_edge_litert.interpreter").Interpreter

    def build(model):
        delegate = GpuDelegate(serialization_dir=str(tmp_path), model_token="my-model")
        interpreter_class(model_path=model, experimental_delegates=[delegate]).allocate_tensors()

    build(mediapipe_models[SMALL])
    with pytest.warns(CacheWarning, match="give each model its own model_token") as caught:
        build(mediapipe_models[SAME_INPUT])
    cache_warnings = [w for w in caught if issubclass(w.category, CacheWarning)]
    assert {w.filename for w in cache_warnings} == {__file__}
    assert all("the next loads the rewritten entry" in str(w.message) for w in cache_warnings)


def test_same_graph_other_weights_under_the_same_token_rebuilds(mediapipe_models, tmp_path):
    """Only the bytes differ (one weight negated): every other field of the key agrees, and
    the model's sha256 alone tells the entry is not this model's."""
    from gles_delegate.tflite import read_model, write_model
    model = read_model(Path(mediapipe_models[SMALL]).read_bytes())
    biggest = max(range(len(model.buffers)), key=lambda i: model.buffers[i].size)
    floats = -np.frombuffer(model.buffers[biggest].tobytes(), np.float32)
    model.buffers[biggest] = np.frombuffer(floats.tobytes(), np.uint8)
    other = tmp_path / "other.tflite"
    other.write_bytes(write_model(model))
    start(mediapipe_models[SMALL], tmp_path / "cache", model_token="my-model")
    _, _, reference = start(str(other), tmp_path / "reference")
    with pytest.warns(CacheWarning, match="another model"):
        _, delegate, outputs = start(str(other), tmp_path / "cache", model_token="my-model")
    assert not delegate.summary()["cache_hit"]
    for a, b in zip(reference, outputs):
        np.testing.assert_array_equal(a, b)

def test_options_that_change_compilation_are_in_the_key(cold):
    options = cold[1].options
    fingerprint = key.options_fingerprint(options)
    names = {f.name for f in dataclasses.fields(options)}
    assert set(fingerprint) == (names - key.NOT_COMPILE_OPTIONS) | {"resolved_precision"}
    other = dataclasses.replace(options, memory_strategy="naive")
    assert key.options_fingerprint(other) != fingerprint


# -- the directory and its files -----------------------------------------------------------------
def test_directory_is_created_private(cold, mediapipe_models, tmp_path):
    directory = tmp_path / "new" / "entries"
    start(mediapipe_models[SMALL], directory)
    assert stat.S_IMODE(directory.stat().st_mode) & 0o077 == 0
    assert stat.S_IMODE(entry_path(directory).stat().st_mode) == 0o600


def test_stale_temp_files_are_removed(cold, mediapipe_models, tmp_path):
    stale, fresh = tmp_path / (".tmp-old" + entry.SUFFIX), tmp_path / (".tmp-new" + entry.SUFFIX)
    for path in (stale, fresh):
        path.write_bytes(b"partial")
    os.utime(stale, (1, 1))
    start(mediapipe_models[SMALL], tmp_path)
    assert not stale.exists() and fresh.exists()  # a writer may still be writing the fresh one


def test_read_only_directory_warns_once(cold, mediapipe_models, monkeypatch, tmp_path):
    directory = tmp_path / "read-only"
    directory.mkdir()
    directory.chmod(0o555)
    if os.geteuid() == 0:  # root writes anyway: make the write fail as a read-only mount would
        def refuse(*args, **kwargs):
            raise OSError(errno.EROFS, "Read-only file system")
        monkeypatch.setattr(entry.tempfile, "mkstemp", refuse)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(2):
                _, delegate, outputs = start(mediapipe_models[SMALL], directory)
                assert not delegate.summary()["cache_hit"]
                for a, b in zip(cold[2], outputs):
                    np.testing.assert_array_equal(a, b)
    finally:
        directory.chmod(0o755)
    messages = [str(w.message) for w in caught if issubclass(w.category, CacheWarning)]
    assert len(messages) == 1 and "cannot write" in messages[0], messages
    assert list(directory.iterdir()) == []


def test_world_writable_entry_is_ignored(cold, mediapipe_models, tmp_path):
    path = tmp_path / entry_path(cold[3]).name
    path.write_bytes(cold[4])
    path.chmod(0o666)
    with pytest.warns(CacheWarning, match="writable by others"):
        _, delegate, outputs = start(mediapipe_models[SMALL], tmp_path)
    assert not delegate.summary()["cache_hit"]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # replaced by a fresh, private entry
    for a, b in zip(cold[2], outputs):
        np.testing.assert_array_equal(a, b)


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_entry_of_another_user_is_ignored(cold, mediapipe_models, tmp_path):
    path = tmp_path / entry_path(cold[3]).name
    path.write_bytes(cold[4])
    path.chmod(0o600)
    os.chown(path, 4242, 4242)
    with pytest.warns(CacheWarning, match="owned by uid 4242"):
        _, delegate, _ = start(mediapipe_models[SMALL], tmp_path)
    assert not delegate.summary()["cache_hit"]


def test_fifo_entry_does_not_hang(cold, tmp_path):
    interpreter, delegate = cold[0], cold[1]
    options = dataclasses.replace(delegate.options, serialization_dir=str(tmp_path))
    graph = interpreter._main.graph
    cache = PlanCache(options, delegate.context, graph, graph.nodes, CACHE_PACKAGE)
    os.mkfifo(cache.path, 0o600)
    with pytest.warns(CacheWarning, match="not a regular file"):
        assert cache.load() is None


# -- the codec and the GL layer --------------------------------------------------------------------
def test_codec_round_trip():
    value = {"a": [1, 2.5, math.inf, None, True, "x", b"raw", bytearray(b"ba")],
             (1, 2): {frozenset({3}), 4}, "arrays": [np.arange(6, dtype=np.float16).reshape(2, 3),
                                                     np.zeros((0, 4), np.float32), np.int64(7), np.float32(0.5)],
             "slot": IoSlot(3, 16, 64, (1, 4, 4, 1))}
    blobs, modules = codec.Blobs(), {compiler.__name__: compiler}
    encoded = json.loads(json.dumps(codec.Encoder(blobs, modules)(value)))
    decoded = codec.Decoder([memoryview(b) for b in blobs.items], modules)(encoded)
    assert decoded["slot"] == value["slot"] and decoded[(1, 2)] == value[(1, 2)]
    assert decoded["a"] == value["a"] and type(decoded["a"][7]) is bytearray
    for x, y in zip(value["arrays"], decoded["arrays"]):
        assert type(x) is type(y) and np.asarray(x).dtype == np.asarray(y).dtype and np.array_equal(x, y)
    assert math.isnan(codec.Decoder([], modules)({"float": "nan"}))
    with pytest.raises(TypeError):
        codec.Encoder(blobs, modules)(object())
    with pytest.raises(TypeError):
        codec.Encoder(blobs, modules)(np.array(["text"]))
    with pytest.raises(TypeError):  # a dataclass of a module not named
        codec.Encoder(blobs, {})(value["slot"])


def test_codec_keeps_long_strings_as_deduplicated_utf8_blobs():
    """A string of TEXT_BLOB_CHARS or more (a GLSL source) leaves the JSON for a blob, once per
    distinct text; shorter ones stay inline; a blob that is not UTF-8 is an EntryError."""
    source = "#version 310 es\n// \u00e9\n" + "x" * codec.TEXT_BLOB_CHARS
    value = [source, source, "short", source[:-1] + "y"]
    blobs = codec.Blobs()
    encoded = json.loads(json.dumps(codec.Encoder(blobs, {})(value)))
    assert encoded[0] == encoded[1] == {"text": 0} and encoded[2] == "short" and encoded[3] == {"text": 1}
    assert len(blobs.items) == 2 and bytes(blobs.items[0]) == source.encode()
    assert codec.Decoder([memoryview(b) for b in blobs.items], {})(encoded) == value
    with pytest.raises(EntryError, match="not UTF-8"):
        codec.Decoder([memoryview(b"\xff\xfe")], {})({"text": 0})
    with pytest.raises(EntryError, match="out of range"):
        codec.Decoder([], {})({"text": 0})


def test_program_binary_round_trip(private_context):
    source = textwrap.dedent("""\
        #version 310 es
        layout(local_size_x = 1) in;
        layout(std430, binding = 0) buffer Data { float data[]; };
        void main() { data[gl_GlobalInvocationID.x] += 1.0; }
        """)
    gl = private_context.gl
    with private_context.current() as ctx:
        compiled = Program.compile(gl, source)
        binary = compiled.binary()
        if private_context.binary_formats == 0:
            assert binary is None
            return
        loaded, why = Program.load(gl, binary[0], binary[1], source)
        assert why is None and loaded.from_binary
        refused, why = Program.load(gl, binary[0], b"\0" * len(binary[1]), source)
        assert why is not None and not refused.from_binary
        wrong_format, why = Program.load(gl, 0x1234, binary[1], source)
        assert why is not None
        data = ctx.buffer(np.zeros(4, np.float32).tobytes())
        data.bind_to_storage_buffer(0)
        for program in (compiled, loaded, refused, wrong_format):
            program.run(4)
            ctx.memory_barrier()
        np.testing.assert_array_equal(np.frombuffer(data.read(), np.float32), [4, 4, 4, 4])
        data.release()
        for program in (compiled, loaded, refused, wrong_format):
            program.release()
        private_context.check_error("program binaries")


def test_model_digest_is_the_files_sha256(mediapipe_models):
    from gles_delegate.graph import Graph
    from gles_delegate.tflite import read_model
    data = Path(mediapipe_models[SMALL]).read_bytes()
    expected = hashlib.sha256(data).hexdigest()
    for background in (False, True):
        model = read_model(data, background_digest=background)
        assert model.digest == expected and Graph.from_model(model).model_digest == expected
    assert Graph([], [], [], []).model_digest is None


def test_the_interpreter_hashes_the_model_while_parsing_only_for_a_cache(mediapipe_models, tmp_path):
    """With a serialization_dir the model's sha256 starts in a thread as the file is read (the
    cache needs it); without one nothing hashes the model."""
    path = mediapipe_models[SMALL]
    with GpuDelegate() as plain, GpuDelegate(serialization_dir=str(tmp_path)) as caching:
        assert Interpreter(path, experimental_delegates=[plain])._model.digest_job is None
        assert Interpreter(path, experimental_delegates=[caching])._model.digest_job is not None


def half_weight_model(sparse=False):
    """x [1, 6, 6, 4] -> CONV_2D whose filter is an fp16 constant through DEQUANTIZE (as TFLite's
    float16 quantization writes it); sparse: the fp16 filter stored sparse, through DENSIFY
    first (as MediaPipe's sparse models do)."""
    from gles_delegate.tflite import ModelBuilder
    from tests.ops.test_quantize import encode_sparse, random_sparse
    b = ModelBuilder()
    x = b.input("x", (1, 6, 6, 4))
    rng = np.random.default_rng(3)
    if sparse:
        dense = random_sparse(rng, (8, 3, 3, 4), np.float16)
        values, sparsity = encode_sparse(dense, (0, 1, 2, 3), ("DENSE", "SPARSE_CSR", "DENSE", "DENSE"))
        stored = b.tensor("w16_sparse", (8, 3, 3, 4), np.float16, data=values, sparsity=sparsity)
        half = b.tensor("w16", (8, 3, 3, 4), np.float16)
        b.op("DENSIFY", [stored], [half])
    else:
        half = b.const("w16", (rng.standard_normal((8, 3, 3, 4)) * 0.3).astype(np.float16))
    weights = b.tensor("w", (8, 3, 3, 4))
    bias = b.const("b", np.linspace(-1, 1, 8).astype(np.float32))
    out = b.tensor("y", (1, 6, 6, 8))
    b.op("DEQUANTIZE", [half], [weights])
    b.op("CONV_2D", [x, weights, bias], [out], padding=0, stride_w=1, stride_h=1, fused_activation_function=0)
    b.output(out)
    return b.build()


@pytest.mark.parametrize("sparse", [False, True])
def test_a_warm_start_never_unpacks_half_or_sparse_weights(tmp_path, sparse):
    """fp16 weights fold into float32 lazily, and sparse ones densify lazily: the cold start
    computes them (the GPU kernels pack them), a warm start from the entry never does, and both
    give the same output bytes."""
    path = tmp_path / "weights.tflite"
    path.write_bytes(half_weight_model(sparse))
    names = ("w", "w16") if sparse else ("w",)  # the outputs of the folds
    cold, _, cold_out = start(str(path), tmp_path / "cache")
    folded = [t for t in cold._main.graph.tensors if t.name in names]
    assert len(folded) == len(names) and all(t.is_const for t in folded) and not any(t.is_deferred for t in folded)
    warm, delegate, warm_out = start(str(path), tmp_path / "cache")
    assert delegate.summary()["cache_hit"]
    folded = [t for t in warm._main.graph.tensors if t.name in names]
    assert len(folded) == len(names) and all(t.is_deferred for t in folded)
    np.testing.assert_array_equal(warm_out[0], cold_out[0])
    # Read (get_tensor), it is the dequantized filter.
    weights = next(t for t in folded if t.name == "w")
    np.testing.assert_array_equal(warm.get_tensor(weights.index), weights.data)
    assert not any(t.is_deferred for t in folded) and weights.data.dtype == np.float32


def test_sources_without_a_binary_compile_at_once(cold, private_context, monkeypatch):
    """A partition made without binaries (what a warm start does on a driver that gives none)
    starts every program's compile before it waits for any (GlContext.start_programs), and
    runs as the cold start did."""
    started = []
    start = gl.Program.start

    def recorded(gl_functions, sources, *args, **kwargs):
        started.append(list(sources))
        return start(gl_functions, sources, *args, **kwargs)
    monkeypatch.setattr(gl.Program, "start", recorded)
    interpreter, delegate, outputs = cold[0], cold[1], cold[2]
    made = [GpuPartition(private_context, p.plan, p.nodes, view=p.view, fused_away=p.fused_away)
            for p in delegate.partitions]
    try:
        sources = list(dict.fromkeys(s for p in made for s in p.plan.sources))
        assert started and started[0] == list(dict.fromkeys(made[0].plan.sources))
        assert sorted(s for batch in started for s in batch) == sorted(sources)
        for got, expected in zip(run_partitions(made, interpreter), outputs):
            np.testing.assert_array_equal(got, expected)
    finally:
        for partition in made:
            partition.release()


def test_the_mac_covers_every_chunk_and_the_length(monkeypatch):
    monkeypatch.setattr(entry, "CHUNK_BYTES", 64)
    key, payload = bytes(32), bytes(range(256)) * 3
    mac = entry.payload_mac(key, payload)
    assert mac != entry.payload_mac(bytes([1]) + key[1:], payload)
    for position in (0, 63, 64, 700, len(payload) - 1):
        changed = bytearray(payload)
        changed[position] ^= 1
        assert entry.payload_mac(key, bytes(changed)) != mac, position
    assert entry.payload_mac(key, payload + bytes(64)) != mac

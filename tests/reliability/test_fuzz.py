"""Hostile model files: only ModelError / ValueError may come out of Interpreter(model_content=...),
allocate_tensors() and invoke(), without a delegate and with the GpuDelegate; no other exception,
no hang (a per-case time limit), and reading allocates at most the reader's budget.

A bounded run of tools/fuzz_models.py's mutators (byte flips, truncations, field-aware edits
located by recording every access the flatbuffer bindings make, semantic edits written back
with our writer); `gles-fuzz` runs them for as long as you like in worker processes under
RLIMIT_AS (docs/reliability.md has its figures).
"""
import contextlib
import signal
import threading
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gles_delegate import GpuDelegate, ModelError
from gles_delegate.graph import Graph
from gles_delegate.tflite import read_model
from gles_delegate.tflite.limits import WORK_BASE, WORK_PER_BYTE
from gles_delegate.tools import fuzz_models as fm

REAL = ("selfie_segmentation", "face_detection_short_range", "hand_recrop", "pose_detection")
CASE_SECONDS = 30
FUZZ = settings(deadline=None, derandomize=True, database=None, print_blob=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


class CaseTimeout(Exception):
    pass


@contextlib.contextmanager
def time_limit(seconds):
    """Raise CaseTimeout in this (main) thread after `seconds` (no limit off the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum, frame):
        raise CaseTimeout(f"case ran past {seconds} s")
    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture(scope="module")
def real_seeds(mediapipe_models):
    return [fm.Seed(name, mediapipe_models[name].read_bytes()) for name in REAL]


@pytest.fixture(scope="module")
def small_seeds():
    return [fm.Seed(name, data) for name, data in fm.small_models().items()]


def check_case(data, what, use_gpu, cpu_backend="auto"):
    with time_limit(CASE_SECONDS):
        outcome = fm.run_case(data, GpuDelegate if use_gpu else None, cpu_backend=cpu_backend)
    assert outcome.result != "bug", f"{what} ({'gpu' if use_gpu else 'cpu'}, {cpu_backend}): {outcome.error}"


def check_cases(data, what):
    """The CPU on the reference (the package's guarantee) and on LiteRT's kernels ('auto': those
    of the nodes the reference's checks accept), and the GPU."""
    check_case(data, what, use_gpu=False, cpu_backend="reference")
    check_case(data, what, use_gpu=False)
    check_case(data, what, use_gpu=True)


@settings(FUZZ, max_examples=70)
@given(pick=st.integers(0, len(REAL) - 1), kind=st.sampled_from(("flip", "truncate", "field", "field")),
       rng=st.randoms(use_true_random=False))
def test_reader_only_raises_model_error_and_stays_in_budget(real_seeds, pick, kind, rng):
    seed = real_seeds[pick]
    data, what, _ = seed.mutate(rng, kind)
    tracemalloc.start()
    try:
        with time_limit(CASE_SECONDS):
            try:
                model = read_model(data)
                for s in range(len(model.subgraphs)):
                    Graph.from_model(model, s)
            except ModelError:
                pass
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # The reader's own budget, plus the tuples of a graph (which the budget also bounds).
    assert peak <= 2 * (WORK_PER_BYTE * len(data) + WORK_BASE), f"{what}: peak {peak} bytes"


@settings(FUZZ, max_examples=250)
@given(pick=st.integers(0, 5), rng=st.randoms(use_true_random=False))
def test_small_models_only_raise_value_errors(small_seeds, pick, rng):
    seed = small_seeds[pick % len(small_seeds)]
    data, what, _ = seed.mutate(rng)
    if data is None:
        return
    check_cases(data, what)


@settings(FUZZ, max_examples=8)
@given(pick=st.sampled_from((1, 2)), kind=st.sampled_from(("field", "semantic")),
       rng=st.randoms(use_true_random=False))
def test_real_models_only_raise_value_errors(real_seeds, pick, kind, rng):
    seed = real_seeds[pick]  # the two fastest to invoke
    data, what, _ = seed.mutate(rng, kind)
    if data is None:
        return
    check_cases(data, what)


def test_worker_pool_records_a_timeout_and_recovers():
    """gles-fuzz's worker: a run past its limit is killed and recorded, the next one gets a
    fresh worker (under RLIMIT_AS) and runs."""
    data = fm.small_models()["convnet"]
    pool = fm._Pool(memory_mb=8192)
    try:
        assert pool.run(data, False, 0, timeout=1e-4)[0] == "timeout"
        result, outcome, growth, declared = pool.run(data, False, 0, timeout=60)
        assert result == "ok", outcome
        assert declared > len(data) and (growth is None or growth < fm.MEMORY_SLACK)
    finally:
        pool.stop()

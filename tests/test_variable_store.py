"""variable_store.VariableStore: one holder per variable; a download only when the CPU side reads
what a GPU holder assigned, an upload (is_current False) only after the CPU side or another
holder changed it."""
import numpy as np

from gles_delegate.variable_store import VariableStore


class Holder:
    """A GPU holder stand-in: its copy of each variable, and how often the store downloaded it."""

    def __init__(self):
        self.values, self.downloads = {}, 0

    def download(self, rid):
        self.downloads += 1
        return self.values[rid].copy()

    def describe(self, rid):
        return self.values[rid].shape, self.values[rid].dtype

    def run(self, store, rid, value):
        """A run that reads the variable (uploading it if stale) and assigns `value`."""
        if not store.is_current(rid, self):
            self.values[rid] = store.read(rid).copy()
            store.uploaded(rid, self)
        self.values[rid] = np.asarray(value, np.float32)
        store.assigned(rid, self)


def test_a_value_assigned_on_the_gpu_is_downloaded_once_when_the_cpu_reads_it():
    store, gpu = VariableStore(), Holder()
    store.assign(0, np.zeros(3, np.float32))
    for step in range(1, 4):
        gpu.run(store, 0, np.full(3, step))
    assert gpu.downloads == 0 and store.describe(0) == ((3,), np.float32)
    np.testing.assert_array_equal(store.read(0), np.full(3, 3.0))
    np.testing.assert_array_equal(store.read(0), np.full(3, 3.0))
    assert gpu.downloads == 1
    assert store.is_current(0, gpu)  # reading changed nothing: no upload before its next run


def test_a_cpu_write_makes_every_gpu_copy_stale():
    store, gpu = VariableStore(), Holder()
    store.assign(0, np.zeros(2, np.float32))
    gpu.run(store, 0, [1, 1])
    store.assign(0, np.full(2, 7, np.float32))
    assert not store.is_current(0, gpu)
    np.testing.assert_array_equal(store.read(0), [7, 7])
    assert gpu.downloads == 0


def test_a_second_holder_gets_the_latest_value_through_the_cpu():
    store, first, second = VariableStore(), Holder(), Holder()
    store.assign(0, np.zeros(2, np.float32))
    first.run(store, 0, [5, 6])
    assert not store.is_current(0, second)
    second.run(store, 0, [8, 9])  # uploads what `first` assigned
    assert first.downloads == 1 and not store.is_current(0, first)
    np.testing.assert_array_equal(store.read(0), [8, 9])


def test_a_failed_run_leaves_the_value_before_it():
    store, gpu = VariableStore(), Holder()
    store.assign(0, np.zeros(2, np.float32))
    gpu.run(store, 0, [1, 2])
    store.read(0)
    gpu.values[0] = np.full(2, np.nan, np.float32)  # the run wrote part of its assignment, then failed
    store.assigned(0, gpu)
    store.forget(0, gpu)
    assert not store.is_current(0, gpu)
    np.testing.assert_array_equal(store.read(0), [1, 2])


def test_a_holder_that_goes_away_hands_its_values_to_the_cpu():
    store, gpu = VariableStore(), Holder()
    store.assign(0, np.zeros(2, np.float32))
    store.assign(1, np.zeros(2, np.float32))
    gpu.run(store, 0, [3, 4])
    gpu.run(store, 1, [5, 6])
    store.read(1)
    store.release(gpu, [0, 1])
    assert gpu.downloads == 2  # variable 1 once when read, variable 0 when released
    assert not store.is_current(0, gpu) and not store.is_current(1, gpu)
    np.testing.assert_array_equal(store.read(0), [3, 4])


def test_unknown_variables():
    store = VariableStore()
    assert store.read(3) is None and store.describe(3) is None and not store.is_current(3, Holder())

"""raw_memory: numpy arrays over memory at an address, made without a ctypes type per length."""
import gc
import sys
import weakref

import numpy as np

from gles_delegate.raw_memory import RawMemory, array_at
from tests.refcount import collector_disabled


def test_array_at_reads_and_writes_the_memory_at_the_address():
    block = np.arange(16, dtype=np.float32)
    view = array_at(block.ctypes.data + 2 * block.itemsize, (2, 3), np.float32)
    np.testing.assert_array_equal(view, block[2:8].reshape(2, 3))
    view[1, 2] = -1
    assert block[7] == -1 and view.flags.writeable


def test_array_at_takes_a_record_dtype():
    """As litert/verify.py reads LiteRT's tensor structs: fields at offsets in a larger item."""
    record = np.dtype({"names": ["a", "b"], "formats": [np.int32, np.int64], "offsets": [0, 8], "itemsize": 24})
    block = np.zeros(3, record)
    block["b"] = [5, 6, 7]
    np.testing.assert_array_equal(array_at(block.ctypes.data, (3,), record)["b"], [5, 6, 7])


def test_raw_memory_counts_the_arrays_made_from_it_and_keeps_its_owner():
    """Interpreter.tensor()'s views are made from one RawMemory, whose reference count says
    whether the user holds one; the memory's owner lives as long as they do."""
    owner = np.zeros(64, np.uint8)
    memory, owner_alive = RawMemory(owner.ctypes.data, owner.size, owner=owner), weakref.ref(owner)
    alone = sys.getrefcount(memory)
    view = np.ndarray((4,), np.float32, np.asarray(memory), 16)
    derived = view[1:]
    del view, owner
    assert sys.getrefcount(memory) > alone and owner_alive() is not None
    derived[:] = 2
    assert np.asarray(memory)[20:24].view(np.float32)[0] == 2
    del derived
    assert sys.getrefcount(memory) == alone


def test_arrays_of_any_length_leave_nothing_for_the_collector():
    """`(ctypes.c_uint8 * n).from_address(a)` made a ctypes type per new n, a reference cycle
    once dropped (5 objects, about 3 KB, each)."""
    block = np.zeros(256, np.uint8)
    gc.collect()
    with collector_disabled():
        for length in range(1, 101):
            array_at(block.ctypes.data, (length,), np.uint8)
        assert gc.collect() == 0

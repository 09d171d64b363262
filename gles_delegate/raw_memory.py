"""numpy arrays over memory at an address (a mapped GL buffer, LiteRT's tensors, the host block
Interpreter.tensor() views), made without a ctypes array type.

`(ctypes.c_uint8 * n).from_address(address)` makes a new ctypes type for every length n no live
object has (ctypes caches them weakly), and a type is a reference cycle (its __dict__ and
descriptors refer back to it): each one dropped, about 3 KB, waits for the cyclic collector,
and a dropped interpreter left a few (docs/reliability.md, "scaling"). numpy's array interface
takes the address itself.
"""
import numpy as np


class RawMemory:
    """The `nbytes` bytes at `address` as numpy sees them: np.asarray(m) is a writable uint8
    array [nbytes] based on m, so m's reference count says whether arrays made from it live.
    `owner`: what owns the memory, kept alive with m (None: the caller keeps it valid)."""
    __slots__ = ("__array_interface__", "owner")

    def __init__(self, address, nbytes, owner=None):
        self.__array_interface__ = {"data": (address, False), "shape": (nbytes,), "typestr": "|u1", "version": 3}
        self.owner = owner


def array_at(address, shape, dtype):
    """A writable array of `shape` (a tuple) and `dtype` over the bytes at `address`, which the
    caller keeps valid while the array is used."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    return np.asarray(RawMemory(address, nbytes)).view(dtype).reshape(shape)

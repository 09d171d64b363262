"""Reading a whole file into private anonymous memory: how the .tflite reader reads a large model
and the serialization cache reads an entry.

Neither file is mapped itself (as TFLite maps its model): a page that a truncation in place
(`cp` over the file) removed kills the process with SIGBUS when it is read. The cost of the copy
is mostly the first touch of fresh memory, one page fault per 4 KiB page, which in a fresh
process on a virtual machine costs more than the copy itself. Huge pages make that one fault per
2 MiB: they are asked for where the kernel grants them on request
(/sys/kernel/mm/transparent_hugepage/enabled is 'always' or 'madvise'); elsewhere the pages are
populated up front (MAP_POPULATE). On the H200 machine a warm start of ssd_mnv2_300 read its
25.9 MB entry in 8.1-9.8 ms this way against 14.2 ms populated (`gles-bench-init --phases`,
docs/performance.md, round 13).
"""
import mmap
import os

_THP_SETTING = "/sys/kernel/mm/transparent_hugepage/enabled"
_huge_pages = None  # whether MADV_HUGEPAGE is granted here: read once a process


def huge_pages_granted():
    """Whether anonymous memory advised with MADV_HUGEPAGE gets transparent huge pages here."""
    global _huge_pages
    if _huge_pages is None:
        try:
            with open(_THP_SETTING) as f:
                setting = f.read()
        except OSError:
            setting = ""
        _huge_pages = hasattr(mmap, "MADV_HUGEPAGE") and ("[always]" in setting or "[madvise]" in setting)
    return _huge_pages


def private_memory(size):
    """A private, writable anonymous mmap of `size` (> 0) bytes whose pages cost the fewest faults
    to fill: advised for huge pages where they are granted, else populated at once."""
    if huge_pages_granted():
        memory = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        try:
            memory.madvise(mmap.MADV_HUGEPAGE)
        except OSError:  # refused (a sandbox's syscall filter): small pages, faulted as touched
            pass
        return memory
    return mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(mmap, "MAP_POPULATE", 0))


def read_private(fd, size):
    """(memory, count): the next `size` (> 0) bytes of the open file `fd` read into
    private_memory(size); count < size when the file ended first. OSError as os.readv raises it."""
    memory = private_memory(size)
    count = 0
    with memoryview(memory) as view:
        while count < size:
            read = os.readv(fd, [view[count:]])
            if read == 0:
                break
            count += read
    return memory, count

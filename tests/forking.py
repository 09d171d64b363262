"""Checking what a forked child sees."""
import os


def in_forked_child(check):
    """Call `check()` in a child made by os.fork() and return its truth value as the parent gets
    it (a pipe); the child leaves at once with os._exit, so no test teardown or atexit handler
    runs twice. An exception in the child counts as False."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            ok = bool(check())
        except BaseException:  # noqa: BLE001 - the child reports, it never unwinds into pytest
            ok = False
        os.write(write, b"1" if ok else b"0")
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        answer = pipe.read()
    os.waitpid(pid, 0)
    return answer == b"1"

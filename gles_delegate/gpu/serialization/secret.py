"""The key that authenticates serialization entries: 32 random bytes of this user's, kept outside
every serialization_dir (in $XDG_CONFIG_HOME/gles_delegate, else ~/.config/gles_delegate),
made on first use. An entry's prefix holds an HMAC-SHA256 of its payload under this key
(entry.payload_mac), so only this user's delegate can have written an entry it loads: whoever can write
a serialization_dir (a cache restored from elsewhere, a forged file with its checksum
recomputed) cannot make the delegate load weights, dispatch sizes or parameters the model does
not define without also holding this file. Checking an entry against the model instead
(rewriting the graph, building the kernels and packing the weights again) costs what a cold
start costs without its shader compiles: 0.1 to 1.2 s on the development machine, against
warm partition() calls of 13-93 ms (docs/reliability.md, issue 40).
"""
import os
import stat
import tempfile
import threading

from .entry import EntryError

KEY_BYTES = 32
KEY_NAME = "entry.key"

_keys = {}  # path -> key: read once a process
_lock = threading.Lock()


def key_path():
    """Where the key lives: $XDG_CONFIG_HOME/gles_delegate/entry.key, else under ~/.config."""
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "gles_delegate", KEY_NAME)


def entry_key():
    """This user's key (bytes), made if there is none yet; EntryError saying why it cannot be had
    (a file that is not ours alone, of another size, a directory we cannot write)."""
    path = key_path()
    with _lock:
        if path not in _keys:
            _keys[path] = _read_or_make(path)
        return _keys[path]


def _read_or_make(path):
    """The key at `path`, made first when there is none: written to a temp file, then linked to
    its name (os.link fails if another process linked one first: that one is read)."""
    folder = os.path.dirname(path)
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        if not os.path.exists(path):
            fd, temp = tempfile.mkstemp(prefix=".key-", dir=folder)  # mode 0600
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(os.urandom(KEY_BYTES))
                    f.flush()
                    os.fsync(f.fileno())
                try:
                    os.link(temp, path)
                except FileExistsError:
                    pass
            finally:
                os.unlink(temp)
    except OSError as exc:
        raise EntryError(f"cannot make the entry key {path} ({exc.strerror or exc})") from None
    return _read(path)


def _read(path):
    """The key at `path`, which must be a regular file of KEY_BYTES that only this user can read
    or write."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise EntryError(f"cannot read the entry key {path} ({exc.strerror or exc})") from None
    try:
        st = os.fstat(fd)
        uid = os.getuid() if hasattr(os, "getuid") else st.st_uid
        if not stat.S_ISREG(st.st_mode) or st.st_uid != uid or st.st_mode & 0o077:
            raise EntryError(f"the entry key {path} is not a file of this user's alone (uid {st.st_uid}, mode "
                             f"{stat.S_IMODE(st.st_mode):o})")
        key = os.read(fd, KEY_BYTES + 1)
    finally:
        os.close(fd)
    if len(key) != KEY_BYTES:
        raise EntryError(f"the entry key {path} does not hold {KEY_BYTES} bytes")
    return key

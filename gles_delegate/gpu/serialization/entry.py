"""The entry file format, and reading and writing entry files safely.

    prefix   magic b"GLESDLGC", u32 format version, u32 header length, u64 payload length,
             MAC of the payload under this user's key (payload_mac, secret.py) (little endian)
    payload  the header (UTF-8 JSON), zero padding to 64 bytes, then the blobs, each 64-aligned:
             raw bytes (Plan.params, program binaries) and numpy arrays (Plan.constants, ...)

Files: the directory is created 0700; entries are written to a temp file in the same
directory and renamed over the old one (os.replace: readers see the old or the new file, never
a mix, and concurrent writers just race to the last rename). An entry that is not a regular
file, is owned by another user or is writable by others is refused. The HMAC catches
corruption and forgery: an entry whose HMAC is not this user's key's (edited, corrupt, made
elsewhere) is refused before anything in it reaches the driver or a buffer.
"""
import hashlib
import hmac
import json
import os
import stat
import struct
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from ...private_read import read_private

MAGIC = b"GLESDLGC"
FORMAT_VERSION = 4  # 3: long strings (GLSL sources) are UTF-8 blobs; 4: an HMAC, not a CRC-32
PREFIX = struct.Struct("<8sIIQ32s")
SUFFIX = ".gdcache"
BLOB_ALIGN = 64                    # bytes; every blob starts at a multiple of it
MAX_HEADER_BYTES = 256 << 20
MAX_BLOB_COUNT = 1 << 20
BACKGROUND_CHECK_BYTES = 1 << 20   # smaller entries are checked in the calling thread
DIGEST = "sha256"
CHUNK_BYTES = 4 << 20              # an entry's payload hashes in chunks of this size (payload_mac)
HASH_THREADS = max(1, min(4, os.cpu_count() or 1))


class EntryError(Exception):
    """Why an entry cannot be used (the cache turns it into a CacheWarning)."""


def pack_entry(header, blobs, key):
    """(list of byte pieces to write in order, total size in bytes) of an entry; `header` is a
    JSON-able dict, blobs a codec.Blobs, key this user's (secret.entry_key). Blob offsets are
    added to the header as header['blobs']."""
    spans, offset = [], 0
    for item in blobs.items:
        spans.append([offset, len(item)])
        offset += -(-len(item) // BLOB_ALIGN) * BLOB_ALIGN
    header = {**header, "blobs": spans}
    text = json.dumps(header, separators=(",", ":"), allow_nan=False).encode()
    pieces = [text, b"\0" * (-(PREFIX.size + len(text)) % BLOB_ALIGN)]
    for item in blobs.items:
        pieces += [item, b"\0" * (-len(item) % BLOB_ALIGN)]
    payload = b"".join(pieces)
    prefix = PREFIX.pack(MAGIC, FORMAT_VERSION, len(text), len(payload), payload_mac(key, payload))
    return [prefix, payload], PREFIX.size + len(payload)


def unpack_entry(data, key=None):
    """(header dict, list of blob memoryviews) of an entry's bytes; EntryError if anything is off.
    With `key`, the payload's HMAC is checked first; without, the caller runs a PayloadCheck,
    and must not hand the driver anything from the entry before it passes (the header's decoding
    is safe without it: it checks every value it reads)."""
    view = memoryview(data)
    if len(view) < PREFIX.size:
        raise EntryError(f"truncated: {len(view)} bytes")
    magic, version, header_bytes, payload_bytes, _ = PREFIX.unpack_from(view)
    if magic != MAGIC:
        raise EntryError("not a gles_delegate cache entry (bad magic)")
    if version != FORMAT_VERSION:
        raise EntryError(f"entry format {version}, this version reads format {FORMAT_VERSION}")
    if payload_bytes != len(view) - PREFIX.size:
        raise EntryError(f"truncated or padded: payload of {len(view) - PREFIX.size} bytes, "
                         f"the prefix says {payload_bytes}")
    if header_bytes > min(payload_bytes, MAX_HEADER_BYTES):
        raise EntryError(f"header length {header_bytes} does not fit the entry")
    if key is not None:
        PayloadCheck(data, key, background=False).wait()
    try:
        header = json.loads(bytes(view[PREFIX.size:PREFIX.size + header_bytes]))
    except (ValueError, RecursionError) as exc:
        raise EntryError(f"header is not JSON: {exc}") from None
    if not isinstance(header, dict):
        raise EntryError("header is not a JSON object")
    start = PREFIX.size + header_bytes + (-(PREFIX.size + header_bytes) % BLOB_ALIGN)
    return header, _blob_views(view, start, header.get("blobs"))


def _blob_views(view, start, spans):
    """Memoryviews of the blobs that `spans` ([offset, length] from `start`) name in `view`."""
    if not isinstance(spans, list) or len(spans) > MAX_BLOB_COUNT:
        raise EntryError("malformed blob table")
    blobs = []
    for span in spans:
        if not (isinstance(span, list) and len(span) == 2
                and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in span)):
            raise EntryError(f"malformed blob span {span!r}")
        offset, length = span
        if start + offset + length > len(view):
            raise EntryError(f"blob [{offset}, +{length}) is beyond the end of the entry")
        blobs.append(view[start + offset:start + offset + length])
    return blobs


def payload_mac(key, payload):
    """The MAC of an entry's payload: HMAC-SHA256 under `key` of its length and of the SHA-256 of
    each of its CHUNK_BYTES chunks in turn (a hash tree of one level, as secure as SHA-256 is
    collision resistant: the chunks hash in parallel threads, hashlib releasing the GIL, where
    one HMAC over the whole of a 45 MB entry took 88 ms here, twice the CRC-32 it replaced)."""
    view = memoryview(payload)
    chunks = [view[k:k + CHUNK_BYTES] for k in range(0, len(view), CHUNK_BYTES)]
    if len(chunks) > 1:
        with ThreadPoolExecutor(min(len(chunks), HASH_THREADS), thread_name_prefix="gles_delegate entry hash") as pool:
            digests = list(pool.map(_sha256, chunks))
    else:
        digests = [_sha256(c) for c in chunks]
    return hmac.new(key, len(view).to_bytes(8, "little") + b"".join(digests), DIGEST).digest()


def _sha256(data):
    return hashlib.sha256(data).digest()


class PayloadCheck:
    """An entry's MAC under `key` (payload_mac), computed in a thread when the entry is large
    (hashlib releases the GIL: the constants upload runs meanwhile); wait() raises EntryError on
    a mismatch. Call it with the bytes unpack_entry accepted (their prefix is well-formed)."""

    def __init__(self, data, key, background=True):
        self._payload, self._expected = memoryview(data)[PREFIX.size:], PREFIX.unpack_from(data)[4]
        self._key, self._mac, self._thread = key, None, None
        if background and len(self._payload) >= BACKGROUND_CHECK_BYTES:
            self._thread = threading.Thread(target=self._compute, name="gles_delegate entry check", daemon=True)
            self._thread.start()

    def _compute(self):
        self._mac = payload_mac(self._key, self._payload)

    def wait(self):
        if self._thread is not None:
            self._thread.join()
        if self._mac is None:
            self._compute()
        if not hmac.compare_digest(self._mac, self._expected):
            raise EntryError("its HMAC is not this user's key's (a corrupt or edited entry, or one made elsewhere)")


def read_entry(path, max_bytes):
    """The bytes of the entry at `path` (a private copy: see read_file), or None when there is
    none; EntryError when it must be ignored (not a regular file, another owner, writable by
    others, over max_bytes)."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise EntryError(f"cannot open it ({exc.strerror})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise EntryError("not a regular file")
        uid = os.getuid() if hasattr(os, "getuid") else st.st_uid
        if st.st_uid != uid:
            raise EntryError(f"owned by uid {st.st_uid}, not by this user ({uid})")
        if st.st_mode & (stat.S_IWOTH | stat.S_IWGRP):
            raise EntryError(f"writable by others (mode {stat.S_IMODE(st.st_mode):o})")
        if st.st_size > max_bytes:
            raise EntryError(f"{st.st_size} bytes, more than an entry of this model can hold ({max_bytes})")
        return read_file(fd, st.st_size)
    finally:
        os.close(fd)


def read_file(fd, size):
    """The first `size` bytes of the file `fd`, read into private anonymous memory
    (private_read.read_private: why not a map of the file, and how its pages are filled).
    EntryError when the file is shorter than `size` now: it changed under us; a change that
    keeps the size is caught by the HMAC, which is computed on this private copy."""
    if size == 0:
        return b""
    try:
        data, count = read_private(fd, size)
    except OSError as exc:
        raise EntryError(f"cannot read it ({exc.strerror})") from None
    if count < size:
        raise EntryError(f"changed while it was read: {count} of {size} bytes")
    return data


def write_atomic(directory, path, pieces):
    """Write pieces to a temp file in `directory` and rename it to `path` (OSError on failure)."""
    os.makedirs(directory, mode=0o700, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=".tmp-", suffix=SUFFIX, dir=directory)  # mode 0600
    try:
        with os.fdopen(fd, "wb") as f:
            for piece in pieces:
                f.write(piece)
        os.replace(temp, path)
    except BaseException:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise
    remove_stale_temps(directory)


def remove_stale_temps(directory, age_s=3600):
    """Temp files a killed writer left behind (ours: same prefix and suffix, over age_s seconds old)."""
    now = time.time()
    try:
        for item in os.scandir(directory):
            if item.name.startswith(".tmp-") and item.name.endswith(SUFFIX) \
                    and item.is_file(follow_symlinks=False) and now - item.stat().st_mtime > age_s:
                os.unlink(item.path)
    except OSError:
        pass

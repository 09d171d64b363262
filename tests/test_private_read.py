"""private_read: a file read into private anonymous memory, with huge pages advised or with its
pages populated up front, holds the file's bytes; a file shorter than asked reports its count."""
import os

import pytest

from gles_delegate import private_read


@pytest.fixture(params=[True, False], ids=["huge-pages", "populated"])
def granted(request, monkeypatch):
    if request.param and not hasattr(private_read.mmap, "MADV_HUGEPAGE"):
        pytest.skip("this Python has no MADV_HUGEPAGE")
    monkeypatch.setattr(private_read, "_huge_pages", request.param)
    return request.param


def test_reads_the_whole_file(granted, tmp_path):
    data = os.urandom((3 << 20) + 123)  # more than one huge page, not a multiple of a page
    path = tmp_path / "blob"
    path.write_bytes(data)
    with open(path, "rb") as f:
        memory, count = private_read.read_private(f.fileno(), len(data))
    assert count == len(data) and bytes(memory) == data
    memory[0] = memory[0] ^ 1  # private and writable: the file does not change
    assert path.read_bytes() == data


def test_a_short_file_reports_what_it_held(granted, tmp_path):
    path = tmp_path / "blob"
    path.write_bytes(b"x" * 5000)
    with open(path, "rb") as f:
        memory, count = private_read.read_private(f.fileno(), 9000)
    assert count == 5000 and bytes(memory[:5000]) == b"x" * 5000


def test_the_setting_is_read_from_the_kernel(monkeypatch, tmp_path):
    for text, expected in [("always [madvise] never\n", True), ("[always] madvise never\n", True),
                           ("always madvise [never]\n", False)]:
        setting = tmp_path / "enabled"
        setting.write_text(text)
        monkeypatch.setattr(private_read, "_THP_SETTING", str(setting))
        monkeypatch.setattr(private_read, "_huge_pages", None)
        assert private_read.huge_pages_granted() is (expected and hasattr(private_read.mmap, "MADV_HUGEPAGE"))
    monkeypatch.setattr(private_read, "_THP_SETTING", str(tmp_path / "missing"))
    monkeypatch.setattr(private_read, "_huge_pages", None)
    assert private_read.huge_pages_granted() is False


def test_a_refused_advice_still_reads(monkeypatch, tmp_path):
    """madvise refused (a syscall filter): the memory is still usable, with small pages."""
    if not hasattr(private_read.mmap, "MADV_HUGEPAGE"):
        pytest.skip("this Python has no MADV_HUGEPAGE")
    monkeypatch.setattr(private_read, "_huge_pages", True)

    class Refusing(private_read.mmap.mmap):
        def madvise(self, *args):
            raise PermissionError(1, "Operation not permitted")
    monkeypatch.setattr(private_read.mmap, "mmap", Refusing)
    data = os.urandom(5 << 20)
    path = tmp_path / "blob"
    path.write_bytes(data)
    with open(path, "rb") as f:
        memory, count = private_read.read_private(f.fileno(), len(data))
    assert isinstance(memory, Refusing) and count == len(data) and bytes(memory) == data

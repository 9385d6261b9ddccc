"""A job's files as they travel to an API server (primus/client/uploads.py): read on the
submitting machine, checked and staged by the server."""

from __future__ import annotations

import os

import pytest

from primus.client.uploads import Upload, check_uploads, read_job_files, staged
from primus.config.loader import SpecError


def test_a_file_is_sent_by_its_name_and_a_directory_file_by_file_with_their_modes(tmp_path):
    (tmp_path / "train.py").write_text("print(1)\n")
    (tmp_path / "train.py").chmod(0o755)
    (tmp_path / "lib" / "sub").mkdir(parents=True)
    (tmp_path / "lib" / "a.py").write_bytes(b"a")
    (tmp_path / "lib" / "sub" / "b.bin").write_bytes(b"\0\1")

    uploads = read_job_files("job.yaml", [str(tmp_path / "train.py"), str(tmp_path / "lib")])

    assert uploads == [Upload("train.py", b"print(1)\n", 0o755), Upload("lib/a.py", b"a"),
                       Upload("lib/sub/b.bin", b"\0\1")]


def test_a_link_inside_a_directory_is_refused_naming_it(tmp_path):
    (tmp_path / "lib").mkdir()
    os.symlink("/etc/passwd", tmp_path / "lib" / "passwd")
    with pytest.raises(SpecError) as refused:
        read_job_files("job.yaml", [str(tmp_path / "lib")])
    assert f"job.yaml: files[0]: got '{tmp_path / 'lib'}'" in str(refused.value)
    assert f"{tmp_path / 'lib' / 'passwd'} is not a regular file" in str(refused.value)


def test_files_past_the_limit_are_refused_at_the_file_that_passes_it(tmp_path):
    for name in ("a", "b", "c"):
        (tmp_path / name).write_bytes(b"x" * 40)
    with pytest.raises(SpecError) as refused:
        read_job_files("job.yaml", [str(tmp_path / n) for n in "abc"], limit=100)
    assert "files[2]" in str(refused.value) and f"at {tmp_path / 'c'}" in str(refused.value)


def test_uploads_that_are_exactly_the_jobs_files_pass():
    check_uploads("job.yaml", ["/home/ana/train.py", "lib/"],
                  [Upload("train.py", b""), Upload("lib/a.py", b""), Upload("lib/s/b", b"")])


@pytest.mark.parametrize(("files", "uploads", "words"), [
    (["train.py"], [], "job.yaml: files[0]: got 'train.py'; its content is not in the request"),
    ([], [Upload("x.py", b"")], "request: files[0].path: got 'x.py'; no entry of the job's"),
    (["x"], [Upload("../x", b"")], "files[0].path: got '../x'; must be a relative path without"),
    (["x"], [Upload("/x", b"")], "must be a relative path without"),
    (["x"], [Upload("x//y", b"")], "must be a relative path without"),
    (["x"], [Upload("", b"")], "must be a relative path of 1 to 4096 bytes"),
    (["x"], [Upload("x", b""), Upload("x", b"")], "files[1].path: got 'x'; is sent twice"),
    (["x"], [Upload("x", b""), Upload("x/y", b"")], "files[0].path: got 'x'; is a file, and"),
    (["x"], [Upload("x/a", b"123"), Upload("x/b", b"45")],
     "request: files[1].path: got 'x/b'; passes the 4 bytes the files of one submission may"),
])
def test_uploads_that_are_not_exactly_the_jobs_files_are_refused_naming_them(files, uploads,
                                                                             words):
    with pytest.raises(SpecError) as refused:
        check_uploads("job.yaml", files, uploads, limit=4)
    assert words in str(refused.value)


def test_staged_files_are_written_privately_and_removed_afterwards(tmp_path):
    uploads = [Upload("run.sh", b"#!/bin/sh\n", 0o755), Upload("lib/a.py", b"a")]
    with staged(uploads, ["/somewhere/run.sh", "lib"]) as paths:
        root = os.path.dirname(paths[0])
        assert [os.path.relpath(p, root) for p in paths] == ["run.sh", "lib"]
        assert os.stat(root).st_mode & 0o777 == 0o700
        assert os.stat(paths[0]).st_mode & 0o777 == 0o755
        assert open(os.path.join(paths[1], "a.py"), "rb").read() == b"a"
    assert not os.path.exists(root)

"""A job's ``files`` as they travel to an API server: read on the submitting machine, checked
and staged on the server, which reads no file of its own host for them.

The client reads each entry of the job's ``files`` (:func:`read_job_files`): a regular file
is one :class:`Upload` named by its last path component, a directory one per regular file under
it (``<directory name>/<path in it>``). The server checks that the uploads are exactly what the
job names (:func:`check_uploads`) and writes them to a private directory of its own
(:func:`staged`), from which they are copied to the hosts as a local job's files are.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from primus.config.loader import SpecError, SpecProblem
from primus.config.site import DEFAULT_MAX_UPLOAD

MAX_PATH_BYTES = 4096


@dataclass(frozen=True)
class Upload:
    """One file submitted with a job: where it goes in the work directory, its bytes and its
    permission bits."""

    path: str
    content: bytes
    mode: int = 0o644


def read_job_files(job_file: str, files: Sequence[str], limit: int = DEFAULT_MAX_UPLOAD
                   ) -> list[Upload]:
    """The uploads of a job's ``files`` (paths as the loader resolved them).

    Raises:
        SpecError: Naming ``files[i]`` of ``job_file``: an entry is missing, is neither a
            regular file nor a directory, holds something that is not a regular file or a
            directory, cannot be read, or passes ``limit`` bytes in all.
    """
    uploads: list[Upload] = []
    total = 0
    for index, entry in enumerate(files):
        field = f"files[{index}]"
        top = Path(entry)
        try:
            found = [(top, top.name)] if not top.is_dir() or top.is_symlink() else [
                (path, f"{top.name}/{path.relative_to(top).as_posix()}")
                for path in sorted(top.rglob("*")) if not path.is_dir() or path.is_symlink()]
            for path, name in found:
                info = path.lstat()
                if not stat.S_ISREG(info.st_mode):
                    raise SpecError(SpecProblem(job_file, field, entry, (
                        f"{path} is not a regular file (a link, FIFO or device); only regular "
                        f"files and directories of them are sent to the server")))
                total += info.st_size
                if total > limit:
                    raise SpecError(SpecProblem(job_file, field, entry, (
                        f"passes the {limit:,} bytes the files of one submission may hold in "
                        f"all (server.max_upload), at {path}")))
                uploads.append(Upload(name, path.read_bytes(), stat.S_IMODE(info.st_mode)))
        except OSError as exc:
            raise SpecError(SpecProblem(job_file, field, entry, (
                f"cannot be read on the submitting host: {exc.strerror}"))) from exc
    return uploads


def check_uploads(source: str, files: Sequence[str], uploads: Sequence[Upload],
                  limit: int = DEFAULT_MAX_UPLOAD) -> None:
    """Refuse uploads that are not exactly the job's ``files``: a path that is not a plain
    relative one, twice the same path, a job entry none is under, one no job entry names,
    more than ``limit`` bytes in all.

    Raises:
        SpecError: Naming ``files[i]`` (of the request) or ``<source>: files[i]`` (the job).
    """
    problems: list[SpecProblem] = []
    seen: set[str] = set()
    total = 0
    for index, upload in enumerate(uploads):
        field = f"files[{index}].path"
        why = _bad_path(upload.path)
        if why:
            problems.append(SpecProblem("request", field, upload.path[:200], why))
        elif upload.path in seen:
            problems.append(SpecProblem("request", field, upload.path, "is sent twice"))
        seen.add(upload.path)
        total += len(upload.content)
        if total > limit and total - len(upload.content) <= limit:
            problems.append(SpecProblem("request", field, upload.path[:200], (
                f"passes the {limit:,} bytes the files of one submission may hold in all "
                f"(the server's server.max_upload)")))
    directories = {str(parent) for path in seen for parent in PurePosixPath(path).parents}
    problems += [SpecProblem("request", f"files[{index}].path", upload.path, (
        "is a file, and a directory of other files sent"))
        for index, upload in enumerate(uploads) if upload.path in directories]
    names = [os.path.basename(entry.rstrip("/")) for entry in files]
    tops = {PurePosixPath(path).parts[0] for path in seen if not _bad_path(path)}
    problems += [SpecProblem(source, f"files[{index}]", entry, (
        "its content is not in the request: the client sends each file's bytes"))
        for index, (entry, name) in enumerate(zip(files, names, strict=True))
        if name not in tops]
    problems += [SpecProblem("request", f"files[{index}].path", upload.path, (
        "no entry of the job's files names it"))
        for index, upload in enumerate(uploads)
        if not _bad_path(upload.path) and PurePosixPath(upload.path).parts[0] not in names]
    if problems:
        raise SpecError(*problems)


def _bad_path(path: str) -> str:
    """Why ``path`` is no plain relative path in the work directory; empty if it is one."""
    if not path or "\0" in path or len(path.encode(errors="surrogateescape")) > MAX_PATH_BYTES:
        return f"must be a relative path of 1 to {MAX_PATH_BYTES} bytes without NUL"
    parts = path.split("/")
    if path.startswith("/") or any(part in ("", ".", "..") for part in parts):
        return "must be a relative path without '.', '..' or empty components"
    return ""


@contextlib.contextmanager
def staged(uploads: Sequence[Upload], files: Sequence[str]) -> Iterator[list[str]]:
    """Write ``uploads`` (checked by :func:`check_uploads`) to a new private directory; yield
    the local path of each of the job's ``files`` entries, in order. The directory is removed
    afterwards. Nothing uploaded: no directory (a job without files is most of them)."""
    if not uploads and not files:
        yield []
        return
    with tempfile.TemporaryDirectory(prefix="primus-upload-") as directory:
        root = Path(directory)
        for upload in uploads:
            target = root / upload.path
            target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            descriptor = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                                 (upload.mode & 0o777) or 0o644)
            with os.fdopen(descriptor, "wb") as out:
                out.write(upload.content)
        yield [str(root / os.path.basename(entry.rstrip("/"))) for entry in files]

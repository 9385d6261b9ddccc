#!/usr/bin/python
"""Ansible module: a host's directories and small files (certificates, keys, tokens) in one run.

Ansible's ``file`` and ``copy`` cost a module run per item (``copy`` reads the remote file's
checksum first), and on a 2-core controller a module run is most of a second: a host's dozen
credentials took a third of a no-change run. This one compares and writes them all at once.
"""

from __future__ import annotations

import grp
import os
import pwd
import stat
import tempfile

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: primus_files
short_description: Make directories and write small files, each with its mode and owner, at once
description:
  - Makes each directory that is missing, then writes each file whose content differs, and sets
    the mode, owner and group of both where they differ. A file is written to a temporary file
    in its directory, given its mode and owner, then renamed into place, so it is never seen
    whole with other permissions nor half-written.
  - Contents are never logged or returned, and no diff is shown.
options:
  directories:
    description: Directories, made in order (parents first).
    type: list
    elements: dict
    default: []
    suboptions:
      path: {description: The directory., type: path, required: true}
      mode: {description: Its mode, octal., type: str, required: true}
      owner: {description: Its owner (left as it is when not given)., type: str}
      group: {description: Its group (left as it is when not given)., type: str}
  files:
    description: Files, each in a directory that exists or is made above.
    type: list
    elements: dict
    default: []
    suboptions:
      dest: {description: The file., type: path, required: true}
      content: {description: What it holds., type: str, required: true}
      mode: {description: Its mode, octal., type: str, required: true}
      owner: {description: Its owner (left as it is when not given)., type: str}
      group: {description: Its group (left as it is when not given)., type: str}
"""

RETURN = r"""
changed_paths:
  description: The directories and files made, written or given another mode or owner.
  type: list
  elements: str
  returned: always
"""


def _ids(spec: dict) -> tuple[int, int]:
    """The owner's and group's ids; -1 for one not given (left as it is, and for what is made,
    the connecting user's)."""
    uid = pwd.getpwnam(spec["owner"]).pw_uid if spec.get("owner") else -1
    gid = grp.getgrnam(spec["group"]).gr_gid if spec.get("group") else -1
    return uid, gid


def _attributes_differ(path: str, mode: int, uid: int, gid: int) -> bool:
    found = os.lstat(path)
    return stat.S_IMODE(found.st_mode) != mode or uid not in (-1, found.st_uid) \
        or gid not in (-1, found.st_gid)


def _directory(spec: dict, check: bool) -> bool:
    path, mode = spec["path"], int(spec["mode"], 8)
    uid, gid = _ids(spec)
    if os.path.isdir(path) and not _attributes_differ(path, mode, uid, gid):
        return False
    if not check:
        os.makedirs(path, mode=0o700, exist_ok=True)
        os.chown(path, uid, gid)
        os.chmod(path, mode)
    return True


def _file(spec: dict, check: bool) -> bool:
    path, mode, data = spec["dest"], int(spec["mode"], 8), spec["content"].encode()
    uid, gid = _ids(spec)
    try:
        with open(path, "rb") as current:
            same = current.read() == data
    except FileNotFoundError:
        same = False
    if same and not _attributes_differ(path, mode, uid, gid):
        return False
    if check:
        return True
    if same:
        os.chown(path, uid, gid)
        os.chmod(path, mode)
        return True
    # Private from the start: the temporary file is 0600 until it has its owner and mode.
    fd, temporary = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".primus-files-")
    try:
        with os.fdopen(fd, "wb") as out:
            os.fchown(out.fileno(), uid, gid)
            os.fchmod(out.fileno(), mode)
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise
    return True


def main() -> None:
    attributes = {"mode": {"type": "str", "required": True}, "owner": {"type": "str"},
                  "group": {"type": "str"}}
    module = AnsibleModule(
        argument_spec={
            "directories": {"type": "list", "elements": "dict", "default": [],
                            "options": {"path": {"type": "path", "required": True},
                                        **attributes}},
            "files": {"type": "list", "elements": "dict", "default": [],
                      "options": {"dest": {"type": "path", "required": True},
                                  "content": {"type": "str", "required": True, "no_log": True},
                                  **attributes}},
        },
        supports_check_mode=True)
    changed: list[str] = []
    items = [(_directory, spec, spec["path"]) for spec in module.params["directories"]] + \
        [(_file, spec, spec["dest"]) for spec in module.params["files"]]
    for make, spec, path in items:
        try:
            if make(spec, module.check_mode):
                changed.append(path)
        except KeyError as exc:  # getpwnam/getgrnam
            module.fail_json(msg=f"{path}: no such user or group: {exc}", changed_paths=changed)
        except (OSError, ValueError) as exc:  # ValueError: a mode that is not octal
            module.fail_json(msg=f"{path}: {exc}", changed_paths=changed)
    module.exit_json(changed=bool(changed), changed_paths=changed)


if __name__ == "__main__":
    main()

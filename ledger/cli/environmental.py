"""Failures of the machine, not of the ledger: a full disk, a permission, a missing device.

Exit 70 says "a bug, please report it"; a full disk is not one. An ``OSError`` whose errno names the machine's
state, raised directly or wrapped by a library (torch's and safetensors' writers wrap it in their own errors,
keeping only its words), is exit 2 with one line that names it.
"""

from __future__ import annotations

import errno
import re

# errno -> what to do about it
ENVIRONMENTAL = {
    errno.ENOSPC: "free space on the device, or write elsewhere",
    errno.EDQUOT: "free space within the quota, or write elsewhere",
    errno.EFBIG: "the file-size limit (ulimit -f) is below what this writes",
    errno.EACCES: "permission denied: check the path's owner and mode",
    errno.EPERM: "operation not permitted: check the path's owner and mode",
    errno.EROFS: "the file system is read-only: write elsewhere",
    errno.ENODEV: "the device is missing",
    errno.ENXIO: "the device is missing",
    errno.EIO: "the device reported an input/output error",
    errno.EMFILE: "too many open files (ulimit -n)",
    errno.ENFILE: "too many open files on this machine",
}

# the words a wrapping library keeps of an OSError (torch: "file write failed"; safetensors: "os error 28")
_WRAPPED = re.compile(r"No space left on device|Disk quota exceeded|File too large|os error (28|122|27)\b")


def environmental_failure(exc: BaseException) -> str | None:
    """One line naming the machine's failure behind ``exc`` (or its causes), or None where it is not one."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in ENVIRONMENTAL:
            where = f": {current.filename}" if current.filename else ""
            return f"{current.strerror or errno.errorcode[current.errno]}{where} ({ENVIRONMENTAL[current.errno]})"
        found = _WRAPPED.search(str(current))
        if found:
            return f"{found.group(0)} ({type(current).__name__} while writing: free space, or write elsewhere)"
        current = current.__cause__ or current.__context__
    return None

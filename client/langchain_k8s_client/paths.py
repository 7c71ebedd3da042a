"""Path rules of the backend: validation, virtual mode, allowed write prefixes.

Everything here is pure string work done before a request leaves the process.
What needs the pod's filesystem (symlinks) is checked inside the pod by the
scripts in `commands`/`pyscripts`, using the `confine` root this module picks.

Paths are `str`; bytes that are not UTF-8 travel as lone surrogates
(`os.fsdecode` style), which the runtime turns back into the same bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

from .protocol import FILE_NOT_FOUND, INVALID_PATH, IS_DIRECTORY, PERMISSION_DENIED  # noqa: F401  (re-exported)

FileErrorCode = Literal["file_not_found", "permission_denied", "is_directory", "invalid_path"]


class PathRefused(Exception):
    """A path was refused before reaching the pod; `code` is a deepagents error code."""

    def __init__(self, code: FileErrorCode, message: str) -> None:
        super().__init__(message)
        self.code: FileErrorCode = code
        self.message = message


@dataclass(frozen=True)
class ResolvedPath:
    """A caller path mapped to the pod.

    `real` is the absolute path inside the pod. `confine` is the pod directory the
    operation must physically stay in (symlinks resolved), or "" for no check.
    """

    virtual: str
    real: str
    confine: str


def normalize(path: str) -> str:
    """Collapse `//` and `.` segments and drop a trailing slash; keep `..` as is."""
    parts = [seg for seg in path.split("/") if seg not in ("", ".")]
    return "/" + "/".join(parts)


def is_under(path: str, prefix: str) -> bool:
    """Whether normalized `path` is `prefix` or inside it (segment-wise, not textual)."""
    return prefix == "/" or path == prefix or path.startswith(prefix + "/")


class PathPolicy:
    """Maps caller paths to pod paths and refuses the ones the options forbid.

    - Every path must be absolute and free of NUL bytes (`invalid_path`).
    - `virtual_mode`: caller paths are relative to `root_dir` ("/a" -> root_dir + "/a");
      `..` segments and a leading `~` component are `invalid_path`; reads and writes are
      confined to `root_dir` inside the pod (symlink escapes are `invalid_path`).
    - `allow_prefixes`: writes (write, edit, delete, upload) outside them are
      `permission_denied`; `..` is refused there too because it could climb out.
      In virtual mode the prefixes are virtual paths.
    """

    def __init__(
        self,
        *,
        virtual_mode: bool = False,
        root_dir: str | None = None,
        allow_prefixes: Sequence[str] | None = None,
    ) -> None:
        if virtual_mode:
            if not root_dir or not root_dir.startswith("/"):
                raise ValueError("virtual_mode needs an absolute root_dir")
            if ".." in root_dir.split("/"):
                raise ValueError("root_dir must not contain '..'")
        elif root_dir is not None:
            raise ValueError("root_dir is only meaningful with virtual_mode=True")
        self.virtual_mode = virtual_mode
        self.root_dir = normalize(root_dir) if root_dir else "/"
        prefixes: list[str] = []
        for prefix in allow_prefixes or ():
            if not prefix.startswith("/") or ".." in prefix.split("/"):
                raise ValueError(f"allow_prefixes entries must be absolute without '..': {prefix!r}")
            prefixes.append(normalize(prefix))
        # Longest first, so the confinement root is the most specific prefix.
        self.allow_prefixes: tuple[str, ...] | None = (
            tuple(sorted(prefixes, key=len, reverse=True)) if allow_prefixes is not None else None
        )

    @property
    def restricted(self) -> bool:
        """Whether any rule beyond "absolute, no NUL" applies."""
        return self.virtual_mode or self.allow_prefixes is not None

    def to_real(self, virtual: str) -> str:
        """Map a normalized caller path to the pod (identity outside virtual mode)."""
        if not self.virtual_mode:
            return virtual
        return self.root_dir if virtual == "/" else self.root_dir.rstrip("/") + virtual

    def to_virtual(self, real: str) -> str | None:
        """Map a pod path back to a caller path; None when it lies outside `root_dir`."""
        if not self.virtual_mode:
            return real
        real = normalize(real)
        if not is_under(real, self.root_dir):
            return None
        if self.root_dir == "/":
            return real
        rest = real[len(self.root_dir) :]
        return rest or "/"

    def resolve(self, path: str, *, write: bool = False) -> ResolvedPath:
        """Validate `path` for a read (default) or a write and map it to the pod.

        Raises:
            PathRefused: with `invalid_path` or `permission_denied`.
        """
        if not isinstance(path, str) or not path:
            raise PathRefused(INVALID_PATH, f"invalid path {path!r}")
        if "\x00" in path:
            raise PathRefused(INVALID_PATH, f"path contains a NUL byte: {path!r}")
        if not path.startswith("/"):
            raise PathRefused(INVALID_PATH, f"path must be absolute: {path!r}")
        segments = path.split("/")
        if self.restricted and ".." in segments:
            raise PathRefused(INVALID_PATH, f"'..' is not allowed in {path!r}")
        virtual = normalize(path)
        if self.virtual_mode and virtual.split("/")[1].startswith("~"):
            raise PathRefused(INVALID_PATH, f"'~' is not allowed at the start of {path!r}")
        real = self.to_real(virtual)
        _check_lengths(path, real)
        confine = self.root_dir if self.virtual_mode else ""
        if write and self.allow_prefixes is not None:
            match = next((p for p in self.allow_prefixes if is_under(virtual, p)), None)
            if match is None:
                allowed = ", ".join(self.allow_prefixes) or "(none)"
                raise PathRefused(PERMISSION_DENIED, f"{path!r} is outside the allowed write prefixes: {allowed}")
            confine = self.to_real(match)
        return ResolvedPath(virtual=virtual, real=real, confine=confine)

    def resolve_dir(self, path: str | None) -> ResolvedPath:
        """Resolve a search root (ls/grep/glob); None means "/" (the root in virtual mode)."""
        return self.resolve(path or "/")

    def display(self, real: str) -> str:
        """A pod path as the caller should see it (virtual mode strips `root_dir`)."""
        mapped = self.to_virtual(real)
        return mapped if mapped is not None else real


NAME_MAX: Final = 255
"""Longest file name component in bytes (Linux NAME_MAX)."""

PATH_MAX: Final = 4095
"""Longest path in bytes (Linux PATH_MAX, 4096 with its NUL)."""


def _check_lengths(path: str, real: str) -> None:
    # The kernel refuses longer names with ENAMETOOLONG, which the pod's scripts would report as the
    # nearest error they know (permission_denied): say what is wrong before anything is sent.
    raw = real.encode("utf-8", "surrogateescape")
    if len(raw) > PATH_MAX:
        raise PathRefused(INVALID_PATH, f"path is longer than {PATH_MAX} bytes ({len(raw)}): {path[:80]!r}...")
    longest = max((len(part) for part in raw.split(b"/")), default=0)
    if longest > NAME_MAX:
        raise PathRefused(INVALID_PATH, f"a name is longer than {NAME_MAX} bytes ({longest}): {path[:80]!r}")

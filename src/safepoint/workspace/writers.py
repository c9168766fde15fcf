"""Who wrote a file while a command ran: the command's processes, or someone else (the user, another run).

Linux with privilege only (``CAP_SYS_ADMIN``; elsewhere :meth:`WriterWatch.start` gives None and the caller marks
what changed during the command as of uncertain author). Two kernel interfaces, read with ctypes and sockets:

* fanotify (``FAN_CLASS_NOTIF | FAN_REPORT_DFID_NAME``) with a mark on every folder of the workspace that the
  ignore rules keep: each write, close-after-write, attribute change, create, delete and move below it is reported
  with the folder's file handle, the name, and the pid of the process that did it;
* the process-events connector (netlink ``NETLINK_CONNECTOR``, ``CN_IDX_PROC``): every fork while the command runs,
  so the command's process tree is known exactly, even for a process that wrote a file and exited at once (a pid
  looked up in /proc after the fact would be gone).

Between :meth:`begin` and :meth:`end` a thread reads both; ``end`` gives, per recorded path, which kinds of writers
touched it (``"command"``: a process of the tree below the given tops; ``"other"``: anyone else). Folders are marked
once, when the watch starts (O(folders), like the inotify watch), and folders created later as they appear.
Anything lost (a queue overflow, a mark refused) makes ``end`` say None: the caller must not guess.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import socket
import struct
import sys
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field

from safepoint.workspace.ignore import IgnoreRules
from safepoint.workspace.names import quote_path

__all__ = ["Authors", "WriterWatch"]

DISABLE_ENV = "SAFEPOINT_NO_FANOTIFY"  # set to 1: attribute no write to a process (the fallback, for tests)

_FAN_CLOEXEC = 0x1
_FAN_NONBLOCK = 0x2
_FAN_REPORT_DFID_NAME = 0x400 | 0x800
_FAN_MARK_ADD = 0x1
_FAN_MARK_DONT_FOLLOW = 0x4
_FAN_MARK_ONLYDIR = 0x8
_FAN_MODIFY = 0x2
_FAN_ATTRIB = 0x4
_FAN_CLOSE_WRITE = 0x8
_FAN_MOVED_FROM = 0x40
_FAN_MOVED_TO = 0x80
_FAN_CREATE = 0x100
_FAN_DELETE = 0x200
_FAN_Q_OVERFLOW = 0x4000
_FAN_EVENT_ON_CHILD = 0x08000000
_FAN_ONDIR = 0x40000000
_MASK = (
    _FAN_MODIFY
    | _FAN_ATTRIB
    | _FAN_CLOSE_WRITE
    | _FAN_MOVED_FROM
    | _FAN_MOVED_TO
    | _FAN_CREATE
    | _FAN_DELETE
    | _FAN_ONDIR
    | _FAN_EVENT_ON_CHILD
)
_INFO_DFID_NAME = 2
_METADATA = struct.Struct("=IBBHQii")  # event_len, vers, reserved, metadata_len, mask, fd, pid
_INFO_HEADER = struct.Struct("=BBH")
_HANDLE_HEADER = struct.Struct("=Ii")  # handle_bytes, handle_type
_MAX_HANDLE = 128

_NETLINK_CONNECTOR = 11
_CN_IDX_PROC = 1
_CN_VAL_PROC = 1
_PROC_CN_MCAST_LISTEN = 1
_PROC_CN_MCAST_IGNORE = 2
_PROC_EVENT_FORK = 0x1
_NLMSG_HEADER = struct.Struct("=IHHII")
_CN_HEADER = struct.Struct("=IIIIHH")
_PROC_HEADER = struct.Struct("=IIQ")  # what, cpu, timestamp
_FORK = struct.Struct("=iiii")  # parent pid, parent tgid, child pid, child tgid
_POLL_SECONDS = 0.5  # the reader wakes at least this often; `end` wakes it at once through its pipe


class _FileHandle(ctypes.Structure):
    _fields_ = (("handle_bytes", ctypes.c_uint), ("handle_type", ctypes.c_int), ("f_handle", ctypes.c_ubyte * 128))


@dataclass
class Authors:
    """What ``end`` saw: writer kinds per recorded path (files and folders), and whether nothing was missed."""

    by_path: dict[str, set[str]] = field(default_factory=dict)

    def of(self, path: str) -> set[str]:
        """The writers of ``path``; for a path with no event of its own, those of the nearest folder above it that
        was created, removed or moved (``rm -rf d`` reports d's files, ``mkdir d; ...`` may not)."""
        found = self.by_path.get(path)
        if found:
            return found
        parts = path.split("/")
        for end in range(len(parts) - 1, 0, -1):
            found = self.by_path.get("/".join(parts[:end]) + "/")
            if found:
                return found
        return set()


class WriterWatch:
    def __init__(self, root: str, rules: IgnoreRules, fan: int, libc: ctypes.CDLL) -> None:
        self.root = root
        self.rules = rules
        self._fan = fan
        self._libc = libc
        self._dirs: dict[bytes, str] = {}  # folder file handle -> real rel path ("" for the root)
        self._broken = False
        self._thread: threading.Thread | None = None
        self._wake: tuple[int, int] | None = None
        self._netlink: socket.socket | None = None
        self._events: list[tuple[str, int, bool]] = []  # (real rel path, pid, is a folder)
        self._forks: list[tuple[int, int]] = []  # (parent tgid, child tgid)

    @classmethod
    def start(cls, root: str, rules: IgnoreRules, *, enabled: bool = True) -> WriterWatch | None:
        """Mark the workspace's folders, or None where writers cannot be told apart (not Linux, no privilege,
        disabled by the caller or by ``SAFEPOINT_NO_FANOTIFY=1``)."""
        if not enabled or os.environ.get(DISABLE_ENV) == "1" or not sys.platform.startswith("linux"):
            return None
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.fanotify_mark.argtypes = (ctypes.c_int, ctypes.c_uint, ctypes.c_uint64, ctypes.c_int, ctypes.c_char_p)
            fan = libc.fanotify_init(_FAN_CLOEXEC | _FAN_NONBLOCK | _FAN_REPORT_DFID_NAME, os.O_RDONLY)
        except (OSError, AttributeError):
            return None
        if fan < 0:
            return None
        watch = cls(os.path.abspath(root), rules, fan, libc)
        if not watch._mark_tree("") or not watch._probe_netlink():
            watch.close()
            return None
        return watch

    # marks ------------------------------------------------------------------------------------------------------
    def _mark(self, rel: str) -> bool:
        path = os.fsencode(os.path.join(self.root, rel) if rel else self.root)
        flags = _FAN_MARK_ADD | _FAN_MARK_DONT_FOLLOW | _FAN_MARK_ONLYDIR
        if self._libc.fanotify_mark(self._fan, flags, _MASK, -100, path) != 0:  # -100: AT_FDCWD
            return ctypes.get_errno() in (2, 20)  # gone meanwhile (ENOENT, ENOTDIR): nothing to watch there
        handle = _FileHandle(handle_bytes=_MAX_HANDLE)
        mount = ctypes.c_int()
        if self._libc.name_to_handle_at(-100, path, ctypes.byref(handle), ctypes.byref(mount), 0) != 0:
            return ctypes.get_errno() in (2, 20)
        key = struct.pack("=i", handle.handle_type) + bytes(handle.f_handle[: handle.handle_bytes])
        self._dirs[key] = rel
        return True

    def _mark_tree(self, top: str) -> bool:
        stack = [top]
        while stack:
            rel = stack.pop()
            if not self._mark(rel):
                return False
            try:
                with os.scandir(os.path.join(self.root, rel) if rel else self.root) as entries:
                    for entry in entries:
                        child = f"{rel}/{entry.name}" if rel else entry.name
                        with contextlib.suppress(OSError):
                            if entry.is_dir(follow_symlinks=False) and not self.rules.excluded(child, is_dir=True):
                                stack.append(child)
            except OSError:
                continue
        return True

    # the window of one command ---------------------------------------------------------------------------------
    def begin(self) -> None:
        """Start recording: what was queued before (the user's edits between commands) is dropped, its new folders
        marked; forks are listened to from now on."""
        if self._thread is not None:
            self.end(())  # a window its command never closed (the tool raised past the capture)
        # Each window is judged on its own: what an earlier one lost cannot make a later one wrong (a folder left
        # unmarked gives no events, and a change without events is of uncertain author).
        self._broken = False
        self._read_fanotify(keep=False)
        self._events, self._forks = [], []
        try:
            self._netlink = _listen_forks()
        except OSError:
            self._broken = True
            return
        self._wake = os.pipe()
        self._thread = threading.Thread(target=self._reader, name="safepoint-writers", daemon=True)
        self._thread.start()

    def end(self, tops: Iterable[int]) -> Authors | None:
        """Stop recording; the writers of each path changed since ``begin``, by kind. ``tops``: the processes the
        command was started as (its tree is every process they forked, transitively). None: something was lost."""
        if self._thread is not None and self._wake is not None:
            os.write(self._wake[1], b"x")
            self._thread.join()
            self._thread = None
        if self._wake is not None:
            for fd in self._wake:
                os.close(fd)
            self._wake = None
        self._read_fanotify(keep=True)  # a write that returned has queued its event: nothing is left behind
        if self._netlink is not None:
            self._read_forks()
            _stop_listening(self._netlink)
            self._netlink = None
        if self._broken:
            return None
        tree = set(tops)
        children: dict[int, list[int]] = {}
        for parent, child in self._forks:
            children.setdefault(parent, []).append(child)
        todo = list(tree)
        while todo:
            for child in children.get(todo.pop(), ()):
                if child not in tree:
                    tree.add(child)
                    todo.append(child)
        authors = Authors()
        for rel, pid, is_dir in self._events:
            key = quote_path(rel) + ("/" if is_dir else "")
            authors.by_path.setdefault(key, set()).add("command" if pid in tree else "other")
        self._events, self._forks = [], []
        return authors

    def close(self) -> None:
        if self._thread is not None:
            self.end(())
        if self._fan >= 0:
            os.close(self._fan)
            self._fan = -1

    # reading ----------------------------------------------------------------------------------------------------
    def _reader(self) -> None:
        assert self._wake is not None and self._netlink is not None
        poller = select.poll()  # not select.select: a busy process may hold descriptors past 1024
        for fd in (self._fan, self._netlink.fileno(), self._wake[0]):
            poller.register(fd, select.POLLIN)
        while True:
            ready = {fd for fd, _event in poller.poll(_POLL_SECONDS * 1000)}
            if self._wake[0] in ready:
                return
            if self._fan in ready:
                self._read_fanotify(keep=True)
            if self._netlink.fileno() in ready:
                self._read_forks()

    def _read_forks(self) -> None:
        assert self._netlink is not None
        while True:
            try:
                data = self._netlink.recv(65536, socket.MSG_DONTWAIT)
            except BlockingIOError:
                return
            except OSError:  # ENOBUFS: forks were lost
                self._broken = True
                return
            offset = 0
            while offset + _NLMSG_HEADER.size <= len(data):
                length = _NLMSG_HEADER.unpack_from(data, offset)[0]
                body = offset + _NLMSG_HEADER.size + _CN_HEADER.size
                if length < _NLMSG_HEADER.size or body + _PROC_HEADER.size > len(data):
                    break
                what = _PROC_HEADER.unpack_from(data, body)[0]
                if what == _PROC_EVENT_FORK:
                    _ppid, parent, _cpid, child = _FORK.unpack_from(data, body + _PROC_HEADER.size)
                    self._forks.append((parent, child))
                offset += (length + 3) & ~3

    def _read_fanotify(self, *, keep: bool) -> None:
        while True:
            try:
                data = os.read(self._fan, 65536)
            except BlockingIOError:
                return
            except OSError:
                self._broken = True
                return
            if not data:
                return
            offset = 0
            while offset + _METADATA.size <= len(data):
                length, _vers, _res, meta_len, mask, fd, pid = _METADATA.unpack_from(data, offset)
                if length < _METADATA.size:
                    return
                if fd >= 0:
                    os.close(fd)
                if mask & _FAN_Q_OVERFLOW:
                    if keep:
                        self._broken = True
                else:
                    self._event(data[offset + meta_len : offset + length], mask, pid, keep)
                offset += length

    def _event(self, info: bytes, mask: int, pid: int, keep: bool) -> None:
        at = 0
        while at + _INFO_HEADER.size <= len(info):
            kind, _pad, size = _INFO_HEADER.unpack_from(info, at)
            if size == 0:
                return
            if kind == _INFO_DFID_NAME:
                start = at + _INFO_HEADER.size + 8  # after the fsid
                handle_bytes, handle_type = _HANDLE_HEADER.unpack_from(info, start)
                handle_end = start + _HANDLE_HEADER.size + handle_bytes
                key = struct.pack("=i", handle_type) + info[start + _HANDLE_HEADER.size : handle_end]
                raw_name = info[handle_end : at + size].split(b"\0", 1)[0]
                folder = self._dirs.get(key)
                if folder is not None and raw_name not in (b"", b"."):
                    name = os.fsdecode(raw_name)
                    rel = f"{folder}/{name}" if folder else name
                    is_dir = bool(mask & _FAN_ONDIR)
                    new_folder = is_dir and mask & (_FAN_CREATE | _FAN_MOVED_TO)
                    if new_folder and not self.rules.excluded(rel, is_dir=True) and not self._mark_tree(rel):
                        self._broken = True
                    if keep:
                        self._events.append((rel, pid, is_dir))
            at += size

    def _probe_netlink(self) -> bool:
        try:
            _stop_listening(_listen_forks())
        except OSError:
            return False
        return True


def _listen_forks() -> socket.socket:
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, _NETLINK_CONNECTOR)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        sock.bind((0, _CN_IDX_PROC))
        op = struct.pack("=I", _PROC_CN_MCAST_LISTEN)
        message = _CN_HEADER.pack(_CN_IDX_PROC, _CN_VAL_PROC, 0, 0, len(op), 0) + op
        sock.send(_NLMSG_HEADER.pack(_NLMSG_HEADER.size + len(message), 3, 0, 0, 0) + message)  # 3: NLMSG_DONE
    except OSError:
        sock.close()
        raise
    return sock


def _stop_listening(sock: socket.socket) -> None:
    """Tell the kernel this listener is gone (it counts them, and sends process events while any is left)."""
    op = struct.pack("=I", _PROC_CN_MCAST_IGNORE)
    message = _CN_HEADER.pack(_CN_IDX_PROC, _CN_VAL_PROC, 0, 0, len(op), 0) + op
    with contextlib.suppress(OSError):
        sock.send(_NLMSG_HEADER.pack(_NLMSG_HEADER.size + len(message), 3, 0, 0, 0) + message)
    sock.close()

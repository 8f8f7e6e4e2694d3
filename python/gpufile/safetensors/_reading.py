"""The reading machinery: gpufile's session opened on a thread while the loader parses headers
and allocates, local reads started as soon as their destination exists (_EarlyReads), the
futures in flight and their failures, and the run of a load's planned reads, all files at once,
with remote objects read a bounded number at a time. Every read started has ended before any
of these returns or raises: memory is never let go while a read may still write into it."""
from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from .._gpufile import File, RemoteFile, _open_session, driver_is_open
from ._checkpoint import _close_sources
from ._header import SafetensorError

if TYPE_CHECKING:
    from .. import _scatter
    from ._checkpoint import _Source

    # A plan: (source, direct reads [(ptr, nbytes, file offset, what)], scatters [_scatter.Scatter]).
    _Plan = Tuple["_Source", Sequence[Tuple[int, int, int, str]], Sequence["_scatter.Scatter"]]


class _SessionOpening:
    """gpufile's session (its IO workers and their pinned staging: most of the fixed cost of a
    first load in a fresh process) opened on a thread of its own while the loader parses headers
    and allocates the destinations; otherwise the loader's first read opens it, and the load
    waits for that on top. wait() before the reads raises the open's failure: an open consumes
    the settings staged for it (set_setting, as cuFile's setters), so the reads must not open
    again with the defaults."""

    def __init__(self) -> None:
        self._thread: Optional[threading.Thread] = None
        self._failure: Optional[BaseException] = None
        if not driver_is_open():
            self._thread = threading.Thread(target=self._open, name="gpufile-open", daemon=True)
            self._thread.start()

    def _open(self) -> None:
        try:
            _open_session()
        except BaseException as e:  # noqa: BLE001 - raised by wait(), on the loader's thread
            self._failure = e

    def opened(self) -> bool:
        """True once the session is open (never blocks; a failed open is False: wait() raises
        it)."""
        if self._thread is not None and self._thread.is_alive():
            return False
        return self._failure is None

    def wait(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._failure is not None:
            failure, self._failure = self._failure, None
            raise failure


class _EarlyReads:
    """A load's direct reads of local files, each started as soon as both its destination exists
    and gpufile's session is open, so that the reads of the first tensors overlap the allocation
    of the later ones instead of waiting for all of it (issue 13: a first load in a fresh process
    waits for the open, then for the reads). Reads added before the open ends are queued and
    started by the first add() after it, or by finish().

    The caller settles the pending GPU work of its stream before allocating anything
    (_settle_allocations): memory handed out afterwards is then free of queued kernels, as the
    reads require. Every read started ends before finish() or abort() returns."""

    def __init__(self, opening: "_SessionOpening") -> None:
        self._opening = opening
        self._files: Dict[str, File] = {}
        self._queued: List[Tuple[str, int, int, int, str]] = []
        self._reads = _InFlight()

    def add(self, path: str, ptr: int, nbytes: int, offset: int, what: str) -> None:
        self._queued.append((path, ptr, nbytes, offset, what))
        if self._opening.opened():
            self._start_queued()

    def _file(self, path: str) -> File:
        f = self._files.get(path)
        if f is None:
            f = self._files[path] = File(path, "r")
        return f

    def _start_queued(self) -> None:
        queued, self._queued = self._queued, []
        for path, ptr, nbytes, offset, what in queued:
            _start_read(self._file(path), self._reads, ptr, nbytes, offset, what)

    def finish(self, rest: Sequence[_Plan]) -> None:
        """Starts what is queued, reads `rest` (remote objects' reads, scatters; a local file
        through the File its early reads opened), then waits for everything; raises the first
        failure once all ended. Closing `rest`'s remote sources is the caller's."""
        failure: Optional[BaseException] = None
        try:
            self._opening.wait()
            self._start_queued()
            _read_from([(src.remote if src.remote is not None else self._file(src.path), ios, scatters)
                        for src, ios, scatters in rest])
        except BaseException as e:  # noqa: BLE001 - raised once every read ended
            failure = e
        try:
            self.abort()
        except BaseException as e:  # noqa: BLE001
            failure = failure or e
        if failure is not None:
            raise failure

    def abort(self) -> None:
        """Starts nothing more, waits for the reads started and closes the files; raises the first
        read's failure."""
        self._queued = []
        try:
            self._reads.wait()
        finally:
            for f in self._files.values():
                f.close()
            self._files = {}


class _InFlight:
    """IO in flight; wait() checks every one and raises the first failure, after all ended."""

    def __init__(self):
        self._pending: List[Tuple[Any, int, str]] = []

    def add(self, future, nbytes: int, what: str) -> None:
        self._pending.append((future, nbytes, what))

    def __len__(self) -> int:
        return len(self._pending)

    def wait(self) -> None:
        first: Optional[BaseException] = None
        for future, nbytes, what in self._pending:
            failure = self._end(future, nbytes, what)
            if first is None:
                first = failure
        self._pending.clear()
        if first is not None:
            raise first

    def wait_oldest(self) -> None:
        """Waits for the IO started first; raises its failure (the others keep running)."""
        future, nbytes, what = self._pending.pop(0)
        failure = self._end(future, nbytes, what)
        if failure is not None:
            raise failure

    @staticmethod
    def _end(future, nbytes: int, what: str) -> Optional[BaseException]:
        try:
            got = future.result()
            if got != nbytes:  # only a read comes back short
                return _short_read(what, got, nbytes)
        except BaseException as e:  # noqa: BLE001 - every read must end before memory is let go
            return e
        return None


def _start_read(f: Union[File, RemoteFile], reads: _InFlight, ptr: int, nbytes: int, file_offset: int, what: str) -> None:
    if nbytes:
        reads.add(f.pread_ptr(ptr, nbytes, file_offset), nbytes, what)


def _remote_reads_in_flight() -> int:
    """Remote reads are Futures on the remote pool (docs/remote.md), each with up to
    remote_concurrency GETs in flight: this many at once keeps the connections busy without
    queueing a Future per tensor."""
    from .. import settings
    return max(2, min(16, int(settings().get("gpufile.remote_concurrency", 16))))


def _read_all(plans: Sequence[_Plan]) -> None:
    """Opens the local files of `plans` and runs every read at once (_read_from); remote sources
    read through their open RemoteFile, and are closed here."""
    files: List[File] = []
    try:
        jobs = []
        for src, ios, scatters in plans:
            if src.remote is not None:
                jobs.append((src.remote, ios, scatters))
                continue
            f = File(src.path, "r")
            files.append(f)
            jobs.append((f, ios, scatters))
        _read_from(jobs)
    finally:
        for f in files:
            f.close()
        _close_sources(src for src, _ios, _scatters in plans)


def _read_from(jobs: Sequence[Tuple[Union[File, RemoteFile], Sequence[Tuple[int, int, int, str]],
                                    Sequence[_scatter.Scatter]]]) -> None:
    """Runs every read of `jobs` ((open file, direct reads, scatters) each) at once, all files
    together, and returns once all ended and every scatter's runs landed; raises the first
    failure, after all that. Direct reads of remote objects go a bounded number at a time
    (_read_remote). The caller has settled the destinations' pending GPU work first
    (_settle_allocations / _settle_sources)."""
    reads = _InFlight()
    finishes: List[Callable[[], None]] = [reads.wait]
    spans = None
    every_scatter = [s for _f, _ios, scatters in jobs for s in scatters]
    if every_scatter:  # only parts of tensors are scattered: a plain load_file never imports _scatter
        from .. import _scatter
        spans = _scatter.Spans(every_scatter, _short_read)
        finishes.insert(0, spans.finish)
    remote = [(f, io) for f, ios, _s in jobs if isinstance(f, RemoteFile) for io in ios]
    failure: Optional[BaseException] = None
    try:
        for f, ios, _scatters in jobs:
            if not isinstance(f, RemoteFile):
                for ptr, nbytes, offset, what in ios:
                    _start_read(f, reads, ptr, nbytes, offset, what)
        if spans is not None:  # the direct reads run while the span reads wait for staging slots
            for f, _ios, scatters in jobs:
                for s in scatters:
                    spans.read(f, s)
        _read_remote(remote, _remote_reads_in_flight())
    except BaseException as e:  # noqa: BLE001 - raised once every read ended
        failure = e
    for finish in finishes:  # every read ends (or fails) before anything is let go
        try:
            finish()
        except BaseException as e:  # noqa: BLE001
            failure = failure or e
    if failure is not None:
        raise failure


def _short_read(what: str, got: int, nbytes: int) -> SafetensorError:
    return SafetensorError(f"{what}: the file ended after {got} of {nbytes} bytes (truncated while loading?)")


def _read_remote(ios: Sequence[Tuple[RemoteFile, Tuple[int, int, int, str]]], most: int) -> None:
    """Reads `ios` with at most `most` in flight; after a failure starts no more, waits for the
    reads already running and raises the first failure."""
    window = _InFlight()
    try:
        for f, (ptr, nbytes, offset, what) in ios:
            if len(window) >= most:
                window.wait_oldest()
            _start_read(f, window, ptr, nbytes, offset, what)
    except BaseException:
        try:
            window.wait()  # the reads still running end before the failure is raised
        except BaseException:  # noqa: BLE001 - the first failure is the one raised
            pass
        raise
    window.wait()

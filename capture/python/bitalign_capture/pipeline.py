"""The recorder's background writing: the forward never waits for the disk, and memory stays bounded.

A hook checks a tensor's fields at once (Writer.prepare: a bad tensor is still an error in the hook) and queues
it; one writer thread emits the queued tensors in the order they were queued, so the file is byte for byte the
one a synchronous writer makes. A queued tensor's bytes may still be on their way:

- Staged: rows copied from the GPU into pinned host memory by a side stream, ordered after the op's stream with
  an event, the source kept alive for that stream (record_stream); the writer thread waits for the copy's event.
  On the CPU the rows are copied at once (the model may change its tensors in place later).
- Fingerprints (held.py): one record batch of a forward's fingerprint tensors, their bytes copied to pinned
  memory on the side stream after the kernel that computed them; the writer thread waits for the copy's event.

Staged bytes hold staging_bytes at most (back-pressure: a hook that would exceed it waits for the writer
thread; one tensor larger than the budget goes alone), and
the queue holds max_items tensors at most. An error in the writer thread is raised by the next hook, flush or
close, naming the file; the capture is then aborted by the recorder.
"""

import collections
import functools
import threading


STAGING_BYTES = 1 << 30  # default bound of staged (copied, not yet written) tensor bytes
MAX_ITEMS = 1 << 16  # default bound of queued tensors


class WriterThreadError(RuntimeError):
    """The writer thread failed; the message names the capture file and the cause."""


class Pipeline:
    """Queues prepared tensors for writer (a writer.Writer) and emits them in order on one thread."""

    def __init__(self, writer, *, staging_bytes=STAGING_BYTES, max_items=MAX_ITEMS):
        if staging_bytes < 1 or max_items < 1:
            raise ValueError(f"bitalign_capture: staging_bytes {staging_bytes} and max_items {max_items} must be ≥ 1")
        self.writer = writer
        self.budget, self.max_items = int(staging_bytes), int(max_items)
        self.used = 0  # staged bytes queued or being written
        self.peak = 0  # the most staged bytes held at once (tests and benchmarks read it)
        self._q = collections.deque()  # (header, payload, staged bytes)
        self._cv = threading.Condition()
        self._err = None
        self._stop = False
        self._drop = False  # abort: discard what is queued
        self._held = False  # hold(): the thread starts nothing new until release()
        self._t = threading.Thread(target=self._run, name="bitalign_capture writer", daemon=True)
        self._t.start()

    def reserve(self, n):
        """Waits until n more staged bytes fit the budget (or nothing else is staged) and takes them."""
        self._wait(lambda: self.used == 0 or self.used + n <= self.budget)
        with self._cv:
            self.used += n
            self.peak = max(self.peak, self.used)

    def put(self, header, payload, staged=0):
        """Queues one tensor: payload is its bytes (a numpy array, bytes-like) or a callable giving them on the
        writer thread; staged is what reserve took for it, given back once it is written."""
        self._wait(lambda: len(self._q) < self.max_items)
        with self._cv:
            self._q.append((header, payload, staged))
            self._cv.notify_all()

    def hold(self):
        """Until release(), the writer thread starts no queued tensor: its work (and the GIL it takes) waits for
        the caller's next pause, e.g. a forward's end. A put or reserve that has to wait for room releases it."""
        with self._cv:
            self._held = True

    def release(self):
        """Lets the writer thread go on with what is queued."""
        with self._cv:
            self._held = False
            self._cv.notify_all()

    def _wait(self, room):
        while True:
            with self._cv:
                self._raise()
                if room():
                    return
                if self._held:  # the writer thread must make the room: held no longer
                    self._held = False
                    self._cv.notify_all()
            with self._cv:
                self._cv.wait_for(lambda: self._err is not None or room(), timeout=1.0)

    def drain(self):
        """Waits until everything queued so far is written; raises the thread's error."""
        self._wait(lambda: not self._q)

    def check(self):
        """Raises the writer thread's error, if it had one."""
        with self._cv:
            self._raise()

    def _raise(self):
        if self._err is not None:
            e = self._err
            raise WriterThreadError(
                f"bitalign_capture: {self.writer.path}: writing the capture failed: {type(e).__name__}: {e}"
            ) from e

    def close(self):
        """Waits until everything queued is written and stops the thread; raises the thread's error."""
        with self._cv:
            self._stop = True
            self._cv.notify_all()
        self._t.join()
        self.check()

    def abort(self):
        """Stops the thread, discarding what is queued (a payload being waited for finishes first)."""
        with self._cv:
            self._stop = self._drop = True
            self._cv.notify_all()
        self._t.join()

    def _run(self):
        while True:
            with self._cv:
                self._cv.wait_for(lambda: (self._q and not self._held) or self._stop)
                if not self._q or self._drop:
                    self._q.clear()
                    self.used = 0
                    self._cv.notify_all()
                    return
                header, payload, staged = self._q[0]
                failed = self._err is not None
            if not failed:
                try:
                    self.writer.emit(header, payload() if callable(payload) else payload)
                except BaseException as e:  # noqa: BLE001 — handed to the recording thread
                    with self._cv:
                        self._err = e
            payload = None  # the staged buffer goes back to its allocator now
            with self._cv:
                self._q.popleft()
                self.used -= staged
                self._cv.notify_all()


class Stager:
    """Copies rows off their device for the writer thread without waiting for them."""

    def __init__(self):
        self._streams = {}  # cuda device -> the side stream of the copies

    def stage(self, x):
        """A callable giving the bytes of tensor x as they are now (numpy uint8, for emit), valid once the op
        that made x has run: a pinned copy on the side stream (GPU) or a copy made now (CPU)."""
        host, done = self.copy(x)
        return functools.partial(_host_bytes, host, done)

    def copy(self, x):
        """A host copy of tensor x (pinned when x is on a GPU) and the event after which it holds x's values
        (None: it already does)."""
        import torch

        if x.device.type != "cuda":
            return x.detach().clone(memory_format=torch.contiguous_format), None
        side = self._streams.get(x.device)
        if side is None:
            side = self._streams[x.device] = torch.cuda.Stream(x.device)
        side.wait_stream(torch.cuda.current_stream(x.device))  # after the op that made x
        host = torch.empty(x.shape, dtype=x.dtype, pin_memory=True)
        with torch.cuda.stream(side):
            host.copy_(x.detach(), non_blocking=True)
            done = torch.cuda.Event()
            done.record(side)
        x.record_stream(side)  # its memory is not reused before the copy has read it
        return host, done


def ready(host, done):
    """host (a Stager.copy result) once its copy has finished: done is that copy's event, or None (done already)."""
    if done is not None:
        done.synchronize()  # releases the GIL while the copy finishes
    return host


def _host_bytes(host, done):
    import torch

    return ready(host, done).reshape(-1).view(torch.uint8).numpy()

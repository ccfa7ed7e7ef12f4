"""Long-lived worker processes that take tasks from a queue: the engine under `resnet ablate --jobs N`.

Each worker is a one-process `concurrent.futures.ProcessPoolExecutor` (spawn context): the standard
library starts it, imports torch in it once (the initializer), carries tasks and results, and
brings a task's exception back to the caller. One executor per worker, not one executor of N,
because a worker that dies breaks its whole executor: ProcessPoolExecutor then fails every pending
task and terminates every other worker, and multiprocessing.Pool replaces the worker but never
delivers the lost task's result. With one executor per worker only the dead worker's task fails,
and a fresh worker takes its place. The caller keeps the queue, so the next task goes to whichever
worker is free, in the caller's order.

Signals. Each worker runs in its own session, so a terminal's Ctrl-C reaches only the parent, which
forwards exactly one signal to every worker (a trainer saves on the first SIGINT and quits at once
on a second). A scheduler that signals every process (SLURM) gives a worker two SIGTERMs, which is
the same as one. Between tasks a worker holds a StopFlag, so a signal there is kept, not fatal.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import sys
import threading
import time
import traceback
from collections import deque
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from ..training.signals import StopFlag, pending


@dataclass(frozen=True)
class Share:
    """What one worker may use: its CPU threads and, where there are GPUs, one of them."""

    threads: int
    cuda_visible: str | None = None  # the worker's CUDA_VISIBLE_DEVICES; None: leave it as inherited


def device_entries(visible: str | None, gpus: int) -> list[str]:
    """The GPUs this process may hand out, as entries of its own CUDA_VISIBLE_DEVICES.

    A scheduler (SLURM, Kubernetes) may have set the variable: with "4,6" the process sees two
    GPUs, and a child given "0" would see the machine's GPU 0, another job's. Entries may also be
    UUIDs (GPU-...) or MIG names. CUDA stops at the first invalid entry, so only the first `gpus`
    entries (the number torch counted) are real."""
    if gpus <= 0:
        return []
    if visible is None:
        return [str(i) for i in range(gpus)]
    return [e.strip() for e in visible.split(",") if e.strip()][:gpus]


def shares(jobs: int, cores: int, gpus: int, visible: str | None) -> list[Share]:
    """N workers: the CPU cores split evenly, and the GPUs (if any) round robin."""
    threads = max(1, cores // jobs)
    entries = device_entries(visible, gpus)
    return [Share(threads, entries[i % len(entries)] if entries else None) for i in range(jobs)]


@dataclass
class Done:
    """What became of one task."""

    result: Any = None  # what the task returned
    error: str | None = None  # the task raised (the exception, one line) or its worker died
    died: bool = False  # the worker process ended during the task (killed, out of memory, os._exit)
    started: bool = True  # False: a stop signal came first and the task never began


# ---------------------------------------------------------------------------------------------
# Inside a worker

_SHARE: Share | None = None
_STOP = StopFlag()


def _init_worker(share: Share, parent: int) -> None:
    global _SHARE
    os.setsid()  # out of the terminal's process group: only the parent forwards signals here
    _die_with(parent)
    os.dup2(2, 1)  # stdout is the parent's JSON stream; anything stray goes to stderr instead
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(share.threads)
    if share.cuda_visible is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = share.cuda_visible  # before torch sees CUDA
    _STOP.install()
    import torch  # once per worker, not once per run: the point of keeping workers

    torch.set_num_threads(share.threads)
    _SHARE = share


ORPHAN_GRACE_S = 60.0  # an orphaned worker's run gets this long to save its checkpoint, then the worker ends
_RUNNING = threading.Event()  # set while a task runs in this worker


def _die_with(parent: int) -> None:
    """A worker never outlives the process that started it (a SIGKILLed or crashed `resnet ablate`
    left one behind, reparented to init, holding its memory). Linux's PR_SET_PDEATHSIG sends a
    SIGTERM when the parent dies: a running trainer saves and stops, as on any SIGTERM. Its result
    has nowhere to go, and an idle worker keeps a SIGTERM rather than dying of it, so a watchdog
    thread also checks os.getppid(): once orphaned, the worker ends when no task is running, or
    after ORPHAN_GRACE_S. The check also covers a parent that died before the prctl call, and
    systems without prctl."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        except (OSError, AttributeError):  # no libc to load: the watchdog alone
            pass

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        if _RUNNING.is_set():
            with contextlib.suppress(OSError):
                os.kill(os.getpid(), signal.SIGTERM)  # where prctl did not already
            deadline = time.monotonic() + ORPHAN_GRACE_S
            while _RUNNING.is_set() and time.monotonic() < deadline:
                time.sleep(0.1)
        os._exit(128 + signal.SIGTERM)

    threading.Thread(target=watch, name="die-with-parent", daemon=True).start()


def _call(task: Callable[[Any], Any], item: Any) -> Done:
    if _STOP.signum is not None:
        return Done(started=False)
    import torch

    torch.set_num_threads(_SHARE.threads)  # a previous run's `run.threads` must not carry over
    _RUNNING.set()
    try:
        with _pass_on_early_stop():
            return Done(result=task(item))
    finally:
        _RUNNING.clear()


@contextmanager
def _pass_on_early_stop() -> Iterator[None]:
    """A signal that lands after the task began but before the task installed its own handler is
    caught by the worker's flag and would be lost to the task. A trainer's StopFlag takes it over
    when installed (`StopFlag.install`); any other handler gets it sent again once in place."""
    finished = threading.Event()

    def watch() -> None:
        while not finished.wait(0.05):
            signum = _STOP.signum
            handler = signal.getsignal(signum) if signum is not None else None
            if signum is not None and handler != _STOP._handle:
                if pending(handler) is None:
                    os.kill(os.getpid(), signum)
                return

    watcher = threading.Thread(target=watch, name="pass-on-stop", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        finished.set()
        watcher.join()


# ---------------------------------------------------------------------------------------------
# In the parent


class _Worker:
    def __init__(self, share: Share):
        self.share = share
        self.pool: ProcessPoolExecutor | None = None
        self.pid: Future | None = None
        self.item: Any = None
        self.future: Future | None = None

    def submit(self, task: Callable[[Any], Any], item: Any) -> None:
        if self.pool is None:
            self.pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"),
                                            initializer=_init_worker, initargs=(self.share, os.getpid()))
            self.pid = self.pool.submit(os.getpid)  # runs first: the pool keeps submission order
        self.item, self.future = item, self.pool.submit(_call, task, item)

    def signal(self, signum: int) -> None:
        if self.pool is None:
            return
        try:
            pid = self.pid.result(timeout=120)  # a worker just started may still be importing torch
        except Exception:  # it died starting; collect() reports the task
            return
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass

    def collect(self) -> tuple[Any, Done]:
        item, future = self.item, self.future
        self.item = self.future = None
        try:
            return item, future.result()
        except BrokenProcessPool:
            self.close(wait=False)  # the next submit starts a fresh worker in its place
            return item, Done(error="its worker process died (killed, or out of memory?)", died=True)
        except Exception as exc:  # the task raised: the run fails, the worker goes on
            return item, Done(error="".join(traceback.format_exception_only(exc)).strip())

    def close(self, wait: bool = True) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=wait, cancel_futures=True)
        self.pool = self.pid = None


def run_queue(items: list[Any], task: Callable[[Any], Any], workers: list[Share], stop: StopFlag,
              on_start: Callable[[Any], None], on_done: Callable[[Any, Done], bool]) -> None:
    """Run `task(item)` for every item, in order, on len(workers) long-lived worker processes.

    `task` must be picklable (a module-level function), and so must the items. `on_done` returning
    True launches nothing more. A signal caught by `stop` is forwarded once to every worker and
    launches nothing more; this returns when every running task has returned."""
    pending = deque(items)
    pool = [_Worker(share) for share in workers]
    forwarded = False
    try:
        while True:
            if stop.signum is not None:
                pending.clear()
                if not forwarded:
                    forwarded = True
                    for worker in pool:
                        worker.signal(stop.signum)
            for worker in pool:
                if worker.future is None and pending:
                    worker.submit(task, pending[0])
                    on_start(pending.popleft())
            busy = [w.future for w in pool if w.future is not None]
            if not busy:
                return
            finished, _ = wait(busy, timeout=0.2, return_when=FIRST_COMPLETED)
            for worker in pool:
                if worker.future not in finished:
                    continue
                item, done = worker.collect()
                if not done.started and stop.signum is None:
                    # Someone signalled that worker alone (not us): it takes no more tasks, so a
                    # fresh one takes this task rather than the run being silently left out.
                    worker.close()
                    pending.appendleft(item)
                elif on_done(item, done):
                    pending.clear()
    finally:
        for worker in pool:
            if worker.future is not None:  # only after an error in this loop: let the runs save
                worker.signal(signal.SIGTERM)
            worker.close()

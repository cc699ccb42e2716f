"""concurrent.futures.thread for the sandbox (fumehood).

The sandbox runs one thread, so ThreadPoolExecutor runs each task in the
calling thread when it is submitted: submit returns a future that is already
done, in submission order. map, as_completed, wait and asyncio's executors
work as usual; a task that blocks waiting for another task never returns.
"""
import itertools
from concurrent.futures import _base

__all__ = ["ThreadPoolExecutor", "BrokenThreadPool"]


class BrokenThreadPool(_base.BrokenExecutor):
    """Raised when the executor's initializer failed."""


class ThreadPoolExecutor(_base.Executor):
    """An executor that runs each task in the calling thread, at submit."""

    _counter = itertools.count().__next__

    def __init__(self, max_workers=None, thread_name_prefix="", initializer=None, initargs=()):
        if max_workers is None:
            max_workers = 5
        if max_workers <= 0:
            raise ValueError("max_workers must be greater than 0")
        if initializer is not None and not callable(initializer):
            raise TypeError("initializer must be a callable")
        self._max_workers = max_workers
        self._thread_name_prefix = thread_name_prefix or ("ThreadPoolExecutor-%d" % self._counter())
        self._initializer, self._initargs = initializer, initargs
        self._initialized = initializer is None
        self._broken = False
        self._shutdown = False

    def submit(self, fn, /, *args, **kwargs):
        if self._broken:
            raise BrokenThreadPool(self._broken)
        if self._shutdown:
            raise RuntimeError("cannot schedule new futures after shutdown")
        if not self._initialized:
            try:
                self._initializer(*self._initargs)
            except BaseException as e:
                self._broken = "A thread initializer failed, the thread pool is not usable anymore"
                raise BrokenThreadPool(self._broken) from e
            self._initialized = True
        f = _base.Future()
        if not f.set_running_or_notify_cancel():
            return f
        try:
            result = fn(*args, **kwargs)
        except Exception as e:
            f.set_exception(e)
        else:
            f.set_result(result)
        return f

    submit.__doc__ = _base.Executor.submit.__doc__

    def shutdown(self, wait=True, *, cancel_futures=False):
        self._shutdown = True

    shutdown.__doc__ = _base.Executor.shutdown.__doc__

"""concurrent.futures.process for the sandbox (fumehood).

The sandbox runs one process and one thread, so ProcessPoolExecutor runs
each task in the calling thread when it is submitted, as its
ThreadPoolExecutor does: submit returns a future that is already done.
Nothing is pickled, and the tasks share the caller's globals.
"""
from concurrent.futures import _base
from concurrent.futures.thread import ThreadPoolExecutor as _Inline

__all__ = ["ProcessPoolExecutor", "BrokenProcessPool"]


class BrokenProcessPool(_base.BrokenExecutor):
    """Raised when the executor's initializer failed."""


class ProcessPoolExecutor(_Inline):
    """An executor that runs each task in the calling thread, at submit."""

    def __init__(self, max_workers=None, mp_context=None, initializer=None, initargs=(), *,
                 max_tasks_per_child=None):
        if max_workers is None:
            max_workers = 1
        if max_tasks_per_child is not None and (not isinstance(max_tasks_per_child, int)
                                                or max_tasks_per_child <= 0):
            raise ValueError("max_tasks_per_child must be >= 1")
        super().__init__(max_workers, "", initializer, initargs)

    def submit(self, fn, /, *args, **kwargs):
        try:
            return super().submit(fn, *args, **kwargs)
        except _base.BrokenExecutor as e:
            raise BrokenProcessPool(*e.args) from e.__cause__

    submit.__doc__ = _base.Executor.submit.__doc__

    def map(self, fn, *iterables, timeout=None, chunksize=1):
        if chunksize < 1:
            raise ValueError("chunksize must be >= 1.")
        return super().map(fn, *iterables, timeout=timeout)

    map.__doc__ = _base.Executor.map.__doc__

    def terminate_workers(self):
        self.shutdown()

    kill_workers = terminate_workers

"""multiprocessing's pool, queues, locks and shared values for the sandbox
(fumehood): the source of multiprocessing.pool, .queues, .synchronize and
.sharedctypes.

The sandbox runs one process and one thread, so a Pool runs each task in
the calling thread when it is submitted (as ThreadPoolExecutor does here),
and multiprocessing.Process runs its target at start. The queues are
queue.Queue, the locks threading's (waiting for what only another process
could do raises RuntimeError instead of waiting forever), and Value and
Array plain objects: the "processes" share the interpreter, so nothing is
pickled and a change to a global is seen by the caller.
"""
import queue as _queue
import threading as _threading

__all__ = ["Pool", "ThreadPool", "AsyncResult", "ApplyResult", "MapResult", "Queue",
           "JoinableQueue", "SimpleQueue", "Lock", "RLock", "Semaphore", "BoundedSemaphore",
           "Condition", "Event", "Barrier", "Value", "Array", "RawValue", "RawArray", "Pipe",
           "TimeoutError"]

from multiprocessing import TimeoutError

RUN, CLOSE, TERMINATE = 0, 1, 2


class ApplyResult:
    """The result of apply_async: already there, since the task ran when
    it was submitted."""

    def __init__(self, pool, callback, error_callback):
        self._pool, self._callback, self._error_callback = pool, callback, error_callback
        self._success, self._value, self._ready = False, None, False

    def _set(self, success, value):
        self._success, self._value, self._ready = success, value, True
        if success and self._callback is not None:
            self._callback(value)
        elif not success and self._error_callback is not None:
            self._error_callback(value)

    def ready(self):
        return self._ready

    def successful(self):
        if not self._ready:
            raise ValueError("{0!r} not ready".format(self))
        return self._success

    def wait(self, timeout=None):
        pass

    def get(self, timeout=None):
        if not self._ready:
            raise TimeoutError
        if self._success:
            return self._value
        raise self._value

    __class_getitem__ = classmethod(type(list[int]))


AsyncResult = ApplyResult


class MapResult(ApplyResult):
    """The result of map_async and starmap_async."""


class IMapIterator:
    """The iterator of imap and imap_unordered: each task runs when its
    result is asked for."""

    def __init__(self, results):
        self._results = results

    def __iter__(self):
        return self

    def __next__(self, timeout=None):
        return next(self._results)

    next = __next__


class Pool:
    """A process pool whose tasks run in the calling thread when they are
    submitted: the sandbox has one process. processes only says how many
    workers it would have; initializer runs once, when the pool is made."""

    _wrap_exception = True

    def __init__(self, processes=None, initializer=None, initargs=(), maxtasksperchild=None,
                 context=None):
        if processes is None:
            processes = 1
        if processes < 1:
            raise ValueError("Number of processes must be at least 1")
        if maxtasksperchild is not None and (not isinstance(maxtasksperchild, int) or maxtasksperchild <= 0):
            raise ValueError("maxtasksperchild must be a positive int or None")
        if initializer is not None and not callable(initializer):
            raise TypeError("initializer must be a callable")
        self._processes, self._ctx = processes, context
        self._state = RUN
        if initializer is not None:
            initializer(*initargs)

    def _check_running(self):
        if self._state != RUN:
            raise ValueError("Pool not running")

    def _call(self, func, args, kwds):
        try:
            return True, func(*args, **kwds)
        except Exception as e:
            return False, e

    def apply(self, func, args=(), kwds={}):
        return self.apply_async(func, args, kwds).get()

    def apply_async(self, func, args=(), kwds={}, callback=None, error_callback=None):
        self._check_running()
        result = ApplyResult(self, callback, error_callback)
        result._set(*self._call(func, args, kwds))
        return result

    def _map(self, func, iterable, star, callback, error_callback):
        self._check_running()
        result = MapResult(self, callback, error_callback)
        values = []
        for item in iterable:
            ok, value = self._call(func, item if star else (item,), {})
            if not ok:
                result._set(False, value)
                return result
            values.append(value)
        result._set(True, values)
        return result

    def map(self, func, iterable, chunksize=None):
        return self._map(func, iterable, False, None, None).get()

    def starmap(self, func, iterable, chunksize=None):
        return self._map(func, iterable, True, None, None).get()

    def map_async(self, func, iterable, chunksize=None, callback=None, error_callback=None):
        return self._map(func, iterable, False, callback, error_callback)

    def starmap_async(self, func, iterable, chunksize=None, callback=None, error_callback=None):
        return self._map(func, iterable, True, callback, error_callback)

    def imap(self, func, iterable, chunksize=1):
        self._check_running()
        return IMapIterator(func(item) for item in iterable)

    imap_unordered = imap

    def close(self):
        if self._state == RUN:
            self._state = CLOSE

    def terminate(self):
        self._state = TERMINATE

    def join(self):
        if self._state == RUN:
            raise ValueError("Pool is still running")

    def __enter__(self):
        self._check_running()
        return self

    def __exit__(self, *exc):
        self.terminate()

    def __repr__(self):
        state = ("RUN", "CLOSE", "TERMINATE")[self._state]
        return "<%s.%s state=%s pool_size=%d>" % (type(self).__module__, type(self).__qualname__,
                                                   state, self._processes)


class ThreadPool(Pool):
    """A thread pool whose tasks run in the calling thread when they are
    submitted: the sandbox runs one thread."""

    def __init__(self, processes=None, initializer=None, initargs=()):
        super().__init__(processes, initializer, initargs)


class Queue(_queue.Queue):
    """A multiprocessing queue: queue.Queue, with close, join_thread and
    cancel_join_thread. A get that only another process could satisfy
    raises RuntimeError instead of waiting forever."""

    def __init__(self, maxsize=0, *, ctx=None):
        super().__init__(maxsize if maxsize > 0 else 0)
        self._closed = False

    def put(self, obj, block=True, timeout=None):
        if self._closed:
            raise ValueError("Queue %r is closed" % self)
        super().put(obj, block, timeout)

    def close(self):
        self._closed = True

    def join_thread(self):
        pass

    def cancel_join_thread(self):
        pass


class JoinableQueue(Queue):
    """A queue with task_done and join (queue.Queue has them)."""


class SimpleQueue:
    """A multiprocessing.SimpleQueue: get, put, empty, close."""

    def __init__(self, *, ctx=None):
        self._q = _queue.Queue()

    def get(self):
        return self._q.get()

    def put(self, obj):
        self._q.put(obj)

    def empty(self):
        return self._q.empty()

    def close(self):
        pass

    __class_getitem__ = classmethod(type(list[int]))


def _ctx_free(make):
    def build(*args, ctx=None, **kwargs):
        return make(*args, **kwargs)
    build.__name__ = build.__qualname__ = make.__name__
    build.__doc__ = make.__doc__
    return build


Lock, RLock, Condition, Event = (_ctx_free(f) for f in (
    _threading.Lock, _threading.RLock, _threading.Condition, _threading.Event))
Semaphore, BoundedSemaphore, Barrier = (_ctx_free(f) for f in (
    _threading.Semaphore, _threading.BoundedSemaphore, _threading.Barrier))

_kinds = {"c": bytes, "u": str, "f": float, "d": float}


def _convert(typecode_or_type):
    if not isinstance(typecode_or_type, str):
        raise TypeError("the sandbox has no ctypes: give a typecode such as 'i' or 'd'")
    return _kinds.get(typecode_or_type, int)


class _Synchronized:
    def __init__(self, lock):
        if lock is True or lock is None:
            lock = RLock()
        self._lock = lock if lock is not False else None

    def get_lock(self):
        if self._lock is None:
            raise AttributeError("this object has no lock (lock=False)")
        return self._lock

    def get_obj(self):
        return self

    def acquire(self, *args):
        return self.get_lock().acquire(*args)

    def release(self):
        return self.get_lock().release()

    def __enter__(self):
        return self.get_lock().__enter__()

    def __exit__(self, *args):
        return self.get_lock().__exit__(*args)


class _Value(_Synchronized):
    def __init__(self, typecode, value, lock):
        super().__init__(lock)
        self._typecode, self.value = typecode, value

    def __repr__(self):
        return "<Synchronized wrapper for c_%s(%r)>" % (self._typecode, self.value)


def RawValue(typecode_or_type, *args):
    """A value whose .value the caller and its "processes" share."""
    kind = _convert(typecode_or_type)
    return _Value(typecode_or_type, kind(*args) if args else kind(), False)


def Value(typecode_or_type, *args, lock=True, ctx=None):
    """A value with a lock (get_lock) whose .value the caller and its
    "processes" share."""
    kind = _convert(typecode_or_type)
    return _Value(typecode_or_type, kind(*args) if args else kind(), lock)


class _Array(_Synchronized, list):
    def __init__(self, values, lock):
        _Synchronized.__init__(self, lock)
        list.__init__(self, values)

    def get_obj(self):
        return self

    def __repr__(self):
        return "<SynchronizedArray wrapper for %s>" % list.__repr__(self)


def _values(typecode_or_type, size_or_initializer):
    kind = _convert(typecode_or_type)
    if isinstance(size_or_initializer, int):
        return [kind()] * size_or_initializer
    return [kind(v) for v in size_or_initializer]


def RawArray(typecode_or_type, size_or_initializer):
    """A list the caller and its "processes" share."""
    return _Array(_values(typecode_or_type, size_or_initializer), False)


def Array(typecode_or_type, size_or_initializer, *, lock=True, ctx=None):
    """A list with a lock (get_lock) the caller and its "processes" share."""
    return _Array(_values(typecode_or_type, size_or_initializer), lock)


class Connection:
    """One end of a Pipe: what send puts in, the other end's recv takes
    out. A recv that only another process could satisfy raises
    RuntimeError instead of waiting forever."""

    def __init__(self, inbox, outbox, readable, writable):
        self._in, self._out = inbox, outbox
        self.readable, self.writable, self.closed = readable, writable, False

    def send(self, obj):
        if not self.writable:
            raise OSError("connection is read-only")
        self._out.append(obj)

    send_bytes = send

    def recv(self):
        if not self.readable:
            raise OSError("connection is write-only")
        if not self._in:
            raise RuntimeError("multiprocessing: this recv would wait forever: the sandbox "
                               "runs one process, whose sends have all been received")
        return self._in.pop(0)

    recv_bytes = recv

    def poll(self, timeout=0.0):
        return bool(self._in)

    def fileno(self):
        raise OSError("a Pipe in the sandbox has no file descriptor")

    def close(self):
        self.closed = True

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def Pipe(duplex=True):
    """Two connected ends, as multiprocessing.Pipe gives."""
    a, b = [], []
    if duplex:
        return Connection(a, b, True, True), Connection(b, a, True, True)
    return Connection(a, [], True, False), Connection([], a, False, True)

# fumehood's fix of the threading module, compiled by startup.py when it is
# imported, in a namespace holding sys and run; patch(m) fixes it after it
# executed.

def patch(m):
    # One thread: Thread.start runs the target to its end before returning
    # (current_thread() is the thread meanwhile), so join returns at once;
    # and a wait that only another thread could end (a held Lock, a
    # Condition, so an Event, a Semaphore, a Barrier, a queue.Queue, or a
    # join of a thread that is waiting for its caller) raises instead of
    # waiting forever. A timed wait sleeps its timeout (only a signal
    # handler could end it sooner). RLock stays C's: it never blocks the
    # one thread.
    import time
    allocate = m._allocate_lock
    running = []  # threads started and not yet finished, innermost last

    def forever(what):
        return RuntimeError(
            "threading: %s would wait forever: the sandbox runs one thread at a time, "
            "each to its end (Thread.start returns once the target has returned), so no "
            "other thread can ever end the wait" % what)

    class Lock:
        """A lock for the sandbox's one thread: acquiring it while it is
        held raises RuntimeError instead of waiting forever (no other
        thread can release it); with a timeout, it sleeps the timeout."""

        __slots__ = ("_lock", "__weakref__")

        def __init__(self):
            self._lock = allocate()

        def acquire(self, blocking=True, timeout=-1):
            if self._lock.acquire(False):
                return True
            if not blocking:
                if timeout != -1:
                    raise ValueError("can't specify a timeout for a non-blocking call")
                return False
            if timeout < 0:
                if timeout != -1:
                    raise ValueError("timeout value must be a non-negative number")
                if sys._getframe(1).f_code is m.Condition.wait.__code__:
                    raise forever("this wait (on a Condition, Event, Semaphore, Barrier or queue)")
                raise forever("acquiring a Lock that is held")
            time.sleep(timeout)
            return self._lock.acquire(False)

        def release(self):
            self._lock.release()

        def locked(self):
            return self._lock.locked()

        def __enter__(self):
            return self.acquire()

        def __exit__(self, *exc):
            self._lock.release()

        def _at_fork_reinit(self):
            self._lock._at_fork_reinit()

        acquire_lock, release_lock, locked_lock = acquire, release, locked

        def __repr__(self):
            return "<%s %s.%s object at %s>" % (
                "locked" if self.locked() else "unlocked", m.__name__, type(self).__name__, hex(id(self)))

    idents = iter(range(1 << 20, 1 << 62))

    def start(self):
        if not self._initialized:
            raise RuntimeError("thread.__init__() not called")
        if self._started.is_set():
            raise RuntimeError("threads can only be started once")
        self._ident = next(idents)
        if hasattr(self, "_native_id"):
            self._native_id = self._ident
        me = m.get_ident()
        caller = m._active.get(me)
        m._active[me] = self
        running.append(self)
        self._started.set()
        try:
            self.run()
        except BaseException as e:
            if getattr(e, "_fumehood_signal", False):
                raise  # a signal handler's: the program's (startup_fix_signal.py)
            # As a thread's end does: SystemExit ends it quietly.
            self._invoke_excepthook(self)
        finally:
            running.pop()
            if caller is None:
                m._active.pop(me, None)
            else:
                m._active[me] = caller
            if hasattr(self, "_handle"):  # 3.13: a handle that is done
                self._handle = m._make_thread_handle(self._ident)
                self._handle._set_done()
            else:
                self._is_stopped, self._tstate_lock = True, None

    def join(self, timeout=None):
        if not self._initialized:
            raise RuntimeError("Thread.__init__() not called")
        if not self._started.is_set():
            raise RuntimeError("cannot join thread before it is started")
        if self is m.current_thread():
            raise RuntimeError("cannot join current thread")
        if any(t is self for t in running):
            if timeout is None:
                raise forever("joining %s, which is waiting for this thread to return," % self.name)
            time.sleep(max(timeout, 0))

    def is_alive(self):
        return self._started.is_set() and any(t is self for t in running)

    start.__doc__, join.__doc__, is_alive.__doc__ = m.Thread.start.__doc__, m.Thread.join.__doc__, m.Thread.is_alive.__doc__
    m.Thread.start, m.Thread.join, m.Thread.is_alive = start, join, is_alive
    m.Lock = m._allocate_lock = Lock

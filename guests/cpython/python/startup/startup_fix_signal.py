# fumehood's fix of the signal module, compiled by startup.py when it is
# imported, in a namespace holding sys and TIMER (the built guest's timer,
# or None); patch(m) fixes it after it executed.

def patch(m):
    # SIGALRM at the time asked: signal.alarm, setitimer and getitimer
    # (ITIMER_REAL) keep the alarm in TIMER, the built guest's driver's
    # memory (when SIGALRM is due on the run's monotonic clock, and its
    # interval, in ns), which the host reads at its fuel checks and
    # sleeps; when it is due, the host trips the signal and the handler
    # runs at the interpreter's next check. An alarm ends with its run.
    # Without TIMER (the npm guest) they raise OSError.
    import errno, time
    from math import ceil

    m.ITIMER_REAL, m.ITIMER_VIRTUAL, m.ITIMER_PROF = 0, 1, 2

    class ItimerError(OSError):
        pass

    m.ItimerError = ItimerError
    t = TIMER.cast("q") if TIMER is not None else None
    sleeps = []  # time.sleep, once an alarm was set

    def timer(what):
        if t is None:
            raise OSError(errno.ENOTSUP, "signal.%s: this Python guest cannot deliver signals "
                                         "(fumehood's built guest can)" % what)
        return t

    def left(t):
        return max(t[0] - time.monotonic_ns(), 1) if t[0] else 0

    def arm(t, at, interval):
        if not sleeps:
            # A sleep the alarm wakes goes on after the handler returns, as
            # the kernel restarts it.
            sleep = time.sleep
            sleeps.append(sleep)

            def resumed(secs):
                end = time.monotonic() + secs
                sleep(secs)
                while (rest := end - time.monotonic()) > 0:
                    sleep(rest)

            resumed.__doc__ = sleep.__doc__
            time.sleep = resumed
        t[1] = interval
        t[0] = at

    def setitimer(which, seconds, interval=0.0):
        """Arm the timer which (ITIMER_REAL only in the sandbox): SIGALRM
        after seconds, then every interval seconds if not 0; seconds 0
        disarms it. Return the old (delay, interval)."""
        t = timer("setitimer")
        if which != m.ITIMER_REAL:
            raise ItimerError(errno.EINVAL, "signal.setitimer: the sandbox has ITIMER_REAL only")
        if seconds < 0 or interval < 0:
            raise ItimerError(errno.EINVAL, "Invalid argument")
        old = (left(t) / 1e9, t[1] / 1e9)
        ns = max(ceil(seconds * 1e9), 0)
        arm(t, time.monotonic_ns() + ns if ns else 0, ceil(interval * 1e9) if ns else 0)
        return old

    def getitimer(which):
        """Return the timer's (delay, interval) (ITIMER_REAL only in the sandbox)."""
        t = timer("getitimer")
        if which != m.ITIMER_REAL:
            raise ItimerError(errno.EINVAL, "signal.getitimer: the sandbox has ITIMER_REAL only")
        return (left(t) / 1e9, t[1] / 1e9)

    def alarm(seconds):
        """Arrange for SIGALRM to arrive after the given number of seconds
        (0 cancels); return the seconds left of the previous alarm."""
        t = timer("alarm")
        seconds = seconds.__index__()
        if seconds < 0:
            raise OverflowError("signal.alarm: seconds must be non-negative")
        old = (left(t) + 999_999_999) // 1_000_000_000
        arm(t, time.monotonic_ns() + seconds * 1_000_000_000 if seconds else 0, 0)
        return old

    def pause():
        """Wait until a signal arrives: in the sandbox, the alarm."""
        t = timer("pause")
        if not t[0]:
            raise RuntimeError("signal.pause would wait forever: no alarm is set and the "
                               "sandbox delivers no other signal")
        time.sleep(left(t) / 1e9 + 0.001)

    m.setitimer, m.getitimer, m.alarm, m.pause = setitimer, getitimer, alarm, pause

    # An exception a handler raises is the program's, as in the main thread,
    # even while a thread's or process's target runs inline (its
    # exception would end only that target): the handler is wrapped to
    # mark it, and the inline Thread.start and Process.start raise a
    # marked exception on.
    install, getsignal = m.signal, m.getsignal
    wrapped = {}  # wrapper -> the handler it wraps

    def given(handler):
        try:
            return wrapped.get(handler, handler)
        except TypeError:  # unhashable
            return handler

    def signal(signalnum, handler):
        if callable(handler):
            inner = handler

            def handler(signum, frame):
                try:
                    return inner(signum, frame)
                except BaseException as e:
                    e._fumehood_signal = True
                    raise

            wrapped[handler] = inner
        old = install(signalnum, handler)
        try:
            return wrapped.pop(old, old)
        except TypeError:
            return old

    def get(signalnum):
        return given(getsignal(signalnum))

    signal.__doc__, get.__doc__ = install.__doc__, getsignal.__doc__
    m.signal, m.getsignal = signal, get

# fumehood's fix of the multiprocessing.context module, compiled by startup.py when it is
# imported, in a namespace holding sys and run; patch(m) fixes it after it
# executed.

def patch(m):
    # multiprocessing.Process runs its target at start, in the calling
    # thread, through Popen below (start sets it on the process, as a
    # child's handle): exitcode, join, is_alive and pid then work as
    # usual. Pool, Queue, Lock, Value, Pipe and the like are the sandbox's
    # (startup_multiprocessing.py), Pipe's through BaseContext.Pipe.
    from multiprocessing import process
    import itertools
    pids = itertools.count(1000)

    def run(p):
        # What a child's _bootstrap does around run(), in this process.
        saved = process._current_process
        process._current_process = p
        try:
            p.run()
            return 0
        except SystemExit as e:
            if e.code is None:
                return 0
            if isinstance(e.code, int):
                return e.code
            sys.stderr.write(str(e.code) + "\n")
            return 1
        except Exception as e:
            if getattr(e, "_fumehood_signal", False):
                raise  # a signal handler's: the program's (startup_fix_signal.py)
            import traceback
            sys.stderr.write("Process %s:\n" % p.name)
            traceback.print_exc()
            return 1
        finally:
            process._current_process = saved
            for f in (sys.stdout, sys.stderr):
                if f is not None:
                    f.flush()

    class Popen:
        method = "inline"

        def __init__(self, process_obj):
            self.pid, self.returncode, self.sentinel = next(pids), None, None
            self.returncode = run(process_obj)

        def poll(self, flag=0):
            return self.returncode

        def wait(self, timeout=None):
            return self.returncode

        def terminate(self):
            pass

        kill = terminate

        def close(self):
            pass

    for name in ("Process", "ForkProcess", "SpawnProcess", "ForkServerProcess"):
        cls = getattr(m, name, None)
        if cls is not None:
            cls._Popen = staticmethod(Popen)

    def Pipe(self, duplex=True):
        """Returns two connection object connected by a pipe"""
        from multiprocessing.queues import Pipe
        return Pipe(duplex)

    m.BaseContext.Pipe = Pipe

"""mmap for the sandbox (fumehood).

WASI cannot map files, so a map here is a copy: mmap reads the file's
bytes when it is made, reads and writes go to the copy, and flush and
close (and the end of a with block) write the copy back to the file, for
a map that may write to it (ACCESS_WRITE, or the default with PROT_WRITE
and MAP_SHARED) and was written to. A write to the file through another
descriptor is not seen by a map made before it. WASI has no dup, so the
map writes back through the descriptor it was made from: a map written
to must be flushed or closed before its file is (else flush raises
OSError, EBADF, and writes nothing).
"""
import os as _os

__all__ = ["mmap", "error", "ACCESS_DEFAULT", "ACCESS_READ", "ACCESS_WRITE", "ACCESS_COPY",
           "PAGESIZE", "ALLOCATIONGRANULARITY", "MAP_SHARED", "MAP_PRIVATE", "MAP_ANON",
           "MAP_ANONYMOUS", "PROT_READ", "PROT_WRITE", "PROT_EXEC", "MADV_NORMAL",
           "MADV_RANDOM", "MADV_SEQUENTIAL", "MADV_WILLNEED", "MADV_DONTNEED"]

error = OSError
ACCESS_DEFAULT, ACCESS_READ, ACCESS_WRITE, ACCESS_COPY = 0, 1, 2, 3
PAGESIZE = ALLOCATIONGRANULARITY = 4096
MAP_SHARED, MAP_PRIVATE, MAP_ANON = 1, 2, 0x20
MAP_ANONYMOUS = MAP_ANON
PROT_READ, PROT_WRITE, PROT_EXEC = 1, 2, 4
MADV_NORMAL, MADV_RANDOM, MADV_SEQUENTIAL, MADV_WILLNEED, MADV_DONTNEED = 0, 1, 2, 3, 4


class mmap:
    """mmap(fileno, length, flags=MAP_SHARED, prot=PROT_WRITE|PROT_READ,
    access=ACCESS_DEFAULT, offset=0): a copy of length bytes of the file
    from offset (0: to its end), written back on flush and close when the
    map may write to the file; fileno -1 maps anonymous memory."""

    def __init__(self, fileno, length, flags=MAP_SHARED, prot=PROT_WRITE | PROT_READ,
                 access=ACCESS_DEFAULT, offset=0, *, trackfd=True):
        if length < 0:
            raise OverflowError("memory mapped length must be positive")
        if offset < 0:
            raise OverflowError("memory mapped offset must be positive")
        if offset % ALLOCATIONGRANULARITY:
            raise OSError(22, "Invalid argument")
        if access != ACCESS_DEFAULT and (flags != MAP_SHARED or prot != PROT_WRITE | PROT_READ):
            raise ValueError("mmap can't specify both access and flags, prot.")
        if access not in (ACCESS_DEFAULT, ACCESS_READ, ACCESS_WRITE, ACCESS_COPY):
            raise ValueError("mmap invalid access parameter.")
        if access == ACCESS_DEFAULT:
            if not prot & PROT_WRITE:
                access = ACCESS_READ
            elif flags & MAP_PRIVATE:
                access = ACCESS_COPY
            else:
                access = ACCESS_WRITE
        self._access, self._offset, self._pos, self._fd, self._own = access, offset, 0, -1, False
        self._dirty = False
        if fileno == -1:
            if not length:
                raise ValueError("cannot mmap an empty file")
            self._data = bytearray(length)
            return
        st = _os.fstat(fileno)
        size, self._file = st.st_size, (st.st_dev, st.st_ino)
        if not length:
            if not size:
                raise ValueError("cannot mmap an empty file")
            if offset >= size:
                raise ValueError("mmap offset is greater than file size")
            length = size - offset
        elif offset > size or size - offset < length:
            if access == ACCESS_READ or access == ACCESS_COPY:
                raise ValueError("mmap length is greater than file size")
            _os.ftruncate(fileno, offset + length)
        data = bytearray()
        while len(data) < length:
            chunk = _os.pread(fileno, length - len(data), offset + len(data))
            if not chunk:
                break
            data += chunk
        data.extend(bytes(length - len(data)))
        self._data = data
        self._fd = fileno
        if trackfd:
            try:
                self._fd, self._own = _os.dup(fileno), True
            except OSError:
                pass  # then the file must stay open until the map is closed

    def _check(self):
        if self._data is None:
            raise ValueError("mmap closed or invalid")
        return self._data

    def _writable(self):
        data = self._check()
        if self._access == ACCESS_READ:
            raise TypeError("mmap can't modify a readonly memory map.")
        self._dirty = True
        return data

    @property
    def closed(self):
        return self._data is None

    def close(self):
        """Write the map back to the file (see flush) and release it."""
        if self._data is None:
            return
        try:
            self.flush()
        finally:
            self._data = None
            if self._own:
                _os.close(self._fd)
            self._fd, self._own = -1, False

    def flush(self, offset=0, size=None):
        """Write the map's bytes from offset (size of them; all by default)
        back to the file, when the map may write to it."""
        data = self._check()
        if size is None:
            size = len(data) - offset
        if offset < 0 or size < 0 or offset + size > len(data):
            raise ValueError("flush values out of range")
        if self._access != ACCESS_WRITE or self._fd < 0 or not self._dirty:
            return
        try:
            st = _os.fstat(self._fd)
            same = (st.st_dev, st.st_ino) == self._file
        except OSError:
            same = False
        if not same:
            raise OSError(9, "mmap: the file was closed before the map was flushed (in the "
                             "sandbox a map writes back through the descriptor it was made from)")
        if offset == 0 and size == len(data):
            self._dirty = False
        view = memoryview(data)[offset:offset + size]
        done = 0
        while done < size:
            done += _os.pwrite(self._fd, view[done:], self._offset + offset + done)

    def __len__(self):
        return len(self._check())

    def size(self):
        """The size of the file (of the map, for an anonymous one)."""
        data = self._check()
        return _os.fstat(self._fd).st_size if self._fd >= 0 else len(data)

    def tell(self):
        self._check()
        return self._pos

    def seek(self, pos, whence=0):
        data = self._check()
        if whence not in (0, 1, 2):
            raise ValueError("unknown seek type")
        where = (0, self._pos, len(data))[whence] + pos
        if not 0 <= where <= len(data):
            raise ValueError("seek out of range")
        self._pos = where
        return where

    def seekable(self):
        return True

    def read(self, n=None):
        data = self._check()
        end = len(data) if n is None or n < 0 else min(self._pos + n, len(data))
        out = bytes(data[self._pos:end])
        self._pos = max(end, self._pos)
        return out

    def read_byte(self):
        data = self._check()
        if self._pos >= len(data):
            raise ValueError("read byte out of range")
        self._pos += 1
        return data[self._pos - 1]

    def readline(self):
        data = self._check()
        end = data.find(b"\n", self._pos)
        end = len(data) if end < 0 else end + 1
        out = bytes(data[self._pos:end])
        self._pos = end
        return out

    def write(self, b):
        data = self._writable()
        b = memoryview(b).cast("B")
        if self._pos + len(b) > len(data):
            raise ValueError("data out of range")
        data[self._pos:self._pos + len(b)] = b
        self._pos += len(b)
        return len(b)

    def write_byte(self, byte):
        data = self._writable()
        if self._pos >= len(data):
            raise ValueError("write byte out of range")
        data[self._pos] = byte
        self._pos += 1

    def find(self, sub, start=None, end=None):
        data = self._check()
        return data.find(sub, self._pos if start is None else start, end)

    def rfind(self, sub, start=None, end=None):
        data = self._check()
        return data.rfind(sub, self._pos if start is None else start, end)

    def move(self, dest, src, count):
        data = self._writable()
        if min(dest, src, count) < 0 or max(dest, src) + count > len(data):
            raise ValueError("source, destination, or count out of range")
        data[dest:dest + count] = data[src:src + count]

    def resize(self, newsize):
        """Change the map's size, and the file's for a map that writes to it."""
        data = self._writable()
        if self._access == ACCESS_COPY:
            raise TypeError("mmap can't resize a copy-on-write memory map.")
        if newsize < 0:
            raise ValueError("new size out of range")
        if self._fd >= 0:
            self.flush()
            _os.ftruncate(self._fd, self._offset + newsize)
        if newsize < len(data):
            del data[newsize:]
        else:
            data.extend(bytes(newsize - len(data)))
        self._pos = min(self._pos, newsize)

    def madvise(self, option, start=0, length=None):
        self._check()

    def __getitem__(self, key):
        data = self._check()
        if isinstance(key, slice):
            return bytes(data[key])
        return data[key]

    def __setitem__(self, key, value):
        data = self._writable()
        if isinstance(key, slice):
            value = memoryview(value).cast("B")
            if len(range(*key.indices(len(data)))) != len(value):
                raise IndexError("mmap slice assignment is wrong size")
            data[key] = value
        else:
            if not -len(data) <= key < len(data):
                raise IndexError("mmap index out of range")
            data[key] = value

    def __delitem__(self, key):
        raise TypeError("mmap object doesn't support item deletion")

    def __iter__(self):
        data = self._check()
        return (data[i:i + 1] for i in range(len(data)))

    def __contains__(self, sub):
        return sub in self._check()

    def __buffer__(self, flags):
        view = memoryview(self._check())
        if self._access == ACCESS_READ:
            return view.toreadonly()
        self._dirty = True  # it may be written through the view
        return view

    def __enter__(self):
        self._check()
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        if getattr(self, "_data", None) is not None:
            try:
                self.close()
            except Exception:
                pass

    def __repr__(self):
        if self._data is None:
            return "<mmap.mmap closed=True>"
        names = {ACCESS_READ: "ACCESS_READ", ACCESS_WRITE: "ACCESS_WRITE", ACCESS_COPY: "ACCESS_COPY"}
        return "<mmap.mmap closed=False, access=%s, length=%d, pos=%d, offset=%d>" % (
            names[self._access], len(self._data), self._pos, self._offset)

"""pwd for the sandbox (fumehood): one user, "sandbox", uid 0, home /work."""

__all__ = ["getpwuid", "getpwnam", "getpwall", "struct_passwd"]


class struct_passwd(tuple):
    """pwd.struct_passwd: (pw_name, pw_passwd, pw_uid, pw_gid, pw_gecos, pw_dir, pw_shell)."""

    n_fields = n_sequence_fields = 7
    pw_name = property(lambda self: self[0])
    pw_passwd = property(lambda self: self[1])
    pw_uid = property(lambda self: self[2])
    pw_gid = property(lambda self: self[3])
    pw_gecos = property(lambda self: self[4])
    pw_dir = property(lambda self: self[5])
    pw_shell = property(lambda self: self[6])

    def __repr__(self):
        names = ("pw_name", "pw_passwd", "pw_uid", "pw_gid", "pw_gecos", "pw_dir", "pw_shell")
        return "pwd.struct_passwd(%s)" % ", ".join("%s=%r" % kv for kv in zip(names, self))


_entry = struct_passwd(("sandbox", "x", 0, 0, "sandbox user", "/work", "/bin/sh"))


def getpwuid(uid):
    """The sandbox user for uid 0; KeyError otherwise."""
    if uid != 0:
        raise KeyError("getpwuid(): uid not found: %r" % (uid,))
    return _entry


def getpwnam(name):
    """The sandbox user for its name; KeyError otherwise."""
    if name != _entry.pw_name:
        raise KeyError("getpwnam(): name not found: %r" % (name,))
    return _entry


def getpwall():
    """A list of the one user."""
    return [_entry]

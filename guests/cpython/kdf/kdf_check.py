"""Checks _fumehood_kdf.c's hashes, PBKDF2 and scrypt against the host
Python's hashlib (OpenSSL). Usage: python3 kdf_check.py LIBKDF.so"""
import ctypes
import hashlib
import random
import sys

L = ctypes.CDLL(sys.argv[1])
sz, u64, p = ctypes.c_size_t, ctypes.c_uint64, ctypes.c_char_p
L.t_hash.argtypes = [p, p, sz, p]
L.t_pbkdf2.argtypes = [p, p, sz, p, sz, ctypes.c_ulong, p, sz]
L.t_scrypt.argtypes = [p, sz, p, sz, u64, u64, u64, p, sz]
rnd = random.Random(1)
n = 0
for name in ["sha1", "sha224", "sha256", "sha384", "sha512"]:
    for size in list(range(0, 300)) + [1000, 4096]:
        m = rnd.randbytes(size)
        out = ctypes.create_string_buffer(64)
        d = L.t_hash(name.encode(), m, size, out)
        assert out.raw[:d] == hashlib.new(name, m).digest(), (name, size)
        n += 1
    for pl in [0, 1, 20, 64, 65, 127, 128, 129, 200]:
        for it in [1, 2, 3, 50]:
            for dk in [1, 20, 32, 33, 64, 100]:
                pw, salt = rnd.randbytes(pl), rnd.randbytes(rnd.randrange(40))
                out = ctypes.create_string_buffer(dk)
                assert L.t_pbkdf2(name.encode(), pw, pl, salt, len(salt), it, out, dk) == 0
                assert out.raw == hashlib.pbkdf2_hmac(name, pw, salt, it, dk), (name, pl, it, dk)
                n += 1
assert L.t_pbkdf2(b"md5", b"", 0, b"", 0, 1, ctypes.create_string_buffer(16), 16) == -1
for N, r, par, dk in [(2, 1, 1, 64), (16, 1, 1, 64), (1024, 8, 16, 64), (16384, 8, 1, 64), (4, 3, 2, 17), (256, 2, 3, 100)]:
    pw, salt = b"password", b"NaCl"
    out = ctypes.create_string_buffer(dk)
    assert L.t_scrypt(pw, len(pw), salt, len(salt), N, r, par, out, dk) == 0
    assert out.raw == hashlib.scrypt(pw, salt=salt, n=N, r=r, p=par, dklen=dk, maxmem=2**30), (N, r, par)
    n += 1
print("ok", n)

/* The portable core of _fumehood_kdf.c with entry points for kdf_check.py,
 * which loads it natively with ctypes and compares with OpenSSL. */
#define KDF_NO_PYTHON
#include "_fumehood_kdf.c"

int t_pbkdf2(const char *name, const uint8_t *pw, size_t pwl, const uint8_t *s, size_t sl,
             unsigned long it, uint8_t *out, size_t dk) {
    const kdf_hash *h = kdf_find(name);
    if (!h) return -1;
    kdf_pbkdf2(h, pw, pwl, s, sl, it, out, dk);
    return 0;
}

int t_scrypt(const uint8_t *pw, size_t pwl, const uint8_t *s, size_t sl, uint64_t n, uint64_t r,
             uint64_t p, uint8_t *out, size_t dk) {
    return kdf_scrypt(pw, pwl, s, sl, n, r, p, out, dk);
}

int t_hash(const char *name, const uint8_t *m, size_t l, uint8_t *out) {
    kdf_ctx c;
    const kdf_hash *h = kdf_find(name);
    if (!h) return -1;
    kdf_init(&c, h);
    kdf_update(&c, m, l);
    kdf_final(&c, out);
    return (int)h->digest;
}

uint64_t t_scrypt_mem(uint64_t n, uint64_t r, uint64_t p) { return scrypt_mem(n, r, p); }

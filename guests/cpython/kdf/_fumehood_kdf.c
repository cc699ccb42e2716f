/*
 * _fumehood_kdf: hashlib.pbkdf2_hmac and hashlib.scrypt for the fumehood
 * CPython guest, which is built without OpenSSL (CPython 3.13 takes both
 * from _hashlib, OpenSSL's binding, and has no fallback).
 *
 * Self-contained: SHA-1, SHA-224/256 and SHA-384/512 (FIPS 180-4), HMAC
 * (RFC 2104), PBKDF2 (RFC 8018) and scrypt (RFC 7914), written for this
 * module. The functions take the arguments of their _hashlib namesakes and
 * raise the same exceptions; pbkdf2_hmac supports sha1, sha224, sha256,
 * sha384 and sha512 (any other name is "unsupported hash type").
 *
 * The core is plain C with no Python in it (KDF_NO_PYTHON builds it alone,
 * for the standalone test against test vectors).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- SHA-1, SHA-256, SHA-512 ------------------------------------------ */

typedef struct {
    uint32_t h[8];
    uint64_t len;
    uint8_t buf[64];
    size_t n;
} kdf_ctx32;

typedef struct {
    uint64_t h[8];
    uint64_t len;
    uint8_t buf[128];
    size_t n;
} kdf_ctx64;

static uint32_t rol32(uint32_t x, int k) { return (x << k) | (x >> (32 - k)); }
static uint32_t ror32(uint32_t x, int k) { return (x >> k) | (x << (32 - k)); }
static uint64_t ror64(uint64_t x, int k) { return (x >> k) | (x << (64 - k)); }

static uint32_t be32(const uint8_t *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}
static uint64_t be64(const uint8_t *p) { return ((uint64_t)be32(p) << 32) | be32(p + 4); }
static void put32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24); p[1] = (uint8_t)(v >> 16); p[2] = (uint8_t)(v >> 8); p[3] = (uint8_t)v;
}
static void put64(uint8_t *p, uint64_t v) { put32(p, (uint32_t)(v >> 32)); put32(p + 4, (uint32_t)v); }

static void sha1_block(uint32_t *h, const uint8_t *p) {
    uint32_t w[80], a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], t;
    for (int i = 0; i < 16; i++) w[i] = be32(p + 4 * i);
    for (int i = 16; i < 80; i++) w[i] = rol32(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
    for (int i = 0; i < 80; i++) {
        uint32_t f, k;
        if (i < 20) { f = (b & c) | (~b & d); k = 0x5A827999; }
        else if (i < 40) { f = b ^ c ^ d; k = 0x6ED9EBA1; }
        else if (i < 60) { f = (b & c) | (b & d) | (c & d); k = 0x8F1BBCDC; }
        else { f = b ^ c ^ d; k = 0xCA62C1D6; }
        t = rol32(a, 5) + f + e + k + w[i];
        e = d; d = c; c = rol32(b, 30); b = a; a = t;
    }
    h[0] += a; h[1] += b; h[2] += c; h[3] += d; h[4] += e;
}

static const uint32_t K256[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static void sha256_block(uint32_t *h, const uint8_t *p) {
    uint32_t w[64], s[8];
    for (int i = 0; i < 16; i++) w[i] = be32(p + 4 * i);
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = ror32(w[i - 15], 7) ^ ror32(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = ror32(w[i - 2], 17) ^ ror32(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    memcpy(s, h, sizeof s);
    for (int i = 0; i < 64; i++) {
        uint32_t S1 = ror32(s[4], 6) ^ ror32(s[4], 11) ^ ror32(s[4], 25);
        uint32_t ch = (s[4] & s[5]) ^ (~s[4] & s[6]);
        uint32_t t1 = s[7] + S1 + ch + K256[i] + w[i];
        uint32_t S0 = ror32(s[0], 2) ^ ror32(s[0], 13) ^ ror32(s[0], 22);
        uint32_t mj = (s[0] & s[1]) ^ (s[0] & s[2]) ^ (s[1] & s[2]);
        uint32_t t2 = S0 + mj;
        s[7] = s[6]; s[6] = s[5]; s[5] = s[4]; s[4] = s[3] + t1;
        s[3] = s[2]; s[2] = s[1]; s[1] = s[0]; s[0] = t1 + t2;
    }
    for (int i = 0; i < 8; i++) h[i] += s[i];
}

static const uint64_t K512[80] = {
    0x428a2f98d728ae22ULL, 0x7137449123ef65cdULL, 0xb5c0fbcfec4d3b2fULL, 0xe9b5dba58189dbbcULL,
    0x3956c25bf348b538ULL, 0x59f111f1b605d019ULL, 0x923f82a4af194f9bULL, 0xab1c5ed5da6d8118ULL,
    0xd807aa98a3030242ULL, 0x12835b0145706fbeULL, 0x243185be4ee4b28cULL, 0x550c7dc3d5ffb4e2ULL,
    0x72be5d74f27b896fULL, 0x80deb1fe3b1696b1ULL, 0x9bdc06a725c71235ULL, 0xc19bf174cf692694ULL,
    0xe49b69c19ef14ad2ULL, 0xefbe4786384f25e3ULL, 0x0fc19dc68b8cd5b5ULL, 0x240ca1cc77ac9c65ULL,
    0x2de92c6f592b0275ULL, 0x4a7484aa6ea6e483ULL, 0x5cb0a9dcbd41fbd4ULL, 0x76f988da831153b5ULL,
    0x983e5152ee66dfabULL, 0xa831c66d2db43210ULL, 0xb00327c898fb213fULL, 0xbf597fc7beef0ee4ULL,
    0xc6e00bf33da88fc2ULL, 0xd5a79147930aa725ULL, 0x06ca6351e003826fULL, 0x142929670a0e6e70ULL,
    0x27b70a8546d22ffcULL, 0x2e1b21385c26c926ULL, 0x4d2c6dfc5ac42aedULL, 0x53380d139d95b3dfULL,
    0x650a73548baf63deULL, 0x766a0abb3c77b2a8ULL, 0x81c2c92e47edaee6ULL, 0x92722c851482353bULL,
    0xa2bfe8a14cf10364ULL, 0xa81a664bbc423001ULL, 0xc24b8b70d0f89791ULL, 0xc76c51a30654be30ULL,
    0xd192e819d6ef5218ULL, 0xd69906245565a910ULL, 0xf40e35855771202aULL, 0x106aa07032bbd1b8ULL,
    0x19a4c116b8d2d0c8ULL, 0x1e376c085141ab53ULL, 0x2748774cdf8eeb99ULL, 0x34b0bcb5e19b48a8ULL,
    0x391c0cb3c5c95a63ULL, 0x4ed8aa4ae3418acbULL, 0x5b9cca4f7763e373ULL, 0x682e6ff3d6b2b8a3ULL,
    0x748f82ee5defb2fcULL, 0x78a5636f43172f60ULL, 0x84c87814a1f0ab72ULL, 0x8cc702081a6439ecULL,
    0x90befffa23631e28ULL, 0xa4506cebde82bde9ULL, 0xbef9a3f7b2c67915ULL, 0xc67178f2e372532bULL,
    0xca273eceea26619cULL, 0xd186b8c721c0c207ULL, 0xeada7dd6cde0eb1eULL, 0xf57d4f7fee6ed178ULL,
    0x06f067aa72176fbaULL, 0x0a637dc5a2c898a6ULL, 0x113f9804bef90daeULL, 0x1b710b35131c471bULL,
    0x28db77f523047d84ULL, 0x32caab7b40c72493ULL, 0x3c9ebe0a15c9bebcULL, 0x431d67c49c100d4cULL,
    0x4cc5d4becb3e42b6ULL, 0x597f299cfc657e2aULL, 0x5fcb6fab3ad6faecULL, 0x6c44198c4a475817ULL,
};

static void sha512_block(uint64_t *h, const uint8_t *p) {
    uint64_t w[80], s[8];
    for (int i = 0; i < 16; i++) w[i] = be64(p + 8 * i);
    for (int i = 16; i < 80; i++) {
        uint64_t s0 = ror64(w[i - 15], 1) ^ ror64(w[i - 15], 8) ^ (w[i - 15] >> 7);
        uint64_t s1 = ror64(w[i - 2], 19) ^ ror64(w[i - 2], 61) ^ (w[i - 2] >> 6);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    memcpy(s, h, sizeof s);
    for (int i = 0; i < 80; i++) {
        uint64_t S1 = ror64(s[4], 14) ^ ror64(s[4], 18) ^ ror64(s[4], 41);
        uint64_t ch = (s[4] & s[5]) ^ (~s[4] & s[6]);
        uint64_t t1 = s[7] + S1 + ch + K512[i] + w[i];
        uint64_t S0 = ror64(s[0], 28) ^ ror64(s[0], 34) ^ ror64(s[0], 39);
        uint64_t mj = (s[0] & s[1]) ^ (s[0] & s[2]) ^ (s[1] & s[2]);
        uint64_t t2 = S0 + mj;
        s[7] = s[6]; s[6] = s[5]; s[5] = s[4]; s[4] = s[3] + t1;
        s[3] = s[2]; s[2] = s[1]; s[1] = s[0]; s[0] = t1 + t2;
    }
    for (int i = 0; i < 8; i++) h[i] += s[i];
}

/* A hash: its sizes, initial state and block function. */
typedef struct {
    const char *name;
    int wide;          /* 64-bit words (SHA-384/512) */
    int sha1;          /* SHA-1's block function */
    size_t block;      /* block size in bytes */
    size_t digest;     /* digest size in bytes */
    uint64_t iv[8];
} kdf_hash;

static const kdf_hash kdf_hashes[] = {
    {"sha1", 0, 1, 64, 20, {0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0}},
    {"sha224", 0, 0, 64, 28, {0xc1059ed8, 0x367cd507, 0x3070dd17, 0xf70e5939, 0xffc00b31, 0x68581511, 0x64f98fa7, 0xbefa4fa4}},
    {"sha256", 0, 0, 64, 32, {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19}},
    {"sha384", 1, 0, 128, 48, {0xcbbb9d5dc1059ed8ULL, 0x629a292a367cd507ULL, 0x9159015a3070dd17ULL, 0x152fecd8f70e5939ULL,
                               0x67332667ffc00b31ULL, 0x8eb44a8768581511ULL, 0xdb0c2e0d64f98fa7ULL, 0x47b5481dbefa4fa4ULL}},
    {"sha512", 1, 0, 128, 64, {0x6a09e667f3bcc908ULL, 0xbb67ae8584caa73bULL, 0x3c6ef372fe94f82bULL, 0xa54ff53a5f1d36f1ULL,
                               0x510e527fade682d1ULL, 0x9b05688c2b3e6c1fULL, 0x1f83d9abfb41bd6bULL, 0x5be0cd19137e2179ULL}},
};

/* One hash context of either width. */
typedef struct {
    const kdf_hash *hash;
    union { kdf_ctx32 c32; kdf_ctx64 c64; } u;
} kdf_ctx;

static void kdf_init(kdf_ctx *c, const kdf_hash *h) {
    memset(c, 0, sizeof *c);
    c->hash = h;
    for (int i = 0; i < 8; i++) {
        if (h->wide) c->u.c64.h[i] = h->iv[i];
        else c->u.c32.h[i] = (uint32_t)h->iv[i];
    }
}

static void kdf_block(kdf_ctx *c, const uint8_t *p) {
    if (c->hash->wide) sha512_block(c->u.c64.h, p);
    else if (c->hash->sha1) sha1_block(c->u.c32.h, p);
    else sha256_block(c->u.c32.h, p);
}

static void kdf_update(kdf_ctx *c, const uint8_t *p, size_t len) {
    size_t bs = c->hash->block;
    uint8_t *buf = c->hash->wide ? c->u.c64.buf : c->u.c32.buf;
    size_t *n = c->hash->wide ? &c->u.c64.n : &c->u.c32.n;
    if (c->hash->wide) c->u.c64.len += len; else c->u.c32.len += len;
    if (*n) {
        size_t k = bs - *n < len ? bs - *n : len;
        memcpy(buf + *n, p, k);
        *n += k; p += k; len -= k;
        if (*n < bs) return;
        kdf_block(c, buf);
        *n = 0;
    }
    for (; len >= bs; p += bs, len -= bs) kdf_block(c, p);
    memcpy(buf, p, len);
    *n = len;
}

static void kdf_final(kdf_ctx *c, uint8_t *out) {
    size_t bs = c->hash->block, lenbytes = c->hash->wide ? 16 : 8;
    uint64_t bits = (c->hash->wide ? c->u.c64.len : c->u.c32.len) * 8;
    uint8_t pad[256] = {0x80};
    size_t n = c->hash->wide ? c->u.c64.n : c->u.c32.n;
    size_t padlen = (n < bs - lenbytes ? bs - lenbytes - n : 2 * bs - lenbytes - n);
    uint8_t len[16] = {0};
    put64(len + lenbytes - 8, bits);
    kdf_update(c, pad, padlen);
    kdf_update(c, len, lenbytes);
    uint8_t full[64];
    for (int i = 0; i < 8; i++) {
        if (c->hash->wide) put64(full + 8 * i, c->u.c64.h[i]);
        else put32(full + 4 * i, c->u.c32.h[i]);
    }
    memcpy(out, full, c->hash->digest);
}

static const kdf_hash *kdf_find(const char *name) {
    for (size_t i = 0; i < sizeof kdf_hashes / sizeof kdf_hashes[0]; i++) {
        const char *a = kdf_hashes[i].name, *b = name;
        while (*a && (*b == *a || *b == *a - 'a' + 'A')) a++, b++;
        if (!*a && !*b) return &kdf_hashes[i];
    }
    return NULL;
}

/* ---- HMAC, PBKDF2 ------------------------------------------------------ */

typedef struct { kdf_ctx inner, outer; } kdf_hmac;

static void hmac_init(kdf_hmac *m, const kdf_hash *h, const uint8_t *key, size_t keylen) {
    uint8_t k[128] = {0}, pad[128];
    if (keylen > h->block) {
        kdf_ctx c;
        kdf_init(&c, h);
        kdf_update(&c, key, keylen);
        kdf_final(&c, k);
    } else {
        memcpy(k, key, keylen);
    }
    for (size_t i = 0; i < h->block; i++) pad[i] = k[i] ^ 0x36;
    kdf_init(&m->inner, h);
    kdf_update(&m->inner, pad, h->block);
    for (size_t i = 0; i < h->block; i++) pad[i] = k[i] ^ 0x5c;
    kdf_init(&m->outer, h);
    kdf_update(&m->outer, pad, h->block);
}

/* hmac computes HMAC(key, a || b) from the keyed state m. */
static void hmac(const kdf_hmac *m, const uint8_t *a, size_t alen, const uint8_t *b, size_t blen, uint8_t *out) {
    kdf_ctx c = m->inner;
    uint8_t d[64];
    kdf_update(&c, a, alen);
    if (blen) kdf_update(&c, b, blen);
    kdf_final(&c, d);
    c = m->outer;
    kdf_update(&c, d, m->inner.hash->digest);
    kdf_final(&c, out);
}

static void kdf_pbkdf2(const kdf_hash *h, const uint8_t *pw, size_t pwlen, const uint8_t *salt, size_t saltlen,
                       unsigned long iterations, uint8_t *out, size_t dklen) {
    kdf_hmac m;
    hmac_init(&m, h, pw, pwlen);
    size_t hl = h->digest;
    for (uint32_t block = 1; dklen > 0; block++) {
        uint8_t be[4], u[64], t[64];
        put32(be, block);
        hmac(&m, salt, saltlen, be, 4, u);
        memcpy(t, u, hl);
        for (unsigned long i = 1; i < iterations; i++) {
            hmac(&m, u, hl, NULL, 0, u);
            for (size_t j = 0; j < hl; j++) t[j] ^= u[j];
        }
        size_t k = dklen < hl ? dklen : hl;
        memcpy(out, t, k);
        out += k;
        dklen -= k;
    }
}

/* ---- scrypt ------------------------------------------------------------ */

static uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static void putle32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); p[2] = (uint8_t)(v >> 16); p[3] = (uint8_t)(v >> 24);
}

static void salsa20_8(uint32_t b[16]) {
    uint32_t x[16];
    memcpy(x, b, sizeof x);
#define R(a, k) rol32(a, k)
    for (int i = 0; i < 8; i += 2) {
        x[4] ^= R(x[0] + x[12], 7);  x[8] ^= R(x[4] + x[0], 9);
        x[12] ^= R(x[8] + x[4], 13); x[0] ^= R(x[12] + x[8], 18);
        x[9] ^= R(x[5] + x[1], 7);   x[13] ^= R(x[9] + x[5], 9);
        x[1] ^= R(x[13] + x[9], 13); x[5] ^= R(x[1] + x[13], 18);
        x[14] ^= R(x[10] + x[6], 7); x[2] ^= R(x[14] + x[10], 9);
        x[6] ^= R(x[2] + x[14], 13); x[10] ^= R(x[6] + x[2], 18);
        x[3] ^= R(x[15] + x[11], 7); x[7] ^= R(x[3] + x[15], 9);
        x[11] ^= R(x[7] + x[3], 13); x[15] ^= R(x[11] + x[7], 18);
        x[1] ^= R(x[0] + x[3], 7);   x[2] ^= R(x[1] + x[0], 9);
        x[3] ^= R(x[2] + x[1], 13);  x[0] ^= R(x[3] + x[2], 18);
        x[6] ^= R(x[5] + x[4], 7);   x[7] ^= R(x[6] + x[5], 9);
        x[4] ^= R(x[7] + x[6], 13);  x[5] ^= R(x[4] + x[7], 18);
        x[11] ^= R(x[10] + x[9], 7); x[8] ^= R(x[11] + x[10], 9);
        x[9] ^= R(x[8] + x[11], 13); x[10] ^= R(x[9] + x[8], 18);
        x[12] ^= R(x[15] + x[14], 7); x[13] ^= R(x[12] + x[15], 9);
        x[14] ^= R(x[13] + x[12], 13); x[15] ^= R(x[14] + x[13], 18);
    }
#undef R
    for (int i = 0; i < 16; i++) b[i] += x[i];
}

/* blockmix: B (2r 16-word blocks) -> Y, written back to B. */
static void blockmix(uint32_t *B, uint32_t *Y, size_t r) {
    uint32_t X[16];
    memcpy(X, B + (2 * r - 1) * 16, 64);
    for (size_t i = 0; i < 2 * r; i++) {
        for (int j = 0; j < 16; j++) X[j] ^= B[i * 16 + j];
        salsa20_8(X);
        /* Even blocks go to the first half, odd ones to the second. */
        memcpy(Y + ((i & 1) * r + i / 2) * 16, X, 64);
    }
    memcpy(B, Y, 128 * r);
}

/* romix mixes one 128r-byte block B with N*128r bytes of V and 256r of XY. */
static void romix(uint8_t *B, size_t r, uint64_t N, uint32_t *V, uint32_t *XY) {
    uint32_t *X = XY, *Y = XY + 32 * r;
    size_t words = 32 * r;
    for (size_t k = 0; k < words; k++) X[k] = le32(B + 4 * k);
    for (uint64_t i = 0; i < N; i++) {
        memcpy(V + i * words, X, 128 * r);
        blockmix(X, Y, r);
    }
    for (uint64_t i = 0; i < N; i++) {
        uint64_t j = X[(2 * r - 1) * 16] & (N - 1);
        for (size_t k = 0; k < words; k++) X[k] ^= V[j * words + k];
        blockmix(X, Y, r);
    }
    for (size_t k = 0; k < words; k++) putle32(B + 4 * k, X[k]);
}

/* kdf_scrypt returns 0, or -1 when it could not allocate its memory. The
 * caller has checked the parameters. */
static int kdf_scrypt(const uint8_t *pw, size_t pwlen, const uint8_t *salt, size_t saltlen,
                      uint64_t N, uint64_t r, uint64_t p, uint8_t *out, size_t dklen) {
    const kdf_hash *h = kdf_find("sha256");
    uint8_t *B = malloc(p * 128 * r);
    uint32_t *V = malloc(N * 128 * r);
    uint32_t *XY = malloc(256 * r);
    int ret = -1;
    if (B && V && XY) {
        kdf_pbkdf2(h, pw, pwlen, salt, saltlen, 1, B, p * 128 * r);
        for (uint64_t i = 0; i < p; i++) romix(B + i * 128 * r, r, N, V, XY);
        kdf_pbkdf2(h, pw, pwlen, B, p * 128 * r, 1, out, dklen);
        ret = 0;
    }
    free(B);
    free(V);
    free(XY);
    return ret;
}

/* scrypt_mem is the memory scrypt needs, as OpenSSL counts it (B and V),
 * or UINT64_MAX when it overflows. */
static uint64_t scrypt_mem(uint64_t N, uint64_t r, uint64_t p) {
    if (r == 0 || p == 0 || N > UINT64_MAX / 128 / r - 2 || p > UINT64_MAX / 128 / r) return UINT64_MAX;
    uint64_t b = 128 * r * p, v = 128 * r * (N + 2);
    return b > UINT64_MAX - v ? UINT64_MAX : b + v;
}

#ifndef KDF_NO_PYTHON
/* ---- the module -------------------------------------------------------- */

#define PY_SSIZE_T_CLEAN
#include "Python.h"

PyDoc_STRVAR(pbkdf2_hmac_doc,
"pbkdf2_hmac($module, /, hash_name, password, salt, iterations, dklen=None)\n--\n\n"
"Password based key derivation function 2 (PKCS #5 v2.0) with HMAC as\n"
"pseudorandom function, for sha1, sha224, sha256, sha384 and sha512\n"
"(fumehood's own implementation: the guest has no OpenSSL).");

static PyObject *
kdf_pbkdf2_hmac(PyObject *module, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"hash_name", "password", "salt", "iterations", "dklen", NULL};
    const char *name;
    Py_buffer pw = {NULL}, salt = {NULL};
    long iterations;
    PyObject *dklen_obj = Py_None, *res = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "sy*y*l|O:pbkdf2_hmac", kwlist,
                                     &name, &pw, &salt, &iterations, &dklen_obj)) {
        return NULL;
    }
    const kdf_hash *h = kdf_find(name);
    if (h == NULL) {
        PyErr_SetString(PyExc_ValueError, "unsupported hash type");
        goto done;
    }
    if (iterations < 1) {
        PyErr_SetString(PyExc_ValueError, "iteration value must be greater than 0.");
        goto done;
    }
    long dklen = (long)h->digest;
    if (dklen_obj != Py_None) {
        dklen = PyLong_AsLong(dklen_obj);
        if (dklen == -1 && PyErr_Occurred()) goto done;
    }
    if (dklen < 1) {
        PyErr_SetString(PyExc_ValueError, "key length must be greater than 0.");
        goto done;
    }
    if (dklen > INT_MAX) {
        PyErr_SetString(PyExc_OverflowError, "key length is too great.");
        goto done;
    }
    res = PyBytes_FromStringAndSize(NULL, dklen);
    if (res == NULL) goto done;
    kdf_pbkdf2(h, pw.buf, (size_t)pw.len, salt.buf, (size_t)salt.len, (unsigned long)iterations,
               (uint8_t *)PyBytes_AS_STRING(res), (size_t)dklen);
done:
    PyBuffer_Release(&pw);
    PyBuffer_Release(&salt);
    return res;
}

PyDoc_STRVAR(scrypt_doc,
"scrypt($module, /, password, *, salt, n, r, p, maxmem=0, dklen=64)\n--\n\n"
"scrypt password-based key derivation function (RFC 7914; fumehood's own\n"
"implementation: the guest has no OpenSSL).");

static PyObject *
kdf_scrypt_py(PyObject *module, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"password", "salt", "n", "r", "p", "maxmem", "dklen", NULL};
    Py_buffer pw = {NULL}, salt = {NULL};
    PyObject *n_obj = NULL, *r_obj = NULL, *p_obj = NULL, *res = NULL;
    long maxmem = 0, dklen = 64;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "y*|$y*O!O!O!ll:scrypt", kwlist,
                                     &pw, &salt, &PyLong_Type, &n_obj, &PyLong_Type, &r_obj,
                                     &PyLong_Type, &p_obj, &maxmem, &dklen)) {
        return NULL;
    }
    if (salt.buf == NULL) {
        PyErr_SetString(PyExc_TypeError, "salt is required");
        goto done;
    }
    if (n_obj == NULL || r_obj == NULL || p_obj == NULL) {
        PyErr_SetString(PyExc_TypeError, "n, r and p are required");
        goto done;
    }
    unsigned long n = PyLong_AsUnsignedLong(n_obj);
    if (n == (unsigned long)-1 && PyErr_Occurred()) {
        PyErr_SetString(PyExc_TypeError, "n is required and must be an unsigned int");
        goto done;
    }
    if (n < 2 || (n & (n - 1))) {
        PyErr_SetString(PyExc_ValueError, "n must be a power of 2.");
        goto done;
    }
    unsigned long r = PyLong_AsUnsignedLong(r_obj);
    if (r == (unsigned long)-1 && PyErr_Occurred()) {
        PyErr_SetString(PyExc_TypeError, "r is required and must be an unsigned int");
        goto done;
    }
    unsigned long p = PyLong_AsUnsignedLong(p_obj);
    if (p == (unsigned long)-1 && PyErr_Occurred()) {
        PyErr_SetString(PyExc_TypeError, "p is required and must be an unsigned int");
        goto done;
    }
    if (maxmem < 0 || maxmem > INT_MAX) {
        PyErr_Format(PyExc_ValueError, "maxmem must be positive and smaller than %d", INT_MAX);
        goto done;
    }
    if (dklen < 1 || dklen > INT_MAX) {
        PyErr_Format(PyExc_ValueError, "dklen must be greater than 0 and smaller than %d", INT_MAX);
        goto done;
    }
    /* OpenSSL's bounds: p <= (2^30 - 1) / r, N < 2^(128r/8), and memory
     * at most maxmem, 32 MiB when it is 0. */
    uint64_t limit = maxmem ? (uint64_t)maxmem : 32u << 20;
    if (r == 0 || p == 0 || p > ((1u << 30) - 1) / r || (16 * r < 64 && n >= (1ULL << (16 * r)))
        || scrypt_mem(n, r, p) > limit) {
        PyErr_SetString(PyExc_ValueError, "Invalid parameter combination for n, r, p, maxmem.");
        goto done;
    }
    res = PyBytes_FromStringAndSize(NULL, dklen);
    if (res == NULL) goto done;
    if (kdf_scrypt(pw.buf, (size_t)pw.len, salt.buf, (size_t)salt.len, n, r, p,
                   (uint8_t *)PyBytes_AS_STRING(res), (size_t)dklen) != 0) {
        Py_CLEAR(res);
        PyErr_NoMemory();
    }
done:
    PyBuffer_Release(&pw);
    PyBuffer_Release(&salt);
    return res;
}

static PyMethodDef kdf_methods[] = {
    {"pbkdf2_hmac", (PyCFunction)(void (*)(void))kdf_pbkdf2_hmac, METH_VARARGS | METH_KEYWORDS, pbkdf2_hmac_doc},
    {"scrypt", (PyCFunction)(void (*)(void))kdf_scrypt_py, METH_VARARGS | METH_KEYWORDS, scrypt_doc},
    {NULL, NULL, 0, NULL},
};

static PyModuleDef_Slot kdf_slots[] = {
    {Py_mod_multiple_interpreters, Py_MOD_PER_INTERPRETER_GIL_SUPPORTED},
    {Py_mod_gil, Py_MOD_GIL_NOT_USED},
    {0, NULL},
};

static struct PyModuleDef kdf_module = {
    PyModuleDef_HEAD_INIT, "_fumehood_kdf",
    "PBKDF2-HMAC and scrypt for hashlib in a guest built without OpenSSL.",
    0, kdf_methods, kdf_slots, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__fumehood_kdf(void)
{
    return PyModuleDef_Init(&kdf_module);
}
#endif /* KDF_NO_PYTHON */

/* The `sum` kernel as a user kernel: wrapping sum of the little-endian
 * 64-bit words of each descriptor, a tail of < 8 bytes zero-padded into one
 * last word. Chunked like the built-in (exports pfs_combine), so
 * `pfs exec --kernel user:sum.so` prints the same value as `--kernel sum`.
 * Build: cc -O2 -shared -fPIC -o sum.so sum.c */
#include <stdint.h>
#include <stddef.h>
#include <string.h>

uint64_t pfs_init(void) { return 0; }

uint64_t pfs_update(uint64_t state, const uint8_t *p, size_t n) {
    uint64_t a[4] = {0, 0, 0, 0};
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        for (int k = 0; k < 4; k++) {
            uint64_t w;
            memcpy(&w, p + i + 8 * k, 8); /* x86-64 and aarch64 are little-endian */
            a[k] += w;
        }
    }
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        a[0] += w;
    }
    if (i < n) {
        uint64_t w = 0;
        memcpy(&w, p + i, n - i);
        a[0] += w;
    }
    return state + a[0] + a[1] + a[2] + a[3];
}

uint64_t pfs_combine(uint64_t acc, uint64_t next) { return acc + next; }

/* Counts zero bytes, like the built-in `count:0x00`.
 * Build: cc -O2 -shared -fPIC -o count_zero.so count_zero.c */
#include <stdint.h>
#include <stddef.h>

uint64_t pfs_init(void) { return 0; }

uint64_t pfs_update(uint64_t state, const uint8_t *p, size_t n) {
    uint64_t c = 0;
    for (size_t i = 0; i < n; i++) c += (p[i] == 0);
    return state + c;
}

uint64_t pfs_combine(uint64_t acc, uint64_t next) { return acc + next; }

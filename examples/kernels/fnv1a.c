/* FNV-1a 64 over the whole stream, like the built-in `fnv1a64`. It exports
 * no pfs_combine: one state runs across every descriptor in order.
 * Build: cc -O2 -shared -fPIC -o fnv1a.so fnv1a.c */
#include <stdint.h>
#include <stddef.h>

uint64_t pfs_init(void) { return 0xcbf29ce484222325ULL; }

uint64_t pfs_update(uint64_t state, const uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++) {
        state ^= p[i];
        state *= 0x100000001b3ULL;
    }
    return state;
}

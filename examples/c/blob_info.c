/* Opens a blob through the packetfs C interface and prints its size,
 * fingerprint and first bytes; with a NAME argument the blob is named and
 * kept (a second run reuses it).
 *
 *   cc -I crates/pfs-ffi/include examples/c/blob_info.c -L target/debug -lpfs_ffi -o blob_info
 *   LD_LIBRARY_PATH=target/debug ./blob_info [NAME]
 */
#include <inttypes.h>
#include <stdio.h>

#include "packetfs.h"

int main(int argc, char **argv) {
    PfsBlobOptions options = pfs_blob_options_default();
    options.size = 4 << 20;
    options.seed = 42;
    if (argc > 1) {
        options.name = argv[1];
        options.keep = 1;
    }
    PfsBlob *blob = NULL;
    if (pfs_blob_open(&options, &blob) != PFS_STATUS_OK) {
        fprintf(stderr, "blob_info: %s\n", pfs_last_error());
        return 1;
    }
    uint8_t fingerprint[32];
    if (pfs_blob_fingerprint(blob, fingerprint) != PFS_STATUS_OK) {
        fprintf(stderr, "blob_info: %s\n", pfs_last_error());
        pfs_blob_close(blob);
        return 1;
    }
    const uint8_t *data = pfs_blob_data(blob);
    printf("packetfs %s\n", pfs_version());
    printf("len %" PRIu64 "\n", pfs_blob_len(blob));
    printf("fingerprint ");
    for (int i = 0; i < 32; i++) printf("%02x", fingerprint[i]);
    printf("\nfirst %02x %02x %02x %02x\n", data[0], data[1], data[2], data[3]);

    /* A bad call reports a status and a message instead of crashing. */
    PfsBlobOptions empty = pfs_blob_options_default();
    empty.size = 0;
    PfsBlob *none = NULL;
    PfsStatus status = pfs_blob_open(&empty, &none);
    printf("size 0: status %d: %s\n", (int)status, pfs_last_error());

    pfs_blob_close(blob);
    return 0;
}

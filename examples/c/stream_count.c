/* Streaming through the packetfs C interface: a subscriber thread and a
 * publisher over TCP loopback. Each gram carries a message, a reference
 * into the blob both sides hold, and a write the subscriber copies into
 * its blob (replication). The subscriber's callback sees every entry in
 * place (pointers into its blob or the received frame, no copy) and
 * checksums it; the publisher checksums what it sent; both must agree,
 * and the two blobs' fingerprints must be equal at the end.
 *
 *   cargo build -p pfs-ffi
 *   cc -std=c11 -pthread -I crates/pfs-ffi/include examples/c/stream_count.c \
 *      -L target/debug -lpfs_ffi -o stream_count
 *   LD_LIBRARY_PATH=target/debug ./stream_count
 *   LD_LIBRARY_PATH=target/release ./stream_count bench 4096   # MB/s of 64 KiB write grams
 */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "packetfs.h"

#define GRAMS 200
#define BLOB_SIZE (4u << 20)
#define WRITE_AT (1u << 20)
#define WRITE_LEN 256u

static uint64_t fnv(uint64_t h, const uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

struct seen {
    uint64_t grams, next_seq, entries, kinds[3], bytes, sum;
    int out_of_order;
};

static void on_gram(void *user, uint64_t seq, const PfsEntry *entries, size_t n) {
    struct seen *s = user;
    if (seq != s->next_seq) s->out_of_order = 1;
    s->next_seq = seq + 1;
    s->grams++;
    for (size_t i = 0; i < n; i++) {
        s->entries++;
        s->kinds[entries[i].kind]++;
        s->bytes += entries[i].len;
        s->sum = fnv(s->sum, entries[i].data, entries[i].len);
    }
}

/* The bench's callback: counts, touches no byte (as the Rust and Python benches). */
static void count_gram(void *user, uint64_t seq, const PfsEntry *entries, size_t n) {
    struct seen *s = user;
    (void)entries;
    s->next_seq = seq + 1;
    s->grams++;
    s->entries += n;
}

struct subscriber {
    PfsListener *listener;
    PfsBlob *blob;
    int count_only;
    struct seen seen;
    PfsSubscriptionReport report;
    int failed;
};

static void *subscribe(void *arg) {
    struct subscriber *sub = arg;
    PfsSubscription *s = NULL;
    if (pfs_subscription_accept(sub->listener, sub->blob, NULL, &s) != PFS_STATUS_OK) {
        fprintf(stderr, "subscriber: %s\n", pfs_last_error());
        sub->failed = 1;
        return NULL;
    }
    PfsStatus st;
    PfsGramCallback callback = sub->count_only ? count_gram : on_gram;
    while ((st = pfs_subscription_poll(s, callback, &sub->seen, 1000, NULL)) == PFS_STATUS_OK) {
    }
    if (st != PFS_STATUS_ENDED) {
        fprintf(stderr, "subscriber: %s\n", pfs_last_error());
        sub->failed = 1;
    }
    pfs_subscription_close(s, &sub->report);
    return NULL;
}

/* Offers one gram, waiting for the subscriber while its window is full. */
static int offer(PfsPublication *p, const PfsEntry *e, size_t n, uint64_t *back_pressure) {
    for (;;) {
        PfsStatus st = pfs_publication_offer(p, e, n, NULL);
        if (st == PFS_STATUS_OK) return 0;
        if (st != PFS_STATUS_BACK_PRESSURE) return -1;
        ++*back_pressure;
        uint64_t applied = pfs_publication_applied(p);
        st = pfs_publication_wait_applied(p, applied, 5000);
        if (st != PFS_STATUS_OK) return -1;
    }
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static PfsBlob *open_blob(uint64_t size) {
    PfsBlobOptions o = pfs_blob_options_default();
    o.size = size;
    o.seed = 42;
    PfsBlob *b = NULL;
    if (pfs_blob_open(&o, &b) != PFS_STATUS_OK) {
        fprintf(stderr, "stream_count: %s\n", pfs_last_error());
        exit(1);
    }
    return b;
}

/* bench MIB: 64 KiB write grams, MB/s of effective bytes. */
static int bench(uint64_t mib) {
    const uint64_t size = 64u << 20, gram = 64u << 10;
    PfsBlob *a = open_blob(size), *b = open_blob(size);
    PfsListener *l = NULL;
    if (pfs_listener_bind("tcp:127.0.0.1:0", &l) != PFS_STATUS_OK) {
        fprintf(stderr, "bench: %s\n", pfs_last_error());
        return 1;
    }
    struct subscriber sub = {.listener = l, .blob = b, .count_only = 1};
    pthread_t t;
    pthread_create(&t, NULL, subscribe, &sub);
    PfsPublication *p = NULL;
    if (pfs_publication_connect(pfs_listener_endpoint(l), a, NULL, &p) != PFS_STATUS_OK) {
        fprintf(stderr, "bench: %s\n", pfs_last_error());
        return 1;
    }
    const uint8_t *data = pfs_blob_data(a);
    uint64_t grams = mib * (1u << 20) / gram;
    double start = now_s();
    for (uint64_t i = 0; i < grams; i++) {
        uint64_t at = (i * gram) % size;
        PfsEntry e = {.kind = PFS_ENTRY_WRITE, .len = (uint32_t)gram, .offset = at, .data = data + at};
        if (pfs_publication_offer_blocking(p, &e, 1, 10000, NULL) != PFS_STATUS_OK) {
            fprintf(stderr, "bench: %s\n", pfs_last_error());
            return 1;
        }
    }
    PfsPublicationReport r;
    if (pfs_publication_close(p, &r) != PFS_STATUS_OK) {
        fprintf(stderr, "bench: %s\n", pfs_last_error());
        return 1;
    }
    double secs = now_s() - start;
    pthread_join(t, NULL);
    printf("c: %" PRIu64 " grams of 64 KiB writes, %.1f MB/s\n", r.grams, (double)r.effective_bytes / secs / 1e6);
    pfs_listener_close(l);
    pfs_blob_close(a);
    pfs_blob_close(b);
    return sub.failed;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "bench") == 0) return bench(argc > 2 ? strtoull(argv[2], NULL, 10) : 1024);

    PfsBlob *pub_blob = open_blob(BLOB_SIZE), *sub_blob = open_blob(BLOB_SIZE);
    PfsListener *listener = NULL;
    if (pfs_listener_bind("tcp:127.0.0.1:0", &listener) != PFS_STATUS_OK) {
        fprintf(stderr, "stream_count: %s\n", pfs_last_error());
        return 1;
    }
    struct subscriber sub = {.listener = listener, .blob = sub_blob, .seen = {.sum = 0xcbf29ce484222325ull}};
    pthread_t thread;
    pthread_create(&thread, NULL, subscribe, &sub);

    PfsPublication *pub = NULL;
    if (pfs_publication_connect(pfs_listener_endpoint(listener), pub_blob, NULL, &pub) != PFS_STATUS_OK) {
        fprintf(stderr, "stream_count: %s\n", pfs_last_error());
        return 1;
    }
    uint8_t *mine = pfs_blob_data_mut(pub_blob);
    uint64_t sent_sum = 0xcbf29ce484222325ull, back_pressure = 0;
    for (uint32_t i = 0; i < GRAMS; i++) {
        char message[32];
        int mlen = snprintf(message, sizeof message, "record %" PRIu32, i);
        /* Replication: change our own blob, then publish the change. */
        uint8_t *w = mine + WRITE_AT + (uint64_t)i * WRITE_LEN;
        memset(w, (int)(i & 0xff), WRITE_LEN);
        PfsEntry e[3] = {
            {.kind = PFS_ENTRY_MESSAGE, .len = (uint32_t)mlen, .data = (const uint8_t *)message},
            {.kind = PFS_ENTRY_REFERENCE, .len = 512, .offset = (uint64_t)i * 4096},
            {.kind = PFS_ENTRY_WRITE, .len = WRITE_LEN, .offset = WRITE_AT + (uint64_t)i * WRITE_LEN, .data = w},
        };
        sent_sum = fnv(sent_sum, (const uint8_t *)message, (size_t)mlen);
        sent_sum = fnv(sent_sum, mine + (uint64_t)i * 4096, 512);
        sent_sum = fnv(sent_sum, w, WRITE_LEN);
        if (offer(pub, e, 3, &back_pressure) != 0) {
            fprintf(stderr, "stream_count: %s\n", pfs_last_error());
            return 1;
        }
    }
    /* A gram outside the blob is refused before anything is sent. */
    PfsEntry outside = {.kind = PFS_ENTRY_REFERENCE, .len = 16, .offset = BLOB_SIZE};
    PfsStatus st = pfs_publication_offer(pub, &outside, 1, NULL);
    printf("outside: status %d: %s\n", (int)st, pfs_last_error());

    PfsPublicationReport report;
    if (pfs_publication_close(pub, &report) != PFS_STATUS_OK) {
        fprintf(stderr, "stream_count: %s\n", pfs_last_error());
        return 1;
    }
    pthread_join(thread, NULL);
    if (sub.failed) return 1;

    uint8_t fa[32], fb[32];
    pfs_blob_fingerprint(pub_blob, fa);
    pfs_blob_fingerprint(sub_blob, fb);
    printf("published %" PRIu64 " grams, %" PRIu64 " entries, applied %" PRIu64 ", digests matched %d\n",
           report.grams, report.entries, report.applied, report.digests_matched);
    printf("subscribed %" PRIu64 " grams in order %s, %" PRIu64 " messages, %" PRIu64 " references, %" PRIu64
           " writes, %" PRIu64 " bytes\n",
           sub.seen.grams, sub.seen.out_of_order ? "no" : "yes", sub.seen.kinds[PFS_ENTRY_MESSAGE],
           sub.seen.kinds[PFS_ENTRY_REFERENCE], sub.seen.kinds[PFS_ENTRY_WRITE], sub.seen.bytes);
    printf("checksums equal: %s\n", sub.seen.sum == sent_sum ? "yes" : "no");
    printf("fingerprints equal: %s\n", memcmp(fa, fb, 32) == 0 ? "yes" : "no");

    pfs_listener_close(listener);
    pfs_blob_close(pub_blob);
    pfs_blob_close(sub_blob);
    return sub.seen.sum == sent_sum && memcmp(fa, fb, 32) == 0 ? 0 : 1;
}

"""A Python subscriber computing over references: a publisher thread sends
grams of references into the blob both sides hold; the subscriber's
callback sums the bytes of every referenced slice in place (memoryviews of
its own blob, no copy) and the publisher checks the total.

    scripts/python-tests                       # builds the package, runs this too
    python examples/python/stream_sum.py
    python examples/python/stream_sum.py --bench 1024   # MB/s of 64 KiB write grams
"""

import sys
import threading
import time

import packetfs


def sum_references(size=8 << 20, grams=200, per_gram=16, span=4096):
    ours = packetfs.Blob(size=size, seed=7)
    theirs = packetfs.Blob(size=size, seed=7)
    listener = packetfs.Listener("tcp:127.0.0.1:0")
    totals = {"sum": 0, "entries": 0}

    def on_gram(gram):
        for kind, offset, view in gram:
            totals["sum"] += sum(view)  # reads the subscriber's blob in place
            totals["entries"] += 1

    def subscribe():
        totals["report"] = listener.accept(theirs).run(on_gram)

    sub = threading.Thread(target=subscribe)
    sub.start()
    pub = packetfs.Publication(listener.endpoint, ours)
    mine = memoryview(ours)
    expected = 0
    for g in range(grams):
        entries = []
        for i in range(per_gram):
            offset = ((g * per_gram + i) * 7919 * span) % (size - span)
            entries.append(("reference", offset, span))
            expected += sum(mine[offset : offset + span])
        pub.offer(entries, timeout=10)
    report = pub.close()
    sub.join(30)
    print(f"{report['grams']} grams, {totals['entries']} references, sum {totals['sum']} (expected {expected})")
    assert totals["sum"] == expected and report["digests_matched"]


def bench(mib):
    """64 KiB write grams over TCP loopback, as examples/c/stream_count.c bench does."""
    size, gram = 64 << 20, 64 << 10
    ours = packetfs.Blob(size=size, seed=42)
    theirs = packetfs.Blob(size=size, seed=42)
    listener = packetfs.Listener("tcp:127.0.0.1:0")
    seen = []  # the callback takes each gram (and its views), as a real subscriber would
    sub = threading.Thread(target=lambda: listener.accept(theirs).run(lambda gram: seen.append(gram.seq)))
    sub.start()
    pub = packetfs.Publication(listener.endpoint, ours)
    mine = memoryview(ours)
    start = time.perf_counter()
    for i in range(mib * (1 << 20) // gram):
        at = (i * gram) % size
        pub.offer([("write", at, mine[at : at + gram])], timeout=10)
    report = pub.close()
    secs = time.perf_counter() - start
    sub.join(30)
    print(f"python: {report['grams']} grams of 64 KiB writes, {report['effective_bytes'] / secs / 1e6:.1f} MB/s")


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--bench":
        bench(int(sys.argv[2]))
    else:
        sum_references()

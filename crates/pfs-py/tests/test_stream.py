"""Streaming from Python: Publication, Listener, Subscription over TCP
loopback, a subscriber thread and a publisher in one process.

Run by scripts/python-tests after `maturin develop`. Every wait is bounded
(timeouts on polls and offers); nothing asserts on time.
"""

import hashlib
import threading
import unittest

import packetfs

SIZE = 1 << 20


class Subscriber(threading.Thread):
    """Accepts one publisher on `listener` and runs `callback` to the end."""

    def __init__(self, listener, blob, callback, **options):
        super().__init__(daemon=True)
        self.listener, self.blob, self.callback, self.options = listener, blob, callback, options
        self.report, self.error = None, None

    def run(self):
        try:
            sub = self.listener.accept(self.blob, **self.options)
            self.report = sub.run(self.callback)
        except Exception as e:  # handed to the test thread
            self.error = e


class StreamTest(unittest.TestCase):
    def pair(self, seed=7, callback=None, **options):
        ours = packetfs.Blob(size=SIZE, seed=seed)
        theirs = packetfs.Blob(size=SIZE, seed=seed)
        listener = packetfs.Listener("tcp:127.0.0.1:0")
        sub = Subscriber(listener, theirs, callback, **options)
        sub.start()
        return ours, theirs, listener, sub

    def assert_stream_ends(self, pub, seq):
        """The subscriber executed `seq` and then ended the stream: waiting
        for it, or closing, raises StreamError (which one depends on when
        the end is heard)."""
        with self.assertRaises(packetfs.StreamError):
            pub.wait_applied(seq, 10)
            pub.close()

    def finish(self, sub):
        sub.join(30)
        self.assertFalse(sub.is_alive(), "the subscriber did not end")
        if sub.error is not None:
            raise sub.error
        return sub.report

    def test_every_kind_arrives_byte_exact_and_in_order(self):
        seen = []

        def on_gram(gram):
            for kind, offset, view in gram:
                seen.append((gram.seq, kind, offset, bytes(view)))

        ours, theirs, listener, sub = self.pair(callback=on_gram)
        pub = packetfs.Publication(listener.endpoint, ours)
        mine = memoryview(ours)
        expected = []
        for i in range(50):
            payload = bytes([i]) * 100
            mine[4096 + i * 100 : 4096 + (i + 1) * 100] = payload  # replicate our own change
            entries = [
                ("message", b"record %d" % i),
                ("reference", i * 1000, 64),
                ("write", 4096 + i * 100, payload),
            ]
            seq = pub.offer(entries, timeout=10)
            self.assertEqual(seq, i)
            expected += [
                (i, "message", None, b"record %d" % i),
                (i, "reference", i * 1000, bytes(mine[i * 1000 : i * 1000 + 64])),
                (i, "write", 4096 + i * 100, payload),
            ]
        # The builder form: one gram of the three kinds, sent with send().
        pub.message(b"last").reference(0, 8).write(8, bytes(mine[8:16]))
        self.assertEqual(pub.send(timeout=10), 50)
        expected += [(50, "message", None, b"last"), (50, "reference", 0, bytes(mine[:8])), (50, "write", 8, bytes(mine[8:16]))]
        self.assertTrue(pub.wait_applied(50, 10))
        self.assertEqual(pub.applied, 51)
        report = pub.close()
        sub_report = self.finish(sub)
        self.assertEqual(seen, expected)
        self.assertEqual(report["grams"], 51)
        self.assertTrue(report["digests_matched"])
        self.assertEqual(sub_report["grams"], 51)
        self.assertEqual(ours.fingerprint(), theirs.fingerprint())

    def test_references_are_views_of_the_blob_not_copies(self):
        digests = []

        def on_gram(gram):
            for kind, offset, view in gram:
                self.assertEqual(kind, "reference")
                self.assertEqual(view.obj, memoryview(theirs).obj)  # the blob itself
                digests.append(hashlib.sha256(view).hexdigest())

        ours, theirs, listener, sub = self.pair(callback=on_gram)
        pub = packetfs.Publication(listener.endpoint, ours)
        pub.offer([("reference", 65536, 4096)], timeout=10)
        pub.close()
        self.finish(sub)
        self.assertEqual(digests, [hashlib.sha256(memoryview(theirs)[65536 : 65536 + 4096]).hexdigest()])

    def test_a_full_window_raises_back_pressure_and_loses_nothing(self):
        gate = threading.Event()
        got = []

        def slow(gram):
            gate.wait(30)  # holds the subscriber until the publisher met a full window
            got.append(gram.seq)

        ours, theirs, listener, sub = self.pair(callback=slow, window_grams=2)
        pub = packetfs.Publication(listener.endpoint, ours)
        sent = 0
        with self.assertRaises(packetfs.BackPressure):
            for _ in range(64):
                pub.offer([("reference", 0, 64)])
                sent += 1
        self.assertGreaterEqual(sent, 2)
        gate.set()
        for _ in range(10):
            pub.offer([("reference", 0, 64)], timeout=10)
            sent += 1
        report = pub.close()
        self.finish(sub)
        self.assertEqual(got, list(range(sent)))
        self.assertGreaterEqual(report["back_pressure"], 1)

    def test_a_gram_outside_the_blob_is_refused_before_sending(self):
        ours, theirs, listener, sub = self.pair()
        pub = packetfs.Publication(listener.endpoint, ours)
        with self.assertRaisesRegex(ValueError, "outside"):
            pub.offer([("reference", SIZE, 1)])
        self.assertEqual(pub.offer([("reference", SIZE - 1, 1)], timeout=10), 0)
        self.assertEqual(pub.close()["grams"], 1)
        self.assertEqual(self.finish(sub)["grams"], 1)

    def test_a_message_view_is_released_after_the_callback(self):
        kept = []

        def keep(gram):
            for kind, offset, view in gram:
                kept.append(view)

        ours, theirs, listener, sub = self.pair(callback=keep)
        pub = packetfs.Publication(listener.endpoint, ours)
        pub.offer([("message", b"hello"), ("reference", 0, 4)], timeout=10)
        pub.close()
        self.finish(sub)
        message, reference = kept
        with self.assertRaises(ValueError):
            bytes(message)  # released: it pointed into a frame since reused
        self.assertEqual(bytes(reference), bytes(memoryview(theirs)[:4]))  # a view of the blob

    def test_a_kept_slice_of_a_message_ends_the_subscription(self):
        kept = []
        ours = packetfs.Blob(size=SIZE, seed=7)
        theirs = packetfs.Blob(size=SIZE, seed=7)
        listener = packetfs.Listener("tcp:127.0.0.1:0")
        outcome = {}

        def subscribe():
            sub = listener.accept(theirs)
            try:
                sub.run(lambda gram: kept.extend(view[1:] for _, _, view in gram))
            except BufferError as e:
                outcome["error"] = e

        t = threading.Thread(target=subscribe, daemon=True)
        t.start()
        pub = packetfs.Publication(listener.endpoint, ours, timeout=1)
        # The subscriber stops answering: no final APPLIED within 1 s.
        self.assert_stream_ends(pub, pub.offer([("message", b"hello")], timeout=10))
        t.join(30)
        self.assertIn("kept past the callback", str(outcome["error"]))
        self.assertEqual(bytes(kept[0]), b"ello")  # still readable: never freed

    def test_an_exception_in_the_callback_is_raised_by_poll(self):
        ours = packetfs.Blob(size=SIZE, seed=7)
        theirs = packetfs.Blob(size=SIZE, seed=7)
        listener = packetfs.Listener("tcp:127.0.0.1:0")
        outcome = {}

        def boom(gram):
            raise KeyError("boom")

        def subscribe():
            sub = listener.accept(theirs)
            try:
                sub.run(boom)
            except KeyError as e:
                outcome["error"] = e

        t = threading.Thread(target=subscribe, daemon=True)
        t.start()
        pub = packetfs.Publication(listener.endpoint, ours, timeout=5)
        # The subscription ends: its connection closes.
        self.assert_stream_ends(pub, pub.offer([("reference", 0, 1)], timeout=10))
        t.join(30)
        self.assertEqual(outcome["error"].args, ("boom",))

    def test_a_different_blob_is_refused(self):
        ours = packetfs.Blob(size=SIZE, seed=1)
        theirs = packetfs.Blob(size=SIZE, seed=2)
        listener = packetfs.Listener("tcp:127.0.0.1:0")
        outcome = {}

        def subscribe():
            try:
                listener.accept(theirs)
            except packetfs.StreamError as e:
                outcome["error"] = e

        t = threading.Thread(target=subscribe, daemon=True)
        t.start()
        with self.assertRaises(packetfs.StreamError):
            packetfs.Publication(listener.endpoint, ours, timeout=5)
        t.join(30)
        self.assertIn("error", outcome)

    def test_bad_endpoints_and_entries_are_python_errors(self):
        with self.assertRaisesRegex(ValueError, "tcp:"):
            packetfs.Listener("127.0.0.1:0")
        ours, theirs, listener, sub = self.pair()
        pub = packetfs.Publication(listener.endpoint, ours)
        with self.assertRaises(ValueError):
            pub.offer([("poke", 1, 2)])
        with self.assertRaises(TypeError):
            pub.offer(["reference"])
        pub.close()
        self.finish(sub)


if __name__ == "__main__":
    unittest.main()

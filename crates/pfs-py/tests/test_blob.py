"""The packetfs Python package: blobs as zero-copy memoryviews.

Run by scripts/python-tests after `maturin develop`.
"""

import hashlib
import unittest

import packetfs


class BlobTest(unittest.TestCase):
    def test_same_size_and_seed_give_the_same_bytes_and_fingerprint(self):
        a = packetfs.Blob(size=1 << 20, seed=42)
        b = packetfs.Blob(size=1 << 20, seed=42)
        self.assertEqual(len(a), 1 << 20)
        self.assertEqual(a.fingerprint(), b.fingerprint())
        self.assertEqual(len(a.fingerprint()), 32)
        self.assertEqual(hashlib.sha256(memoryview(a)).digest(), hashlib.sha256(memoryview(b)).digest())

    def test_a_memoryview_is_the_blob_itself_not_a_copy(self):
        blob = packetfs.Blob(size=1 << 20, seed=1)
        before = blob.fingerprint()
        view = memoryview(blob)
        self.assertEqual(view.nbytes, 1 << 20)
        self.assertFalse(view.readonly)
        view[0] = view[0] ^ 0xFF
        # The write went into the mapping: the fingerprint over it changed.
        self.assertNotEqual(blob.fingerprint(), before)
        again = memoryview(blob)
        self.assertEqual(again[0], view[0])

    def test_a_view_keeps_the_blob_alive(self):
        view = memoryview(packetfs.Blob(size=1 << 16, seed=3))
        # The Blob object has no other reference; the view still reads its bytes.
        self.assertEqual(len(bytes(view[:16])), 16)

    def test_bad_arguments_are_python_errors(self):
        with self.assertRaises(ValueError):
            packetfs.Blob(size=0)

    def test_version(self):
        self.assertEqual(packetfs.version(), packetfs.__version__)


if __name__ == "__main__":
    unittest.main()

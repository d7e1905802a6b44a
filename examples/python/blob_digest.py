"""Opens two blobs from the same seed and hashes them in place.

memoryview(blob) is the mapping itself: hashlib reads it without a copy.
    scripts/python-tests      # builds the package, then runs this too
    python examples/python/blob_digest.py
"""

import hashlib

import packetfs

a = packetfs.Blob(size=8 << 20, seed=7)
b = packetfs.Blob(size=8 << 20, seed=7)
da = hashlib.blake2b(memoryview(a)).hexdigest()[:16]
db = hashlib.blake2b(memoryview(b)).hexdigest()[:16]
print(f"packetfs {packetfs.__version__}: {len(a)} bytes, blake2b {da} and {db}")
print(f"fingerprints equal: {a.fingerprint() == b.fingerprint()}")
assert da == db and a.fingerprint() == b.fingerprint()

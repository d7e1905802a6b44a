//! Fixed-block hashes for catch-up (`docs/wire.md` §16): the finer level
//! below the fingerprint's region hashes, computed only inside regions
//! that differ.
//!
//! A block hash is XXH3-128 of the block's bytes with a 192-byte secret
//! derived for one session from both peers' nonces ([`BlockKey::derive`]):
//! XXH3 runs at memory speed (the fingerprint's BLAKE3 is several times
//! slower per core), and the per-session secret means nobody can prepare
//! two blocks whose hashes collide before the session exists. A collision
//! could only keep a differing block unmoved, and the fingerprint's BLAKE3
//! root, checked at the end of every catch-up, catches that.

/// Length of a block hash in bytes.
pub const BLOCK_HASH_LEN: usize = 16;
/// Smallest block size catch-up accepts (one base page).
pub const MIN_BLOCK_SIZE: u32 = 4096;
/// Block size `pfs` asks for by default.
pub const DEFAULT_BLOCK_SIZE: u32 = 16 * 1024;

/// BLAKE3 `derive_key` context of the block secret.
const KEY_CONTEXT: &str = "PacketFS catch-up v1 block hash secret";
/// Length of the XXH3 secret.
const SECRET_LEN: usize = 192;

/// The per-session key of block hashes.
#[derive(Clone)]
pub struct BlockKey {
    secret: [u8; SECRET_LEN],
}

impl std::fmt::Debug for BlockKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BlockKey(..)")
    }
}

impl BlockKey {
    /// The key of the session whose HELLO carried `sender_nonce` and whose
    /// CATCHUP_BEGIN carried `replica_nonce`: the first 192 bytes of the
    /// BLAKE3 XOF in `derive_key` mode, context
    /// `"PacketFS catch-up v1 block hash secret"`, over
    /// `le64(sender_nonce) || le64(replica_nonce)`.
    pub fn derive(sender_nonce: u64, replica_nonce: u64) -> Self {
        let mut h = blake3::Hasher::new_derive_key(KEY_CONTEXT);
        h.update(&sender_nonce.to_le_bytes());
        h.update(&replica_nonce.to_le_bytes());
        let mut secret = [0u8; SECRET_LEN];
        h.finalize_xof().fill(&mut secret);
        Self { secret }
    }

    /// The hash of one block's bytes: XXH3-128 with this secret, as 16
    /// little-endian bytes.
    pub fn hash(&self, block: &[u8]) -> [u8; BLOCK_HASH_LEN] {
        // The secret is 192 bytes, above XXH3's minimum of 136: never an error.
        twox_hash::XxHash3_128::oneshot_with_secret(&self.secret, block)
            .unwrap_or_default()
            .to_le_bytes()
    }
}

/// Whether `block_size` is usable with `region_size`: a power of two, at
/// least [`MIN_BLOCK_SIZE`], dividing the region size (so each block lies
/// in one region).
pub fn block_size_ok(block_size: u32, region_size: u32) -> bool {
    block_size.is_power_of_two() && block_size >= MIN_BLOCK_SIZE && region_size.is_multiple_of(block_size)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_depends_on_both_nonces() {
        let a = BlockKey::derive(1, 2).hash(b"block");
        assert_eq!(a, BlockKey::derive(1, 2).hash(b"block"));
        assert_ne!(a, BlockKey::derive(2, 1).hash(b"block"));
        assert_ne!(a, BlockKey::derive(1, 3).hash(b"block"));
        assert_ne!(a, BlockKey::derive(1, 2).hash(b"blocK"));
    }

    #[test]
    fn block_sizes() {
        assert!(block_size_ok(4096, 1 << 20));
        assert!(block_size_ok(1 << 20, 1 << 20));
        assert!(!block_size_ok(2048, 1 << 20));
        assert!(!block_size_ok(3 << 12, 1 << 20));
        assert!(!block_size_ok(8192, 4096));
    }
}

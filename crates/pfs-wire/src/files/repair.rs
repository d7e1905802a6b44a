//! NAK (`docs/wire.md` §10.8): the corrections plane's request, a run of
//! hashes of chunks whose bytes did not match. The REPAIR that answers it
//! is a CHUNKS body (see `chunks`), so it has no codec of its own.

use crate::WireError;

use super::Hash;

/// One NAK entry: a whole chunk hash, nothing else (so no field table).
const NAK_ENTRY_LEN: usize = core::mem::size_of::<Hash>();

/// Decodes a NAK body: the hashes of chunks the receiver found damaged.
pub fn parse_nak(body: &[u8]) -> Result<impl Iterator<Item = &Hash> + '_, WireError> {
    if !body.len().is_multiple_of(NAK_ENTRY_LEN) {
        return Err(WireError::LengthMismatch);
    }
    Ok(body.chunks_exact(NAK_ENTRY_LEN).filter_map(|h| h.try_into().ok()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nak_is_whole_hashes() {
        let nak: Vec<u8> = [[5u8; 32], [6u8; 32]].concat();
        assert_eq!(parse_nak(&nak).unwrap().count(), 2);
        assert!(parse_nak(&nak[..33]).is_err());
    }
}

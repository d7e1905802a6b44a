//! The receiver's side of the corrections plane (docs/wire.md §13), as
//! settings and state: whether this receiver repairs and how often it
//! checks, what HELLO_ACK answers a sender that speaks the plane, the
//! [`NakBook`] of the session once negotiated, and whether the REPAIR in
//! progress can still count.

use pfs_wire::hello::{ACK_CORRECTIONS, ACK_REPAIR};
use pfs_wire::IntegrityAlg;

use super::GramReceiverConfig;
use crate::gram::corrections::NakBook;

/// Corrections settings and the session's NAK book.
#[derive(Debug)]
pub(super) struct Repairs {
    /// Repair at all (from the config).
    repair: bool,
    integrity_sample: Option<u16>,
    max_nak_grams: u32,
    max_repair_bytes: u64,
    /// The corrections plane, when the sender speaks it.
    pub(super) book: Option<NakBook>,
    /// The REPAIR in progress cannot count as a repair (a write failed).
    pub(super) failed: bool,
}

impl Repairs {
    /// The settings of `cfg`; no plane until HELLO asks for it.
    pub(super) fn new(cfg: &GramReceiverConfig) -> Self {
        Self {
            repair: cfg.repair,
            integrity_sample: cfg.integrity_sample,
            max_nak_grams: cfg.max_nak_grams,
            max_repair_bytes: cfg.max_repair_bytes,
            book: None,
            failed: false,
        }
    }

    /// A sender that speaks the plane asked to check one gram in `asked`:
    /// the plane starts; returns HELLO_ACK's flags and sampling interval.
    /// Repairing needs a writer onto this very blob (`writable`) and a
    /// digest to check the repaired ranges with.
    pub(super) fn negotiate(&mut self, asked: u16, writable: bool, integrity: IntegrityAlg) -> (u16, u16) {
        let repair = self.repair && writable && integrity != IntegrityAlg::None;
        let interval = self.integrity_sample.unwrap_or(asked).max(1);
        self.book = Some(NakBook::new(
            interval,
            repair,
            self.max_nak_grams,
            self.max_repair_bytes,
        ));
        (ACK_CORRECTIONS | if repair { ACK_REPAIR } else { 0 }, interval)
    }

    /// Whether the session repairs (a REPAIR may come).
    pub(super) fn repairs(&self) -> bool {
        self.book.as_ref().is_some_and(NakBook::repairs)
    }

    /// Whether gram `seq` is checked (every gram without the plane).
    pub(super) fn checks(&self, seq: u64) -> bool {
        self.book.as_ref().is_none_or(|b| b.checks(seq))
    }

    /// Whether every NAK is answered (always without the plane).
    pub(super) fn is_settled(&self) -> bool {
        self.book.as_ref().is_none_or(NakBook::is_settled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_the_plane_every_gram_is_checked() {
        let r = Repairs::new(&GramReceiverConfig::default());
        assert!(r.checks(0) && r.checks(7));
        assert!(r.is_settled() && !r.repairs());
    }

    #[test]
    fn repairing_needs_a_writer_and_a_digest() {
        let cfg = GramReceiverConfig::default();
        let mut r = Repairs::new(&cfg);
        assert_eq!(
            r.negotiate(4, true, IntegrityAlg::Xxh3),
            (ACK_CORRECTIONS | ACK_REPAIR, 4)
        );
        assert!(r.repairs());
        assert!(r.checks(8) && !r.checks(9));
        let mut r = Repairs::new(&cfg);
        assert_eq!(r.negotiate(4, false, IntegrityAlg::Xxh3), (ACK_CORRECTIONS, 4));
        assert!(!r.repairs());
        let mut r = Repairs::new(&cfg);
        assert_eq!(r.negotiate(0, true, IntegrityAlg::None), (ACK_CORRECTIONS, 1));
        let mut r = Repairs::new(&GramReceiverConfig {
            repair: false,
            integrity_sample: Some(2),
            ..cfg
        });
        assert_eq!(r.negotiate(16, true, IntegrityAlg::Xxh3), (ACK_CORRECTIONS, 2));
    }
}

//! What the gram cores ask of their host besides bytes and time: the
//! receiver hands each gram's header and descriptor table to a
//! [`GramSink`] as it executes it (the driver's sink records them for
//! `pfs exec --gram-file`; [`Discard`] keeps nothing). The sender needs no
//! host trait: its only input is its blob and schedule.

use pfs_wire::GramHeader;

/// Receives each gram's header and descriptor table as it is executed (the
/// host records it, or ignores it).
pub trait GramSink {
    /// One gram, before its payload.
    fn gram(&mut self, header: &GramHeader, table: &[u8]) -> std::io::Result<()>;
}

/// A sink that keeps nothing.
#[derive(Debug, Default, Clone, Copy)]
pub struct Discard;

impl GramSink for Discard {
    fn gram(&mut self, _: &GramHeader, _: &[u8]) -> std::io::Result<()> {
        Ok(())
    }
}

//! The in-process sender the suite's PFS rows run: the same functions
//! `pfs send` runs, from [`packetfs`], so a row measures exactly the code
//! path of the product. Kept here under its old name so the studies'
//! paths (`crate::peer::…`) stay as they are; the fallible ones return
//! `anyhow` errors shaped as before (the lower crate's typed error at the
//! top, so `downcast_ref` and `{:#}` read the same).

pub use packetfs::blob::{study_blob, OpenedBlob};
pub use packetfs::exec::parse_user_kernel;
pub use packetfs::gram::{progress_line, sender_config, Sent, Target};

use packetfs::blob::{BlobConfig, BlobView};
use packetfs::gram::GramSenderConfig;
use packetfs::transport::Transport;

/// A [`packetfs::Error`] as the `anyhow` error the studies always had: the
/// lower crate's own error, with blob setup failures in their context.
pub fn lift(e: packetfs::Error) -> anyhow::Error {
    match e {
        packetfs::Error::Blob(b) => anyhow::Error::new(b).context("blob setup failed"),
        packetfs::Error::Transport(t) => t.into(),
        packetfs::Error::Secure(s) => s.into(),
        packetfs::Error::Session(s) => s.into(),
        packetfs::Error::Stream(s) => s.into(),
    }
}

/// [`packetfs::blob::open_blob`].
pub fn open_blob(cfg: &BlobConfig, quiet: bool) -> anyhow::Result<OpenedBlob> {
    packetfs::blob::open_blob(cfg, quiet).map_err(lift)
}

/// [`packetfs::gram::send_once`].
pub fn send_once(target: &Target, view: &BlobView<'_>, cfg: &GramSenderConfig) -> anyhow::Result<Sent> {
    packetfs::gram::send_once(target, view, cfg).map_err(lift)
}

/// [`packetfs::gram::send_on`].
pub fn send_on(t: Box<dyn Transport>, view: &BlobView<'_>, cfg: &GramSenderConfig) -> anyhow::Result<Sent> {
    packetfs::gram::send_on(t, view, cfg).map_err(lift)
}

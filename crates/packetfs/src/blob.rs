//! The blob: the shared mapping both peers hold. [`open_blob`] maps,
//! prefaults, fills and fingerprints one (a named blob this process created
//! is removed again on Ctrl-C); [`OpenedBlob::view`] is what a session
//! reads and writes. The mapping itself is `pfs-blob`'s [`Blob`].

use std::path::PathBuf;

pub use pfs_blob::{
    info, list, remove, verify, BackingKind, Blob, BlobConfig, BlobError, BlobMeta, Fill, Fingerprint,
    SetupReport, VerifyReport,
};
pub use pfs_session::{BlobView, SetupTimes};

use crate::Error;

/// Where the blob comes from and how it is set up.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
pub struct BlobArgs {
    /// hugetlbfs mount to back the blob with (checked with statfs; falls back to THP with a warning).
    #[cfg_attr(feature = "clap", arg(long, value_name = "DIR"))]
    pub huge_dir: Option<PathBuf>,
    /// Name of a persistent blob (reused if it exists with the same size and seed).
    #[cfg_attr(feature = "clap", arg(long, value_name = "NAME"))]
    pub blob_name: Option<String>,
    /// Blob size.
    #[cfg_attr(feature = "clap", arg(long, default_value = "1G", value_parser = crate::parse::parse_size))]
    pub size: u64,
    /// Fill seed: peers with the same size and seed hold the same bytes.
    #[cfg_attr(feature = "clap", arg(long, default_value = "0x5eed", value_parser = crate::parse::parse_u64))]
    pub seed: u64,
    /// Fill from this file instead of the seeded generator.
    #[cfg_attr(feature = "clap", arg(long, value_name = "PATH", conflicts_with = "no_fill"))]
    pub fill_file: Option<PathBuf>,
    /// Do not prefault the mapping (pages fault in during the run instead).
    #[cfg_attr(feature = "clap", arg(long))]
    pub no_prefault: bool,
    /// Do not fill (use a named blob's existing bytes, or zeros).
    #[cfg_attr(feature = "clap", arg(long))]
    pub no_fill: bool,
    /// Keep a named blob this command created after it exits.
    #[cfg_attr(feature = "clap", arg(long))]
    pub blob_keep: bool,
    /// Setup threads (0 = all cores).
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 0))]
    pub setup_threads: usize,
}

impl BlobArgs {
    /// The blob these options describe.
    pub fn config(&self) -> BlobConfig {
        let fill = if self.no_fill {
            Fill::None
        } else if let Some(path) = &self.fill_file {
            Fill::File(path.clone())
        } else {
            Fill::Seed(self.seed)
        };
        BlobConfig {
            name: self.blob_name.clone(),
            size: self.size,
            fill,
            huge_dir: self.huge_dir.clone(),
            prefault: !self.no_prefault,
            keep: self.blob_keep,
            threads: self.setup_threads,
            ..BlobConfig::default()
        }
    }
}

/// A blob opened for a transfer, with its setup report.
#[derive(Debug)]
pub struct OpenedBlob {
    /// The mapping.
    pub blob: Blob,
    /// Setup phase timings.
    pub setup: SetupReport,
}

impl OpenedBlob {
    /// The session layer's view of it.
    ///
    /// ```
    /// let opened = packetfs::blob::open_blob(&packetfs::blob::study_blob(1 << 20, 7, None), true)?;
    /// assert_eq!(opened.view().data.len(), 1 << 20);
    /// # Ok::<(), packetfs::Error>(())
    /// ```
    pub fn view(&self) -> BlobView<'_> {
        let fp = self.blob.fingerprint();
        BlobView {
            data: self.blob.as_slice(),
            fingerprint: fp.root,
            region_size: fp.region_size,
            backing: self.blob.backing().kind,
            page_size: self.blob.backing().page_size,
            setup: SetupTimes {
                map_s: self.setup.map_s,
                prefault_s: self.setup.prefault_s,
                fill_s: self.setup.fill_s,
                fingerprint_s: self.setup.fingerprint_s,
            },
            writer: Some(self.blob.writer()),
            live: Some(&self.blob),
        }
    }

    /// One line describing backing and setup, for stderr.
    pub fn describe(&self) -> String {
        let b = self.blob.backing();
        let s = &self.setup;
        let len = self.blob.len();
        let fill_prefault = s.fill_s + s.prefault_s;
        let rate = if fill_prefault > 0.0 && !s.reused_existing && s.fill_s > 0.0 {
            format!(" ({:.2} GB/s fill+prefault)", len as f64 / fill_prefault / 1e9)
        } else {
            String::new()
        };
        format!(
            "blob {name}: {mb:.1} MB, {kind} backing, page {page} B, {huge:.0}% in huge pages, fingerprint {fp}; \
             setup: map {m:.3} s, prefault {p:.3} s, fill {f:.3} s, fingerprint {h:.3} s{rate}{reused}",
            name = self.blob.name().unwrap_or("(anonymous)"),
            mb = len as f64 / 1e6,
            kind = b.kind.as_str(),
            page = b.page_size,
            huge = if len > 0 { b.huge_bytes as f64 * 100.0 / len as f64 } else { 0.0 },
            fp = self.blob.fingerprint().short(),
            m = s.map_s,
            p = s.prefault_s,
            f = s.fill_s,
            h = s.fingerprint_s,
            reused = if s.reused_existing { " (reused existing blob)" } else { "" },
        )
    }
}

/// An anonymous blob of `size` bytes filled from `seed`, prefaulted: what
/// both peers of a test or a study map to hold the same bytes.
pub fn study_blob(size: u64, seed: u64, huge_dir: Option<PathBuf>) -> BlobConfig {
    BlobConfig {
        name: None,
        size,
        fill: Fill::Seed(seed),
        huge_dir,
        prefault: true,
        keep: false,
        threads: 0,
        ..BlobConfig::default()
    }
}

/// Maps, prefaults, fills and fingerprints the blob; prints warnings and,
/// unless `quiet`, the setup line on stderr.
///
/// ```
/// use packetfs::blob::{open_blob, study_blob};
/// let a = open_blob(&study_blob(1 << 20, 42, None), true)?;
/// let b = open_blob(&study_blob(1 << 20, 42, None), true)?;
/// // Same size and seed: the same bytes, so the same fingerprint.
/// assert_eq!(a.blob.fingerprint().root, b.blob.fingerprint().root);
/// # Ok::<(), packetfs::Error>(())
/// ```
pub fn open_blob(cfg: &BlobConfig, quiet: bool) -> Result<OpenedBlob, Error> {
    let (blob, setup) = Blob::open_or_create(cfg).map_err(Error::Blob)?;
    if let (Some(name), false, false) = (blob.name(), cfg.keep, setup.reused_existing) {
        // Drop removes a blob this process created; Ctrl-C must too.
        crate::interrupt::remove_on_signal(name, cfg.huge_dir.as_deref());
    }
    for w in &blob.backing().warnings {
        eprintln!("pfs: warning: {w}");
    }
    let opened = OpenedBlob { blob, setup };
    if !quiet {
        eprintln!("{}", opened.describe());
    }
    Ok(opened)
}

//! Blob functions: open (map, fill, fingerprint) a blob, read its bytes and
//! fingerprint, close it. The blob is what both peers hold; streaming
//! publications and subscriptions run over one.

// Raw pointers from C are dereferenced here; each block says why it is sound.
#![allow(unsafe_code)]

use std::ffi::{c_char, CStr};

use packetfs::blob::{open_blob, BlobConfig, Fill, OpenedBlob};

use crate::error::{fail, guard, PfsStatus};

/// An open blob. Opaque to C: made by [`pfs_blob_open`], freed by
/// [`pfs_blob_close`].
#[derive(Debug)]
pub struct PfsBlob {
    opened: OpenedBlob,
}

impl PfsBlob {
    /// The blob inside (for the other modules of this crate).
    pub fn opened(&self) -> &OpenedBlob {
        &self.opened
    }

    /// The blob inside, to write (a subscription's writes land there).
    pub(crate) fn opened_mut(&mut self) -> &mut OpenedBlob {
        &mut self.opened
    }
}

/// How [`pfs_blob_open`] sets up a blob. Start from
/// [`pfs_blob_options_default`] and change what you need, so that fields
/// added later keep their defaults.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PfsBlobOptions {
    /// Name of a persistent blob (reused if it exists with the same size and
    /// seed), or NULL for an anonymous one.
    pub name: *const c_char,
    /// Size in bytes (> 0).
    pub size: u64,
    /// Fill seed: peers with the same size and seed hold the same bytes.
    pub seed: u64,
    /// Non-zero: do not fill (a named blob keeps its bytes, a new one is zeros).
    pub no_fill: u8,
    /// Non-zero: keep a named blob this call created after it is closed.
    pub keep: u8,
}

/// Default options: anonymous, 64 MiB, seed 0x5eed, filled, not kept.
#[no_mangle]
pub extern "C" fn pfs_blob_options_default() -> PfsBlobOptions {
    PfsBlobOptions {
        name: std::ptr::null(),
        size: 64 << 20,
        seed: 0x5eed,
        no_fill: 0,
        keep: 0,
    }
}

/// Maps, fills and fingerprints a blob as `options` say, and stores its
/// handle in `*out`.
///
/// # Safety
/// `options` points to a valid `PfsBlobOptions` whose `name` is NULL or a
/// NUL-terminated string; `out` points to writable storage for a pointer.
#[no_mangle]
pub unsafe extern "C" fn pfs_blob_open(options: *const PfsBlobOptions, out: *mut *mut PfsBlob) -> PfsStatus {
    if options.is_null() || out.is_null() {
        return fail(
            PfsStatus::InvalidArgument,
            "pfs_blob_open: options and out must not be NULL",
        );
    }
    // SAFETY: non-null, and the caller promises a valid, readable options struct.
    let o = unsafe { *options };
    let name = if o.name.is_null() {
        None
    } else {
        // SAFETY: non-null, and the caller promises a NUL-terminated string.
        match unsafe { CStr::from_ptr(o.name) }.to_str() {
            Ok(n) => Some(n.to_string()),
            Err(_) => return fail(PfsStatus::InvalidArgument, "pfs_blob_open: name is not UTF-8"),
        }
    };
    if o.size == 0 {
        return fail(PfsStatus::InvalidArgument, "pfs_blob_open: size must be > 0");
    }
    let cfg = BlobConfig {
        name,
        size: o.size,
        fill: if o.no_fill != 0 {
            Fill::None
        } else {
            Fill::Seed(o.seed)
        },
        prefault: true,
        keep: o.keep != 0,
        ..BlobConfig::default()
    };
    guard(move || match open_blob(&cfg, true) {
        Ok(opened) => {
            let handle = Box::into_raw(Box::new(PfsBlob { opened }));
            // SAFETY: `out` is non-null and writable (the caller's promise).
            unsafe { out.write(handle) };
            PfsStatus::Ok
        }
        Err(e) => fail(PfsStatus::Blob, e),
    })
}

/// The blob's length in bytes (0 for NULL).
///
/// # Safety
/// `blob` is NULL or a handle from [`pfs_blob_open`] not yet closed.
#[no_mangle]
pub unsafe extern "C" fn pfs_blob_len(blob: *const PfsBlob) -> u64 {
    // SAFETY: NULL or a live handle (the caller's promise).
    match unsafe { blob.as_ref() } {
        Some(b) => b.opened.blob.len(),
        None => 0,
    }
}

/// The blob's first byte, for reading; valid until the blob is closed.
/// NULL for a NULL handle.
///
/// # Safety
/// `blob` is NULL or a handle from [`pfs_blob_open`] not yet closed.
#[no_mangle]
pub unsafe extern "C" fn pfs_blob_data(blob: *const PfsBlob) -> *const u8 {
    // SAFETY: NULL or a live handle (the caller's promise).
    match unsafe { blob.as_ref() } {
        Some(b) => b.opened.blob.as_slice().as_ptr(),
        None => std::ptr::null(),
    }
}

/// The blob's first byte, for writing (a publisher changes its blob, then
/// publishes the change); valid until the blob is closed. Recompute the
/// fingerprint with [`pfs_blob_fingerprint`] after writing.
///
/// # Safety
/// `blob` is NULL or a handle from [`pfs_blob_open`] not yet closed, and no
/// other thread reads or writes the bytes being written.
#[no_mangle]
pub unsafe extern "C" fn pfs_blob_data_mut(blob: *mut PfsBlob) -> *mut u8 {
    // SAFETY: NULL or a live handle, used by one thread (the caller's promise).
    match unsafe { blob.as_mut() } {
        Some(b) => b.opened.blob.as_mut_slice().as_mut_ptr(),
        None => std::ptr::null_mut(),
    }
}

/// Writes the blob's 32-byte fingerprint root (BLAKE3 over its regions),
/// computed over its current bytes, into `out`.
///
/// # Safety
/// `blob` is a handle from [`pfs_blob_open`] not yet closed; `out` points to
/// 32 writable bytes.
#[no_mangle]
pub unsafe extern "C" fn pfs_blob_fingerprint(blob: *const PfsBlob, out: *mut u8) -> PfsStatus {
    // SAFETY: NULL or a live handle (the caller's promise).
    let Some(b) = (unsafe { blob.as_ref() }) else {
        return fail(PfsStatus::InvalidArgument, "pfs_blob_fingerprint: blob is NULL");
    };
    if out.is_null() {
        return fail(PfsStatus::InvalidArgument, "pfs_blob_fingerprint: out is NULL");
    }
    let root = b.opened.blob.recompute_fingerprint(0).root;
    // SAFETY: `out` is non-null and has 32 writable bytes (the caller's promise);
    // `root` is a separate 32-byte array, so the ranges do not overlap.
    unsafe { std::ptr::copy_nonoverlapping(root.as_ptr(), out, root.len()) };
    PfsStatus::Ok
}

/// Unmaps the blob (and removes a named one this process created, unless
/// it was opened with `keep`). NULL is ignored.
///
/// # Safety
/// `blob` is NULL or a handle from [`pfs_blob_open`] not yet closed; it is
/// not used again.
#[no_mangle]
pub unsafe extern "C" fn pfs_blob_close(blob: *mut PfsBlob) {
    if !blob.is_null() {
        // SAFETY: a live handle made by `Box::into_raw` in `pfs_blob_open`,
        // closed once (the caller's promise).
        drop(unsafe { Box::from_raw(blob) });
    }
}

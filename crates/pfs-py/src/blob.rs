//! The `Blob` class: a blob opened from Python, its bytes exported through
//! the buffer protocol so that `memoryview(blob)` is the mapping itself.

// `__getbuffer__` fills CPython's Py_buffer through raw pointers.
#![allow(unsafe_code)]

use std::ffi::c_int;

use pyo3::exceptions::{PyBufferError, PyOSError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use packetfs::blob::{open_blob, BlobConfig, Fill, OpenedBlob};

/// A blob: a mapping both peers hold, filled from a seed (the same size and
/// seed give the same bytes on every host) or left as it is.
///
/// `memoryview(blob)` is the blob's bytes without a copy (writable);
/// `len(blob)` its size; `fingerprint()` its 32-byte BLAKE3 root over the
/// current bytes.
#[pyclass(module = "packetfs")]
#[derive(Debug)]
pub struct Blob {
    opened: OpenedBlob,
}

impl Blob {
    /// The blob inside (for the streaming classes).
    pub(crate) fn opened(&self) -> &OpenedBlob {
        &self.opened
    }

    /// The blob inside, to write (a subscription's writes land there).
    pub(crate) fn opened_mut(&mut self) -> &mut OpenedBlob {
        &mut self.opened
    }
}

#[pymethods]
impl Blob {
    /// Blob(size=64 MiB, seed=0x5eed, name=None, fill=True, keep=False)
    #[new]
    #[pyo3(signature = (size = 64 << 20, seed = 0x5eed, name = None, fill = true, keep = false))]
    fn new(size: u64, seed: u64, name: Option<String>, fill: bool, keep: bool) -> PyResult<Self> {
        if size == 0 {
            return Err(PyValueError::new_err("size must be > 0"));
        }
        let cfg = BlobConfig {
            name,
            size,
            fill: if fill { Fill::Seed(seed) } else { Fill::None },
            prefault: true,
            keep,
            ..BlobConfig::default()
        };
        let opened = open_blob(&cfg, true).map_err(|e| PyOSError::new_err(e.to_string()))?;
        Ok(Self { opened })
    }

    fn __len__(&self) -> usize {
        self.opened.blob.as_slice().len()
    }

    /// The 32-byte fingerprint root over the blob's current bytes.
    fn fingerprint<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        let root = py.detach(|| self.opened.blob.recompute_fingerprint(0).root);
        PyBytes::new(py, &root)
    }

    /// The blob's name, or None for an anonymous blob.
    #[getter]
    fn name(&self) -> Option<String> {
        self.opened.blob.name().map(str::to_string)
    }

    /// The buffer protocol: `memoryview(blob)` points into the mapping
    /// itself, writable. The view holds a reference to this object, so the
    /// mapping outlives every view of it.
    unsafe fn __getbuffer__(slf: Bound<'_, Self>, view: *mut ffi::Py_buffer, flags: c_int) -> PyResult<()> {
        let (ptr, len) = {
            let mut this = slf.borrow_mut();
            let data = this.opened.blob.as_mut_slice();
            (data.as_mut_ptr(), data.len())
        };
        let Ok(len) = isize::try_from(len) else {
            return Err(PyBufferError::new_err("blob larger than isize::MAX bytes"));
        };
        // SAFETY: `view` is the Py_buffer CPython passes to an exporter;
        // `ptr..ptr+len` is the blob's mapping, which never moves and stays
        // mapped while the view holds the reference to `slf` that FillInfo
        // takes (released with the view).
        let rc = unsafe { ffi::PyBuffer_FillInfo(view, slf.as_ptr(), ptr.cast(), len, 0, flags) };
        if rc != 0 {
            return Err(PyErr::fetch(slf.py()));
        }
        Ok(())
    }

    fn __repr__(&self) -> String {
        format!(
            "packetfs.Blob(size={}, name={:?}, fingerprint={})",
            self.opened.blob.len(),
            self.opened.blob.name(),
            self.opened.blob.fingerprint().short()
        )
    }
}

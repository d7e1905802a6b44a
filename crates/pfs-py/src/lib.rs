//! The `packetfs` Python module: what a Python program imports. Built by
//! maturin (`maturin develop -m crates/pfs-py/Cargo.toml`); its tests are
//! `tests/*.py`, run by `scripts/python-tests`.
//!
//! Bytes are never copied into Python objects: a [`Blob`] exports the
//! buffer protocol, so `memoryview(blob)` is the mapping itself, and numpy
//! or `hashlib` read it in place.

use pyo3::prelude::*;

mod blob;

pub use blob::Blob;

/// The package's version.
#[pyfunction]
fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

#[pymodule(name = "packetfs")]
fn packetfs_module(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Blob>()?;
    m.add_function(wrap_pyfunction!(version, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}

//! The `packetfs` Python module: what a Python program imports. Built by
//! maturin (`maturin develop -m crates/pfs-py/Cargo.toml`); its tests are
//! `tests/*.py`, run by `scripts/python-tests`.
//!
//! Bytes are never copied into Python objects: a [`Blob`] exports the
//! buffer protocol, so `memoryview(blob)` is the mapping itself, and numpy
//! or `hashlib` read it in place; a subscription's callback gets its
//! entries as memoryviews of the blob and of the received frame.
//!
//! Modules: `blob` the `Blob` class; `stream` streaming mode:
//! `Publication`, `Listener`, `Subscription`, `Gram`, `BackPressure`,
//! `StreamError`.

use pyo3::prelude::*;

mod blob;
mod stream;

pub use blob::Blob;
pub use stream::{Gram, Listener, Publication, Subscription};

/// The package's version.
#[pyfunction]
fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

#[pymodule(name = "packetfs")]
fn packetfs_module(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Blob>()?;
    m.add_class::<Publication>()?;
    m.add_class::<Listener>()?;
    m.add_class::<Subscription>()?;
    m.add_class::<Gram>()?;
    m.add("BackPressure", m.py().get_type::<stream::BackPressure>())?;
    m.add("StreamError", m.py().get_type::<stream::StreamError>())?;
    m.add_function(wrap_pyfunction!(version, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}

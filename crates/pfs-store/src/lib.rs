//! PacketFS store crate: being built (issue 6).

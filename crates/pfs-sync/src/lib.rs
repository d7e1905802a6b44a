//! PacketFS sync crate: being built (issue 6).

//! Row labels of the studies, exactly as the design brief spells them
//! (`Conventional (<tool>)`, `PFS-With-Payload-<T>`, `Native PFS … Mode - <T>`,
//! `pCPU …-mode`). The one place they are built: the suite, `pfs send`,
//! `pfs serve` and `pfs exec` all take them from here.

use pfs_wire::{Encoding, Mode};

/// The label of a transfer in `mode` over `transport` (`TCP`, `UDP`, `SHM`, …).
pub fn mode(mode: Mode, transport: &str) -> String {
    match mode {
        Mode::Payload => format!("PFS-With-Payload-{transport}"),
        Mode::Offset => format!("Native PFS Offset-only Mode - {transport}"),
        Mode::Arith => format!("Native PFS Arithmetic Mode - {transport}"),
    }
}

/// The label of a protected-session row: the plain row's label and its
/// record cipher, e.g. `PFS-With-Payload-TCP (aes-256-gcm)`.
pub fn protected(plain: &str, cipher: &str) -> String {
    format!("{plain} ({cipher})")
}

/// The label of the handshake-latency row.
pub const HANDSHAKE: &str = "Noise XX handshake - TCP";

/// The label of a session whose report names mode code `code`; an unknown
/// code (a newer peer) is shown by number rather than dropped.
pub fn session(code: u8, transport: &str) -> String {
    match Mode::from_u8(code) {
        Ok(m) => mode(m, transport),
        Err(_) => format!("mode {code}"),
    }
}

/// The label of a pCPU row executing a schedule in `encoding`.
pub fn pcpu(encoding: Encoding) -> &'static str {
    match encoding {
        Encoding::Absolute => "pCPU Offset-mode",
        Encoding::Arithmetic => "pCPU Arithmetic-mode",
    }
}

/// The label of a conventional baseline run with `tool` (`iperf3`, `scp`, `xxh3 loop` …).
pub fn conventional(tool: &str) -> String {
    format!("Conventional ({tool})")
}

/// The label of the QUIC baseline: a bulk transfer over quinn run by the suite.
pub fn quic() -> String {
    conventional("QUIC, quinn")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_as_in_the_design_brief() {
        assert_eq!(mode(Mode::Payload, "TCP"), "PFS-With-Payload-TCP");
        assert_eq!(mode(Mode::Offset, "SHM"), "Native PFS Offset-only Mode - SHM");
        assert_eq!(mode(Mode::Arith, "TCP"), "Native PFS Arithmetic Mode - TCP");
        assert_eq!(session(200, "TCP"), "mode 200");
        assert_eq!(pcpu(Encoding::Arithmetic), "pCPU Arithmetic-mode");
        assert_eq!(conventional("iperf3"), "Conventional (iperf3)");
        assert_eq!(quic(), "Conventional (QUIC, quinn)");
    }
}

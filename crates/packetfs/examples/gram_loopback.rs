//! A gram session over loopback TCP, both peers in one process: a receiver
//! thread serves one session over its blob; this thread sends offset-only
//! grams (descriptors, no payload) into the same bytes and prints the
//! receiver's report.
//!
//! `cargo run -p packetfs --example gram_loopback`

use packetfs::blob::{open_blob, study_blob};
use packetfs::gram::{
    self, IntegrityAlg, Mode, Pattern, ScheduleSpec, ServerConfig, SessionStats, Target, Total,
};
use packetfs::labels;
use packetfs::transport::{TcpConfig, TcpListener};

const BLOB: u64 = 4 << 20;

/// Runs the session; returns the receiver's report as the sender got it.
pub fn run() -> Result<SessionStats, Box<dyn std::error::Error>> {
    // Both peers map the same bytes: same size, same seed.
    let sender_blob = open_blob(&study_blob(BLOB, 0x5eed, None), true)?;
    let receiver_blob = open_blob(&study_blob(BLOB, 0x5eed, None), true)?;
    let listener = TcpListener::bind("127.0.0.1:0", TcpConfig::default())?;
    let addr = listener.socket_addr()?.to_string();
    std::thread::scope(|s| -> Result<SessionStats, Box<dyn std::error::Error>> {
        let view = receiver_blob.view();
        let server_cfg = ServerConfig {
            max_sessions: Some(1),
            ..ServerConfig::default()
        };
        s.spawn(move || gram::serve(&listener, &view, &server_cfg, &Default::default(), &|_| {}));

        let spec = ScheduleSpec {
            seed: 1,
            desc_per_gram: 256,
            max_len: 64 << 10,
            align: 64,
            pattern: Pattern::Random,
            total: Total::Bytes(16 << 20),
            blob_len: BLOB,
        };
        let cfg = gram::sender_config(Mode::Offset, IntegrityAlg::Xxh3, spec, 0);
        let conn = Target::Tcp { addr, sock_buf: 0 }.connect()?;
        let (out, kind, _) = gram::send_on(conn, &sender_blob.view(), &cfg)?;
        Ok(SessionStats::from_report(
            &out.report,
            kind,
            labels::session(out.report.mode, kind),
        ))
    })
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let stats = run()?;
    println!("{}", stats.human());
    assert!(stats.ok(), "the receiver's bytes matched every descriptor");
    Ok(())
}

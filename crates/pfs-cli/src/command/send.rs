//! `pfs send`: run a seeded schedule against a receiver and print the
//! receiver's authoritative report (plus the sender's own CPU beside it).

use packetfs::gram::{send_on, sender_config};
use packetfs::labels;
use pfs_exec::{ScheduleSpec, Total};
use pfs_session::{SessionError, SessionStats};
use pfs_sys::pin_current_thread;

use crate::args::{ScheduleArgs, SendArgs};
use crate::exit;

use super::{interval, open_blob};

/// Default effective bytes when neither --grams nor --bytes is given.
pub const DEFAULT_BYTES: u64 = 4 << 30;

/// The schedule spec for a blob of `blob_len` bytes.
pub fn schedule_spec(s: &ScheduleArgs, blob_len: u64) -> ScheduleSpec {
    ScheduleSpec {
        seed: s.schedule_seed,
        desc_per_gram: s.desc_per_gram,
        max_len: s.max_len,
        align: s.align,
        pattern: s.pattern.pattern(),
        total: match (s.grams, s.bytes) {
            (Some(g), _) => Total::Grams(g),
            (None, Some(b)) => Total::Bytes(b),
            (None, None) => Total::Bytes(DEFAULT_BYTES),
        },
        blob_len,
    }
}

pub use packetfs::endpoint::target;

pub fn run(args: SendArgs) -> anyhow::Result<i32> {
    args.transport.check()?;
    if !args.paths.is_empty() {
        return super::send_files::run(&args);
    }
    let log = interval(args.run.log_interval, args.run.json)?;
    // Connect before the blob is set up: an unreachable or refusing peer
    // fails in milliseconds, not after seconds of mapping and filling. The
    // receiver gives a connection its idle timeout for the first byte of
    // HELLO, so the setup fits.
    packetfs::files::parse_blob_target(&args.to, args.transport.transport.is_network())
        .map_err(|e| anyhow::Error::new(e).context("--to"))?;
    let security = super::auth::client_security(&args.auth, &args.to, args.transport.transport)?;
    let to = target(&args.to, &args.transport, args.run.sock_buf);
    let conn = to.connect_as(security.as_ref(), pfs_auth::Service::Blob)?;
    let opened = open_blob(&args.blob, false)?;
    if let Some(cpu) = args.run.pin {
        pin_current_thread(cpu).map_err(|e| anyhow::anyhow!("--pin {cpu}: {e}"))?;
    }
    let spec = schedule_spec(&args.schedule, opened.blob.len());
    spec.validate()?;
    let mode = args.mode.mode();
    let mut cfg = sender_config(mode, args.integrity.alg(), spec, args.schedule.gram_payload_max);
    cfg.log_interval = log;
    cfg.integrity_sample = args.integrity_sample;
    cfg.catch_up = args.catch_up;
    let (out, kind, udp) = match send_on(conn, &opened.view(), &cfg) {
        Err(e) if refused_corrections(&e) => {
            // A receiver from before the corrections plane (wire §13.1)
            // refuses the offer: today's session, on a new connection.
            eprintln!(
                "pfs: the receiver predates the corrections plane (docs/wire.md §13): sending without repairs{}",
                if args.integrity_sample > 1 { " or sampling" } else { "" }
            );
            cfg.corrections = false;
            let conn = to.connect_as(security.as_ref(), pfs_auth::Service::Blob)?;
            send_on(conn, &opened.view(), &cfg)?
        }
        other => other?,
    };

    let stats = SessionStats::from_report(&out.report, kind, labels::session(out.report.mode, kind))
        .with_corrections(out.corrections);
    if args.run.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&packetfs::report::outcome_json(
                &stats,
                &out,
                spec.pattern.name(),
                udp.as_ref()
            ))?
        );
    } else {
        println!("{}", stats.human());
        if let Some(c) = &out.catch_up {
            println!("{}", packetfs::report::catch_up_line(c));
        }
        let descs = out.summary.descriptors.max(1);
        println!(
            "  sender         {:.3} s, user {:.3} s, sys {:.3} s; descriptor table {:.2} bytes/descriptor ({} encoding, {} pattern)",
            out.sender_elapsed.as_secs_f64(),
            out.sender_usage.user_us as f64 / 1e6,
            out.sender_usage.sys_us as f64 / 1e6,
            out.table_bytes as f64 / descs as f64,
            mode.encoding().name(),
            spec.pattern.name(),
        );
        if let Some(u) = &udp {
            println!("{}", packetfs::report::udp_line(u));
        }
    }
    if !stats.ok() {
        eprintln!("pfs: {}", stats.mismatch_line());
        return Ok(exit::INTEGRITY);
    }
    Ok(exit::OK)
}

/// Whether `e` is a receiver from before wire §13 refusing HELLO's
/// `CORRECTIONS` flag: its `hello_flags` were reserved, so it answers
/// ERROR BAD_FRAME about HELLO's reserved field (a §13 receiver never
/// refuses a HELLO this sender encoded).
fn refused_corrections(e: &packetfs::Error) -> bool {
    matches!(
        e,
        packetfs::Error::Session(SessionError::Refused { code, message })
            if *code == pfs_wire::ErrorCode::BadFrame as u16 && message.contains("HELLO") && message.contains("reserved")
    )
}

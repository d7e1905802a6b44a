//! `pfs send`: run a seeded schedule against a receiver and print the
//! receiver's authoritative report (plus the sender's own CPU beside it).

use std::path::PathBuf;

use pfs_bench::labels;
use pfs_bench::peer::{send_on, sender_config, Target};
use pfs_exec::{ScheduleSpec, Total};
use pfs_session::{GramSenderOutcome, SessionError, SessionStats};
use pfs_sys::pin_current_thread;

use crate::args::{ScheduleArgs, SendArgs, TransportArg, TransportArgs};
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

/// The UDP connection's line in `pfs send`'s text output.
pub fn udp_line(u: &pfs_transport::udp::UdpReport) -> String {
    let s = &u.stats;
    format!(
        "  udp            {} datagrams of ≤ {} B sent ({:.3} MB), {} received; stream resent {:.3} MB \
         ({} packets lost, {} of them spurious, {} probe timeouts, {} congested round trips); srtt {}, bandwidth estimate {:.1} Mbit/s; \
         GSO {}, GRO {}; datagrams {}, {} unauthenticated dropped, {} ICMP unreachable hints",
        s.packets_sent,
        u.datagram,
        s.bytes_sent as f64 / 1e6,
        s.packets_received,
        s.stream_bytes_resent as f64 / 1e6,
        s.packets_lost,
        s.packets_spurious,
        s.probe_timeouts,
        s.congested_rounds,
        u.srtt.map_or("-".into(), |d| format!("{:.3} ms", d.as_secs_f64() * 1e3)),
        u.bandwidth as f64 * 8.0 / 1e6,
        if u.gso { "on" } else { "off" },
        if u.gro { "on" } else { "off" },
        if u.tagged { "tagged" } else { "untagged" },
        s.unauthenticated,
        s.unreachable_hints,
    )
}

/// The UDP connection's counters as JSON.
pub fn udp_json(u: &pfs_transport::udp::UdpReport) -> serde_json::Value {
    let s = &u.stats;
    serde_json::json!({
        "datagram_bytes": u.datagram,
        "packets_sent": s.packets_sent,
        "packets_received": s.packets_received,
        "bytes_sent": s.bytes_sent,
        "bytes_received": s.bytes_received,
        "stream_bytes_sent": s.stream_bytes_sent,
        "stream_bytes_resent": s.stream_bytes_resent,
        "packets_lost": s.packets_lost,
        "packets_spurious": s.packets_spurious,
        "probe_timeouts": s.probe_timeouts,
        "congested_rounds": s.congested_rounds,
        "acks_sent": s.acks_sent,
        "stream_bytes_duplicate": s.stream_bytes_duplicate,
        "packets_ignored": s.packets_ignored,
        "srtt_s": u.srtt.map(|d| d.as_secs_f64()),
        "bandwidth_bytes_per_s": u.bandwidth,
        "gso": u.gso,
        "gro": u.gro,
        "tagged": u.tagged,
        "unauthenticated": s.unauthenticated,
        "unreachable_hints": s.unreachable_hints,
    })
}

/// JSON document printed by `pfs send --json`.
pub fn outcome_json(
    stats: &SessionStats,
    out: &GramSenderOutcome,
    pattern: &str,
    udp: Option<&pfs_transport::udp::UdpReport>,
) -> serde_json::Value {
    let descs = out.summary.descriptors.max(1);
    serde_json::json!({
        "udp": udp.map(udp_json),
        "receiver": stats,
        "sender": {
            "grams": out.summary.grams,
            "descriptors": out.summary.descriptors,
            "effective_bytes": out.summary.effective_bytes,
            "wire_bytes_sent": out.summary.wire_bytes_sent,
            "table_bytes": out.table_bytes,
            "table_bytes_per_descriptor": out.table_bytes as f64 / descs as f64,
            "elapsed_s": out.sender_elapsed.as_secs_f64(),
            "user_s": out.sender_usage.user_us as f64 / 1e6,
            "sys_s": out.sender_usage.sys_us as f64 / 1e6,
            "pattern": pattern,
            "repairs_sent": out.repairs_sent,
            "repair_bytes_sent": out.repair_bytes_sent,
        },
    })
}

/// The target named on the command line.
pub fn target(to: &str, t: &TransportArgs, sock_buf: u64) -> Target {
    match t.transport {
        TransportArg::Tcp => Target::Tcp {
            addr: to.to_string(),
            sock_buf: sock_buf as usize,
        },
        TransportArg::Unix => Target::Unix(PathBuf::from(to)),
        TransportArg::Shm => Target::Shm(PathBuf::from(to), t.shm()),
        TransportArg::Udp => Target::Udp {
            addr: to.to_string(),
            cfg: t.udp(to),
        },
    }
}

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
            serde_json::to_string_pretty(&outcome_json(&stats, &out, spec.pattern.name(), udp.as_ref()))?
        );
    } else {
        println!("{}", stats.human());
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
            println!("{}", udp_line(u));
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
fn refused_corrections(e: &anyhow::Error) -> bool {
    matches!(
        e.downcast_ref::<SessionError>(),
        Some(SessionError::Refused { code, message })
            if *code == pfs_wire::ErrorCode::BadFrame as u16 && message.contains("HELLO") && message.contains("reserved")
    )
}

//! Rendering a finished suite: terminal table, CSV, Markdown.

use super::row::{Header, Row};

pub fn fmt_table(header: &Header, rows: &[Row]) -> String {
    let mut s = String::new();
    s.push_str(&format!(
        "pfs bench — {} · kernel {} · {} · {} cores · THP {}\nblob: sender {} · receiver {} · {} bytes · {} · {}\nreceiver blob setup: {}\n\n",
        header.git_revision,
        header.kernel,
        header.cpu_model,
        header.cores,
        header.thp_mode,
        header.sender_blob,
        header.receiver_blob,
        header.blob_bytes,
        header.path,
        header.pinning,
        header.receiver_setup
    ));
    s.push_str(&format!(
        "{:<40} {:>5} {:>10} {:>10} {:>10} {:>7} {:>10} {:>7} {:>7} {:>9} {:<8} {}\n",
        "label",
        "integ",
        "eff_MB",
        "wire_MB",
        "wire/eff",
        "time_s",
        "eff_MB/s",
        "user_s",
        "sys_s",
        "MB/CPU-s",
        "check",
        "notes"
    ));
    for r in rows {
        s.push_str(&format!(
            "{:<40} {:>5} {:>10.1} {:>10.3} {:>10.6} {:>7.3} {:>10.1} {:>7.3} {:>7.3} {:>9.1} {:<8} {}\n",
            r.label,
            integ_short(r),
            r.effective_mb,
            r.wire_mb,
            r.wire_ratio,
            r.elapsed_s,
            r.effective_mb_s,
            r.user_s,
            r.sys_s,
            r.mb_per_cpu_s,
            r.integrity,
            r.notes
        ));
    }
    s.push_str("\nMB = 10^6 bytes. Receiver-side numbers (PFS: from the receiver's COMPLETE report; iperf3: its server side).\n");
    s
}

pub fn integ_short(r: &Row) -> &str {
    r.integrity_alg()
}

pub fn csv_escape(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

pub fn to_csv(rows: &[Row]) -> String {
    let mut out = String::from(
        "label,purpose,effective_mb,wire_mb,wire_ratio,elapsed_s,effective_mb_s,user_s,sys_s,cpu_total_s,mb_per_cpu_s,integrity,pthreads,transport,notes\n",
    );
    for r in rows {
        out.push_str(&format!(
            "{},{},{:.3},{:.6},{:.8},{:.4},{:.1},{:.4},{:.4},{:.4},{:.1},{},{},{},{}\n",
            csv_escape(&r.label),
            r.purpose,
            r.effective_mb,
            r.wire_mb,
            r.wire_ratio,
            r.elapsed_s,
            r.effective_mb_s,
            r.user_s,
            r.sys_s,
            r.cpu_total_s,
            r.mb_per_cpu_s,
            r.integrity,
            r.pthreads,
            r.transport,
            csv_escape(&r.notes)
        ));
    }
    out
}

pub fn to_markdown(header: &Header, rows: &[Row]) -> String {
    let mut out = format!(
        "Host: {} cores, {}, kernel {}, THP `{}` · revision `{}` · blob {} bytes (sender {}, receiver {}) · {} · {}\n\n",
        header.cores,
        header.cpu_model,
        header.kernel,
        header.thp_mode,
        header.git_revision,
        header.blob_bytes,
        header.sender_blob,
        header.receiver_blob,
        header.path,
        header.pinning
    );
    out.push_str(&format!("Receiver blob setup: {}\n\n", header.receiver_setup));
    out.push_str("| label | purpose | effective MB | wire MB | wire/eff | elapsed s | eff MB/s | user s | sys s | MB/CPU-s | integrity | notes |\n");
    out.push_str("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|\n");
    for r in rows {
        out.push_str(&format!(
            "| {} | {} | {:.1} | {:.3} | {:.6} | {:.3} | {:.1} | {:.3} | {:.3} | {:.1} | {} | {} |\n",
            r.label,
            r.purpose,
            r.effective_mb,
            r.wire_mb,
            r.wire_ratio,
            r.elapsed_s,
            r.effective_mb_s,
            r.user_s,
            r.sys_s,
            r.mb_per_cpu_s,
            r.integrity,
            r.notes.replace('|', "/")
        ));
    }
    out
}

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
    let widths = [40, 5, 3, 10, 10, 10, 7, 10, 7, 7, 9, 8];
    let line = |cells: &[String]| {
        let mut l = String::new();
        for (k, c) in cells.iter().enumerate() {
            match widths.get(k) {
                // Label and check column left-aligned, numbers right-aligned, notes last.
                Some(&w) if k == 0 || k == 11 => l.push_str(&format!("{c:<w$} ")),
                Some(&w) => l.push_str(&format!("{c:>w$} ")),
                None => l.push_str(c),
            }
        }
        l.trim_end().to_string() + "\n"
    };
    s.push_str(&line(&DISPLAY_HEAD.map(String::from)));
    for r in rows {
        s.push_str(&line(&display_cells(r)));
    }
    s.push_str("\nMB = 10^6 bytes. Receiver-side numbers (PFS: from the receiver's COMPLETE report; iperf3: its server side).\n");
    s
}

/// Column titles of the terminal and Markdown tables (CSV and JSON carry every field).
const DISPLAY_HEAD: [&str; 13] = [
    "label", "integ", "thr", "eff_MB", "wire_MB", "wire/eff", "time_s", "eff_MB/s", "user_s", "sys_s",
    "MB/CPU-s", "check", "notes",
];

/// One row's cells for the terminal and Markdown tables, formatted once.
fn display_cells(r: &Row) -> [String; 13] {
    [
        r.label.clone(),
        r.integrity_alg().to_string(),
        r.pthreads.to_string(),
        format!("{:.1}", r.effective_mb),
        format!("{:.3}", r.wire_mb),
        format!("{:.6}", r.wire_ratio),
        format!("{:.3}", r.elapsed_s),
        format!("{:.1}", r.effective_mb_s),
        format!("{:.3}", r.user_s),
        format!("{:.3}", r.sys_s),
        format!("{:.1}", r.mb_per_cpu_s),
        r.integrity.clone(),
        r.notes.clone(),
    ]
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
    out.push_str(&format!("| {} |\n", DISPLAY_HEAD.join(" | ")));
    out.push_str("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|\n");
    for r in rows {
        let cells = display_cells(r).map(|c| c.replace('|', "/"));
        out.push_str(&format!("| {} |\n", cells.join(" | ")));
    }
    out
}

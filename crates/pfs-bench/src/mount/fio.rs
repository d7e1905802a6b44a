//! fio, run as a child process: the two workloads of the mount study
//! (`randread bs=4k`, `read bs=1M`), one job line per run with
//! `--output-format=json`, and the figures taken from its report.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context};

use crate::child::{have, run_client, tool};

/// One of the study's fio workloads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Workload {
    /// Name in labels and JSON (`randread 4k`).
    pub name: &'static str,
    /// fio `rw=`.
    pub rw: &'static str,
    /// fio `bs=`.
    pub bs: &'static str,
}

/// The workloads, in report order.
pub const WORKLOADS: [Workload; 2] = [
    Workload {
        name: "randread 4k",
        rw: "randread",
        bs: "4k",
    },
    Workload {
        name: "read 1M",
        rw: "read",
        bs: "1M",
    },
];

/// How long a job runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Timing {
    /// `time_based`: `runtime` seconds measured after `ramp` seconds not
    /// counted, the file read again and again.
    Timed {
        /// Seconds measured.
        runtime: f64,
        /// Seconds run first and not counted.
        ramp: f64,
    },
    /// One pass over the file per job (no ramp: a cold read must count its
    /// first I/O), stopped after `cap` seconds if it is slower than that.
    OnePass {
        /// Most seconds.
        cap: f64,
    },
}

/// One fio run.
#[derive(Debug, Clone)]
pub struct Job<'a> {
    /// The file read.
    pub file: &'a Path,
    /// Bytes of it each job reads over.
    pub size: u64,
    /// What is read.
    pub workload: Workload,
    /// fio `numjobs` (reader processes).
    pub numjobs: u32,
    /// `direct=1`: past the page cache.
    pub direct: bool,
    /// How long.
    pub timing: Timing,
}

/// What fio reported (group_reporting: all jobs together).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FioResult {
    /// Read operations per second.
    pub iops: f64,
    /// Bytes per second.
    pub bw_bytes: f64,
    /// Bytes read in the measured part.
    pub io_bytes: u64,
    /// Milliseconds measured.
    pub runtime_ms: u64,
}

impl FioResult {
    /// Decimal MB/s.
    pub fn mb_s(&self) -> f64 {
        self.bw_bytes / 1e6
    }
}

/// The fio program (`PFS_BENCH_FIO` overrides).
pub fn program() -> String {
    tool("fio", "fio")
}

/// `fio --version` (`fio-3.33`), or why there is none.
pub fn version() -> Result<String, String> {
    let fio = program();
    if !have(&fio) {
        return Err("fio not installed (apt-get install fio)".into());
    }
    let out = Command::new(&fio)
        .arg("--version")
        .output()
        .map_err(|e| format!("running {fio} --version: {e}"))?;
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// fio's command line for `job` (also shown in the report's method line).
pub fn args(job: &Job<'_>) -> Vec<String> {
    let ms = |s: f64| format!("{}ms", (s * 1e3).round().max(1.0) as u64);
    let mut a = vec![
        "--name=pfs-bench-mount".to_string(),
        format!("--filename={}", job.file.display()),
        format!("--size={}", job.size),
        "--readonly".into(),
        "--ioengine=psync".into(),
        format!("--rw={}", job.workload.rw),
        format!("--bs={}", job.workload.bs),
        format!("--numjobs={}", job.numjobs),
        "--group_reporting".into(),
        format!("--direct={}", u8::from(job.direct)),
        // The page cache is what a warm row measures: fio must not drop it
        // (its default invalidates the file's cache before each job).
        "--invalidate=0".into(),
        "--output-format=json".into(),
    ];
    match job.timing {
        Timing::Timed { runtime, ramp } => {
            a.push("--time_based".into());
            a.push(format!("--runtime={}", ms(runtime)));
            if ramp > 0.0 {
                a.push(format!("--ramp_time={}", ms(ramp)));
            }
        }
        Timing::OnePass { cap } => a.push(format!("--runtime={}", ms(cap))),
    }
    a
}

/// Runs `job` to completion.
pub fn run(job: &Job<'_>) -> anyhow::Result<FioResult> {
    let mut cmd = Command::new(program());
    cmd.args(args(job));
    let limit = match job.timing {
        Timing::Timed { runtime, ramp } => runtime + ramp,
        Timing::OnePass { cap } => cap,
    };
    let out = run_client(cmd, Duration::from_secs_f64(limit + 60.0))?;
    if !out.status.success() {
        bail!(
            "fio failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    parse(&String::from_utf8_lossy(&out.stdout))
}

/// The figures of a `--output-format=json` report (text before the JSON,
/// such as fio's warnings, is skipped).
pub fn parse(stdout: &str) -> anyhow::Result<FioResult> {
    let start = stdout.find('{').context("fio printed no JSON")?;
    let v: serde_json::Value = serde_json::from_str(&stdout[start..]).context("fio's JSON report")?;
    let read = &v["jobs"][0]["read"];
    if read.is_null() {
        bail!("fio's report has no jobs[0].read");
    }
    let iops = read["iops"].as_f64().context("jobs[0].read.iops")?;
    let bw_bytes = read["bw_bytes"].as_f64().context("jobs[0].read.bw_bytes")?;
    let io_bytes = read["io_bytes"].as_u64().unwrap_or(0);
    let runtime_ms = read["runtime"].as_u64().unwrap_or(0);
    let errors = v["jobs"][0]["error"].as_u64().unwrap_or(0);
    if errors != 0 {
        bail!("fio reported error {errors}");
    }
    if io_bytes == 0 {
        bail!("fio read nothing");
    }
    Ok(FioResult {
        iops,
        bw_bytes,
        io_bytes,
        runtime_ms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_group_report_after_warnings() {
        let out =
            "fio: some warning\n{\"fio version\":\"fio-3.33\",\"jobs\":[{\"jobname\":\"x\",\"error\":0,\
                   \"read\":{\"io_bytes\":4096000,\"bw_bytes\":819200,\"iops\":200.5,\"runtime\":5000}}]}";
        let r = parse(out).unwrap();
        assert_eq!(r.iops, 200.5);
        assert_eq!(r.io_bytes, 4_096_000);
        assert_eq!(r.runtime_ms, 5000);
        assert!((r.mb_s() - 0.8192).abs() < 1e-9);
        assert!(parse("no json").is_err());
        assert!(
            parse("{\"jobs\":[{\"error\":0,\"read\":{\"io_bytes\":0,\"bw_bytes\":0,\"iops\":0}}]}").is_err()
        );
    }

    #[test]
    fn command_lines() {
        let f = Path::new("/m/f");
        let job = Job {
            file: f,
            size: 1 << 20,
            workload: WORKLOADS[0],
            numjobs: 2,
            direct: true,
            timing: Timing::Timed {
                runtime: 5.0,
                ramp: 1.0,
            },
        };
        let a = args(&job);
        for want in [
            "--filename=/m/f",
            "--rw=randread",
            "--bs=4k",
            "--numjobs=2",
            "--direct=1",
            "--readonly",
            "--ioengine=psync",
            "--time_based",
            "--runtime=5000ms",
            "--ramp_time=1000ms",
            "--group_reporting",
            "--output-format=json",
        ] {
            assert!(a.iter().any(|x| x == want), "{want} missing from {a:?}");
        }
        let one = args(&Job {
            timing: Timing::OnePass { cap: 2.5 },
            direct: false,
            ..job
        });
        assert!(!one
            .iter()
            .any(|x| x == "--time_based" || x.starts_with("--ramp_time")));
        assert!(one.iter().any(|x| x == "--runtime=2500ms"));
    }
}

use super::*;

use crate::error::Timeout;

/// The value of the sample `series` (name and labels as rendered).
fn value(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|v| v.strip_prefix(' ')))
        .unwrap_or_else(|| panic!("no {series} in\n{text}"))
        .parse()
        .unwrap()
}

fn ok_result() -> Result<u64, SessionError> {
    Ok(1000)
}

#[test]
fn a_running_session_shows_its_bytes_and_ends_into_the_totals() {
    let m = Metrics::new("1.2.3");
    let flow = Arc::new(Flow::default());
    let live = m.start(Some(Service::Blob), flow.clone());
    flow.add_in(300);
    flow.add_out(20);
    let text = m.render();
    assert_eq!(value(&text, "pfs_sessions_active{service=\"blob\"}"), 1.0);
    assert_eq!(
        value(&text, "pfs_wire_bytes_total{service=\"blob\",direction=\"in\"}"),
        300.0
    );
    assert_eq!(
        value(&text, "pfs_wire_bytes_total{service=\"blob\",direction=\"out\"}"),
        20.0
    );
    assert_eq!(value(&text, "pfs_build_info{version=\"1.2.3\"}"), 1.0);
    flow.add_in(700);
    m.end(
        live,
        Service::Blob,
        &ok_result(),
        |n| *n,
        (Duration::from_millis(2), false),
    );
    let text = m.render();
    assert_eq!(value(&text, "pfs_sessions_active{service=\"blob\"}"), 0.0);
    assert_eq!(
        value(&text, "pfs_sessions_total{service=\"blob\",outcome=\"ok\"}"),
        1.0
    );
    assert_eq!(
        value(&text, "pfs_wire_bytes_total{service=\"blob\",direction=\"in\"}"),
        1000.0
    );
    assert_eq!(
        value(&text, "pfs_effective_bytes_total{service=\"blob\"}"),
        1000.0
    );
    // 2 ms falls in the first bucket; every bucket counts it.
    assert_eq!(
        value(
            &text,
            "pfs_session_duration_seconds_bucket{service=\"blob\",le=\"0.01\"}"
        ),
        1.0
    );
    assert_eq!(
        value(
            &text,
            "pfs_session_duration_seconds_bucket{service=\"blob\",le=\"+Inf\"}"
        ),
        1.0
    );
    assert_eq!(
        value(&text, "pfs_session_duration_seconds_count{service=\"blob\"}"),
        1.0
    );
}

/// A plain connection to a files server counts from its first frame on,
/// under the service that frame names: no counter of another service
/// ever goes down.
#[test]
fn a_session_counts_under_its_service_once_known() {
    let m = Metrics::new("t");
    let flow = Arc::new(Flow::default());
    let live = m.start(None, flow.clone());
    flow.add_in(16);
    let text = m.render();
    assert_eq!(value(&text, "pfs_sessions_active{service=\"files\"}"), 0.0);
    assert_eq!(
        value(&text, "pfs_wire_bytes_total{service=\"files\",direction=\"in\"}"),
        0.0
    );
    live.set_service(Service::Mount);
    let text = m.render();
    assert_eq!(value(&text, "pfs_sessions_active{service=\"mount\"}"), 1.0);
    assert_eq!(
        value(&text, "pfs_wire_bytes_total{service=\"mount\",direction=\"in\"}"),
        16.0
    );
    let served: Result<u64, SessionError> = Ok(4096);
    m.end(
        live,
        Service::Files,
        &served,
        |n| *n,
        (Duration::from_secs(400), false),
    );
    let text = m.render();
    assert_eq!(
        value(&text, "pfs_effective_bytes_total{service=\"mount\"}"),
        4096.0
    );
    assert_eq!(
        value(
            &text,
            "pfs_session_duration_seconds_bucket{service=\"mount\",le=\"300\"}"
        ),
        0.0
    );
    assert_eq!(
        value(
            &text,
            "pfs_session_duration_seconds_bucket{service=\"mount\",le=\"900\"}"
        ),
        1.0
    );
    assert_eq!(
        value(&text, "pfs_session_duration_seconds_sum{service=\"mount\"}"),
        400.0
    );
}

#[test]
fn failures_refusals_and_limits_are_counted_by_kind() {
    let m = Metrics::new("t");
    let end = |err: SessionError, cut: bool| {
        let live = m.start(Some(Service::Files), Arc::new(Flow::default()));
        let r: Result<u64, SessionError> = Err(err);
        m.end(live, Service::Files, &r, |n| *n, (Duration::ZERO, cut));
    };
    let idle = Timeout::Idle {
        during: "x",
        after: Duration::from_secs(1),
    };
    end(SessionError::TimedOut { what: idle }, false);
    end(SessionError::PeerClosed { during: "x" }, false);
    let aborted = || std::io::Error::new(std::io::ErrorKind::ConnectionAborted, "cut");
    end(SessionError::transport("x", aborted()), true);
    end(SessionError::transport("x", aborted()), false);
    end(Violation::Unauthorized("no-files").into(), false);
    let over = LimitExceeded::Peer {
        what: "entries",
        asked: 10,
        limit: 1,
    };
    end(over.into(), false);
    m.refused(Refusal::Busy, Some(Limit::MaxPerKey));
    m.refused(Refusal::Dropped, None);
    m.accepted();
    let text = m.render();
    let files = |kind: &str| {
        value(
            &text,
            &format!("pfs_session_errors_total{{service=\"files\",kind=\"{kind}\"}}"),
        )
    };
    assert_eq!(files("timeout"), 1.0);
    assert_eq!(files("closed"), 1.0);
    assert_eq!(files("cut"), 1.0);
    assert_eq!(files("transport"), 1.0);
    assert_eq!(files("limit"), 1.0);
    assert_eq!(
        value(&text, "pfs_sessions_total{service=\"files\",outcome=\"failed\"}"),
        5.0
    );
    assert_eq!(
        value(&text, "pfs_sessions_total{service=\"files\",outcome=\"refused\"}"),
        1.0
    );
    assert_eq!(value(&text, "pfs_refusals_total{kind=\"auth\"}"), 1.0);
    assert_eq!(value(&text, "pfs_refusals_total{kind=\"busy\"}"), 1.0);
    assert_eq!(value(&text, "pfs_refusals_total{kind=\"dropped\"}"), 1.0);
    assert_eq!(value(&text, "pfs_limits_hit_total{limit=\"max_per_key\"}"), 1.0);
    assert_eq!(value(&text, "pfs_limits_hit_total{limit=\"max_admitting\"}"), 1.0);
    assert_eq!(value(&text, "pfs_limits_hit_total{limit=\"request\"}"), 1.0);
    assert_eq!(value(&text, "pfs_connections_accepted_total"), 1.0);
}

#[test]
fn label_values_are_escaped() {
    let m = Metrics::new("1.0 \"dev\"\\\n");
    assert!(m
        .render()
        .contains("pfs_build_info{version=\"1.0 \\\"dev\\\"\\\\\\n\"} 1\n"));
}

//! What an emulated link is asked to be (`--link rtt=50ms,loss=1%,rate=500mbit`,
//! any subset) and the sizes derived from it: the delay line's slots and
//! the rate cap's queue. Pure: parsing and arithmetic, no I/O.

use std::fmt;
use std::time::Duration;

/// Packet loss as a whole number of parts per ten thousand (0.01 % steps):
/// the unit of the nftables rule `numgen random mod 10000 < N drop`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Loss(u16);

impl Loss {
    /// No loss.
    pub const NONE: Loss = Loss(0);
    /// Every packet lost.
    pub const ALL: Loss = Loss(10_000);

    /// `per_10k` parts per ten thousand; `None` above 10 000.
    pub fn from_per_10k(per_10k: u16) -> Option<Self> {
        (per_10k <= 10_000).then_some(Loss(per_10k))
    }

    /// Parts per ten thousand (the nftables threshold).
    pub fn per_10k(self) -> u16 {
        self.0
    }

    /// The loss in percent.
    pub fn percent(self) -> f64 {
        f64::from(self.0) / 100.0
    }

    /// Whether no packet is dropped.
    pub fn is_none(self) -> bool {
        self.0 == 0
    }

    /// Parses `1%`, `0.5%`, `20%`; with `percent_sign_optional`, also `1`.
    fn parse(text: &str, percent_sign_optional: bool) -> Result<Self, String> {
        let t = text.trim();
        let num = match t.strip_suffix('%') {
            Some(n) => n.trim(),
            None if percent_sign_optional => t,
            None => return Err(format!("loss {t:?} needs a % sign (e.g. loss=1%)")),
        };
        let v: f64 = num
            .parse()
            .map_err(|_| format!("loss {t:?} is not a percentage (e.g. 1%, 0.5%, 20%)"))?;
        if !(0.0..=100.0).contains(&v) {
            return Err(format!("loss {t:?} must be between 0% and 100%"));
        }
        let per_10k = v * 100.0;
        if (per_10k - per_10k.round()).abs() > 1e-6 {
            return Err(format!(
                "loss {t:?} is finer than 0.01% (the step of the kernel's random drop)"
            ));
        }
        Ok(Loss(per_10k.round() as u16))
    }
}

impl fmt::Display for Loss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_multiple_of(100) {
            write!(f, "{} %", self.0 / 100)
        } else {
            write!(f, "{:.2} %", self.percent())
        }
    }
}

/// A rate in bits per second (decimal units, as tc(8) counts them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Rate(u64);

impl Rate {
    /// `bits` per second; `None` for zero.
    pub fn from_bits_per_s(bits: u64) -> Option<Self> {
        (bits > 0).then_some(Rate(bits))
    }

    /// Bits per second.
    pub fn bits_per_s(self) -> u64 {
        self.0
    }

    /// Bytes per second.
    pub fn bytes_per_s(self) -> f64 {
        self.0 as f64 / 8.0
    }

    /// Megabits per second (10^6).
    pub fn mbit_per_s(self) -> f64 {
        self.0 as f64 / 1e6
    }

    fn parse(text: &str) -> Result<Self, String> {
        let t = text.trim().to_ascii_lowercase();
        let split = t
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(t.len());
        let (num, unit) = t.split_at(split);
        let mult = match unit {
            "bit" => 1e0,
            "kbit" => 1e3,
            "mbit" => 1e6,
            "gbit" => 1e9,
            "" => {
                return Err(format!(
                    "rate {text:?} needs a unit: kbit, mbit or gbit (e.g. rate=500mbit)"
                ))
            }
            other => {
                return Err(format!(
                "unknown rate unit {other:?} in {text:?} (use kbit, mbit or gbit: bits per second, decimal)"
            ))
            }
        };
        let v: f64 = num
            .parse()
            .map_err(|_| format!("rate {text:?} is not a number with a unit (e.g. 500mbit)"))?;
        let bits = v * mult;
        // Below 8 kbit/s a 1500-byte packet takes longer than any sane test.
        if !bits.is_finite() || !(8_000.0..=1e12).contains(&bits) {
            return Err(format!("rate {text:?} must be between 8kbit and 1000gbit"));
        }
        Ok(Rate(bits.round() as u64))
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        if b.is_multiple_of(1_000_000_000) {
            write!(f, "{} Gbit/s", b / 1_000_000_000)
        } else if b.is_multiple_of(1_000_000) {
            write!(f, "{} Mbit/s", b / 1_000_000)
        } else if b.is_multiple_of(1_000) {
            write!(f, "{} kbit/s", b / 1_000)
        } else {
            write!(f, "{b} bit/s")
        }
    }
}

/// The link asked for: any subset of round-trip time, loss and rate. An
/// absent key means "not emulated": no delay, no drop rule, no rate cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LinkSpec {
    /// Round-trip time added by the delay line (half in each direction).
    pub rtt: Option<Duration>,
    /// Random loss per packet, applied in each direction.
    pub loss: Option<Loss>,
    /// Rate cap in each direction.
    pub rate: Option<Rate>,
}

/// The longest round trip a spec may ask for (the delay line holds every
/// packet of one one-way delay in memory).
pub const MAX_RTT: Duration = Duration::from_secs(10);

impl LinkSpec {
    /// Parses `rtt=50ms,loss=1%,rate=500mbit` (any subset, any order, each key once).
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut spec = LinkSpec::default();
        if text.trim().is_empty() {
            return Err("empty link spec (example: rtt=50ms,loss=1%,rate=500mbit)".into());
        }
        for part in text.split(',') {
            let part = part.trim();
            let Some((key, value)) = part.split_once('=') else {
                return Err(format!(
                    "{part:?} is not KEY=VALUE (keys: rtt, loss, rate; example: rtt=50ms,loss=1%,rate=500mbit)"
                ));
            };
            let (key, value) = (key.trim().to_ascii_lowercase(), value.trim());
            let dup = || format!("{key} is given twice in {text:?}");
            match key.as_str() {
                "rtt" => {
                    if spec.rtt.replace(parse_duration(value)?).is_some() {
                        return Err(dup());
                    }
                }
                "loss" => {
                    if spec.loss.replace(Loss::parse(value, false)?).is_some() {
                        return Err(dup());
                    }
                }
                "rate" => {
                    if spec.rate.replace(Rate::parse(value)?).is_some() {
                        return Err(dup());
                    }
                }
                other => {
                    return Err(format!(
                        "unknown link key {other:?} (keys: rtt, loss, rate; example: rtt=50ms,loss=1%,rate=500mbit)"
                    ))
                }
            }
        }
        Ok(spec)
    }

    /// The delay of each direction: half the round trip.
    pub fn one_way(&self) -> Duration {
        self.rtt.unwrap_or_default() / 2
    }

    /// The loss of each direction (none when not asked).
    pub fn loss(&self) -> Loss {
        self.loss.unwrap_or_default()
    }

    /// The bottleneck of each direction, when a rate is asked.
    pub fn bottleneck(&self) -> Option<Bottleneck> {
        self.rate
            .map(|r| Bottleneck::new(r, self.rtt.unwrap_or_default()))
    }

    /// Packet slots of one direction's delay line for packets of `mtu`
    /// bytes: twice the full-size packets one one-way delay holds at the
    /// rate or at [`UNCAPPED_SIZING`], whichever is higher (the ceiling is
    /// measured with the cap lifted), plus the rate cap's queue in full
    /// packets, plus 1024 for bursts and small packets; between 2048 and
    /// 131 072.
    pub fn line_slots(&self, mtu: u32) -> usize {
        let mtu = f64::from(mtu.max(576));
        let rate = self
            .rate
            .map_or(UNCAPPED_SIZING, |r| r.bits_per_s().max(UNCAPPED_SIZING)) as f64;
        let in_flight = rate / 8.0 * self.one_way().as_secs_f64() / mtu;
        let queue = self.bottleneck().map_or(0.0, |b| b.limit as f64 / mtu);
        ((in_flight.ceil() as usize).saturating_mul(2) + queue.ceil() as usize + 1024).clamp(2048, 131_072)
    }
}

/// The rate a delay line without a cap is sized for: above what one core
/// moves through a TUN device (a faster sender overflows it, counted).
pub const UNCAPPED_SIZING: u64 = 4_000_000_000;

impl fmt::Display for LinkSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if let Some(rtt) = self.rtt {
            parts.push(format!("rtt {}", fmt_duration(rtt)));
        }
        if let Some(loss) = self.loss {
            parts.push(format!("loss {loss}"));
        }
        if let Some(rate) = self.rate {
            parts.push(format!("rate {rate}"));
        }
        if parts.is_empty() {
            f.write_str("no delay, no loss, no rate cap")
        } else {
            f.write_str(&parts.join(", "))
        }
    }
}

/// `50 ms`, `250 µs`, `1.5 s`.
pub fn fmt_duration(d: Duration) -> String {
    let us = d.as_micros();
    if !us.is_multiple_of(1000) && us < 10_000 {
        format!("{us} µs")
    } else if d < Duration::from_secs(10) {
        let ms = d.as_secs_f64() * 1e3;
        if ms.fract() == 0.0 {
            format!("{ms:.0} ms")
        } else {
            format!("{ms:.1} ms")
        }
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

/// The rate cap of one direction: a serializer at `rate` with a drop-tail
/// queue of `limit` bytes in front, as a router's output port. It lives in
/// the delay line (not in a qdisc on the sending host: there, TCP Small
/// Queues throttles a TCP sender to two packets per queue wait whenever
/// another flow fills that queue, which no remote router does).
///
/// `limit` is one bandwidth-delay product at the link's round trip, at
/// least 20 ms of the rate and 64 KiB: a drop-tail bottleneck needs about
/// one BDP of buffer for a single Reno/cubic flow to keep it busy; less
/// makes every TCP look bad, more only adds queueing delay (a full queue
/// doubles the round trip).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bottleneck {
    /// The rate.
    pub rate: Rate,
    /// Queue limit in bytes (IP packets' bytes).
    pub limit: u64,
}

impl Bottleneck {
    fn new(rate: Rate, rtt: Duration) -> Self {
        let bdp_time = rtt.max(Duration::from_millis(20)).as_secs_f64();
        let limit = ((rate.bytes_per_s() * bdp_time).ceil() as u64).max(64 * 1024);
        Bottleneck { rate, limit }
    }
}

impl fmt::Display for Bottleneck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "rate {}, drop-tail queue {} B ({:.1} ms at the rate)",
            self.rate,
            self.limit,
            self.limit as f64 / self.rate.bytes_per_s() * 1e3
        )
    }
}

/// Parses `50ms`, `250us`, `1s`, `0.5s` (a unit is required; at most [`MAX_RTT`]).
fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim().to_ascii_lowercase();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let scale = match unit {
        "us" | "µs" => 1e-6,
        "ms" => 1e-3,
        "s" => 1.0,
        "" => return Err(format!("rtt {text:?} needs a unit: us, ms or s (e.g. rtt=50ms)")),
        other => {
            return Err(format!(
                "unknown time unit {other:?} in {text:?} (use us, ms or s)"
            ))
        }
    };
    let v: f64 = num
        .parse()
        .map_err(|_| format!("rtt {text:?} is not a number with a unit (e.g. 50ms)"))?;
    let secs = v * scale;
    if !secs.is_finite() || secs < 0.0 || secs > MAX_RTT.as_secs_f64() {
        return Err(format!(
            "rtt {text:?} must be between 0 and {}",
            fmt_duration(MAX_RTT)
        ));
    }
    Ok(Duration::from_nanos((secs * 1e9).round() as u64))
}

/// Parses the loss rates of a sweep: `0,1,5,20` or `0%,0.5%,5%` (percent).
pub fn parse_loss_list(text: &str) -> Result<Vec<Loss>, String> {
    let mut out = Vec::new();
    for part in text.split(',') {
        let l = Loss::parse(part, true)?;
        if out.contains(&l) {
            return Err(format!("loss {l} is listed twice in {text:?}"));
        }
        out.push(l);
    }
    Ok(out)
}

/// clap value parser for `--link`.
pub fn parse_link_spec(text: &str) -> Result<LinkSpec, String> {
    LinkSpec::parse(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_spec_and_subsets() {
        let s = LinkSpec::parse("rtt=50ms,loss=1%,rate=500mbit").unwrap();
        assert_eq!(s.rtt, Some(Duration::from_millis(50)));
        assert_eq!(s.loss, Some(Loss(100)));
        assert_eq!(s.rate, Some(Rate(500_000_000)));
        assert_eq!(s.one_way(), Duration::from_millis(25));
        assert_eq!(s.to_string(), "rtt 50 ms, loss 1 %, rate 500 Mbit/s");

        let s = LinkSpec::parse(" rate = 2gbit ").unwrap();
        assert_eq!((s.rtt, s.loss, s.rate), (None, None, Some(Rate(2_000_000_000))));
        assert_eq!(s.one_way(), Duration::ZERO);
        assert_eq!(s.loss(), Loss::NONE);

        let s = LinkSpec::parse("loss=0.25%,RTT=250us").unwrap();
        assert_eq!(s.loss, Some(Loss(25)));
        assert_eq!(s.rtt, Some(Duration::from_micros(250)));
        assert_eq!(s.to_string(), "rtt 250 µs, loss 0.25 %");
        assert_eq!(
            LinkSpec::parse("rtt=1.5s").unwrap().rtt,
            Some(Duration::from_millis(1500))
        );
        assert_eq!(LinkSpec::parse("rate=64kbit").unwrap().rate, Some(Rate(64_000)));
        assert_eq!(LinkSpec::parse("loss=100%").unwrap().loss, Some(Loss::ALL));
    }

    #[test]
    fn bad_specs_say_what_is_wrong() {
        let err = |s: &str| LinkSpec::parse(s).unwrap_err();
        assert!(err("").contains("empty"));
        assert!(err("rtt=50").contains("needs a unit"));
        assert!(err("rtt=50min").contains("unknown time unit"));
        assert!(err("rtt=11s").contains("between"));
        assert!(err("loss=1").contains("needs a % sign"));
        assert!(err("loss=101%").contains("between"));
        assert!(err("loss=0.001%").contains("finer than 0.01%"));
        assert!(err("loss=x%").contains("not a percentage"));
        assert!(err("rate=500").contains("needs a unit"));
        assert!(err("rate=500mb").contains("unknown rate unit"));
        assert!(err("rate=0mbit").contains("between"));
        assert!(err("delay=5ms").contains("unknown link key"));
        assert!(err("rtt=5ms,rtt=6ms").contains("twice"));
        assert!(err("rtt").contains("KEY=VALUE"));
        assert!(err("rtt=5ms,").contains("KEY=VALUE"));
    }

    #[test]
    fn loss_lists() {
        assert_eq!(
            parse_loss_list("0,1,5,20").unwrap(),
            vec![Loss(0), Loss(100), Loss(500), Loss(2000)]
        );
        assert_eq!(parse_loss_list("0.5%, 1%").unwrap(), vec![Loss(50), Loss(100)]);
        assert!(parse_loss_list("1,1%").unwrap_err().contains("twice"));
        assert!(parse_loss_list("1,,2").is_err());
        assert_eq!(Loss(50).to_string(), "0.50 %");
        assert_eq!(Loss(2000).to_string(), "20 %");
    }

    #[test]
    fn bottleneck_queue_sizes() {
        let s = LinkSpec::parse("rtt=50ms,rate=500mbit").unwrap();
        // One BDP of 62.5 MB/s at 50 ms.
        assert_eq!(s.bottleneck().unwrap().limit, 3_125_000);
        // Slow link, no delay: 20 ms of the rate, at least 64 KiB.
        let b = LinkSpec::parse("rate=10mbit").unwrap().bottleneck().unwrap();
        assert_eq!(b.limit, 65_536);
        assert!(LinkSpec::parse("rtt=5ms").unwrap().bottleneck().is_none());
    }

    #[test]
    fn line_slots_cover_a_one_way_delay() {
        // 4 Gbit/s for 25 ms = 8334 full packets: twice that plus headroom;
        // a lower cap adds its queue (3.125 MB = 2084 packets).
        let uncapped = LinkSpec::parse("rtt=50ms").unwrap().line_slots(1500);
        assert_eq!(uncapped, 2 * 8334 + 1024);
        assert_eq!(
            LinkSpec::parse("rtt=50ms,rate=500mbit").unwrap().line_slots(1500),
            uncapped + 2084
        );
        // 10 Gbit/s: 20 834 packets in flight, 41 667 queued.
        let fast = LinkSpec::parse("rtt=50ms,rate=10gbit").unwrap();
        assert_eq!(fast.line_slots(1500), 2 * 20_834 + 41_667 + 1024);
        // No delay: the minimum.
        assert_eq!(LinkSpec::parse("loss=1%").unwrap().line_slots(1500), 2048);
        assert_eq!(LinkSpec::parse("rtt=10s").unwrap().line_slots(1500), 131_072);
    }
}

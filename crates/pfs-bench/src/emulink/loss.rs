//! The loss of one direction, in the kernel: an nftables `netdev` table on
//! the ingress of the receiving side's TUN device — after the delay line,
//! before the IP stack. Every packet there is one wire packet (a TUN device
//! without `IFF_VNET_HDR` never carries a segmentation-offload
//! super-packet), so `numgen random mod 10000 < N drop` drops N in 10 000
//! wire packets. Three named counters: every packet seen, packets longer
//! than the MTU (the proof that none are super-packets: it stays 0), and
//! packets dropped. This module writes the scripts and reads the counters;
//! [`super::EmuLink`] runs `nft`.

use super::spec::Loss;

/// The table's name (one per namespace).
pub const TABLE: &str = "pfslink";

/// The script that creates the table, its counters and the ingress chain on `dev`.
pub fn create_script(dev: &str, mtu: u32, loss: Loss) -> String {
    format!(
        "table netdev {TABLE} {{\n  counter seen {{ }}\n  counter oversize {{ }}\n  counter lost {{ }}\n  \
         chain ingress {{\n    type filter hook ingress device \"{dev}\" priority -500; policy accept;\n  }}\n}}\n{}",
        rules_script(mtu, loss)
    )
}

/// The script that replaces the chain's rules with those for `loss`.
pub fn rules_script(mtu: u32, loss: Loss) -> String {
    let mut s = format!(
        "flush chain netdev {TABLE} ingress\n\
         add rule netdev {TABLE} ingress counter name \"seen\"\n\
         add rule netdev {TABLE} ingress meta length > {mtu} counter name \"oversize\"\n"
    );
    match loss.per_10k() {
        0 => {}
        // numgen's modulus is 10000: its values stop at 9999.
        10_000 => s.push_str(&format!(
            "add rule netdev {TABLE} ingress counter name \"lost\" drop\n"
        )),
        n => s.push_str(&format!(
            "add rule netdev {TABLE} ingress numgen random mod 10000 < {n} counter name \"lost\" drop\n"
        )),
    }
    s
}

/// The counters of one direction's table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct LossCounters {
    /// Packets that reached the receiving device's ingress.
    pub seen: u64,
    /// Of those, packets longer than the MTU.
    pub oversize: u64,
    /// Of those, packets dropped.
    pub lost: u64,
}

impl LossCounters {
    /// The counts since `earlier`.
    pub fn since(&self, earlier: &LossCounters) -> LossCounters {
        LossCounters {
            seen: self.seen.saturating_sub(earlier.seen),
            oversize: self.oversize.saturating_sub(earlier.oversize),
            lost: self.lost.saturating_sub(earlier.lost),
        }
    }

    /// The measured loss, percent of the packets seen.
    pub fn lost_percent(&self) -> f64 {
        if self.seen == 0 {
            0.0
        } else {
            self.lost as f64 * 100.0 / self.seen as f64
        }
    }
}

/// Reads the packet counts from `nft -j list counters table netdev pfslink`.
pub fn parse_counters(json: &str) -> Option<LossCounters> {
    let v: serde_json::Value = serde_json::from_str(json).ok()?;
    let mut out = LossCounters::default();
    let mut found = 0;
    for item in v["nftables"].as_array()? {
        let c = &item["counter"];
        let packets = c["packets"].as_u64();
        match (c["name"].as_str(), packets) {
            (Some("seen"), Some(p)) => out.seen = p,
            (Some("oversize"), Some(p)) => out.oversize = p,
            (Some("lost"), Some(p)) => out.lost = p,
            _ => continue,
        }
        found += 1;
    }
    (found == 3).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scripts() {
        let s = create_script("pfe1-0b", 1500, Loss::from_per_10k(100).unwrap());
        assert!(s.contains("type filter hook ingress device \"pfe1-0b\" priority -500;"));
        assert!(s.contains("meta length > 1500 counter name \"oversize\""));
        assert!(s.contains("numgen random mod 10000 < 100 counter name \"lost\" drop"));
        let none = rules_script(1500, Loss::NONE);
        assert!(!none.contains("drop"), "{none}");
        let all = rules_script(9000, Loss::ALL);
        assert!(all.contains("ingress counter name \"lost\" drop") && !all.contains("numgen"));
        assert!(all.contains("meta length > 9000"));
    }

    #[test]
    fn counters_from_nft_json() {
        let json = r#"{"nftables": [{"metainfo": {"version": "1.0.6"}},
            {"counter": {"family": "netdev", "name": "seen", "table": "pfslink", "handle": 2, "packets": 200, "bytes": 20000}},
            {"counter": {"family": "netdev", "name": "oversize", "table": "pfslink", "handle": 3, "packets": 0, "bytes": 0}},
            {"counter": {"family": "netdev", "name": "lost", "table": "pfslink", "handle": 4, "packets": 20, "bytes": 2000}}]}"#;
        let c = parse_counters(json).unwrap();
        assert_eq!(
            c,
            LossCounters {
                seen: 200,
                oversize: 0,
                lost: 20
            }
        );
        assert_eq!(c.lost_percent(), 10.0);
        assert!(parse_counters("{}").is_none());
        assert!(parse_counters("not json").is_none());
        let later = LossCounters {
            seen: 250,
            oversize: 0,
            lost: 21,
        };
        assert_eq!(
            later.since(&c),
            LossCounters {
                seen: 50,
                oversize: 0,
                lost: 1
            }
        );
    }
}

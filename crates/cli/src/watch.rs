//! `ixora stats --interval`: one line of rates per interval, as `vmstat 1`
//! prints the kernel's. `ixora stats` alone gives totals since the
//! service started; an operator watching a load wants what it does now —
//! the share of socket calls answered in user space under that load
//! above all (NewtOS's Table 2 is a per-load figure).

use std::collections::HashMap;
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// What one `STATS` reply says, summed as the line needs it.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Sample {
    /// The service's uptime, s (the interval is measured on its clock).
    pub uptime: f64,
    /// Per application id: socket calls answered in user space, and
    /// those that entered the kernel.
    pub apps: HashMap<u64, (u64, u64)>,
    /// Sockets open in all applications.
    pub sockets: u64,
    /// Frames the stack took in, and those it sent.
    pub frames_in: u64,
    pub frames_out: u64,
    /// Frames the stack dropped, all reasons.
    pub drops: u64,
    /// TCP connections opened, by a listener or by connect.
    pub opens: u64,
    /// TCP segments retransmitted.
    pub retrans: u64,
}

/// A stack counter of a `STATS` reply, by its Prometheus name (the reply
/// names counters by their description, and leaves out those at 0).
fn stack_counter(v: &serde_json::Value, prom: &str) -> u64 {
    ixora_core::counters::Counters::default()
        .iter()
        .find(|c| c.0 == prom)
        .and_then(|c| v["stack"][c.1].as_u64())
        .unwrap_or(0)
}

impl Sample {
    /// The figures of a `STATS` reply.
    pub fn of(v: &serde_json::Value) -> Sample {
        let mut s = Sample {
            uptime: v["uptime_s"].as_f64().unwrap_or(0.0),
            frames_in: stack_counter(v, "ixora_rx_frames_total"),
            frames_out: stack_counter(v, "ixora_tx_frames_total"),
            drops: v["drops"]
                .as_object()
                .map_or(0, |d| d.values().filter_map(|n| n.as_u64()).sum()),
            opens: stack_counter(v, "ixora_tcp_passive_opens_total")
                + stack_counter(v, "ixora_tcp_active_opens_total"),
            retrans: stack_counter(v, "ixora_tcp_retrans_segs_total"),
            ..Sample::default()
        };
        for app in v["apps"].as_array().into_iter().flatten() {
            let n = |k: &str| app[k].as_u64().unwrap_or(0);
            s.apps
                .insert(n("app"), (n("user_calls"), n("kernel_calls")));
            s.sockets += n("sockets");
        }
        s
    }
}

/// The header of the lines [`line`] prints.
pub const HEADER: &str = "    time  apps sockets    calls/s   user%  kernel/s  frames-in/s frames-out/s  drops/s  opens/s retrans/s";

/// The line for the interval from sample `a` to sample `b` (`None` if
/// the service restarted between them: its clock went back). An
/// application that came meanwhile counts with all its calls; one that
/// left, with none of its last interval's (they went with it).
pub fn line(a: &Sample, b: &Sample, clock: &str) -> Option<String> {
    let dt = b.uptime - a.uptime;
    if dt <= 0.0 {
        return None;
    }
    let (mut user, mut kernel) = (0u64, 0u64);
    for (id, &(u, k)) in &b.apps {
        let (u0, k0) = a.apps.get(id).copied().unwrap_or((0, 0));
        user += u.saturating_sub(u0);
        kernel += k.saturating_sub(k0);
    }
    let rate = |x: u64, y: u64| y.saturating_sub(x) as f64 / dt;
    let share = if user + kernel > 0 {
        format!("{:.2}", user as f64 * 100.0 / (user + kernel) as f64)
    } else {
        "-".to_string()
    };
    Some(format!(
        "{clock:>8} {:>5} {:>7} {:>10.0} {:>7} {:>9.0} {:>12.0} {:>12.0} {:>8.0} {:>8.0} {:>9.0}",
        b.apps.len(),
        b.sockets,
        (user + kernel) as f64 / dt,
        share,
        kernel as f64 / dt,
        rate(a.frames_in, b.frames_in),
        rate(a.frames_out, b.frames_out),
        rate(a.drops, b.drops),
        rate(a.opens, b.opens),
        rate(a.retrans, b.retrans),
    ))
}

/// The wall clock's time of day, UTC, as hh:mm:ss.
fn clock() -> String {
    let s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format!("{:02}:{:02}:{:02}", s / 3600 % 24, s / 60 % 60, s % 60)
}

/// Print a line every `every` (`count` lines, or until interrupted).
pub fn watch(socket: &Path, every: Duration, count: Option<u64>) -> ExitCode {
    let ask = || -> Result<Sample, String> {
        let text = ixora_service::query_stats(socket).map_err(|e| e.to_string())?;
        let v: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| format!("malformed reply: {e}"))?;
        Ok(Sample::of(&v))
    };
    let mut last = match ask() {
        Ok(s) => s,
        Err(e) => return crate::fail("stats", e),
    };
    let mut printed = 0u64;
    let mut next = Instant::now() + every;
    while count.is_none_or(|c| printed < c) {
        if printed.is_multiple_of(20) {
            out!("{HEADER}");
        }
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
        next += every;
        let now = match ask() {
            Ok(s) => s,
            Err(e) => return crate::fail("stats", e),
        };
        match line(&last, &now, &clock()) {
            Some(l) => out!("{l}"),
            None => out!("{:>8} (the service restarted)", clock()),
        }
        last = now;
        printed += 1;
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(uptime: f64, apps: &[(u64, u64, u64, u64)], rx: u64) -> serde_json::Value {
        serde_json::json!({
            "uptime_s": uptime,
            "apps": apps.iter().map(|&(id, u, k, socks)| serde_json::json!({
                "app": id, "user_calls": u, "kernel_calls": k, "sockets": socks,
            })).collect::<Vec<_>>(),
            "stack": {"Frames handed to the stack": rx, "Connections opened from a listener (tcpPassiveOpens)": rx / 10},
            "drops": {"no_socket": 4},
        })
    }

    #[test]
    fn a_sample_reads_the_reply() {
        let s = Sample::of(&reply(2.0, &[(1, 90, 10, 3), (2, 5, 5, 1)], 1000));
        assert_eq!(s.apps[&1], (90, 10));
        assert_eq!(s.sockets, 4);
        assert_eq!(
            (s.frames_in, s.frames_out, s.drops, s.opens),
            (1000, 0, 4, 100)
        );
    }

    #[test]
    fn a_line_gives_the_intervals_rates() {
        let a = Sample::of(&reply(10.0, &[(1, 100, 10, 2), (2, 50, 50, 1)], 1000));
        // Over 2 s: app 1 made 198 more in user space and 2 in the kernel;
        // app 2 left; app 3 came with 100 and 0.
        let b = Sample::of(&reply(12.0, &[(1, 298, 12, 2), (3, 100, 0, 1)], 3000));
        let l = line(&a, &b, "12:00:00").unwrap();
        let f: Vec<&str> = l.split_whitespace().collect();
        assert_eq!(f[0], "12:00:00");
        assert_eq!(f[1..4], ["2", "3", "150"], "{l}");
        assert_eq!(f[4], "99.33", "{l}"); // 298 of 300
        assert_eq!(f[5], "1", "{l}"); // kernel/s
        assert_eq!(f[6], "1000", "{l}"); // frames in/s
        assert_eq!(f[9], "100", "{l}"); // opens/s
        assert_eq!(f.len(), HEADER.split_whitespace().count());
        // A restarted service's clock went back.
        assert_eq!(line(&b, &a, "x"), None);
        // No calls: no share.
        assert_eq!(
            line(
                &a,
                &Sample {
                    uptime: 11.0,
                    ..a.clone()
                },
                "x"
            )
            .unwrap()
            .split_whitespace()
            .nth(4),
            Some("-")
        );
    }
}

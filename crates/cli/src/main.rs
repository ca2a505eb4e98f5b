//! `ixora`: the command-line face of the Ixora dataplane.

use clap::{Args, Parser, Subcommand};
use ixora_core::{CcAlgorithm, Duration};
use ixora_sim::{LinkConfig, Transfer, TransferConfig};
use std::process::ExitCode;

/// Ixora — a userspace TCP/IP dataplane.
///
/// Subcommands run the protocol core in a simulated network today; the
/// dataplane, the POSIX-socket service and the benchmarks follow.
#[derive(Parser)]
#[command(name = "ixora", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Transfer data both ways between two TCP stacks over a simulated,
    /// lossy link in virtual time, verify every byte, and print one JSON
    /// line.
    ///
    /// The run is deterministic: the same options and seed give the same
    /// result, bit for bit. Exit status is 0 when both directions arrived
    /// intact and the connection closed cleanly, 1 otherwise, 2 on bad
    /// options.
    ///
    /// Example: ixora sim --bytes 16MiB --loss 0.05 --reorder 0.05 --seed 7
    Sim(SimArgs),
}

#[derive(Args)]
struct SimArgs {
    /// Bytes each side sends (suffixes: k, KiB, M, MiB, G, GiB).
    #[arg(long, default_value = "16MiB", value_parser = parse_size)]
    bytes: usize,
    /// Probability that the link drops a frame (0 to 1).
    #[arg(long, default_value_t = 0.0, value_parser = parse_prob)]
    loss: f64,
    /// Probability that a frame is held back and overtaken (0 to 1).
    #[arg(long, default_value_t = 0.0, value_parser = parse_prob)]
    reorder: f64,
    /// Probability that a frame is delivered twice (0 to 1).
    #[arg(long, default_value_t = 0.0, value_parser = parse_prob)]
    duplicate: f64,
    /// Probability that one bit of a frame is flipped (0 to 1); checksums
    /// must catch it.
    #[arg(long, default_value_t = 0.0, value_parser = parse_prob)]
    corrupt: f64,
    /// Seed of the link's random choices and of the data.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Congestion control of both stacks.
    #[arg(long, default_value = "cubic", value_parser = parse_cc)]
    cc: CcAlgorithm,
    /// Link rate in Mbit/s (0: unlimited).
    #[arg(long, default_value_t = 1000)]
    rate_mbps: u64,
    /// One-way link delay in microseconds.
    #[arg(long, default_value_t = 500)]
    delay_us: u64,
    /// Link queue in bytes before tail drop (0: unlimited).
    #[arg(long, default_value = "256KiB", value_parser = parse_size)]
    queue: usize,
    /// Give up after this many seconds of virtual time.
    #[arg(long, default_value_t = 3600)]
    time_limit_s: u64,
}

fn parse_size(s: &str) -> Result<usize, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: usize = num
        .parse()
        .map_err(|_| format!("{s:?} is not a size (e.g. 16MiB, 100k, 4096)"))?;
    let mult: usize = match unit.trim() {
        "" | "B" => 1,
        "k" | "K" | "kB" | "KB" => 1000,
        "KiB" | "Ki" => 1 << 10,
        "M" | "MB" => 1_000_000,
        "MiB" | "Mi" => 1 << 20,
        "G" | "GB" => 1_000_000_000,
        "GiB" | "Gi" => 1 << 30,
        u => {
            return Err(format!(
                "unknown size unit {u:?} (use k, KiB, M, MiB, G, GiB)"
            ))
        }
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("{s:?} is too large"))
}

fn parse_prob(s: &str) -> Result<f64, String> {
    let p: f64 = s.parse().map_err(|_| format!("{s:?} is not a number"))?;
    if (0.0..=1.0).contains(&p) {
        Ok(p)
    } else {
        Err(format!("{p} is not a probability between 0 and 1"))
    }
}

fn parse_cc(s: &str) -> Result<CcAlgorithm, String> {
    s.parse()
}

fn sim(a: SimArgs) -> ExitCode {
    let cfg = TransferConfig {
        bytes: a.bytes,
        seed: a.seed,
        cc: a.cc,
        link: LinkConfig {
            delay: Duration::from_micros(a.delay_us),
            rate_bps: a.rate_mbps.saturating_mul(1_000_000),
            queue_bytes: a.queue,
            loss: a.loss,
            duplicate: a.duplicate,
            reorder: a.reorder,
            corrupt: a.corrupt,
            ..LinkConfig::default()
        },
        time_limit: Duration::from_secs(a.time_limit_s),
        ..TransferConfig::default()
    };
    let start = std::time::Instant::now();
    let mut report = Transfer::new(cfg).run();
    report.wall_ms = start.elapsed().as_secs_f64() * 1e3;
    match serde_json::to_string(&report) {
        Ok(s) => println!("{s}"),
        Err(e) => {
            eprintln!("ixora sim: cannot encode the report: {e}");
            return ExitCode::FAILURE;
        }
    }
    if report.intact && report.clean_close {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Sim(a) => sim(a),
    }
}

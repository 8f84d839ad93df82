//! Bulk transfer over the QUIC transport against plain TCP, both on loopback, in one run.
//!
//! Two ranks in this process (each with its own QUIC endpoint and network threads) move
//! `--mib` MiB in messages of `--message-mib` MiB from rank 1 to rank 0; then a TCP
//! connection on 127.0.0.1 moves the same bytes in the same chunks. Prints one JSON line:
//!
//! ```text
//! cargo run --release -p strads-ap-examples --bin netbench -- --mib 512 --reps 3
//! {"bench":"transport","mib":512,"quic_mib_per_s":..,"tcp_mib_per_s":..,"quic_vs_tcp":..}
//! ```
//!
//! With `--ping N` it measures latency instead: N round trips of an 8-byte message (rank
//! 0 sends, rank 1 answers), over QUIC and over TCP without Nagle's delay, and prints the
//! median and 90th percentile round trip of each in microseconds. Every collective of a
//! job of several ranks (a loop call's entry, an exchange, a reduction) waits for at least
//! one such round trip.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{ensure, Result};
use clap::Parser;
use strads_ap::internals::transport::{deadline_in, Bytes, QuicOptions, QuicTransport, Transport};

#[derive(Parser)]
#[command(about = "QUIC transport vs TCP bulk transfer on loopback")]
struct Args {
    /// MiB moved per repetition.
    #[arg(long, default_value_t = 256)]
    mib: usize,
    /// MiB per message.
    #[arg(long, default_value_t = 4)]
    message_mib: usize,
    /// Repetitions (the median is reported).
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Measure only this side (for profiling): `quic` or `tcp`.
    #[arg(long, value_parser = ["quic", "tcp"])]
    only: Option<String>,
    /// Measure the round trip of N small messages instead of bulk transfer.
    #[arg(long, value_name = "N")]
    ping: Option<usize>,
}

/// Round trips of 8-byte messages over QUIC, in seconds.
fn quic_pings(n: usize) -> Result<Vec<f64>> {
    let addr = UdpSocket::bind("127.0.0.1:0")?.local_addr()?;
    let secret = b"netbench secret 0123456789";
    let answerer = thread::spawn(move || -> Result<()> {
        let t = QuicTransport::start(QuicOptions::new(1, 2, "netbench", secret, addr))?;
        let deadline = deadline_in(Duration::from_secs(120));
        for _ in 0..n {
            let m = t.recv(0, 1, deadline)?;
            t.send(0, 1, m.to_vec())?;
        }
        t.recv(0, 2, deadline)?;
        t.shutdown(Duration::from_secs(30))?;
        Ok(())
    });
    let t = QuicTransport::start(QuicOptions::new(0, 2, "netbench", secret, addr))?;
    let deadline = deadline_in(Duration::from_secs(120));
    let mut times = Vec::with_capacity(n);
    for i in 0..n {
        let start = Instant::now();
        t.send(1, 1, (i as u64).to_le_bytes().to_vec())?;
        t.recv(1, 1, deadline)?;
        times.push(start.elapsed().as_secs_f64());
    }
    t.send(1, 2, Vec::new())?;
    t.shutdown(Duration::from_secs(30))?;
    answerer.join().expect("answering thread")?;
    Ok(times)
}

/// Round trips of 8-byte messages over TCP (no Nagle's delay), in seconds.
fn tcp_pings(n: usize) -> Result<Vec<f64>> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let answerer = thread::spawn(move || -> Result<()> {
        let mut s = TcpStream::connect(addr)?;
        s.set_nodelay(true)?;
        let mut m = [0u8; 8];
        for _ in 0..n {
            s.read_exact(&mut m)?;
            s.write_all(&m)?;
        }
        Ok(())
    });
    let (mut s, _) = listener.accept()?;
    s.set_nodelay(true)?;
    let mut times = Vec::with_capacity(n);
    let mut m = [0u8; 8];
    for i in 0..n {
        let start = Instant::now();
        s.write_all(&(i as u64).to_le_bytes())?;
        s.read_exact(&mut m)?;
        times.push(start.elapsed().as_secs_f64());
    }
    answerer.join().expect("answering thread")?;
    Ok(times)
}

/// The `q`-quantile of `v`, in microseconds.
fn micros(v: &mut [f64], q: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() - 1) as f64 * q) as usize] * 1e6
}

fn ping(n: usize) -> Result<()> {
    ensure!(n >= 1, "--ping needs at least one round trip");
    let (mut quic, mut tcp) = (quic_pings(n)?, tcp_pings(n)?);
    println!(
        "{}",
        serde_json::json!({
            "bench": "latency",
            "pings": n,
            "quic_median_us": micros(&mut quic, 0.5),
            "quic_p90_us": micros(&mut quic, 0.9),
            "tcp_median_us": micros(&mut tcp, 0.5),
            "tcp_p90_us": micros(&mut tcp, 0.9),
        })
    );
    Ok(())
}

fn quic_once(total: usize, chunk: usize) -> Result<f64> {
    let addr = UdpSocket::bind("127.0.0.1:0")?.local_addr()?;
    let secret = b"netbench secret 0123456789";
    let sender = thread::spawn(move || -> Result<()> {
        let t = QuicTransport::start(QuicOptions::new(1, 2, "netbench", secret, addr))?;
        // One buffer sent again and again (`send_shared` copies nothing), as TCP below
        // writes one buffer again and again.
        let msg = Bytes::from(vec![7u8; chunk]);
        t.recv(0, 3, deadline_in(Duration::from_secs(120)))?;
        for _ in 0..total / chunk {
            t.send_shared(0, 1, msg.clone())?;
        }
        t.recv(0, 2, deadline_in(Duration::from_secs(120)))?;
        t.shutdown(Duration::from_secs(30))?;
        Ok(())
    });
    let t = QuicTransport::start(QuicOptions::new(0, 2, "netbench", secret, addr))?;
    let deadline = deadline_in(Duration::from_secs(120));
    // The clock runs from "go" to the last byte, as for TCP below.
    let start = Instant::now();
    t.send(1, 3, Vec::new())?;
    let mut got = 0;
    while got < total {
        got += t.recv(1, 1, deadline)?.len();
    }
    let secs = start.elapsed().as_secs_f64();
    t.send(1, 2, Vec::new())?;
    t.shutdown(Duration::from_secs(30))?;
    sender.join().expect("sender thread")?;
    Ok(total as f64 / secs / (1 << 20) as f64)
}

fn tcp_once(total: usize, chunk: usize) -> Result<f64> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let sender = thread::spawn(move || -> Result<()> {
        let mut s = TcpStream::connect(addr)?;
        // One buffer, shared by every send, as on the QUIC side.
        let msg = Bytes::from(vec![7u8; chunk]);
        s.read_exact(&mut [0u8; 1])?;
        for _ in 0..total / chunk {
            let m = msg.clone();
            s.write_all(&(m.len() as u32).to_le_bytes())?;
            s.write_all(&m)?;
        }
        s.flush()?;
        Ok(())
    });
    let (mut s, _) = listener.accept()?;
    let mut len = [0u8; 4];
    let start = Instant::now();
    s.write_all(&[1])?;
    let mut got = 0;
    while got < total {
        s.read_exact(&mut len)?;
        // A fresh buffer per message, as the transport hands out owned messages.
        let mut m = vec![0u8; u32::from_le_bytes(len) as usize];
        s.read_exact(&mut m)?;
        got += m.len();
    }
    let secs = start.elapsed().as_secs_f64();
    sender.join().expect("sender thread")?;
    Ok(total as f64 / secs / (1 << 20) as f64)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() -> Result<()> {
    let args = Args::parse();
    if let Some(n) = args.ping {
        return ping(n);
    }
    ensure!(
        args.mib >= 2 * args.message_mib && args.message_mib >= 1,
        "need --mib >= 2 x --message-mib >= 2"
    );
    ensure!(args.reps >= 1, "--reps must be at least 1");
    let (total, chunk) = (args.mib << 20, args.message_mib << 20);
    let (mut quic, mut tcp) = (Vec::new(), Vec::new());
    for rep in 1..=args.reps {
        let only = args.only.as_deref();
        let q = if only == Some("tcp") {
            f64::NAN
        } else {
            quic_once(total, chunk)?
        };
        let t = if only == Some("quic") {
            f64::NAN
        } else {
            tcp_once(total, chunk)?
        };
        eprintln!("netbench rep {rep}: QUIC {q:.0} MiB/s, TCP {t:.0} MiB/s");
        quic.push(q);
        tcp.push(t);
    }
    let (q, t) = (median(quic), median(tcp));
    println!(
        "{}",
        serde_json::json!({
            "bench": "transport",
            "mib": args.mib,
            "message_mib": args.message_mib,
            "reps": args.reps,
            "quic_mib_per_s": q,
            "tcp_mib_per_s": t,
            "quic_vs_tcp": q / t,
        })
    );
    Ok(())
}

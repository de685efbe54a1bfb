// The fleet_node program, shared by the `fleet_node` binary and example (see either's docs).

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cellgate_redis::Fleet;

struct Args {
    redis: String,
    name: String,
    stock: Option<u64>,
    rate: Option<(u32, Duration)>,
    burst: Option<u64>,
    seconds: Duration,
    threads: usize,
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        redis: String::new(),
        name: String::new(),
        stock: None,
        rate: None,
        burst: None,
        seconds: Duration::ZERO,
        threads: 1,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let bad = |what: &str| format!("{flag} {value:?}: {what}");
        match flag.as_str() {
            "--redis" => a.redis = value,
            "--name" => a.name = value,
            "--stock" => a.stock = Some(value.parse().map_err(|_| bad("not a count"))?),
            "--rate" => {
                let (c, s) = value.split_once('/').ok_or_else(|| bad("want COUNT/SECONDS"))?;
                let count = c.parse().map_err(|_| bad("bad count"))?;
                let secs: f64 = s.parse().map_err(|_| bad("bad seconds"))?;
                let period = Duration::try_from_secs_f64(secs).map_err(|_| bad("bad seconds"))?;
                a.rate = Some((count, period));
            }
            "--burst" => a.burst = Some(value.parse().map_err(|_| bad("not a count"))?),
            "--seconds" => {
                let s: f64 = value.parse().map_err(|_| bad("not a number"))?;
                a.seconds = Duration::try_from_secs_f64(s).map_err(|_| bad("not a duration"))?;
            }
            "--threads" => a.threads = value.parse().map_err(|_| bad("not a count"))?,
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    if a.redis.is_empty() || a.name.is_empty() {
        return Err("--redis and --name are required".into());
    }
    if a.stock.is_some() == a.rate.is_some() {
        return Err("give exactly one of --stock and --rate".into());
    }
    if a.threads == 0 {
        return Err("--threads must be at least 1".into());
    }
    Ok(a)
}

fn main() -> ExitCode {
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("fleet_node: {e}");
            return ExitCode::from(2);
        }
    };
    let builder = match (args.stock, args.rate) {
        (Some(units), _) => Fleet::stock(&args.name, units),
        (_, Some((count, period))) => {
            let b = Fleet::rate(&args.name, count, period);
            match args.burst {
                Some(burst) => b.burst(burst),
                None => b,
            }
        }
        _ => unreachable!("checked by parse"),
    };
    let fleet = match builder.connect(&args.redis) {
        Ok(f) => Arc::new(f),
        Err(e) => {
            eprintln!("fleet_node: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("ready");
    let stop = Arc::new(AtomicBool::new(false));
    let counts: Vec<Arc<AtomicU64>> = (0..args.threads).map(|_| Arc::default()).collect();
    let workers: Vec<_> = counts
        .iter()
        .map(|count| {
            let (fleet, stop, count) = (fleet.clone(), stop.clone(), count.clone());
            std::thread::spawn(move || {
                // Relaxed: the counter is read only for its value; the join orders the last one.
                while !stop.load(Ordering::Relaxed) {
                    let mut denied = false;
                    for _ in 0..64 {
                        if fleet.check().is_allowed() {
                            count.fetch_add(1, Ordering::Relaxed);
                        } else {
                            denied = true;
                        }
                    }
                    // A denial means the lease ran dry: let the background thread (which is
                    // fetching the next one) have the core rather than spin against it.
                    if denied {
                        std::thread::yield_now();
                    }
                }
            })
        })
        .collect();
    let total = || counts.iter().map(|c| c.load(Ordering::Relaxed)).sum::<u64>();
    let end = Instant::now() + args.seconds;
    loop {
        let now = Instant::now();
        if now >= end {
            break;
        }
        std::thread::sleep((end - now).min(Duration::from_millis(100)));
        println!("admitted {}", total());
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        let _ = w.join();
    }
    let state = fleet.state();
    fleet.shutdown();
    println!("admitted {}", total());
    let s = fleet.stats();
    eprintln!(
        "fleet_node: state {state:?} commands {} lease_requests {} errors {} charged_back {} live {}",
        s.commands,
        s.lease_requests,
        s.backend_errors,
        s.charged_back,
        s.live
    );
    if let Some(e) = fleet.last_error() {
        eprintln!("fleet_node: last error: {}", e.error);
    }
    ExitCode::SUCCESS
}

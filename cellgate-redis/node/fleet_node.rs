// The fleet_node program, shared by the `fleet_node` binary and example (see either's docs).

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cellgate_redis::{Fleet, FleetState};

const USAGE: &str = "\
fleet_node: one process of a fleet sharing one limit through Redis. It checks the limit as fast
as --threads threads can for --seconds and prints `ready`, then `admitted N` (this process's
running total) every 100 ms and once more at the end. On stderr: each change of the limiter's
state when it happens, with its cause, and its counters at exit.

USAGE: fleet_node --redis URL --name NAME (--stock UNITS | --rate COUNT/SECONDS [--burst B])
                  [--seconds S] [--threads T]

  --redis URL            redis://host:port, rediss://... (feature tls), or the comma-separated
                         seed URLs of a Redis Cluster
  --name NAME            the limit's name (every process with the same name shares it)
  --stock UNITS          a stock: across the fleet at most UNITS are admitted, ever
  --rate COUNT/SECONDS   a rate: COUNT per SECONDS across the fleet
  --burst B              the rate's burst                        [default: COUNT]
  --seconds S            how long to check, fractions allowed    [default: 0]
  --threads T            checking threads                        [default: 1]
  --help                 print this and exit";

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
        if flag == "--help" || flag == "-h" {
            println!("{USAGE}");
            std::process::exit(0);
        }
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
            eprintln!("fleet_node: {e}\n\n{USAGE}");
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
    // A limiter connects connected: any other state is a change worth telling at once.
    let mut state = FleetState::Connected;
    loop {
        state = tell_change(&fleet, state);
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
    // An error Redis has recovered from since is history, told when it happened.
    if let Some(e) = fleet.last_error().filter(|_| state != FleetState::Connected) {
        eprintln!("fleet_node: last error: {}", e.error);
    }
    ExitCode::SUCCESS
}

/// Prints on stderr a change of the limiter's state since `was`, with its cause (the last
/// error when it left `Connected`); returns the state now.
fn tell_change(fleet: &Fleet, was: FleetState) -> FleetState {
    let now = fleet.state();
    if now != was {
        let cause = match (now, fleet.last_error()) {
            (FleetState::Connected, _) => "Redis answers again".to_owned(),
            (_, Some(e)) => e.error.to_string(),
            (_, None) => "no error recorded".to_owned(),
        };
        eprintln!("fleet_node: now {now:?} (was {was:?}): {cause}");
    }
    now
}
